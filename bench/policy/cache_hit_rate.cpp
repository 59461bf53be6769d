// Cache hit rates over several epochs with a cache holding 50 % of the data, every tier beside the
// others in one run, on the real tier classes (16 shards, 256-byte items; only keys and bytes
// move — no I/O is timed, the figure of merit is the hit rate).
//   (a) a fresh random permutation each epoch (feistel_permutation keyed by epoch);
//   (b) class-balanced draws (inverse frequency, with replacement) on a long-tailed label set
//       (100 classes, n_c = 2000 * 0.93^c, about 28,000 items).
// Counters: hit_rate_steady = hits / lookups over epochs 2..E (after the first fill);
//           hit_rate_all = over all E epochs; evictions; resident_share = bytes / data bytes.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sluice/core/random.hpp"
#include "sluice/policy/cache.hpp"
#include "sluice/sample/class_balanced.hpp"

namespace {
constexpr std::size_t item_bytes = 256;
constexpr int epochs = 6;

std::vector<std::int64_t> long_tail_labels() {
  std::vector<std::int64_t> labels;
  for (int c = 0; c < 100; ++c) {
    const auto n = std::max<std::size_t>(1, static_cast<std::size_t>(2000.0 * std::pow(0.93, c)));
    labels.insert(labels.end(), n, c);
  }
  return labels;
}

template <class Tier, class Order>
void run_epochs(benchmark::State& state, Tier tier, std::uint64_t n, Order order) {
  const auto payload = sluice::make_cache_buffer(std::vector<std::byte>(item_bytes));
  std::uint64_t hits_all = 0, lookups_all = 0, hits_steady = 0, lookups_steady = 0;
  for (auto _ : state) {
    for (int e = 0; e < epochs; ++e) {
      for (std::uint64_t p = 0; p < n; ++p) {
        const std::uint64_t key = order(static_cast<std::uint64_t>(e), p);
        const bool hit = tier.lookup(key).hit;
        if (!hit) tier.insert(key, payload, item_bytes);
        ++lookups_all;
        hits_all += hit;
        if (e > 0) {
          ++lookups_steady;
          hits_steady += hit;
        }
      }
    }
  }
  const auto s = tier.stats();
  state.counters["hit_rate_steady"] = static_cast<double>(hits_steady) / static_cast<double>(lookups_steady);
  state.counters["hit_rate_all"] = static_cast<double>(hits_all) / static_cast<double>(lookups_all);
  state.counters["evictions"] = static_cast<double>(s.evictions);
  state.counters["resident_share"] = static_cast<double>(s.bytes) / static_cast<double>(n * item_bytes);
}

constexpr std::uint64_t perm_items = 100'000;
auto permutation_order() {
  return [](std::uint64_t e, std::uint64_t p) { return sluice::feistel_permutation(perm_items, sluice::mix_keys(11, e))(p); };
}
}  // namespace

static void BM_hits_permutation_minio(benchmark::State& st) {
  run_epochs(st, sluice::tier::minio(perm_items * item_bytes / 2), perm_items, permutation_order());
}
static void BM_hits_permutation_lru(benchmark::State& st) {
  run_epochs(st, sluice::tier::lru(perm_items * item_bytes / 2), perm_items, permutation_order());
}
static void BM_hits_permutation_weighted(benchmark::State& st) {
  // Under a permutation every item has the same probability: weighted degenerates to minio.
  run_epochs(st, sluice::tier::weighted(perm_items * item_bytes / 2, std::vector<double>(perm_items, 1.0)),
             perm_items, permutation_order());
}
BENCHMARK(BM_hits_permutation_minio)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hits_permutation_lru)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hits_permutation_weighted)->Iterations(1)->Unit(benchmark::kMillisecond);

namespace {
struct long_tail_case {
  std::vector<std::int64_t> labels = long_tail_labels();
  sluice::sample::class_balanced<> sampler{labels, {}, {.seed = 5}};
  std::uint64_t n() const { return labels.size(); }
  std::uint64_t bytes_half() const { return n() * item_bytes / 2; }
};
const long_tail_case& lt() {
  static const long_tail_case c;
  return c;
}
auto balanced_order() {
  return [](std::uint64_t e, std::uint64_t p) { return lt().sampler.at(e, p); };
}
}  // namespace

static void BM_hits_classbalanced_minio(benchmark::State& st) {
  run_epochs(st, sluice::tier::minio(lt().bytes_half()), lt().n(), balanced_order());
}
static void BM_hits_classbalanced_lru(benchmark::State& st) {
  run_epochs(st, sluice::tier::lru(lt().bytes_half()), lt().n(), balanced_order());
}
static void BM_hits_classbalanced_weighted(benchmark::State& st) {
  run_epochs(st, sluice::tier::weighted(lt().bytes_half(), lt().sampler.sample_probabilities()), lt().n(),
             balanced_order());
}
BENCHMARK(BM_hits_classbalanced_minio)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hits_classbalanced_lru)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hits_classbalanced_weighted)->Iterations(1)->Unit(benchmark::kMillisecond);
