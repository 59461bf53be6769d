// What per-stage attribution costs: the same pipeline with the sampled stage timing on (the
// default, loader_options::stage_timing) and off, on a workload where that cost shows most —
// records already in memory, a cheap map stage, nothing decoded — so the per-sample work is a
// few tens of nanoseconds and the clock reads are the largest share they can ever be.
//
//   from(sequential(65536)) | read(records in memory) | map(sum of 8 bytes) | collate(256)
//   | prefetch(2, {.workers = 1})
//
// at 64-byte and 3,072-byte records. What stays on besides the switch (the per-epoch snapshot at
// each epoch's start, O(workers x stages)) costs nothing per sample.
//
// Run: build/bench/core/sluice_bench_attribution --benchmark_counters_tabular=true [--json]
// The ratio (--json) is timed over untimed samples/s from the same run: 1.0 means no cost.
#include <benchmark/benchmark.h>

#include "json_lines.hpp"

#include <sluice/sluice.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {
constexpr std::size_t records = 65536;
constexpr std::size_t batch = 256;

struct memory_records {
  using reader_concept = sluice::reader_tag;
  std::vector<std::byte> data;
  std::size_t rb;
  explicit memory_records(std::size_t record_bytes) : data(records * record_bytes), rb(record_bytes) {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 >> 3);
  }
  std::size_t size() const { return records; }
  std::span<const std::byte> record(std::size_t i) const { return {data.data() + i * rb, rb}; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(i % 10); }
  std::string_view path() const { return "memory"; }
};

void run(benchmark::State& state, bool timed) {
  const auto record_bytes = static_cast<std::size_t>(state.range(0));
  const memory_records r(record_bytes);
  auto loader = sluice::from(sluice::sample::sequential(records)) | sluice::read(r) |
                sluice::map([](sluice::record_view v) {
                  std::uint64_t x = 0;
                  std::memcpy(&x, v.data.data(), sizeof x);
                  benchmark::DoNotOptimize(x);
                  return v;
                }) |
                sluice::collate({.batch = batch}) |
                sluice::prefetch(2, {.workers = 1, .stage_timing = timed});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(epoch)) benchmark::DoNotOptimize(b.bytes().data());
    ++epoch;
  }
  const auto s = loader.stats();
  state.counters["ns_per_sample"] = benchmark::Counter(static_cast<double>(state.iterations() * records),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["stall"] = s.stall_fraction;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * records * record_bytes));
}

void BM_attribution_on(benchmark::State& state) { run(state, true); }
void BM_attribution_off(benchmark::State& state) { run(state, false); }
}  // namespace

BENCHMARK(BM_attribution_off)->Arg(64)->Arg(3072)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_attribution_on)->Arg(64)->Arg(3072)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);

int main(int argc, char** argv) {
  return sluice_bench::run_main(argc, argv,
                                {{"BM_attribution_on/64", "BM_attribution_off/64"},
                                 {"BM_attribution_on/3072", "BM_attribution_off/3072"}});
}
