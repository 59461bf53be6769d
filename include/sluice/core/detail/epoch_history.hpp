// sluice/core/detail/epoch_history.hpp — the loader's per-epoch figures as plain data (a part of
// the loader's ring, core/detail/ring.hpp).
//
// What: the running epoch run's counters at its start (and its end time, once it ended), and the
// last epoch_stats_kept - 1 closed runs in a fixed ring, each as a pair of counter snapshots; an
// epoch's figures are the difference of its pair (core/stats.hpp).
// Invariants: a run is opened once and closed once; closing files it over the oldest closed run
// when the ring is full; a run's end time, once marked, is its end (later snapshots do not move it);
// no allocation except the figures handed out.
// Threads: none; the loader calls it under its lock (tests/core/test_epoch_history.cpp, no thread).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "sluice/core/stats.hpp"

namespace sluice::detail {

template <std::size_t Stages>
class epoch_history {
 public:
  using snapshot = counter_snapshot<Stages>;
  using names = std::array<std::string_view, Stages + 1>;
  static constexpr std::size_t closed_kept = epoch_stats_kept - 1;  // + the running run

  // A run of epoch begin.epoch starts (the previous one must have been closed).
  void open(const snapshot& begin) noexcept {
    begin_ = begin;
    running_ = true;
    end_ns_ = 0;
  }
  // The running run ended at t_ns (its last batch was handed over, the trainer left it, or saw
  // its end); the first mark is its end, later ones are ignored.
  void mark_end(std::uint64_t t_ns) noexcept {
    if (end_ns_ == 0) end_ns_ = t_ns;
  }
  [[nodiscard]] bool ended() const noexcept { return end_ns_ != 0; }
  [[nodiscard]] bool running() const noexcept { return running_; }

  // Files the running run, its counters now at `end` (its end time, if marked, replaces end's).
  void close(snapshot end, bool complete) noexcept {
    if (!running_) return;
    auto& r = closed_[next_];
    r.begin = begin_;
    if (end_ns_ != 0) end.t_ns = end_ns_;
    r.end = end;
    r.complete = complete;
    next_ = (next_ + 1) % closed_kept;
    count_ = std::min(count_ + 1, closed_kept);
    running_ = false;
  }

  // The running run's figures from its start to `now` (or to its end, when it ended).
  [[nodiscard]] epoch_stats running_stats(snapshot now, bool complete, const names& n) const {
    if (end_ns_ != 0) now.t_ns = end_ns_;
    return epoch_difference(begin_, now, complete, n);
  }

  // The most recent run of epoch e (the running one first; now_fn() -> (snapshot, complete) gives
  // its figures so far), or nothing when e is not among the runs kept.
  template <class NowFn>
  [[nodiscard]] std::optional<epoch_stats> of_epoch(std::uint64_t e, const names& n, NowFn&& now_fn) const {
    if (running_ && begin_.epoch == e) {
      const auto [now, complete] = now_fn();
      return running_stats(now, complete, n);
    }
    for (std::size_t i = 0; i < count_; ++i) {
      const auto& r = closed_[(next_ + closed_kept - 1 - i) % closed_kept];
      if (r.begin.epoch == e) return epoch_difference(r.begin, r.end, r.complete, n);
    }
    return std::nullopt;
  }

  // Every run kept, oldest first, the running one (if any) last.
  template <class NowFn>
  [[nodiscard]] std::vector<epoch_stats> all(const names& n, NowFn&& now_fn) const {
    std::vector<epoch_stats> out;
    for (std::size_t i = count_; i-- > 0;) {
      const auto& r = closed_[(next_ + closed_kept - 1 - i) % closed_kept];
      out.push_back(epoch_difference(r.begin, r.end, r.complete, n));
    }
    if (running_) {
      const auto [now, complete] = now_fn();
      out.push_back(running_stats(now, complete, n));
    }
    return out;
  }

 private:
  snapshot begin_{};
  bool running_ = false;
  std::uint64_t end_ns_ = 0;
  std::array<epoch_record<Stages>, closed_kept> closed_{};
  std::size_t next_ = 0, count_ = 0;
};

}  // namespace sluice::detail
