// sluice/core/detail/ring_slots.hpp — the ring's batch slots and their storage (a part of
// the loader's ring, core/detail/ring.hpp).
//
// What: a slot (the public batch_slot, its status, its batch stages' states, its sample ids) and
// the table of slots: the ring's own, then those it grew by for batches the trainer keeps, in
// chunks so that a slot never moves (workers and batch handles point at it); the storage rules
// (storage_size: how a slot's storage grows; warm_target: which slot the warming thread prepares
// next) as functions of the table alone; and touch_pages, which faults a slot's storage in.
// Invariants: slot i is at one address for the ring's life; the table only grows; a slot's
// `stage_state` points at its own `states`.
// Threads: the table grows under the ring's lock; slots past the ring's own are read under it too.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "sluice/core/batch.hpp"

namespace sluice::detail {

// warming: an unsized slot the warming thread is allocating and touching (counted as live by the
// ring, not claimable, not a batch).
enum class slot_status : std::uint8_t { free, filling, ready, failed, held, warming };

template <class States>
struct slot : slot_base {
  slot_status status = slot_status::free;
  std::exception_ptr error;
  States states;
  std::unique_ptr<std::uint64_t[]> id_store;
};

template <class Slot>
class slot_table {
 public:
  explicit slot_table(std::size_t base) : base_(base), size_(base), own_(std::make_unique<Slot[]>(base)) {
    for (std::size_t i = 0; i < base; ++i) own_[i].stage_state = &own_[i].states;
  }
  Slot& operator[](std::size_t i) noexcept {
    if (i < base_) return own_[i];
    i -= base_;
    return grown_[i / chunk][i % chunk];
  }
  const Slot& operator[](std::size_t i) const noexcept { return const_cast<slot_table&>(*this)[i]; }
  // Slots in the table: the ring's own (base()) and those it grew by.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t grown() const noexcept { return size_ - base_; }
  [[nodiscard]] bool is_grown(const Slot& s) const noexcept { return &s < own_.get() || &s >= own_.get() + base_; }
  // One more slot (allocates a chunk of them every `chunk` slots; may throw std::bad_alloc).
  void grow() {
    if (grown() % chunk == 0) {
      grown_.push_back(std::make_unique<Slot[]>(chunk));
      for (std::size_t i = 0; i < chunk; ++i) grown_.back()[i].stage_state = &grown_.back()[i].states;
    }
    ++size_;
  }

 private:
  static constexpr std::size_t chunk = 16;
  std::size_t base_, size_;
  std::unique_ptr<Slot[]> own_;
  std::vector<std::unique_ptr<Slot[]>> grown_;
};

// Writes one byte in every page of [p, p + n) (storage nothing reads yet), a MiB at a time between
// looks at `stop`.
// The storage a slot needs for `bytes` when it holds `have` (0: none) and the largest slot so far
// is `floor`, or 0 when what it holds will do. Never below `floor` (after warm-up every slot has
// the high-water mark, so which slot a batch lands in cannot decide whether it allocates); when it
// must grow for `bytes`, by a quarter at least (a slowly growing variable field reallocates a few
// times, not every batch); a whole number of cache lines, at least one.
inline std::size_t storage_size(std::size_t have, std::size_t bytes, std::size_t floor, std::size_t line) noexcept {
  bytes = std::max(bytes, line);
  if (have != 0 && have >= bytes && have >= floor) return 0;
  std::size_t want = std::max(bytes, floor);
  if (have != 0 && have < bytes) want = std::max(want, have + have / 4);
  return (want + line - 1) / line * line;
}

// The slot the warming thread should prepare next, or nullptr: the first free slot without storage,
// while fewer than `allowed` slots have storage or are in use (a ring sized for a high max depth,
// or a short epoch, gets no memory it may never use).
template <class Slot>
Slot* warm_target(slot_table<Slot>& slots, std::size_t allowed) noexcept {
  std::size_t sized = 0;
  Slot* target = nullptr;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto& c = slots[i];
    if (c.status != slot_status::free || c.data != nullptr) ++sized;
    else if (target == nullptr) target = &c;
  }
  return sized < allowed ? target : nullptr;
}

inline void touch_pages(std::byte* p, std::size_t n, const std::atomic<bool>& stop) noexcept {
  constexpr std::size_t page = 4096, step = std::size_t{1} << 20;
  if (n == 0) return;
  for (std::size_t off = 0; off < n; off += step) {
    if (stop.load(std::memory_order_relaxed)) return;
    const std::size_t end = off + step < n ? off + step : n;
    for (std::size_t i = off; i < end; i += page) static_cast<volatile std::byte*>(p)[i] = std::byte{0};
  }
  static_cast<volatile std::byte*>(p)[n - 1] = std::byte{0};
}

}  // namespace sluice::detail
