// Decode placement (policy/placement.hpp, stage/split_decode.hpp): host-only, device-only and
// balanced splits of each batch's images between the host workers and a device, through the real
// loader, on a model of both sides with known costs:
//   host    a codec that holds its thread for 200 us of wall time per image (a busy loop on the
//           clock, so a preempted thread still finishes on time) and writes a pattern;
//   device  simulated_device: one thread standing for the GPU, a job of k images takes
//           launch 300 us + k * per_image (slept), jobs of all workers queued one at a time.
// BM_placement/<policy>/<device us per image>/<workers>: one epoch of 768 images in batches of
// 32 an iteration; counters: images/s (items_per_second), device_share (images the device
// decoded), fallbacks. Per image the host's cost is 200 us on each worker, so host-only runs at
// 5,000 x workers images/s; device-only at 32 / (300 + 32 * per_image) us per batch.
// Wall-clock: real sleeps and threads, so subject to the machine's scheduling noise. Compare
// policies within one run (--benchmark_filter=placement).
//
// BM_placement_sim/<policy>/<device us per image>/<workers>: the same policies, the same
// measurements (host_ns, device_ns from the submit), on a discrete-event model instead of threads:
// each worker takes the next batch when it is free, decodes its n - k images at 200 us each, the
// device runs the jobs in submission order at launch 300 us + k * per_image, every duration
// multiplied by a lognormal jitter (cv 0.2); 20,000 batches of 32. Exact and noise-free, but a
// model: no wake-up latency, no contention between the workers and the device thread. Counters:
// images_per_s (simulated), device_share; `oracle` is the best fixed fraction (k/32 for every k,
// tried one by one on the same jitter).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "simulated_device.hpp"  // tests/support: the test double of a device decoder

namespace {

using namespace std::chrono_literals;
constexpr std::size_t image_bytes = 64 * 64 * 3;

// A codec of known cost: `cost` of wall time, then a pattern of the record's first byte.
struct timed_codec {
  using codec_concept = sluice::codec_tag;
  std::chrono::nanoseconds cost{200us};
  [[nodiscard]] std::size_t output_bytes() const noexcept { return image_bytes; }
  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sluice::sample_context&) const {
    const auto until = std::chrono::steady_clock::now() + cost;
    while (std::chrono::steady_clock::now() < until) {
    }
    std::memset(out.data(), in.empty() ? 0 : std::to_integer<int>(in[0]), out.size());
  }
};

using encoded = sluice::schema<sluice::field<"img", std::uint8_t, sluice::variable>>;

struct records {
  using reader_concept = sluice::reader_tag;
  std::vector<std::vector<std::byte>> data;
  explicit records(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) data.push_back(std::vector<std::byte>(2048, std::byte(i & 0xff)));
  }
  [[nodiscard]] std::size_t size() const { return data.size(); }
  [[nodiscard]] std::string_view path() const { return "bench"; }
  [[nodiscard]] sluice::fields_sample<encoded> fields(std::size_t i) const {
    sluice::fields_sample<encoded> s{.id = i, .origin = path()};
    s.set<"img">(data[i]);
    return s;
  }
};

template <class Policy>
void run(benchmark::State& state, Policy policy) {
  const auto per_image = std::chrono::microseconds(state.range(0));
  const auto workers = static_cast<std::size_t>(state.range(1));
  const records data(768);
  // The device's own codec writes the same bytes without spending host time.
  const sluice_test::simulated_device dev(timed_codec{0ns}, {.launch = 300us, .per_image = per_image});
  auto split = sluice::split_decode<"img">(timed_codec{}, dev, policy);
  auto loader = sluice::from(sluice::sample::shuffle(data.size(), {.seed = 1})) | sluice::read(data) |
                sluice::collate({.batch = 32}, split) | sluice::prefetch(2, {.workers = workers});
  std::uint64_t e = 0;
  for (auto _ : state) {
    std::size_t n = 0;
    for (auto& b : loader.epoch(e++)) n += b.size();
    benchmark::DoNotOptimize(n);
  }
  const auto st = split.stats();
  state.SetItemsProcessed(static_cast<std::int64_t>(st.host_images + st.device_images + st.fallbacks));
  state.counters["device_share"] =
      static_cast<double>(st.device_images) / static_cast<double>(std::max<std::uint64_t>(1, st.host_images + st.device_images));
}

void BM_placement_host_only(benchmark::State& s) { run(s, sluice::placement::host_only{}); }
void BM_placement_device_only(benchmark::State& s) { run(s, sluice::placement::device_only{}); }
void BM_placement_balanced(benchmark::State& s) { run(s, sluice::placement::balanced{}); }

void mixes(benchmark::internal::Benchmark* b) {
  for (const int workers : {1, 2})
    for (const int us : {25, 100, 200, 400, 1600}) b->Args({us, workers});
  b->ArgNames({"device_us", "workers"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
}

// ---- The discrete-event model -------------------------------------------------------------------

struct sim_result {
  double images_per_s = 0, device_share = 0;
};

template <class Policy>
sim_result simulate(const Policy& p, double device_us, std::size_t workers, std::size_t batches = 20000) {
  constexpr std::size_t n = 32;
  constexpr double host_us = 200, launch_us = 300;
  std::mt19937_64 rng(42);
  const double cv = 0.2, s2 = std::log(1 + cv * cv);
  std::lognormal_distribution<double> jitter(-s2 / 2, std::sqrt(s2));
  std::vector<double> free_at(workers, 0.0);
  double device_free = 0;
  std::uint64_t on_device = 0;
  for (std::size_t b = 0; b < batches; ++b) {
    auto w = std::min_element(free_at.begin(), free_at.end());
    const double t0 = *w;
    const std::size_t k = std::min(n, static_cast<std::size_t>(p.device_count(n)));
    const double host_done = t0 + static_cast<double>(n - k) * host_us * jitter(rng);
    double dev_done = t0;
    if (k > 0) {
      dev_done = std::max(t0, device_free) + (launch_us + static_cast<double>(k) * device_us) * jitter(rng);
      device_free = dev_done;
    }
    p.observe({.batch = n,
               .on_device = k,
               .host_ns = static_cast<std::uint64_t>((host_done - t0) * 1e3),
               .device_ns = static_cast<std::uint64_t>((dev_done - t0) * 1e3)});
    *w = std::max(host_done, dev_done);
    on_device += k;
  }
  const double makespan_s = *std::max_element(free_at.begin(), free_at.end()) * 1e-6;
  return {static_cast<double>(batches * n) / makespan_s, static_cast<double>(on_device) / static_cast<double>(batches * n)};
}

template <class Make>
void run_sim(benchmark::State& state, Make make) {
  const auto device_us = static_cast<double>(state.range(0));
  const auto workers = static_cast<std::size_t>(state.range(1));
  sim_result r;
  for (auto _ : state) r = simulate(make(), device_us, workers);
  state.counters["images_per_s"] = r.images_per_s;
  state.counters["device_share"] = r.device_share;
}

void BM_placement_sim_host_only(benchmark::State& s) { run_sim(s, [] { return sluice::placement::host_only{}; }); }
void BM_placement_sim_device_only(benchmark::State& s) { run_sim(s, [] { return sluice::placement::device_only{}; }); }
void BM_placement_sim_balanced(benchmark::State& s) { run_sim(s, [] { return sluice::placement::balanced{}; }); }
void BM_placement_sim_oracle(benchmark::State& state) {
  const auto device_us = static_cast<double>(state.range(0));
  const auto workers = static_cast<std::size_t>(state.range(1));
  sim_result best;
  for (auto _ : state) {
    best = {};
    for (int k = 0; k <= 32; ++k) {
      const auto r = simulate(sluice::placement::fixed{k / 32.0}, device_us, workers);
      if (r.images_per_s > best.images_per_s) best = r;
    }
  }
  state.counters["images_per_s"] = best.images_per_s;
  state.counters["device_share"] = best.device_share;
}

void sim_mixes(benchmark::internal::Benchmark* b) {
  for (const int workers : {1, 2, 4, 16})
    for (const int us : {25, 100, 200, 400, 1600}) b->Args({us, workers});
  b->ArgNames({"device_us", "workers"})->Iterations(1)->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_placement_sim_host_only)->Apply(sim_mixes);
BENCHMARK(BM_placement_sim_device_only)->Apply(sim_mixes);
BENCHMARK(BM_placement_sim_balanced)->Apply(sim_mixes);
BENCHMARK(BM_placement_sim_oracle)->Apply(sim_mixes);
BENCHMARK(BM_placement_host_only)->Apply(mixes);
BENCHMARK(BM_placement_device_only)->Apply(mixes);
BENCHMARK(BM_placement_balanced)->Apply(mixes);
