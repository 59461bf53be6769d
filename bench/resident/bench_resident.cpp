// One shuffled epoch of Fashion-MNIST-sized data (60,000 records of 784 bytes, int64 labels,
// batches of 256) three ways, in one run:
//   BM_host_pipeline/W   from(shuffle) | read(fixed_records) | collate | prefetch(2, W workers),
//                        the file mapped and in the page cache (sluice's host loader)
//   BM_resident_epoch    cuda::resident_dataset on Thrust's CPP backend: the records held in
//                        memory, the epoch's order computed in one pass, each batch gathered (bytes
//                        + labels) in the calling thread; ..._normalized also writes the floats
//   BM_roofline_memcpy_gather  a plain loop: the same records, same order, memcpy'd into one buffer
//   BM_roofline_order_first_gather  the same with the epoch's ids computed first, in one pass
// On a GPU the resident dataset runs on Thrust's CUDA backend instead (bench/gpu/gpu_bench.cu);
// here it shows what the same header costs as a host loader, and that it keeps up with the pipeline.
//
// Run: build/bench/resident/sluice_bench_resident --benchmark_repetitions=3
//        --benchmark_enable_random_interleaving=true [--json]      (Time = one epoch, ms)
#include <benchmark/benchmark.h>

#include "json_lines.hpp"

#include <sluice/cuda/resident.hpp>
#include <sluice/sluice.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace {
constexpr std::size_t record_bytes = 784;
constexpr std::size_t records = 60000;
constexpr std::size_t batch = 256;

struct files {
  std::string data, labels;
  std::vector<std::uint8_t> bytes;
  std::vector<std::int64_t> label_values;
};

const files& dataset() {
  static const files f = [] {
    files r;
    const auto dir = std::filesystem::temp_directory_path();
    r.data = (dir / "sluice-bench-resident.u8").string();
    r.labels = (dir / "sluice-bench-resident.i64").string();
    r.bytes.resize(records * record_bytes);
    r.label_values.resize(records);
    for (std::size_t i = 0; i < r.bytes.size(); ++i) r.bytes[i] = static_cast<std::uint8_t>(sluice::splitmix64(i) >> 56);
    for (std::size_t i = 0; i < records; ++i) r.label_values[i] = static_cast<std::int64_t>(i % 10);
    std::ofstream(r.data, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(r.bytes.data()), static_cast<std::streamsize>(r.bytes.size()));
    std::ofstream(r.labels, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(r.label_values.data()), static_cast<std::streamsize>(records * 8));
    return r;
  }();
  return f;
}

void finish(benchmark::State& state) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * records * record_bytes));
}

void BM_host_pipeline(benchmark::State& state) {
  const auto& d = dataset();
  sluice::io::fixed_records r(d.data, {.record_bytes = record_bytes, .labels_path = d.labels,
                                       .map = {.advice = sluice::io::access::random,
                                               .populate = sluice::io::populate_mode::now}});
  auto loader = sluice::from(sluice::sample::shuffle(records, {.seed = 1})) | sluice::read(r) |
                sluice::collate({.batch = batch}) |
                sluice::prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(epoch)) benchmark::DoNotOptimize(b.bytes().data());
    ++epoch;
  }
  finish(state);
}

void resident(benchmark::State& state, bool normalized) {
  const auto& d = dataset();
  sluice::normalize_params p{1};
  p.set(0, 72.9f, 90.0f);
  sluice::cuda::resident_dataset ds(d.bytes, record_bytes, d.label_values,
                                    {.batch = batch, .bytes = !normalized,
                                     .normalize = normalized ? std::optional(p) : std::nullopt});
  const sluice::sample::shuffle order(records, {.seed = 1});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (const auto& b : ds.epoch(epoch, order)) {
      benchmark::DoNotOptimize(b.bytes);
      benchmark::DoNotOptimize(b.normalized);
      benchmark::ClobberMemory();
    }
    ++epoch;
  }
  finish(state);
}
void BM_resident_epoch(benchmark::State& state) { resident(state, false); }
void BM_resident_epoch_normalized(benchmark::State& state) { resident(state, true); }

// A plain loop that gathers each batch with memcpy; `ids_first` computes the epoch's ids in one
// pass before (as resident_dataset does): the Feistel rounds of many positions then overlap in the
// core instead of waiting between records.
void roofline(benchmark::State& state, bool ids_first) {
  const auto& d = dataset();
  const sluice::sample::shuffle order(records, {.seed = 1});
  std::vector<std::uint8_t> buf(batch * record_bytes);
  std::vector<std::int64_t> labels(batch);
  std::vector<std::uint64_t> ids(ids_first ? records : 0);
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    if (ids_first) {
      const sluice::feistel_permutation perm(records, sluice::mix_keys(order.seed(), epoch));
      for (std::size_t p = 0; p < records; ++p) ids[p] = perm(p);
    }
    for (std::size_t k = 0; k * batch < records; ++k) {
      const std::size_t count = std::min(batch, records - k * batch);
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t id = ids_first ? ids[k * batch + i] : order.at(epoch, k * batch + i);
        std::memcpy(buf.data() + i * record_bytes, d.bytes.data() + id * record_bytes, record_bytes);
        labels[i] = d.label_values[id];
      }
      benchmark::DoNotOptimize(buf.data());
      benchmark::DoNotOptimize(labels.data());
      benchmark::ClobberMemory();
    }
    ++epoch;
  }
  finish(state);
}
void BM_roofline_memcpy_gather(benchmark::State& state) { roofline(state, false); }
void BM_roofline_order_first_gather(benchmark::State& state) { roofline(state, true); }
}  // namespace

BENCHMARK(BM_roofline_order_first_gather)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_roofline_memcpy_gather)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_host_pipeline)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_resident_epoch)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_resident_epoch_normalized)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);

int main(int argc, char** argv) {
  return sluice_bench::run_main(argc, argv,
                                {{"BM_resident_epoch", "BM_host_pipeline/1"},
                                 {"BM_resident_epoch", "BM_host_pipeline/2"},
                                 {"BM_resident_epoch", "BM_roofline_memcpy_gather"},
                                 {"BM_resident_epoch", "BM_roofline_order_first_gather"},
                                 {"BM_roofline_order_first_gather", "BM_roofline_memcpy_gather"},
                                 {"BM_resident_epoch_normalized", "BM_host_pipeline/1"},
                                 {"BM_host_pipeline/1", "BM_roofline_memcpy_gather"},
                                 {"BM_host_pipeline/2", "BM_roofline_memcpy_gather"}});
}
