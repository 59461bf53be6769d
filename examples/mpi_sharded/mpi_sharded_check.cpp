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

rank_file read_rank(const std::string& dir, std::uint64_t world, std::uint64_t rank) {
  const std::string path = dir + "/ids.w" + std::to_string(world) + ".r" + std::to_string(rank) + ".txt";
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

}  // namespace

int main(int argc, char** argv) {
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
