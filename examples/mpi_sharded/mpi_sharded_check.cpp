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
//
// The node tier of a remote run (or of a stopped run and its resume, which share it) downloaded
// each shard exactly once: the ranks' tier files (<dir>/tier<tag>.w<world>.r<rank>.txt) sum to
// one download (miss) per shard and to the bytes the index lists, and the tier directory holds
// each shard of the index once, at its size, with no partial file left ("-" stands for no tag):
//   mpi_sharded_check tier <dir> <index.txt> <tier-dir> <tag> <world> [<tag> <world>]...
#include <cstdint>
#include <cstdio>
#include <filesystem>
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

int check_tier(const std::string& dir, const std::string& index, const std::string& tier_dir,
               const std::vector<std::pair<std::string, std::uint64_t>>& runs) {
  struct entry {
    std::string name;
    std::uint64_t bytes = 0;
  };
  std::vector<entry> shards;
  std::uint64_t total = 0;
  {
    std::ifstream f(index);
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      entry e;
      if (ls >> e.name >> e.bytes) shards.push_back(e), total += e.bytes;
    }
    expect(!shards.empty(), index + ": no shard listed");
  }
  std::uint64_t hits = 0, misses = 0, fetched = 0, ranks = 0;
  for (const auto& [tag, world] : runs)
    for (std::uint64_t r = 0; r < world; ++r) {
      const std::string path = dir + "/tier" + (tag == "-" ? "" : "." + tag) + ".w" + std::to_string(world) + ".r" +
                               std::to_string(r) + ".txt";
      std::ifstream f(path);
      std::string w1, w2, w3;
      std::uint64_t h = 0, m = 0, b = 0;
      if (!(f >> w1 >> h >> w2 >> m >> w3 >> b) || w1 != "hits" || w2 != "misses" || w3 != "bytes_fetched") {
        expect(false, path + ": missing or malformed");
        continue;
      }
      hits += h, misses += m, fetched += b, ++ranks;
    }
  expect(misses == shards.size(), std::to_string(ranks) + " ranks downloaded " + std::to_string(misses) +
                                      " shards, the index lists " + std::to_string(shards.size()));
  expect(fetched == total, std::to_string(ranks) + " ranks fetched " + std::to_string(fetched) +
                               " bytes, the shards hold " + std::to_string(total));
  std::map<std::string, std::uint64_t> files;  // the tier's published files and their sizes
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(tier_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n[0] == '.' || !e.is_regular_file()) continue;
    expect(n.find(".partial.") == std::string::npos, tier_dir + ": a partial file is left: " + n);
    files[n] = e.file_size();
  }
  expect(!ec, tier_dir + ": cannot list the tier directory");
  for (const auto& s : shards) {
    int copies = 0;
    for (const auto& [n, size] : files)
      if (n.starts_with(s.name.substr(s.name.rfind('/') + 1) + "-")) {
        ++copies;
        expect(size == s.bytes, tier_dir + "/" + n + " holds " + std::to_string(size) + " bytes, the index says " +
                                    std::to_string(s.bytes));
      }
    expect(copies == 1, tier_dir + " holds " + std::to_string(copies) + " copies of " + s.name);
  }
  expect(files.size() == shards.size(), tier_dir + " holds " + std::to_string(files.size()) + " files for " +
                                            std::to_string(shards.size()) + " shards");
  if (failures == 0)
    std::printf("tier ok: %llu shards (%llu bytes) downloaded once for %llu ranks: %llu downloads, %llu bytes fetched, "
                "%llu hits\n",
                static_cast<unsigned long long>(shards.size()), static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(ranks), static_cast<unsigned long long>(misses),
                static_cast<unsigned long long>(fetched), static_cast<unsigned long long>(hits));
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 7 && argc % 2 == 1 && std::string(argv[1]) == "tier") {
    std::vector<std::pair<std::string, std::uint64_t>> runs;
    for (int a = 5; a + 1 < argc; a += 2) runs.emplace_back(argv[a], std::stoull(argv[a + 1]));
    return check_tier(argv[2], argv[3], argv[4], runs);
  }
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
