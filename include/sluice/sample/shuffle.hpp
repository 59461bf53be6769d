// sluice/sample/shuffle.hpp — seeded shuffles that never materialise the permutation.
//
// `shuffle{n, {.seed}}`: a fresh uniform-looking permutation each epoch, position -> id through a
// Feistel network keyed by (seed, epoch) (core/random.hpp). O(1) memory, O(1) a position, any
// position first: resuming mid-epoch or splitting an epoch across ranks costs nothing.
//
// `block_shuffle{n, {.seed, .block}}` ("quasi-random"): the dataset is cut into blocks of `block`
// consecutive records; the order of blocks is permuted, and so is the order inside each block.
// Consecutive positions then read from one block — a few MiB of the file — which keeps reads local
// (page cache, read-ahead, remote storage chunks) while every epoch still differs. The price is
// weaker mixing: samples of one block arrive together, so pick blocks of a few batches at most
// when classes are stored sorted.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/core/concepts.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/random.hpp"

namespace sluice::sample {

struct shuffle_options {
  std::uint64_t seed = 0;
};

class shuffle {
 public:
  using sampler_concept = sampler_tag;
  explicit shuffle(std::uint64_t n, shuffle_options o = {}) noexcept : n_(n), seed_(o.seed) {}
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return static_cast<std::size_t>(n_); }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const noexcept {
    // Building the permutation is a handful of integer operations; cheaper than caching per epoch.
    return feistel_permutation(n_, mix_keys(seed_, epoch))(pos);
  }
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  [[nodiscard]] std::uint64_t dataset_size() const noexcept { return n_; }
  [[nodiscard]] sampler_fingerprint fingerprint() const {
    return {"shuffle", fingerprint_hash{}.add(n_).add(seed_).value(), seed_, true};
  }

 private:
  std::uint64_t n_, seed_;
};

struct block_shuffle_options {
  std::uint64_t seed = 0;
  std::uint64_t block = 1024;  // records per block
};

class block_shuffle {
 public:
  using sampler_concept = sampler_tag;
  explicit block_shuffle(std::uint64_t n, block_shuffle_options o = {}) noexcept
      : n_(n), seed_(o.seed), block_(o.block == 0 ? 1 : o.block) {}
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return static_cast<std::size_t>(n_); }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const noexcept {
    // Full blocks are permuted; a short last block (n % block records) always comes last, so a
    // position maps to its block without inverting the permutation.
    const std::uint64_t full = n_ / block_;
    const std::uint64_t key = mix_keys(seed_, epoch);
    if (pos < full * block_) {
      const std::uint64_t b = feistel_permutation(full, key)(pos / block_);
      return b * block_ + feistel_permutation(block_, mix_keys(key, b + 1))(pos % block_);
    }
    const std::uint64_t tail = n_ - full * block_;
    return full * block_ + feistel_permutation(tail, mix_keys(key, full + 1))(pos - full * block_);
  }
  [[nodiscard]] std::uint64_t dataset_size() const noexcept { return n_; }
  [[nodiscard]] sampler_fingerprint fingerprint() const {
    return {"block_shuffle", fingerprint_hash{}.add(n_).add(seed_).add(block_).value(), seed_, true};
  }

 private:
  std::uint64_t n_, seed_, block_;
};

}  // namespace sluice::sample
