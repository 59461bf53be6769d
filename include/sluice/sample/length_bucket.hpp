// sluice/sample/length_bucket.hpp — batches of similar lengths for variable-length records (token sequences),
// to cut the padding a batch needs.
//
// Each epoch, prepare(epoch) shuffles all ids (a Feistel permutation keyed on (seed, epoch)), cuts the shuffled order
// into pools of `pool_batches` batches, sorts each pool by length, cuts it into batches, and shuffles the order of all
// batches (a second permutation). So a batch holds ids of similar length, while which ids meet in a pool — and the
// order in which batches come — is random every epoch. pool_batches = 1 is plain shuffling; larger pools pad less and
// randomise less (the usual trade; 50-100 is common).
// Guarantees
//   * Every id appears exactly once an epoch; at(epoch, pos) reads the order prepare(epoch) built (O(n log pool) once
//     per epoch on one thread; at() for an unprepared epoch throws usage_error). Deterministic in (seed, epoch);
//     independent of threads.
//   * Batches are aligned to the sampler's batch size: positions k*B .. k*B+B-1 are one bucketed batch, so collate's
//     batch size must equal `batch` (the last batch may be short).
// `padding_report` measures what a sampler's batches cost in padding: per batch every sequence is padded to the batch's
// longest one.
//
//   std::vector<std::uint32_t> lengths = ...;   // tokens per record
//   sluice::sample::length_bucketed s{lengths, {.seed = 3, .batch = 32, .pool_batches = 64}};
//   auto r = sluice::sample::padding_report(lengths, s, /*epoch=*/0, 32);   // r.padding_fraction()
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

namespace sluice::sample {

struct length_bucketed_options {
  std::uint64_t seed = 0;
  std::uint64_t batch = 32;
  std::uint64_t pool_batches = 64;  // batches sorted together
};

class length_bucketed {
 public:
  using sampler_concept = sampler_tag;
  length_bucketed(std::span<const std::uint32_t> lengths, length_bucketed_options o = {})
      : lengths_(lengths.begin(), lengths.end()), opt_(o) {
    if (opt_.batch == 0 || opt_.pool_batches == 0)
      throw usage_error("sluice: length_bucketed needs batch >= 1 and pool_batches >= 1");
    params_ = fingerprint_hash{}.add_all(lengths_).add(opt_.seed).add(opt_.batch).add(opt_.pool_batches).value();
  }
  [[nodiscard]] sampler_fingerprint fingerprint() const { return {"length_bucketed", params_, opt_.seed, true}; }
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return lengths_.size(); }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    if (epoch != prepared_epoch_ || pos >= order_.size())
      throw usage_error("sluice: length_bucketed asked for epoch " + std::to_string(epoch) + " position " +
                        std::to_string(pos) + " before prepare(epoch) or past its size");
    return order_[pos];
  }
  void prepare(std::uint64_t epoch) {
    if (epoch == prepared_epoch_) return;
    const std::uint64_t n = lengths_.size(), b = opt_.batch, pool = b * opt_.pool_batches;
    std::vector<std::uint64_t> ids(n);
    feistel_permutation shuffle(n, mix_keys(opt_.seed, epoch, 0x6c656e67));
    for (std::uint64_t i = 0; i < n; ++i) ids[i] = shuffle(i);
    for (std::uint64_t p = 0; p < n; p += pool) {
      auto first = ids.begin() + static_cast<std::ptrdiff_t>(p);
      auto last = ids.begin() + static_cast<std::ptrdiff_t>(std::min(n, p + pool));
      std::stable_sort(first, last, [&](std::uint64_t x, std::uint64_t y) { return lengths_[x] < lengths_[y]; });
    }
    // Shuffle whole batches; the short last batch (if any) stays last so that every other batch
    // is full and aligned.
    const std::uint64_t full = n / b;
    feistel_permutation batch_order(full, mix_keys(opt_.seed, epoch, 0x62617463));
    order_.resize(n);
    for (std::uint64_t k = 0; k < full; ++k) {
      const std::uint64_t src = batch_order(k);
      std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(src * b), b, order_.begin() + static_cast<std::ptrdiff_t>(k * b));
    }
    std::copy(ids.begin() + static_cast<std::ptrdiff_t>(full * b), ids.end(), order_.begin() + static_cast<std::ptrdiff_t>(full * b));
    prepared_epoch_ = epoch;
  }

 private:
  std::vector<std::uint32_t> lengths_;
  length_bucketed_options opt_;
  std::uint64_t params_ = 0;  // hash of lengths and options, computed once
  std::vector<std::uint64_t> order_;
  std::uint64_t prepared_epoch_ = ~std::uint64_t{0};
};

struct padding_stats {
  std::uint64_t tokens = 0;         // sum of true lengths
  std::uint64_t padded_tokens = 0;  // sum over batches of (batch size * longest in batch)
  [[nodiscard]] double padding_fraction() const noexcept {
    return padded_tokens == 0 ? 0.0 : 1.0 - static_cast<double>(tokens) / static_cast<double>(padded_tokens);
  }
};

// Padding the batches of one epoch of `s` would need, padding each batch to its longest record.
template <class Sampler>
padding_stats padding_report(std::span<const std::uint32_t> lengths, Sampler& s, std::uint64_t epoch,
                             std::uint64_t batch) {
  if constexpr (requires { s.prepare(epoch); }) s.prepare(epoch);
  padding_stats r;
  const std::uint64_t n = s.size(epoch);
  for (std::uint64_t k = 0; k * batch < n; ++k) {
    std::uint64_t longest = 0, count = 0;
    for (std::uint64_t p = k * batch; p < std::min(n, (k + 1) * batch); ++p, ++count) {
      const std::uint64_t len = lengths[s.at(epoch, p)];
      r.tokens += len;
      longest = std::max(longest, len);
    }
    r.padded_tokens += longest * count;
  }
  return r;
}

}  // namespace sluice::sample
