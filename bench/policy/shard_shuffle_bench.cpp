// shard_shuffle (sample/shard_shuffle.hpp): shuffle quality against read amplification and the
// disk tier it needs, for windows of 1, 4, 16 and 64 shards, beside a full random permutation
// (sample::shuffle) in the same run. The dataset is what packers often write: 512 shards of 200
// samples, 10 classes stored in order (shards 0-51 class 0, ...), so a shuffle that keeps shards
// together shows in the batches' class balance. Each benchmark times one epoch of at() calls
// (all ranks of the world) and reports, from that epoch:
//   class_std     std of a class's count in a batch of 256, over batches and classes, divided by
//                 the binomial value of a uniformly random batch (sqrt(256 * 0.1 * 0.9) = 4.8):
//                 1.0 is as good as a full shuffle, larger is worse balanced
//   shards_batch  distinct shards in a batch of 256 (a full shuffle: ~200 of 512)
//   footprint     shards a rank must hold at once: (partitions / world) x (window + 1)
//   amp_fit       read amplification (shard fetches / shards the rank reads) under an LRU tier of
//                 `footprint` shards per rank: 1.0 = each shard fetched once an epoch
//   amp_tier32    the same under an LRU tier of 32 shards per rank
//   displacement  mean |position - storage position| / (n / 3) (1.0 for a random permutation)
// Args: window, partitions, world.
//
// Resuming mid-epoch at another world size (the "time to resume"): a loader over
// distributed{shard_shuffle} stopped by 8 ranks at half the epoch is rebuilt for rank 0 of 4 at
// that global position; the time is from building the loader to holding its first batch.
//   BM_first_batch_fresh   the same loader from the epoch's start (the floor: threads, prepare)
//   BM_resume_at_position  from the checkpoint: the sampler starts there, nothing is replayed
//   BM_resume_by_replay    what a loader without random-access order must do: start at 0 and
//                          discard batches up to the checkpoint (the rank's share of it)
// Records are 64 bytes in memory, batch 256, prefetch(2, 2 workers).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <list>
#include <unordered_map>
#include <vector>

#include "sluice/sluice.hpp"

namespace {

constexpr std::uint64_t shards = 512, per_shard = 200, n = shards * per_shard, classes = 10, batch = 256;

std::uint64_t class_of(std::uint64_t id) { return id / per_shard * classes / shards; }

// Misses of an LRU cache of `capacity` shards over the sequence of shards a rank reads.
double amplification(const std::vector<std::uint64_t>& ids, std::size_t capacity) {
  std::list<std::uint64_t> lru;
  std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> where;
  std::uint64_t misses = 0;
  for (std::uint64_t id : ids) {
    const std::uint64_t s = id / per_shard;
    if (auto it = where.find(s); it != where.end()) {
      lru.splice(lru.begin(), lru, it->second);
      continue;
    }
    ++misses;
    lru.push_front(s);
    where[s] = lru.begin();
    if (lru.size() > capacity) {
      where.erase(lru.back());
      lru.pop_back();
    }
  }
  std::unordered_map<std::uint64_t, int> distinct;
  for (std::uint64_t id : ids) distinct[id / per_shard] = 1;
  return static_cast<double>(misses) / static_cast<double>(distinct.size());
}

void report(benchmark::State& state, const std::vector<std::vector<std::uint64_t>>& ranks, std::size_t footprint) {
  // Quality from the global order (ranks interleaved back), batches of 256 from rank 0's view
  // (every rank's batches look alike).
  std::vector<std::uint64_t> global;
  for (std::size_t j = 0; j < ranks[0].size(); ++j)
    for (const auto& r : ranks) global.push_back(r[j]);
  double var = 0, shards_per_batch = 0;
  std::size_t batches = 0;
  const auto& mine = ranks[0];
  for (std::size_t b = 0; b + batch <= mine.size(); b += batch, ++batches) {
    std::vector<double> count(classes, 0);
    std::unordered_map<std::uint64_t, int> distinct;
    for (std::size_t k = b; k < b + batch; ++k) {
      count[class_of(mine[k])] += 1;
      distinct[mine[k] / per_shard] = 1;
    }
    for (double c : count) var += (c - batch / double(classes)) * (c - batch / double(classes));
    shards_per_batch += static_cast<double>(distinct.size());
  }
  const double binomial = std::sqrt(batch * 0.1 * 0.9);
  state.counters["class_std"] = std::sqrt(var / static_cast<double>(batches * classes)) / binomial;
  state.counters["shards_batch"] = shards_per_batch / static_cast<double>(batches);
  double disp = 0;
  for (std::size_t p = 0; p < global.size(); ++p) disp += std::abs(static_cast<double>(p) - static_cast<double>(global[p]));
  state.counters["displacement"] = disp / static_cast<double>(global.size()) / (static_cast<double>(n) / 3.0);
  double fit = 0, small = 0;
  for (const auto& r : ranks) {
    fit += amplification(r, footprint);
    small += amplification(r, 32);
  }
  state.counters["footprint"] = static_cast<double>(footprint);
  state.counters["amp_fit"] = fit / static_cast<double>(ranks.size());
  state.counters["amp_tier32"] = small / static_cast<double>(ranks.size());
}

template <class Inner>
void run(benchmark::State& state, const Inner& inner, std::uint64_t world, std::size_t footprint) {
  const std::uint64_t epoch = 1;
  std::vector<std::vector<std::uint64_t>> ranks(world);
  for (auto _ : state) {
    for (std::uint64_t r = 0; r < world; ++r) {
      sluice::sample::distributed d{inner, {.rank = r, .world = world, .tail = sluice::sample::tail::drop}};
      if constexpr (requires { d.prepare(epoch); }) d.prepare(epoch);
      auto& ids = ranks[r];
      ids.resize(d.size(epoch));
      for (std::uint64_t j = 0; j < ids.size(); ++j) ids[j] = d.at(epoch, j);
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  report(state, ranks, footprint);
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> r;
  for (std::uint64_t s = 0; s < shards; ++s) r.emplace_back(s * per_shard, (s + 1) * per_shard);
  return r;
}

void BM_shard_shuffle(benchmark::State& state) {
  const auto window = static_cast<std::uint64_t>(state.range(0));
  const auto partitions = static_cast<std::uint64_t>(state.range(1));
  const auto world = static_cast<std::uint64_t>(state.range(2));
  const sluice::sample::shard_shuffle order(ranges(), {.seed = 7, .window = window, .partitions = partitions});
  run(state, order, world, static_cast<std::size_t>(partitions / world * (window + 1)));
}
// A full random permutation (sample::shuffle): footprint = every shard.
void BM_full_shuffle(benchmark::State& state) {
  const auto world = static_cast<std::uint64_t>(state.range(0));
  run(state, sluice::sample::shuffle{n, {.seed = 7}}, world, shards);
}

}  // namespace

// 102,400 records of 64 bytes in memory (record i's first 8 bytes: i).
struct memory_records {
  using reader_concept = sluice::reader_tag;
  std::vector<std::byte> data = std::vector<std::byte>(n * 64);
  memory_records() {
    for (std::uint64_t i = 0; i < n; ++i) std::memcpy(data.data() + i * 64, &i, 8);
  }
  std::size_t size() const { return n; }
  std::span<const std::byte> record(std::size_t i) const { return {data.data() + i * 64, 64}; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(class_of(i)); }
  std::string_view path() const { return "memory"; }
};
const memory_records& records() {
  static const memory_records r;
  return r;
}

// Rank 0 of `world` from global position `start`; discards `skip` batches, then takes one.
std::uint64_t first_batch(std::uint64_t world, std::uint64_t start, std::uint64_t skip) {
  const sluice::sample::shard_shuffle order(ranges(), {.seed = 7, .window = 16, .partitions = 8});
  auto loader = sluice::from(sluice::sample::distributed{order, {.rank = 0, .world = world, .start = start}}) |
                sluice::read(records()) | sluice::collate({.batch = batch}) | sluice::prefetch(2, {.workers = 2});
  std::uint64_t seen = 0, id = 0;
  for (auto& b : loader.epoch(1)) {
    id = b.ids()[0];
    if (seen++ == skip) break;
  }
  return id;
}
constexpr std::uint64_t checkpoint = n / 2;  // 8 ranks stopped here: 6,400 samples each

void BM_first_batch_fresh(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(first_batch(4, 0, 0));
}
void BM_resume_at_position(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(first_batch(4, checkpoint, 0));
}
void BM_resume_by_replay(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(first_batch(4, 0, checkpoint / 4 / batch));
}

BENCHMARK(BM_shard_shuffle)
    ->ArgNames({"window", "partitions", "world"})
    ->ArgsProduct({{1, 4, 16, 64}, {8}, {1, 8}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_full_shuffle)->ArgNames({"world"})->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_first_batch_fresh)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resume_at_position)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resume_by_replay)->Unit(benchmark::kMicrosecond);
