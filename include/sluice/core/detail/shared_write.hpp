// sluice/core/detail/shared_write.hpp — one batch's write, shared between workers (a part of
// the loader's ring, core/detail/ring.hpp; loader_options::split_batches).
//
// What: the owner of a batch publishes its samples and its collator's plan as a write_job; it and
// any helpers claim chunks of samples from one atomic counter and write them.
// Invariants: every sample is claimed by exactly one writer; the lowest sample that failed is kept
// with its error, every sample before it is written by whoever claimed it, and no sample after it
// is written once the failure is known (the batch is re-planned or fails); the plain fields are
// set by the owner before it opens the job and stay fixed until it has closed it and every helper
// has left (the ring's lock orders open/close, `helpers` and `open`).
// Threads: write_chunks runs on the owner and on each helper at once.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string_view>

namespace sluice::detail {

inline constexpr std::size_t no_failure = static_cast<std::size_t>(-1);

template <class Slot, class Sample, class Plan>
struct write_job {
  Slot* s = nullptr;
  const Sample* samples = nullptr;
  const std::uint64_t* positions = nullptr;
  const std::string_view* origins = nullptr;
  std::uint64_t epoch = 0, gen = 0, ticket = 0;
  std::size_t chunk = 1;
  Plan plan{};                                  // the owner's scratch as plan() left it
  bool open = false;                            // under the ring's lock: helpers may join
  std::size_t helpers = 0;                      // under the ring's lock: helpers inside
  std::atomic<std::size_t> n{0};                // samples (atomic: peeked at without the lock)
  std::atomic<std::size_t> next{0};             // the first sample no writer has claimed
  std::atomic<std::size_t> failed{no_failure};  // the lowest sample that failed to write
  std::mutex error_m;
  std::exception_ptr error;  // that sample's error (under error_m)

  [[nodiscard]] bool has_work() const noexcept {
    return next.load(std::memory_order_relaxed) < n.load(std::memory_order_relaxed);
  }

  // The owner, before it writes a batch (alone or opened to helpers): the run it belongs to and
  // the chunk size; `n` is stored when the samples are published.
  void reset(std::uint64_t gen_now, std::size_t chunk_size) noexcept {
    gen = gen_now;
    chunk = chunk_size;
    error = nullptr;
    failed.store(no_failure, std::memory_order_relaxed);
    next.store(0, std::memory_order_relaxed);
  }

  // Claims chunks and writes them with `write(i, plan)` until none is left, `cancelled()` says so
  // (checked before each sample), or a sample fails. `between()` runs before each claim. Returns
  // the samples this caller wrote.
  template <class P, class Cancelled, class Between, class Write>
  std::size_t write_chunks(P& plan_used, Cancelled&& cancelled, Between&& between, Write&& write) {
    std::size_t written = 0;
    const std::size_t total = n.load(std::memory_order_relaxed);
    for (;;) {
      if (cancelled()) return written;
      between();
      const std::size_t i0 = next.fetch_add(chunk, std::memory_order_relaxed);
      if (i0 >= total) return written;
      const std::size_t i1 = std::min(total, i0 + chunk);
      for (std::size_t i = i0; i < i1; ++i) {
        if (i > failed.load(std::memory_order_relaxed)) return written;
        // Cancelled (a new epoch, the loader destroyed): a batch written in one chunk (no split)
        // stops here too, within one sample's work, not after the whole batch.
        if (cancelled()) return written;
        try {
          write(i, plan_used);
          ++written;
        } catch (...) {
          std::lock_guard lk(error_m);
          if (i < failed.load(std::memory_order_relaxed)) {
            error = std::current_exception();
            failed.store(i, std::memory_order_relaxed);
          }
          next.store(total, std::memory_order_relaxed);
          return written;
        }
      }
    }
  }
};

}  // namespace sluice::detail
