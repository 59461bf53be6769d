// Tests for the diagnostics monitors: each checks a property that a wrong implementation breaks.
#include <doctest/doctest.h>

#include <sluice/diag/class_balance.hpp>
#include <sluice/diag/drift.hpp>
#include <sluice/diag/json.hpp>
#include <sluice/diag/noise_scale.hpp>
#include <sluice/diag/proc_probe.hpp>
#include <sluice/diag/report.hpp>
#include <sluice/diag/trace.hpp>
#include <sluice/core/random.hpp>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace sluice::diag;

namespace {
std::size_t count_of(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("json_writer: commas, escaping, non-finite numbers") {
  json_writer w;
  w.begin_object().field("a", 1).field("s", "q\"\\\n\x01").key("v").begin_array().value(1.5).value(
      std::nan("")).value(true).end_array().key("o").begin_object().end_object().end_object();
  CHECK(w.complete());
  CHECK(w.str() == R"({"a":1,"s":"q\"\\\n\u0001","v":[1.5,null,true],"o":{}})");
  json_writer x;
  x.begin_array().value(0.1).value(std::uint64_t{18446744073709551615ull}).value(-3).end_array();
  CHECK(x.str() == "[0.1,18446744073709551615,-3]");
}

TEST_CASE("trace_recorder: complete and counter events, bounded ring keeps the newest") {
  trace_recorder t({.capacity = 8});
  t.name_thread("consumer");
  auto t0 = trace_recorder::clock::now();
  for (int i = 0; i < 20; ++i) {
    t.complete("step", t0 + std::chrono::microseconds(10 * i), t0 + std::chrono::microseconds(10 * i + 5));
  }
  t.counter("queue_depth", 3);
  CHECK(t.size() == 8);
  CHECK(t.dropped() == 13);
  auto ev = t.events();
  REQUIRE(ev.size() == 8);
  CHECK(ev.back().phase == 'C');
  CHECK(ev.front().phase == 'X');
  CHECK(ev.front().dur_ns == 5000);
  for (std::size_t i = 1; i + 1 < ev.size(); ++i) CHECK(ev[i].ts_ns > ev[i - 1].ts_ns);  // oldest first
  auto js = t.to_json();
  CHECK(js.rfind("{\"traceEvents\":[", 0) == 0);
  CHECK(count_of(js, "\"ph\":\"X\"") == 7);
  CHECK(count_of(js, "\"ph\":\"C\"") == 1);
  CHECK(count_of(js, "\"ph\":\"M\"") == 1);
  CHECK(js.find("\"dropped_events\":13") != std::string::npos);
  CHECK(js.find("\"args\":{\"value\":3}") != std::string::npos);
}

TEST_CASE("trace_recorder: threads record concurrently, each under its own tid") {
  trace_recorder t({.capacity = 1 << 12});
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k) {
    th.emplace_back([&] {
      for (int i = 0; i < 100; ++i) { auto s = t.scope("work"); }
    });
  }
  for (auto& x : th) x.join();
  auto ev = t.events();
  CHECK(ev.size() == 400);
  std::vector<std::uint32_t> tids;
  for (auto& e : ev) tids.push_back(e.tid);
  std::sort(tids.begin(), tids.end());
  tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
  CHECK(tids.size() == 4);
}

TEST_CASE("proc probes: RSS follows touched memory, faults are counted per epoch") {
  epoch_memory_log log;
  auto before = read_process_memory();
  REQUIRE(before.from_procfs);
  CHECK(before.rss_bytes > 0);
  CHECK(before.pss_bytes > 0);
  CHECK(before.pss_bytes <= before.rss_bytes);
  log.record(0);
  std::vector<char> big(64 << 20);
  for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i);
  const auto& e = log.record(1);
  CHECK(e.at_end.rss_bytes >= before.rss_bytes + (48u << 20));
  CHECK(e.minor_faults_in_epoch >= (48u << 20) / 4096 / 512);  // at least one fault per 2 MiB huge page
  CHECK(log.rss_growth_bytes_per_epoch() > 40e6);
  volatile char sink = big[4096 * 7];
  (void)sink;
}

TEST_CASE("class_balance_monitor: balanced, long-tailed and sorted feeds") {
  const std::size_t B = 64, K = 10;
  auto run = [&](auto label_of, std::size_t batches) {
    class_balance_monitor m(K);
    std::vector<int> labels(B);
    for (std::size_t b = 0; b < batches; ++b) {
      for (std::size_t i = 0; i < B; ++i) labels[i] = label_of(b * B + i);
      m.observe_batch(labels);
    }
    return m.summary();
  };
  // i.i.d. balanced
  auto bal = run([](std::size_t n) { return static_cast<int>(sluice::counter_rng(1, 0, n).below(10)); }, 200);
  CHECK(bal.class_std < 0.6);
  CHECK(bal.mean_within_batch_std > 1.5);  // multinomial noise of a batch of 64
  CHECK(!bal.non_iid_order);
  CHECK(bal.classes_unseen == 0);
  CHECK(bal.samples == 200 * B);
  // long-tailed i.i.d.: p_c proportional to 100^(-c/9)
  std::vector<double> cdf(K);
  double z = 0;
  for (std::size_t c = 0; c < K; ++c) z += std::pow(100.0, -double(c) / 9), cdf[c] = z;
  auto lt = run([&](std::size_t n) {
    double u = sluice::counter_rng(2, 0, n).uniform() * z;
    return static_cast<int>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  }, 200);
  CHECK(lt.class_std > 5);
  CHECK(lt.mean_count_per_batch[0] > lt.mean_count_per_batch[9] * 20);
  CHECK(!lt.non_iid_order);
  // sorted by class, read sequentially: runs of 1280
  auto sorted = run([](std::size_t n) { return static_cast<int>(n / 1280); }, 200);
  CHECK(sorted.non_iid_order);
  CHECK(sorted.longest_run == 1280);
  CHECK(sorted.count_std_across_batches[0] == doctest::Approx(64 * std::sqrt(0.09 * 200 / 199.0)));
  CHECK(bal.count_std_across_batches[0] < 3.5);  // binomial: sqrt(64 * 0.1 * 0.9) = 2.4
  // labels outside the range
  class_balance_monitor m(3);
  std::vector<long> l{0, 1, 2, 7, -1};
  m.observe_batch(l);
  CHECK(m.summary().unknown_labels == 2);
}

TEST_CASE("drift_monitor: Welford matches a two-pass computation, shifts are detected") {
  drift_monitor d(2, {.window_batches = 10, .alert_sigma = 0.1});
  std::vector<float> batch(8 * 2 * 16);  // 8 samples, 2 channels, 16 values, NCHW
  std::vector<double> all0;
  for (int b = 0; b < 30; ++b) {
    const float shift = b >= 20 ? 0.5f : 0.0f;  // channel 0 moves by half a std in the third window
    for (std::size_t s = 0; s < 8; ++s)
      for (std::size_t c = 0; c < 2; ++c)
        for (std::size_t i = 0; i < 16; ++i) {
          sluice::counter_rng g(3, b, s * 100 + c * 16 + i);
          float v = static_cast<float>(g.uniform() * std::sqrt(12.0)) + (c == 0 ? shift : 0.0f) + 10.0f * c;
          batch[(s * 2 + c) * 16 + i] = v;
          if (c == 0) all0.push_back(v);
        }
    d.observe_batch(std::span<const float>(batch), 8, layout::nchw);
  }
  REQUIRE(d.windows().size() == 3);
  double m = std::accumulate(all0.begin(), all0.end(), 0.0) / all0.size(), v = 0;
  for (double x : all0) v += (x - m) * (x - m);
  v /= all0.size();
  CHECK(d.overall()[0].mean == doctest::Approx(m).epsilon(1e-9));
  CHECK(d.overall()[0].variance() == doctest::Approx(v).epsilon(1e-6));
  CHECK(d.overall()[1].mean == doctest::Approx(10 + std::sqrt(3.0)).epsilon(0.02));
  CHECK(!d.windows()[1].alert);  // same distribution
  CHECK(d.windows()[1].max_shift_vs_previous_sigma < 0.1);
  CHECK(d.windows()[2].alert);
  CHECK(d.windows()[2].shift_vs_previous_sigma[0] == doctest::Approx(0.5).epsilon(0.15));
  CHECK(d.windows()[2].shift_vs_previous_sigma[1] < 0.1);

  // NHWC gives the same moments as NCHW for the same values.
  drift_monitor a(3), b2(3);
  std::vector<std::uint8_t> nchw(2 * 3 * 4), nhwc(2 * 3 * 4);
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t i = 0; i < 4; ++i) {
        auto v = static_cast<std::uint8_t>(s * 50 + c * 10 + i * i);
        nchw[(s * 3 + c) * 4 + i] = v;
        nhwc[(s * 4 + i) * 3 + c] = v;
      }
  a.observe_batch(std::span<const std::uint8_t>(nchw), 2, layout::nchw);
  b2.observe_batch(std::span<const std::uint8_t>(nhwc), 2, layout::nhwc);
  for (std::size_t c = 0; c < 3; ++c) {
    CHECK(a.overall()[c].mean == doctest::Approx(b2.overall()[c].mean));
    CHECK(a.overall()[c].variance() == doctest::Approx(b2.overall()[c].variance()));
  }
}

TEST_CASE("noise scale: recovers tr(Sigma)/|G|^2 from simulated minibatch gradients") {
  // Per-example gradient g_i = G + e_i, e_i ~ N(0, sigma^2 I) in D dims: tr(Sigma) = D sigma^2.
  const std::size_t D = 50;
  const double sigma = 2.0, g = 0.5;  // |G|^2 = D * 0.25, tr = D * 4 -> B_simple = 16
  noise_scale_estimator est({.b_small = 8, .b_big = 128});
  auto sq_norm_of_mean = [&](std::size_t B, std::uint64_t key) {
    double s = 0;
    for (std::size_t d = 0; d < D; ++d) {
      double sum = 0;
      for (std::size_t i = 0; i < B; ++i) {
        sluice::counter_rng r(key, d, i);
        // Box-Muller normal
        double u1 = r.uniform() + 1e-300, u2 = r.uniform();
        sum += g + sigma * std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      }
      const double m = sum / static_cast<double>(B);
      s += m * m;
    }
    return s;
  };
  for (std::uint64_t k = 0; k < 300; ++k) est.add(sq_norm_of_mean(8, 2 * k), sq_norm_of_mean(128, 2 * k + 1));
  CHECK(est.b_simple() == doctest::Approx(16).epsilon(0.15));
  auto small = est.verdict(4);
  CHECK(small.larger_batch_pays);
  CHECK(small.step_reduction_if_doubled > 1.5);
  auto big = est.verdict(256);
  CHECK(!big.larger_batch_pays);
  CHECK(big.step_reduction_if_doubled < 1.1);
  CHECK(big.message.find("B_simple") != std::string::npos);
  // the closed form
  auto t = noise_scale_estimate(10, 1.0 + 5.0 / 10, 100, 1.0 + 5.0 / 100);
  CHECK(t.grad_sq_norm == doctest::Approx(1.0));
  CHECK(t.trace_sigma == doctest::Approx(5.0));
  CHECK(std::isnan(noise_scale_estimator({.b_small = 1, .b_big = 2}).b_simple()));
}

TEST_CASE("report: pipeline stats as JSON and as trace counters") {
  sluice::pipeline_stats s;
  s.batches = 12;
  s.stall_fraction = 0.25;
  s.ready_batches = 3;
  s.bytes_in_flight = 4096;
  s.stages.push_back({"read", 100, 7});
  json_writer w;
  to_json(w, s);
  CHECK(w.complete());
  CHECK(w.str().find("\"stall_fraction\":0.25") != std::string::npos);
  CHECK(w.str().find("\"stages\":[{\"name\":\"read\",\"busy_ns\":100,\"calls\":7}]") != std::string::npos);
  trace_recorder t;
  record_pipeline_counters(t, s);
  auto ev = t.events();
  REQUIRE(ev.size() == 3);
  CHECK(ev[0].name == "ready_batches");
  CHECK(ev[0].value == 3);
  CHECK(ev[1].value == 4096);
  CHECK(ev[2].value == 0.25);
}

TEST_CASE("noise scale: the EMA weights recent measurements, the plain mean all alike") {
  // Pairs chosen so each gives |G|^2 = g exactly: sq(B) = g + tr / B with tr = 0.
  noise_scale_estimator mean({.b_small = 1, .b_big = 2});
  noise_scale_estimator ema({.b_small = 1, .b_big = 2, .ema = 0.5});
  for (double g : {1.0, 2.0, 6.0}) {
    mean.add(g + 3.0, g + 1.5);  // tr(Sigma) = 3
    ema.add(g + 3.0, g + 1.5);
  }
  CHECK(mean.verdict(1).grad_sq_norm == doctest::Approx(3.0));               // (1 + 2 + 6) / 3
  CHECK(ema.verdict(1).grad_sq_norm == doctest::Approx(0.25 + 0.5 + 3.0));  // 1/4, 1/4 (2), 1/2 (6)
  CHECK(mean.verdict(1).trace_sigma == doctest::Approx(3.0));
  CHECK(mean.b_simple() == doctest::Approx(1.0));
}
