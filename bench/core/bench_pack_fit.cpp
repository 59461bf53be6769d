// Padding of whole-document packing into rows of 2048: next-fit (packed_rows .split = false,
// .bins = 1), best-fit over 8, 64 and 512 open rows (.bins), and concatenate-and-split (.split =
// true: no padding but the last row's, documents cut at row ends), on the same 20,000 documents
// in the same shuffled order. Lengths are log-normal (median 400 tokens, a long tail clipped at
// the row, as web text is after splitting long documents), seeded.
// Each iteration plans one epoch (what the first worker to need an epoch does once); the counters
// are epoch 0's padding fraction and row count.
//
//   build/bench/core/sluice_bench_pack_fit --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "sluice/io/tokens.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/pack_rows.hpp"

namespace {

constexpr std::size_t L = 2048, N = 20000;

struct corpus {
  std::string dir, tokens, offsets;
  corpus() {
    char tmpl[] = "/tmp/sluice-pack-fit-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    dir = tmpl;
    tokens = dir + "/tokens.bin";
    offsets = dir + "/offsets.bin";
    std::mt19937_64 g(2026);
    std::lognormal_distribution<double> len(std::log(400.0), 1.0);
    std::vector<std::vector<std::uint16_t>> docs(N);
    for (std::size_t i = 0; i < N; ++i) {
      const auto n = static_cast<std::size_t>(std::clamp(len(g), 1.0, static_cast<double>(L)));
      docs[i].assign(n, static_cast<std::uint16_t>(i % 50000 + 1));
    }
    sluice::io::write_token_documents<std::uint16_t>(tokens, offsets, docs);
  }
  ~corpus() {
    std::remove(tokens.c_str());
    std::remove(offsets.c_str());
    ::rmdir(dir.c_str());
  }
};

const corpus& data() {
  static const corpus c;
  return c;
}

void run(benchmark::State& st, bool split, std::size_t bins) {
  const sluice::io::token_documents<std::uint16_t> docs(data().tokens, data().offsets);
  std::uint64_t rows = 0, epoch = 0;
  for (auto _ : st) {
    auto packed = sluice::packed_rows(docs, sluice::sample::shuffle(docs.size(), {.seed = 9}),
                                      {.length = L, .split = split, .bins = bins});
    rows = packed.rows(epoch++ % 4);  // a new epoch each time: a new order, a new plan
    benchmark::DoNotOptimize(rows);
  }
  // The figures of epoch 0, whatever the iteration count.
  rows = sluice::packed_rows(docs, sluice::sample::shuffle(docs.size(), {.seed = 9}), {.length = L, .split = split, .bins = bins})
             .rows(0);
  st.counters["rows"] = static_cast<double>(rows);
  st.counters["padding"] = 1.0 - static_cast<double>(docs.tokens()) / static_cast<double>(rows * L);
  st.counters["docs"] = static_cast<double>(docs.size());
}

void BM_concat_split(benchmark::State& st) { run(st, true, 1); }
void BM_next_fit(benchmark::State& st) { run(st, false, 1); }
void BM_best_fit(benchmark::State& st) { run(st, false, static_cast<std::size_t>(st.range(0))); }
BENCHMARK(BM_concat_split)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_next_fit)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_best_fit)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
