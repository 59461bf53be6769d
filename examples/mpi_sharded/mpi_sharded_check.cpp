// Checks the files mpi_sharded wrote for several world sizes (same --dir, --records, --seed):
//  * every rank of a run got the same number of batches and samples;
//  * the ranks' global positions are disjoint and together are 0 .. world*per_rank - 1;
//  * with tail pad, they cover the epoch once plus fewer than `world` padded positions, which
//    repeat the first positions; with tail drop, exactly n - n % world positions;
//  * the id at each global position is the same as in the 1-rank run (global order independent
//    of the world size);
//  * rank 0's all-reduced class histogram equals the histogram of the ids the ranks received.
//
//   mpi_sharded_check <dir> <records> <pad|drop> <world>...     (the first world must be 1)
//
// Resume across world sizes: a run tagged A stopped at a checkpoint, a run tagged B resumed it;
// every record is delivered exactly once across both, except padding in B (fewer than world_B
// repeats, of B's first positions):
//   mpi_sharded_check resume <dir> <records> <tagA> <worldA> <tagB> <worldB>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    if (++failures <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    else if (failures == 21) std::fprintf(stderr, "(further failures not shown)\n");
  }
}

struct rank_file {
  std::uint64_t batches = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> samples;  // (global position, id)
};

rank_file read_rank(const std::string& dir, std::uint64_t world, std::uint64_t rank, const std::string& tag = "") {
  const std::string path = dir + "/ids" + (tag.empty() ? "" : "." + tag) + ".w" + std::to_string(world) + ".r" + std::to_string(rank) + ".txt";
  std::ifstream f(path);
  rank_file r;
  std::string word;
  if (!(f >> word >> r.batches) || word != "batches") {
    expect(false, path + ": missing or malformed");
    return r;
  }
  std::uint64_t g = 0, id = 0;
  while (f >> g >> id) r.samples.emplace_back(g, id);
  return r;
}

int check_resume(const std::string& dir, std::uint64_t n, const std::string& tag_a, std::uint64_t world_a,
                 const std::string& tag_b, std::uint64_t world_b) {
  std::uint64_t checkpoint = 0;
  {
    std::ifstream cp(dir + "/checkpoint." + tag_a + ".txt");
    std::string word;
    expect(static_cast<bool>(cp >> word >> checkpoint) && word == "global_position", "checkpoint file of run " + tag_a);
  }
  std::vector<int> seen(n, 0);
  std::uint64_t before = 0, after = 0, per_rank_b = 0;
  for (std::uint64_t r = 0; r < world_a; ++r)
    for (auto [g, id] : read_rank(dir, world_a, r, tag_a).samples) {
      expect(g < checkpoint, "run " + tag_a + " delivered position " + std::to_string(g) + " past its checkpoint");
      if (id < n) ++seen[id];
      ++before;
    }
  for (std::uint64_t r = 0; r < world_b; ++r) {
    const auto f = read_rank(dir, world_b, r, tag_b);
    if (r == 0) per_rank_b = f.samples.size();
    expect(f.samples.size() == per_rank_b, "run " + tag_b + ": ranks got different sample counts");
    for (auto [g, id] : f.samples) {
      expect(g >= checkpoint, "run " + tag_b + " delivered position " + std::to_string(g) + " before the checkpoint");
      if (id < n) ++seen[id];
      ++after;
    }
  }
  expect(before == checkpoint, "run " + tag_a + " delivered " + std::to_string(before) + " samples, checkpoint says " +
                                   std::to_string(checkpoint));
  const std::uint64_t padded = before + after - n;
  expect(before + after >= n && padded < world_b, "runs delivered " + std::to_string(before + after) + " samples for " +
                                                      std::to_string(n) + " records");
  std::uint64_t lost = 0, repeats = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (seen[i] == 0) ++lost;
    if (seen[i] > 1) repeats += static_cast<std::uint64_t>(seen[i] - 1);
  }
  expect(lost == 0, std::to_string(lost) + " records never delivered");
  expect(repeats == padded, std::to_string(repeats) + " repeated deliveries, padding explains " + std::to_string(padded));
  if (failures == 0)
    std::printf("resume ok: %llu samples on %llu ranks up to global position %llu, %llu on %llu ranks after it, "
                "%llu padded, none lost or repeated\n",
                static_cast<unsigned long long>(before), static_cast<unsigned long long>(world_a),
                static_cast<unsigned long long>(checkpoint), static_cast<unsigned long long>(after),
                static_cast<unsigned long long>(world_b), static_cast<unsigned long long>(padded));
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 8 && std::string(argv[1]) == "resume")
    return check_resume(argv[2], std::stoull(argv[3]), argv[4], std::stoull(argv[5]), argv[6], std::stoull(argv[7]));
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <dir> <records> <pad|drop> <world>...\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::uint64_t n = std::stoull(argv[2]);
  const bool pad = std::string(argv[3]) == "pad";
  std::vector<std::int64_t> labels(n);
  {
    std::ifstream lf(dir + "/labels.i64", std::ios::binary);
    lf.read(reinterpret_cast<char*>(labels.data()), static_cast<std::streamsize>(n * 8));
    expect(static_cast<bool>(lf), "labels.i64 holds " + std::to_string(n) + " labels");
  }
  std::vector<std::uint64_t> order;  // from the 1-rank run
  for (int a = 4; a < argc; ++a) {
    const std::uint64_t world = std::stoull(argv[a]);
    const std::string run = "world " + std::to_string(world) + ": ";
    std::map<std::uint64_t, std::uint64_t> by_position;
    std::vector<std::int64_t> hist;
    std::uint64_t per_rank = 0, batches = 0;
    for (std::uint64_t r = 0; r < world; ++r) {
      const auto f = read_rank(dir, world, r);
      if (r == 0) per_rank = f.samples.size(), batches = f.batches;
      expect(f.samples.size() == per_rank, run + "rank " + std::to_string(r) + " got " +
                                               std::to_string(f.samples.size()) + " samples, rank 0 got " +
                                               std::to_string(per_rank));
      expect(f.batches == batches, run + "rank " + std::to_string(r) + " ran " + std::to_string(f.batches) +
                                       " batches, rank 0 ran " + std::to_string(batches));
      for (auto [g, id] : f.samples) {
        expect(by_position.emplace(g, id).second, run + "global position " + std::to_string(g) + " given to two ranks");
        expect(id < n, run + "id " + std::to_string(id) + " out of range");
        if (id < n) {
          const auto c = static_cast<std::size_t>(labels[id]);
          if (hist.size() <= c) hist.resize(c + 1);
          ++hist[c];
        }
      }
    }
    const std::uint64_t total = per_rank * world;
    expect(by_position.size() == total && (by_position.empty() || by_position.rbegin()->first == total - 1),
           run + "global positions are not exactly 0.." + std::to_string(total - 1));
    if (pad) expect(total >= n && total - n < world, run + std::to_string(total) + " samples for " + std::to_string(n) + " records (pad)");
    else expect(total == n - n % world, run + std::to_string(total) + " samples for " + std::to_string(n) + " records (drop)");
    if (order.empty()) {
      expect(world == 1, "the first world given must be 1");
      std::vector<int> seen(n, 0);
      for (auto& [g, id] : by_position) {
        order.push_back(id);
        if (id < n) ++seen[id];
      }
      for (std::uint64_t i = 0; i < n; ++i) expect(seen[i] == 1, "1 rank: id " + std::to_string(i) + " seen " + std::to_string(seen[i]) + " times");
    } else {
      std::uint64_t mismatches = 0;
      for (auto& [g, id] : by_position) {
        const std::uint64_t expected = g < order.size() ? order[g] : order[(g - n) % n];  // padding repeats the start
        if (id != expected) ++mismatches;
      }
      expect(mismatches == 0, run + std::to_string(mismatches) + " positions differ from the 1-rank order");
    }
    std::ifstream sf(dir + "/summary.w" + std::to_string(world) + ".txt");
    std::string word;
    std::vector<std::int64_t> reduced;
    std::int64_t h = 0;
    sf >> word;
    while (sf >> h) reduced.push_back(h);
    while (hist.size() < reduced.size()) hist.push_back(0);
    expect(word == "histogram" && reduced == hist, run + "rank 0's all-reduced histogram differs from the ids received");
    if (failures == 0)
      std::printf("%sok: %llu ranks x %llu samples (%llu batches each), %llu padded\n", run.c_str(),
                  static_cast<unsigned long long>(world), static_cast<unsigned long long>(per_rank),
                  static_cast<unsigned long long>(batches), static_cast<unsigned long long>(total > n ? total - n : 0));
  }
  return failures == 0 ? 0 : 1;
}
