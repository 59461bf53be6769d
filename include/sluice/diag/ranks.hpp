// sluice/diag/ranks.hpp — one rank's epoch as a fixed-size record, for a data-parallel trainer to
// gather across its ranks, and the job's view the advisor reads from all of them.
//
// sluice uses no communicator: at an epoch's end each rank makes a rank_summary from its
// loader.epoch_stats(e) (and, if it times it, its communication), the trainer gathers the records
// with its own collective (a byte gather: the record is trivially copyable, fixed-size, without
// pointers), and rule_straggler_rank (R6) names the rank the others wait for, while observe(ranks)
// makes the job's observation for the other rules. Without comm_ns only a data straggler can be
// named (a slow compute rank hides inside the others' all-reduce).
// Errors: check_rank_summaries refuses records of another layout (another sluice version or
// architecture) or whose rank, world and epoch do not fit together, with a usage_error naming the
// record. An example and what a rank can and cannot tell: docs/advisor.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/core/stats.hpp"

namespace sluice::diag {

// "SLRS" (sluice rank summary), a version, and the record's size: a record made by another build
// of this header or on a machine of other endianness does not match.
inline constexpr std::uint64_t rank_summary_layout = (0x534c5253ULL << 32) | (1ULL << 16) | 208ULL;

struct rank_summary {
  std::uint64_t layout = rank_summary_layout;
  std::uint64_t rank = 0, world = 1, epoch = 0;
  std::uint64_t batches = 0;          // delivered to this rank's trainer
  std::uint64_t samples = 0;
  std::uint64_t wall_ns = 0;          // the epoch's start to its end on this rank
  std::uint64_t wait_ns = 0;          // consumer wait for data, the first batch apart (the data stall)
  std::uint64_t busy_ns = 0;          // consumer time between batches (the step, communication included)
  std::uint64_t warmup_wait_ns = 0;   // wait for the first batch
  std::uint64_t wait_p50_ns = 0, wait_p95_ns = 0;  // per-batch wait distribution (0: not given)
  std::uint64_t comm_ns = 0;          // time in communication over the epoch's batches (trainer-measured)
  std::uint64_t comm_measured = 0;    // 1 when comm_ns was measured
  std::uint64_t workers = 0;
  std::uint64_t worker_busy_ns = 0, worker_wait_ns = 0;
  std::uint64_t bottleneck_share_ppm = 0;  // the limiting stage's share of worker busy time, per million
  char bottleneck_stage[64] = {};          // its name, NUL-terminated (cut to 63 characters)

  [[nodiscard]] std::uint64_t steps() const noexcept { return batches > 1 ? batches - 1 : 0; }
  // Mean step (wait + busy) in seconds; 0 when no step was timed.
  [[nodiscard]] double step_s() const noexcept { return per_step(wait_ns + busy_ns); }
  [[nodiscard]] double wait_per_step_s() const noexcept { return per_step(wait_ns); }
  // Communication per batch: comm_ns covers every batch (the trainer times each step's all-reduce).
  [[nodiscard]] double comm_per_step_s() const noexcept {
    return batches > 0 ? static_cast<double>(comm_ns) / static_cast<double>(batches) / 1e9 : 0.0;
  }
  // The step outside data wait and communication (the model's own work); with comm unmeasured it
  // is the whole busy time, communication included.
  [[nodiscard]] double compute_per_step_s() const noexcept {
    const double c = step_s() - wait_per_step_s() - (comm_measured ? comm_per_step_s() : 0.0);
    return c > 0 ? c : 0.0;
  }
  // The loader's time to make one batch: worker busy time per batch and worker (the workers run
  // side by side); 0 when not known.
  [[nodiscard]] double produce_per_batch_s() const noexcept {
    return batches > 0 && workers > 0
               ? static_cast<double>(worker_busy_ns) / static_cast<double>(batches) / static_cast<double>(workers) / 1e9
               : 0.0;
  }
  [[nodiscard]] double stall_fraction() const noexcept {
    const auto t = wait_ns + busy_ns;
    return t > 0 ? static_cast<double>(wait_ns) / static_cast<double>(t) : 0.0;
  }
  [[nodiscard]] double samples_per_second() const noexcept {
    return wall_ns > 0 ? static_cast<double>(samples) * 1e9 / static_cast<double>(wall_ns) : 0.0;
  }
  [[nodiscard]] std::string_view stage() const noexcept {
    return {bottleneck_stage, static_cast<std::size_t>(std::find(bottleneck_stage, bottleneck_stage + sizeof bottleneck_stage, '\0') -
                                                       bottleneck_stage)};
  }

 private:
  [[nodiscard]] double per_step(std::uint64_t ns) const noexcept {
    const auto s = steps();
    return s > 0 ? static_cast<double>(ns) / static_cast<double>(s) / 1e9 : 0.0;
  }
};

static_assert(std::is_trivially_copyable_v<rank_summary> && std::is_standard_layout_v<rank_summary>,
              "rank_summary travels as bytes");
inline constexpr std::size_t rank_summary_bytes = sizeof(rank_summary);
static_assert(rank_summary_bytes == (rank_summary_layout & 0xffff), "rank_summary_layout names the size");

// What the trainer adds to the loader's figures.
struct rank_extras {
  std::uint64_t workers = 0;                 // the loader's active workers (stats().workers)
  std::optional<std::uint64_t> comm_ns;      // time in communication over the epoch, if measured
};

// One rank's summary of one epoch, from loader.epoch_stats(e) on that rank. The overload taking
// loader.stats() as well adds the worker count and the distribution of this epoch's per-batch
// waits (p50, p95): read it at the epoch's end, before the next epoch begins, when the loader's
// wait distribution is still this epoch's.
[[nodiscard]] inline rank_summary summarize(const epoch_stats& e, std::uint64_t rank, std::uint64_t world,
                                            const rank_extras& x = {}) {
  if (world == 0 || rank >= world)
    throw usage_error("rank_summary: rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world));
  rank_summary s;
  s.rank = rank;
  s.world = world;
  s.epoch = e.epoch;
  s.batches = e.batches;
  s.samples = e.samples;
  s.wall_ns = e.wall_ns;
  s.wait_ns = e.consumer_wait_ns;
  s.busy_ns = e.consumer_busy_ns;
  s.warmup_wait_ns = e.warmup_wait_ns;
  if (x.comm_ns) {
    s.comm_ns = *x.comm_ns;
    s.comm_measured = 1;
  }
  s.workers = x.workers;
  s.worker_busy_ns = e.worker_busy_ns;
  s.worker_wait_ns = e.worker_wait_ns;
  if (const auto b = bottleneck(e); !b.stage.empty()) {
    s.bottleneck_share_ppm = static_cast<std::uint64_t>(b.share * 1e6 + 0.5);
    const auto n = std::min(b.stage.size(), sizeof s.bottleneck_stage - 1);
    std::memcpy(s.bottleneck_stage, b.stage.data(), n);
  }
  return s;
}

[[nodiscard]] inline rank_summary summarize(const epoch_stats& e, const pipeline_stats& now, std::uint64_t rank,
                                            std::uint64_t world, std::optional<std::uint64_t> comm_ns = std::nullopt) {
  rank_summary s = summarize(e, rank, world, {.workers = now.workers, .comm_ns = comm_ns});
  s.wait_p50_ns = now.wait_p50_ns;
  s.wait_p95_ns = now.wait_p95_ns;
  return s;
}

// The records of one epoch gathered from all ranks: one per rank, any order, the same world and
// epoch, this build's layout. Otherwise a usage_error naming the first record that does not fit.
inline void check_rank_summaries(std::span<const rank_summary> ranks) {
  if (ranks.empty()) throw usage_error("rank summaries: none given");
  std::vector<bool> seen(ranks.size(), false);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = ranks[i];
    const std::string which = "rank summary " + std::to_string(i);
    if (r.layout != rank_summary_layout)
      throw usage_error(which + ": layout word does not match this build of sluice (another version or architecture)");
    if (r.world != ranks.size())
      throw usage_error(which + ": world " + std::to_string(r.world) + ", but " + std::to_string(ranks.size()) +
                        " records were given");
    if (r.rank >= r.world || seen[r.rank])
      throw usage_error(which + ": rank " + std::to_string(r.rank) + " is out of range or repeated");
    seen[r.rank] = true;
    if (r.epoch != ranks[0].epoch)
      throw usage_error(which + ": epoch " + std::to_string(r.epoch) + ", rank summary 0 has epoch " +
                        std::to_string(ranks[0].epoch));
    if (r.bottleneck_stage[sizeof r.bottleneck_stage - 1] != '\0')
      throw usage_error(which + ": bottleneck stage name is not terminated");
  }
}

// The time a rank spends before it can join the step's synchronisation: data wait plus compute
// when communication was measured on every rank, data wait alone otherwise. The rank with the
// most is the one the others wait for.
[[nodiscard]] inline double lag_per_step_s(const rank_summary& r, bool comm_everywhere) noexcept {
  return r.wait_per_step_s() + (comm_everywhere ? r.compute_per_step_s() : 0.0);
}
[[nodiscard]] inline bool comm_measured_everywhere(std::span<const rank_summary> ranks) noexcept {
  return !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [](const rank_summary& r) { return r.comm_measured != 0; });
}
// Index (into `ranks`) of the rank the others wait for: the largest lag; the first on a tie.
[[nodiscard]] inline std::size_t critical_rank_index(std::span<const rank_summary> ranks) noexcept {
  const bool comm = comm_measured_everywhere(ranks);
  std::size_t c = 0;
  for (std::size_t i = 1; i < ranks.size(); ++i)
    if (lag_per_step_s(ranks[i], comm) > lag_per_step_s(ranks[c], comm)) c = i;
  return c;
}

namespace detail {
// Median of f over all ranks but index `skip`.
template <class F>
double median_except(std::span<const rank_summary> ranks, std::size_t skip, F f) {
  std::vector<double> v;
  v.reserve(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (i != skip) v.push_back(f(ranks[i]));
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace detail

}  // namespace sluice::diag
