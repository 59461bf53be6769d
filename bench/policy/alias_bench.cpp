// Alias-method draws per second for 10^6 weights, beside std::discrete_distribution (binary search
// over the CDF, O(log n)) in the same run.
//   BM_weighted_at          sluice::weighted::at(epoch, pos): key hashing + one table lookup,
//                           the cost a pipeline worker pays per sample (pure, any thread).
//   BM_alias_table_draw     alias_table::draw from one running counter_rng (no per-draw keying):
//                           the table's own cost.
//   BM_weighted_at_small_table  the same on 1,000 weights: arithmetic without cache misses.
//   BM_std_discrete         std::discrete_distribution + mt19937_64, for scale.
//   BM_weighted_draw_n      sluice::weighted::draw_n(epoch, first_pos, out) in batches of 256:
//                           the same ids as at(), grouped so that the cache misses overlap.
//   BM_alias_build          the table's build (single pass, one work array, no mass array).
//   BM_alias_build_textbook the textbook two-stack Vose build (vector masses, push_back
//                           partition; sluice's previous build), kept here for the before/after.
//   BM_weighted_epoch_*     build a sampler and draw 10^6 ids, as bench/peers' weighted pass
//                           does (once with at(), once with draw_n()).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <algorithm>
#include <vector>

#include "sluice/core/random.hpp"
#include "sluice/sample/alias.hpp"

namespace {
std::vector<double> heavy_tailed_weights(std::size_t n) {
  std::vector<double> w(n);
  std::mt19937_64 g(42);
  std::lognormal_distribution<double> d(0.0, 2.0);
  for (auto& x : w) x = d(g);
  return w;
}
const std::vector<double>& weights_1m() {
  static const auto w = heavy_tailed_weights(1'000'000);
  return w;
}

// The textbook build (sluice's build before the single-pass one): masses in a vector, small and
// large work lists as two vectors, std::round. Produces the same columns (checked in
// tests/policy), so only the time differs.
using column = sluice::sample::alias_table::column;
std::vector<column> textbook_vose(std::span<const double> weights) {
  const std::size_t n = weights.size();
  double total = 0;
  for (double w : weights) total += w;
  std::vector<column> columns(n);
  std::vector<double> scaled(n);
  std::vector<std::uint32_t> small, large;
  small.reserve(n);
  large.reserve(n);
  const double scale = static_cast<double>(n) / total;
  auto make = [](double keep, std::uint32_t self, std::uint32_t alias) {
    const double t = std::round(keep * 0x1.0p32);
    return t >= 0x1.0p32 ? column{0, self} : column{static_cast<std::uint32_t>(t), alias};
  };
  for (std::size_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * scale;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<std::uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const std::uint32_t s = small.back(), l = large.back();
    small.pop_back();
    columns[s] = make(scaled[s], s, l);
    scaled[l] = (scaled[l] + scaled[s]) - 1.0;
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  for (std::uint32_t i : large) columns[i] = column{0, i};
  for (std::uint32_t i : small) columns[i] = column{0, i};
  return columns;
}
}  // namespace

static void BM_weighted_at(benchmark::State& state) {
  sluice::sample::weighted s(weights_1m(), {.seed = 1});
  std::uint64_t pos = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.at(3, pos++));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_weighted_at);

// The same ids as BM_weighted_at, asked for 256 at a time (a batch's worth).
static void BM_weighted_draw_n(benchmark::State& state) {
  sluice::sample::weighted s(weights_1m(), {.seed = 1});
  std::vector<std::uint64_t> out(256);
  std::uint64_t pos = 0;
  for (auto _ : state) {
    s.draw_n(3, pos, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    pos += out.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * out.size()));
}
BENCHMARK(BM_weighted_draw_n);

// bench/peers' weighted pass: build the sampler over 10^6 weights, then draw 10^6 ids.
static void BM_weighted_epoch_at(benchmark::State& state) {
  std::uint64_t epoch = 0, sum = 0;
  for (auto _ : state) {
    const sluice::sample::weighted s(weights_1m(), {.seed = 7});
    for (std::uint64_t pos = 0; pos < s.size(epoch); ++pos) sum += s.at(epoch, pos);
    ++epoch;
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 1'000'000);
}
BENCHMARK(BM_weighted_epoch_at)->Unit(benchmark::kMillisecond);

static void BM_weighted_epoch_draw_n(benchmark::State& state) {
  std::uint64_t epoch = 0, sum = 0;
  std::vector<std::uint64_t> out(4096);
  for (auto _ : state) {
    const sluice::sample::weighted s(weights_1m(), {.seed = 7});
    const std::uint64_t n = s.size(epoch);
    for (std::uint64_t pos = 0; pos < n; pos += out.size()) {
      const std::span<std::uint64_t> chunk(out.data(), std::min<std::uint64_t>(out.size(), n - pos));
      s.draw_n(epoch, pos, chunk);
      for (std::uint64_t id : chunk) sum += id;
    }
    ++epoch;
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 1'000'000);
}
BENCHMARK(BM_weighted_epoch_draw_n)->Unit(benchmark::kMillisecond);

// Same call on 1,000 weights (8 KB table, always in L1): the arithmetic alone, without the
// cache miss a 10^6-entry table costs on a random column.
static void BM_weighted_at_small_table(benchmark::State& state) {
  std::vector<double> w(weights_1m().begin(), weights_1m().begin() + 1000);
  sluice::sample::weighted s(w, {.seed = 1});
  std::uint64_t pos = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.at(3, pos++));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_weighted_at_small_table);

static void BM_alias_table_draw(benchmark::State& state) {
  sluice::sample::alias_table t(weights_1m());
  sluice::counter_rng rng(1, 2, 3);
  for (auto _ : state) benchmark::DoNotOptimize(t.draw(rng));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_alias_table_draw);

static void BM_std_discrete(benchmark::State& state) {
  const auto& w = weights_1m();
  std::discrete_distribution<std::uint64_t> d(w.begin(), w.end());
  std::mt19937_64 g(1);
  for (auto _ : state) benchmark::DoNotOptimize(d(g));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_std_discrete);

static void BM_alias_build(benchmark::State& state) {
  for (auto _ : state) {
    sluice::sample::alias_table t(weights_1m());
    benchmark::DoNotOptimize(t.size());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 1'000'000);
}
BENCHMARK(BM_alias_build)->Unit(benchmark::kMillisecond);

static void BM_alias_build_textbook(benchmark::State& state) {
  for (auto _ : state) {
    auto columns = textbook_vose(weights_1m());
    benchmark::DoNotOptimize(columns.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 1'000'000);
}
BENCHMARK(BM_alias_build_textbook)->Unit(benchmark::kMillisecond);
