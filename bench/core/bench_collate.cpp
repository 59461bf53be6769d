// Random-order gather-and-collate of 12,288-byte records (3x64x64 uint8) in batches of 256 from a
// page-cache-resident file, through the sluice pipeline with 1 and 2 workers, beside the roofline
// measured in the same binary: a plain memcpy gather of the same records, in the same order, into
// one batch buffer (with 1 thread, and with 2 threads each gathering its own batches).
//
// A diagnostic variant of the roofline gathers into `slots` batch buffers in turn, as the loader's
// ring does (depth 2 + workers slots), instead of rewriting one buffer that stays in cache.
//
// Run: build/bench/core/sluice_bench_collate --benchmark_counters_tabular=true [--json]
// Counters: samples/s (items_per_second) and bytes/s; bench/README.md keeps the figures.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <unistd.h>

#include "json_lines.hpp"

#include <sluice/sluice.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {
constexpr std::size_t record_bytes = 3 * 64 * 64;
constexpr std::size_t batch = 256;
constexpr std::size_t records = 16384;  // 201 MB: larger than any cache, well inside RAM

// Writes n records to `path`, `write_bytes` at a time: every write but the last is that long, at
// a multiple of it. How a file was written decides how it sits in the page cache: Linux 6.x keeps
// one written in small pieces in small folios (4-16 KiB: mapped a fault per 64 KiB, populating
// 1.2 GB costs ~27 ms of CPU) and one written 2 MiB or more at a time in 2 MiB folios (populating it
// costs ~1 ms, and gathers from it take fewer TLB misses). A file read back from disk gets what
// readahead makes, in between.
void write_records(const std::string& path, std::size_t n, std::size_t write_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  std::vector<char> buf(write_bytes), rec(record_bytes);
  std::size_t used = 0;
  auto flush = [&] {
    for (std::size_t done = 0; done < used;) {
      const ssize_t w = ::write(fd, buf.data() + done, used - done);
      if (w <= 0) throw std::runtime_error("cannot write " + path);
      done += static_cast<std::size_t>(w);
    }
    used = 0;
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < record_bytes; j += 8) rec[j] = static_cast<char>(i + j);
    for (std::size_t k = 0; k < record_bytes;) {
      const std::size_t m = std::min(record_bytes - k, write_bytes - used);
      std::memcpy(buf.data() + used, rec.data() + k, m);
      used += m;
      k += m;
      if (used == write_bytes) flush();
    }
  }
  flush();
  // On disk before the benchmark maps it: no writeback of 1.2 GB competes with the first epoch.
  if (::fdatasync(fd) != 0 || ::close(fd) != 0) throw std::runtime_error("cannot sync " + path);
}

// A file of n records in the temporary directory, written once, 8 MiB at a time, so that it is in
// the page cache as a shard packed by sluice-pack is, whatever ran before (the default size;
// BM_first_epoch writes its own).
std::string data_path(std::size_t n = records) {
  const std::string name = "sluice-bench-collate-" + std::to_string(n) + "-w8m.u8";
  auto p = (std::filesystem::temp_directory_path() / name).string();
  if (!std::filesystem::exists(p) || std::filesystem::file_size(p) != n * record_bytes) write_records(p, n, std::size_t{8} << 20);
  return p;
}

// BM_first_epoch's file of n records, written anew at each call `write_bytes` at a time, so that
// the page cache holds it as that write size leaves it (see write_records).
std::string first_epoch_data(std::size_t n, std::size_t write_bytes) {
  const auto p = (std::filesystem::temp_directory_path() /
                  ("sluice-bench-first-epoch-" + std::to_string(n) + "-w" + std::to_string(write_bytes) + ".u8"))
                     .string();
  std::filesystem::remove(p);  // its old pages leave the page cache with it
  write_records(p, n, write_bytes);
  return p;
}

sluice::io::fixed_records& reader() {
  static sluice::io::fixed_records r = [] {
    sluice::io::fixed_records rr(data_path(), {.record_bytes = record_bytes, .map = {.advice = sluice::io::access::random, .populate = sluice::io::populate_mode::now}});
    return rr;
  }();
  return r;
}

void gather(benchmark::State& state, std::size_t threads, std::size_t slots) {
  auto& r = reader();
  sluice::sample::shuffle order(records, {.seed = 1});
  std::vector<std::unique_ptr<std::byte[]>> bufs;
  for (std::size_t t = 0; t < threads * slots; ++t) {
    bufs.emplace_back(new (std::align_val_t{64}) std::byte[batch * record_bytes]);
    std::memset(bufs.back().get(), 0, batch * record_bytes);
  }
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    const std::size_t nb = records / batch;
    auto work = [&](std::size_t t) {
      for (std::size_t k = t; k < nb; k += threads) {
        std::byte* dst = bufs[t * slots + (k / threads) % slots].get();
        for (std::size_t i = 0; i < batch; ++i) {
          auto rec = r.record(order.at(epoch, k * batch + i));
          std::memcpy(dst + i * record_bytes, rec.data(), record_bytes);
        }
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
      }
    };
    if (threads == 1) {
      work(0);
    } else {
      std::vector<std::thread> ts;
      for (std::size_t t = 0; t < threads; ++t) ts.emplace_back(work, t);
      for (auto& t : ts) t.join();
    }
    ++epoch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * records * record_bytes));
}

void BM_roofline_memcpy_gather(benchmark::State& state) { gather(state, static_cast<std::size_t>(state.range(0)), 1); }
// One thread, gathering into `slots` buffers in turn (the loader's ring: prefetch(2) + 1 worker = 3).
void BM_roofline_memcpy_gather_ring(benchmark::State& state) { gather(state, 1, static_cast<std::size_t>(state.range(0))); }

// The roofline and the pipeline in pairs, to give a ratio whose yardstick holds still: one loader
// and one set of roofline buffers, both warmed by a first untimed round (pages mapped, slots
// touched), then `rounds` rounds of E roofline epochs and E pipeline epochs back to back (which
// side goes first alternates), each epoch the same records in another order. Per round the ratio
// is pipeline rate / roofline rate; reported: its median and its range over the rounds, and each
// side's own spread over the rounds: `*_iqr` (interquartile range / median, the figure the goal
// is read against) and `*_spread` ((slowest − fastest) / median). A machine that slows down for a
// moment slows one round's pair, not one side of the comparison.
void BM_paired_raw(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  const auto rounds = static_cast<std::size_t>(state.range(1));
  const auto per_round = static_cast<std::size_t>(state.range(2));
  auto& r = reader();
  sluice::sample::shuffle order(records, {.seed = 1});
  std::vector<std::unique_ptr<std::byte[]>> bufs;
  for (std::size_t t = 0; t < workers; ++t) {
    bufs.emplace_back(new (std::align_val_t{64}) std::byte[batch * record_bytes]);
    std::memset(bufs.back().get(), 0, batch * record_bytes);
  }
  auto loader = sluice::from(sluice::sample::shuffle(records, {.seed = 1})) | sluice::read(r) |
                sluice::collate({.batch = batch}) | sluice::prefetch(2, {.workers = workers});
  std::uint64_t epoch = 0;
  auto roofline_epoch = [&] {
    const std::size_t nb = records / batch;
    auto work = [&](std::size_t t) {
      for (std::size_t k = t; k < nb; k += workers) {
        std::byte* dst = bufs[t].get();
        for (std::size_t i = 0; i < batch; ++i) {
          auto rec = r.record(order.at(epoch, k * batch + i));
          std::memcpy(dst + i * record_bytes, rec.data(), record_bytes);
        }
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
      }
    };
    const auto t0 = std::chrono::steady_clock::now();
    if (workers == 1) {
      work(0);
    } else {
      std::vector<std::thread> ts;
      for (std::size_t t = 0; t < workers; ++t) ts.emplace_back(work, t);
      for (auto& t : ts) t.join();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto pipeline_epoch = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& b : loader.epoch(epoch)) benchmark::DoNotOptimize(b.bytes().data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> roof, pipe, ratio;
  for (auto _ : state) {
    roofline_epoch();  // warm-up round, untimed
    pipeline_epoch();
    ++epoch;
    roof.clear(), pipe.clear(), ratio.clear();
    auto roof_run = [&] {
      double t = 0;
      for (std::size_t e = 0; e < per_round; ++e, ++epoch) t += roofline_epoch();
      return t;
    };
    auto pipe_run = [&] {
      double t = 0;
      for (std::size_t e = 0; e < per_round; ++e, ++epoch) t += pipeline_epoch();
      return t;
    };
    for (std::size_t k = 0; k < rounds; ++k) {
      double a = 0, b = 0;
      if (k % 2 == 0) a = roof_run(), b = pipe_run();
      else b = pipe_run(), a = roof_run();
      roof.push_back(a), pipe.push_back(b), ratio.push_back(a / b);
    }
    double sum = 0;
    for (double t : pipe) sum += t;
    state.SetIterationTime(sum);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  auto spread = [&](const std::vector<double>& v) {
    return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / median(v);
  };
  auto iqr = [&](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t q = v.size() / 4;
    return (v[v.size() - 1 - q] - v[q]) / median(v);
  };
  const double n = static_cast<double>(records * per_round);
  state.counters["ratio_median"] = median(ratio);
  state.counters["ratio_min"] = *std::min_element(ratio.begin(), ratio.end());
  state.counters["ratio_max"] = *std::max_element(ratio.begin(), ratio.end());
  state.counters["roofline_per_s"] = n / median(roof);
  state.counters["pipeline_per_s"] = n / median(pipe);
  state.counters["roofline_spread"] = spread(roof);
  state.counters["pipeline_spread"] = spread(pipe);
  state.counters["roofline_iqr"] = iqr(roof);
  state.counters["pipeline_iqr"] = iqr(pipe);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * rounds * per_round * records));
}

// Sampler: sample::shuffle itself, or the same shuffle behind sample::any_sampler (one virtual call
// a position, as the Python module runs every sampler): BM_sluice_pipeline_any_sampler over
// BM_sluice_pipeline is what erasing the sampler costs.
template <class Sampler>
void run_pipeline(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  auto& r = reader();
  auto loader = sluice::from(Sampler(sluice::sample::shuffle(records, {.seed = 1}))) | sluice::read(r) |
                sluice::collate({.batch = batch}) | sluice::prefetch(2, {.workers = workers});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(epoch)) benchmark::DoNotOptimize(b.bytes().data());
    ++epoch;
  }
  const auto s = loader.stats();
  state.counters["stall"] = s.stall_fraction;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * records * record_bytes));
}
void BM_sluice_pipeline(benchmark::State& state) { run_pipeline<sluice::sample::shuffle>(state); }
void BM_sluice_pipeline_any_sampler(benchmark::State& state) { run_pipeline<sluice::sample::any_sampler>(state); }

// The first epoch of a freshly opened file against the second, 1 worker, the file in the page
// cache: what first-touch page faults cost and what each populate_mode does about them. Each
// iteration maps the file anew (open time included: MAP_POPULATE's wait is in it), runs epoch 0
// (timed: the iteration's time) and epoch 1 (counter second_epoch_ms); first_over_second is the
// first epoch's rate over the second's (1 = the first epoch as fast).
//   mode 0 none, 1 background (the default), 2 now; the readers' default advice (automatic).
//   setup_ms: time the trainer spends between opening the dataset and its first epoch (building
//   the model, the optimiser, a CUDA context: here a sleep), not counted in the first epoch's
//   time. 0: the epoch starts at once, the worst case for background warming.
//   warm_slots: loader_options::warm_slots (1, the default: a thread sizes and touches the ring's
//   other slots while batch 0 is written; 0: each slot's first batch faults it in).
//   records: 16,384 (201 MB) or the 100,000 (1.2 GB; the file is written once, and read
//   once before timing so that it is in the page cache).
// Also counted: the process's minor page faults in each epoch (the file mapping's and the ring's
// fresh slots' in epoch 0; none in a later epoch). (Advice random against automatic, the
// argument this replaced: bench/results/first-epoch-advice-2vcpu-2026-12-01.txt.)
// This process's threads now (/proc/self/task): name, minor faults, CPU time. Sluice names its
// threads (sluice-workerN, sluice-pagewarm, ...), so a delta between two reads says who did what.
struct thread_use {
  std::string name;
  std::uint64_t faults = 0, cpu_ns = 0;
};
std::map<long, thread_use> threads_now() {
  std::map<long, thread_use> out;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    thread_use u;
    std::ifstream comm(t.path() / "comm"), stat(t.path() / "stat"), sched(t.path() / "schedstat");
    std::getline(comm, u.name);
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const auto rp = text.rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream fields(text.substr(rp + 2));  // state ppid pgrp session tty tpgid flags minflt
    std::string skip;
    for (int i = 0; i < 7; ++i) fields >> skip;
    fields >> u.faults;
    sched >> u.cpu_ns;
    out[std::stol(t.path().filename().string())] = u;
  }
  return out;
}
// Faults and CPU ms from `a` to `b` of the threads whose name starts with `prefix` ("" with
// main_only: the benchmark's own thread, the trainer's).
std::pair<double, double> used_between(const std::map<long, thread_use>& a, const std::map<long, thread_use>& b,
                                       const std::string& prefix, bool main_only = false) {
  double faults = 0, ms = 0;
  for (const auto& [tid, u] : b) {
    if (main_only ? tid != static_cast<long>(::getpid()) : u.name.rfind(prefix, 0) != 0) continue;
    const auto it = a.find(tid);
    faults += static_cast<double>(u.faults - (it == a.end() ? 0 : it->second.faults));
    ms += static_cast<double>(u.cpu_ns - (it == a.end() ? 0 : it->second.cpu_ns)) / 1e6;
  }
  return {faults, ms};
}

void BM_first_epoch(benchmark::State& state) {
  const auto mode = static_cast<sluice::io::populate_mode>(state.range(0));
  const auto advice = sluice::io::access::automatic;
  const auto setup = std::chrono::milliseconds(state.range(1));
  const bool warm_slots = state.range(2) != 0;
  const auto n = static_cast<std::size_t>(state.range(3));
  const std::string path = first_epoch_data(n, static_cast<std::size_t>(state.range(4)) * 1024);
  std::uint64_t faults0 = 0, faults1 = 0;
  auto minflt = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<std::uint64_t>(u.ru_minflt);
  };
  {  // the file in the page cache
    sluice::io::fixed_records r(path, {.record_bytes = record_bytes, .map = {.populate = sluice::io::populate_mode::now}});
    benchmark::DoNotOptimize(r.record(n - 1).data());
  }
  double first_s = 0, second_s = 0;
  std::uint64_t warm0_ns = 0, warm1_ns = 0;
  // Who did the work of each epoch: the worker, the page warmer, the trainer's thread (sums).
  double worker_faults0 = 0, worker_ms0 = 0, worker_ms1 = 0, warmer_ms0 = 0, trainer_ms0 = 0, trainer_ms1 = 0;
  for (auto _ : state) {
    const auto use0 = threads_now();
    const auto t0 = std::chrono::steady_clock::now();
    sluice::io::fixed_records r(path, {.record_bytes = record_bytes, .map = {.advice = advice, .populate = mode}});
    auto loader = sluice::from(sluice::sample::shuffle(n, {.seed = 1})) | sluice::read(r) |
                  sluice::collate({.batch = batch}) | sluice::prefetch(2, {.workers = 1, .warm_slots = warm_slots});
    std::chrono::steady_clock::duration slept{};
    if (setup.count() > 0) {
      const auto s0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(setup);
      slept = std::chrono::steady_clock::now() - s0;
    }
    const std::uint64_t f0 = minflt();
    for (auto& b : loader.epoch(0)) benchmark::DoNotOptimize(b.bytes().data());
    const auto t1 = std::chrono::steady_clock::now();
    const std::uint64_t f1 = minflt();
    const auto use1 = threads_now();
    const auto t1b = std::chrono::steady_clock::now();  // the reads above are in neither epoch
    for (auto& b : loader.epoch(1)) benchmark::DoNotOptimize(b.bytes().data());
    const auto t2 = std::chrono::steady_clock::now();
    const auto use2 = threads_now();
    const auto [faults, ms] = used_between(use0, use1, "sluice-worker");
    worker_faults0 += faults;
    worker_ms0 += ms;
    worker_ms1 += used_between(use1, use2, "sluice-worker").second;
    warmer_ms0 += used_between(use0, use1, "sluice-pagewarm").second;
    trainer_ms0 += used_between(use0, use1, "", true).second;
    trainer_ms1 += used_between(use1, use2, "", true).second;
    faults0 += f1 - f0;
    faults1 += minflt() - f1;
    const double a = std::chrono::duration<double>(t1 - t0 - slept).count(), b = std::chrono::duration<double>(t2 - t1b).count();
    state.SetIterationTime(a);
    first_s += a;
    second_s += b;
    if (auto e = loader.epoch_stats(0)) warm0_ns += e->warmup_wait_ns;
    if (auto e = loader.epoch_stats(1)) warm1_ns += e->warmup_wait_ns;
  }
  state.counters["faults_epoch0"] = static_cast<double>(faults0) / static_cast<double>(state.iterations());
  state.counters["faults_epoch1"] = static_cast<double>(faults1) / static_cast<double>(state.iterations());
  state.counters["first_batch_ms_epoch0"] = static_cast<double>(warm0_ns) / 1e6 / static_cast<double>(state.iterations());
  state.counters["first_batch_ms_epoch1"] = static_cast<double>(warm1_ns) / 1e6 / static_cast<double>(state.iterations());
  const double it = static_cast<double>(state.iterations());
  state.counters["first_epoch_ms"] = first_s / it * 1e3;
  state.counters["second_epoch_ms"] = second_s / it * 1e3;
  state.counters["first_over_second"] = second_s / first_s;
  state.counters["worker_faults_epoch0"] = worker_faults0 / it;
  state.counters["worker_cpu_ms_epoch0"] = worker_ms0 / it;
  state.counters["worker_cpu_ms_epoch1"] = worker_ms1 / it;
  state.counters["pagewarm_cpu_ms_epoch0"] = warmer_ms0 / it;
  state.counters["trainer_cpu_ms_epoch0"] = trainer_ms0 / it;
  state.counters["trainer_cpu_ms_epoch1"] = trainer_ms1 / it;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * record_bytes));
}
// What the loader's post-batch file check (core/file_guard.hpp, batch_file_check) costs a batch of
// 256 samples drawn from `files` distinct mapped files (1: a single-file reader; 256: a global
// shuffle over many WebDataset or MDS shards, every sample from another file). One iteration is
// one batch's check; compare with a batch's fill time (BM_sluice_pipeline's time per epoch / 64).
void BM_batch_file_check(benchmark::State& state) {
  const auto files = static_cast<std::size_t>(state.range(0));
  const auto dir = std::filesystem::temp_directory_path() / "sluice-bench-file-check";
  std::filesystem::create_directories(dir);
  std::vector<std::unique_ptr<sluice::io::mapped_file>> maps;
  for (std::size_t f = 0; f < files; ++f) {
    const auto p = (dir / ("shard-" + std::to_string(f) + ".bin")).string();
    if (!std::filesystem::exists(p)) std::ofstream(p, std::ios::binary) << std::string(4096, 'x');
    maps.push_back(std::make_unique<sluice::io::mapped_file>(p));
  }
  std::vector<std::string_view> origins(batch);
  sluice::sample::shuffle order(batch, {.seed = 3});
  for (std::size_t i = 0; i < batch; ++i) origins[i] = maps[order.at(0, i) % files]->path();
  sluice::detail::batch_file_check check;
  std::string why;
  for (auto _ : state) benchmark::DoNotOptimize(check.first_changed(origins, why));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}
}  // namespace

BENCHMARK(BM_batch_file_check)->Arg(1)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_first_epoch)
    ->ArgNames({"populate", "setup_ms", "warm_slots", "records", "write_kib"})
    ->ArgsProduct({{0, 1, 2}, {0, 100}, {0, 1}, {16384}, {12}})
    ->ArgsProduct({{1}, {0, 100}, {1}, {16384}, {8192}})
    ->ArgsProduct({{0, 1, 2}, {0, 100}, {1}, {100000}, {12, 8192}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK(BM_roofline_memcpy_gather)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_roofline_memcpy_gather_ring)->Arg(3)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_sluice_pipeline)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_paired_raw)->ArgNames({"workers", "rounds", "epochs"})->Args({1, 11, 4})->Args({2, 11, 4})->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sluice_pipeline_any_sampler)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

int main(int argc, char** argv) {
  return sluice_bench::run_main(argc, argv,
                                {{"BM_roofline_memcpy_gather/2", "BM_roofline_memcpy_gather/1"},
                                 {"BM_roofline_memcpy_gather_ring/3", "BM_roofline_memcpy_gather/1"},
                                 {"BM_sluice_pipeline/1", "BM_roofline_memcpy_gather/1"},
                                 {"BM_sluice_pipeline/2", "BM_roofline_memcpy_gather/2"}});
  // BM_first_epoch's figure is its own counter first_over_second (the two epochs of one loader).
}
