// sluice/diag/advisor.hpp — turns measurements into what to change, with the numbers that say why.
//
// The advisor reads one `epoch_observation` per epoch (pipeline stats, the trainer's validation
// loss, the class-balance, memory and drift monitors) and applies its rules: R1 loader-speed
// (a loader that stalls under 15 % of the step is not the bottleneck), R2 prefetch-depth,
// R3 balance-or-workers (class-balanced sampling when the loss has flattened on a skewed feed,
// else the worker count that brings utilisation into 85-92 %), R4a memory-growth, R4b page-faults,
// R4c drift, R5 limiting-stage, R6 straggler-rank, R7 slowdown-cause. Each rule is a plain
// function, tested on traces recorded from real runs (tests/data/diag/); a recommendation carries
// the rule's id, a severity and a message that quotes the measured numbers. Every rule's exact
// thresholds and reasons: docs/advisor.md.
//
// `observe(epoch_stats, workers)` fills an observation's loader fields from one epoch's stats;
// `observe(ranks)` makes the job's observation from all ranks' summaries of an epoch.
// Threads: the advisor and its rules are plain functions of their inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/diag/ranks.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::diag {

inline constexpr double unmeasured = std::numeric_limits<double>::quiet_NaN();

struct epoch_observation {
  std::uint64_t epoch = 0;
  double step_time_s = unmeasured;             // mean consumer step (wait + compute)
  double wait_fraction = unmeasured;           // consumer wait / step time
  double utilisation = unmeasured;             // consumer busy fraction; 1 - wait_fraction if unset
  double validation_loss = unmeasured;
  double class_std = unmeasured;               // class_balance_summary::class_std
  double workers = unmeasured;
  double prefetch_depth = unmeasured;
  double worker_busy_fraction = unmeasured;
  double rss_bytes = unmeasured;
  double minor_faults = unmeasured;            // during this epoch
  double major_faults = unmeasured;            // during this epoch
  double drift_shift_sigma = unmeasured;       // drift_window::max_shift_vs_previous_sigma
  std::string bottleneck_stage;                // bottleneck(epoch_stats).stage; empty: unmeasured
  double bottleneck_share = unmeasured;        // its share of worker busy time, 0..1
  double comm_time_s = unmeasured;             // communication per step (the gradient all-reduce), trainer-measured
  double step_time_std_s = unmeasured;         // standard deviation of the steps (the step jitter)
  double steps = unmeasured;                   // steps the mean and the deviation are over

  [[nodiscard]] double consumer_utilisation() const noexcept {
    if (!std::isnan(utilisation)) return utilisation;
    return std::isnan(wait_fraction) ? unmeasured : 1.0 - wait_fraction;
  }
};

enum class severity { info, suggestion, warning };

[[nodiscard]] constexpr std::string_view to_string(severity s) noexcept {
  switch (s) {
    case severity::info: return "info";
    case severity::suggestion: return "suggestion";
    case severity::warning: return "warning";
  }
  return "?";
}

struct recommendation {
  std::string rule;        // "R1 loader-speed", ...
  severity level = severity::info;
  std::string message;     // what was measured and why, with the numbers
  double value = unmeasured;  // the recommended setting where there is one (depth, workers)
};

namespace detail {
inline std::string num(double x, const char* f = "%.3g") {
  char b[48];
  std::snprintf(b, sizeof b, f, x);
  return b;
}
inline std::string pct(double x) { return num(100 * x, "%.1f") + " %"; }

// Least-squares slope of y over x (epochs), last `k` points with a value.
// Fewer than `min_points` such points: unmeasured.
inline double slope_last(std::span<const epoch_observation> h, double epoch_observation::*field,
                         std::size_t k, std::size_t min_points = 2) {
  std::vector<std::pair<double, double>> pts;
  for (auto it = h.rbegin(); it != h.rend() && pts.size() < k; ++it) {
    if (!std::isnan((*it).*field)) pts.emplace_back(static_cast<double>(it->epoch), (*it).*field);
  }
  if (pts.size() < std::max<std::size_t>(min_points, 2)) return unmeasured;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = static_cast<double>(pts.size());
  for (auto [x, y] : pts) { sx += x; sy += y; sxx += x * x; sxy += x * y; }
  const double den = n * sxx - sx * sx;
  return den == 0 ? unmeasured : (n * sxy - sx * sy) / den;
}
}  // namespace detail

struct advisor_thresholds {
  double stall_matters = 0.15;       // R1
  double depth1_above = 0.85;        // R2
  double depth3_below = 0.60;        // R2
  double flat_loss_slope = 0.001;    // R3
  double class_std_skewed = 1.5;     // R3
  double util_low = 0.85, util_high = 0.92, util_target = 0.885;  // R3
  double rss_growth_fraction = 0.02; // R4a, per epoch
  double rss_growth_min_bytes = 8.0 * 1024 * 1024;
  double drift_sigma = 0.1;          // R4c
  double straggler_excess = 0.10;    // R6, of the mean step time
  double slowdown_matters = 0.10;    // R7, step time growth
  double slowdown_cause_share = 0.5; // R7, share of the growth that names a cause
};

// R1
inline std::optional<recommendation> rule_loader_speed(const epoch_observation& o,
                                                       const advisor_thresholds& t = {}) {
  if (std::isnan(o.wait_fraction)) return std::nullopt;
  recommendation r{"R1 loader-speed", severity::info, {}, unmeasured};
  if (o.wait_fraction < t.stall_matters) {
    r.message = "the consumer waits " + detail::pct(o.wait_fraction) + " of its step time (< " +
                detail::pct(t.stall_matters) + "): a faster loader can save at most that much; "
                "look at the model or the optimiser instead";
  } else {
    r.level = severity::warning;
    r.message = "the consumer waits " + detail::pct(o.wait_fraction) + " of its step time (>= " +
                detail::pct(t.stall_matters) + "): the loader is the bottleneck, up to " +
                detail::pct(o.wait_fraction) + " of training time is spent waiting for data";
  }
  return r;
}

// R2
inline std::optional<recommendation> rule_prefetch_depth(const epoch_observation& o,
                                                         const advisor_thresholds& t = {}) {
  const double u = o.consumer_utilisation();
  if (std::isnan(u)) return std::nullopt;
  const double depth = u > t.depth1_above ? 1 : (u < t.depth3_below ? 3 : 2);
  recommendation r{"R2 prefetch-depth", severity::info, {}, depth};
  std::string why = u > t.depth1_above ? "above " + detail::pct(t.depth1_above) + ": the loader keeps up, deeper prefetch only holds memory"
                  : u < t.depth3_below ? "below " + detail::pct(t.depth3_below) + ": a deeper queue absorbs the loader's jitter"
                                       : "between " + detail::pct(t.depth3_below) + " and " + detail::pct(t.depth1_above);
  r.message = "consumer utilisation " + detail::pct(u) + " " + why + " -> prefetch depth " +
              detail::num(depth, "%.0f");
  if (!std::isnan(o.prefetch_depth) && o.prefetch_depth != depth) {
    r.level = severity::suggestion;
    r.message += " (now " + detail::num(o.prefetch_depth, "%.0f") + ")";
  }
  return r;
}

// R3, on the history up to and including the latest epoch.
inline std::optional<recommendation> rule_balance_or_workers(std::span<const epoch_observation> h,
                                                             const advisor_thresholds& t = {}) {
  if (h.empty()) return std::nullopt;
  const auto& o = h.back();
  const double slope = detail::slope_last(h, &epoch_observation::validation_loss, 3, 3);
  if (!std::isnan(slope) && std::abs(slope) < t.flat_loss_slope && !std::isnan(o.class_std) &&
      o.class_std > t.class_std_skewed) {
    return recommendation{"R3 balance-or-workers", severity::suggestion,
                          "validation loss has flattened (slope " + detail::num(slope, "%.2g") +
                              " per epoch, |.| < " + detail::num(t.flat_loss_slope) +
                              ") while batches are skewed (class std " + detail::num(o.class_std) +
                              " samples per batch > " + detail::num(t.class_std_skewed) +
                              "): use class-balanced sampling, weighting each sample of a class of n by "
                              "1/log(1+n) (sample::inverse_log, the rule for a long tail: rare classes up, softly); "
                              "the alternatives are inverse_frequency 1/n (every class equal: stronger on a steep "
                              "tail, +6.0 against +1.3 points of balanced accuracy in sluice's demo at imbalance 100), "
                              "effective_number (1-b^n)/(1-b) (between the two) and power n^(q-1) or its "
                              "schedule (instance- to class-balanced); choose on a validation split, not the test set; "
                              "more epochs of this feed will not lift the rare classes",
                          unmeasured};
  }
  const double u = o.consumer_utilisation();
  if (std::isnan(u) || std::isnan(o.workers) || o.workers < 1) return std::nullopt;
  if (u < t.util_low) {
    const double w = std::ceil(o.workers * t.util_target / std::max(u, 1e-3));
    // More workers than the machine has cores cannot run at once: then say so, not a count.
    const double cores = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
    const std::string head = "consumer utilisation " + detail::pct(u) + " is below " + detail::pct(t.util_low) +
                             " with " + detail::num(o.workers, "%.0f") + " workers: ";
    if (w > 2 * cores)
      return recommendation{"R3 balance-or-workers", severity::suggestion,
                            head + "about " + detail::num(w, "%.0f") + " workers would bring it to " +
                                detail::pct(t.util_target) + ", and this machine has " + detail::num(cores, "%.0f") +
                                " cores: the loader cannot keep up by threads alone; a cheaper sample (smaller "
                                "decode, a cache, data prepared offline) or a longer step will (see R5)",
                            w};
    return recommendation{"R3 balance-or-workers", severity::suggestion,
                          head + "about " + detail::num(w, "%.0f") + " workers bring it to " + detail::pct(t.util_target) +
                              " (if the cores are there)",
                          w};
  }
  if (u > t.util_high) {
    if (o.workers < 2) return std::nullopt;  // one worker: nothing fewer to suggest
    if (std::isnan(o.worker_busy_fraction)) {
      return recommendation{"R3 balance-or-workers", severity::info,
                            "consumer utilisation " + detail::pct(u) + " is above " + detail::pct(t.util_high) +
                                ": the loader has headroom; fewer than " + detail::num(o.workers, "%.0f") +
                                " workers may do (worker busy time not measured)",
                            unmeasured};
    }
    const double w = std::max(1.0, std::ceil(o.workers * o.worker_busy_fraction / t.util_target));
    if (w >= o.workers) return std::nullopt;
    return recommendation{"R3 balance-or-workers", severity::info,
                          "consumer utilisation " + detail::pct(u) + " is above " + detail::pct(t.util_high) +
                              " and the " + detail::num(o.workers, "%.0f") + " workers are busy " +
                              detail::pct(o.worker_busy_fraction) + " of the time: " + detail::num(w, "%.0f") +
                              " workers would still keep up, freeing cores",
                          w};
  }
  return std::nullopt;
}

// R4a
inline std::optional<recommendation> rule_memory_growth(std::span<const epoch_observation> h,
                                                        const advisor_thresholds& t = {}) {
  std::vector<epoch_observation> pts;
  for (const auto& o : h) if (!std::isnan(o.rss_bytes)) pts.push_back(o);
  if (pts.size() < 3) return std::nullopt;
  const double slope = detail::slope_last(pts, &epoch_observation::rss_bytes, pts.size());
  const double first = pts.front().rss_bytes, total = pts.back().rss_bytes - first;
  if (std::isnan(slope) || slope <= t.rss_growth_fraction * first || total <= t.rss_growth_min_bytes) {
    return std::nullopt;
  }
  return recommendation{"R4a memory-growth", severity::warning,
                        "RSS grew from " + detail::num(first / 1048576, "%.1f") + " MiB to " +
                            detail::num(pts.back().rss_bytes / 1048576, "%.1f") + " MiB over " +
                            std::to_string(pts.size()) + " epochs (" + detail::num(slope / 1048576, "%.2f") +
                            " MiB per epoch): look for a leak or an unbounded cache",
                        slope};
}

// R4b
inline std::optional<recommendation> rule_page_faults(std::span<const epoch_observation> h,
                                                      const advisor_thresholds& = {}) {
  if (h.size() < 2) return std::nullopt;
  const auto& o = h.back();
  if (!std::isnan(o.major_faults) && o.major_faults > 0) {
    return recommendation{"R4b page-faults", severity::warning,
                          detail::num(o.major_faults, "%.0f") + " major page faults in epoch " +
                              std::to_string(o.epoch) + " (not the first): data is read from disk again, the page "
                              "cache does not hold the dataset; use a cache tier or more memory",
                          o.major_faults};
  }
  if (h.size() >= 3) {
    const double a = h[h.size() - 3].minor_faults, b = h[h.size() - 2].minor_faults, c = o.minor_faults;
    if (!std::isnan(a) && !std::isnan(b) && !std::isnan(c) && b > 1.5 * a && c > 1.5 * b && c > 1000) {
      return recommendation{"R4b page-faults", severity::warning,
                            "minor page faults climb epoch over epoch (" + detail::num(a, "%.0f") + ", " +
                                detail::num(b, "%.0f") + ", " + detail::num(c, "%.0f") +
                                "): memory is being unmapped and touched again; check buffer pooling",
                            c};
    }
  }
  return std::nullopt;
}

// R4c
inline std::optional<recommendation> rule_drift(const epoch_observation& o, const advisor_thresholds& t = {}) {
  if (std::isnan(o.drift_shift_sigma) || o.drift_shift_sigma <= t.drift_sigma) return std::nullopt;
  return recommendation{"R4c drift", severity::warning,
                        "channel mean moved " + detail::num(o.drift_shift_sigma) +
                            " standard deviations since the previous epoch (> " + detail::num(t.drift_sigma) +
                            "): BatchNorm running statistics from before are stale; recompute them "
                            "or keep the sampler fixed",
                        o.drift_shift_sigma};
}

// R5
inline std::string limiting_stage_remedy(std::string_view stage) {
  if (stage.rfind("decode", 0) == 0) return "add workers, lower the decode size, or move decode to the GPU";
  if (stage == "read")
    return "add workers (more reads in flight), put a cache tier in front of it, or move the data to faster storage";
  if (stage == "cache") return "the cache itself is slow: check its hit rate and size, or take it out";
  if (stage == "collate")
    return "collate is the gather into the batch, bound by memory bandwidth: add workers, or collate a narrower "
           "dtype (u8 instead of f32) and normalise on the GPU";
  return "add workers, make " + std::string(stage) + " cheaper, or move it to the GPU";
}

inline std::optional<recommendation> rule_limiting_stage(const epoch_observation& o,
                                                         const advisor_thresholds& t = {}) {
  if (std::isnan(o.wait_fraction) || o.wait_fraction < t.stall_matters || o.bottleneck_stage.empty() ||
      std::isnan(o.bottleneck_share)) {
    return std::nullopt;
  }
  return recommendation{"R5 limiting-stage", severity::warning,
                        o.bottleneck_stage + " is " + detail::pct(o.bottleneck_share) +
                            " of worker time while the consumer waits " + detail::pct(o.wait_fraction) +
                            " of its step: " + limiting_stage_remedy(o.bottleneck_stage),
                        o.bottleneck_share};
}

// An observation's loader fields from one epoch's stats (loader.epoch_stats(e)): step time, wait
// fraction, workers and their busy fraction, the bottleneck stage. `workers`: the active count.
inline epoch_observation observe(const epoch_stats& e, std::size_t workers) {
  epoch_observation o;
  o.epoch = e.epoch;
  const std::uint64_t steps = e.batches > 1 ? e.batches - 1 : 0;  // the first batch is warm-up
  if (steps > 0) {
    o.step_time_s = static_cast<double>(e.consumer_wait_ns + e.consumer_busy_ns) / static_cast<double>(steps) / 1e9;
    o.steps = static_cast<double>(steps);
  }
  if (e.steps > 1) o.step_time_std_s = e.step_std_ns / 1e9;  // R7's noise band
  if (e.consumer_wait_ns + e.consumer_busy_ns > 0) o.wait_fraction = e.stall_fraction;
  o.workers = static_cast<double>(workers);
  if (workers > 0 && e.wall_ns > 0)
    o.worker_busy_fraction = static_cast<double>(e.worker_busy_ns) / (static_cast<double>(workers) * static_cast<double>(e.wall_ns));
  if (const auto b = bottleneck(e); !b.stage.empty()) {
    o.bottleneck_stage = std::string(b.stage);
    o.bottleneck_share = b.share;
  }
  return o;
}

// R6, on one epoch's summaries from all ranks (check_rank_summaries first: a usage_error if they do
// not fit together). Fewer than two ranks or no timed step: nothing to compare.
inline std::optional<recommendation> rule_straggler_rank(std::span<const rank_summary> ranks,
                                                         const advisor_thresholds& t = {}) {
  check_rank_summaries(ranks);
  if (ranks.size() < 2) return std::nullopt;
  for (const auto& r : ranks)
    if (r.steps() == 0) return std::nullopt;
  const bool comm = comm_measured_everywhere(ranks);
  const std::size_t s = critical_rank_index(ranks);
  const auto& r = ranks[s];
  double step = 0;
  for (const auto& x : ranks) step += x.step_s();
  step /= static_cast<double>(ranks.size());
  const double others_lag = detail::median_except(ranks, s, [&](const rank_summary& x) { return lag_per_step_s(x, comm); });
  const double excess = lag_per_step_s(r, comm) - others_lag;
  if (step <= 0 || excess <= t.straggler_excess * step) return std::nullopt;
  const double others_wait = detail::median_except(ranks, s, [](const rank_summary& x) { return x.wait_per_step_s(); });
  const double others_compute = detail::median_except(ranks, s, [](const rank_summary& x) { return x.compute_per_step_s(); });
  const double d_data = r.wait_per_step_s() - others_wait;
  const double d_compute = comm ? r.compute_per_step_s() - others_compute : 0.0;
  const bool data = d_data >= d_compute;
  // A data straggler's loader must also be slower than the others' at making a batch: when every
  // loader is about as slow, the one that falls behind first waits and the others, whose loaders
  // run ahead while they wait at the synchronisation, do not; mending that rank alone would gain
  // only the difference in batch-making time. That is R1/R5's case (every loader too slow).
  const bool produce = std::all_of(ranks.begin(), ranks.end(), [](const rank_summary& x) { return x.produce_per_batch_s() > 0; });
  const double others_produce = detail::median_except(ranks, s, [](const rank_summary& x) { return x.produce_per_batch_s(); });
  if (data && produce && r.produce_per_batch_s() - others_produce <= t.straggler_excess * step) return std::nullopt;
  const std::string who = "rank " + std::to_string(r.rank) + " of " + std::to_string(r.world);
  std::string m = who + " is the straggler in epoch " + std::to_string(r.epoch) + ": it reaches each step's synchronisation " +
                  detail::num(excess * 1e3) + " ms after the other ranks (median), " + detail::pct(excess / step) +
                  " of the " + detail::num(step * 1e3) + " ms step, and every rank waits for it; ";
  if (data) {
    m += "it waits " + detail::num(r.wait_per_step_s() * 1e3) + " ms a step for data against " +
         detail::num(others_wait * 1e3) + " ms on the others (stall fraction " + detail::pct(r.stall_fraction()) +
         (r.wait_p95_ns > 0 ? ", p95 of its waits " + detail::num(static_cast<double>(r.wait_p95_ns) / 1e6) + " ms" : "") + ")";
    if (produce)
      m += " and its loader takes " + detail::num(r.produce_per_batch_s() * 1e3) + " ms to make a batch against " +
           detail::num(others_produce * 1e3) + " ms";
    m += ": its loader is the cause";
    if (!r.stage().empty())
      m += " (" + std::string(r.stage()) + " is " + detail::pct(static_cast<double>(r.bottleneck_share_ppm) / 1e6) +
           " of its worker time: " + limiting_stage_remedy(r.stage()) + ")";
    m += "; look also for another process, fewer cores or slower storage on that rank's node";
  } else {
    m += "it computes " + detail::num(r.compute_per_step_s() * 1e3) + " ms a step against " +
         detail::num(others_compute * 1e3) + " ms on the others while waiting " +
         detail::num(r.wait_per_step_s() * 1e3) + " ms for data: not the loader; check that rank's device "
         "(clocks, throttling, other processes on it) or its share of the work";
  }
  return recommendation{"R6 straggler-rank", severity::warning, std::move(m), static_cast<double>(r.rank)};
}

// R7, on the history up to and including the latest epoch.
inline std::optional<recommendation> rule_slowdown_cause(std::span<const epoch_observation> h,
                                                         const advisor_thresholds& t = {}) {
  if (h.size() < 2) return std::nullopt;
  const auto& o = h.back();
  auto timed = [](const epoch_observation& x) {
    return !std::isnan(x.step_time_s) && x.step_time_s > 0 && !std::isnan(x.wait_fraction);
  };
  if (!timed(o)) return std::nullopt;
  const epoch_observation* base = nullptr;
  for (std::size_t i = 0; i + 1 < h.size(); ++i)
    if (timed(h[i]) && (!base || h[i].step_time_s < base->step_time_s)) base = &h[i];
  if (!base) return std::nullopt;
  const double growth = o.step_time_s / base->step_time_s - 1;
  if (growth <= t.slowdown_matters) return std::nullopt;
  const double d_step = o.step_time_s - base->step_time_s;
  // The noise band (see the table at the top).
  const bool jitter = !std::isnan(o.step_time_std_s) && !std::isnan(base->step_time_std_s);
  if (jitter) {
    const double pooled = std::sqrt(0.5 * (o.step_time_std_s * o.step_time_std_s +
                                           base->step_time_std_s * base->step_time_std_s));
    if (d_step <= pooled) return std::nullopt;
    if (!std::isnan(o.steps) && !std::isnan(base->steps) && o.steps >= 1 && base->steps >= 1) {
      const double se = std::sqrt(o.step_time_std_s * o.step_time_std_s / o.steps +
                                  base->step_time_std_s * base->step_time_std_s / base->steps);
      if (d_step <= 3 * se) return std::nullopt;
    }
  }
  // The earlier epochs' own scatter: the latest must stand above their median by more than three
  // robust standard deviations (1.4826 x the median absolute deviation, which a slowdown that
  // began a few epochs ago does not inflate as a max-min spread would).
  std::vector<double> earlier;
  for (std::size_t i = 0; i + 1 < h.size(); ++i)
    if (timed(h[i])) earlier.push_back(h[i].step_time_s);
  if (earlier.size() >= 2) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const std::size_t n = v.size();
      return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    };
    const double m = median(earlier);
    for (auto& x : earlier) x = std::abs(x - m);
    if (o.step_time_s - m <= 3 * 1.4826 * median(earlier)) return std::nullopt;
  }
  const double wait0 = base->wait_fraction * base->step_time_s, wait1 = o.wait_fraction * o.step_time_s;
  const bool comm = !std::isnan(o.comm_time_s) && !std::isnan(base->comm_time_s);
  const double d_comm = comm ? o.comm_time_s - base->comm_time_s : unmeasured;
  auto ms = [](double s) { return detail::num(s * 1e3) + " ms"; };
  const std::string head = "step time rose " + detail::pct(growth) + " from epoch " + std::to_string(base->epoch) +
                           " to epoch " + std::to_string(o.epoch) + " (" + ms(base->step_time_s) + " -> " +
                           ms(o.step_time_s) + ")";
  const std::string stall = "data stall " + ms(wait0) + " -> " + ms(wait1) + " a step, stall fraction " +
                            detail::pct(base->wait_fraction) + " -> " + detail::pct(o.wait_fraction);
  const std::string comms = comm ? "communication " + ms(base->comm_time_s) + " -> " + ms(o.comm_time_s) + " a step" : "";
  recommendation r{"R7 slowdown-cause", severity::warning, {}, growth};
  if (wait1 - wait0 >= t.slowdown_cause_share * d_step) {
    r.message = head + " and the data stall grew with it (" + stall + (comm ? "; " + comms : "") +
                "): the loader is the cause; see R1 and R5 for what to change";
  } else if (comm && d_comm >= t.slowdown_cause_share * d_step) {
    // A loader that stalled a short step may keep up with a longer one: the stall then falls.
    const bool fell = wait1 < 0.5 * wait0 && wait0 - wait1 > 0.1 * d_step;
    r.message = head + (fell ? " while the data stall fell (" : " while the data stall stayed flat (") + stall +
                (!fell && base->wait_fraction >= 0.01 && o.wait_fraction < 0.9 * base->wait_fraction
                     ? ", the fraction falling because the step grew around it" : "") +
                "): the time went to communication (" + comms + "), not to the loader; a faster loader "
                "will not help: overlap the all-reduce with the backward pass, use larger gradient buckets or "
                "compression, or look at the network";
  } else if (comm) {
    r.message = head + " while the data stall and communication stayed flat (" + stall + "; " + comms +
                "): the step's own compute grew, not the loader; look at the model, the device or other "
                "processes on it";
  } else {
    r.message = head + " while the data stall stayed flat (" + stall + "): the time went outside the loader, to the step's compute or, in a "
                "distributed run, to communication (time the all-reduce, comm_time_s, to tell which)";
  }
  return r;
}

// The job's observation of one epoch from all ranks' summaries (R6's input): mean step time, and the
// data stall, communication, workers and limiting stage of the rank the others wait for.
inline epoch_observation observe(std::span<const rank_summary> ranks) {
  check_rank_summaries(ranks);
  epoch_observation o;
  o.epoch = ranks[0].epoch;
  double step = 0;
  std::size_t timed = 0;
  for (const auto& r : ranks)
    if (r.steps() > 0) { step += r.step_s(); ++timed; }
  const auto& c = ranks[critical_rank_index(ranks)];
  if (timed == 0 || c.steps() == 0) return o;
  o.step_time_s = step / static_cast<double>(timed);
  o.wait_fraction = std::min(1.0, c.wait_per_step_s() / o.step_time_s);
  if (comm_measured_everywhere(ranks)) o.comm_time_s = c.comm_per_step_s();
  o.workers = static_cast<double>(c.workers);
  if (c.workers > 0 && c.wall_ns > 0)
    o.worker_busy_fraction = static_cast<double>(c.worker_busy_ns) / (static_cast<double>(c.workers) * static_cast<double>(c.wall_ns));
  if (!c.stage().empty()) {
    o.bottleneck_stage = std::string(c.stage());
    o.bottleneck_share = static_cast<double>(c.bottleneck_share_ppm) / 1e6;
  }
  return o;
}

// All rules on the latest epoch of `history`.
inline std::vector<recommendation> advise(std::span<const epoch_observation> history,
                                          const advisor_thresholds& t = {}) {
  std::vector<recommendation> out;
  if (history.empty()) return out;
  auto add = [&](std::optional<recommendation> r) { if (r) out.push_back(std::move(*r)); };
  add(rule_loader_speed(history.back(), t));
  add(rule_prefetch_depth(history.back(), t));
  add(rule_balance_or_workers(history, t));
  add(rule_memory_growth(history, t));
  add(rule_page_faults(history, t));
  add(rule_drift(history.back(), t));
  add(rule_limiting_stage(history.back(), t));
  add(rule_slowdown_cause(history, t));
  return out;
}

// The same, with R6 on the latest epoch's rank summaries (history.back() is observe(ranks)).
inline std::vector<recommendation> advise(std::span<const epoch_observation> history,
                                          std::span<const rank_summary> ranks,
                                          const advisor_thresholds& t = {}) {
  auto out = advise(history, t);
  if (ranks.empty()) return out;
  if (auto r = rule_straggler_rank(ranks, t)) out.push_back(std::move(*r));
  return out;
}

// Epoch observations as CSV (header line of field names; missing values empty). The demo writes
// this; the advisor's tests replay it.
inline constexpr const char* epoch_csv_header =
    "epoch,step_time_s,wait_fraction,utilisation,validation_loss,class_std,workers,prefetch_depth,"
    "worker_busy_fraction,rss_bytes,minor_faults,major_faults,drift_shift_sigma,bottleneck_stage,"
    "bottleneck_share,comm_time_s,step_time_std_s,steps";

inline std::string to_csv_row(const epoch_observation& o) {
  std::string s = std::to_string(o.epoch);
  for (double v : {o.step_time_s, o.wait_fraction, o.utilisation, o.validation_loss, o.class_std,
                   o.workers, o.prefetch_depth, o.worker_busy_fraction, o.rss_bytes, o.minor_faults,
                   o.major_faults, o.drift_shift_sigma}) {
    s += ',';
    if (!std::isnan(v)) s += detail::num(v, "%.9g");
  }
  s += ',';
  for (char c : o.bottleneck_stage) s += c == ',' || c == '\n' ? '_' : c;  // a stage name has neither
  s += ',';
  if (!std::isnan(o.bottleneck_share)) s += detail::num(o.bottleneck_share, "%.9g");
  s += ',';
  if (!std::isnan(o.comm_time_s)) s += detail::num(o.comm_time_s, "%.9g");
  for (double v : {o.step_time_std_s, o.steps}) {
    s += ',';
    if (!std::isnan(v)) s += detail::num(v, "%.9g");
  }
  return s;
}

inline std::vector<epoch_observation> read_epoch_csv(const std::string& path) {
  // A regular file of at most 256 MiB: a FIFO is refused, not waited on.
  std::istringstream f(io::detail::read_small_file(path, std::size_t{256} << 20, "an epoch log"));
  std::string line;
  std::vector<epoch_observation> out;
  std::uint64_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#' || line.rfind("epoch,", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    // 13: recorded before the bottleneck columns, 15: before comm_time_s, 16: before the jitter
    if (cells.size() != 13 && cells.size() != 15 && cells.size() != 16 && cells.size() != 18) {
      throw format_error(path, {.record = lineno}, "expected 18 (or 16, 15, 13) comma-separated fields, found " +
                                                       std::to_string(cells.size()));
    }
    auto val = [&](std::size_t i) {
      if (cells[i].empty()) return unmeasured;
      try { return std::stod(cells[i]); } catch (const std::exception&) {
        throw format_error(path, {.record = lineno}, "field " + std::to_string(i + 1) + " is not a number");
      }
    };
    epoch_observation o;
    o.epoch = static_cast<std::uint64_t>(val(0));
    double epoch_observation::*fields[] = {
        &epoch_observation::step_time_s, &epoch_observation::wait_fraction,
        &epoch_observation::utilisation, &epoch_observation::validation_loss,
        &epoch_observation::class_std, &epoch_observation::workers,
        &epoch_observation::prefetch_depth, &epoch_observation::worker_busy_fraction,
        &epoch_observation::rss_bytes, &epoch_observation::minor_faults,
        &epoch_observation::major_faults, &epoch_observation::drift_shift_sigma};
    for (std::size_t i = 0; i < 12; ++i) o.*fields[i] = val(i + 1);
    if (cells.size() >= 15) {
      o.bottleneck_stage = cells[13];
      o.bottleneck_share = val(14);
    }
    if (cells.size() >= 16) o.comm_time_s = val(15);
    if (cells.size() == 18) {
      o.step_time_std_s = val(16);
      o.steps = val(17);
    }
    out.push_back(o);
  }
  return out;
}

}  // namespace sluice::diag
