// sluice/sample/balanced_batch.hpp — batches whose class make-up is held to the target shares,
// batch by batch, not only on average over the epoch.
//
// Independent draws (class_balanced) give each class B*p_c samples per batch only in
// expectation; a rare class may be absent from many batches and doubled in others. This sampler
// uses systematic sampling inside each batch: batch k places B points (s + phi_k)/B, s = 0..B-1,
// with one random offset phi_k in [0,1), on the cumulative class shares. A class with share p_c
// then receives floor(B p_c) or ceil(B p_c) slots — the bound is |count_c - B p_c| < 1 in EVERY
// batch — and each class's expected count is exactly B p_c. The slots are then shuffled inside the
// batch (a Feistel permutation keyed on (seed, epoch, k)), and each slot's sample is drawn
// uniformly from its class.
//
// Guarantees
//   * For every batch (positions k*B .. k*B+B-1) and every class c: floor(B p_c) <= count_c <=
//     ceil(B p_c). This holds for the pipeline's batches when collate's batch size equals `batch`.
//   * at(epoch, pos) is pure in (seed, epoch, pos): O(log classes) a draw, thread-safe, resumable.
//   * Class shares come from any class_weighting rule (default: balanced, inverse_frequency).
//
//   sluice::sample::balanced_batch s{labels, sluice::sample::inverse_frequency{}, {.seed = 1, .batch = 64}};
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/core/state.hpp"
#include "sluice/sample/class_balanced.hpp"
#include "sluice/sample/class_weights.hpp"

namespace sluice::sample {

struct balanced_batch_options {
  std::uint64_t seed = 0;
  std::uint64_t batch = 64;
  std::uint64_t batches_per_epoch = 0;  // 0: ceil(labelled samples / batch)
};

template <class_weighting Rule = inverse_frequency>
class balanced_batch {
 public:
  using sampler_concept = sampler_tag;
  explicit balanced_batch(std::span<const std::int64_t> labels, Rule rule = {},
                          balanced_batch_options options = {})
      : index_(labels), rule_(rule), options_(options) {
    if (options_.batch == 0) throw usage_error("sluice: balanced_batch needs batch >= 1");
    if (options_.batches_per_epoch == 0)
      options_.batches_per_epoch = (index_.ids.size() + options_.batch - 1) / options_.batch;
    build(0);
    params_ = fingerprint_hash{}
                  .add_all(index_.labels)
                  .add(rule_fingerprint(rule_, index_.counts))
                  .add(options_.seed)
                  .add(options_.batch)
                  .add(options_.batches_per_epoch)
                  .value();
  }
  // Kind "balanced_batch"; the hash covers the labels (computed once), the rule and the options.
  [[nodiscard]] sampler_fingerprint fingerprint() const { return {"balanced_batch", params_, options_.seed, true}; }
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept {
    return options_.batches_per_epoch * options_.batch;
  }
  [[nodiscard]] std::uint64_t batch_size() const noexcept { return options_.batch; }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    if constexpr (Rule::epoch_dependent) {
      if (epoch != table_epoch_)
        throw usage_error("sluice: balanced_batch with an epoch-dependent rule asked for epoch " +
                          std::to_string(epoch) + " before prepare(" + std::to_string(epoch) + ")");
    }
    const std::uint64_t b = options_.batch, k = pos / b, p = pos % b;
    const std::uint64_t batch_key = mix_keys(options_.seed, epoch, k);
    const std::uint64_t slot = feistel_permutation(b, batch_key)(p);
    const double phi = counter_rng(batch_key).uniform();
    const double u = (static_cast<double>(slot) + phi) / static_cast<double>(b);
    const std::size_t c = class_of_point(u);
    counter_rng rng(options_.seed, epoch, pos);
    return index_.member(c, rng);
  }
  void prepare(std::uint64_t epoch) {
    if constexpr (Rule::epoch_dependent) {
      if (epoch != table_epoch_) build(epoch);
    }
  }
  [[nodiscard]] const std::vector<double>& class_shares() const noexcept { return shares_; }
  [[nodiscard]] std::int64_t label_of(std::uint64_t id) const noexcept { return index_.labels[id]; }

 private:
  [[nodiscard]] std::size_t class_of_point(double u) const noexcept {
    // First class whose cumulative share exceeds u; classes with zero share are never chosen.
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    if (it == cdf_.end()) it = cdf_.end() - 1;  // u rounding past the last edge
    std::size_t c = static_cast<std::size_t>(it - cdf_.begin());
    while (shares_[c] == 0 && c > 0) --c;  // only reachable through rounding at an edge
    return c;
  }
  void build(std::uint64_t epoch) {
    shares_ = class_mass(std::span<const std::uint64_t>(index_.counts), rule_, epoch);
    cdf_.resize(shares_.size());
    double acc = 0;
    for (std::size_t c = 0; c < shares_.size(); ++c) cdf_[c] = acc += shares_[c];
    for (std::size_t c = shares_.size(); c-- > 0;) {  // the last class with mass ends at exactly 1
      if (shares_[c] > 0) {
        for (std::size_t j = c; j < cdf_.size(); ++j) cdf_[j] = 1.0;
        break;
      }
    }
    table_epoch_ = epoch;
  }
  detail::class_index index_;
  Rule rule_;
  balanced_batch_options options_;
  std::uint64_t params_ = 0;
  std::vector<double> shares_, cdf_;
  std::uint64_t table_epoch_ = 0;
};

}  // namespace sluice::sample
