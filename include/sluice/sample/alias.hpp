// sluice/sample/alias.hpp — weighted sampling with replacement in O(1) a draw (Walker's alias
// method, Vose's build), and the `weighted` sampler built on it.
//
// An alias table splits n weights into n equal-mass columns; column i keeps item i with
// probability prob[i] and otherwise gives its mass to alias[i]. A draw picks a column uniformly
// and flips one biased coin: two random numbers, no search. Vose's build is O(n) and numerically
// stable (it pairs one under-full and one over-full column at a time; leftovers are exactly full).
//
// Guarantees
//   * P(draw == i) = w[i] / sum(w), up to double rounding in the build and the 2^-32 resolution
//     of each column's keep/alias split (tested by chi-square). At most 2^32 - 1 weights.
//   * `weighted::at(epoch, pos)` is a pure function of (seed, epoch, pos): the draw uses
//     counter_rng keyed on exactly those, so any worker may compute any position, and an epoch can
//     be resumed at any position. Thread-safe (const, no shared state).
//   * Zero weights are never drawn. Negative, NaN or infinite weights, or an all-zero vector,
//     throw usage_error at construction.
//
//   std::vector<double> w = ...;                       // one weight per sample id
//   sluice::sample::weighted s{w, {.seed = 7}};        // size(epoch) == w.size() by default
//   std::uint64_t id = s.at(/*epoch=*/3, /*pos=*/41);  // same answer on every thread, every run
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

namespace sluice::sample {

class alias_table {
  __extension__ using u128 = unsigned __int128;  // GCC/Clang; __extension__ keeps -Wpedantic quiet

 public:
  alias_table() = default;
  explicit alias_table(std::span<const double> weights) { build(weights); }

  void build(std::span<const double> weights) {
    const std::size_t n = weights.size();
    if (n == 0) throw usage_error("sluice: alias_table needs at least one weight");
    if (n > std::numeric_limits<std::uint32_t>::max())
      throw usage_error("sluice: alias_table holds at most 2^32 - 1 weights");
    double total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double w = weights[i];
      if (!(w >= 0) || !std::isfinite(w))
        throw usage_error("sluice: alias_table weight " + std::to_string(i) +
                          " is negative, NaN or infinite");
      total += w;
    }
    if (!(total > 0)) throw usage_error("sluice: alias_table weights sum to zero");
    columns_.assign(n, column{});
    total_ = total;
    // scaled[i] = n * p_i; columns below 1 are "small", at or above 1 are "large".
    std::vector<double> scaled(n);
    std::vector<std::uint32_t> small, large;
    small.reserve(n);
    large.reserve(n);
    const double scale = static_cast<double>(n) / total;
    for (std::size_t i = 0; i < n; ++i) {
      scaled[i] = weights[i] * scale;
      (scaled[i] < 1.0 ? small : large).push_back(static_cast<std::uint32_t>(i));
    }
    while (!small.empty() && !large.empty()) {
      const std::uint32_t s = small.back(), l = large.back();
      small.pop_back();
      columns_[s] = make_column(scaled[s], s, l);
      scaled[l] = (scaled[l] + scaled[s]) - 1.0;  // l gave 1 - scaled[s] of its mass to column s
      if (scaled[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    // Whatever is left is full up to rounding error: it is its own alias, so it keeps itself.
    for (std::uint32_t i : large) columns_[i] = column{0, i};
    for (std::uint32_t i : small) columns_[i] = column{0, i};
  }

  [[nodiscard]] std::size_t size() const noexcept { return columns_.size(); }
  [[nodiscard]] double total_weight() const noexcept { return total_; }

  // One draw from two random words: `pick` chooses the column (multiply-shift), the top 32 bits
  // of `coin` decide keep or alias. A column is 8 bytes, so 10^6 weights take 8 MB.
  [[nodiscard]] std::uint64_t draw(std::uint64_t pick, std::uint64_t coin) const noexcept {
    const auto i = static_cast<std::size_t>((static_cast<u128>(pick) * columns_.size()) >> 64);
    const column c = columns_[i];
    return static_cast<std::uint32_t>(coin >> 32) < c.keep_threshold ? i : c.alias;
  }
  template <class Rng>
  [[nodiscard]] std::uint64_t draw(Rng& rng) const noexcept {
    const std::uint64_t pick = rng();
    return draw(pick, rng());
  }

// Probability that a draw returns i (from the table itself, for tests and for cache admission).
  [[nodiscard]] std::vector<double> probabilities() const {
    std::vector<double> p(columns_.size(), 0.0);
    const double inv_n = 1.0 / static_cast<double>(columns_.size());
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const double keep = columns_[i].alias == i ? 1.0 : columns_[i].keep_threshold * 0x1.0p-32;
      p[i] += keep * inv_n;
      p[columns_[i].alias] += (1.0 - keep) * inv_n;
    }
    return p;
  }

 private:
  // Keeps itself when the coin's top 32 bits are below keep_threshold (probability
  // keep_threshold / 2^32, so each column's split is exact to 2^-32); a full column is its own alias.
  struct column {
    std::uint32_t keep_threshold = 0;
    std::uint32_t alias = 0;
  };
  static column make_column(double keep, std::uint32_t self, std::uint32_t alias) noexcept {
    const double t = std::round(keep * 0x1.0p32);
    if (t >= 0x1.0p32) return column{0, self};
    return column{static_cast<std::uint32_t>(t), alias};
  }
  std::vector<column> columns_;
  double total_ = 0;
};

enum class replacement { with, without };

struct weighted_options {
  std::uint64_t seed = 0;
  // Draws an epoch; 0 means one per weight (the dataset's size; for `without`, one per nonzero
  // weight, i.e. a weight-ordered permutation).
  std::uint64_t samples_per_epoch = 0;
  // `with`: independent alias draws, O(1), no preparation. `without`: each id at most once per
  // epoch, chosen by Efraimidis–Spirakis keys log(u_i)/w_i with u_i from counter_rng(seed, epoch,
  // id); the top samples_per_epoch keys, in key order, are materialised by prepare(epoch)
  // (O(n log n), one thread). Heavier ids are more likely to be included and to come early.
  replacement mode = replacement::with;
};

// Sampler: position pos of epoch e is a draw with P(id) proportional to weights[id].
class weighted {
 public:
  using sampler_concept = sampler_tag;
  weighted(std::span<const double> weights, weighted_options options = {})
      : table_(weights), options_(options) {
    if (options_.mode == replacement::without) {
      weights_.assign(weights.begin(), weights.end());
      std::uint64_t nonzero = 0;
      for (double w : weights_) nonzero += w > 0;
      if (options_.samples_per_epoch == 0 || options_.samples_per_epoch > nonzero)
        options_.samples_per_epoch = nonzero;
    }
    if (options_.samples_per_epoch == 0) options_.samples_per_epoch = weights.size();
  }
  [[nodiscard]] std::size_t size(std::uint64_t /*epoch*/) const noexcept {
    return options_.samples_per_epoch;
  }
  // `with`: pure. `without`: reads the order prepare(epoch) built; asking for another epoch is a
  // usage error (the pipeline calls prepare before every epoch).
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    if (options_.mode == replacement::with) {
      counter_rng rng(options_.seed, epoch, pos);
      return table_.draw(rng);
    }
    if (epoch != prepared_epoch_ || pos >= order_.size())
      throw usage_error("sluice: weighted sampler (without replacement) asked for epoch " +
                        std::to_string(epoch) + " position " + std::to_string(pos) +
                        " before prepare(epoch) or past its size");
    return order_[pos];
  }
  void prepare(std::uint64_t epoch) {
    if (options_.mode == replacement::with || epoch == prepared_epoch_) return;
    struct keyed {
      double key;
      std::uint64_t id;
    };
    std::vector<keyed> keys;
    keys.reserve(weights_.size());
    for (std::uint64_t i = 0; i < weights_.size(); ++i) {
      if (!(weights_[i] > 0)) continue;
      counter_rng rng(options_.seed, epoch, i);
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
      keys.push_back({std::log(u) / weights_[i], i});
    }
    const auto m = static_cast<std::ptrdiff_t>(options_.samples_per_epoch);
    auto by_key = [](const keyed& a, const keyed& b) {
      return a.key != b.key ? a.key > b.key : a.id < b.id;
    };
    std::nth_element(keys.begin(), keys.begin() + (m - 1), keys.end(), by_key);
    std::sort(keys.begin(), keys.begin() + m, by_key);
    order_.resize(static_cast<std::size_t>(m));
    for (std::ptrdiff_t i = 0; i < m; ++i) order_[static_cast<std::size_t>(i)] = keys[static_cast<std::size_t>(i)].id;
    prepared_epoch_ = epoch;
  }
  [[nodiscard]] const alias_table& table() const noexcept { return table_; }
  // P(a draw returns id), for weight-aware cache admission (tier::weighted).
  [[nodiscard]] std::vector<double> sample_probabilities() const { return table_.probabilities(); }

 private:
  alias_table table_;
  weighted_options options_;
  std::vector<double> weights_;  // kept only for `without`
  std::vector<std::uint64_t> order_;
  std::uint64_t prepared_epoch_ = ~std::uint64_t{0};
};

}  // namespace sluice::sample
