// sluice/policy/workers.hpp — worker-count autotuning: hold the consumer's utilisation in a target band with the fewest
// worker threads.
//
// Once per window of batches the tuner looks at the consumer's utilisation u = busy / (busy + wait) and at how often it
// found the queue empty:
//   add    one worker when u < band_low AND the producer is the bottleneck: fewer than half the requests in the window
//          found a full queue (>= depth batches ready). A queue that is usually full while the consumer still waits
//          points at bursts, which depth absorbs (depth::adaptive's job), not at too few workers;
//   remove one worker when u > band_high (the consumer almost never waits: fewer threads would still keep it fed) for
//          `remove_windows` consecutive windows;
//   hold   inside the band.
// Anti-oscillation as in depth::adaptive: decisions at window ends only, a change restarts the window, and an add that
// undoes a removal doubles the removal patience. Changing the worker count never changes the batches: the loader is
// ticket-based (batch k is a pure function of (seed, epoch, k)), so any worker fills any ticket.
// Plugging in: the loader asks its depth policy for `update_workers(signal)` when it has one and applies the answer
// within [1, max_workers] (loader_options::max_workers threads exist; the others sleep). `with_workers{depth_policy,
// autotune}` adds the tuner to any depth policy (depth policies: docs/policies.md):
//
//   | sluice::prefetch(sluice::with_workers{sluice::depth::adaptive{}, sluice::workers::autotune{}},
//                      {.workers = 2, .max_workers = 8})
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "sluice/policy/depth.hpp"
#include "sluice/policy/depth_fixed.hpp"

namespace sluice {
namespace workers {

struct autotune_options {
  std::size_t min = 1;
  std::size_t max = 64;  // the loader also clamps to its max_workers
  double band_low = 0.85;
  double band_high = 0.92;
  std::uint64_t window = 32;
  std::uint64_t remove_windows = 2;
  std::uint64_t max_remove_windows = 64;
};

class autotune {
 public:
  explicit autotune(autotune_options o = {}) : opt_(o), patience_(std::max<std::uint64_t>(1, o.remove_windows)) {
    opt_.min = std::max<std::size_t>(1, opt_.min);
    opt_.max = std::max(opt_.min, opt_.max);
  }
  // New worker count for the loader (s.workers is the current one).
  std::size_t update(const depth_signal& s) {
    const std::size_t w = std::clamp(std::max<std::size_t>(1, s.workers), opt_.min, opt_.max);
    window_.add(s);
    if (window_.batches < std::max<std::uint64_t>(1, opt_.window)) return w;
    const double u = 1.0 - window_.stall_fraction();
    const bool producer_bound = 2 * window_.full_requests < window_.batches;
    window_.reset();
    last_utilization_ = u;
    if (u < opt_.band_low && producer_bound && w < opt_.max) {
      high_windows_ = 0;
      if (last_change_ < 0) patience_ = std::min(opt_.max_remove_windows, patience_ * 2);
      return change(w, w + 1);
    }
    high_windows_ = u > opt_.band_high ? high_windows_ + 1 : 0;
    if (high_windows_ >= patience_ && w > opt_.min) {
      high_windows_ = 0;
      return change(w, w - 1);
    }
    return w;
  }
  [[nodiscard]] std::uint64_t changes() const noexcept { return changes_; }
  [[nodiscard]] double last_utilization() const noexcept { return last_utilization_; }

 private:
  std::size_t change(std::size_t from, std::size_t to) {
    ++changes_;
    last_change_ = to > from ? 1 : -1;
    return to;
  }
  autotune_options opt_;
  detail::signal_window window_;
  std::uint64_t patience_;
  std::uint64_t high_windows_ = 0, changes_ = 0;
  double last_utilization_ = 1.0;
  int last_change_ = 0;
};

}  // namespace workers

// A depth policy that also tunes the worker count (the loader calls update_workers when present).
template <depth_policy Depth, class Workers = workers::autotune>
struct with_workers {
  Depth depth;
  Workers workers{};
  [[nodiscard]] std::size_t initial_depth() const { return depth.initial_depth(); }
  [[nodiscard]] std::size_t max_depth() const { return depth.max_depth(); }
  std::size_t update(const depth_signal& s) { return depth.update(s); }
  std::size_t update_workers(const depth_signal& s) { return workers.update(s); }
};
template <class D, class W>
with_workers(D, W) -> with_workers<D, W>;

namespace depth {

// A depth policy, and optionally the worker tuner, chosen at run time — for a command line or a
// binding's keywords, where each choice being its own loader type would multiply the types to
// compile. One branch per delivered batch, nothing per sample.
//
//   auto p = sluice::depth::runtime::fixed(2);                          // depth::fixed{2}
//   auto p = sluice::depth::runtime::adaptive({.ram_budget_bytes = 1ull << 30})
//                .tune_workers({.max = 8});                             // + workers::autotune
//   | sluice::prefetch(p, {.workers = 2, .max_workers = 8})
class runtime {
 public:
  static runtime fixed(std::size_t n) { return runtime(depth::fixed{n}); }
  static runtime adaptive(adaptive_options o = {}) { return runtime(depth::adaptive(o)); }
  runtime& tune_workers(workers::autotune_options o = {}) {
    tuner_.emplace(o);
    return *this;
  }

  [[nodiscard]] bool is_adaptive() const noexcept { return adaptive_.has_value(); }
  [[nodiscard]] bool tunes_workers() const noexcept { return tuner_.has_value(); }
  [[nodiscard]] std::size_t initial_depth() const { return adaptive_ ? adaptive_->initial_depth() : fixed_.initial_depth(); }
  [[nodiscard]] std::size_t max_depth() const { return adaptive_ ? adaptive_->max_depth() : fixed_.max_depth(); }
  std::size_t update(const depth_signal& s) { return adaptive_ ? adaptive_->update(s) : fixed_.update(s); }
  // Without the tuner: the worker count stays as it is.
  std::size_t update_workers(const depth_signal& s) { return tuner_ ? tuner_->update(s) : s.workers; }

 private:
  explicit runtime(depth::fixed f) : fixed_(f) {}
  explicit runtime(depth::adaptive a) : adaptive_(std::move(a)) {}
  depth::fixed fixed_{};
  std::optional<depth::adaptive> adaptive_;
  std::optional<workers::autotune> tuner_;
};

}  // namespace depth

}  // namespace sluice
