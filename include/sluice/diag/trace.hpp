// sluice/diag/trace.hpp — Chrome trace events (open the file in https://ui.perfetto.dev or
// chrome://tracing) with bounded memory.
//
// A `trace_recorder` keeps the last `capacity` events in a ring: a long run costs a fixed amount of
// memory and the file shows its most recent part (dropped() says how many older events were
// overwritten). Events are the Trace Event Format's
//   complete events  "ph":"X"  a stage's work on one batch: name, ts, dur (microseconds), tid;
//   counters         "ph":"C"  a value over time, e.g. queue depth or bytes in flight;
//   thread names     "ph":"M"  so the viewer labels each row ("worker 0", "consumer").
// Timestamps are steady_clock time since the recorder was made.
//
// Thread-safety: every member may be called from any thread. One short mutex-guarded store per
// event — meant for batch-level events (hundreds to thousands a second), not per byte.
//
//   sluice::diag::trace_recorder trace{{.capacity = 1 << 16}};
//   { auto s = trace.scope("train_step"); step(); }          // one "X" event on this thread
//   trace.counter("queue_depth", 3);
//   trace.write("trace.json");
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/diag/json.hpp"

namespace sluice::diag {

// A small, stable id for the calling thread (1, 2, 3, ... in order of first use).
inline std::uint32_t trace_thread_id() noexcept {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

struct trace_options {
  std::size_t capacity = std::size_t{1} << 16;  // events kept (the most recent)
  std::uint32_t pid = 1;
};

struct trace_event {
  std::string name;
  char phase = 'X';         // 'X' complete, 'C' counter
  std::uint32_t tid = 0;
  std::int64_t ts_ns = 0;   // since the recorder's start
  std::int64_t dur_ns = 0;  // 'X' only
  double value = 0;         // 'C' only
};

class trace_recorder {
 public:
  using clock = std::chrono::steady_clock;

  explicit trace_recorder(trace_options opt = {}) : opt_(opt), start_(clock::now()) {
    if (opt_.capacity == 0) opt_.capacity = 1;
  }

  [[nodiscard]] clock::time_point start() const noexcept { return start_; }
  [[nodiscard]] std::int64_t now_ns() const noexcept { return since_start(clock::now()); }
  [[nodiscard]] std::int64_t since_start(clock::time_point t) const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
  }

  // A stage's work: [begin, end) on the calling thread (or on `tid`).
  void complete(std::string_view name, clock::time_point begin, clock::time_point end,
                std::uint32_t tid = trace_thread_id()) {
    push({std::string(name), 'X', tid, since_start(begin), since_start(end) - since_start(begin), 0});
  }
  void counter(std::string_view name, double value, clock::time_point at = clock::now()) {
    push({std::string(name), 'C', trace_thread_id(), since_start(at), 0, value});
  }
  // Labels the calling thread's row in the viewer.
  void name_thread(std::string_view name, std::uint32_t tid = trace_thread_id()) {
    std::lock_guard lock(mu_);
    for (auto& [t, n] : thread_names_) {
      if (t == tid) { n = std::string(name); return; }
    }
    thread_names_.emplace_back(tid, std::string(name));
  }

  // RAII: records one complete event from construction to destruction.
  class scoped {
   public:
    scoped(trace_recorder* r, std::string_view name) : r_(r), name_(name), begin_(clock::now()) {}
    scoped(const scoped&) = delete;
    scoped& operator=(const scoped&) = delete;
    ~scoped() { if (r_) r_->complete(name_, begin_, clock::now()); }
   private:
    trace_recorder* r_;
    std::string_view name_;
    clock::time_point begin_;
  };
  // `name` must outlive the scope (a literal, typically).
  [[nodiscard]] scoped scope(std::string_view name) { return scoped(this, name); }

  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mu_);
    return ring_.size();
  }
  [[nodiscard]] std::uint64_t dropped() const {
    std::lock_guard lock(mu_);
    return total_ - ring_.size();
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return opt_.capacity; }

  // Events oldest first.
  [[nodiscard]] std::vector<trace_event> events() const {
    std::lock_guard lock(mu_);
    std::vector<trace_event> out;
    out.reserve(ring_.size());
    for (std::size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(head_ + i) % ring_.size()]);
    return out;
  }

  // The whole trace as a Trace Event Format JSON object.
  [[nodiscard]] std::string to_json() const {
    auto evs = events();
    std::vector<std::pair<std::uint32_t, std::string>> names;
    std::uint64_t drop = 0;
    {
      std::lock_guard lock(mu_);
      names = thread_names_;
      drop = total_ - ring_.size();
    }
    json_writer w;
    w.begin_object().key("traceEvents").begin_array();
    for (const auto& [tid, n] : names) {
      w.begin_object().field("name", "thread_name").field("ph", "M").field("pid", opt_.pid)
          .field("tid", tid).key("args").begin_object().field("name", n).end_object().end_object();
    }
    for (const auto& e : evs) {
      w.begin_object().field("name", e.name).field("ph", std::string_view(&e.phase, 1))
          .field("pid", opt_.pid).field("tid", e.tid).field("ts", static_cast<double>(e.ts_ns) / 1e3);
      if (e.phase == 'X') {
        w.field("dur", static_cast<double>(e.dur_ns) / 1e3);
      } else {
        w.key("args").begin_object().field("value", e.value).end_object();
      }
      w.end_object();
    }
    w.end_array().field("displayTimeUnit", "ms");
    w.key("otherData").begin_object().field("producer", "sluice").field("dropped_events", drop)
        .end_object();
    w.end_object();
    return std::move(w).str();
  }
  void write(const std::string& path) const { write_text_file(path, to_json()); }

 private:
  void push(trace_event e) {
    std::lock_guard lock(mu_);
    ++total_;
    if (ring_.size() < opt_.capacity) {
      ring_.push_back(std::move(e));
    } else {
      ring_[head_] = std::move(e);
      head_ = (head_ + 1) % ring_.size();
    }
  }

  trace_options opt_;
  clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<trace_event> ring_;
  std::size_t head_ = 0;  // oldest event once the ring is full
  std::uint64_t total_ = 0;
  std::vector<std::pair<std::uint32_t, std::string>> thread_names_;
};

}  // namespace sluice::diag
