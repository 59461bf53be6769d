// The advisor's rules: thresholds at their edges, and replays of traces recorded from real runs.
#include <doctest/doctest.h>

#include <sluice/diag/advisor.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace sluice::diag;

namespace {
const recommendation* find_rule_in(const std::vector<recommendation>& rs, std::string_view prefix) {
  for (const auto& r : rs)
    if (r.rule.rfind(prefix, 0) == 0) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("advisor R1 and R2 at their thresholds") {
  epoch_observation o;
  o.wait_fraction = 0.149;
  auto r = rule_loader_speed(o);
  REQUIRE(r);
  CHECK(r->level == severity::info);
  CHECK(r->message.find("14.9 %") != std::string::npos);
  o.wait_fraction = 0.15;
  CHECK(rule_loader_speed(o)->level == severity::warning);

  for (auto [u, depth] : {std::pair{0.86, 1.0}, {0.85, 2.0}, {0.60, 2.0}, {0.59, 3.0}}) {
    epoch_observation p;
    p.utilisation = u;
    CHECK(rule_prefetch_depth(p)->value == depth);
  }
  epoch_observation q;
  q.wait_fraction = 0.5;  // utilisation defaults to 1 - wait
  CHECK(rule_prefetch_depth(q)->value == 3);
  CHECK(!rule_prefetch_depth(epoch_observation{}));
}

TEST_CASE("advisor R3: balanced sampling when the loss is flat and batches skewed, else workers") {
  std::vector<epoch_observation> h(3);
  for (std::size_t i = 0; i < 3; ++i) {
    h[i].epoch = i;
    h[i].validation_loss = 0.5 - 0.0004 * static_cast<double>(i);
    h[i].class_std = 7.9;
    h[i].utilisation = 0.5;
    h[i].workers = 2;
  }
  auto r = rule_balance_or_workers(h);
  REQUIRE(r);
  CHECK(r->message.find("class-balanced") != std::string::npos);
  h[2].class_std = 1.4;  // balanced feed -> worker rule applies
  r = rule_balance_or_workers(h);
  REQUIRE(r);
  CHECK(r->value == 4);  // ceil(2 * 0.885 / 0.5)
  h[2].utilisation = 0.9;
  CHECK(!rule_balance_or_workers(h));
  h[2].utilisation = 0.99;
  h[2].worker_busy_fraction = 0.3;
  h[2].workers = 4;
  r = rule_balance_or_workers(h);
  REQUIRE(r);
  CHECK(r->value == 2);  // ceil(4 * 0.3 / 0.885)
  h[2].class_std = 7.9;
  h[2].validation_loss = 0.45;  // still falling fast
  r = rule_balance_or_workers(h);
  REQUIRE(r);
  CHECK(r->message.find("class-balanced") == std::string::npos);
}

TEST_CASE("advisor R4: memory growth, page faults, drift") {
  std::vector<epoch_observation> h(4);
  for (std::size_t i = 0; i < 4; ++i) {
    h[i].epoch = i;
    h[i].rss_bytes = 100e6 + 20e6 * static_cast<double>(i);
    h[i].minor_faults = 100;
    h[i].major_faults = 0;
  }
  CHECK(rule_memory_growth(h));
  for (auto& o : h) o.rss_bytes = 100e6;
  CHECK(!rule_memory_growth(h));
  CHECK(!rule_page_faults(h));
  h[3].major_faults = 12;
  CHECK(rule_page_faults(h));
  h[3].major_faults = 0;
  h[1].minor_faults = 1000;
  h[2].minor_faults = 2000;
  h[3].minor_faults = 4000;
  CHECK(rule_page_faults(h));
  epoch_observation d;
  d.drift_shift_sigma = 0.05;
  CHECK(!rule_drift(d));
  d.drift_shift_sigma = 0.3;
  CHECK(rule_drift(d));
}

TEST_CASE("epoch CSV round trip") {
  epoch_observation o;
  o.epoch = 4;
  o.wait_fraction = 0.25;
  o.class_std = 3.5;
  auto row = to_csv_row(o);
  CHECK(row == "4,,0.25,,,3.5,,,,,,,,,,,,");
  o.bottleneck_stage = "decode";
  o.bottleneck_share = 0.83;
  CHECK(to_csv_row(o) == "4,,0.25,,,3.5,,,,,,,,decode,0.83,,,");
  o.comm_time_s = 0.004;
  CHECK(to_csv_row(o) == "4,,0.25,,,3.5,,,,,,,,decode,0.83,0.004,,");
  o.step_time_std_s = 0.0011;
  o.steps = 900;
  CHECK(to_csv_row(o) == "4,,0.25,,,3.5,,,,,,,,decode,0.83,0.004,0.0011,900");
}

TEST_CASE("epoch CSV: rows with and without the bottleneck columns are read back") {
  const std::string path = "advisor_csv_roundtrip.csv";
  {
    std::ofstream f(path);
    epoch_observation a;
    a.epoch = 0;
    a.wait_fraction = 0.4;
    a.bottleneck_stage = "decode";
    a.bottleneck_share = 0.83;
    f << epoch_csv_header << "\n" << to_csv_row(a) << "\n"
      << "1,,0.1,,,,,,,,,,\n"   // 13 fields: recorded before the bottleneck columns existed
      << "2,0.01,0.1,,,,,,,,,,,read,0.5\n"  // 15: before comm_time_s
      << "3,0.01,0.1,,,,,,,,,,,read,0.5,0.002\n"
      << "4,0.01,0.1,,,,,,,,,,,read,0.5,0.002,0.003,450\n";  // 18: with the step jitter
  }
  const auto h = read_epoch_csv(path);
  std::remove(path.c_str());
  REQUIRE(h.size() == 5);
  CHECK(h[4].step_time_std_s == doctest::Approx(0.003));
  CHECK(h[4].steps == doctest::Approx(450));
  CHECK(std::isnan(h[3].steps));
  CHECK(std::isnan(h[0].comm_time_s));
  CHECK(std::isnan(h[2].comm_time_s));
  CHECK(h[2].bottleneck_stage == "read");
  CHECK(h[3].comm_time_s == doctest::Approx(0.002));
  CHECK(h[0].bottleneck_stage == "decode");
  CHECK(h[0].bottleneck_share == doctest::Approx(0.83));
  CHECK(h[1].bottleneck_stage.empty());
  CHECK(std::isnan(h[1].bottleneck_share));
  CHECK(h[1].wait_fraction == doctest::Approx(0.1));
}

TEST_CASE("advisor R3 needs the three epochs it documents: two flat epochs are not a trend") {
  std::vector<epoch_observation> h(3);
  for (std::size_t i = 0; i < 3; ++i) {
    h[i].epoch = i;
    h[i].validation_loss = 0.5;  // perfectly flat
    h[i].class_std = 7.9;
  }
  CHECK(!rule_balance_or_workers(std::span<const epoch_observation>(h.data(), 2)));
  CHECK(!rule_balance_or_workers(std::span<const epoch_observation>(h.data(), 1)));
  auto r = rule_balance_or_workers(h);
  REQUIRE(r);
  CHECK(r->message.find("class-balanced") != std::string::npos);
  // A missing validation loss in the window leaves two points: still not enough.
  h[1].validation_loss = unmeasured;
  CHECK(!rule_balance_or_workers(h));
}

TEST_CASE("advisor R3 says which weights: 1/log(1+n) by the seed's rule, with the alternatives") {
  std::vector<epoch_observation> h(3);
  for (std::size_t i = 0; i < 3; ++i) {
    h[i].epoch = i;
    h[i].validation_loss = 0.5;
    h[i].class_std = 7.9;
  }
  auto r = rule_balance_or_workers(h);
  REQUIRE(r);
  for (const char* s : {"1/log(1+n)", "inverse_log", "inverse_frequency 1/n", "effective_number", "power"})
    CHECK_MESSAGE(r->message.find(s) != std::string::npos, s);
}

TEST_CASE("the advisor never recommends a setting below 1") {
  // One worker with headroom: "fewer than 1 workers" must not be said.
  epoch_observation one;
  one.epoch = 0;
  one.utilisation = 0.99;
  one.workers = 1;
  CHECK(!rule_balance_or_workers(std::span<const epoch_observation>(&one, 1)));
  one.worker_busy_fraction = 0.05;
  CHECK(!rule_balance_or_workers(std::span<const epoch_observation>(&one, 1)));
  // A sweep: every recommended depth or worker count is at least 1, and no message says
  // "fewer than 1" or "0 workers".
  for (double workers : {1.0, 2.0, 3.0, 8.0})
    for (double u : {0.0, 0.01, 0.3, 0.6, 0.85, 0.9, 0.93, 0.999, 1.0})
      for (double busy : {unmeasured, 0.0, 0.01, 0.5, 1.0}) {
        epoch_observation o;
        o.epoch = 0;
        o.utilisation = u;
        o.wait_fraction = 1 - u;
        o.workers = workers;
        o.worker_busy_fraction = busy;
        o.prefetch_depth = 2;
        for (const auto& rec : advise(std::span<const epoch_observation>(&o, 1))) {
          if (rec.rule.rfind("R2", 0) == 0) CHECK(rec.value >= 1);  // a depth (NaN fails too)
          // R3 sets a worker count, or none (NaN) when it only says there is headroom.
          if (rec.rule.rfind("R3", 0) == 0 && !std::isnan(rec.value)) CHECK(rec.value >= 1);
          CHECK(rec.message.find("fewer than 1 ") == std::string::npos);
          CHECK(rec.message.find(" 0 workers") == std::string::npos);
        }
      }
}

TEST_CASE("advisor R5 names the limiting stage when the loader stalls the trainer") {
  epoch_observation o;
  o.wait_fraction = 0.4;
  o.bottleneck_stage = "decode";
  o.bottleneck_share = 0.83;
  auto r = rule_limiting_stage(o);
  REQUIRE(r);
  CHECK(r->level == severity::warning);
  CHECK(r->value == doctest::Approx(0.83));
  CHECK(r->message.find("decode is 83.0 % of worker time") != std::string::npos);
  CHECK(r->message.find("add workers, lower the decode size, or move decode to the GPU") != std::string::npos);
  CHECK(find_rule_in(advise(std::span<const epoch_observation>(&o, 1)), "R5"));
  o.bottleneck_stage = "decode<\"jpg\">";
  CHECK(rule_limiting_stage(o)->message.find("move decode to the GPU") != std::string::npos);
  o.bottleneck_stage = "read";
  CHECK(rule_limiting_stage(o)->message.find("cache tier") != std::string::npos);
  o.bottleneck_stage = "collate";
  CHECK(rule_limiting_stage(o)->message.find("memory bandwidth") != std::string::npos);
  o.bottleneck_stage = "map";
  CHECK(rule_limiting_stage(o)->message.find("make map cheaper") != std::string::npos);
  o.wait_fraction = 0.1;  // the loader keeps up: nothing to say about its stages
  CHECK(!rule_limiting_stage(o));
  o.wait_fraction = 0.4;
  o.bottleneck_stage.clear();  // not measured
  CHECK(!rule_limiting_stage(o));
}

TEST_CASE("observe(): an observation from one epoch's stats, bottleneck included") {
  sluice::epoch_stats e;
  e.epoch = 3;
  e.batches = 11;
  e.consumer_wait_ns = 400;
  e.consumer_busy_ns = 600;
  e.stall_fraction = 0.4;
  e.wall_ns = 2000;
  e.worker_busy_ns = 3000;
  e.stages = {{"read", 100, 10}, {"decode", 2490, 10}, {"collate", 410, 10}};
  const auto o = observe(e, 2);
  CHECK(o.epoch == 3);
  CHECK(o.wait_fraction == doctest::Approx(0.4));
  CHECK(o.step_time_s == doctest::Approx(100e-9));
  CHECK(o.worker_busy_fraction == doctest::Approx(0.75));
  CHECK(o.bottleneck_stage == "decode");
  CHECK(o.bottleneck_share == doctest::Approx(0.83));
  auto r = rule_limiting_stage(o);
  REQUIRE(r);
  CHECK(r->message.rfind("decode is 83.0 % of worker time", 0) == 0);
}

TEST_CASE("advisor R3: more workers than the machine's cores is not advised as a count") {
  // A trainer that takes no time (utilisation 0.1 %) asks for thousands of workers: the advice
  // says the loader cannot keep up by threads, naming the cores. A modest shortfall gets a count.
  epoch_observation o;
  o.workers = 2;
  o.wait_fraction = 0.999;
  auto r = rule_balance_or_workers(std::span<const epoch_observation>(&o, 1));
  REQUIRE(r);
  CHECK(r->message.find("cannot keep up by threads alone") != std::string::npos);
  CHECK(r->message.find("cores") != std::string::npos);
  o.workers = 1;
  o.wait_fraction = 0.2;  // utilisation 80 %: ceil(1 x 0.885 / 0.8) = 2 workers
  r = rule_balance_or_workers(std::span<const epoch_observation>(&o, 1));
  REQUIRE(r);
  CHECK(r->message.find("about 2 workers bring it to") != std::string::npos);  // 2 <= 2 x cores anywhere
  CHECK(r->message.find("(if the cores are there)") != std::string::npos);
}

TEST_CASE("observe(): an epoch's step spread reaches R7, which then holds a change within the noise") {
  // Two epochs as the loader reports them (epoch_stats: steps and their spread), 1-15 ms steps
  // with a 4.3 ms spread and the second 1.2 ms slower on average: noise, not a slowdown. The same
  // growth with a spread of 0.1 ms is one.
  auto epoch = [](std::uint64_t n, double mean_ms, double std_ms) {
    sluice::epoch_stats e;
    e.epoch = n;
    e.batches = 61;
    e.steps = 60;
    e.step_std_ns = std_ms * 1e6;
    e.consumer_busy_ns = static_cast<std::uint64_t>(60 * mean_ms * 1e6);
    e.stall_fraction = 0.0;
    e.wall_ns = e.consumer_busy_ns;
    return e;
  };
  const std::vector<epoch_observation> noisy = {observe(epoch(0, 8.0, 4.3), 2), observe(epoch(1, 9.2, 4.3), 2)};
  CHECK(noisy[1].step_time_std_s == doctest::Approx(4.3e-3));
  CHECK(!rule_slowdown_cause(noisy));
  const std::vector<epoch_observation> steady = {observe(epoch(0, 8.0, 0.1), 2), observe(epoch(1, 9.2, 0.1), 2)};
  CHECK(rule_slowdown_cause(steady));
  sluice::epoch_stats one = epoch(2, 8.0, 0.0);
  one.steps = 1;                              // one step has no spread: unmeasured, as before
  CHECK(std::isnan(observe(one, 2).step_time_std_s));
}

// ---- Replays of traces recorded from sluice-demo runs (tests/data/diag/README.md). ----------

namespace {
std::vector<epoch_observation> recorded(const char* name) {
  return read_epoch_csv(std::string(SLUICE_TEST_DATA_DIR) + "/diag/" + name);
}
std::vector<recommendation> advise_up_to(const std::vector<epoch_observation>& h, std::size_t epochs) {
  return advise(std::span<const epoch_observation>(h.data(), epochs));
}
const recommendation* find_rule(const std::vector<recommendation>& rs, std::string_view prefix) {
  for (const auto& r : rs)
    if (r.rule.rfind(prefix, 0) == 0) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("recorded long-tailed uniform run: loader is fine, rebalancing advised once the loss is flat") {
  auto h = recorded("longtail-uniform.csv");
  REQUIRE(h.size() == 6);
  for (std::size_t n = 1; n <= h.size(); ++n) {
    auto rs = advise_up_to(h, n);
    auto r1 = find_rule(rs, "R1");
    REQUIRE(r1);
    CHECK(r1->level == severity::info);  // stalls of 0-1.5 %: a faster loader is not the fix
    auto r2 = find_rule(rs, "R2");
    REQUIRE(r2);
    CHECK(r2->value == 1);
    auto r3 = find_rule(rs, "R3");
    const bool rebalance = r3 && r3->message.find("class-balanced") != std::string::npos;
    // Test loss 1.09, 0.84, 0.80, 0.69 falls; 0.695, 0.690, 0.694 is flat.
    CHECK(rebalance == (n == 6));
  }
  CHECK(!rule_memory_growth(h));
  CHECK(!rule_page_faults(h));
}

TEST_CASE("recorded class-balanced run: no rebalancing advice, no drift, no memory growth") {
  auto h = recorded("longtail-balanced.csv");
  REQUIRE(h.size() == 6);
  for (std::size_t n = 1; n <= h.size(); ++n) {
    auto rs = advise_up_to(h, n);
    auto r3 = find_rule(rs, "R3");
    CHECK((!r3 || r3->message.find("class-balanced") == std::string::npos));
    CHECK(!find_rule(rs, "R4"));
  }
}

TEST_CASE("recorded deferred run: the sampler switch lowers class std, the input mean barely moves") {
  auto h = recorded("longtail-deferred.csv");
  REQUIRE(h.size() == 6);
  CHECK(h[2].class_std > 1.5);
  CHECK(h[3].class_std < 1.5);
  CHECK(h[3].drift_shift_sigma > 10 * h[2].drift_shift_sigma);  // the switch is visible...
  CHECK(!rule_drift(h[3]));                                    // ...but far below BatchNorm's concern
  advisor_thresholds sensitive;
  sensitive.drift_sigma = 0.01;
  CHECK(rule_drift(h[3], sensitive));
  CHECK(!rule_drift(h[2], sensitive));
}

TEST_CASE("recorded starved loader: stall warning, depth 3, more workers") {
  for (const char* name : {"starved-1worker.csv", "starved-2workers.csv"}) {
    auto h = recorded(name);
    REQUIRE(h.size() == 3);
    for (std::size_t n = 1; n <= h.size(); ++n) {
      auto rs = advise_up_to(h, n);
      auto r1 = find_rule(rs, "R1");
      REQUIRE(r1);
      CHECK(r1->level == severity::warning);
      CHECK(find_rule(rs, "R2")->value == 3);
      auto r3 = find_rule(rs, "R3");
      REQUIRE(r3);
      const auto& o = h[n - 1];
      CHECK(r3->value == std::ceil(o.workers * 0.885 / (1 - o.wait_fraction)));
      CHECK(r3->value > o.workers);
    }
  }
}

TEST_CASE("recorded leaking trainer: memory growth is reported from the third epoch, with the rate") {
  auto h = recorded("leak-keep-batches.csv");
  REQUIRE(h.size() == 5);
  CHECK(!rule_memory_growth(std::span<const epoch_observation>(h.data(), 2)));  // two points are not a trend
  for (std::size_t n = 3; n <= h.size(); ++n) {
    auto r = rule_memory_growth(std::span<const epoch_observation>(h.data(), n));
    REQUIRE(r);
    CHECK(r->level == severity::warning);
    // 14,891 images x 784 floats = 46.7 MB = 44.5 MiB kept per epoch.
    CHECK(r->value / 1048576 == doctest::Approx(44.7).epsilon(0.02));
    CHECK(r->message.find("MiB per epoch") != std::string::npos);
    CHECK(find_rule(advise_up_to(h, n), "R4a"));
  }
  CHECK(!rule_page_faults(h));  // the copies fault pages in, but as many each epoch: no climb
  // The recorded runs without the leak stay quiet on the same rule.
  CHECK(!rule_memory_growth(recorded("longtail-uniform.csv")));
}
