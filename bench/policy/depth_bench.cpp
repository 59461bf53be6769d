// Prefetch depth: fixed 2, 3, 4, 6 and depth::adaptive, two views side by side.
//
// BM_depth_sim/*   the discrete-event model of the loader (pipeline_sim.hpp): consumer steps
//                  lognormal(10 ms, cv 0.3), producer batches lognormal(18 ms, cv 0.6) on each of
//                  2 workers, 20,000 batches of 1 MiB. Simulated time: exact and noise-free, but a
//                  model (no CPU contention, no policy cost).
// BM_depth_real/*  the real loader (ticket ring, real threads) with sleeping stages: a map stage
//                  sleeps lognormal(3.6 ms, cv 0.6) per batch (batch of 1 sample, 64 KiB), the
//                  consumer sleeps lognormal(2 ms, cv 0.3) per step; 2 workers, 3,000 batches
//                  (the same 1.8 : 1 producer/consumer ratio as the model). sleep_for overshoots
//                  by ~0.05-0.1 ms here, so real producer and consumer times run a little long.
//                  Measured by the loader's own stats (wait, busy, step mean/std, peak bytes);
//                  wall-clock, so subject to the machine's scheduling noise.
// Counters: step_ms (mean interval between batches), jitter_ms (its std), utilization
// (busy / (busy + wait)), stall, peak_MiB (peak bytes in flight), final_depth.
// For the fixed depths the peak is (depth + workers) batches when the producer keeps up.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "pipeline_sim.hpp"
#include "sluice/core/random.hpp"
#include "sluice/policy/depth.hpp"
#include "sluice/sluice.hpp"

namespace {

template <class Policy>
void report_sim(benchmark::State& state, Policy make) {
  sluice_sim::scenario sc;
  sluice_sim::result r;
  for (auto _ : state) {
    auto p = make();
    r = sluice_sim::simulate(p, sc);
  }
  state.counters["step_ms"] = r.mean_step_ms;
  state.counters["jitter_ms"] = r.step_jitter_ms;
  state.counters["utilization"] = r.utilization;
  state.counters["stall"] = r.stall_fraction;
  state.counters["peak_MiB"] = static_cast<double>(r.peak_bytes) / (1 << 20);
  state.counters["final_depth"] = static_cast<double>(r.final_depth);
}

// ---------------------------------------------------------------- real loader
struct blob_reader {
  using reader_concept = sluice::reader_tag;
  std::vector<std::byte> data = std::vector<std::byte>(64 << 10);
  std::size_t n = 3000;
  std::size_t size() const { return n; }
  std::span<const std::byte> record(std::size_t) const { return data; }
  std::int64_t label(std::size_t) const { return 0; }
  std::string_view path() const { return "memory"; }
};

// Lognormal milliseconds from a counter-based draw (pure in the keys).
double lognormal_ms(double mean, double cv, std::uint64_t a, std::uint64_t b) {
  sluice::counter_rng g(99, a, b);
  const double u1 = (static_cast<double>(g() >> 11) + 0.5) * 0x1.0p-53, u2 = g.uniform();
  const double z = std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  const double s2 = std::log1p(cv * cv);
  return std::exp(std::log(mean) - s2 / 2 + std::sqrt(s2) * z);
}

template <class Policy>
void report_real(benchmark::State& state, Policy make) {
  static const blob_reader reader;
  auto producer = [](sluice::record_view v, const sluice::sample_context& ctx) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(lognormal_ms(3.6, 0.6, 1, ctx.id)));
    return v;
  };
  sluice::pipeline_stats st{};
  for (auto _ : state) {
    auto loader = sluice::from(sluice::sample::sequential(reader.size())) | sluice::read(reader) |
                  sluice::map(producer) | sluice::collate({.batch = 1}) |
                  sluice::prefetch(make(), {.workers = 2});
    std::uint64_t k = 0;
    for (auto& b : loader.epoch(0)) {
      benchmark::DoNotOptimize(b.size());
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(lognormal_ms(2.0, 0.3, 2, k++)));
    }
    st = loader.stats();
  }
  state.counters["step_ms"] = st.step_mean_ns / 1e6;
  state.counters["jitter_ms"] = st.step_std_ns / 1e6;
  const double busy = static_cast<double>(st.consumer_busy_ns), wait = static_cast<double>(st.consumer_wait_ns);
  state.counters["utilization"] = busy / (busy + wait);
  state.counters["stall"] = st.stall_fraction;
  state.counters["peak_MiB"] = static_cast<double>(st.peak_bytes_in_flight) / (1 << 20);
  state.counters["final_depth"] = static_cast<double>(st.depth);
}

}  // namespace

static void BM_depth_sim_fixed2(benchmark::State& s) { report_sim(s, [] { return sluice::depth::fixed{2}; }); }
static void BM_depth_sim_fixed3(benchmark::State& s) { report_sim(s, [] { return sluice::depth::fixed{3}; }); }
static void BM_depth_sim_fixed4(benchmark::State& s) { report_sim(s, [] { return sluice::depth::fixed{4}; }); }
static void BM_depth_sim_fixed6(benchmark::State& s) { report_sim(s, [] { return sluice::depth::fixed{6}; }); }
static void BM_depth_sim_adaptive(benchmark::State& s) { report_sim(s, [] { return sluice::depth::adaptive{}; }); }
BENCHMARK(BM_depth_sim_fixed2)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_depth_sim_fixed3)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_depth_sim_fixed4)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_depth_sim_fixed6)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_depth_sim_adaptive)->Iterations(1)->Unit(benchmark::kMillisecond);

static void BM_depth_real_fixed2(benchmark::State& s) { report_real(s, [] { return sluice::depth::fixed{2}; }); }
static void BM_depth_real_fixed3(benchmark::State& s) { report_real(s, [] { return sluice::depth::fixed{3}; }); }
static void BM_depth_real_fixed4(benchmark::State& s) { report_real(s, [] { return sluice::depth::fixed{4}; }); }
static void BM_depth_real_fixed6(benchmark::State& s) { report_real(s, [] { return sluice::depth::fixed{6}; }); }
static void BM_depth_real_adaptive(benchmark::State& s) { report_real(s, [] { return sluice::depth::adaptive{}; }); }
BENCHMARK(BM_depth_real_fixed2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_depth_real_fixed3)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_depth_real_fixed4)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_depth_real_fixed6)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_depth_real_adaptive)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
