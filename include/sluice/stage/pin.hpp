// sluice/stage/pin.hpp — `pin()`: batch slots live in page-locked (pinned) host memory.
//
// Put pin() right after collate when a host-to-device copy follows (to_device). Collate then writes every sample once,
// straight into pinned memory, and the copy engine reads it from there by DMA: one host copy of each sample, not two
// (pageable batch -> staging buffer -> device is what a pageable cudaMemcpy does behind your back). The slots' memory
// comes from a capped pinned pool (sluice::block_pool): reused across batches and loaders that share the pool, bounded
// by `cap_bytes` (a slot that cannot get memory under the cap fails that batch with a usage_error naming the cap), and
// trimmed at each epoch boundary of blocks that no loader needed for `idle_epochs` epochs, or that exceed
// (1 + headroom) x the epoch's peak use.
// Backend: with the CUDA runtime (SLUICE_HAS_CUDART(), link sluice::cuda) the memory comes from cudaHostAlloc; without
// it, from aligned host memory, so the same pipeline builds and runs. Copies of the stage share their pool and
// counters, so keep one to read stats():
//
//   auto pinned = sluice::pin({.cap_bytes = 2ull << 30});
//   auto loader = sluice::from(sampler) | sluice::read(shard) | sluice::collate({.batch = 256})
//               | pinned | sluice::to_device(stream) | sluice::prefetch(2);
//   ...; pinned.stats().bytes_in_place;   // bytes collate wrote straight into pinned memory
//
// Hooks (core/concepts.hpp lists them): allocate/deallocate provide slot storage; on_filled counts the bytes written in place and
// applies the pool's epoch rule when a new epoch starts. The pool and the copy: docs/device.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/batch.hpp"
#include "sluice/core/block_pool.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"

#if SLUICE_HAS_CUDART()
#include "sluice/cuda/memory.hpp"
#endif

namespace sluice {

using pin_options = pool_options;  // core/block_pool.hpp: the pinned bytes the pool may hold, ...

struct pin_stats {
  std::uint64_t batches = 0;          // batches collated into pinned slots
  std::uint64_t bytes_in_place = 0;   // bytes collate wrote straight into pinned memory
  std::uint64_t slot_allocations = 0; // slot storage requests (warm-up, or a batch-size change)
  pool_stats pool;
};

template <class Backend>
class basic_pin_stage {
 public:
  using stage_concept = batch_stage_tag;
  static constexpr std::string_view name = "pin";
  static constexpr hook hooks = hook::storage | hook::on_filled;
  using pool_type = block_pool<Backend>;

  explicit basic_pin_stage(pin_options o = {})
      : state_(std::make_shared<state>(std::make_shared<pool_type>(
            Backend{}, o.limits(), "pinned memory pool"))) {}
  // Shares `pool` (e.g. between the training and the validation loader).
  explicit basic_pin_stage(std::shared_ptr<pool_type> pool) : state_(std::make_shared<state>(std::move(pool))) {
    if (!state_->pool) throw usage_error("sluice: pin(pool): the pool is null");
  }

  // --- hooks called by the loader ------------------------------------------------------------
  void* allocate(std::size_t bytes) {
    auto lease = state_->pool->acquire(bytes);
    void* p = lease.data();
    std::lock_guard lock(state_->mu);
    state_->leases.push_back(std::move(lease));
    state_->slot_allocations.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept {
    std::lock_guard lock(state_->mu);
    auto& v = state_->leases;
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& l) { return l.data() == p; });
    if (it != v.end()) v.erase(it);
  }
  void on_filled(batch_slot& s, auto& /*no per-slot state*/) {
    state_->batches.fetch_add(1, std::memory_order_relaxed);
    state_->bytes.fetch_add(s.used_bytes, std::memory_order_relaxed);
    // The first batch of a new epoch applies the pool's shrink rule to the epoch before.
    std::uint64_t seen = state_->epoch.load(std::memory_order_relaxed);
    while (s.epoch > seen) {
      if (state_->epoch.compare_exchange_weak(seen, s.epoch, std::memory_order_relaxed)) {
        state_->pool->end_epoch();
        break;
      }
    }
  }

  // --- for users and tests -------------------------------------------------------------------
  [[nodiscard]] pin_stats stats() const {
    return {state_->batches.load(std::memory_order_relaxed), state_->bytes.load(std::memory_order_relaxed),
            state_->slot_allocations.load(std::memory_order_relaxed), state_->pool->stats()};
  }
  // True when [p, p + bytes) lies inside memory this stage handed out.
  [[nodiscard]] bool owns(const void* p, std::size_t bytes = 1) const {
    std::lock_guard lock(state_->mu);
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& l : state_->leases)
      if (b >= l.data() && b + bytes <= l.data() + l.capacity()) return true;
    return false;
  }
  [[nodiscard]] pool_type& pool() const noexcept { return *state_->pool; }

 private:
  struct state {
    explicit state(std::shared_ptr<pool_type> p) : pool(std::move(p)) {}
    std::shared_ptr<pool_type> pool;
    mutable std::mutex mu;
    std::vector<typename pool_type::lease> leases;  // one per slot: changes only at warm-up
    std::atomic<std::uint64_t> batches{0}, bytes{0}, slot_allocations{0}, epoch{0};
  };
  std::shared_ptr<state> state_;
};

inline namespace SLUICE_BACKEND_NAMESPACE {  // core/config.hpp: the backend is part of the names
#if SLUICE_HAS_CUDART()
using pin_stage = basic_pin_stage<cuda::pinned_backend>;
#else
using pin_stage = basic_pin_stage<host_block_backend>;
#endif

[[nodiscard]] inline pin_stage pin(pin_options o = {}) { return pin_stage(o); }
}  // namespace SLUICE_BACKEND_NAMESPACE

}  // namespace sluice
