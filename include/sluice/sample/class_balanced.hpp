// sluice/sample/class_balanced.hpp — sampling from a labelled, long-tailed dataset so that each
// class's share of the draws follows a rule from class_weights.hpp (inverse frequency, 1/log(1+n),
// effective number, n^q, or a q schedule), not the data's own imbalance.
//
// A draw is two-level: first a class, by an alias table over class masses (O(1)); then a sample
// of that class, uniformly. That is exactly weighted sampling with per-sample weight
// w(n_class) — the same distribution as an alias table over all samples — in O(classes) memory
// for the table instead of O(samples).
//
// Guarantees
//   * P(class c) = n_c w(n_c) / sum_k n_k w(n_k); within a class, uniform. Samples labelled -1
//     (no label) are never drawn.
//   * at(epoch, pos) is a pure function of (seed, epoch, pos) through counter_rng: thread-safe,
//     resumable. A rule whose weights change with the epoch (power_schedule) rebuilds its class
//     table in prepare(epoch); at() for an epoch that was not prepared then throws usage_error.
//
//   std::vector<std::int64_t> labels = ...;
//   sluice::sample::class_balanced s{labels, sluice::sample::effective_number{0.999}, {.seed = 7}};
//   auto tier = sluice::tier::weighted{1 << 30, s.sample_probabilities()};  // weight-aware cache
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/core/state.hpp"
#include "sluice/sample/alias.hpp"
#include "sluice/sample/class_weights.hpp"

namespace sluice::sample {

namespace detail {
// Sample ids grouped by class: members of class c are ids[offsets[c] .. offsets[c+1]).
struct class_index {
  std::vector<std::uint64_t> counts;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint64_t> ids;
  std::vector<std::int64_t> labels;  // copy, for class_of() and per-sample probabilities

  explicit class_index(std::span<const std::int64_t> l) : counts(count_labels(l)), labels(l.begin(), l.end()) {
    if (counts.empty()) throw usage_error("sluice: class-balanced sampling needs at least one labelled sample");
    offsets.assign(counts.size() + 1, 0);
    for (std::size_t c = 0; c < counts.size(); ++c) offsets[c + 1] = offsets[c] + counts[c];
    ids.resize(offsets.back());
    std::vector<std::uint64_t> next(offsets.begin(), offsets.end() - 1);
    for (std::uint64_t i = 0; i < l.size(); ++i)
      if (l[i] >= 0) ids[next[static_cast<std::size_t>(l[i])]++] = i;
  }
  [[nodiscard]] std::uint64_t member(std::size_t c, counter_rng& rng) const noexcept {
    return ids[offsets[c] + rng.below(counts[c])];
  }
};
}  // namespace detail

struct class_balanced_options {
  std::uint64_t seed = 0;
  std::uint64_t samples_per_epoch = 0;  // 0: the number of labelled samples
};

template <class_weighting Rule = inverse_frequency>
class class_balanced {
 public:
  using sampler_concept = sampler_tag;
  explicit class_balanced(std::span<const std::int64_t> labels, Rule rule = {},
                          class_balanced_options options = {})
      : index_(labels), rule_(rule), options_(options) {
    if (options_.samples_per_epoch == 0) options_.samples_per_epoch = index_.ids.size();
    build(0);
    params_ = fingerprint_hash{}
                  .add_all(index_.labels)
                  .add(rule_fingerprint(rule_, index_.counts))
                  .add(options_.seed)
                  .add(options_.samples_per_epoch)
                  .value();
  }
  // Kind "class_balanced"; the hash covers the labels (computed once), the rule and the options.
  [[nodiscard]] sampler_fingerprint fingerprint() const { return {"class_balanced", params_, options_.seed, true}; }
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return options_.samples_per_epoch; }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    if constexpr (Rule::epoch_dependent) {
      if (epoch != table_epoch_)
        throw usage_error("sluice: class_balanced with an epoch-dependent rule asked for epoch " +
                          std::to_string(epoch) + " before prepare(" + std::to_string(epoch) + ")");
    }
    counter_rng rng(options_.seed, epoch, pos);
    const std::uint64_t c = classes_.draw(rng);
    return index_.member(static_cast<std::size_t>(c), rng);
  }
  void prepare(std::uint64_t epoch) {
    if constexpr (Rule::epoch_dependent) {
      if (epoch != table_epoch_) build(epoch);
    }
  }
  [[nodiscard]] const std::vector<std::uint64_t>& class_counts() const noexcept { return index_.counts; }
  // Share of draws per class in the prepared epoch (sums to 1).
  [[nodiscard]] std::vector<double> class_probabilities() const { return classes_.probabilities(); }
  // P(a draw returns id) for every id (0 for unlabelled ids): what tier::weighted admits by.
  [[nodiscard]] std::vector<double> sample_probabilities() const {
    const auto pc = classes_.probabilities();
    std::vector<double> p(index_.labels.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const auto l = index_.labels[i];
      if (l >= 0) p[i] = pc[static_cast<std::size_t>(l)] / static_cast<double>(index_.counts[static_cast<std::size_t>(l)]);
    }
    return p;
  }

 private:
  void build(std::uint64_t epoch) {
    std::vector<double> mass(index_.counts.size());
    for (std::size_t c = 0; c < mass.size(); ++c)
      mass[c] = static_cast<double>(index_.counts[c]) * rule_.weight(index_.counts[c], epoch);
    classes_.build(mass);
    table_epoch_ = epoch;
  }
  detail::class_index index_;
  Rule rule_;
  class_balanced_options options_;
  std::uint64_t params_ = 0;
  alias_table classes_;
  std::uint64_t table_epoch_ = 0;
};

}  // namespace sluice::sample
