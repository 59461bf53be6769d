// Placement policies (policy/placement.hpp) against a model of the two sides: the host decodes an
// image in `a` ns, the device decodes k images in launch + k * per_image ns. No clocks: each
// batch's measurements come from the model, so the tests are exact and cannot be flaky.
//   - balanced settles within one image of the split that finishes a batch soonest, from either
//     end, for fast and slow devices, and that batch time is never worse than the better of
//     host-only and device-only;
//   - a hopeless side gets no images but a probe every probe_every batches, and is taken back
//     when it recovers;
//   - the trainer's stall steers the device budget down when the loader is not short, and back;
//   - host_only / device_only / fixed, bad options, and concurrent use (run under TSan in CI).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/policy/placement.hpp"

using namespace sluice;

namespace {

struct model {
  double a, launch, per_image;
  [[nodiscard]] double host(std::size_t h) const { return static_cast<double>(h) * a; }
  [[nodiscard]] double device(std::size_t k) const { return k == 0 ? 0 : launch + static_cast<double>(k) * per_image; }
  [[nodiscard]] double batch(std::size_t n, std::size_t k) const { return std::max(host(n - k), device(k)); }
  [[nodiscard]] placement::observation observe(std::size_t n, std::size_t k) const {
    return {.batch = n,
            .on_device = k,
            .host_ns = static_cast<std::uint64_t>(host(n - k)),
            .device_ns = static_cast<std::uint64_t>(device(k))};
  }
  // The k that finishes a batch soonest (ties: fewer on the device).
  [[nodiscard]] std::size_t best(std::size_t n) const {
    std::size_t kb = 0;
    for (std::size_t k = 1; k <= n; ++k)
      if (batch(n, k) < batch(n, kb)) kb = k;
    return kb;
  }
};

// Runs `batches` batches of n through p on model m; returns the k of each.
template <class P>
std::vector<std::size_t> run(const P& p, const model& m, std::size_t n, std::size_t batches) {
  std::vector<std::size_t> ks;
  for (std::size_t i = 0; i < batches; ++i) {
    const std::size_t k = p.device_count(n);
    ks.push_back(k);
    p.observe(m.observe(n, k));
  }
  return ks;
}

struct consumer_stats {
  std::uint64_t consumer_wait_ns = 0, consumer_busy_ns = 0;
};

}  // namespace

TEST_CASE("balanced placement settles within one image of the fastest split, never slower than either side alone") {
  const std::size_t n = 64;
  const model models[] = {
      {100e3, 200e3, 25e3},    // a device 4x the host per image
      {100e3, 2000e3, 400e3},  // a device slower than the host per image, with a costly launch
      {100e3, 50e3, 5e3},      // a device 20x the host
      {100e3, 100e3, 100e3},   // equal per image
  };
  for (const auto& m : models) {
    for (const double start : {0.0, 0.5, 1.0}) {
      CAPTURE(m.per_image);
      CAPTURE(start);
      const placement::balanced p({.initial_fraction = start});
      const auto ks = run(p, m, n, 80);
      const std::size_t k = ks.back(), kb = m.best(n);
      CAPTURE(k);
      CAPTURE(kb);
      CHECK(k + 1 >= kb);
      CHECK(k <= kb + 1);
      const double t = m.batch(n, k);
      CHECK(t <= std::min(m.batch(n, 0), m.batch(n, n)) + m.a);  // up to one host image of granularity
      CHECK(t <= 1.05 * m.batch(n, kb));
    }
  }
}

TEST_CASE("balanced placement: a hopeless device gets only probes, and is taken back when it recovers") {
  const std::size_t n = 32;
  const model slow{10e3, 5000e3, 100e3};  // one image on the device: 5.1 ms; the whole batch on the host: 0.32 ms
  const placement::balanced p({.initial_fraction = 0.5, .probe_every = 16});
  const auto ks = run(p, slow, n, 96);
  const auto tail = std::vector<std::size_t>(ks.begin() + 16, ks.end());
  const auto probes = static_cast<std::size_t>(std::count(tail.begin(), tail.end(), std::size_t{1}));
  CHECK(probes >= 4);
  CHECK(probes <= 6);
  CHECK(std::count(tail.begin(), tail.end(), std::size_t{0}) + static_cast<std::ptrdiff_t>(probes) ==
        static_cast<std::ptrdiff_t>(tail.size()));
  CHECK(p.fraction() == 0.0);

  const model fast{10e3, 20e3, 2e3};  // the device freed: 2.2 us per image at k = 10
  const auto after = run(p, fast, n, 64);
  CHECK(after.back() + 1 >= fast.best(n));
  CHECK(after.back() <= fast.best(n) + 1);
  CHECK(p.fraction() > 0.5);
}

TEST_CASE("balanced placement: a hopeless host gets only probes") {
  const std::size_t n = 32;
  const model m{5000e3, 10e3, 10e3};  // one host image: 5 ms; the whole batch on the device: 0.33 ms
  const placement::balanced p({.probe_every = 8});
  const auto ks = run(p, m, n, 64);
  const auto tail = std::vector<std::size_t>(ks.begin() + 8, ks.end());
  const auto probes = static_cast<std::size_t>(std::count(tail.begin(), tail.end(), n - 1));
  CHECK(probes >= 6);
  CHECK(probes <= 8);
  CHECK(static_cast<std::size_t>(std::count(tail.begin(), tail.end(), n)) + probes == tail.size());
}

TEST_CASE("balanced placement: the trainer's stall spends device time only while the loader is short") {
  const std::size_t n = 64;
  const model m{100e3, 200e3, 25e3};
  const placement::balanced p({.target_stall = 0.05, .budget_step = 0.25});
  run(p, m, n, 40);
  const std::size_t balanced = p.device_count(n);
  CHECK(balanced > n / 2);

  consumer_stats st;
  p.observe_consumer(st);  // the first report only sets the origin
  CHECK(p.budget() == 1.0);
  for (int i = 0; i < 4; ++i) {  // 1 % stall: the loader is not the bottleneck
    st.consumer_wait_ns += 1'000'000;
    st.consumer_busy_ns += 99'000'000;
    p.observe_consumer(st);
  }
  CHECK(p.budget() == 0.0);
  CHECK(p.device_count(n) == 0);

  st.consumer_wait_ns += 30'000'000;  // 23 % stall: short again
  st.consumer_busy_ns += 100'000'000;
  p.observe_consumer(st);
  CHECK(p.budget() == doctest::Approx(0.5));
  p.observe_consumer(consumer_stats{st.consumer_wait_ns + 50'000'000, st.consumer_busy_ns + 50'000'000});
  CHECK(p.budget() == 1.0);
  CHECK(p.device_count(n) + 1 >= balanced);

  // Between target / 2 and target: nothing changes.
  const double before = p.budget();
  p.observe_consumer(consumer_stats{st.consumer_wait_ns + 50'000'000 + 4'000'000, st.consumer_busy_ns + 50'000'000 + 96'000'000});
  CHECK(p.budget() == before);
}

TEST_CASE("host_only, device_only and fixed placements, and balanced refuses nonsense options") {
  CHECK(placement::host_only{}.device_count(64) == 0);
  CHECK(placement::device_only{}.device_count(64) == 64);
  CHECK(placement::fixed{0.25}.device_count(64) == 16);
  CHECK(placement::fixed{1.5}.device_count(10) == 10);
  CHECK(placement::fixed{-1}.device_count(10) == 0);
  CHECK(placement::balanced{}.device_count(0) == 0);
  CHECK_THROWS_AS(placement::balanced({.initial_fraction = 1.5}), usage_error);
  CHECK_THROWS_AS(placement::balanced({.gain = 0}), usage_error);
  CHECK_THROWS_AS(placement::balanced({.probe_every = 0}), usage_error);
  CHECK_THROWS_AS(placement::balanced({.target_stall = 1.0}), usage_error);
  // Copies share one state: what the pipeline's copy learns, the trainer's copy reads.
  const placement::balanced p;
  const placement::balanced copy = p;
  copy.observe({.batch = 10, .on_device = 5, .host_ns = 500, .device_ns = 100});
  CHECK(p.batches_observed() == 1);
  CHECK(p.host_seconds_per_image() == doctest::Approx(100e-9));
  CHECK(p.device_seconds_per_image() == doctest::Approx(20e-9));
}

TEST_CASE("balanced placement is safe to ask and tell from many threads") {
  const placement::balanced p;
  const model m{100e3, 200e3, 25e3};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      consumer_stats st;
      for (int i = 0; i < 500; ++i) {
        const std::size_t k = p.device_count(64);
        p.observe(m.observe(64, k));
        if (t == 0) {
          st.consumer_wait_ns += 10;
          st.consumer_busy_ns += 100;
          p.observe_consumer(st);
        }
      }
    });
  for (auto& t : ts) t.join();
  CHECK(p.batches_observed() == 2000);
}
