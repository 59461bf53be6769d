// sluice/core/stats.hpp — what the pipeline measures about itself, and how it stays cheap.
//
// Each worker owns a cache-line-aligned block of counters only it writes (relaxed atomics);
// loader.stats() merges them on read, so nothing on the hot path is shared. Per-stage busy time is
// sampled (one sample in stage_timing_stride, scaled back: unbiased, clock reads far below 1 % of
// the work); collate and the batch stages are timed per batch; a deferred decode times itself
// inside collate and is credited to its own stage. loader.epoch_stats(e) is the difference of two
// snapshots, kept for the last epoch_stats_kept runs; bottleneck() names the stage with the
// largest share of worker busy time. Every time is in nanoseconds, and names carry their unit.
// Threads: counters are written by their owner only and read from any thread.
// The vocabulary (consumer wait and busy, stall fraction, step jitter, wait percentiles, worker
// back-pressure, bytes in flight): docs/advisor.md.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/config.hpp"

namespace sluice {

inline constexpr std::size_t stage_timing_stride = 16;
inline constexpr std::size_t epoch_stats_kept = 16;  // epoch runs loader.epoch_stats() remembers

struct stage_stats {
  std::string_view name;
  std::uint64_t busy_ns = 0;  // estimated from sampled timings
  std::uint64_t calls = 0;    // exact: samples (per-sample stages, collate), batches (batch stages)
};

// What a stage says about itself, as named counters in the order it adds them. A per-sample stage
// with the optional hook `void report(sluice::stage_report&) const` (core/concepts.hpp) is asked
// on every loader.stats(); stage/cache.hpp's cache reports its tier (hits, misses, inserts,
// rejected, evictions, bytes, entries, capacity_bytes).
struct stage_report {
  std::string_view stage;  // the stage's name
  std::vector<std::pair<std::string, std::uint64_t>> counters;

  stage_report& add(std::string key, std::uint64_t value) {
    counters.emplace_back(std::move(key), value);
    return *this;
  }
  // The counter called `key`; 0 when the stage did not report it.
  [[nodiscard]] std::uint64_t operator[](std::string_view key) const noexcept {
    for (const auto& [k, v] : counters)
      if (k == key) return v;
    return 0;
  }
  [[nodiscard]] bool has(std::string_view key) const noexcept {
    for (const auto& kv : counters)
      if (kv.first == key) return true;
    return false;
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
  std::uint64_t helped_samples = 0;     // written by a worker helping another's batch
                                        // (loader_options::split_batches)
  std::vector<stage_stats> stages;      // per-sample stages in order, then "collate", then the batch
                                        // stages (pin, to_device): their worker-side hooks per batch
  std::vector<stage_report> reports;    // one per stage with a report hook, in pipeline order
  std::size_t depth = 0;                // current prefetch depth
  std::size_t workers = 0;              // active workers
  std::size_t capacity = 0;             // ring slots (max depth + max workers, + slots_grown)
  std::size_t slots_grown = 0;          // slots added for batches the trainer keeps
  std::size_t hold_budget = 0;          // the bytes those may take (loader_options::hold_budget)
  std::size_t ring_bytes = 0;           // storage the ring's slots hold now (kept batches included)
  std::size_t batch_bytes = 0;          // bytes of one slot
  std::size_t bytes_in_flight = 0;
  std::size_t peak_bytes_in_flight = 0;
  std::size_t peak_batches_in_flight = 0;
  std::size_t ready_batches = 0;        // filled, waiting for the consumer, at the time of reading
  std::size_t slots_warmed = 0;         // slots whose storage the warming thread allocated and
                                        // touched before their first batch (loader_options::warm_slots)
  [[nodiscard]] double samples_per_second() const noexcept {
    double t = static_cast<double>(consumer_wait_ns + consumer_busy_ns + warmup_wait_ns);
    return t > 0 ? static_cast<double>(samples) * 1e9 / t : 0.0;
  }
  // The first report of the stage called `name` (reports: in pipeline order), or nullptr.
  [[nodiscard]] const stage_report* report(std::string_view name) const noexcept {
    for (const auto& r : reports)
      if (r.stage == name) return &r;
    return nullptr;
  }
};

// One epoch run's share of the counters above (loader.epoch_stats(e)). Times in ns; a run that
// was resumed or cut short counts what it did. `complete` is false while the epoch still runs
// (the figures are those so far) and for a run the trainer left early.
struct epoch_stats {
  std::uint64_t epoch = 0;
  bool complete = false;
  std::uint64_t wall_ns = 0;             // from the epoch's start to its end (or now)
  std::uint64_t batches = 0;             // delivered to the consumer
  std::uint64_t samples = 0;
  std::uint64_t skipped = 0;
  std::uint64_t consumer_wait_ns = 0;    // after the first batch
  std::uint64_t consumer_busy_ns = 0;
  std::uint64_t warmup_wait_ns = 0;      // wait for the first batch
  double stall_fraction = 0.0;           // wait / (wait + busy), warm-up apart
  std::uint64_t steps = 0;               // timed steps (wait + busy between two batches)
  double step_std_ns = 0.0;              // their standard deviation: this epoch's step jitter
  std::uint64_t worker_busy_ns = 0;
  std::uint64_t worker_wait_ns = 0;
  std::vector<stage_stats> stages;       // as pipeline_stats::stages
};

// The stage that limits the workers: the largest share of worker busy time. Two stages may share
// a name (two maps): `index` is its place in `stages`. `share` is busy_ns over the larger of the
// stages' sum and the workers' busy time (so it never exceeds 1 although stage times are sampled
// estimates). An empty `stage` means nothing was measured.
struct bottleneck_stage {
  std::string_view stage;
  std::size_t index = 0;
  double share = 0.0;
  std::uint64_t busy_ns = 0;
};

[[nodiscard]] inline bottleneck_stage bottleneck(const std::vector<stage_stats>& stages,
                                                 std::uint64_t worker_busy_ns) noexcept {
  bottleneck_stage b;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    sum += stages[i].busy_ns;
    if (stages[i].busy_ns > b.busy_ns) b = {stages[i].name, i, 0.0, stages[i].busy_ns};
  }
  const std::uint64_t den = std::max(sum, worker_busy_ns);
  if (b.busy_ns == 0 || den == 0) return {};
  b.share = static_cast<double>(b.busy_ns) / static_cast<double>(den);
  return b;
}
[[nodiscard]] inline bottleneck_stage bottleneck(const epoch_stats& e) noexcept {
  return bottleneck(e.stages, e.worker_busy_ns);
}
[[nodiscard]] inline bottleneck_stage bottleneck(const pipeline_stats& s) noexcept {
  return bottleneck(s.stages, s.worker_busy_ns);
}

namespace detail {

inline std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Times a deferred sample's work for its stage into the context's timing_sink (core/concepts.hpp),
// when it has one: nothing is read from the clock otherwise.
class deferred_scope {
 public:
  deferred_scope(std::string_view stage, const sample_context& ctx) noexcept
      : sink_(ctx.timing), stage_(stage), t0_(sink_ != nullptr ? now_ns() : 0) {}
  deferred_scope(const deferred_scope&) = delete;
  deferred_scope& operator=(const deferred_scope&) = delete;
  ~deferred_scope() {
    if (sink_ != nullptr) sink_->add(stage_, now_ns() - t0_);
  }

 private:
  timing_sink* sink_;
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
  owned_counter helped;                   // samples this worker wrote into another worker's batch
  owned_counter stage_ns[Stages + 1];     // indices 0..Stages: see the loader's all_stage_names
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
      step_sq_s2_ += (step / 1e9) * (step / 1e9);
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
  [[nodiscard]] std::uint64_t warmup_wait_ns() const noexcept { return warmup_wait_ns_; }
  // Steps timed so far (every batch but each epoch's first) and the sum of their squares (s²):
  // with wait_ns() + busy_ns(), an epoch's step spread from two snapshots.
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }
  [[nodiscard]] double step_sq_s2() const noexcept { return step_sq_s2_; }

 private:
  std::vector<std::uint64_t> waits_;  // this epoch's per-batch waits
  bool first_ = true;
  std::uint64_t last_return_ns_ = 0, pending_busy_ = 0;
  std::uint64_t wait_ns_ = 0, busy_ns_ = 0, warmup_wait_ns_ = 0, all_waits_max_ = 0;
  std::uint64_t steps_ = 0;
  double mean_ = 0, m2_ = 0, step_sq_s2_ = 0;
};

// The loader's cumulative counters at one moment: an epoch's figures are the difference of two.
template <std::size_t Stages>
struct counter_snapshot {
  std::uint64_t epoch = 0, t_ns = 0;
  std::uint64_t batches = 0, samples = 0, skipped = 0;
  std::uint64_t consumer_wait_ns = 0, consumer_busy_ns = 0, warmup_wait_ns = 0;
  std::uint64_t steps = 0;
  double step_sq_s2 = 0;
  std::uint64_t worker_busy_ns = 0, worker_wait_ns = 0;
  std::uint64_t stage_ns[Stages + 1] = {}, stage_calls[Stages + 1] = {};
};

// One closed epoch run: where it started and where it ended.
template <std::size_t Stages>
struct epoch_record {
  counter_snapshot<Stages> begin, end;
  bool complete = false;
};

template <std::size_t Stages>
epoch_stats epoch_difference(const counter_snapshot<Stages>& a, const counter_snapshot<Stages>& b,
                             bool complete, const std::array<std::string_view, Stages + 1>& names) {
  epoch_stats e;
  e.epoch = a.epoch;
  e.complete = complete;
  e.wall_ns = b.t_ns - a.t_ns;
  e.batches = b.batches - a.batches;
  e.samples = b.samples - a.samples;
  e.skipped = b.skipped - a.skipped;
  e.consumer_wait_ns = b.consumer_wait_ns - a.consumer_wait_ns;
  e.consumer_busy_ns = b.consumer_busy_ns - a.consumer_busy_ns;
  e.warmup_wait_ns = b.warmup_wait_ns - a.warmup_wait_ns;
  const double total = static_cast<double>(e.consumer_wait_ns + e.consumer_busy_ns);
  e.stall_fraction = total > 0 ? static_cast<double>(e.consumer_wait_ns) / total : 0.0;
  e.steps = b.steps - a.steps;
  if (e.steps > 1) {  // the sample standard deviation, from the sums of the steps and their squares
    const double n = static_cast<double>(e.steps), mean_s = total / n / 1e9;
    const double var = std::max(0.0, (b.step_sq_s2 - a.step_sq_s2) / n - mean_s * mean_s) * n / (n - 1);
    e.step_std_ns = std::sqrt(var) * 1e9;
  }
  e.worker_busy_ns = b.worker_busy_ns - a.worker_busy_ns;
  e.worker_wait_ns = b.worker_wait_ns - a.worker_wait_ns;
  e.stages.resize(Stages + 1);
  for (std::size_t i = 0; i <= Stages; ++i) {
    e.stages[i].name = names[i];
    e.stages[i].busy_ns = b.stage_ns[i] - a.stage_ns[i];
    e.stages[i].calls = b.stage_calls[i] - a.stage_calls[i];
  }
  return e;
}

}  // namespace detail
}  // namespace sluice
