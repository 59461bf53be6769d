// sluice/sample/shard_shuffle.hpp — a two-level shuffle for sharded datasets whose sample order is
// the same on any number of ranks, so a run resumes mid-epoch at another world size.
//
// Each epoch the shards are permuted and laid end to end, the sequence is cut into `partitions`
// canonical parts (fixed for the dataset, not the world size), each run of `window` shards inside a
// part is shuffled, and the global order interleaves the parts. Under `distributed` with a world
// size dividing `partitions`, each rank reads only its own shards and needs (partitions / world) x
// window shards in flight; the order is the same at any world size, so a checkpoint resumes at
// another without losing or repeating a sample. An epoch is partitions x floor(n / partitions)
// samples (the last n % partitions are left out, different ones each epoch).
// prepare(epoch) lays out the epoch (O(shards), on the loader's thread); at() for an epoch not
// prepared is a usage_error. window_at / window_shards let sample::fetch_ahead fetch the next
// windows' shards ahead of the loader. Every rule: docs/samplers.md; the trade of window size
// against class balance and reads: bench/policy/README.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/sample/shard_split.hpp"

namespace sluice::sample {

struct shard_shuffle_options {
  std::uint64_t seed = 0;
  std::uint64_t window = 4;      // shards whose samples are shuffled together (per partition)
  std::uint64_t partitions = 8;  // canonical partitions: world sizes dividing it read disjoint shards
};

class shard_shuffle {
 public:
  using sampler_concept = sampler_tag;

  // ranges[s] = [first, last) global sample ids of shard s.
  shard_shuffle(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, shard_shuffle_options o)
      : o_(o), ranges_(ranges) {
    if (o_.window == 0) throw usage_error("sluice: shard_shuffle: window must be at least 1 shard");
    if (o_.partitions == 0) throw usage_error("sluice: shard_shuffle: partitions must be at least 1");
    if (ranges_.empty()) throw usage_error("sluice: shard_shuffle: no shards");
    for (std::size_t s = 0; s < ranges_.size(); ++s) {
      if (ranges_[s].second < ranges_[s].first)
        throw usage_error("sluice: shard_shuffle: shard " + std::to_string(s) + " ends before it starts");
      n_ += ranges_[s].second - ranges_[s].first;
    }
    per_partition_ = n_ / o_.partitions;
  }
  // From a reader that knows its shards (io::wds_dataset, io::mds_dataset, io::remote_shards).
  template <sharded_reader R>
  shard_shuffle(const R& reader, shard_shuffle_options o) : shard_shuffle(shard_ranges(reader), o) {}

  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept {
    return static_cast<std::size_t>(per_partition_ * o_.partitions);
  }

  void prepare(std::uint64_t epoch) {
    if (epoch == prepared_) return;
    const std::size_t S = ranges_.size();
    const feistel_permutation perm(S, mix_keys(o_.seed, epoch, 0x5348ull));
    order_.resize(S);
    prefix_.assign(S + 1, 0);
    for (std::size_t t = 0; t < S; ++t) {
      order_[t] = static_cast<std::size_t>(perm(t));
      prefix_[t + 1] = prefix_[t] + (ranges_[order_[t]].second - ranges_[order_[t]].first);
    }
    // Windows of each partition: starts (partition-local positions) of every window, then L.
    windows_.assign(o_.partitions, {});
    const std::uint64_t L = per_partition_;
    for (std::uint64_t c = 0; c < o_.partitions; ++c) {
      auto& w = windows_[c];
      w.push_back(0);
      if (L == 0) continue;
      const std::uint64_t begin = c * L, end = begin + L;
      std::size_t t = shard_at(begin);
      std::uint64_t pos = begin, pieces = 0;
      while (pos < end) {
        while (prefix_[t + 1] <= pos) ++t;  // skip empty shards
        pos = std::min(prefix_[t + 1], end);
        if (++pieces % o_.window == 0 && pos < end) w.push_back(pos - begin);
      }
      w.push_back(L);
    }
    prepared_ = epoch;
  }

  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t p) const {
    check(epoch, p);
    const std::uint64_t c = p % o_.partitions, j = p / o_.partitions;
    const auto& w = windows_[c];
    const std::size_t k = static_cast<std::size_t>(std::upper_bound(w.begin(), w.end(), j) - w.begin() - 1);
    const std::uint64_t ws = w[k], we = w[k + 1];
    const std::uint64_t q = ws + feistel_permutation(we - ws, mix_keys(mix_keys(o_.seed, epoch), c, k))(j - ws);
    return id_at(c * per_partition_ + q);
  }

  // The partition and window that global position p falls in.
  [[nodiscard]] std::pair<std::uint64_t, std::size_t> window_at(std::uint64_t epoch, std::uint64_t p) const {
    check(epoch, p);
    const std::uint64_t c = p % o_.partitions, j = p / o_.partitions;
    const auto& w = windows_[c];
    return {c, static_cast<std::size_t>(std::upper_bound(w.begin(), w.end(), j) - w.begin() - 1)};
  }
  // Windows of partition c this epoch.
  [[nodiscard]] std::size_t window_count(std::uint64_t epoch, std::uint64_t c) const {
    check(epoch, 0);
    return c < windows_.size() && windows_[c].size() > 1 ? windows_[c].size() - 1 : 0;
  }
  // The shards (indices into the ranges given) window k of partition c reads, in order.
  [[nodiscard]] std::vector<std::size_t> window_shards(std::uint64_t epoch, std::uint64_t c, std::size_t k) const {
    check(epoch, 0);
    std::vector<std::size_t> out;
    if (c >= windows_.size() || k + 1 >= windows_[c].size()) return out;
    const std::uint64_t a = c * per_partition_ + windows_[c][k], b = c * per_partition_ + windows_[c][k + 1];
    for (std::size_t t = shard_at(a); t < order_.size() && prefix_[t] < b; ++t)
      if (prefix_[t + 1] > prefix_[t]) out.push_back(order_[t]);
    return out;
  }

  [[nodiscard]] const shard_shuffle_options& options() const noexcept { return o_; }
  [[nodiscard]] std::size_t shard_count() const noexcept { return ranges_.size(); }
  // Samples an epoch leaves out (fewer than partitions): n - size().
  [[nodiscard]] std::uint64_t left_out() const noexcept { return n_ - per_partition_ * o_.partitions; }

 private:
  void check(std::uint64_t epoch, std::uint64_t p) const {
    if (epoch != prepared_ || p >= size(epoch))
      throw usage_error("sluice: shard_shuffle: at(" + std::to_string(epoch) + ", " + std::to_string(p) +
                        ") before prepare(epoch) or past its size (" + std::to_string(size(epoch)) + ")");
  }
  // The position in order_ of the non-empty shard holding sequence position g (< n).
  [[nodiscard]] std::size_t shard_at(std::uint64_t g) const {
    return static_cast<std::size_t>(std::upper_bound(prefix_.begin(), prefix_.end(), g) - prefix_.begin() - 1);
  }
  [[nodiscard]] std::uint64_t id_at(std::uint64_t g) const {
    const std::size_t t = shard_at(g);
    return ranges_[order_[t]].first + (g - prefix_[t]);
  }

  shard_shuffle_options o_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges_;
  std::uint64_t n_ = 0, per_partition_ = 0;
  std::uint64_t prepared_ = ~std::uint64_t{0};
  std::vector<std::size_t> order_;                  // shard at each place of this epoch's order
  std::vector<std::uint64_t> prefix_;               // samples before each place
  std::vector<std::vector<std::uint64_t>> windows_;  // per partition: window starts, then its length
};

static_assert(preparing_sampler<shard_shuffle>);

}  // namespace sluice::sample
