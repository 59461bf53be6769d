// sluice/sample/shard_split.hpp — whole shards per rank, shuffled inside the rank's share.
//
// `distributed` (sample/distributed.hpp) deals global positions round-robin, so every rank reads from every shard. With
// many tar shards on remote or cold storage a rank should instead own whole shards and never open the others:
//   - shard s belongs to rank s % world for the whole run (the rank's page cache and saved indexes stay useful);
//   - each epoch, the rank's samples (all of its shards' samples) are visited in a fresh order, a Feistel permutation
//     keyed by (seed, epoch, rank): O(1) memory, any position first;
//   - every rank runs the same number of steps: size(epoch) is the smallest rank's sample count, and each epoch a rank
//     with more drops a different, random remainder (tail::drop). Shards of equal size (what WebDataset writers make
//     with a fixed count per shard) drop nothing.
// Any reader with shard_count() and shard_range(s) ([first, last) global ids of shard s), such as io::wds_dataset,
// gives it its shards; opened with `.sizes`, the dataset then maps only this rank's shards:
//
//   sluice::io::wds_dataset<wds> data{"train-{000000..000127}.tar", {.sizes = sizes}};
//   auto r = sluice::sample::rank_from_environment();
//   auto sampler = sluice::sample::shard_split{data, {.rank = r.rank, .world = r.world, .seed = 7}};
//   auto loader = sluice::from(sampler) | sluice::read(data) | ...;
//
// Errors: a world larger than the shard count is a usage_error: ranks with no shard would have nothing to read (and
// every rank's epoch would be empty). More examples: docs/readers.md, docs/remote.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

namespace sluice::sample {

// A reader that knows its shards: shard_count() and shard_range(s) ([first, last) global ids).
template <class R>
concept sharded_reader = requires(const R& r, std::size_t s) {
  { r.shard_count() } -> std::convertible_to<std::size_t>;
  { r.shard_range(s) } -> std::convertible_to<std::pair<std::uint64_t, std::uint64_t>>;
};

// Every shard's [first, last) global ids, in shard order.
template <sharded_reader R>
std::vector<std::pair<std::uint64_t, std::uint64_t>> shard_ranges(const R& r) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out(r.shard_count());
  for (std::size_t s = 0; s < out.size(); ++s) out[s] = r.shard_range(s);
  return out;
}

struct shard_split_options {
  std::uint64_t rank = 0;
  std::uint64_t world = 1;
  std::uint64_t seed = 0;
};

class shard_split {
 public:
  using sampler_concept = sampler_tag;

  // ranges[s] = [first, last) global sample ids of shard s.
  shard_split(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, shard_split_options o) : o_(o) {
    if (o_.world == 0) throw usage_error("sluice: shard_split: world must be at least 1");
    if (o_.rank >= o_.world)
      throw usage_error("sluice: shard_split: rank " + std::to_string(o_.rank) + " is not below world " +
                        std::to_string(o_.world));
    if (ranges.size() < o_.world)
      throw usage_error("sluice: shard_split: " + std::to_string(ranges.size()) + " shards for a world of " +
                        std::to_string(o_.world) + "; every rank needs at least one whole shard");
    std::vector<std::uint64_t> per_rank(o_.world, 0);
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      const auto [a, b] = ranges[s];
      if (b < a) throw usage_error("sluice: shard_split: shard " + std::to_string(s) + " ends before it starts");
      per_rank[s % o_.world] += b - a;
      if (s % o_.world == o_.rank && b > a) {
        mine_.push_back(a);
        starts_.push_back(total_);
        total_ += b - a;
      }
    }
    size_ = *std::min_element(per_rank.begin(), per_rank.end());
  }
  // From a reader that knows its shards (io::wds_dataset).
  template <sharded_reader R>
  shard_split(const R& reader, shard_split_options o) : shard_split(shard_ranges(reader), o) {}

  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return static_cast<std::size_t>(size_); }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const noexcept {
    const std::uint64_t k = feistel_permutation(total_, mix_keys(o_.seed, epoch, o_.rank))(pos);
    const std::size_t j = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), k) - starts_.begin() - 1);
    return mine_[j] + (k - starts_[j]);
  }
  // Samples this rank owns (size() may be fewer: the smallest rank's count).
  [[nodiscard]] std::uint64_t owned_samples() const noexcept { return total_; }
  [[nodiscard]] const shard_split_options& options() const noexcept { return o_; }

 private:
  shard_split_options o_;
  std::vector<std::uint64_t> mine_;    // first global id of each non-empty shard of this rank
  std::vector<std::uint64_t> starts_;  // its first position among the rank's samples
  std::uint64_t total_ = 0, size_ = 0;
};

static_assert(sampler<shard_split>);

}  // namespace sluice::sample
