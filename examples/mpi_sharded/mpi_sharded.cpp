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
//                            [--epochs 1] [--grad-floats 0] [--comm-delay-us 0] [--comm-delay-from 0]
//                            [--slow-rank none|all|R] [--slow-us 0] [--slow-from 0]
//
// Per-rank wait statistics (README.md): --epochs N runs epochs --epoch .. --epoch + N - 1. After
// each, every rank makes a diag::rank_summary of its loader.epoch_stats(e) and the time its steps
// spent communicating, the records are gathered with MPI_Allgather, and rank 0 prints one line a
// rank, the job's line, and the advisor's R6 straggler-rank (on this epoch's ranks) and R7
// slowdown-cause (on the epochs so far); after the last epoch all the advisor's rules. The same
// goes to <dir>/ranks<tag>.w<world>.json: {"epochs": [{"job", "ranks", "advice"}], "advice"}.
// A step is --step-us of sleep (the model's work) then, with --grad-floats N > 0, an all-reduce of
// N floats (the gradient); --comm-delay-us D sleeps D microseconds before that all-reduce from the
// run's epoch --comm-delay-from on (a slower network, as Horovod's delay injection; counted as
// communication). --slow-rank R --slow-us U sleeps U microseconds a sample in the data path (a map
// stage on the loader's worker) of rank R (or of every rank: all) from the run's epoch --slow-from.
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
//
// Shards over HTTP (README.md): the same records as sluice shards behind one HTTP server, every
// rank reading them through io::remote_shards_from_index into one node tier directory shared by
// the ranks of the node (io/node_tier.hpp: each shard is downloaded once per node, whichever rank
// needs it first; the others wait for it and read the same file):
//   mpi_sharded --dir /tmp/run --pack-shards 8        (no MPI: writes the dataset, then
//                 /tmp/run/shards/part-000.sluice .. part-007.sluice and shards/index.txt; serve that)
//   mpirun -np 4 mpi_sharded --dir /tmp/run --url-index http://127.0.0.1:8080/index.txt --tier /tmp/tier
// The samplers, files and checks are the local mode's (the records hold their index, the labels
// are in <dir>/labels.i64 from --pack-shards). Each rank also writes its tier statistics to
// <dir>/tier<tag>.w<world>.r<rank>.txt ("hits H misses M bytes_fetched B"), and rank 0 prints
// their sums and the run's wall time. Needs libcurl (built with sluice::curl); without it
// --url-index is refused.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sluice/diag/advisor.hpp"
#include "sluice/diag/ranks.hpp"
#include "sluice/diag/report.hpp"
#include "sluice/io/node_tier.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/shard_index.hpp"
#if SLUICE_WITH_CURL
#include "sluice/io/remote.hpp"
#endif
#include "sluice/sample/rank.hpp"
#include "sluice/sluice.hpp"

namespace {

constexpr int num_classes = 10;

struct options {
  std::string dir, tag, resume;
  std::uint64_t stop_after = 0;
  std::uint64_t records = 1003, batch = 32, seed = 7, epoch = 0, step_us = 0;
  sluice::sample::tail tail = sluice::sample::tail::pad;
  std::uint64_t epochs = 1, grad_floats = 0, comm_delay_us = 0, comm_delay_from = 0;
  std::int64_t slow_rank = -2;  // -2: none, -1: every rank
  std::uint64_t slow_us = 0, slow_from = 0;
  std::uint64_t pack_shards = 0;     // write the dataset as this many shards and an index, then exit
  std::string url_index, tier;       // read the shards over HTTP through a node tier
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
    else if (k == "--epochs") o.epochs = std::stoull(v);
    else if (k == "--grad-floats") o.grad_floats = std::stoull(v);
    else if (k == "--comm-delay-us") o.comm_delay_us = std::stoull(v);
    else if (k == "--comm-delay-from") o.comm_delay_from = std::stoull(v);
    else if (k == "--slow-rank") o.slow_rank = v == "none" ? -2 : v == "all" ? -1 : std::stoll(v);
    else if (k == "--slow-us") o.slow_us = std::stoull(v);
    else if (k == "--slow-from") o.slow_from = std::stoull(v);
    else if (k == "--pack-shards") o.pack_shards = std::stoull(v);
    else if (k == "--url-index") o.url_index = v;
    else if (k == "--tier") o.tier = v;
    else throw sluice::usage_error("mpi_sharded: unknown option " + k);
  }
  if (o.dir.empty()) throw sluice::usage_error("mpi_sharded: --dir is required");
  if (o.epochs == 0) throw sluice::usage_error("mpi_sharded: --epochs must be at least 1");
  if (o.stop_after != 0 && o.epochs != 1) throw sluice::usage_error("mpi_sharded: --stop-after needs --epochs 1");
  if (o.slow_rank < -2) throw sluice::usage_error("mpi_sharded: --slow-rank takes none, all or a rank");
  if (o.url_index.empty() != o.tier.empty()) throw sluice::usage_error("mpi_sharded: --url-index and --tier go together");
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

// The dataset of write_dataset as `count` sluice shards of consecutive records (record i holds i,
// so the remote reader's record i is the local one's) in <dir>/shards, with shards/index.txt.
void pack_shards(const options& o) {
  namespace fs = std::filesystem;
  if (o.pack_shards == 0 || o.pack_shards > o.records) throw sluice::usage_error("mpi_sharded: --pack-shards takes 1 .. --records");
  write_dataset(o);
  const sluice::io::fixed_records reader{o.dir + "/records.u8", {.record_bytes = 8, .labels_path = o.dir + "/labels.i64"}};
  const std::string out = o.dir + "/shards";
  fs::create_directories(out);
  std::vector<std::string> paths;
  for (std::uint64_t s = 0; s < o.pack_shards; ++s) {
    char name[48];
    std::snprintf(name, sizeof name, "/part-%03llu.sluice", static_cast<unsigned long long>(s));
    paths.push_back(out + name);
    sluice::io::shard_writer w(paths.back());
    for (std::uint64_t i = s * o.records / o.pack_shards; i < (s + 1) * o.records / o.pack_shards; ++i)
      w.add(reader.record(i), reader.label(i));
    w.finish();
  }
  const auto entries = sluice::io::index_shards(paths);
  sluice::io::write_shard_index(out + "/index.txt", entries);
  std::uint64_t bytes = 0;
  for (const auto& e : entries) bytes += e.bytes;
  std::printf("packed %llu records into %zu shards (%llu bytes) and %s/index.txt\n",
              static_cast<unsigned long long>(o.records), entries.size(), static_cast<unsigned long long>(bytes), out.c_str());
}

// Rank 0's per-epoch report: a line a rank, the job's line, and the rules that compare ranks (R6)
// and epochs (R7).
void report_epoch(const std::vector<sluice::diag::rank_summary>& ranks,
                  std::vector<sluice::diag::epoch_observation>& history, sluice::diag::json_writer& json) {
  namespace diag = sluice::diag;
  auto ms = [](double s) { return s * 1e3; };
  for (const auto& r : ranks) {
    std::printf("epoch %llu rank %llu: step %.3f ms, data stall %.3f ms a step (%.1f %%, p95 %.3f ms), ",
                static_cast<unsigned long long>(r.epoch), static_cast<unsigned long long>(r.rank), ms(r.step_s()),
                ms(r.wait_per_step_s()), 100 * r.stall_fraction(), static_cast<double>(r.wait_p95_ns) / 1e6);
    if (r.comm_measured) std::printf("communication %.3f ms a step, ", ms(r.comm_per_step_s()));
    std::printf("compute %.3f ms a step, %.0f samples/s\n", ms(r.compute_per_step_s()), r.samples_per_second());
  }
  history.push_back(diag::observe(ranks));
  const auto& o = history.back();
  const auto c = ranks[diag::critical_rank_index(ranks)].rank;
  std::printf("epoch %llu job: step %.3f ms, data stall %.3f ms a step (%.1f %%) on rank %llu (the one the others wait for)",
              static_cast<unsigned long long>(o.epoch), ms(o.step_time_s), ms(o.wait_fraction * o.step_time_s),
              100 * o.wait_fraction, static_cast<unsigned long long>(c));
  if (!std::isnan(o.comm_time_s)) std::printf(", communication %.3f ms a step", ms(o.comm_time_s));
  std::printf("\n");
  json.begin_object().key("job");
  diag::to_json(json, o);
  json.key("ranks").begin_array();
  for (const auto& r : ranks) diag::to_json(json, r);
  json.end_array().key("advice").begin_array();
  for (auto r : {diag::rule_straggler_rank(ranks), diag::rule_slowdown_cause(history)}) {
    if (!r) continue;
    std::printf("  %s: %s\n", r->rule.c_str(), r->message.c_str());
    diag::to_json(json, *r);
  }
  json.end_array().end_object();
  std::fflush(stdout);
}

template <class Reader>
int train(const options& o, const sluice::sample::rank_info& me, std::uint64_t start, const Reader& reader,
          const sluice::io::node_tier* tier);

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

  std::uint64_t start = 0;
  if (!o.resume.empty()) {
    std::ifstream cp(o.resume);
    std::string word;
    if (!(cp >> word >> start) || word != "global_position")
      throw sluice::format_error(o.resume, {.offset = 0}, "not a checkpoint (expected 'global_position N')");
  }
  if (!o.url_index.empty()) {
#if SLUICE_WITH_CURL
    // One tier directory for the node: every rank opens it, the flocks inside make each shard's
    // download happen once (the first rank to need it fetches, the others wait and read it).
    sluice::io::node_tier tier{o.tier};
    const auto reader = sluice::io::remote_shards_from_index(o.url_index, tier);
    return train(o, me, start, reader, &tier);
#else
    throw sluice::usage_error("mpi_sharded: --url-index needs libcurl (this build has no sluice::curl)");
#endif
  }
  if (me.is_main()) write_dataset(o);
  MPI_Barrier(MPI_COMM_WORLD);
  const sluice::io::fixed_records reader{o.dir + "/records.u8", {.record_bytes = 8, .labels_path = o.dir + "/labels.i64"}};
  return train(o, me, start, reader, nullptr);
}

// The run over `reader` (local records or remote shards); `tier`, when the shards are remote.
template <class Reader>
int train(const options& o, const sluice::sample::rank_info& me, std::uint64_t start, const Reader& reader,
          const sluice::io::node_tier* tier) {
  const std::string dir = o.dir;
  const std::string tag = o.tag.empty() ? std::string() : "." + o.tag;
  // The data path's injected slowness: decided per sample from its epoch, so the workers read no
  // state the consumer changes.
  const bool slowed = o.slow_us > 0 && (o.slow_rank == -1 || (o.slow_rank >= 0 && static_cast<std::uint64_t>(o.slow_rank) == me.rank));
  const std::uint64_t slow_epoch = o.epoch + o.slow_from;
  const auto slow_us = std::chrono::microseconds(o.slow_us);
  auto loader = sluice::from(sluice::sample::distributed{sluice::sample::shuffle{reader.size(), {.seed = o.seed}},
                                                          me.distributed({.tail = o.tail, .start = start})}) |
                sluice::read(reader) |
                sluice::map([slowed, slow_epoch, slow_us](auto r, const sluice::sample_context& ctx) {
                  if (slowed && ctx.epoch >= slow_epoch) std::this_thread::sleep_for(slow_us);
                  return r;
                }) |
                sluice::collate({.batch = o.batch}) | sluice::prefetch(2, {.workers = 1});

  std::vector<std::int64_t> histogram(num_classes, 0);
  std::ofstream ids(dir + "/ids" + tag + ".w" + std::to_string(me.world) + ".r" + std::to_string(me.rank) + ".txt");
  std::string lines;
  std::uint64_t batches = 0, j = 0, consumed = 0;
  std::vector<float> grad(o.grad_floats);
  const bool comm_timed = o.grad_floats > 0 || o.comm_delay_us > 0;
  std::vector<sluice::diag::epoch_observation> history;  // the job's, on rank 0
  std::vector<sluice::diag::rank_summary> ranks(me.world);
  sluice::diag::json_writer json;  // rank 0's report: <dir>/ranks<tag>.w<world>.json
  json.begin_object().key("epochs").begin_array();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t_start = MPI_Wtime();
  for (std::uint64_t n = 0; n < o.epochs; ++n) {
    const std::uint64_t e = o.epoch + n;
    const bool delayed = o.comm_delay_us > 0 && n >= o.comm_delay_from;
    std::uint64_t epoch_batches = 0, comm_ns = 0;
    for (auto& b : loader.epoch(e)) {
      ++epoch_batches;
      for (std::size_t i = 0; i < b.size(); ++i) {
        std::uint64_t content = 0;
        std::memcpy(&content, b.sample(i).data(), 8);
        if (content != b.ids()[i]) throw sluice::error("mpi_sharded: record content does not match its id");
        if (n != 0) continue;  // the files record the run's first epoch
        const auto label = b.labels()[i];
        if (label >= 0 && label < num_classes) ++histogram[static_cast<std::size_t>(label)];
        lines += std::to_string(start + me.rank + me.world * j) + " " + std::to_string(b.ids()[i]) + "\n";
        ++j;
      }
      if (o.step_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o.step_us));  // a training step
      if (comm_timed) {  // the gradient all-reduce, after the injected delay
        const auto t0 = std::chrono::steady_clock::now();
        if (delayed) std::this_thread::sleep_for(std::chrono::microseconds(o.comm_delay_us));
        if (!grad.empty()) {
          std::fill(grad.begin(), grad.end(), 1.0f);
          // Polled with short sleeps rather than MPI_Allreduce's busy wait: with more ranks than
          // cores (the tests run 2 ranks and their loader threads on 2 cores) a spinning rank takes
          // the core a late rank needs, and every rank's step time would measure the contention.
          MPI_Request req = MPI_REQUEST_NULL;
          MPI_Iallreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(grad.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
          for (int done = 0; MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;)
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
        comm_ns += static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      }
      if (n == 0) {
        ++batches;
        consumed = loader.state().position;
      }
      if (o.stop_after != 0 && epoch_batches == o.stop_after) break;
    }
    const auto es = loader.epoch_stats(e);
    if (!es) throw sluice::error("mpi_sharded: no epoch_stats for epoch " + std::to_string(e));
    const auto mine = sluice::diag::summarize(*es, loader.stats(), me.rank, me.world,
                                              comm_timed ? std::optional(comm_ns) : std::nullopt);
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, ranks.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    if (me.is_main()) report_epoch(ranks, history, json);
  }
  const double t_loop = MPI_Wtime() - t_start;
  if (me.is_main()) {
    std::printf("advice on the last epoch:\n");
    const auto advice = sluice::diag::advise(history, ranks);
    for (const auto& r : advice)
      std::printf("  [%s] %s: %s\n", std::string(sluice::diag::to_string(r.level)).c_str(), r.rule.c_str(), r.message.c_str());
    json.end_array().key("advice");
    sluice::diag::to_json(json, std::span<const sluice::diag::recommendation>(advice));
    json.end_object();
    std::ofstream(dir + "/ranks" + tag + ".w" + std::to_string(me.world) + ".json") << json.str() << "\n";
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
  if (tier != nullptr) {
    // Each rank's own downloads (misses) and the files it found ready (hits, including those another
    // rank fetched while this one waited); summed over the ranks, bytes_fetched is what the node
    // downloaded.
    const auto ts = tier->stats();
    std::ofstream(dir + "/tier" + tag + ".w" + std::to_string(me.world) + ".r" + std::to_string(me.rank) + ".txt")
        << "hits " << ts.hits << " misses " << ts.misses << " bytes_fetched " << ts.bytes_fetched << "\n";
    const std::uint64_t mine[3] = {ts.hits, ts.misses, ts.bytes_fetched};
    std::uint64_t sum[3] = {0, 0, 0};
    MPI_Allreduce(mine, sum, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    double t_max = 0;
    MPI_Allreduce(&t_loop, &t_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (me.is_main())
      std::printf("tier %s: %llu ranks fetched %llu bytes in %llu downloads, %llu hits; the epoch loop took %.3f s\n",
                  tier->dir().c_str(), static_cast<unsigned long long>(me.world), static_cast<unsigned long long>(sum[2]),
                  static_cast<unsigned long long>(sum[1]), static_cast<unsigned long long>(sum[0]), t_max);
  }

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
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--pack-shards") {  // no MPI: a preparation step
      try {
        pack_shards(parse(argc, argv));
        return 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mpi_sharded: %s\n", e.what());
        return 1;
      }
    }
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
