// One sluice pipeline per MPI rank, each over its own shard of one global order.
//
// Every rank builds the same pipeline, but its sampler is sample::distributed over the shared
// shuffle: rank r takes global positions r, r + world, r + 2*world, ... of the epoch's order
// (core/random.hpp's Feistel permutation keyed by the seed), so the ranks' shards are disjoint,
// cover the epoch (tail::pad repeats the first few positions so every rank runs the same number
// of steps), and the global order for a seed does not depend on the world size. After the epoch
// the class histogram and the stall statistics are all-reduced and rank 0 prints the global view.
//
//   mpirun -np 4 mpi_sharded --dir /tmp/run [--records 1003] [--batch 32] [--seed 7] [--epoch 0]
//                            [--tail pad|drop] [--step-us 0]
//                            [--tag NAME] [--stop-after BATCHES] [--resume CHECKPOINT_FILE]
//
// Rank 0 writes the dataset into --dir (records of 8 bytes holding their own index, and int64
// labels with a long-tailed class distribution) unless it is already there. Every rank writes
// the ids it received to <dir>/ids.w<world>.r<rank>.txt ("batches B" then one "position id" line
// a sample); rank 0 writes the all-reduced histogram to <dir>/summary.w<world>.txt. The checker
// (mpi_sharded_check) verifies those files across runs with different world sizes.
//
// Resume across a change of world size: --stop-after K stops every rank after K batches and rank 0
// writes the checkpoint — one number, the global position start + world * (samples each rank
// consumed) — to <dir>/checkpoint.<tag>.txt; a later run with --resume that file (any world size)
// starts the epoch there. --tag names a run's files (ids.<tag>.w<world>.r<rank>.txt).
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "sluice/sample/rank.hpp"
#include "sluice/sluice.hpp"

namespace {

constexpr int num_classes = 10;

struct options {
  std::string dir, tag, resume;
  std::uint64_t stop_after = 0;
  std::uint64_t records = 1003, batch = 32, seed = 7, epoch = 0, step_us = 0;
  sluice::sample::tail tail = sluice::sample::tail::pad;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") o.dir = v;
    else if (k == "--records") o.records = std::stoull(v);
    else if (k == "--batch") o.batch = std::stoull(v);
    else if (k == "--seed") o.seed = std::stoull(v);
    else if (k == "--epoch") o.epoch = std::stoull(v);
    else if (k == "--step-us") o.step_us = std::stoull(v);
    else if (k == "--tag") o.tag = v;
    else if (k == "--stop-after") o.stop_after = std::stoull(v);
    else if (k == "--resume") o.resume = v;
    else if (k == "--tail") o.tail = v == "drop" ? sluice::sample::tail::drop : sluice::sample::tail::pad;
    else throw sluice::usage_error("mpi_sharded: unknown option " + k);
  }
  if (o.dir.empty()) throw sluice::usage_error("mpi_sharded: --dir is required");
  return o;
}

// Long-tailed labels: class c keeps a share proportional to 100^(-c/9), assigned to records in
// a seeded order so classes are interleaved in the file.
std::vector<std::int64_t> long_tailed_labels(std::uint64_t n) {
  std::vector<double> share(num_classes);
  double total = 0;
  for (int c = 0; c < num_classes; ++c) total += share[c] = std::pow(100.0, -c / 9.0);
  std::vector<std::int64_t> labels(n);
  const sluice::feistel_permutation perm(n, 12345);
  std::uint64_t pos = 0;
  for (int c = 0; c < num_classes; ++c) {
    const auto count = c == num_classes - 1 ? n - pos : static_cast<std::uint64_t>(std::floor(share[c] / total * n));
    for (std::uint64_t k = 0; k < count && pos < n; ++k) labels[perm(pos++)] = c;
  }
  return labels;
}

void write_dataset(const options& o) {
  namespace fs = std::filesystem;
  fs::create_directories(o.dir);
  const auto data = fs::path(o.dir) / "records.u8", labels = fs::path(o.dir) / "labels.i64";
  if (fs::exists(data) && fs::file_size(data) == o.records * 8 && fs::exists(labels)) return;
  std::ofstream d(data.string() + ".tmp", std::ios::binary), l(labels.string() + ".tmp", std::ios::binary);
  for (std::uint64_t i = 0; i < o.records; ++i) d.write(reinterpret_cast<const char*>(&i), 8);
  const auto lab = long_tailed_labels(o.records);
  l.write(reinterpret_cast<const char*>(lab.data()), static_cast<std::streamsize>(lab.size() * 8));
  d.close();
  l.close();
  fs::rename(data.string() + ".tmp", data);  // renamed into place: no rank sees half a file
  fs::rename(labels.string() + ".tmp", labels);
}

int run(int argc, char** argv) {
  const options o = parse(argc, argv);
  int mpi_rank = 0, mpi_world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_world);
  // The launcher's environment and MPI must agree; a trainer without MPI would use the former.
  const auto env = sluice::sample::rank_from_environment();
  const auto me = sluice::sample::rank_info::of(static_cast<std::uint64_t>(mpi_rank), static_cast<std::uint64_t>(mpi_world));
  if (env.world != 1 && (env.rank != me.rank || env.world != me.world))
    throw sluice::usage_error("mpi_sharded: environment says rank " + std::to_string(env.rank) + " of " +
                              std::to_string(env.world) + ", MPI says " + std::to_string(me.rank) + " of " +
                              std::to_string(me.world));

  if (me.is_main()) write_dataset(o);
  MPI_Barrier(MPI_COMM_WORLD);

  const std::string dir = o.dir;
  const std::string tag = o.tag.empty() ? std::string() : "." + o.tag;
  std::uint64_t start = 0;
  if (!o.resume.empty()) {
    std::ifstream cp(o.resume);
    std::string word;
    if (!(cp >> word >> start) || word != "global_position")
      throw sluice::format_error(o.resume, {.offset = 0}, "not a checkpoint (expected 'global_position N')");
  }
  const sluice::io::fixed_records reader{dir + "/records.u8", {.record_bytes = 8, .labels_path = dir + "/labels.i64"}};
  auto loader = sluice::from(sluice::sample::distributed{sluice::sample::shuffle{reader.size(), {.seed = o.seed}},
                                                          me.distributed({.tail = o.tail, .start = start})}) |
                sluice::read(reader) | sluice::collate({.batch = o.batch}) | sluice::prefetch(2, {.workers = 1});

  std::vector<std::int64_t> histogram(num_classes, 0);
  std::ofstream ids(dir + "/ids" + tag + ".w" + std::to_string(me.world) + ".r" + std::to_string(me.rank) + ".txt");
  std::string lines;
  std::uint64_t batches = 0, j = 0, consumed = 0;
  for (auto& b : loader.epoch(o.epoch)) {
    ++batches;
    for (std::size_t i = 0; i < b.size(); ++i, ++j) {
      std::uint64_t content = 0;
      std::memcpy(&content, b.sample(i).data(), 8);
      if (content != b.ids()[i]) throw sluice::error("mpi_sharded: record content does not match its id");
      const auto label = b.labels()[i];
      if (label >= 0 && label < num_classes) ++histogram[static_cast<std::size_t>(label)];
      lines += std::to_string(start + me.rank + me.world * j) + " " + std::to_string(b.ids()[i]) + "\n";
    }
    if (o.step_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o.step_us));  // a training step
    consumed = loader.state().position;
    if (o.stop_after != 0 && batches == o.stop_after) break;
  }
  if (o.stop_after != 0) {
    // Every rank must be at the same global position, or the checkpoint would lose samples.
    const std::uint64_t g = loader.sampler().global_position(consumed);
    std::uint64_t g_min = 0, g_max = 0;
    MPI_Allreduce(&g, &g_min, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&g, &g_max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (g_min != g_max) throw sluice::error("mpi_sharded: ranks stopped at different global positions");
    if (me.is_main()) std::ofstream(dir + "/checkpoint" + tag + ".txt") << "global_position " << g << "\n";
  }
  ids << "batches " << batches << "\n" << lines;
  ids.close();

  // The global view: histogram summed; batches min/max (equal when the shards are balanced);
  // consumer wait and busy time summed so the stall fraction is the whole job's.
  const auto st = loader.stats();
  std::vector<std::int64_t> global_hist(num_classes);
  MPI_Allreduce(histogram.data(), global_hist.data(), num_classes, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  std::uint64_t b_min = 0, b_max = 0;
  MPI_Allreduce(&batches, &b_min, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&batches, &b_max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  const std::uint64_t times[2] = {st.consumer_wait_ns + st.warmup_wait_ns, st.consumer_busy_ns};
  std::uint64_t global_times[2] = {0, 0};
  MPI_Allreduce(times, global_times, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  double worst_stall = 0;
  MPI_Allreduce(&st.stall_fraction, &worst_stall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  if (me.is_main()) {
    const double total = static_cast<double>(global_times[0] + global_times[1]);
    std::int64_t samples = 0;
    for (auto h : global_hist) samples += h;
    std::printf("world %llu: %lld samples, batches per rank %llu..%llu, stall fraction %.3f (worst rank %.3f)\n",
                static_cast<unsigned long long>(me.world), static_cast<long long>(samples),
                static_cast<unsigned long long>(b_min), static_cast<unsigned long long>(b_max),
                total > 0 ? static_cast<double>(global_times[0]) / total : 0.0, worst_stall);
    std::printf("class histogram:");
    std::ofstream summary(dir + "/summary" + tag + ".w" + std::to_string(me.world) + ".txt");
    summary << "histogram";
    for (auto h : global_hist) {
      std::printf(" %lld", static_cast<long long>(h));
      summary << " " << h;
    }
    summary << "\n";
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_sharded: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
