// Remote shards (io/remote.hpp) and the node-local disk tier (io/node_tier.hpp), against a real
// nginx on 127.0.0.1 and a fault-injecting server thread. A case that needs nginx skips (exit 77)
// when it is not installed.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "remote_server.hpp"
#include "sluice/io/remote.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_remote_test::fault;
using sluice_remote_test::fault_server;
using sluice_remote_test::nginx_server;
using sluice_test::temp_dir;

namespace {

// A shard of n records of `bytes` bytes: record i's byte j is (i * 7 + j + seed) & 0xff, label i % 5.
void write_shard(const std::string& path, std::size_t n, std::size_t bytes, unsigned seed = 0) {
  io::shard_writer w(path);
  std::vector<std::byte> r(bytes);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < bytes; ++j) r[j] = static_cast<std::byte>((i * 7 + j + seed) & 0xff);
    w.add(r, static_cast<std::int64_t>(i % 5));
  }
  w.finish();
}

std::vector<std::string> tier_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path().filename().string());
  return out;
}

// Fast retries for the tests.
io::http_options quick() {
  return {.max_attempts = 4, .backoff = std::chrono::milliseconds(5), .max_backoff = std::chrono::milliseconds(20),
          .connect_timeout = std::chrono::milliseconds(2000), .timeout = std::chrono::milliseconds(20000)};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("nginx: remote shards read record for record the same as the local shards") {
  temp_dir serve, tier_dir;
  write_shard(serve.file("a.sluice"), 300, 200, 1);
  write_shard(serve.file("b.sluice"), 120, 200, 2);
  nginx_server web(serve.path().string());
  io::node_tier tier(tier_dir.path().string(), {.budget_bytes = 1 << 30});
  io::remote_shards data({web.url("a.sluice"), web.url("b.sluice")}, tier, {.fetch = {.http = quick()}});
  io::shard_reader a(serve.file("a.sluice")), b(serve.file("b.sluice"));
  REQUIRE(data.size() == 420);
  REQUIRE(data.shard_count() == 2);
  CHECK(data.shard_range(1) == std::pair<std::uint64_t, std::uint64_t>{300, 420});
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto& local = i < 300 ? a : b;
    const std::size_t k = i < 300 ? i : i - 300;
    const auto got = data.record(i), want = local.record(k);
    REQUIRE(got.size() == want.size());
    REQUIRE(std::memcmp(got.data(), want.data(), got.size()) == 0);
    REQUIRE(data.label(i) == local.label(k));
  }
  CHECK(tier.stats().misses == 2);
  CHECK(tier.stats().bytes_fetched ==
        std::filesystem::file_size(serve.file("a.sluice")) + std::filesystem::file_size(serve.file("b.sluice")));

  // The same pipeline as over a local reader: batches hold the local records in order.
  auto loader = from(sample::sequential(data.size())) | read(data) | collate({.batch = 32}) | prefetch(2, {.workers = 2});
  std::size_t seen = 0;
  for (auto& batch : loader.epoch(0)) {
    for (std::size_t j = 0; j < batch.size(); ++j) {
      const std::size_t i = batch.ids()[j];
      const auto want = i < 300 ? a.record(i) : b.record(i - 300);
      CHECK(std::memcmp(batch.sample(j).data(), want.data(), want.size()) == 0);
    }
    seen += batch.size();
  }
  CHECK(seen == 420);
}

TEST_CASE("nginx: a cold open fetches every shard and a warm open hits the tier") {
  temp_dir serve, tier_dir;
  std::vector<std::string> urls;
  nginx_server web(serve.path().string());
  for (int s = 0; s < 4; ++s) {
    write_shard(serve.file("s" + std::to_string(s) + ".sluice"), 50, 100, static_cast<unsigned>(s));
    urls.push_back(web.url("s" + std::to_string(s) + ".sluice"));
  }
  {
    io::node_tier tier(tier_dir.path().string());
    io::remote_shards cold(urls, tier, {.fetch = {.http = quick()}});
    CHECK(tier.stats().misses == 4);
    CHECK(tier.stats().hits == 0);
    CHECK(tier.stats().hit_rate() == 0.0);
  }
  io::node_tier tier(tier_dir.path().string());  // a later process of the node: the files are there
  io::remote_shards warm(urls, tier, {.sizes = {50, 50, 50, 50}, .fetch = {.http = quick()}});
  CHECK(tier.stats().hits + tier.stats().misses == 0);  // with .sizes nothing is opened before it is read
  for (std::size_t i = 0; i < warm.size(); i += 50) (void)warm.record(i);
  CHECK(tier.stats().hits == 4);
  CHECK(tier.stats().misses == 0);
  CHECK(tier.stats().hit_rate() == 1.0);
  CHECK(tier.stats().bytes_fetched == 0);
  for (int s = 0; s < 4; ++s) CHECK(web.requests_for("/s" + std::to_string(s) + ".sluice", 1) == 1);
}

TEST_CASE("nginx: two processes fetching the same shard download it once") {
  temp_dir serve, tier_dir;
  write_shard(serve.file("big.sluice"), 400, 4096);  // ~1.7 MB: about 0.4 s at /slow/'s 4 MB/s
  nginx_server web(serve.path().string());
  const std::string url = web.url("slow/big.sluice");
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t kids[2];
  for (auto& k : kids) {
    k = ::fork();
    REQUIRE(k >= 0);
    if (k == 0) {
      char c;
      ::close(go[1]);
      if (::read(go[0], &c, 1) != 1) std::_Exit(90);
      try {
        io::node_tier tier(tier_dir.path().string());
        io::tier_file f = io::fetch_shard(tier, url, {.http = quick()});
        io::shard_reader r(f.path());
        std::_Exit(r.size() == 400 ? (f.was_hit() ? 10 : 11) : 91);
      } catch (...) {
        std::_Exit(92);
      }
    }
  }
  ::close(go[0]);
  REQUIRE(::write(go[1], "go", 2) == 2);  // both start now
  ::close(go[1]);
  int codes[2];
  for (int j = 0; j < 2; ++j) {
    int st = 0;
    REQUIRE(::waitpid(kids[j], &st, 0) == kids[j]);
    REQUIRE(WIFEXITED(st));
    codes[j] = WEXITSTATUS(st);
  }
  // One filled it (11), the other waited on its lock and found it there (10).
  CHECK(((codes[0] == 10 && codes[1] == 11) || (codes[0] == 11 && codes[1] == 10)));
  CHECK(web.requests_for("/slow/big.sluice", 1) == 1);
}

TEST_CASE("nginx: 404 and 403 are errors naming the URL and the status, not retried") {
  temp_dir serve, tier_dir;
  write_shard(serve.file("x.sluice"), 10, 10);
  nginx_server web(serve.path().string());
  io::node_tier tier(tier_dir.path().string());
  for (auto [path, status] : {std::pair<std::string, long>{"missing.sluice", 404}, {"forbidden/x.sluice", 403}}) {
    const std::string url = web.url(path);
    try {
      (void)io::fetch_shard(tier, url, {.http = quick()});
      FAIL("no error for " << url);
    } catch (const io::http_error& e) {
      CHECK(e.status() == status);
      CHECK(e.attempts() == 1);
      CHECK(e.path() == url);
      CHECK(contains(e.what(), url));
      CHECK(contains(e.what(), "HTTP " + std::to_string(status)));
    }
    CHECK(web.requests_for("/" + path, 1) == 1);
  }
  // At the batch that needs it: the reader's error reaches the consumer, naming the URL.
  io::remote_shards data({web.url("x.sluice"), web.url("missing.sluice")}, tier,
                         {.sizes = {10, 10}, .fetch = {.http = quick()}});
  auto loader = from(sample::sequential(data.size())) | read(data) | collate({.batch = 10}) | prefetch(1);
  std::size_t got = 0;
  try {
    for (auto& b : loader.epoch(0)) got += b.size();
    FAIL("no error");
  } catch (const stage_error& e) {
    CHECK(got == 10);
    CHECK(contains(sluice_test::nested_text(e), web.url("missing.sluice")));
    CHECK(contains(sluice_test::nested_text(e), "HTTP 404"));
  }
  // Under on_error::skip the shard's samples are skipped and counted.
  auto skipping = from(sample::sequential(data.size())) | read(data) | collate({.batch = 10}) |
                  prefetch(1, {.errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : skipping.epoch(0)) n += b.size();
  CHECK(n == 10);
  CHECK(skipping.stats().skipped == 10);
  CHECK(web.requests_for("/missing.sluice", 2) == 2);  // the failed shard is not fetched once per sample
}

TEST_CASE("nginx: an MDS dataset by URL reads sample for sample as the local one, fetching each shard when first read") {
  // tests/data/mds/plain: written by Streaming's MDSWriter (5 shards of 2 samples).
  using mds = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>, field<"arr", std::int32_t, variable>>;
  const std::string fixture = std::string(SLUICE_TEST_DATA_DIR) + "/mds/plain";
  temp_dir serve, tier_dir;
  std::filesystem::copy(fixture, serve.path() / "train");
  nginx_server web(serve.path().string());
  io::node_tier tier(tier_dir.path().string(), {.budget_bytes = 1 << 30});
  io::mds_dataset<mds> local(fixture);
  {
    auto data = io::remote_mds<mds>(web.url("train"), tier, {.fetch = {.http = quick()}});
    REQUIRE(data.size() == 10);
    CHECK(data.path() == web.url("train/index.json"));
    CHECK(tier.stats().misses == 0);  // the index only, fetched into memory
    const auto s7 = data.fields(7);
    CHECK(s7.origin == web.url("train/shard.00003.mds"));
    CHECK(tier.stats().misses == 1);
    CHECK(web.requests_for("/train/shard.00000.mds", 0) == 0);
    auto loader = from(sample::sequential(data.size())) | read(data)
                | collate({.batch = 5}, ragged<"image">{}, stack<"label">{}, ragged<"arr">{}) | prefetch(2, {.workers = 2});
    std::size_t n = 0;
    for (auto& b : loader.epoch(0)) {
      const auto img = b.get<"image">();
      const auto off = b.get<"image.offsets">();
      for (std::size_t k = 0; k < b.size(); ++k, ++n) {
        const auto want = local.fields(b.ids()[k]);
        const auto w = want.bytes_of<"image">();
        REQUIRE(static_cast<std::size_t>(off[k + 1] - off[k]) == w.size());
        CHECK(std::memcmp(img.data() + off[k], w.data(), w.size()) == 0);
        CHECK(std::memcmp(&b.get<"label">()[k], want.bytes_of<"label">().data(), 8) == 0);
      }
    }
    CHECK(n == 10);
    CHECK(tier.stats().misses == 5);
  }
  // A second dataset on the node finds every shard in the tier.
  auto again = io::remote_mds<mds>(web.url("train/index.json"), tier, {.fetch = {.http = quick()}});
  for (std::size_t i = 0; i < again.size(); ++i) (void)again.fields(i);
  CHECK(tier.stats().misses == 5);
  CHECK(tier.stats().hits == 5);
}

TEST_CASE("nginx: MDS shards that do not match their index are rejected twice and named, a missing one is a 404") {
  using mds = schema<field<"label", std::int64_t>>;
  const std::string fixture = std::string(SLUICE_TEST_DATA_DIR) + "/mds/plain";
  temp_dir serve, tier_dir;
  std::filesystem::copy(fixture, serve.path());
  // Shard 1 is served truncated by 5 bytes (its index says the full size), shard 3 is absent.
  const auto s1 = sluice_test::read_file(serve.file("shard.00001.mds"));
  sluice_test::write_file(serve.file("shard.00001.mds"), std::span(s1).first(s1.size() - 5));
  std::filesystem::remove(serve.file("shard.00003.mds"));
  // Shard 2 keeps its size, but its offset table points past the file: the MDS check rejects it.
  auto s2 = sluice_test::read_file(serve.file("shard.00002.mds"));
  s2[10] = std::byte{0x7f};  // entry 1's third byte
  sluice_test::write_file(serve.file("shard.00002.mds"), s2);
  nginx_server web(serve.path().string());
  io::node_tier tier(tier_dir.path().string());
  auto data = io::remote_mds<mds>(web.url(""), tier, {.fetch = {.http = quick()}});
  const auto e = sluice_test::expect_format_error([&] { (void)data.fields(2); });
  CHECK(e.file() == web.url("shard.00001.mds"));
  CHECK(contains(e.cause(), "size mismatch: the index says " + std::to_string(s1.size())));
  CHECK(contains(e.cause(), "2 downloads"));
  const auto e2 = sluice_test::expect_format_error([&] { (void)data.fields(5); });
  CHECK(e2.file() == web.url("shard.00002.mds"));
  CHECK(contains(e2.cause(), "downloaded shard rejected: offset table entry 1"));
  try {
    (void)data.fields(6);
    FAIL("no error");
  } catch (const io::http_error& ex) {
    CHECK(ex.status() == 404);
    CHECK(contains(ex.what(), web.url("shard.00003.mds")));
  }
  // Under skip: the 4 good samples arrive, the 6 of the three bad shards are counted.
  auto loader = from(sample::sequential(data.size())) | read(data) | collate({.batch = 2}, stack<"label">{}) |
                prefetch(1, {.errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(n == 4);
  CHECK(loader.stats().skipped == 6);
  for (const auto& name : tier_files(tier_dir.path().string())) CHECK_FALSE(contains(name, ".partial."));
  CHECK(web.requests_for("/shard.00001.mds", 2) == 2);  // not fetched again per sample
}

TEST_CASE("nginx: fetch_ahead downloads the next window's shards while the loader reads the current one, same ids, and releases them at a new epoch") {
  temp_dir serve, tier_a, tier_b;
  std::vector<std::string> urls;
  for (int s = 0; s < 12; ++s) write_shard(serve.file("s" + std::to_string(s) + ".sluice"), 40, 32, static_cast<unsigned>(s));
  nginx_server web(serve.path().string());
  for (int s = 0; s < 12; ++s) urls.push_back(web.url("s" + std::to_string(s) + ".sluice"));
  const std::vector<std::size_t> sizes(12, 40);
  io::node_tier ta(tier_a.path().string()), tb(tier_b.path().string());
  io::remote_shards with(urls, ta, {.sizes = sizes, .fetch = {.http = quick()}});
  io::remote_shards without(urls, tb, {.sizes = sizes, .fetch = {.http = quick()}});
  const sample::shard_shuffle order(with, {.seed = 6, .window = 2, .partitions = 2});
  auto next_window_open = [&](const io::remote_shards& d) {
    sample::shard_shuffle o = order;
    o.prepare(0);
    for (std::uint64_t c = 0; c < 2; ++c)
      for (std::size_t s : o.window_shards(0, c, 1))
        if (!d.is_open(s)) return false;
    return true;
  };
  auto ids_of = [](auto& loader, auto&& after_first) {
    std::vector<std::uint64_t> ids;
    for (auto& b : loader.epoch(0)) {
      for (std::size_t i = 0; i < b.size(); ++i) ids.push_back(b.ids()[i]);
      if (ids.size() == b.size()) after_first();
    }
    return ids;
  };
  bool ahead_open = false, plain_open = true;
  auto la = from(sample::fetch_ahead{sample::distributed{order, {}}, with, {.windows = 1}}) | read(with) |
            collate({.batch = 8}) | prefetch(1, {.workers = 1});
  const auto a = ids_of(la, [&] {
    for (int i = 0; i < 500 && !ahead_open; ++i) {  // up to 10 s for the background fetches
      ahead_open = next_window_open(with);
      if (!ahead_open) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto lb = from(sample::distributed{order, {}}) | read(without) | collate({.batch = 8}) | prefetch(1, {.workers = 1});
  const auto b = ids_of(lb, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    plain_open = next_window_open(without);
  });
  // A new epoch releases the last one's shards (their tier files become evictable); reading
  // again finds them in the tier.
  CHECK(with.is_open(0));
  auto again = sample::fetch_ahead{sample::distributed{order, {}}, with, {.windows = 1}};
  again.prepare(0);
  again.prepare(1);
  for (std::size_t s = 0; s < 12; ++s) CHECK_FALSE(with.is_open(s));
  const auto hits = ta.stats().hits;
  CHECK(std::memcmp(with.record(5).data(), without.record(5).data(), 32) == 0);
  CHECK(ta.stats().hits == hits + 1);
  CHECK(ahead_open);     // window 1 was fetched while the loader was still in window 0
  CHECK_FALSE(plain_open);  // without fetch_ahead nothing fetches it before a worker needs it
  CHECK(a == b);
  CHECK(a.size() == 480);
  CHECK(ta.stats().misses == 12);  // each shard fetched once
}

TEST_CASE("nginx: a dataset opened from its shard index fetches nothing until read and checks each download against it") {
  temp_dir serve, tier_dir;
  std::filesystem::create_directories(serve.path() / "train");
  std::vector<std::string> paths;
  for (int s = 0; s < 3; ++s) {
    paths.push_back(serve.file("train/part-" + std::to_string(s) + ".sluice"));
    write_shard(paths.back(), 40 + static_cast<std::size_t>(s), 128, static_cast<unsigned>(s));
  }
  const auto entries = io::index_shards(paths);
  REQUIRE(entries.size() == 3);
  CHECK(entries[2].name == "part-2.sluice");
  CHECK(entries[2].records == 42);
  CHECK(entries[2].bytes == std::filesystem::file_size(paths[2]));
  CHECK(entries[2].crc32c == io::crc32c(sluice_test::read_file(paths[2])));
  io::write_shard_index(serve.file("train/index.txt"), entries);
  CHECK(io::parse_shard_index(io::shard_index_text(entries), "x") == entries);
  nginx_server web(serve.path().string());
  io::node_tier tier(tier_dir.path().string());

  SUBCASE("read whole, equal to the local shards") {
    auto data = io::remote_shards_from_index(web.url("train/index.txt"), tier, {.fetch = {.http = quick()}});
    CHECK(data.size() == 40 + 41 + 42);
    CHECK(tier.stats().misses == 0);  // nothing fetched to open it
    CHECK(data.shard_url(1) == web.url("train/part-1.sluice"));
    std::size_t i = 0;
    for (int s = 0; s < 3; ++s) {
      io::shard_reader local(paths[static_cast<std::size_t>(s)]);
      for (std::size_t k = 0; k < local.size(); ++k, ++i) {
        REQUIRE(data.record(i).size() == local.record(k).size());
        REQUIRE(std::memcmp(data.record(i).data(), local.record(k).data(), local.record(k).size()) == 0);
      }
    }
    CHECK(tier.stats().misses == 3);
  }
  SUBCASE("a shard replaced on the server after indexing is rejected by its whole-file CRC") {
    // The same size and record count, other bytes: a valid shard, but not the indexed one.
    write_shard(paths[1], 41, 128, 99);
    REQUIRE(std::filesystem::file_size(paths[1]) == entries[1].bytes);
    auto data = io::remote_shards_from_index(web.url("train/index.txt"), tier, {.fetch = {.http = quick()}});
    CHECK(data.record(0).size() == 128);
    const auto e = sluice_test::expect_format_error([&] { (void)data.record(40); });
    CHECK(e.file() == web.url("train/part-1.sluice"));
    CHECK(contains(e.cause(), "CRC-32C mismatch"));
    CHECK_FALSE(tier.contains(io::tier_name_for(web.url("train/part-1.sluice"))));
    CHECK(web.requests_for("/train/part-1.sluice", 2) == 2);  // fetched once more before giving up
  }
  SUBCASE("a shard whose size differs from the index") {
    write_shard(paths[2], 43, 128, 2);
    auto data = io::remote_shards_from_index(web.url("train/index.txt"), tier, {.fetch = {.http = quick()}});
    const auto e = sluice_test::expect_format_error([&] { (void)data.record(81); });
    CHECK(e.file() == web.url("train/part-2.sluice"));
    CHECK(contains(e.cause(), "size mismatch"));
  }
  SUBCASE("a malformed index names itself and the line") {
    sluice_test::write_file(serve.file("train/bad.txt"), std::string("# header\npart-0.sluice 12 x 0000abcd\n"));
    const auto e = sluice_test::expect_format_error(
        [&] { (void)io::remote_shards_from_index(web.url("train/bad.txt"), tier, {.fetch = {.http = quick()}}); });
    CHECK(e.file() == web.url("train/bad.txt"));
    CHECK(contains(e.cause(), "line 2"));
    CHECK(contains(e.cause(), "bad record count 'x'"));
  }
}

TEST_CASE("fault server: 503 twice then 200 is fetched after two retries") {
  temp_dir src, tier_dir;
  write_shard(src.file("f.sluice"), 100, 64);
  fault_server srv(sluice_test::read_file(src.file("f.sluice")), {fault::status_503, fault::status_503, fault::ok});
  io::node_tier tier(tier_dir.path().string());
  io::tier_file f = io::fetch_shard(tier, srv.url("f.sluice"), {.http = quick()});
  CHECK(srv.requests() == 3);
  CHECK(io::shard_reader(f.path()).size() == 100);
  CHECK(sluice_test::read_file(f.path()) == sluice_test::read_file(src.file("f.sluice")));
}

TEST_CASE("fault server: a connection cut mid-body is resumed with a range request") {
  temp_dir src, tier_dir;
  write_shard(src.file("f.sluice"), 300, 256);
  fault_server srv(sluice_test::read_file(src.file("f.sluice")), {fault::cut_mid_body, fault::ok});
  temp_dir out;
  const int fd = ::open(out.file("dl").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  const io::http_result r = io::http_get(srv.url("f.sluice"), fd, quick());
  ::close(fd);
  CHECK(r.attempts == 2);
  CHECK(r.resumed == 1);
  const auto heads = srv.heads();
  REQUIRE(heads.size() == 2);
  CHECK_FALSE(contains(heads[0], "Range:"));
  CHECK(contains(heads[1], "Range: bytes="));
  CHECK(sluice_test::read_file(out.file("dl")) == sluice_test::read_file(src.file("f.sluice")));

  SUBCASE("a server that answers the range with the whole file is read from the start") {
    fault_server whole(sluice_test::read_file(src.file("f.sluice")), {fault::cut_mid_body, fault::ignore_range});
    io::node_tier tier(tier_dir.path().string());
    io::tier_file f = io::fetch_shard(tier, whole.url("f.sluice"), {.http = quick()});
    CHECK(whole.requests() == 2);
    CHECK(sluice_test::read_file(f.path()) == sluice_test::read_file(src.file("f.sluice")));
  }
}

TEST_CASE("fault server: a transfer that stalls is cut by the timeout and resumed") {
  temp_dir src, out;
  write_shard(src.file("f.sluice"), 200, 256);
  fault_server srv(sluice_test::read_file(src.file("f.sluice")), {fault::stall, fault::ok});
  const int fd = ::open(out.file("dl").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  io::http_options o = quick();
  o.timeout = std::chrono::milliseconds(400);
  const auto t0 = std::chrono::steady_clock::now();
  const io::http_result r = io::http_get(srv.url("f.sluice"), fd, o);
  const auto took = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  CHECK(r.attempts == 2);
  CHECK(r.resumed == 1);
  CHECK(took < std::chrono::milliseconds(2500));  // the stalled reply lasts 3 s: it was cut
  CHECK(sluice_test::read_file(out.file("dl")) == sluice_test::read_file(src.file("f.sluice")));
}

TEST_CASE("fault server: a body shorter than its Content-Length with status 200 is retried") {
  temp_dir src, tier_dir;
  write_shard(src.file("f.sluice"), 100, 64);
  fault_server srv(sluice_test::read_file(src.file("f.sluice")), {fault::short_body, fault::ok});
  io::node_tier tier(tier_dir.path().string());
  io::tier_file f = io::fetch_shard(tier, srv.url("f.sluice"), {.http = {.max_attempts = 4, .backoff = std::chrono::milliseconds(5), .resume = false}});
  CHECK(srv.requests() == 2);
  CHECK(sluice_test::read_file(f.path()) == sluice_test::read_file(src.file("f.sluice")));
}

TEST_CASE("fault server: a shard that stays truncated or corrupt is rejected and never left in the tier") {
  temp_dir src, tier_dir;
  write_shard(src.file("f.sluice"), 100, 64);
  const auto body = sluice_test::read_file(src.file("f.sluice"));
  io::node_tier tier(tier_dir.path().string());
  SUBCASE("503 on every attempt: the error names the URL, the attempts and the status") {
    fault_server srv(body, {fault::status_503});
    try {
      (void)io::fetch_shard(tier, srv.url("f.sluice"), {.http = quick()});
      FAIL("no error");
    } catch (const io::http_error& e) {
      CHECK(e.status() == 503);
      CHECK(e.attempts() == 4);
      CHECK(contains(e.what(), srv.url("f.sluice")));
      CHECK(contains(e.what(), "HTTP 503"));
    }
    CHECK(srv.requests() == 4);
  }
  SUBCASE("a corrupt body with a correct status and length: the shard's CRCs reject it, twice") {
    fault_server srv(body, {fault::corrupt});
    const auto e = sluice_test::expect_format_error([&] { (void)io::fetch_shard(tier, srv.url("f.sluice"), {.http = quick()}); });
    CHECK(e.file() == srv.url("f.sluice"));
    CHECK(contains(e.cause(), "checksum mismatch"));
    CHECK(contains(e.cause(), "2 downloads"));
    CHECK(srv.requests() == 2);
  }
  SUBCASE("a whole-file CRC-32C from an index that the download does not match") {
    fault_server srv(body, {fault::ok});
    const std::uint32_t right = io::crc32c(body);
    const auto e = sluice_test::expect_format_error(
        [&] { (void)io::fetch_shard(tier, srv.url("f.sluice"), {.http = quick(), .crc32c = right ^ 1u}); });
    CHECK(e.file() == srv.url("f.sluice"));
    CHECK(contains(e.cause(), "CRC-32C mismatch"));
    // The right CRC is accepted.
    io::tier_file f = io::fetch_shard(tier, srv.url("f.sluice"), {.http = quick(), .crc32c = right});
    CHECK(f.size() == body.size());
  }
  SUBCASE("truncated at every attempt without a Content-Length to compare: the shard format rejects it") {
    std::vector<std::byte> cut(body.begin(), body.end() - 30);  // served whole as a 200: the index is cut
    fault_server srv(cut, {fault::ok});
    const auto e = sluice_test::expect_format_error([&] { (void)io::fetch_shard(tier, srv.url("f.sluice"), {.http = quick()}); });
    CHECK(e.file() == srv.url("f.sluice"));
    CHECK(contains(e.cause(), "downloaded shard rejected"));
  }
  // Whatever failed, nothing of it is in the tier: no file, no partial file (the CRC case keeps
  // the one fetched with the right CRC).
  for (const auto& name : tier_files(tier_dir.path().string())) CHECK_FALSE(contains(name, ".partial."));
  CHECK(tier_files(tier_dir.path().string()).size() == (tier.stats().misses == 1 ? 1u : 0u));
}

TEST_CASE("fault server: a refused connection and a non-http URL are errors naming the URL") {
  temp_dir tier_dir;
  io::node_tier tier(tier_dir.path().string());
  const std::string refused = "http://127.0.0.1:" + std::to_string(sluice_remote_test::free_port()) + "/x.sluice";
  try {
    (void)io::fetch_shard(tier, refused, {.http = quick()});
    FAIL("no error");
  } catch (const io::http_error& e) {
    CHECK(e.status() == 0);
    CHECK(e.attempts() == 4);
    CHECK(contains(e.what(), refused));
    CHECK(contains(e.what(), "gave up after 4 attempts"));
  }
  try {
    (void)io::fetch_shard(tier, "ftp://127.0.0.1/x.sluice", {.http = quick()});
    FAIL("no error");
  } catch (const io::http_error& e) {
    CHECK(contains(e.what(), "ftp://127.0.0.1/x.sluice"));
    CHECK(e.attempts() == 0);
  }
  CHECK(tier_files(tier_dir.path().string()).empty());
}

namespace {
// A fill that writes `n` bytes of `v`.
io::node_tier::fill_fn bytes_of(std::size_t n, char v) {
  return [n, v](int fd, const std::string&) {
    std::string s(n, v);
    REQUIRE(::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size()));
  };
}
}  // namespace

TEST_CASE("tier: LRU eviction keeps the budget and never evicts a file in use") {
  temp_dir d;
  io::node_tier tier(d.path().string(), {.budget_bytes = 3000});
  { auto a = tier.acquire("a", bytes_of(1000, 'a')); }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  { auto b = tier.acquire("b", bytes_of(1000, 'b')); }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  { auto c = tier.acquire("c", bytes_of(1000, 'c')); }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  { auto a = tier.acquire("a", bytes_of(1000, 'X')); CHECK(a.was_hit()); }  // a is now the most recent
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // d does not fit: b, the least recently used, goes.
  { auto dd = tier.acquire("d", bytes_of(1000, 'd')); }
  CHECK(tier.contains("a"));
  CHECK_FALSE(tier.contains("b"));
  CHECK(tier.contains("c"));
  CHECK(tier.contains("d"));
  CHECK(tier.stats().files_evicted == 1);
  CHECK(tier.stats().bytes_evicted == 1000);
  CHECK(tier.bytes_on_disk() == 3000);
  // c is least recent, but held: e evicts a instead.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto held = tier.acquire("c", bytes_of(1000, 'X'));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  { auto dd = tier.acquire("d", bytes_of(1000, 'X')); }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Order of use now: a (oldest), c (held), d. e evicts a.
  { auto e = tier.acquire("e", bytes_of(1000, 'e')); }
  CHECK_FALSE(tier.contains("a"));
  CHECK(tier.contains("c"));
  // Everything else held: a file larger than the budget is still served (over budget, counted).
  auto hd = tier.acquire("d", bytes_of(1, 'X'));
  auto he = tier.acquire("e", bytes_of(1, 'X'));
  auto big = tier.acquire("f", bytes_of(2500, 'f'));
  CHECK(big.size() == 2500);
  CHECK(tier.contains("c"));
  CHECK(tier.stats().over_budget >= 1);
  CHECK(tier.stats().hits == 5);
  CHECK(tier.stats().misses == 6);
  CHECK(sluice_test::read_file(held.path()).size() == 1000);
}

// Readers keep their files for a whole run (remote_shards holds every shard it opened), as the
// ranks of a node do. Several users that find a file absent at once: one fills it, the others must
// get it as a hit while the first still holds it, not wait for it to be released (which here, as
// in a job whose ranks meet at a barrier, would be never: each holder waits for the others).
TEST_CASE("tier: users that find a file absent at once all get it while each keeps it") {
  temp_dir d;
  io::node_tier tier(d.path().string());
  constexpr int users = 4, rounds = 12;
  int stuck_rounds = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string name = "s" + std::to_string(round);
    std::atomic<int> ready{0}, holding{0};
    std::atomic<bool> stuck{false};
    std::vector<std::thread> ts;
    for (int u = 0; u < users; ++u)
      ts.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < users) std::this_thread::yield();  // start together
        auto f = tier.acquire(name, [](int fd, const std::string&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          if (::write(fd, "0123456789", 10) != 10) throw std::runtime_error("cannot write the test file");
        });
        holding.fetch_add(1);
        // Keep the file until every user has it (3 s at most: then this round failed).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
        while (holding.load() < users && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (holding.load() < users) stuck.store(true);
      });
    for (auto& t : ts) t.join();
    stuck_rounds += stuck.load() ? 1 : 0;
  }
  CHECK(stuck_rounds == 0);
  CHECK(tier.stats().misses == rounds);
  CHECK(tier.stats().hits == rounds * (users - 1));
}

TEST_CASE("tier: a process that dies mid-download does not wedge the others") {
  temp_dir d;
  const pid_t k = ::fork();
  REQUIRE(k >= 0);
  if (k == 0) {
    io::node_tier tier(d.path().string());
    (void)tier.acquire("s", [](int fd, const std::string&) {
      REQUIRE(::write(fd, "half", 4) == 4);
      std::_Exit(9);  // killed mid-download, holding the lock, leaving a partial file
    });
    std::_Exit(0);
  }
  int st = 0;
  REQUIRE(::waitpid(k, &st, 0) == k);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 9);
  bool partial = false;
  for (const auto& n : tier_files(d.path().string())) partial |= contains(n, ".partial.");
  REQUIRE(partial);  // what the dead process left
  io::node_tier tier(d.path().string());
  auto f = tier.acquire("s", bytes_of(10, 's'));  // would block forever if its lock were still held
  CHECK_FALSE(f.was_hit());
  CHECK(sluice_test::read_file(f.path()).size() == 10);
  CHECK(tier_files(d.path().string()) == std::vector<std::string>{"s"});
}

TEST_CASE("tier: a full file system evicts first, then is reported naming the tier") {
  temp_dir d;
  io::node_tier tier(d.path().string(), {.budget_bytes = 1 << 20});
  { auto a = tier.acquire("a", bytes_of(100, 'a')); }
  int calls = 0;
  auto enospc = [&](int, const std::string& tmp) {
    ++calls;
    throw io_error(tmp, "cannot write", ENOSPC);
  };
  try {
    (void)tier.acquire("b", enospc);
    FAIL("no error");
  } catch (const io_error& e) {
    CHECK(e.error_number() == ENOSPC);
    CHECK(e.path() == d.path().string());
    CHECK(contains(e.what(), "file system is full"));
    CHECK(contains(e.what(), "'b'"));
  }
  CHECK(calls == 2);                 // tried again after making room
  CHECK_FALSE(tier.contains("a"));   // which evicted what was not in use
  CHECK(tier_files(d.path().string()).empty());
}

TEST_CASE("nginx: a tier on a really full file system evicts, then reports ENOSPC naming the tier") {
  // A 1 MiB tmpfs in a private mount namespace (needs CAP_SYS_ADMIN: skipped without it), a
  // 1.7 MB shard to fetch into it. Run in a child process so the mount never leaks.
  temp_dir serve, mnt;
  write_shard(serve.file("big.sluice"), 400, 4096);
  write_shard(serve.file("small.sluice"), 10, 4096);
  nginx_server web(serve.path().string());
  const pid_t k = ::fork();
  REQUIRE(k >= 0);
  if (k == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", mnt.path().c_str(), "tmpfs", 0, "size=1m") != 0)
      std::_Exit(77);
    try {
      io::node_tier tier(mnt.file("tier"), {.budget_bytes = 1ull << 30});
      { auto f = io::fetch_shard(tier, web.url("small.sluice"), {.http = quick()}); }
      try {
        (void)io::fetch_shard(tier, web.url("big.sluice"), {.http = quick()});
        std::_Exit(1);
      } catch (const io_error& e) {
        sluice_test::write_file(serve.file("message.txt"), std::string(e.what()));
        if (e.error_number() != ENOSPC) std::_Exit(2);
        if (e.path() != tier.dir()) std::_Exit(3);
        if (!contains(e.what(), "file system is full")) std::_Exit(4);
      }
      if (tier.contains(io::tier_name_for(web.url("small.sluice")))) std::_Exit(5);  // evicted first
      if (tier.stats().files_evicted != 1) std::_Exit(6);
      for (const auto& n : tier_files(tier.dir()))
        if (contains(n, ".partial.")) std::_Exit(7);
      std::_Exit(0);
    } catch (...) {
      std::_Exit(8);
    }
  }
  int st = 0;
  REQUIRE(::waitpid(k, &st, 0) == k);
  REQUIRE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) sluice_test::skip("cannot mount a tmpfs in a private mount namespace (needs CAP_SYS_ADMIN)");
  CHECK(WEXITSTATUS(st) == 0);
  const auto m = sluice_test::read_file(serve.file("message.txt"));
  const std::string message(reinterpret_cast<const char*>(m.data()), m.size());
  INFO(message);
  CHECK(contains(message, mnt.file("tier")));
  CHECK(contains(message, io::tier_name_for(web.url("big.sluice"))));
  CHECK(contains(message, "No space left on device"));
}

TEST_CASE("tier: names that are not plain file names are refused") {
  temp_dir d;
  io::node_tier tier(d.path().string());
  for (const char* bad : {"", "../x", "a/b", ".hidden", "x.partial.1"})
    CHECK_THROWS_AS((void)tier.acquire(bad, bytes_of(1, 'x')), usage_error);
  CHECK(io::tier_name_for("http://h/p/train-001.sluice") != io::tier_name_for("http://g/p/train-001.sluice"));
  CHECK(io::tier_name_for("http://h/p/train-001.sluice").starts_with("train-001.sluice-"));
  CHECK(io::tier_name_for("http://h/..").find('/') == std::string::npos);
}

// ---- s3:// URLs: SigV4-signed GETs against moto's S3 server (signatures checked) ----

namespace {
// Sets an environment variable for the rest of the case (each ctest case is its own process).
void set_env(const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); }
void clear_aws_env() {
  for (const char* k : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE",
                        "AWS_CONFIG_FILE"})
    ::unsetenv(k);
}
}  // namespace

TEST_CASE("s3: URLs resolve from the AWS settings: endpoint, region, keys from the environment or a profile") {
  clear_aws_env();
  temp_dir d;
  set_env("HOME", d.path().string());  // no ~/.aws of the machine's user
  auto t = io::resolve_s3("s3://my-bucket/train/part 1+x.mds");
  CHECK(t.http_url == "https://my-bucket.s3.us-east-1.amazonaws.com/train/part%201%2Bx.mds");
  CHECK_FALSE(t.signed_request());
  set_env("AWS_REGION", "eu-west-3");
  set_env("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/");
  set_env("AWS_ACCESS_KEY_ID", "AK");
  set_env("AWS_SECRET_ACCESS_KEY", "SK");
  t = io::resolve_s3("s3://b/k.bin");
  CHECK(t.http_url == "http://127.0.0.1:9000/b/k.bin");
  CHECK(t.region == "eu-west-3");
  CHECK(t.access_key == "AK");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("AWS_REGION");
  sluice_test::write_file(d.file("creds"), std::string("[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
                                                       "[train]\n# a comment\naws_access_key_id=T\naws_secret_access_key = TS\naws_session_token = TOK\n"));
  sluice_test::write_file(d.file("config"), std::string("[profile train]\nregion = ap-south-1\n"));
  set_env("AWS_SHARED_CREDENTIALS_FILE", d.file("creds"));
  set_env("AWS_CONFIG_FILE", d.file("config"));
  t = io::resolve_s3("s3://b/k");
  CHECK(t.access_key == "D");
  CHECK(t.region == "us-east-1");
  set_env("AWS_PROFILE", "train");
  t = io::resolve_s3("s3://b/k");
  CHECK(t.access_key == "T");
  CHECK(t.secret_key == "TS");
  CHECK(t.session_token == "TOK");
  CHECK(t.region == "ap-south-1");
  for (const char* bad : {"s3://bucket", "s3://bucket/", "s3:///key"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(io::resolve_s3(bad), io::http_error);
  }
}

TEST_CASE("s3: an MDS dataset and a sluice shard from moto, signed with SigV4, equal to the local files") {
  clear_aws_env();
  temp_dir up, tier_dir;
  const std::string fixture = std::string(SLUICE_TEST_DATA_DIR) + "/mds/plain";
  std::filesystem::copy(fixture, up.path() / "mds");
  write_shard(up.file("one.sluice"), 50, 40, 3);
  sluice_remote_test::moto_server s3("data", "sets", up.path().string());
  set_env("AWS_ENDPOINT_URL", s3.endpoint());
  set_env("AWS_ACCESS_KEY_ID", s3.access_key());
  set_env("AWS_SECRET_ACCESS_KEY", s3.secret_key());
  io::node_tier tier(tier_dir.path().string());
  using mds = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  auto data = io::remote_mds<mds>("s3://data/sets/mds", tier, {.fetch = {.http = quick()}});
  io::mds_dataset<mds> local(fixture);
  REQUIRE(data.size() == 10);
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto a = data.fields(i).bytes_of<"image">(), b = local.fields(i).bytes_of<"image">();
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
  }
  CHECK(tier.stats().misses == 5);
  io::remote_shards shards({"s3://data/sets/one.sluice"}, tier, {.fetch = {.http = quick()}});
  io::shard_reader want(up.file("one.sluice"));
  REQUIRE(shards.size() == 50);
  CHECK(std::memcmp(shards.record(49).data(), want.record(49).data(), 40) == 0);

  // A wrong secret: 403 with S3's code, named, not retried. A missing key: 404 NoSuchKey.
  set_env("AWS_SECRET_ACCESS_KEY", s3.secret_key() + "x");
  temp_dir other;
  io::node_tier tier2(other.path().string());
  try {
    (void)io::fetch_shard(tier2, "s3://data/sets/one.sluice", {.http = quick()});
    FAIL("no error");
  } catch (const io::http_error& e) {
    CHECK(e.status() == 403);
    CHECK(e.attempts() == 1);
    CHECK(contains(e.what(), "s3://data/sets/one.sluice"));
    CHECK(contains(e.what(), "SignatureDoesNotMatch"));
  }
  set_env("AWS_SECRET_ACCESS_KEY", s3.secret_key());
  try {
    (void)io::fetch_shard(tier2, "s3://data/sets/none.sluice", {.http = quick()});
    FAIL("no error");
  } catch (const io::http_error& e) {
    CHECK(e.status() == 404);
    CHECK(contains(e.what(), "NoSuchKey"));
  }
  // Keys from a credentials file's profile work the same.
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  sluice_test::write_file(other.file("creds"), "[ci]\naws_access_key_id = " + s3.access_key() + "\naws_secret_access_key = " +
                                                   s3.secret_key() + "\n");
  set_env("AWS_SHARED_CREDENTIALS_FILE", other.file("creds"));
  set_env("AWS_PROFILE", "ci");
  io::tier_file f = io::fetch_shard(tier2, "s3://data/sets/one.sluice", {.http = quick()});
  CHECK(f.size() == std::filesystem::file_size(up.file("one.sluice")));
}
