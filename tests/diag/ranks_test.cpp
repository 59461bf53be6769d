// Rank summaries (diag/ranks.hpp) and the rules over them: R6 straggler-rank on one epoch's
// summaries from all ranks, R7 slowdown-cause on the job's history (advisor.hpp). No MPI here:
// the records are made as a trainer's gather would deliver them (examples/mpi_sharded runs them
// under mpirun).
#include <doctest/doctest.h>

#include <sluice/diag/advisor.hpp>
#include <sluice/diag/ranks.hpp>
#include <sluice/diag/report.hpp>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

using namespace sluice::diag;

namespace {
// A rank's epoch of `steps` timed steps (+ the warm-up batch): per step `wait_ms` for data,
// `busy_ms` between batches, of which `comm_ms` in communication (negative: not measured); its
// 2 workers take `produce_ms` to make a batch (negative: wait_ms + 1, a loader as slow as it waits).
rank_summary rank_of(std::uint64_t rank, std::uint64_t world, double wait_ms, double busy_ms,
                     double comm_ms = -1, double produce_ms = -1, std::uint64_t steps = 50, std::uint64_t epoch = 3) {
  sluice::epoch_stats e;
  e.epoch = epoch;
  e.batches = steps + 1;
  e.samples = e.batches * 32;
  e.consumer_wait_ns = static_cast<std::uint64_t>(wait_ms * 1e6 * static_cast<double>(steps));
  e.consumer_busy_ns = static_cast<std::uint64_t>(busy_ms * 1e6 * static_cast<double>(steps));
  e.wall_ns = e.consumer_wait_ns + e.consumer_busy_ns + 1000000;
  if (produce_ms < 0) produce_ms = wait_ms + 1;
  e.worker_busy_ns = static_cast<std::uint64_t>(produce_ms * 1e6 * 2 * static_cast<double>(e.batches));
  e.stages = {{"read", e.worker_busy_ns / 10 * 9, 10}, {"collate", e.worker_busy_ns / 10, 10}};
  return summarize(e, rank, world,
                   {.workers = 2, .comm_ns = comm_ms < 0 ? std::nullopt
                                                         : std::optional(static_cast<std::uint64_t>(comm_ms * 1e6 * static_cast<double>(steps + 1)))});
}
}  // namespace

TEST_CASE("rank summary: made from epoch_stats, carried as bytes") {
  const auto s = rank_of(1, 4, 2.0, 8.0, 1.0);
  CHECK(s.rank == 1);
  CHECK(s.world == 4);
  CHECK(s.epoch == 3);
  CHECK(s.steps() == 50);
  CHECK(s.step_s() == doctest::Approx(0.010));
  CHECK(s.wait_per_step_s() == doctest::Approx(0.002));
  CHECK(s.comm_per_step_s() == doctest::Approx(0.001));
  CHECK(s.compute_per_step_s() == doctest::Approx(0.007));
  CHECK(s.stall_fraction() == doctest::Approx(0.2));
  CHECK(s.samples_per_second() == doctest::Approx(51.0 * 32 / 0.501));
  CHECK(s.produce_per_batch_s() == doctest::Approx(0.003));
  CHECK(s.stage() == "read");
  CHECK(s.bottleneck_share_ppm == 900000);
  CHECK(s.workers == 2);
  CHECK(s.comm_measured == 1);
  CHECK(rank_of(0, 4, 2.0, 8.0).comm_measured == 0);
  CHECK(rank_of(0, 4, 2.0, 8.0).compute_per_step_s() == doctest::Approx(0.008));  // comm inside busy

  // What MPI_Allgather(MPI_BYTE) does: the bytes of each record side by side.
  std::vector<unsigned char> wire(2 * rank_summary_bytes);
  const rank_summary a = rank_of(0, 2, 1.0, 9.0, 2.0), b = rank_of(1, 2, 3.0, 7.0, 0.5);
  std::memcpy(wire.data(), &a, sizeof a);
  std::memcpy(wire.data() + rank_summary_bytes, &b, sizeof b);
  std::vector<rank_summary> back(2);
  std::memcpy(back.data(), wire.data(), wire.size());
  CHECK(std::memcmp(&back[1], &b, sizeof b) == 0);
  CHECK_NOTHROW(check_rank_summaries(back));
  CHECK(back[1].stage() == "read");

  CHECK_THROWS_AS((void)summarize(sluice::epoch_stats{}, 4, 4), sluice::usage_error);
  // As a trainer writes it: a count of nanoseconds it timed, the loader's worker count.
  const std::uint64_t comm = 5000;
  const std::size_t workers = 3;
  const auto t = summarize(sluice::epoch_stats{}, 0, 1, {.workers = workers, .comm_ns = comm});
  CHECK(t.comm_ns == 5000);
  CHECK(t.comm_measured == 1);
  CHECK(t.workers == 3);
  CHECK(t.stage().empty());
  // With loader.stats() read at the epoch's end: workers and this epoch's wait distribution.
  sluice::pipeline_stats now;
  now.workers = 4;
  now.wait_p50_ns = 1000;
  now.wait_p95_ns = 9000;
  const auto u = summarize(sluice::epoch_stats{}, now, 1, 2, comm);
  CHECK(u.workers == 4);
  CHECK(u.wait_p50_ns == 1000);
  CHECK(u.wait_p95_ns == 9000);
  CHECK(u.comm_ns == 5000);
  CHECK(summarize(sluice::epoch_stats{}, now, 1, 2).comm_measured == 0);
}

TEST_CASE("rank summaries that do not fit together are refused, naming the record") {
  std::vector<rank_summary> r = {rank_of(0, 3, 1, 9), rank_of(1, 3, 1, 9), rank_of(2, 3, 1, 9)};
  CHECK_NOTHROW(check_rank_summaries(r));
  auto bad = r;
  bad[2].layout ^= 1;
  CHECK_THROWS_WITH_AS(check_rank_summaries(bad), doctest::Contains("rank summary 2: layout"), sluice::usage_error);
  bad = r;
  bad[1].rank = 0;
  CHECK_THROWS_WITH_AS(check_rank_summaries(bad), doctest::Contains("repeated"), sluice::usage_error);
  bad = r;
  bad[2].epoch = 4;
  CHECK_THROWS_WITH_AS(check_rank_summaries(bad), doctest::Contains("rank summary 2: epoch 4"), sluice::usage_error);
  CHECK_THROWS_WITH_AS(check_rank_summaries(std::span<const rank_summary>(r.data(), 2)),
                       doctest::Contains("world 3"), sluice::usage_error);
  CHECK_THROWS_AS(rule_straggler_rank(std::span<const rank_summary>()), sluice::usage_error);
}

TEST_CASE("R6 names the rank that waits for data, and its loader's limiting stage") {
  // Rank 2 waits 6 ms a step for data; the others wait for it inside their 9 ms busy time.
  std::vector<rank_summary> r = {rank_of(0, 4, 0.1, 9.0), rank_of(1, 4, 0.2, 9.0), rank_of(2, 4, 6.0, 3.1),
                                 rank_of(3, 4, 0.1, 9.0)};
  auto rec = rule_straggler_rank(r);
  REQUIRE(rec);
  CHECK(rec->rule == "R6 straggler-rank");
  CHECK(rec->level == severity::warning);
  CHECK(rec->value == 2);
  CHECK(rec->message.rfind("rank 2 of 4 is the straggler in epoch 3", 0) == 0);
  CHECK(rec->message.find("it waits 6 ms a step for data against 0.1 ms") != std::string::npos);
  CHECK(rec->message.find("its loader takes 7 ms to make a batch against 1.1 ms") != std::string::npos);
  CHECK(rec->message.find("its loader is the cause (read is 90.0 % of its worker time: add workers") != std::string::npos);

  // Order of the records does not matter: the rank is named, not the index.
  std::swap(r[0], r[2]);
  rec = rule_straggler_rank(r);
  REQUIRE(rec);
  CHECK(rec->value == 2);

  // Balanced ranks: no straggler.
  const std::vector<rank_summary> even = {rank_of(0, 2, 0.5, 9.0), rank_of(1, 2, 0.6, 9.0)};
  CHECK(!rule_straggler_rank(even));
  // One rank: nothing to compare.
  const std::vector<rank_summary> one = {rank_of(0, 1, 5.0, 5.0)};
  CHECK(!rule_straggler_rank(one));
}

TEST_CASE("R6: every loader about as slow is no straggler, although one rank waits and the others do not") {
  // Rank 0's loader makes a batch in 7.7 ms, rank 1's in 7.4 ms: rank 0 falls behind and waits
  // 4.5 ms a step; rank 1's loader runs ahead while rank 1 waits in the all-reduce.
  const std::vector<rank_summary> alike = {rank_of(0, 2, 4.5, 3.3, 0.2, 7.7), rank_of(1, 2, 0.3, 7.5, 4.2, 7.4)};
  CHECK(!rule_straggler_rank(alike));
  // The same waits with rank 0's loader clearly slower: it is the straggler.
  const std::vector<rank_summary> slower = {rank_of(0, 2, 4.5, 3.3, 0.2, 9.0), rank_of(1, 2, 0.3, 7.5, 4.2, 7.4)};
  const auto rec = rule_straggler_rank(slower);
  REQUIRE(rec);
  CHECK(rec->value == 0);
  // Worker time unknown on a rank (no workers reported): the waits alone decide.
  auto unknown = alike;
  unknown[1].workers = 0;
  CHECK(rule_straggler_rank(unknown));
}

TEST_CASE("R6 threshold: the lag over the others' median against 10 % of the mean step") {
  // Step 10 ms on both; rank 1's extra data wait is 0.9 ms (9 %) then 1.1 ms (11 %).
  const std::vector<rank_summary> below = {rank_of(0, 2, 0.0, 10.0), rank_of(1, 2, 0.9, 9.1)};
  CHECK(!rule_straggler_rank(below));
  const std::vector<rank_summary> above = {rank_of(0, 2, 0.0, 10.0), rank_of(1, 2, 1.1, 8.9)};
  const auto rec = rule_straggler_rank(above);
  REQUIRE(rec);
  CHECK(rec->value == 1);
  CHECK(rec->message.find("11.0 % of the 10 ms step") != std::string::npos);
  advisor_thresholds t;
  t.straggler_excess = 0.2;
  CHECK(!rule_straggler_rank(above, t));
}

TEST_CASE("R6 with communication measured: a slow compute rank is named, and not blamed on the loader") {
  // Rank 3 computes 9 ms; the others compute 5 ms and wait 4 ms more in the all-reduce.
  const std::vector<rank_summary> r = {rank_of(0, 4, 0.2, 9.8, 4.8), rank_of(1, 4, 0.2, 9.8, 4.8),
                                       rank_of(2, 4, 0.2, 9.8, 4.8), rank_of(3, 4, 0.2, 9.8, 0.8)};
  auto rec = rule_straggler_rank(r);
  REQUIRE(rec);
  CHECK(rec->value == 3);
  CHECK(rec->message.find("it computes 9 ms a step against 5 ms") != std::string::npos);
  CHECK(rec->message.find("not the loader") != std::string::npos);
  CHECK(rec->message.find("its loader is the cause") == std::string::npos);

  // The same run without the all-reduce timed: the loaders are alike, so nothing can be named.
  const std::vector<rank_summary> blind = {rank_of(0, 4, 0.2, 9.8), rank_of(1, 4, 0.2, 9.8),
                                           rank_of(2, 4, 0.2, 9.8), rank_of(3, 4, 0.2, 9.8)};
  CHECK(!rule_straggler_rank(blind));

  // A data straggler with communication measured: its own all-reduce is short, the others' long.
  const std::vector<rank_summary> data = {rank_of(0, 2, 0.1, 9.9, 6.0), rank_of(1, 2, 5.0, 5.0, 1.1)};
  rec = rule_straggler_rank(data);
  REQUIRE(rec);
  CHECK(rec->value == 1);
  CHECK(rec->message.find("its loader is the cause") != std::string::npos);
}

TEST_CASE("observe(ranks): the job's step, and the stall and communication of the rank the others wait for") {
  const std::vector<rank_summary> r = {rank_of(0, 2, 0.1, 9.9, 6.0), rank_of(1, 2, 5.0, 5.0, 1.1)};
  const auto o = observe(r);
  CHECK(o.epoch == 3);
  CHECK(o.step_time_s == doctest::Approx(0.010));
  CHECK(o.wait_fraction == doctest::Approx(0.5));
  CHECK(o.comm_time_s == doctest::Approx(0.0011));
  CHECK(o.workers == 2);
  CHECK(o.bottleneck_stage == "read");
  CHECK(o.bottleneck_share == doctest::Approx(0.9));
  const std::vector<rank_summary> blind = {rank_of(0, 2, 0.1, 9.9, 6.0), rank_of(1, 2, 5.0, 5.0)};
  CHECK(std::isnan(observe(blind).comm_time_s));  // not measured on every rank
  // advise() with the ranks adds R6 to the per-epoch rules.
  const std::vector<epoch_observation> h = {o};
  bool r6 = false;
  for (const auto& rec : advise(h, r)) r6 = r6 || rec.rule == "R6 straggler-rank";
  CHECK(r6);
  CHECK(advise(h, std::span<const rank_summary>()).size() == advise(h).size());  // no ranks: no R6
}

namespace {
epoch_observation epoch_of(std::uint64_t e, double step_ms, double wait_ms, double comm_ms = unmeasured) {
  epoch_observation o;
  o.epoch = e;
  o.step_time_s = step_ms / 1e3;
  o.wait_fraction = wait_ms / step_ms;
  o.comm_time_s = comm_ms / 1e3;
  return o;
}
}  // namespace

TEST_CASE("R7: step time grows while the data stall stays flat -> communication, not the loader") {
  const std::vector<epoch_observation> h = {epoch_of(0, 10.5, 1.0, 1.0), epoch_of(1, 10.0, 1.0, 1.0),
                                            epoch_of(2, 15.0, 1.1, 5.9)};
  const auto r = rule_slowdown_cause(h);
  REQUIRE(r);
  CHECK(r->rule == "R7 slowdown-cause");
  CHECK(r->value == doctest::Approx(0.5));  // against the fastest earlier epoch, 1
  CHECK(r->message.rfind("step time rose 50.0 % from epoch 1 to epoch 2 (10 ms -> 15 ms)", 0) == 0);
  CHECK(r->message.find("data stall stayed flat (data stall 1 ms -> 1.1 ms a step, stall fraction 10.0 % -> 7.3 %") !=
        std::string::npos);
  CHECK(r->message.find("the time went to communication (communication 1 ms -> 5.9 ms a step), not to the loader") !=
        std::string::npos);
  // A loader that stalled the short step keeps up with the long one: the stall falls, and the
  // slowdown is still communication.
  const std::vector<epoch_observation> fell = {epoch_of(0, 5.0, 1.4, 0.4), epoch_of(1, 7.5, 0.0, 4.4)};
  const auto f = rule_slowdown_cause(fell);
  REQUIRE(f);
  CHECK(f->message.find("while the data stall fell (data stall 1.4 ms -> 0 ms a step") != std::string::npos);
  CHECK(f->message.find("the time went to communication") != std::string::npos);
  // advise() includes it.
  bool r7 = false;
  for (const auto& rec : advise(h)) r7 = r7 || rec.rule == "R7 slowdown-cause";
  CHECK(r7);
}

TEST_CASE("R7: the loader, compute, or outside the loader when communication is not timed") {
  // The data stall grew by most of the step's growth: the loader.
  std::vector<epoch_observation> h = {epoch_of(0, 10.0, 1.0, 1.0), epoch_of(1, 15.0, 5.5, 1.0)};
  auto r = rule_slowdown_cause(h);
  REQUIRE(r);
  CHECK(r->message.find("the data stall grew with it") != std::string::npos);
  CHECK(r->message.find("the loader is the cause") != std::string::npos);
  // Neither stall nor communication: compute.
  h = {epoch_of(0, 10.0, 1.0, 1.0), epoch_of(1, 15.0, 1.0, 1.2)};
  r = rule_slowdown_cause(h);
  REQUIRE(r);
  CHECK(r->message.find("the step's own compute grew, not the loader") != std::string::npos);
  // Communication not measured: outside the loader, without naming which.
  h = {epoch_of(0, 10.0, 1.0), epoch_of(1, 15.0, 1.0)};
  r = rule_slowdown_cause(h);
  REQUIRE(r);
  CHECK(r->message.find("the time went outside the loader") != std::string::npos);
  // Both grew: the stall by more than half the step's growth -> the loader, whatever else grew.
  h = {epoch_of(0, 10.0, 1.0, 1.0), epoch_of(1, 14.0, 3.5, 2.5)};
  r = rule_slowdown_cause(h);
  REQUIRE(r);
  CHECK(r->message.find("the loader is the cause") != std::string::npos);
  // ... and by less than half: communication.
  h = {epoch_of(0, 10.0, 1.0, 1.0), epoch_of(1, 14.0, 2.5, 3.5)};
  r = rule_slowdown_cause(h);
  REQUIRE(r);
  CHECK(r->message.find("the time went to communication") != std::string::npos);
}

TEST_CASE("R7 stays quiet below 10 % growth, on one epoch, and without timings") {
  std::vector<epoch_observation> h = {epoch_of(0, 10.0, 1.0, 1.0), epoch_of(1, 10.9, 1.0, 1.9)};
  CHECK(!rule_slowdown_cause(h));
  h = {epoch_of(0, 10.0, 1.0, 1.0), epoch_of(1, 11.2, 1.0, 2.2)};
  CHECK(rule_slowdown_cause(h));
  h = {epoch_of(0, 10.0, 1.0, 1.0)};
  CHECK(!rule_slowdown_cause(h));
  h = {epoch_observation{}, epoch_of(1, 15.0, 1.0, 1.0)};
  CHECK(!rule_slowdown_cause(h));
  // A faster epoch is no slowdown.
  h = {epoch_of(0, 15.0, 1.0, 1.0), epoch_of(1, 10.0, 1.0, 1.0)};
  CHECK(!rule_slowdown_cause(h));
}

TEST_CASE("R7 is silent on noise: within the step jitter, the standard error, or the earlier epochs' spread") {
  auto jittery = [](std::uint64_t e, double step_ms, double std_ms, double steps) {
    auto o = epoch_of(e, step_ms, 0.1 * step_ms);
    o.step_time_std_s = std_ms / 1e3;
    o.steps = steps;
    return o;
  };
  // A shared 2-core machine as the demo sees it: 2.77 -> 3.29 ms, steps scattered by about 1 ms.
  std::vector<epoch_observation> h = {jittery(0, 2.77, 1.0, 900), jittery(1, 3.29, 1.1, 900)};
  CHECK(!rule_slowdown_cause(h));
  // The same growth with steps that scatter little is a slowdown.
  h = {jittery(0, 2.77, 0.1, 900), jittery(1, 3.29, 0.1, 900)};
  CHECK(rule_slowdown_cause(h));
  // Past the jitter but from two steps each: within three standard errors of the difference.
  h = {jittery(0, 2.77, 0.4, 2), jittery(1, 3.29, 0.4, 2)};
  CHECK(!rule_slowdown_cause(h));
  // Earlier epochs scattered around 11 ms by about 1 ms: 13.5 ms is within three robust
  // deviations of their median (4.4 ms), 16 ms is not.
  h = {epoch_of(0, 10.0, 1.0), epoch_of(1, 12.0, 1.0), epoch_of(2, 11.0, 1.0), epoch_of(3, 13.5, 1.0)};
  CHECK(!rule_slowdown_cause(h));
  h.back() = epoch_of(3, 16.0, 1.0);
  CHECK(rule_slowdown_cause(h));
  // A slowdown that began an epoch ago is still one: the slow epoch does not widen the band.
  h = {epoch_of(0, 3.5, 0.1), epoch_of(1, 3.4, 0.1), epoch_of(2, 7.7, 0.1), epoch_of(3, 7.8, 0.1)};
  CHECK(rule_slowdown_cause(h));
  // Noise-only histories: 200 runs of 8 epochs whose mean step moves with the machine's load by
  // up to 25 % while single steps scatter by a third of the step; no prefix of any run warns.
  std::uint64_t x = 88172645463325252ull;
  auto uniform = [&] {  // xorshift64
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<double>(x >> 11) / 9007199254740992.0;
  };
  std::size_t warnings = 0;
  for (int run = 0; run < 200; ++run) {
    h.clear();
    for (std::uint64_t e = 0; e < 8; ++e) {
      h.push_back(jittery(e, 3.0 * (1 + 0.25 * uniform()), 1.0, 500 + 500 * uniform()));
      if (rule_slowdown_cause(h)) ++warnings;
      for (const auto& r : advise(h)) CHECK(r.rule != "R7 slowdown-cause");
    }
  }
  CHECK(warnings == 0);
}

TEST_CASE("rank summaries and the job's observation in the JSON report") {
  json_writer w;
  w.begin_array();
  to_json(w, rank_of(1, 2, 2.0, 8.0, 1.0));
  to_json(w, rank_of(0, 2, 2.0, 8.0));
  w.end_array();
  const auto& j = w.str();
  CHECK(j.find(R"({"rank":1,"world":2,"epoch":3,"batches":51,"samples":1632,"step_s":0.01,)") == 1);
  CHECK(j.find(R"("comm_per_step_s":0.001,)") != std::string::npos);
  CHECK(j.find(R"("comm_per_step_s":null,)") != std::string::npos);
  CHECK(j.find(R"("bottleneck_stage":"read","bottleneck_share":0.9})") != std::string::npos);
  json_writer o;
  auto ob = epoch_of(2, 10.0, 1.0, 4.0);
  to_json(o, ob);
  CHECK(o.str().find(R"("comm_time_s":0.004,"step_time_std_s":)") != std::string::npos);
}
