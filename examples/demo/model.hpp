// The demo's model: softmax regression (hidden = 0) or a one-hidden-layer ReLU MLP, trained with
// SGD + momentum on the CPU. Plain float loops over contiguous rows, written so the compiler
// vectorises the inner loop (row of the weight matrix times one input value).
#pragma once

#include <sluice/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace demo {

class model {
 public:
  model(std::size_t inputs, std::size_t hidden, std::size_t outputs, std::uint64_t seed)
      : in_(inputs), hid_(hidden), out_(outputs) {
    const std::size_t first_out = hid_ ? hid_ : out_;
    w1_ = init(in_ * first_out, in_, seed, 1);
    b1_.assign(first_out, 0.f);
    if (hid_) {
      w2_ = init(hid_ * out_, hid_, seed, 2);
      b2_.assign(out_, 0.f);
    }
    v_w1_.assign(w1_.size(), 0.f); v_b1_.assign(b1_.size(), 0.f);
    v_w2_.assign(w2_.size(), 0.f); v_b2_.assign(b2_.size(), 0.f);
  }

  [[nodiscard]] std::size_t outputs() const noexcept { return out_; }
  [[nodiscard]] std::size_t hidden() const noexcept { return hid_; }

  // Forward pass: logits -> probabilities in probs_ (B x out). Returns mean cross-entropy over
  // samples with a label in range (labels may be null: no loss).
  float forward(const float* x, std::size_t batch, const std::int64_t* labels) {
    ensure(batch);
    if (hid_) {
      dense(x, batch, in_, w1_.data(), b1_.data(), hid_, h_.data());
      for (std::size_t i = 0; i < batch * hid_; ++i) h_[i] = std::max(h_[i], 0.f);
      dense(h_.data(), batch, hid_, w2_.data(), b2_.data(), out_, p_.data());
    } else {
      dense(x, batch, in_, w1_.data(), b1_.data(), out_, p_.data());
    }
    double loss = 0;
    if (labels) sample_loss_.resize(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      float* z = p_.data() + b * out_;
      const float m = *std::max_element(z, z + out_);
      float s = 0;
      for (std::size_t k = 0; k < out_; ++k) { z[k] = std::exp(z[k] - m); s += z[k]; }
      for (std::size_t k = 0; k < out_; ++k) z[k] /= s;
      if (labels) {
        sample_loss_[b] = -std::log(std::max(z[labels[b]], 1e-12f));
        loss += sample_loss_[b];
      }
    }
    return static_cast<float>(loss / static_cast<double>(batch));
  }
  [[nodiscard]] std::span<const float> probabilities(std::size_t batch) const { return {p_.data(), batch * out_}; }
  // Each sample's cross-entropy in the batch last passed to forward() with labels (what a
  // loss-aware sampler is fed back).
  [[nodiscard]] std::span<const float> sample_losses() const { return sample_loss_; }

  // Gradient of the mean cross-entropy for the batch last passed to forward(); written to
  // g_w1_.. (kept for the gradient-noise-scale measurement). Returns its squared norm.
  double backward(const float* x, std::size_t batch, const std::int64_t* labels) {
    const float inv = 1.0f / static_cast<float>(batch);
    for (std::size_t b = 0; b < batch; ++b) {  // dlogits = (p - onehot) / B, in place in d_
      for (std::size_t k = 0; k < out_; ++k) d_[b * out_ + k] = p_[b * out_ + k] * inv;
      d_[b * out_ + static_cast<std::size_t>(labels[b])] -= inv;
    }
    g_w1_.assign(w1_.size(), 0.f); g_b1_.assign(b1_.size(), 0.f);
    g_w2_.assign(w2_.size(), 0.f); g_b2_.assign(b2_.size(), 0.f);
    if (hid_) {
      outer(h_.data(), batch, hid_, d_.data(), out_, g_w2_.data(), g_b2_.data());
      for (std::size_t b = 0; b < batch; ++b) {  // dh = d W2^T, masked by ReLU
        for (std::size_t j = 0; j < hid_; ++j) {
          float s = 0;
          const float* w = w2_.data() + j * out_;
          for (std::size_t k = 0; k < out_; ++k) s += w[k] * d_[b * out_ + k];
          dh_[b * hid_ + j] = h_[b * hid_ + j] > 0 ? s : 0.f;
        }
      }
      outer(x, batch, in_, dh_.data(), hid_, g_w1_.data(), g_b1_.data());
    } else {
      outer(x, batch, in_, d_.data(), out_, g_w1_.data(), g_b1_.data());
    }
    double n = 0;
    for (auto* g : {&g_w1_, &g_b1_, &g_w2_, &g_b2_})
      for (float v : *g) n += static_cast<double>(v) * v;
    return n;
  }

  void sgd_step(float lr, float momentum, float weight_decay) {
    update(w1_, v_w1_, g_w1_, lr, momentum, weight_decay);
    update(b1_, v_b1_, g_b1_, lr, momentum, 0);
    update(w2_, v_w2_, g_w2_, lr, momentum, weight_decay);
    update(b2_, v_b2_, g_b2_, lr, momentum, 0);
  }

  // One training step; returns the batch loss.
  float train_step(const float* x, std::size_t batch, const std::int64_t* labels, float lr, float momentum,
                   float weight_decay) {
    const float loss = forward(x, batch, labels);
    backward(x, batch, labels);
    sgd_step(lr, momentum, weight_decay);
    return loss;
  }

 private:
  static std::vector<float> init(std::size_t n, std::size_t fan_in, std::uint64_t seed, std::uint64_t layer) {
    std::vector<float> w(n);
    const double sd = std::sqrt(2.0 / static_cast<double>(fan_in));
    for (std::size_t i = 0; i < n; ++i) {
      sluice::counter_rng r(seed, 77 + layer, i);
      const double u1 = r.uniform() + 1e-12, u2 = r.uniform();
      w[i] = static_cast<float>(sd * std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    return w;
  }
  void ensure(std::size_t batch) {
    if (cap_ >= batch) return;
    cap_ = batch;
    h_.resize(batch * hid_); dh_.resize(batch * hid_);
    p_.resize(batch * out_); d_.resize(batch * out_);
  }
  // y[b, :] = b + sum_k x[b, k] W[k, :]
  static void dense(const float* __restrict x, std::size_t batch, std::size_t k_in, const float* __restrict w,
                    const float* __restrict bias, std::size_t n, float* __restrict y) {
    for (std::size_t b = 0; b < batch; ++b) {
      float* __restrict yr = y + b * n;
      for (std::size_t j = 0; j < n; ++j) yr[j] = bias[j];
      const float* xr = x + b * k_in;
      for (std::size_t k = 0; k < k_in; ++k) {
        const float xv = xr[k];
        if (xv == 0.f) continue;
        const float* __restrict wr = w + k * n;
        for (std::size_t j = 0; j < n; ++j) yr[j] += xv * wr[j];
      }
    }
  }
  // G[k, :] += sum_b x[b, k] d[b, :]; gb += sum_b d[b, :]
  static void outer(const float* __restrict x, std::size_t batch, std::size_t k_in, const float* __restrict d,
                    std::size_t n, float* __restrict g, float* __restrict gb) {
    for (std::size_t b = 0; b < batch; ++b) {
      const float* dr = d + b * n;
      for (std::size_t j = 0; j < n; ++j) gb[j] += dr[j];
      const float* xr = x + b * k_in;
      for (std::size_t k = 0; k < k_in; ++k) {
        const float xv = xr[k];
        if (xv == 0.f) continue;
        float* __restrict gr = g + k * n;
        for (std::size_t j = 0; j < n; ++j) gr[j] += xv * dr[j];
      }
    }
  }
  static void update(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g, float lr,
                     float mom, float wd) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      v[i] = mom * v[i] + g[i] + wd * w[i];
      w[i] -= lr * v[i];
    }
  }

  std::size_t in_, hid_, out_, cap_ = 0;
  std::vector<float> w1_, b1_, w2_, b2_;
  std::vector<float> v_w1_, v_b1_, v_w2_, v_b2_;
  std::vector<float> g_w1_, g_b1_, g_w2_, g_b2_;
  std::vector<float> h_, dh_, p_, d_;
  std::vector<float> sample_loss_;
};

}  // namespace demo
