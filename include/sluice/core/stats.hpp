// sluice/core/stats.hpp — what the pipeline measures about itself, and how it stays cheap.
//
// Each worker owns a cache-line-aligned block of counters that only it writes (relaxed atomic
// stores, so a reader on another thread sees whole values without a data race); the consumer owns
// its own. `loader.stats()` merges them on read. Nothing on the hot path is shared between threads.
//
// Per-stage busy time is sampled: every `stage_timing_stride`-th sample of a worker is timed stage
// by stage and the result scaled by the stride, which keeps clock reads far below 1 % of the work
// while the totals stay unbiased (the sampled samples are evenly spread).
//
// Vocabulary (every time is in nanoseconds, names carry their unit):
//   consumer_wait_ns    time the trainer spent inside next() waiting for a batch
//   consumer_busy_ns    time the trainer spent between receiving a batch and asking for the next
//   stall_fraction      wait / (wait + busy), after the first batch of each epoch (warm-up apart)
//   step_mean_ns/std    mean and standard deviation of (wait + busy) per step: the step jitter
//   wait_p50/p95/max_ns distribution of the per-batch wait, warm-up batch included
//   worker_wait_ns      time workers spent blocked because the ring was full (back-pressure).
//                       This is the only wait upstream of the consumer: per-sample stages are
//                       fused into one function per sample, so no stage ever queues for another,
//                       and a stage's "wait" is its share of this back-pressure.
//   bytes_in_flight     slot bytes of batches being filled, ready or held by the trainer
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/config.hpp"

namespace sluice {

inline constexpr std::size_t stage_timing_stride = 16;

struct stage_stats {
  std::string_view name;
  std::uint64_t busy_ns = 0;  // estimated from sampled timings
  std::uint64_t calls = 0;    // exact
};

// A cache stage's counters as the pipeline reports them (stage/cache.hpp fills them from its tier).
struct cache_stage_stats {
  std::string_view stage;
  std::uint64_t hits = 0, misses = 0, inserts = 0, rejected = 0, evictions = 0;
  std::uint64_t bytes = 0, entries = 0, capacity_bytes = 0;
  [[nodiscard]] double hit_rate() const noexcept {
    return hits + misses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
};

struct pipeline_stats {
  std::uint64_t epochs = 0;
  std::uint64_t batches = 0;            // delivered to the consumer
  std::uint64_t samples = 0;            // collated and delivered
  std::uint64_t skipped = 0;            // dropped by the skip policy
  std::vector<std::string> skip_causes; // what() of the first skipped samples' errors (at most 16)
  std::uint64_t consumer_wait_ns = 0;
  std::uint64_t consumer_busy_ns = 0;
  std::uint64_t warmup_wait_ns = 0;     // wait for the first batch of each epoch
  double stall_fraction = 0.0;
  double step_mean_ns = 0.0;
  double step_std_ns = 0.0;
  std::uint64_t wait_p50_ns = 0;
  std::uint64_t wait_p95_ns = 0;
  std::uint64_t wait_max_ns = 0;
  std::uint64_t worker_busy_ns = 0;
  std::uint64_t worker_wait_ns = 0;
  std::vector<stage_stats> stages;      // per-sample stages in order, then "collate"
  std::vector<cache_stage_stats> caches;  // one per cache stage, in pipeline order
  std::size_t depth = 0;                // current prefetch depth
  std::size_t workers = 0;              // active workers
  std::size_t capacity = 0;             // ring slots (max depth + max workers)
  std::size_t batch_bytes = 0;          // bytes of one slot
  std::size_t bytes_in_flight = 0;
  std::size_t peak_bytes_in_flight = 0;
  std::size_t peak_batches_in_flight = 0;
  std::size_t ready_batches = 0;        // filled, waiting for the consumer, at the time of reading
  [[nodiscard]] double samples_per_second() const noexcept {
    double t = static_cast<double>(consumer_wait_ns + consumer_busy_ns + warmup_wait_ns);
    return t > 0 ? static_cast<double>(samples) * 1e9 / t : 0.0;
  }
};

namespace detail {

inline std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Work a deferred sample does for its stage inside collate (decode writes itself into the batch
// when collate asks): the sample adds its time here under its stage's name, and the loader moves
// it from collate's busy time to that stage's after each batch. One per thread, so no sharing.
struct deferred_time {
  std::string_view stage;
  std::uint64_t ns = 0;
};
inline thread_local deferred_time t_deferred_time{};

class deferred_scope {
 public:
  explicit deferred_scope(std::string_view stage) noexcept : stage_(stage), t0_(now_ns()) {}
  deferred_scope(const deferred_scope&) = delete;
  deferred_scope& operator=(const deferred_scope&) = delete;
  ~deferred_scope() {
    t_deferred_time.stage = stage_;
    t_deferred_time.ns += now_ns() - t0_;
  }

 private:
  std::string_view stage_;
  std::uint64_t t0_;
};

// A counter written by one thread and read by others.
class owned_counter {
 public:
  void add(std::uint64_t v) noexcept { v_.store(v_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }
  void reset() noexcept { v_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

template <std::size_t Stages>
struct alignas(cache_line) worker_counters {
  owned_counter busy_ns, wait_ns, samples, skipped;
  owned_counter stage_ns[Stages + 1];     // + collate
  owned_counter stage_calls[Stages + 1];
};

// Consumer-side measurements; written only by the consumer thread, read by stats() on the same
// thread or under the ring's mutex.
class consumer_clock {
 public:
  void begin_epoch(std::size_t expected_batches) {
    waits_.clear();
    waits_.reserve(std::max<std::size_t>(expected_batches, waits_.capacity()));
    first_ = true;
    last_return_ns_ = 0;
  }
  // Called when the consumer asks for the next batch and when it gets it.
  void on_request(std::uint64_t t) noexcept {
    if (last_return_ns_ != 0) pending_busy_ = t - last_return_ns_;
  }
  void on_receive(std::uint64_t request_ns, std::uint64_t t) {
    std::uint64_t wait = t - request_ns;
    if (waits_.size() < waits_.capacity()) waits_.push_back(wait);  // never grows mid-epoch
    all_waits_max_ = std::max(all_waits_max_, wait);
    if (first_) {
      warmup_wait_ns_ += wait;
      first_ = false;
    } else {
      wait_ns_ += wait;
      busy_ns_ += pending_busy_;
      double step = static_cast<double>(wait + pending_busy_);
      ++steps_;
      double d = step - mean_;
      mean_ += d / static_cast<double>(steps_);
      m2_ += d * (step - mean_);
    }
    pending_busy_ = 0;
    last_return_ns_ = t;
  }
  void fill(pipeline_stats& s) const {
    s.consumer_wait_ns = wait_ns_;
    s.consumer_busy_ns = busy_ns_;
    s.warmup_wait_ns = warmup_wait_ns_;
    double total = static_cast<double>(wait_ns_ + busy_ns_);
    s.stall_fraction = total > 0 ? static_cast<double>(wait_ns_) / total : 0.0;
    s.step_mean_ns = mean_;
    s.step_std_ns = steps_ > 1 ? std::sqrt(m2_ / static_cast<double>(steps_ - 1)) : 0.0;
    if (!waits_.empty()) {
      std::vector<std::uint64_t> w = waits_;  // stats() may allocate; the hot path does not
      auto q = [&](double p) {
        auto k = static_cast<std::size_t>(p * static_cast<double>(w.size() - 1) + 0.5);
        std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(k), w.end());
        return w[k];
      };
      s.wait_p50_ns = q(0.50);
      s.wait_p95_ns = q(0.95);
    }
    s.wait_max_ns = all_waits_max_;
  }
  [[nodiscard]] std::uint64_t wait_ns() const noexcept { return wait_ns_; }
  [[nodiscard]] std::uint64_t busy_ns() const noexcept { return busy_ns_; }

 private:
  std::vector<std::uint64_t> waits_;  // this epoch's per-batch waits
  bool first_ = true;
  std::uint64_t last_return_ns_ = 0, pending_busy_ = 0;
  std::uint64_t wait_ns_ = 0, busy_ns_ = 0, warmup_wait_ns_ = 0, all_waits_max_ = 0;
  std::uint64_t steps_ = 0;
  double mean_ = 0, m2_ = 0;
};

}  // namespace detail
}  // namespace sluice
