// bench_remote — one pipeline over the same shards, read three ways in one process:
//   local   the shards on the local disk (a reader over their shard_readers, concatenated)
//   cold    io::remote_shards from a local nginx through an empty node disk tier: each shard is
//           fetched when the batch that needs it is prepared (first epoch of a node)
//   warm    a new io::remote_shards on the same tier (a second epoch, or a second process of the
//           node): every shard a tier hit, nothing fetched
// The pipeline is sequential order | read | collate(batch 256) | prefetch(2, 2 workers); each
// epoch's bytes are summed by the consumer. All files are fresh, so in the page cache: this
// measures the fetch and tier overhead against mmap reads, not a disk.
//
//   sluice_bench_remote [--shards N] [--records N] [--bytes N] [--repeat N]
// Starts its own nginx on 127.0.0.1 (exits 77 if nginx is not installed).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "remote_server.hpp"
#include "sluice/io/remote.hpp"
#include "sluice/sluice.hpp"

namespace {

struct local_shards {
  using reader_concept = sluice::reader_tag;
  std::vector<sluice::io::shard_reader> shards;
  std::vector<std::size_t> first{0};
  std::size_t size() const { return first.back(); }
  std::size_t which(std::size_t i) const {
    return static_cast<std::size_t>(std::upper_bound(first.begin() + 1, first.end(), i) - first.begin() - 1);
  }
  std::span<const std::byte> record(std::size_t i) const {
    const auto s = which(i);
    return shards[s].record(i - first[s]);
  }
  std::int64_t label(std::size_t i) const {
    const auto s = which(i);
    return shards[s].label(i - first[s]);
  }
  std::string_view path() const { return "local shards"; }
};

template <class Reader>
double epoch_seconds(const Reader& r, std::uint64_t& checksum) {
  auto loader = sluice::from(sluice::sample::sequential(r.size())) | sluice::read(r) |
                sluice::collate({.batch = 256}) | sluice::prefetch(2, {.workers = 2});
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t sum = 0;
  for (auto& b : loader.epoch(0)) {
    const auto bytes = b.bytes();
    for (std::size_t k = 0; k < bytes.size(); k += 4096) sum += static_cast<std::uint8_t>(bytes[k]);
  }
  checksum = sum;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t shards = 8, records = 1024, bytes = 16384, repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::size_t v = std::stoul(argv[i + 1]);
    if (k == "--shards") shards = v;
    else if (k == "--records") records = v;
    else if (k == "--bytes") bytes = v;
    else if (k == "--repeat") repeat = v;
    else {
      std::fprintf(stderr, "usage: sluice_bench_remote [--shards N] [--records N] [--bytes N] [--repeat N]\n");
      return 2;
    }
  }
  double load[3] = {0, 0, 0};
  (void)::getloadavg(load, 3);
  sluice_test::temp_dir serve;
  std::vector<std::string> names;
  std::vector<std::byte> rec(bytes);
  for (std::size_t s = 0; s < shards; ++s) {
    names.push_back("train-" + std::to_string(s) + ".sluice");
    sluice::io::shard_writer w(serve.file(names.back()));
    for (std::size_t i = 0; i < records; ++i) {
      for (std::size_t j = 0; j < bytes; j += 64) rec[j] = static_cast<std::byte>((s * 131 + i * 7 + j) & 0xff);
      w.add(rec, static_cast<std::int64_t>(i % 10));
    }
    w.finish();
  }
  sluice_remote_test::nginx_server web(serve.path().string());
  std::vector<std::string> urls;
  for (const auto& n : names) urls.push_back(web.url(n));
  const double total_mb = static_cast<double>(shards * records * bytes) / 1e6;
  std::printf("sluice_bench_remote: %zu shards x %zu records x %zu bytes (%.1f MB), batch 256, 2 workers; loadavg %.2f %.2f %.2f\n",
              shards, records, bytes, total_mb, load[0], load[1], load[2]);
  std::printf("%-6s %-6s %10s %10s %9s %14s %14s\n", "run", "kind", "seconds", "MB/s", "hit_rate", "bytes_fetched", "vs_local");
  for (std::size_t rep = 0; rep < repeat; ++rep) {
    local_shards local;
    for (const auto& n : names) {
      local.shards.emplace_back(serve.file(n));
      local.first.push_back(local.first.back() + local.shards.back().size());
    }
    std::uint64_t c_local = 0, c_cold = 0, c_warm = 0;
    const double t_local = epoch_seconds(local, c_local);
    sluice_test::temp_dir tier_dir;
    sluice::io::node_tier tier(tier_dir.path().string(), {.budget_bytes = 4ull << 30});
    std::vector<std::size_t> sizes(shards, records);
    double t_cold = 0, t_warm = 0;
    sluice::io::node_tier_stats s_cold, s_warm;
    {
      sluice::io::remote_shards r(urls, tier, {.sizes = sizes});
      t_cold = epoch_seconds(r, c_cold);
      s_cold = tier.stats();
    }
    {
      sluice::io::node_tier tier2(tier_dir.path().string(), {.budget_bytes = 4ull << 30});
      sluice::io::remote_shards r(urls, tier2, {.sizes = sizes});
      t_warm = epoch_seconds(r, c_warm);
      s_warm = tier2.stats();
    }
    if (c_local != c_cold || c_local != c_warm) {
      std::fprintf(stderr, "sluice_bench_remote: the remote epochs read other bytes than the local one\n");
      return 1;
    }
    std::printf("%-6zu %-6s %10.3f %10.1f %9s %14s %14s\n", rep, "local", t_local, total_mb / t_local, "-", "-", "1.00");
    std::printf("%-6zu %-6s %10.3f %10.1f %9.2f %14llu %14.2f\n", rep, "cold", t_cold, total_mb / t_cold, s_cold.hit_rate(),
                static_cast<unsigned long long>(s_cold.bytes_fetched), t_local / t_cold);
    std::printf("%-6zu %-6s %10.3f %10.1f %9.2f %14llu %14.2f\n", rep, "warm", t_warm, total_mb / t_warm, s_warm.hit_rate(),
                static_cast<unsigned long long>(s_warm.bytes_fetched), t_local / t_warm);
  }
  return 0;
}
