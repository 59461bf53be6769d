// Alias-method draws per second for 10^6 weights, beside std::discrete_distribution (binary search
// over the CDF, O(log n)) in the same run.
//   BM_weighted_at          sluice::weighted::at(epoch, pos): key hashing + one table lookup,
//                           the cost a pipeline worker pays per sample (pure, any thread).
//   BM_alias_table_draw     alias_table::draw from one running counter_rng (no per-draw keying):
//                           the table's own cost.
//   BM_weighted_at_small_table  the same on 1,000 weights: arithmetic without cache misses.
//   BM_std_discrete         std::discrete_distribution + mt19937_64, for scale.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
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
}  // namespace

static void BM_weighted_at(benchmark::State& state) {
  sluice::sample::weighted s(weights_1m(), {.seed = 1});
  std::uint64_t pos = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.at(3, pos++));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_weighted_at);

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
