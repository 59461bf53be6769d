// sluice/diag/noise_scale.hpp — the gradient noise scale: does a larger batch still pay?
//
// McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training" (2018). The
// simple noise scale B_simple = tr(Sigma) / |G|^2 (Sigma: per-example gradient covariance, G: true
// gradient) predicts the batch size beyond which doubling the batch no longer halves the number of
// optimisation steps: steps(B) ~ S_min (1 + B_noise / B). Appendix A estimates both terms without
// per-example gradients, from the squared norm of minibatch gradients at two batch sizes
// B_small < B_big (E|G_B|^2 = |G|^2 + tr(Sigma) / B):
//   |G|^2     ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)     (unbiased)
//   tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)          (unbiased)
// Each single estimate is very noisy; the paper averages |G|^2 and tr(Sigma) separately over many
// measurements (here: a plain mean, or an exponential moving average) and only then divides.
//
//   sluice::diag::noise_scale_estimator ns{{.b_small = 32, .b_big = 512}};
//   ns.add(sq_norm_small, sq_norm_big);        // once per measurement (e.g. every N steps)
//   auto v = ns.verdict(256);                   // v.b_simple, v.larger_batch_pays, v.message
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace sluice::diag {

struct noise_scale_options {
  double b_small = 0;
  double b_big = 0;
  double ema = 0;  // 0: plain mean over all measurements; in (0, 1): weight of the newest one
};

struct noise_scale_verdict {
  double b_simple = 0;           // tr(Sigma) / |G|^2; NaN until the estimate is usable
  double grad_sq_norm = 0;       // |G|^2 estimate
  double trace_sigma = 0;        // tr(Sigma) estimate
  std::uint64_t measurements = 0;
  double step_reduction_if_doubled = 0;  // steps(B) / steps(2B): 2 = perfect scaling, 1 = none
  bool larger_batch_pays = false;        // current batch below B_simple
  std::string message;
};

// Unbiased |G|^2 and tr(Sigma) from one pair of measurements.
struct noise_scale_terms {
  double grad_sq_norm;
  double trace_sigma;
};
[[nodiscard]] inline noise_scale_terms noise_scale_estimate(double b_small, double sq_small,
                                                            double b_big, double sq_big) noexcept {
  return {(b_big * sq_big - b_small * sq_small) / (b_big - b_small),
          (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)};
}

class noise_scale_estimator {
 public:
  explicit noise_scale_estimator(noise_scale_options opt) : opt_(opt) {}

  void add(double sq_norm_small, double sq_norm_big) {
    const auto t = noise_scale_estimate(opt_.b_small, sq_norm_small, opt_.b_big, sq_norm_big);
    ++n_;
    // Running mean; with an EMA, the newest measurement's weight never falls below `ema`.
    double w = 1.0 / static_cast<double>(n_);
    if (opt_.ema > 0) w = std::max(w, opt_.ema);
    g_ += w * (t.grad_sq_norm - g_);
    s_ += w * (t.trace_sigma - s_);
  }

  [[nodiscard]] double b_simple() const noexcept {
    if (n_ == 0 || !(g_ > 0) || !(s_ > 0)) return std::nan("");
    return s_ / g_;
  }

  [[nodiscard]] noise_scale_verdict verdict(double current_batch) const {
    noise_scale_verdict v;
    v.b_simple = b_simple();
    v.grad_sq_norm = g_;
    v.trace_sigma = s_;
    v.measurements = n_;
    if (std::isnan(v.b_simple)) {
      v.message = n_ == 0 ? "no measurement yet"
                          : "estimate not usable yet (|G|^2 or tr(Sigma) estimated <= 0 after " +
                                std::to_string(n_) + " measurements: average more of them)";
      return v;
    }
    const double b = current_batch;
    v.step_reduction_if_doubled = (1 + v.b_simple / b) / (1 + v.b_simple / (2 * b));
    v.larger_batch_pays = b < v.b_simple;
    v.message = "B_simple = " + fmt(v.b_simple) + " (tr(Sigma) = " + fmt(s_) + ", |G|^2 = " + fmt(g_) +
                ", " + std::to_string(n_) + " measurements); at batch " + fmt(b) +
                ", doubling it cuts the steps by x" + fmt(v.step_reduction_if_doubled) +
                (v.larger_batch_pays ? ": a larger batch still pays"
                                     : ": past the noise scale, a larger batch mostly costs compute");
    return v;
  }

 private:
  static std::string fmt(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", x);
    return buf;
  }
  noise_scale_options opt_;
  std::uint64_t n_ = 0;
  double g_ = 0, s_ = 0;
};

}  // namespace sluice::diag
