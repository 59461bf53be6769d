// sluice/diag/report.hpp — every statistic sluice measures, as JSON.
//
// One `to_json(json_writer&, const X&)` per kind of measurement: the pipeline's own stats (core/stats.hpp: stalls, step
// jitter, wait percentiles, per-stage busy time, bytes in flight), class balance, process memory, drift windows, the
// noise-scale verdict and the advisor's recommendations. A trainer composes them into one report:
//
//   sluice::diag::json_writer w;
//   w.begin_object().key("pipeline");  sluice::diag::to_json(w, loader.stats());
//   w.key("memory");                   sluice::diag::to_json(w, sluice::diag::read_process_memory());
//   w.key("epochs");                   sluice::diag::to_json(w, std::span(loader.recent_epochs()));
//   w.end_object();
//   sluice::diag::write_text_file("report.json", w.str());
//
// Per epoch (loader.epoch_stats(e), loader.recent_epochs()): each epoch's stall fraction, worker busy and wait,
// samples, batches, per-stage busy time with its share of worker time, and the bottleneck stage (core/stats.hpp's
// bottleneck()); the cumulative stats carry their bottleneck too. Times are written in the units their names carry
// (…_ns); derived fractions are 0..1.
// `record_pipeline_counters` puts the loader's live gauges (ready batches = queue depth, bytes in flight, stall
// fraction so far) on a Chrome trace as "ph":"C" counters; `record_epoch_counters` puts an epoch's per-stage shares of
// worker time and its stall fraction there at the epoch's end. What each figure means: docs/advisor.md.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/stats.hpp"
#include "sluice/diag/advisor.hpp"
#include "sluice/diag/class_balance.hpp"
#include "sluice/diag/drift.hpp"
#include "sluice/diag/json.hpp"
#include "sluice/diag/noise_scale.hpp"
#include "sluice/diag/proc_probe.hpp"
#include "sluice/diag/trace.hpp"

namespace sluice::diag {

// {"stage", "index", "share", "busy_ns"}, or null when nothing was timed.
inline void to_json(json_writer& w, const bottleneck_stage& b) {
  if (b.stage.empty()) {
    w.null();
    return;
  }
  w.begin_object().field("stage", b.stage).field("index", b.index).field("share", b.share)
      .field("busy_ns", b.busy_ns).end_object();
}

inline void to_json(json_writer& w, const pipeline_stats& s) {
  w.begin_object()
      .field("epochs", s.epochs).field("batches", s.batches).field("samples", s.samples)
      .field("skipped", s.skipped).array("skip_causes", s.skip_causes)
      .field("consumer_wait_ns", s.consumer_wait_ns)
      .field("consumer_busy_ns", s.consumer_busy_ns).field("warmup_wait_ns", s.warmup_wait_ns)
      .field("stall_fraction", s.stall_fraction).field("step_mean_ns", s.step_mean_ns)
      .field("step_std_ns", s.step_std_ns).field("wait_p50_ns", s.wait_p50_ns)
      .field("wait_p95_ns", s.wait_p95_ns).field("wait_max_ns", s.wait_max_ns)
      .field("worker_busy_ns", s.worker_busy_ns).field("worker_wait_ns", s.worker_wait_ns)
      .field("helped_samples", s.helped_samples)
      .field("samples_per_second", s.samples_per_second());
  w.key("stages").begin_array();
  for (const auto& st : s.stages) {
    w.begin_object().field("name", st.name).field("busy_ns", st.busy_ns).field("calls", st.calls).end_object();
  }
  w.end_array();
  w.key("bottleneck");
  to_json(w, bottleneck(s));
  w.key("reports").begin_array();
  for (const auto& r : s.reports) {
    w.begin_object().field("stage", r.stage);
    for (const auto& [k, v] : r.counters) w.field(k, v);
    w.end_object();
  }
  w.end_array()
      .field("depth", s.depth).field("workers", s.workers).field("capacity", s.capacity)
      .field("batch_bytes", s.batch_bytes).field("bytes_in_flight", s.bytes_in_flight)
      .field("peak_bytes_in_flight", s.peak_bytes_in_flight)
      .field("peak_batches_in_flight", s.peak_batches_in_flight).field("ready_batches", s.ready_batches)
      .field("slots_warmed", s.slots_warmed).field("slots_grown", s.slots_grown)
      .field("hold_budget", s.hold_budget).field("ring_bytes", s.ring_bytes)
      .end_object();
}

namespace detail {
// A stage's share of the worker time bottleneck() divides by.
inline double stage_share(const std::vector<stage_stats>& stages, std::uint64_t worker_busy_ns, std::size_t i) {
  std::uint64_t sum = 0;
  for (const auto& st : stages) sum += st.busy_ns;
  const std::uint64_t den = std::max(sum, worker_busy_ns);
  return den == 0 ? 0.0 : static_cast<double>(stages[i].busy_ns) / static_cast<double>(den);
}
}  // namespace detail

inline void to_json(json_writer& w, const epoch_stats& e) {
  w.begin_object()
      .field("epoch", e.epoch).field("complete", e.complete).field("wall_ns", e.wall_ns)
      .field("batches", e.batches).field("samples", e.samples).field("skipped", e.skipped)
      .field("consumer_wait_ns", e.consumer_wait_ns).field("consumer_busy_ns", e.consumer_busy_ns)
      .field("warmup_wait_ns", e.warmup_wait_ns).field("stall_fraction", e.stall_fraction)
      .field("steps", e.steps).field("step_std_ns", e.step_std_ns)
      .field("worker_busy_ns", e.worker_busy_ns).field("worker_wait_ns", e.worker_wait_ns);
  w.key("stages").begin_array();
  for (std::size_t i = 0; i < e.stages.size(); ++i) {
    const auto& st = e.stages[i];
    w.begin_object().field("name", st.name).field("busy_ns", st.busy_ns).field("calls", st.calls)
        .field("share", detail::stage_share(e.stages, e.worker_busy_ns, i)).end_object();
  }
  w.end_array();
  w.key("bottleneck");
  to_json(w, bottleneck(e));
  w.end_object();
}

inline void to_json(json_writer& w, std::span<const epoch_stats> es) {
  w.begin_array();
  for (const auto& e : es) to_json(w, e);
  w.end_array();
}

inline void to_json(json_writer& w, const class_balance_summary& s) {
  w.begin_object()
      .field("classes", s.classes).field("batches", s.batches).field("samples", s.samples)
      .field("unknown_labels", s.unknown_labels)
      .array("mean_count_per_batch", s.mean_count_per_batch)
      .array("count_std_across_batches", s.count_std_across_batches)
      .array("epoch_counts", s.epoch_counts)
      .field("class_std", s.class_std).field("mean_within_batch_std", s.mean_within_batch_std)
      .field("epoch_share_std_pct", s.epoch_share_std_pct).field("classes_unseen", s.classes_unseen)
      .field("longest_run", s.longest_run).field("longest_run_label", s.longest_run_label)
      .field("expected_longest_run_iid", s.expected_longest_run_iid)
      .field("non_iid_order", s.non_iid_order)
      .end_object();
}

inline void to_json(json_writer& w, const process_memory& m) {
  w.begin_object()
      .field("rss_bytes", m.rss_bytes).field("pss_bytes", m.pss_bytes).field("shmem_bytes", m.shmem_bytes)
      .field("minor_faults", m.minor_faults).field("major_faults", m.major_faults)
      .field("from_procfs", m.from_procfs)
      .end_object();
}

inline void to_json(json_writer& w, const epoch_memory& e) {
  w.begin_object().field("epoch", e.epoch).key("at_end");
  to_json(w, e.at_end);
  w.field("minor_faults_in_epoch", e.minor_faults_in_epoch)
      .field("major_faults_in_epoch", e.major_faults_in_epoch).end_object();
}

inline void to_json(json_writer& w, const drift_window& d) {
  w.begin_object()
      .field("index", d.index).field("batches", d.batches)
      .array("mean", d.mean).array("stddev", d.stddev)
      .array("shift_vs_previous_sigma", d.shift_vs_previous_sigma)
      .array("std_ratio_vs_previous", d.std_ratio_vs_previous)
      .array("shift_vs_reference_sigma", d.shift_vs_reference_sigma)
      .field("max_shift_vs_previous_sigma", d.max_shift_vs_previous_sigma)
      .field("max_shift_vs_reference_sigma", d.max_shift_vs_reference_sigma)
      .field("alert", d.alert)
      .end_object();
}

inline void to_json(json_writer& w, const noise_scale_verdict& v) {
  w.begin_object()
      .field("b_simple", v.b_simple).field("grad_sq_norm", v.grad_sq_norm)
      .field("trace_sigma", v.trace_sigma).field("measurements", v.measurements)
      .field("step_reduction_if_doubled", v.step_reduction_if_doubled)
      .field("larger_batch_pays", v.larger_batch_pays).field("message", v.message)
      .end_object();
}

inline void to_json(json_writer& w, const recommendation& r) {
  w.begin_object().field("rule", r.rule).field("severity", to_string(r.level)).field("message", r.message)
      .field("value", r.value).end_object();
}

inline void to_json(json_writer& w, std::span<const recommendation> rs) {
  w.begin_array();
  for (const auto& r : rs) to_json(w, r);
  w.end_array();
}

inline void to_json(json_writer& w, const epoch_observation& o) {
  w.begin_object()
      .field("epoch", o.epoch).field("step_time_s", o.step_time_s).field("wait_fraction", o.wait_fraction)
      .field("utilisation", o.consumer_utilisation()).field("validation_loss", o.validation_loss)
      .field("class_std", o.class_std).field("workers", o.workers).field("prefetch_depth", o.prefetch_depth)
      .field("worker_busy_fraction", o.worker_busy_fraction).field("rss_bytes", o.rss_bytes)
      .field("minor_faults", o.minor_faults).field("major_faults", o.major_faults)
      .field("drift_shift_sigma", o.drift_shift_sigma);
  w.key("bottleneck_stage");
  if (o.bottleneck_stage.empty()) w.null();
  else w.value(o.bottleneck_stage);
  w.field("bottleneck_share", o.bottleneck_share).field("comm_time_s", o.comm_time_s)
      .field("step_time_std_s", o.step_time_std_s).field("steps", o.steps).end_object();
}

// One rank's epoch (diag/ranks.hpp), per-step figures in seconds as the advisor reads them.
inline void to_json(json_writer& w, const rank_summary& r) {
  w.begin_object()
      .field("rank", r.rank).field("world", r.world).field("epoch", r.epoch).field("batches", r.batches)
      .field("samples", r.samples).field("step_s", r.step_s()).field("wait_per_step_s", r.wait_per_step_s())
      .field("stall_fraction", r.stall_fraction()).field("compute_per_step_s", r.compute_per_step_s())
      .field("wait_p50_s", static_cast<double>(r.wait_p50_ns) / 1e9).field("wait_p95_s", static_cast<double>(r.wait_p95_ns) / 1e9);
  w.key("comm_per_step_s");
  if (r.comm_measured) w.value(r.comm_per_step_s());
  else w.null();
  w.field("produce_per_batch_s", r.produce_per_batch_s()).field("samples_per_second", r.samples_per_second())
      .field("workers", r.workers);
  w.key("bottleneck_stage");
  if (r.stage().empty()) w.null();
  else w.value(r.stage());
  w.field("bottleneck_share", static_cast<double>(r.bottleneck_share_ppm) / 1e6).end_object();
}

// Queue depth, bytes in flight and the stall fraction so far as trace counters, at time `at`.
inline void record_pipeline_counters(trace_recorder& t, const pipeline_stats& s,
                                     trace_recorder::clock::time_point at = trace_recorder::clock::now()) {
  t.counter("ready_batches", static_cast<double>(s.ready_batches), at);
  t.counter("bytes_in_flight", static_cast<double>(s.bytes_in_flight), at);
  t.counter("stall_fraction", s.stall_fraction, at);
}

// One epoch's attribution as trace counters at `at` (its end, typically): "worker share: <stage>"
// for each stage (a name two stages share gets " #<index>"), 0..1, and "epoch stall_fraction".
inline void record_epoch_counters(trace_recorder& t, const epoch_stats& e,
                                  trace_recorder::clock::time_point at = trace_recorder::clock::now()) {
  for (std::size_t i = 0; i < e.stages.size(); ++i) {
    std::string name = "worker share: " + std::string(e.stages[i].name);
    std::size_t same = 0;
    for (const auto& st : e.stages) same += st.name == e.stages[i].name;
    if (same > 1) name += " #" + std::to_string(i);
    t.counter(name, detail::stage_share(e.stages, e.worker_busy_ns, i), at);
  }
  t.counter("epoch stall_fraction", e.stall_fraction, at);
}

}  // namespace sluice::diag
