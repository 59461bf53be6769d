// sluice/sample/fetch_ahead.hpp — open (fetch) the shards of the next windows before the loader reaches them.
//
// With shard_shuffle a rank reads its partitions' windows one after another; each window's first read would wait for
// its shards to download. fetch_ahead wraps a rank's sampler, distributed{shard_shuffle}, and a reader with prefetch(s)
// (io::remote_shards, io::mds_dataset): when a worker asks for a position in window k of a partition, the shards of
// windows k + 1 .. k + `windows` of that partition are handed to the reader's background thread, once each. The ids are
// distributed{shard_shuffle}'s own; only the time shards arrive changes.
//
//   sluice::sample::shard_shuffle order{data, {.seed = 7, .window = 16, .partitions = 8}};
//   sluice::sample::fetch_ahead ahead{sluice::sample::distributed{order, {.rank = r, .world = w}}, data,
//                                     {.windows = 1}};
//   auto loader = sluice::from(ahead) | sluice::read(data) | ...;
//
// Between epochs (prepare of a new epoch, when the loader's workers are idle) the reader's release_all() closes the
// last epoch's shards so the tier may evict them: a rank holds at most one epoch's share (shards are not released
// within an epoch yet). Fetching ahead needs room for the windows in flight plus those ahead: (partitions / world) ×
// (window × (1 + windows) + 1) shards a rank. The reader must outlive the loader (as read(data) requires anyway).
// Threads: at() is thread-safe; its bookkeeping per sample is the window lookup (a binary search over the partition's
// windows) and one atomic load once that window's successors are posted. More: docs/samplers.md, docs/remote.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/shard_shuffle.hpp"

namespace sluice::sample {

struct fetch_ahead_options {
  std::uint64_t windows = 1;  // windows of each partition fetched ahead of the one being read
  // At each new epoch, the reader's release_all() (when it has one): the last epoch's shards are
  // closed and their tier files become evictable, so a rank holds at most one epoch's share.
  bool release_between_epochs = true;
};

template <class Reader>
  requires requires(const Reader& r, std::size_t s) { r.prefetch(s); }
class fetch_ahead {
 public:
  using sampler_concept = sampler_tag;

  fetch_ahead(distributed<shard_shuffle> order, const Reader& reader, fetch_ahead_options o = {})
      : order_(std::move(order)), reader_(&reader), o_(o), state_(std::make_shared<state>()) {
    if (order_.inner().shard_count() == 0) throw usage_error("sluice: fetch_ahead: no shards");
  }

  // Called by the loader before an epoch, with its workers idle (nothing reads the reader then).
  void prepare(std::uint64_t epoch) {
    order_.prepare(epoch);
    const std::uint64_t parts = order_.inner().options().partitions;
    std::lock_guard lk(state_->m);
    if constexpr (requires { reader_->release_all(); }) {
      if (o_.release_between_epochs && state_->posted && state_->epoch != epoch) reader_->release_all();
    }
    state_->epoch = epoch;
    state_->posted = std::make_unique<std::atomic<std::uint64_t>[]>(parts);
    for (std::uint64_t c = 0; c < parts; ++c) state_->posted[c].store(0, std::memory_order_relaxed);  // windows posted: [0, v)
  }
  [[nodiscard]] std::size_t size(std::uint64_t epoch) const { return order_.size(epoch); }

  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    const std::uint64_t id = order_.at(epoch, pos);
    const auto& o = order_.options();
    const std::uint64_t g = o.start + o.rank + pos * o.world;
    const shard_shuffle& s = order_.inner();
    if (g < s.size(epoch) && state_->epoch == epoch && state_->posted) {
      const auto [c, k] = s.window_at(epoch, g);
      const std::uint64_t want = k + 1 + o_.windows;  // windows [0, want) posted once this one is read
      if (state_->posted[c].load(std::memory_order_acquire) < want) post(epoch, c, k, want);
    }
    return id;
  }

  [[nodiscard]] const distributed<shard_shuffle>& order() const noexcept { return order_; }
  [[nodiscard]] sampler_fingerprint fingerprint() const { return order_.fingerprint(); }

 private:
  struct state {
    std::mutex m;
    std::uint64_t epoch = ~std::uint64_t{0};
    std::unique_ptr<std::atomic<std::uint64_t>[]> posted;  // per partition
  };

  void post(std::uint64_t epoch, std::uint64_t c, std::size_t k, std::uint64_t want) const {
    std::lock_guard lk(state_->m);
    const shard_shuffle& s = order_.inner();
    std::uint64_t from = state_->posted[c].load(std::memory_order_relaxed);
    if (from >= want) return;
    // The window being read first (a worker waits for it anyway; posting it opens it no later),
    // then the ones ahead.
    if (from <= k) from = k;
    for (std::uint64_t w = from; w < want && w < s.window_count(epoch, c); ++w)
      for (std::size_t shard : s.window_shards(epoch, c, static_cast<std::size_t>(w))) reader_->prefetch(shard);
    state_->posted[c].store(want, std::memory_order_release);
  }

  distributed<shard_shuffle> order_;
  const Reader* reader_;
  fetch_ahead_options o_;
  std::shared_ptr<state> state_;  // shared by the loader's copy and the caller's
};

}  // namespace sluice::sample
