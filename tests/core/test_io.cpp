#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include "sluice/io/crc32c.hpp"
#include "sluice/io/fixed_records.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/shard.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {
using sluice_test::as_bytes;

std::string write_shard(const temp_dir& d, std::size_t n, bool checksums = true) {
  std::string p = d.file("s.sluice");
  io::shard_writer w(p, {.checksums = checksums});
  for (std::size_t i = 0; i < n; ++i) {
    auto rec = sluice_test::random_bytes(10 + i % 50, i);
    w.add(rec, static_cast<std::int64_t>(i % 10));
  }
  w.finish();
  return p;
}

template <class F>
std::string format_error_text(F&& f) {
  try {
    f();
  } catch (const format_error& e) {
    return e.what();
  }
  return "no format_error";
}
}  // namespace

TEST_CASE("crc32c: known vector, both paths agree, chaining") {
  CHECK(io::crc32c(as_bytes("123456789")) == 0xe3069283u);
  CHECK(io::crc32c_portable(as_bytes("123456789")) == 0xe3069283u);
  auto data = sluice_test::random_bytes(10007, 1);
  CHECK(io::crc32c(data) == io::crc32c_portable(data));
  std::span<const std::byte> all(data);
  CHECK(io::crc32c(all.subspan(5000), io::crc32c(all.first(5000))) == io::crc32c(all));
  CHECK(io::crc32c({}) == 0u);
}

TEST_CASE("mapped file: contents, empty file, missing file") {
  temp_dir d;
  sluice_test::write_file(d.file("a"), std::string("hello"));
  io::mapped_file f(d.file("a"), {.advice = io::access::sequential, .populate = io::populate_mode::now});
  CHECK(f.size() == 5);
  CHECK(std::memcmp(f.data(), "hello", 5) == 0);
  CHECK(f.advise(io::access::random));
  sluice_test::write_file(d.file("e"), std::string());
  io::mapped_file e(d.file("e"));
  CHECK(e.empty());
  try {
    io::mapped_file m(d.file("missing"));
    FAIL("no exception");
  } catch (const io_error& err) {
    CHECK(std::string(err.what()).find("missing") != std::string::npos);
  }
}

namespace {
// Minor page faults this thread takes reading one byte of every page of f.
long faults_touching(const io::mapped_file& f) {
  rusage a{}, b{};
  ::getrusage(RUSAGE_THREAD, &a);
  unsigned sum = 0;
  for (std::size_t i = 0; i < f.size(); i += 4096) sum += static_cast<unsigned>(*(reinterpret_cast<const volatile unsigned char*>(f.data()) + i));
  ::getrusage(RUSAGE_THREAD, &b);
  CHECK(sum != 1);  // keeps the reads
  return b.ru_minflt - a.ru_minflt;
}
}  // namespace

TEST_CASE("mapped file: the default warms the mapping in the background, so reading it faults less") {
  temp_dir d;
  const std::size_t n = std::size_t{16} << 20;  // 4096 pages
  sluice_test::write_file(d.file("w"), std::string(n, 'x'));
  { io::mapped_file once(d.file("w"), {.populate = io::populate_mode::now}); }  // in the page cache now
  const auto before = io::page_warm_stats();
  io::mapped_file cold(d.file("w"), {.populate = io::populate_mode::none});
  CHECK(io::page_warm_stats().files_queued == before.files_queued);  // none: not queued
  io::mapped_file warm(d.file("w"));  // the default: background
  if (!io::page_warm_stats().supported) {
    MESSAGE("the kernel lacks MADV_POPULATE_READ: nothing to check");
    return;
  }
  REQUIRE(io::page_warm_stats().files_queued == before.files_queued + 1);
  for (int i = 0; i < 1000 && io::page_warm_stats().files_done == before.files_done; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto after = io::page_warm_stats();
  REQUIRE(after.files_done == before.files_done + 1);
  CHECK(after.bytes_populated >= before.bytes_populated + n);
  // Its thread carries a name (what top -H and perf show).
  bool named = false;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(t.path() / "comm");
    std::string name;
    std::getline(comm, name);
    named = named || name == "sluice-pagewarm";
  }
  CHECK(named);
  const long cold_faults = faults_touching(cold), warm_faults = faults_touching(warm);
  MESSAGE("minor faults reading every page: not warmed " << cold_faults << ", warmed " << warm_faults);
  // Warmed, none of the file's pages fault (a sanitizer's shadow memory faults alike on both
  // sides). How many an unwarmed mapping takes depends on the kernel: one per 16 pages with
  // fault-around, one per large folio on ext4 since Linux 6.x (8 for these 4096 pages here).
  CHECK(warm_faults <= cold_faults);
}

TEST_CASE("mapped file: a mapping closed while it is being warmed cancels its job") {
  temp_dir d;
  sluice_test::write_file(d.file("big"), std::string(std::size_t{64} << 20, 'y'));
  const auto before = io::page_warm_stats();
  for (int i = 0; i < 20; ++i) {
    io::mapped_file f(d.file("big"));
    if (i % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(f.size() == (std::size_t{64} << 20));
  }  // unmapped at once: the warmer must let go of it first (ASan/TSan see a use after unmap)
  const auto after = io::page_warm_stats();
  if (!after.supported) return;
  CHECK(after.files_queued - before.files_queued == 20);
  // Every job ended one way or another; none is left behind.
  CHECK(after.files_done + after.files_cancelled + after.errors - (before.files_done + before.files_cancelled + before.errors) == 20);
  CHECK(after.files_cancelled > before.files_cancelled);
}

TEST_CASE("memory available: a memory cgroup's limit, v1 or v2, caps what the warmer and access::automatic count on") {
  temp_dir d;
  const std::string root = d.file("cg");
  std::filesystem::create_directories(root + "/job/a");
  std::filesystem::create_directories(root + "/memory/job/b");
  sluice_test::write_file(root + "/job/a/memory.max", "536870912\n");          // v2: 512 MiB
  sluice_test::write_file(root + "/job/a/memory.current", "134217728\n");      // 128 MiB used
  sluice_test::write_file(root + "/memory/job/b/memory.limit_in_bytes", "1073741824\n");  // v1: 1 GiB
  sluice_test::write_file(root + "/memory/job/b/memory.usage_in_bytes", "1073741825\n");  // over it
  using io::detail::cgroup_headroom;
  CHECK(cgroup_headroom("0::/job/a\n", root) == std::uint64_t{384} << 20);
  CHECK(cgroup_headroom("12:cpu,cpuacct:/x\n7:memory:/job/b\n", root) == 0u);    // over: no room
  CHECK(cgroup_headroom("7:memory:/job/b\n0::/job/a\n", root) == 0u);             // both: the least
  sluice_test::write_file(root + "/job/a/memory.max", "max\n");
  CHECK(!cgroup_headroom("0::/job/a\n", root).has_value());                        // no limit
  sluice_test::write_file(root + "/memory/job/b/memory.limit_in_bytes", "9223372036854771712\n");
  CHECK(!cgroup_headroom("7:memory:/job/b\n", root).has_value());                  // v1's "unlimited"
  CHECK(!cgroup_headroom("0::/nowhere\n", root).has_value());                      // unreadable
  CHECK(!cgroup_headroom("garbage", root).has_value());
  // The choice access::automatic makes from it: read-around while the file fits in half of it.
  CHECK(io::automatic_access(100, 200) == io::access::normal);
  CHECK(io::automatic_access(101, 200) == io::access::random);
  CHECK(io::automatic_access(1, 0) == io::access::random);  // unknown memory: no read-around
  CHECK(io::detail::memory_available() > 0);
}

TEST_CASE("mapped file: a FIFO is refused as not a regular file, without waiting for a writer") {
  temp_dir d;
  REQUIRE(::mkfifo(d.file("fifo").c_str(), 0600) == 0);
  try {
    io::mapped_file m(d.file("fifo"));
    FAIL("no exception");
  } catch (const format_error& err) {
    CHECK(std::string(err.what()).find("not a regular file") != std::string::npos);
  }
}

TEST_CASE("shard: round trip of records and labels, 64-byte aligned") {
  temp_dir d;
  auto p = write_shard(d, 300);
  io::shard_reader r(p);
  REQUIRE(r.size() == 300);
  CHECK(r.has_checksums());
  for (std::size_t i = 0; i < 300; ++i) {
    auto want = sluice_test::random_bytes(10 + i % 50, i);
    auto got = r.record(i);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
    CHECK(r.label(i) == static_cast<std::int64_t>(i % 10));
    CHECK(reinterpret_cast<std::uintptr_t>(got.data()) % 64 == 0);
  }
  CHECK(r.verify_all() == 300);
  CHECK_FALSE(std::filesystem::exists(p + ".partial"));
}

TEST_CASE("shard: the writer writes in large pieces, so a fresh shard maps with few page faults") {
  // Written 4 KiB at a time (what glibc's stdio did for the writer before it had its own buffer),
  // a file sits in the page cache in small folios: mapping it faults once per fault-around window.
  // Written 8 MiB at a time (the default), in 2 MiB folios where the kernel and the file system
  // make them (Linux 6.x, ext4/xfs): a fault per folio. The writes are what the writer decides
  // (counted by the kernel: /proc/self/io's syscw); the faults, which also depend on the kernel,
  // the file system and free memory, are only reported.
  auto write_calls = [] {
    std::ifstream io("/proc/self/io");
    std::string key;
    std::uint64_t value = 0;
    while (io >> key >> value)
      if (key == "syscw:") return std::optional<std::uint64_t>(value);
    return std::optional<std::uint64_t>();
  };
  if (!write_calls()) sluice_test::skip("no /proc/self/io (a kernel without task I/O accounting)");
  temp_dir d;
  const auto record = sluice_test::random_bytes(12288, 3);
  auto write = [&](const std::string& name, std::size_t buffer) {
    const std::uint64_t before = *write_calls();
    io::shard_writer w(d.file(name), {.buffer_bytes = buffer});
    for (int i = 0; i < 2048; ++i) w.add(record, i % 10);  // 24 MiB
    w.finish();
    return *write_calls() - before;
  };
  const std::uint64_t small_writes = write("small.sluice", 4096);
  const std::uint64_t large_writes = write("large.sluice", io::shard_writer_options{}.buffer_bytes);
  CHECK(small_writes >= 2048);  // at least one a record
  CHECK(large_writes <= 16);    // 24 MiB in 8 MiB pieces, then the index and the header
  io::mapped_file s(d.file("small.sluice"), {.populate = io::populate_mode::none});
  io::mapped_file l(d.file("large.sluice"), {.populate = io::populate_mode::none});
  const long small_faults = faults_touching(s), large_faults = faults_touching(l);
  REQUIRE(s.size() == l.size());
  CHECK(std::memcmp(s.data(), l.data(), s.size()) == 0);  // the same bytes either way
  MESSAGE("a 24 MiB shard: written in " << small_writes << " writes, " << small_faults
          << " minor faults to read it mapped; with the default buffer " << large_writes << " writes, "
          << large_faults << " faults");
}

TEST_CASE("shard: an unfinished writer leaves no file behind") {
  temp_dir d;
  {
    io::shard_writer w(d.file("x.sluice"));
    w.add(sluice_test::random_bytes(10, 1), 1);
  }
  CHECK_FALSE(std::filesystem::exists(d.file("x.sluice")));
  CHECK_FALSE(std::filesystem::exists(d.file("x.sluice.partial")));
}

TEST_CASE("shard: bad files give format_error naming file, place and cause") {
  temp_dir d;
  auto p = write_shard(d, 20);
  const auto good = sluice_test::read_file(p);
  auto bad = d.file("bad.sluice");
  auto with = [&](std::vector<std::byte> bytes) {
    sluice_test::write_file(bad, bytes);
    return format_error_text([&] { io::shard_reader r(bad); (void)r.verify_all(); });
  };
  SUBCASE("empty") { CHECK(with({}).find("shorter than the 64-byte shard header") != std::string::npos); }
  SUBCASE("wrong magic") {
    auto b = good;
    b[0] = std::byte{'X'};
    auto t = with(b);
    CHECK(t.find("wrong magic") != std::string::npos);
    CHECK(t.find("bad.sluice") != std::string::npos);
  }
  SUBCASE("header checksum") {
    auto b = good;
    b[16] ^= std::byte{1};  // record count
    CHECK(with(b).find("header checksum mismatch") != std::string::npos);
  }
  SUBCASE("truncated") {
    auto b = good;
    b.resize(b.size() - 30);
    CHECK(with(b).find("truncated") != std::string::npos);
  }
  SUBCASE("record checksum") {
    auto b = good;
    b[64 + 3] ^= std::byte{0xff};  // first record's payload
    auto t = with(b);
    CHECK(t.find("record 0") != std::string::npos);
    CHECK(t.find("record checksum mismatch") != std::string::npos);
  }
  SUBCASE("index checksum") {
    auto b = good;
    b[b.size() - 10] ^= std::byte{1};
    CHECK(with(b).find("index checksum mismatch") != std::string::npos);
  }
  SUBCASE("random garbage") {
    for (std::uint64_t seed = 0; seed < 50; ++seed) {
      auto t = with(sluice_test::random_bytes(200 + seed * 7, seed));
      CHECK(t.find("bad file") != std::string::npos);
    }
  }
  SUBCASE("a huge claimed count is refused before any allocation") {
    auto b = good;
    // Forge a header with count = 2^60 and a valid header CRC.
    std::uint64_t huge = 1ull << 60;
    std::memcpy(b.data() + 16, &huge, 8);
    std::uint32_t c = io::crc32c(std::span<const std::byte>(b.data(), 40));
    std::memcpy(b.data() + 40, &c, 4);
    CHECK(with(b).find("index would run past the end") != std::string::npos);
  }
}

TEST_CASE("shard: version 1 without metadata, version 2 with class names round-trips") {
  temp_dir d;
  auto p1 = write_shard(d, 10);
  {
    io::shard_reader r(p1);
    CHECK(r.version() == 1);
    CHECK(r.class_names().empty());
    CHECK(r.size() == 10);
    // A version-1 header leaves bytes 44..64 zero, exactly as shards written before version 2.
    auto b = sluice_test::read_file(p1);
    for (std::size_t i = 44; i < 64; ++i) CHECK(b[i] == std::byte{0});
  }
  const std::vector<std::string> names = {"cat", "dog", "", "zebra crossing", std::string(300, 'x')};
  std::string p2 = d.file("n.sluice");
  {
    io::shard_writer w(p2);
    w.set_class_names(names);
    for (std::size_t i = 0; i < 40; ++i) w.add(sluice_test::random_bytes(5 + i, i), static_cast<std::int64_t>(i % 5));
    w.finish();
  }
  io::shard_reader r(p2);
  CHECK(r.version() == 2);
  CHECK(r.class_names() == names);
  REQUIRE(r.size() == 40);
  for (std::size_t i = 0; i < 40; ++i) {
    auto want = sluice_test::random_bytes(5 + i, i);
    REQUIRE(r.record(i).size() == want.size());
    CHECK(std::memcmp(r.record(i).data(), want.data(), want.size()) == 0);
    CHECK(r.label(i) == static_cast<std::int64_t>(i % 5));
  }
  CHECK(r.verify_all() == 40);

  const auto good = sluice_test::read_file(p2);
  std::uint64_t meta_off = 0;
  std::memcpy(&meta_off, good.data() + 48, 8);
  auto bad = d.file("bad.sluice");
  auto with = [&](std::vector<std::byte> bytes) {
    sluice_test::write_file(bad, bytes);
    return format_error_text([&] { io::shard_reader x(bad); });
  };
  SUBCASE("a flipped class-name byte fails the metadata checksum") {
    auto b = good;
    b[meta_off + 13] ^= std::byte{1};
    CHECK(with(b).find("metadata checksum mismatch") != std::string::npos);
  }
  SUBCASE("a flipped metadata offset fails the version-2 header checksum") {
    auto b = good;
    b[48] ^= std::byte{1};
    CHECK(with(b).find("header checksum mismatch (version-2 fields)") != std::string::npos);
  }
  SUBCASE("any single flipped byte gives a format_error or a shard that still checks out") {
    for (std::size_t at = 0; at < good.size(); ++at) {
      auto b = good;
      b[at] ^= std::byte{0x5a};
      sluice_test::write_file(bad, b);
      try {
        io::shard_reader x(bad);
        (void)x.verify_all();
        CHECK(x.class_names().size() == names.size());
      } catch (const format_error&) {
      }
    }
  }
  SUBCASE("an unknown version is refused") {
    auto b = good;
    b[8] = std::byte{4};
    CHECK(with(b).find("shard version 4 is not supported (this build reads 1, 2 and 3)") != std::string::npos);
  }
}

TEST_CASE("shard: seal() leaves a complete partial file, commit() names it, no commit removes it") {
  temp_dir d;
  const auto p = d.file("s.sluice");
  {
    io::shard_writer w(p);
    w.add(sluice_test::random_bytes(100, 1), 3);
    w.seal();
    CHECK(w.partial_path() == p + ".partial");
    CHECK_FALSE(std::filesystem::exists(p));
    io::shard_reader r(w.partial_path());
    CHECK(r.size() == 1);
    CHECK(r.label(0) == 3);
  }  // destroyed without commit: a check failed
  CHECK_FALSE(std::filesystem::exists(p));
  CHECK_FALSE(std::filesystem::exists(p + ".partial"));
  {
    io::shard_writer w(p);
    w.add(sluice_test::random_bytes(100, 1), 3);
    w.seal();
    w.commit();
  }
  CHECK(std::filesystem::exists(p));
  CHECK_FALSE(std::filesystem::exists(p + ".partial"));
  SUBCASE("a failed rename removes the partial file and names both paths") {
    std::filesystem::create_directory(d.file("dir.sluice"));
    sluice_test::write_file(d.file("dir.sluice/x"), std::string("x"));  // rename onto a non-empty directory fails
    std::string what;
    {
      io::shard_writer w(d.file("dir.sluice"));
      w.add(sluice_test::random_bytes(10, 2), 0);
      w.seal();
      try {
        w.commit();
      } catch (const io_error& e) {
        what = e.what();
      }
    }
    CHECK(what.find("dir.sluice.partial") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(d.file("dir.sluice.partial")));
  }
}

TEST_CASE("shard: an index overwritten in place while mapped cannot send record() outside the file") {
  temp_dir d;
  auto p = write_shard(d, 64);
  io::shard_reader r(p, {.verify = false});
  const auto before = r.labels();
  {
    // Overwrite everything after the header in place (same inode, same size): offsets become huge.
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0, std::ios::end);
    const auto n = static_cast<std::size_t>(f.tellp());
    std::vector<char> junk(n - 64, '\xff');
    f.seekp(64);
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const auto base = r.file().data();
  for (std::size_t i = 0; i < r.size(); ++i) {
    auto rec = r.record(i);  // reads the checked in-memory index: stays inside the mapping
    CHECK(rec.data() >= base + 64);
    CHECK(rec.data() + rec.size() <= base + r.file().size());
  }
  CHECK(r.labels() == before);
  CHECK_THROWS_AS(io::shard_reader{p}, format_error);  // a fresh open sees the damage
}

TEST_CASE("fixed records: views, labels of three widths, size checks") {
  temp_dir d;
  auto data = sluice_test::random_bytes(12 * 100, 3);
  sluice_test::write_file(d.file("x.u8"), data);
  std::vector<std::byte> l64(100 * 8), l8(100);
  for (int i = 0; i < 100; ++i) {
    std::int64_t v = i * 3 - 7;
    std::memcpy(l64.data() + i * 8, &v, 8);
    l8[i] = static_cast<std::byte>(i);
  }
  sluice_test::write_file(d.file("y.i64"), l64);
  sluice_test::write_file(d.file("y.u8"), l8);
  io::fixed_records r(d.file("x.u8"), {.record_bytes = 12, .labels_path = d.file("y.i64")});
  CHECK(r.size() == 100);
  CHECK(std::memcmp(r.record(42).data(), data.data() + 42 * 12, 12) == 0);
  CHECK(r.label(5) == 8);
  io::fixed_records r8(d.file("x.u8"), {.record_bytes = 12, .labels_path = d.file("y.u8"), .label_type = io::label_type::u8});
  CHECK(r8.label(99) == 99);
  auto t = format_error_text([&] { io::fixed_records bad(d.file("x.u8"), {.record_bytes = 11}); });
  CHECK(t.find("not a whole number of 11-byte records") != std::string::npos);
  t = format_error_text([&] { io::fixed_records bad(d.file("x.u8"), {.record_bytes = 12, .labels_path = d.file("y.u8")}); });
  CHECK(t.find("labels file holds 12 labels") != std::string::npos);
  // uint8 labels where int64 ones are read: the type named, not only the count.
  CHECK(t.find("labels are raw little-endian int64, 8 bytes each, and this file has 1 a record") != std::string::npos);
  // numpy.save's labels: the header named, never its bytes counted as labels.
  std::vector<std::byte> npy = io::npy_header_bytes("<i8", {100});
  npy.insert(npy.end(), l64.begin(), l64.end());
  sluice_test::write_file(d.file("y.npy"), npy);
  t = format_error_text([&] { io::fixed_records bad(d.file("x.u8"), {.record_bytes = 12, .labels_path = d.file("y.npy")}); });
  CHECK(t.find("an .npy file (numpy.save; shape (100,)), not raw labels") != std::string::npos);
  CHECK(t.find("numpy.load(FILE).astype(numpy.int64).tofile(OUT)") != std::string::npos);
}
