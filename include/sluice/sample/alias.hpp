// sluice/sample/alias.hpp — weighted sampling with replacement in O(1) a draw (Walker's alias
// method, Vose's build), and the `weighted` sampler built on it.
//
// P(draw == i) = w[i] / sum(w), up to double rounding and 2^-32 per column (tested by chi-square),
// at most 2^32 - 1 weights, zero weights never drawn. weighted::at(epoch, pos) is a pure function
// of (seed, epoch, pos), so any worker computes any position and an epoch resumes anywhere;
// draw_n fills a range with exactly those draws, several times faster on big tables.
// Errors: negative, NaN or infinite weights, or all zeros, are a usage_error at construction.
// Threads: const, no shared state. Every rule: docs/samplers.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

#if defined(__linux__)
#  include <sys/mman.h>
#endif

namespace sluice::sample {

namespace detail {
// Allocator for the alias table's big arrays: from 2 MiB up, memory is 2 MiB-aligned, rounded up
// to whole 2 MiB pages and marked MADV_HUGEPAGE (Linux; a hint, ignored where transparent huge
// pages are off). A 10^6-entry table then spans 4 TLB entries instead of 1,954, and filling it
// takes 4 page faults instead of 1,954: measured on the 2-core build machine, filling an 8 MB
// table and drawing 10^6 ids from it went from ~21 ms to ~12 ms of CPU. Smaller arrays use plain
// operator new. Stateless, so containers using it copy and compare like std::allocator's.
template <class T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
  huge_page_allocator() = default;
  template <class U>
  constexpr huge_page_allocator(const huge_page_allocator<U>&) noexcept {}
  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (bytes < huge_page_bytes) return static_cast<T*>(::operator new(bytes, std::align_val_t{alignof(T)}));
    const std::size_t rounded = (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    void* p = ::operator new(rounded, std::align_val_t{huge_page_bytes});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)::madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < huge_page_bytes) {
      ::operator delete(p, std::align_val_t{alignof(T)});
      return;
    }
    ::operator delete(p, std::align_val_t{huge_page_bytes});
  }
  template <class U>
  friend constexpr bool operator==(const huge_page_allocator&, const huge_page_allocator<U>&) noexcept {
    return true;
  }
};
}  // namespace detail

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
        throw usage_error("sluice: sample weight " + std::to_string(i) + " is " + std::to_string(w) +
                          ": a weight must be finite and >= 0");
      total += w;
    }
    if (!(total > 0)) throw usage_error("sluice: alias_table weights sum to zero");
    total_ = total;
    // Every column is written exactly once below, so resize without caring about old contents.
    columns_.resize(n);
    // scaled(i) = n * p_i; columns below 1 are "small", at or above 1 are "large". Both work
    // lists share one uninitialised array of n indices: small grows up from the front, large down
    // from the back (they never hold more than n between them). The partition is branch-free.
    const double scale = static_cast<double>(n) / total;
    auto scaled = [&](std::uint32_t i) { return weights[i] * scale; };
    detail::huge_page_allocator<std::uint32_t> work_allocator;
    struct work_array {
      detail::huge_page_allocator<std::uint32_t>& a;
      std::uint32_t* p;
      std::size_t n;
      ~work_array() { a.deallocate(p, n); }
    } work_guard{work_allocator, work_allocator.allocate(n), n};
    std::uint32_t* const work = work_guard.p;
    std::size_t n_small = 0, n_large = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<std::uint32_t>(i);
      const bool is_small = scaled(id) < 1.0;
      work[n - 1 - n_large] = id;  // n_small + n_large == i, so both slots are free
      work[n_small] = id;
      n_small += is_small;
      n_large += !is_small;
    }
    // Vose's pairing, popping both lists as stacks. Only the large column on top of its stack
    // ever has a reduced mass (`top_mass`); when it drops below 1 it moves to the top of the
    // small stack and is paired next, with that reduced mass (`carried_mass`). Every other index
    // still has its original scaled weight, so no n-sized array of masses is needed. The
    // arithmetic and the pairing order are exactly those of the textbook two-stack build.
    double top_mass = n_large > 0 ? scaled(work[n - n_large]) : 0.0;
    bool carried = false;
    double carried_mass = 0;
    while (n_small > 0 && n_large > 0) {
      const std::uint32_t s = work[--n_small];
      const double s_mass = carried ? carried_mass : scaled(s);
      carried = false;
      const std::uint32_t l = work[n - n_large];
      columns_[s] = make_column(s_mass, s, l);
      top_mass = (top_mass + s_mass) - 1.0;  // l gave 1 - s_mass of its mass to column s
      if (top_mass < 1.0) {
        --n_large;
        work[n_small++] = l;
        carried = true;
        carried_mass = top_mass;
        if (n_large > 0) top_mass = scaled(work[n - n_large]);
      }
    }
    // Whatever is left is full up to rounding error: it is its own alias, so it keeps itself.
    for (std::size_t k = 0; k < n_small; ++k) columns_[work[k]] = column{0, work[k]};
    for (std::size_t k = n - n_large; k < n; ++k) columns_[work[k]] = column{0, work[k]};
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

  // Bulk draws keyed like counter_rng: out[i] == draw(r) with r = counter_rng{mix_keys(stream_key,
  // first_id + i)} (so counter_rng(seed, epoch, id) is stream_key = mix_keys(seed, epoch)).
  // Works in groups: hash the whole group and prefetch every column it needs, then resolve, so
  // the cache misses of a big table overlap instead of being taken one after another.
  void draw_n(std::uint64_t stream_key, std::uint64_t first_id, std::span<std::uint64_t> out) const noexcept {
    constexpr std::uint64_t second_word = 0xd1342543de82ef95ULL;  // counter_rng's 2nd draw offset
    const std::uint64_t n = columns_.size();
    const column* const cols = columns_.data();
    std::uint32_t index[draw_group];
    std::uint32_t coin[draw_group];
    for (std::size_t done = 0; done < out.size(); done += draw_group) {
      const std::size_t m = std::min<std::size_t>(draw_group, out.size() - done);
      for (std::size_t k = 0; k < m; ++k) {
        const std::uint64_t key = mix_keys(stream_key, first_id + done + k);
        const auto i = static_cast<std::uint32_t>((static_cast<u128>(splitmix64(key)) * n) >> 64);
        __builtin_prefetch(cols + i);
        index[k] = i;
        coin[k] = static_cast<std::uint32_t>(splitmix64(key + second_word) >> 32);
      }
      for (std::size_t k = 0; k < m; ++k) {
        const column c = cols[index[k]];
        out[done + k] = coin[k] < c.keep_threshold ? index[k] : c.alias;
      }
    }
  }
  // Bulk form of draw(pick, coin): out[i] == draw(picks[i], coins[i]), with the same grouping
  // and prefetching. The three spans must have the same size.
  void draw_n(std::span<const std::uint64_t> picks, std::span<const std::uint64_t> coins,
              std::span<std::uint64_t> out) const {
    if (picks.size() != out.size() || coins.size() != out.size())
      throw usage_error("sluice: alias_table::draw_n needs picks, coins and out of one size");
    const std::uint64_t n = columns_.size();
    const column* const cols = columns_.data();
    std::uint32_t index[draw_group];
    for (std::size_t done = 0; done < out.size(); done += draw_group) {
      const std::size_t m = std::min<std::size_t>(draw_group, out.size() - done);
      for (std::size_t k = 0; k < m; ++k) {
        index[k] = static_cast<std::uint32_t>((static_cast<u128>(picks[done + k]) * n) >> 64);
        __builtin_prefetch(cols + index[k]);
      }
      for (std::size_t k = 0; k < m; ++k) {
        const column c = cols[index[k]];
        out[done + k] = static_cast<std::uint32_t>(coins[done + k] >> 32) < c.keep_threshold ? index[k] : c.alias;
      }
    }
  }

  // Keeps itself when the coin's top 32 bits are below keep_threshold (probability
  // keep_threshold / 2^32, so each column's split is exact to 2^-32); a full column is its own alias.
  struct column {
    std::uint32_t keep_threshold = 0;
    std::uint32_t alias = 0;
    friend bool operator==(const column&, const column&) = default;
  };
  // The table itself (for tests and diagnostics).
  [[nodiscard]] std::span<const column> columns() const noexcept { return columns_; }

  // Positions resolved per group by draw_n: enough independent misses in flight to cover memory
  // latency, small enough that the group's indices stay in registers/L1.
  static constexpr std::size_t draw_group = 64;

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
  // keep is in [0, 1). Rounds keep * 2^32 half away from zero, exactly as std::round would
  // (truncation is floor for x >= 0 and x - floor(x) is exact), without a libm call.
  static column make_column(double keep, std::uint32_t self, std::uint32_t alias) noexcept {
    const double x = keep * 0x1.0p32;
    const auto whole = static_cast<std::int64_t>(x);  // x < 2^32: the signed conversion is one instruction
    const std::int64_t t = whole + (x - static_cast<double>(whole) >= 0.5 ? 1 : 0);
    if (t >= (std::int64_t{1} << 32)) return column{0, self};
    return column{static_cast<std::uint32_t>(t), alias};
  }
  std::vector<column, detail::huge_page_allocator<column>> columns_;
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
    params_ = fingerprint_hash{}
                  .add_all(weights)
                  .add(options_.seed)
                  .add(options_.samples_per_epoch)
                  .add(static_cast<std::uint64_t>(options_.mode))
                  .value();
  }
  // Kind "weighted"; the hash covers the weights (computed once, at construction) and options.
  [[nodiscard]] sampler_fingerprint fingerprint() const { return {"weighted", params_, options_.seed, true}; }
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
  // Bulk at(): out[i] == at(epoch, first_pos + i) for every i, element by element, but much
  // faster on big tables (`with`: the draws of a group overlap their cache misses, and the
  // (seed, epoch) half of the key is hashed once). Pure and thread-safe like at(); a worker can
  // fill its batch's ids with one call.
  void draw_n(std::uint64_t epoch, std::uint64_t first_pos, std::span<std::uint64_t> out) const {
    if (options_.mode == replacement::with) {
      table_.draw_n(mix_keys(options_.seed, epoch), first_pos, out);
      return;
    }
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = at(epoch, first_pos + i);
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
  std::uint64_t params_ = 0;
  std::vector<double> weights_;  // kept only for `without`
  std::vector<std::uint64_t> order_;
  std::uint64_t prepared_epoch_ = ~std::uint64_t{0};
};

}  // namespace sluice::sample
