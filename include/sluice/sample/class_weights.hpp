// sluice/sample/class_weights.hpp — per-class sampling weights from per-class counts, for long-tailed label sets.
//
// Convention (the one every rule below follows): a rule maps a class's sample count n to the weight of ONE sample of
// that class. The class's share of the draws, its "mass", is then n * weight. So the rules read as:
//   inverse_frequency       weight 1/n              mass 1 for every class (class-balanced)
//   inverse_log             weight 1/log(1+n)       mass n/log(1+n): rare classes up, softly
//   effective_number{beta}  weight 1/E_n, E_n = (1-beta^n)/(1-beta)   (Cui et al., CVPR 2019)
//                           beta -> 0: mass n (as the data); beta -> 1: mass 1 (balanced)
//   power{q}                weight n^(q-1)          mass n^q: q=1 instance-balanced (as the data),
//                           q=1/2 square-root, q=0 class-balanced
//   power_schedule          power{q(epoch)} with q moving linearly from q_first to q_last over `epochs` epochs,
//                           then held: instance-balanced first, balanced later (Kang et al., ICLR 2020, done on q)
// A class with n = 0 gets weight 0 (it has no samples to draw). Every rule (namespace sluice::sample) is a small value
// type with `double weight(std::uint64_t n, std::uint64_t epoch)`; `epoch_dependent` says whether samplers must rebuild
// their tables each epoch; `fingerprint()` (optional for a user's rule, see rule_fingerprint) hashes its name and
// parameters for loader.resume's check. Which rule the advisor recommends: docs/advisor.md.
//
//   auto counts = sluice::sample::count_labels(labels);          // per-class counts
//   auto w = sluice::sample::class_weights(counts, sluice::sample::effective_number{0.999});
//   // w[c] is the weight of each sample of class c; mass c = counts[c] * w[c]
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/core/state.hpp"

namespace sluice::sample {

struct inverse_frequency {
  static constexpr bool epoch_dependent = false;
  [[nodiscard]] double weight(std::uint64_t n, std::uint64_t = 0) const noexcept {
    return n == 0 ? 0.0 : 1.0 / static_cast<double>(n);
  }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_hash{}.add("inverse_frequency").value(); }
};

struct inverse_log {
  static constexpr bool epoch_dependent = false;
  [[nodiscard]] double weight(std::uint64_t n, std::uint64_t = 0) const noexcept {
    return n == 0 ? 0.0 : 1.0 / std::log1p(static_cast<double>(n));
  }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_hash{}.add("inverse_log").value(); }
};

struct effective_number {
  static constexpr bool epoch_dependent = false;
  double beta = 0.999;  // in [0, 1)
  [[nodiscard]] double weight(std::uint64_t n, std::uint64_t = 0) const {
    if (!(beta >= 0.0 && beta < 1.0))
      throw usage_error("sluice: effective_number needs 0 <= beta < 1, got " + std::to_string(beta));
    if (n == 0) return 0.0;
    // E_n = (1 - beta^n) / (1 - beta), computed as -expm1(n log beta) / (1 - beta) so that
    // beta close to 1 and large n keep their precision.
    const double e_n = beta == 0.0 ? 1.0
                                   : -std::expm1(static_cast<double>(n) * std::log(beta)) / (1.0 - beta);
    return 1.0 / e_n;
  }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept {
    return fingerprint_hash{}.add("effective_number").add(beta).value();
  }
};

struct power {
  static constexpr bool epoch_dependent = false;
  double q = 0.5;  // class mass proportional to n^q
  [[nodiscard]] double weight(std::uint64_t n, std::uint64_t = 0) const noexcept {
    return n == 0 ? 0.0 : std::pow(static_cast<double>(n), q - 1.0);
  }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_hash{}.add("power").add(q).value(); }
};

struct power_schedule {
  static constexpr bool epoch_dependent = true;
  double q_first = 1.0;       // epoch 0: instance-balanced
  double q_last = 0.0;        // from `epochs` on: class-balanced
  std::uint64_t epochs = 10;  // epochs to move from q_first to q_last
  [[nodiscard]] double q_at(std::uint64_t epoch) const noexcept {
    if (epochs == 0 || epoch >= epochs) return q_last;
    const double t = static_cast<double>(epoch) / static_cast<double>(epochs);
    return q_first + (q_last - q_first) * t;
  }
  [[nodiscard]] double weight(std::uint64_t n, std::uint64_t epoch) const noexcept {
    return power{q_at(epoch)}.weight(n);
  }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept {
    return fingerprint_hash{}.add("power_schedule").add(q_first).add(q_last).add(epochs).value();
  }
};

template <class R>
concept class_weighting = requires(const R& r, std::uint64_t n, std::uint64_t epoch) {
  { r.weight(n, epoch) } -> std::convertible_to<double>;
  { R::epoch_dependent } -> std::convertible_to<bool>;
};

// A rule's fingerprint: its own fingerprint() where it has one; else the weights it gives the
// classes' counts in epochs 0 to 3 (a rule without one is known only by those weights).
template <class_weighting R>
[[nodiscard]] std::uint64_t rule_fingerprint(const R& rule, std::span<const std::uint64_t> counts) {
  if constexpr (requires { { rule.fingerprint() } -> std::convertible_to<std::uint64_t>; }) {
    return rule.fingerprint();
  } else {
    fingerprint_hash h;
    for (std::uint64_t e = 0; e < 4; ++e)
      for (std::uint64_t n : counts) h.add(rule.weight(n, e));
    return h.value();
  }
}

// Per-sample weight of each class under a rule.
template <class_weighting R>
std::vector<double> class_weights(std::span<const std::uint64_t> counts, const R& rule,
                                  std::uint64_t epoch = 0) {
  std::vector<double> w(counts.size());
  for (std::size_t c = 0; c < counts.size(); ++c) w[c] = rule.weight(counts[c], epoch);
  return w;
}

// Share of the draws each class gets under a rule (sums to 1).
template <class_weighting R>
std::vector<double> class_mass(std::span<const std::uint64_t> counts, const R& rule,
                               std::uint64_t epoch = 0) {
  std::vector<double> m(counts.size());
  double total = 0;
  for (std::size_t c = 0; c < counts.size(); ++c) total += m[c] = static_cast<double>(counts[c]) * rule.weight(counts[c], epoch);
  if (total > 0) for (double& x : m) x /= total;
  return m;
}

// Scales per-class weights so the mean weight over all samples is 1 (the usual normalisation
// when the weights are used as loss weights instead of sampling weights).
inline std::vector<double> normalize_per_sample(std::vector<double> weights,
                                                std::span<const std::uint64_t> counts) {
  double total = 0, samples = 0;
  for (std::size_t c = 0; c < weights.size() && c < counts.size(); ++c) {
    total += weights[c] * static_cast<double>(counts[c]);
    samples += static_cast<double>(counts[c]);
  }
  if (total > 0) for (double& w : weights) w *= samples / total;
  return weights;
}

// Per-class counts from labels (label -1, "none", is ignored; labels must be < 2^31).
inline std::vector<std::uint64_t> count_labels(std::span<const std::int64_t> labels) {
  std::vector<std::uint64_t> counts;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::int64_t l = labels[i];
    if (l < 0) continue;
    if (l > (std::int64_t{1} << 31))
      throw usage_error("sluice: label " + std::to_string(l) + " of sample " + std::to_string(i) +
                        " is too large for a class index");
    if (static_cast<std::size_t>(l) >= counts.size()) counts.resize(static_cast<std::size_t>(l) + 1, 0);
    ++counts[static_cast<std::size_t>(l)];
  }
  return counts;
}

}  // namespace sluice::sample
