// sluice/core/block_pool.hpp — a pool of byte blocks that is reused across batches, bounded by a
// cap, and shrinks when its memory stops being used.
//
// Pinned and device memory are slow to allocate, and a pool that only grows keeps one large
// batch's memory until the process exits. block_pool<Backend> reuses (acquire hands out the
// smallest idle block that fits), is bounded (held bytes never exceed `cap_bytes`; idle blocks
// that cannot serve a request are freed first), and shrinks (end_epoch() frees blocks idle for
// `idle_epochs` epochs, then down to (1 + headroom) x the epoch's peak demand). The memory comes
// from a Backend (pinned host, device, or plain host memory), and each block has a fence that
// asynchronous users record before dropping their lease: a block whose fence is pending is never
// freed, and handed out only when nothing else fits (the caller then waits on lease.fence()).
// Errors: a request that does not fit under the cap is a usage_error naming the pool, the cap and
// what is in use, never a hang.
// Threads: every member is safe from any thread (one mutex, per batch); a lease may outlive its
// pool. No allocation in steady state. The backend's interface and every rule: docs/device.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice {

struct pool_limits {
  std::size_t cap_bytes = std::numeric_limits<std::size_t>::max();  // held (in use + idle) never exceeds this
  std::size_t granularity_bytes = 4096;  // block sizes are multiples of this
  std::uint32_t idle_epochs = 1;         // free an idle block after this many whole epochs unused (0: never)
  double headroom = 0.25;                // keep at most (1 + headroom) x the epoch's peak in-use bytes
  double max_waste = 2.0;                // an idle block serves a request of at least capacity / max_waste
};

// What a stage that owns a pool of blocks (pin's pinned host memory, to_device's device memory)
// lets its user set; pin_options and to_device_options are this struct.
struct pool_options {
  std::size_t cap_bytes = std::size_t{8} << 30;  // bytes the pool may hold
  std::uint32_t idle_epochs = 1;                 // free an idle block after this many whole epochs unused
  double headroom = 0.25;                        // keep at most (1 + headroom) x the epoch's peak in-use bytes

  // The pool's limits: blocks in multiples of 64 KiB (a batch's tensors are large).
  [[nodiscard]] pool_limits limits() const noexcept {
    return {.cap_bytes = cap_bytes, .granularity_bytes = 64 * 1024, .idle_epochs = idle_epochs, .headroom = headroom};
  }
};

struct pool_stats {
  std::size_t held_bytes = 0;        // in use + idle
  std::size_t in_use_bytes = 0;
  std::size_t peak_in_use_bytes = 0;  // since the last end_epoch()
  std::size_t peak_demand_bytes = 0;  // in use + idle but pending, at an acquire, since the last end_epoch()
  std::size_t blocks_held = 0;
  std::size_t blocks_in_use = 0;
  std::uint64_t acquires = 0;
  std::uint64_t reuses = 0;          // acquires served by an idle block
  std::uint64_t pending_reuses = 0;  // ... whose fence was not ready yet (the caller had to wait)
  std::uint64_t allocations = 0;     // backend allocate() calls
  std::uint64_t deallocations = 0;   // backend deallocate() calls
};

// Plain host memory: the stand-in for pinned and device memory where there is no CUDA.
struct host_block_backend {
  struct fence_type {};
  static constexpr std::size_t alignment = 256;
  void* allocate(std::size_t bytes) { return ::operator new(bytes, std::align_val_t{alignment}); }
  void deallocate(void* p, std::size_t, fence_type&) noexcept { ::operator delete(p, std::align_val_t{alignment}); }
  fence_type make_fence() { return {}; }
  void destroy_fence(fence_type&) noexcept {}
  bool fence_ready(const fence_type&) noexcept { return true; }
};

namespace detail {

template <class Backend>
struct pool_block {
  void* data = nullptr;
  std::size_t capacity = 0;
  typename Backend::fence_type fence{};
  std::uint64_t last_used_epoch = 0;
  bool in_use = false;
};

template <class Backend>
class pool_state {
 public:
  using block = pool_block<Backend>;
  struct acquired {
    block* b;
    bool pending;  // its fence was not ready: the caller must wait on it before writing
  };

  pool_state(Backend backend, pool_limits limits, std::string name)
      : backend_(std::move(backend)), limits_(limits), name_(std::move(name)) {
    if (limits_.granularity_bytes == 0) limits_.granularity_bytes = 1;
    if (limits_.max_waste < 1.0) limits_.max_waste = 1.0;
    if (limits_.headroom < 0.0) limits_.headroom = 0.0;
  }
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;
  ~pool_state() {
    for (auto& b : blocks_) free_block(*b);
  }

  acquired acquire(std::size_t bytes) {
    const std::size_t want = round_up(bytes);
    std::lock_guard lock(mu_);
    ++stats_.acquires;
    block* ready = nullptr;
    block* pending = nullptr;
    std::size_t pending_idle_bytes = 0;  // idle blocks still used by queued asynchronous work
    for (auto& b : blocks_) {
      if (b->in_use) continue;
      const bool is_ready = backend_.fence_ready(b->fence);
      if (!is_ready) pending_idle_bytes += b->capacity;
      if (!fits(*b, bytes)) continue;
      block*& best = is_ready ? ready : pending;
      if (best == nullptr || b->capacity < best->capacity) best = b.get();
    }
    if (ready != nullptr) return take(ready, false, pending_idle_bytes);
    if (want > limits_.cap_bytes - std::min(limits_.cap_bytes, held_)) evict_for(want, bytes);
    if (held_ + want <= limits_.cap_bytes && want <= limits_.cap_bytes)
      return take(allocate(want), false, pending_idle_bytes);
    if (pending != nullptr) {
      // Its work may have finished since the look above: then nobody needs to wait on it.
      const bool still_pending = !backend_.fence_ready(pending->fence);
      return take(pending, still_pending, pending_idle_bytes - pending->capacity);
    }
    throw usage_error("sluice: " + name_ + " cannot hold " + std::to_string(want) + " more bytes under its cap of " +
                      std::to_string(limits_.cap_bytes) + " bytes (" + std::to_string(stats_.in_use_bytes) +
                      " bytes in use by " + std::to_string(stats_.blocks_in_use) +
                      " batches); raise the cap or hold fewer batches at once");
  }

  void release(block* b) noexcept {
    std::lock_guard lock(mu_);
    b->in_use = false;
    b->last_used_epoch = epoch_;
    stats_.in_use_bytes -= b->capacity;
    --stats_.blocks_in_use;
  }

  std::size_t end_epoch() {
    std::lock_guard lock(mu_);
    const std::size_t before = held_;
    if (limits_.idle_epochs > 0) {
      erase_idle_if([&](const block& b) { return b.last_used_epoch + limits_.idle_epochs <= epoch_; });
    }
    const double peak = static_cast<double>(std::max(stats_.peak_in_use_bytes, stats_.peak_demand_bytes));
    const double target = peak * (1.0 + limits_.headroom);
    shrink_largest_first([&] { return static_cast<double>(held_) > target; });
    ++epoch_;
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
    stats_.peak_demand_bytes = stats_.in_use_bytes;
    return before - held_;
  }

  std::size_t trim() {
    std::lock_guard lock(mu_);
    const std::size_t before = held_;
    erase_idle_if([](const block&) { return true; });
    return before - held_;
  }

  pool_stats stats() const {
    std::lock_guard lock(mu_);
    pool_stats s = stats_;
    s.held_bytes = held_;
    s.blocks_held = blocks_.size();
    return s;
  }
  const pool_limits& limits() const noexcept { return limits_; }
  Backend& backend() noexcept { return backend_; }
  std::uint64_t epoch() const {
    std::lock_guard lock(mu_);
    return epoch_;
  }

 private:
  std::size_t round_up(std::size_t bytes) const {
    const std::size_t g = limits_.granularity_bytes;
    const std::size_t n = bytes == 0 ? 1 : bytes;
    if (n > std::numeric_limits<std::size_t>::max() - g) throw usage_error("sluice: " + name_ + ": request too large");
    return (n + g - 1) / g * g;
  }
  bool fits(const block& b, std::size_t bytes) const {
    return b.capacity >= bytes &&
           static_cast<double>(b.capacity) <= static_cast<double>(std::max<std::size_t>(bytes, 1)) * limits_.max_waste +
                                                  static_cast<double>(limits_.granularity_bytes);
  }
  // pending_idle_bytes: idle blocks other than b whose fences were pending (for the demand peak).
  acquired take(block* b, bool pending, std::size_t pending_idle_bytes) {
    if (b->last_used_epoch != fresh_marker) {
      ++stats_.reuses;
      if (pending) ++stats_.pending_reuses;
    }
    b->in_use = true;
    b->last_used_epoch = epoch_;
    stats_.in_use_bytes += b->capacity;
    ++stats_.blocks_in_use;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    stats_.peak_demand_bytes = std::max(stats_.peak_demand_bytes, stats_.in_use_bytes + pending_idle_bytes);
    return {b, pending};
  }
  block* allocate(std::size_t bytes) {
    auto b = std::make_unique<block>();
    b->fence = backend_.make_fence();
    try {
      b->data = backend_.allocate(bytes);
    } catch (...) {
      backend_.destroy_fence(b->fence);
      throw;
    }
    b->capacity = bytes;
    b->last_used_epoch = fresh_marker;
    held_ += bytes;
    ++stats_.allocations;
    blocks_.reserve(blocks_.size() + 1);
    blocks_.push_back(std::move(b));
    return blocks_.back().get();
  }
  void free_block(block& b) noexcept {
    backend_.deallocate(b.data, b.capacity, b.fence);
    backend_.destroy_fence(b.fence);
    held_ -= b.capacity;
    ++stats_.deallocations;
  }
  bool freeable(const block& b) noexcept { return !b.in_use && backend_.fence_ready(b.fence); }
  template <class Pred>
  void erase_idle_if(Pred pred) {
    std::erase_if(blocks_, [&](const std::unique_ptr<block>& b) {
      if (!freeable(*b) || !pred(*b)) return false;
      free_block(*b);
      return true;
    });
  }
  // Frees idle, ready blocks, except those spare() keeps, largest first, while more() holds.
  template <class More, class Spare = bool (*)(const block&)>
  void shrink_largest_first(More more, Spare spare = [](const block&) { return false; }) {
    while (more()) {
      auto it = blocks_.end();
      for (auto i = blocks_.begin(); i != blocks_.end(); ++i)
        if (!spare(**i) && freeable(**i) && (it == blocks_.end() || (*i)->capacity > (*it)->capacity)) it = i;
      if (it == blocks_.end()) return;
      free_block(**it);
      blocks_.erase(it);
    }
  }
  // Makes room for `want` more bytes under the cap by freeing idle, ready blocks that cannot serve
  // the request. A block that fits is pending when acquire looked (else it would have been taken);
  // if its work has finished since, freeing it to allocate the same size again would be churn:
  // acquire hands it out instead.
  void evict_for(std::size_t want, std::size_t bytes) {
    shrink_largest_first([&] { return held_ + want > limits_.cap_bytes; },
                         [&](const block& b) { return fits(b, bytes); });
  }

  static constexpr std::uint64_t fresh_marker = std::numeric_limits<std::uint64_t>::max();
  Backend backend_;
  pool_limits limits_;
  std::string name_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<block>> blocks_;
  std::size_t held_ = 0;
  std::uint64_t epoch_ = 0;
  pool_stats stats_;
};

}  // namespace detail

// One block handed out by a pool; returns it on destruction. Move-only.
template <class Backend>
class pool_lease {
 public:
  using fence_type = typename Backend::fence_type;
  pool_lease() = default;
  pool_lease(std::shared_ptr<detail::pool_state<Backend>> state, detail::pool_block<Backend>* b, std::size_t size,
             bool was_pending) noexcept
      : state_(std::move(state)), block_(b), size_(size), was_pending_(was_pending) {}
  pool_lease(const pool_lease&) = delete;
  pool_lease& operator=(const pool_lease&) = delete;
  pool_lease(pool_lease&& o) noexcept
      : state_(std::move(o.state_)), block_(std::exchange(o.block_, nullptr)), size_(o.size_),
        was_pending_(o.was_pending_) {}
  pool_lease& operator=(pool_lease&& o) noexcept {
    if (this != &o) {
      reset();
      state_ = std::move(o.state_);
      block_ = std::exchange(o.block_, nullptr);
      size_ = o.size_;
      was_pending_ = o.was_pending_;
    }
    return *this;
  }
  ~pool_lease() { reset(); }

  // Returns the block to the pool now. Record the fence first if asynchronous work still uses it.
  void reset() noexcept {
    if (block_ != nullptr) state_->release(block_);
    block_ = nullptr;
    state_.reset();
  }
  [[nodiscard]] explicit operator bool() const noexcept { return block_ != nullptr; }
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(block_->data); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }           // bytes asked for
  [[nodiscard]] std::size_t capacity() const noexcept { return block_->capacity; }
  // The block's fence: record it before reset() while asynchronous work still reads or writes the
  // block; wait on it before writing when pending() says the last user may not be done.
  [[nodiscard]] fence_type& fence() const noexcept { return block_->fence; }
  [[nodiscard]] bool pending() const noexcept { return was_pending_; }

 private:
  std::shared_ptr<detail::pool_state<Backend>> state_;
  detail::pool_block<Backend>* block_ = nullptr;
  std::size_t size_ = 0;
  bool was_pending_ = false;
};

template <class Backend>
class block_pool {
 public:
  using lease = pool_lease<Backend>;
  explicit block_pool(Backend backend = {}, pool_limits limits = {}, std::string name = "block pool")
      : state_(std::make_shared<detail::pool_state<Backend>>(std::move(backend), limits, std::move(name))) {}

  // A block of at least `bytes` bytes. Throws usage_error when the cap cannot make room.
  [[nodiscard]] lease acquire(std::size_t bytes) {
    auto got = state_->acquire(bytes);
    return lease(state_, got.b, bytes, got.pending);
  }
  // Call at each epoch boundary: applies the shrink rule; returns the bytes freed.
  std::size_t end_epoch() { return state_->end_epoch(); }
  // Frees every idle block whose fence is ready; returns the bytes freed.
  std::size_t trim() { return state_->trim(); }
  [[nodiscard]] pool_stats stats() const { return state_->stats(); }
  [[nodiscard]] const pool_limits& limits() const noexcept { return state_->limits(); }
  [[nodiscard]] Backend& backend() noexcept { return state_->backend(); }

 private:
  std::shared_ptr<detail::pool_state<Backend>> state_;
};

}  // namespace sluice
