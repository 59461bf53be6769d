// Faults in the files the record readers open: a file replaced under its saved index (same size,
// same mtime), a payload corrupted after its index was saved, a TFRecord damaged in one record
// read with bad_records::defer through the loader's skip and raise modes, labels and headers that
// must be refused, and paths that are not regular files (a FIFO must fail at once, not block).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "sluice/io/idx.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using sluice_test::expect_format_error;

using namespace sluice;
using sluice_test::random_bytes;
using sluice_test::temp_dir;
using sluice_test::write_file;

namespace {

using bytes = std::vector<std::byte>;

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}


template <class F>
std::string io_error_text(F&& f) {
  try {
    f();
  } catch (const io_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not an io_error> ") + e.what();
  }
  return "<no error>";
}

// Each record i of `n` is `size` bytes of random_bytes(size, seed + i).
bytes tfrecords(std::size_t n, std::size_t size, std::uint64_t seed) {
  bytes img;
  for (std::size_t i = 0; i < n; ++i) io::append_tfrecord(img, random_bytes(size, seed + i));
  return img;
}

// Sets `path`'s atime and mtime to exactly `t` (nanoseconds included).
void set_times(const std::string& path, const struct timespec& t) {
  struct timespec ts[2] = {t, t};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), ts, 0) == 0);
}
struct timespec mtime_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mtim;
}

// Writes `data` over the file in place (same inode), without truncating it first.
void overwrite_in_place(const std::string& path, const bytes& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()));
  ::close(fd);
}

// A guard that turns a hang into a failure: SIGALRM's default action ends the process.
struct hang_guard {
  explicit hang_guard(unsigned seconds) { ::alarm(seconds); }
  ~hang_guard() { ::alarm(0); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. A saved index is trusted only for the very file it was built from.

TEST_CASE("saved index: a same-size replacement with the same mtime is rescanned, not served the old table") {
  temp_dir dir;
  const auto path = dir.file("r.tfrecord");
  const bytes a = tfrecords(2, 100, 1);  // 2 x (12 + 100 + 4) = 232 bytes
  const bytes b = tfrecords(1, 216, 7);  // 1 x (12 + 216 + 4) = 232 bytes, other boundaries
  REQUIRE(a.size() == b.size());
  write_file(path, a);
  const auto t = mtime_of(path);
  { io::tfrecord_reader r(path); REQUIRE(r.size() == 2); }
  REQUIRE(io::detail::load_index(path, "tfrecord:crc").has_value());

  SUBCASE("rewritten in place (same inode), mtime restored") {
    overwrite_in_place(path, b);
    set_times(path, t);
  }
  SUBCASE("replaced by rename (new inode), mtime restored") {
    write_file(path + ".new", b);
    set_times(path + ".new", t);
    std::filesystem::rename(path + ".new", path);
  }
  {
    struct timespec now = mtime_of(path);
    REQUIRE(now.tv_sec == t.tv_sec);
    REQUIRE(now.tv_nsec == t.tv_nsec);
    REQUIRE(std::filesystem::file_size(path) == a.size());
  }
  CHECK_FALSE(io::detail::load_index(path, "tfrecord:crc").has_value());
  io::tfrecord_reader r(path);
  REQUIRE(r.size() == 1);
  CHECK(same(r.record(0), random_bytes(216, 7)));
  // The rebuilt index is valid for the new file.
  CHECK(io::detail::load_index(path, "tfrecord:crc")->size() == 1);
}

TEST_CASE("saved index: each part of the stamp is compared, and an old-version index is never trusted") {
  temp_dir dir;
  const auto path = dir.file("s.tfrecord");
  // Larger than 2 x 64 KiB, so the content check reads the head and the tail only.
  write_file(path, tfrecords(40, 5000, 3));
  const auto stamp = io::detail::stamp_of(path);
  REQUIRE(stamp.has_value());
  CHECK(stamp->size == std::filesystem::file_size(path));
  const auto entries = io::detail::scan_tfrecord(sluice_test::read_file(path), path, true);
  REQUIRE(entries.size() == 40);

  REQUIRE(io::detail::save_index(path, "tfrecord:crc", entries, *stamp));
  CHECK(io::detail::load_index(path, "tfrecord:crc").has_value());

  auto differs = [&](auto change) {
    io::detail::file_stamp s = *stamp;
    change(s);
    REQUIRE(io::detail::save_index(path, "tfrecord:crc", entries, s));
    return !io::detail::load_index(path, "tfrecord:crc").has_value();
  };
  CHECK(differs([](auto& s) { s.dev ^= 1; }));
  CHECK(differs([](auto& s) { s.ino ^= 1; }));
  CHECK(differs([](auto& s) { s.size += 1; }));
  CHECK(differs([](auto& s) { s.mtime_ns += 1; }));
  CHECK(differs([](auto& s) { s.ctime_ns += 1; }));
  CHECK(differs([](auto& s) { s.content_crc ^= 1; }));

  // The content CRC covers the tail: a change in the last 64 KiB alone changes it.
  auto raw = sluice_test::read_file(path);
  raw[raw.size() - 100] ^= std::byte{1};
  auto other = path + ".other";
  write_file(other, raw);
  CHECK(io::detail::stamp_of(other)->content_crc != stamp->content_crc);

  // A version-1 index (size + mtime only), as older sluice wrote it, valid in every other way.
  bytes v1;
  auto put = [&](const auto& v) {
    auto p = reinterpret_cast<const std::byte*>(&v);
    v1.insert(v1.end(), p, p + sizeof v);
  };
  v1.insert(v1.end(), reinterpret_cast<const std::byte*>("SLUICEIX"), reinterpret_cast<const std::byte*>("SLUICEIX") + 8);
  put(std::uint32_t{1});
  put(std::uint32_t{12});
  v1.insert(v1.end(), reinterpret_cast<const std::byte*>("tfrecord:crc"), reinterpret_cast<const std::byte*>("tfrecord:crc") + 12);
  put(stamp->size);
  put(stamp->mtime_ns);
  put(std::uint64_t{3});  // three entries: a reader trusting it would report 3 records
  for (std::size_t i = 0; i < 3; ++i) put(entries[i]);
  put(io::crc32c(v1));
  write_file(path + ".sidx", v1);
  CHECK_FALSE(io::detail::load_index(path, "tfrecord:crc").has_value());
  io::tfrecord_reader r(path);
  CHECK(r.size() == 40);
}

TEST_CASE("saved index: a FIFO where the index would be neither blocks the open nor is written through") {
  temp_dir dir;
  const auto path = dir.file("f.tfrecord");
  write_file(path, tfrecords(5, 50, 1));
  REQUIRE(::mkfifo((path + ".sidx").c_str(), 0600) == 0);
  hang_guard guard(30);
  CHECK_FALSE(io::detail::load_index(path, "tfrecord:crc").has_value());
  io::tfrecord_reader r(path);  // scans; saving renames a fresh file over the FIFO
  CHECK(r.size() == 5);
  CHECK(std::filesystem::is_regular_file(path + ".sidx"));
}

// ---------------------------------------------------------------------------------------------
// 2. TFRecord payload CRCs: the same policy with or without a saved index.

TEST_CASE("tfrecord: a payload corrupted after its index was saved is a CRC error at that record") {
  temp_dir dir;
  const auto path = dir.file("c.tfrecord");
  auto img = tfrecords(10, 100, 5);
  write_file(path, img);
  { io::tfrecord_reader r(path); REQUIRE(r.size() == 10); }
  auto entries = *io::detail::load_index(path, "tfrecord:crc");

  // Bit rot: one payload byte of record 6 changes and nothing tells the stamp (here the index is
  // re-saved for the file as it now is, which is what an unchanged stamp would amount to).
  img[entries[6].offset + 17] ^= std::byte{0x10};
  write_file(path, img);
  REQUIRE(io::detail::save_index(path, "tfrecord:crc", entries));

  io::tfrecord_reader r(path);  // opens from the index: no scan, so no error yet
  REQUIRE(r.size() == 10);
  for (std::size_t i = 0; i < 10; ++i)
    if (i != 6) CHECK(same(r.record(i), random_bytes(100, 5 + i)));
  for (int twice = 0; twice < 2; ++twice) {
    auto e = expect_format_error([&] { (void)r.record(6); });
    CHECK(e.file() == path);
    CHECK(e.record() == 6);
    CHECK(e.offset() == entries[6].offset);
    CHECK(e.cause().find("payload CRC mismatch") != std::string::npos);
    CHECK(std::string(e.what()).find("record 6") != std::string::npos);
  }

  // Without the index, the same file fails the same check (at open, where the scan meets it).
  auto e = expect_format_error([&] { io::tfrecord_reader s(path, {.index = io::saved_index::ignore}); });
  CHECK(e.record() == 6);
  CHECK(e.cause().find("payload CRC mismatch") != std::string::npos);
  // ... or at the read, under bad_records::defer.
  io::tfrecord_reader d(path, {.index = io::saved_index::ignore, .bad_records = io::bad_records::defer});
  CHECK(d.size() == 10);
  CHECK(expect_format_error([&] { (void)d.record(6); }).cause().find("payload CRC mismatch") != std::string::npos);

  // check_payload_crc = false means unchecked on both paths.
  io::tfrecord_reader fast(path, {.check_payload_crc = false});
  CHECK(fast.record(6).size() == 100);
  io::tfrecord_reader fast_scan(path, {.check_payload_crc = false, .index = io::saved_index::ignore});
  CHECK(fast_scan.record(6).size() == 100);
}

TEST_CASE("tfrecord: first-read payload checks from many threads at once agree (run under TSan)") {
  temp_dir dir;
  const auto path = dir.file("m.tfrecord");
  auto img = tfrecords(300, 70, 21);
  write_file(path, img);
  { io::tfrecord_reader r(path); }
  auto entries = *io::detail::load_index(path, "tfrecord:crc");
  img[entries[131].offset] ^= std::byte{1};
  write_file(path, img);
  REQUIRE(io::detail::save_index(path, "tfrecord:crc", entries));
  io::tfrecord_reader r(path);
  std::atomic<int> good{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t k = 0; k < r.size(); ++k) {
        const std::size_t i = (k * 7 + static_cast<std::size_t>(t) * 75) % r.size();  // each thread its own order
        try {
          if (same(r.record(i), random_bytes(70, 21 + i))) ++good;
        } catch (const format_error& e) {
          if (e.record() == 131) ++bad;
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(good == 4 * 299);
  CHECK(bad == 4);
}

// ---------------------------------------------------------------------------------------------
// 3. bad_records::defer: the good records of a damaged file, through the loader.

TEST_CASE("tfrecord defer: 199 good records of a file truncated in its 200th, through skip and raise") {
  temp_dir dir;
  const auto path = dir.file("t.tfrecord");
  auto img = tfrecords(200, 64, 11);
  const std::uint64_t rec = 12 + 64 + 4;
  img.resize(199 * rec + 12 + 30);  // the 200th record's payload is cut short
  write_file(path, img);

  // Default: the whole file is refused at open, naming the record.
  auto e = expect_format_error([&] { io::tfrecord_reader r(path); });
  CHECK(e.record() == 199);

  io::tfrecord_reader r(path, {.bad_records = io::bad_records::defer});
  REQUIRE(r.size() == 200);
  REQUIRE(r.damaged().size() == 1);
  CHECK(r.damaged()[0].record == 199);
  for (std::size_t i = 0; i < 199; ++i) CHECK(same(r.record(i), random_bytes(64, 11 + i)));
  auto bad = expect_format_error([&] { (void)r.record(199); });
  CHECK(bad.file() == path);
  CHECK(bad.record() == 199);
  CHECK(bad.offset() == 199 * rec);
  CHECK(bad.cause().find("past the end") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(path + ".sidx"));  // a damaged file's index is never saved

  // Skip: the 199 good records are delivered, the bad one counted.
  {
    auto loader = from(sample::sequential(r.size())) | read(r) | collate({.batch = 16}) |
                  prefetch(2, {.errors = on_error::skip});
    std::size_t n = 0, skipped = 0;
    for (auto& b : loader.epoch(0)) {
      n += b.size();
      skipped += b.skipped();
      for (auto id : b.ids()) CHECK(id != 199);
    }
    CHECK(n == 199);
    CHECK(skipped == 1);
    CHECK(loader.stats().skipped == 1);
  }
  // Raise: the batches before it arrive, then the error names the record.
  {
    auto loader = from(sample::sequential(r.size())) | read(r) | collate({.batch = 16}) | prefetch(2);
    std::size_t n = 0;
    try {
      for (auto& b : loader.epoch(0)) n += b.size();
      FAIL("no error");
    } catch (const stage_error& s) {
      CHECK(s.sample_id() == 199);
      try {
        std::rethrow_if_nested(s);
        FAIL("no nested error");
      } catch (const format_error& f) {
        CHECK(f.file() == path);
        CHECK(f.record() == 199);
      }
    }
    CHECK(n == 192);  // 12 whole batches of 16 before the batch holding record 199
  }
}

TEST_CASE("tfrecord defer: a bad length CRC ends the scan there, a bad payload CRC is one entry") {
  temp_dir dir;
  const auto path = dir.file("l.tfrecord");
  auto good = tfrecords(100, 40, 2);
  const std::uint64_t rec = 12 + 40 + 4;

  SUBCASE("length CRC") {
    auto img = good;
    img[50 * rec + 9] ^= std::byte{1};
    write_file(path, img);
    io::tfrecord_reader r(path, {.bad_records = io::bad_records::defer});
    REQUIRE(r.size() == 51);
    for (std::size_t i = 0; i < 50; ++i) CHECK(same(r.record(i), random_bytes(40, 2 + i)));
    auto e = expect_format_error([&] { (void)r.record(50); });
    CHECK(e.record() == 50);
    CHECK(e.offset() == 50 * rec);
    CHECK(e.cause().find("length CRC") != std::string::npos);
  }
  SUBCASE("payload CRC") {
    auto img = good;
    img[10 * rec + 12 + 3] ^= std::byte{1};
    write_file(path, img);
    io::tfrecord_reader r(path, {.bad_records = io::bad_records::defer});
    REQUIRE(r.size() == 100);
    REQUIRE(r.damaged().size() == 1);
    CHECK(expect_format_error([&] { (void)r.record(10); }).record() == 10);
    CHECK(same(r.record(11), random_bytes(40, 13)));
    CHECK(same(r.record(99), random_bytes(40, 101)));
  }
  SUBCASE("truncated header") {
    auto img = good;
    img.resize(99 * rec + 5);
    write_file(path, img);
    io::tfrecord_reader r(path, {.bad_records = io::bad_records::defer});
    REQUIRE(r.size() == 100);
    CHECK(expect_format_error([&] { (void)r.record(99); }).cause().find("truncated record header") != std::string::npos);
  }
  SUBCASE("an intact file under defer is indexed and saved as usual") {
    write_file(path, good);
    io::tfrecord_reader r(path, {.bad_records = io::bad_records::defer});
    CHECK(r.size() == 100);
    CHECK(r.damaged().empty());
    CHECK(io::detail::load_index(path, "tfrecord:crc").has_value());
  }
}

TEST_CASE("fixed_records defer: a data file cut inside its last record keeps its whole records") {
  temp_dir dir;
  const auto data = dir.file("x.u8"), lab = dir.file("y.u8");
  auto d = random_bytes(10 * 8 + 3, 4);  // 10 whole 8-byte records and 3 bytes of the 11th
  write_file(data, d);
  bytes l(11);
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = static_cast<std::byte>(i);
  write_file(lab, l);

  auto e = expect_format_error([&] { io::fixed_records r(data, {.record_bytes = 8}); });
  CHECK(e.record() == 10);

  io::fixed_records r(data, {.record_bytes = 8, .labels_path = lab, .label_type = io::label_type::u8,
                             .bad_records = io::bad_records::defer});
  REQUIRE(r.size() == 11);
  for (std::size_t i = 0; i < 10; ++i) {
    CHECK(same(r.record(i), std::span<const std::byte>(d.data() + i * 8, 8)));
    CHECK(r.label(i) == static_cast<std::int64_t>(i));
  }
  auto bad = expect_format_error([&] { (void)r.record(10); });
  CHECK(bad.file() == data);
  CHECK(bad.record() == 10);
  CHECK(bad.offset() == 80);
  CHECK(bad.cause().find("3 bytes") != std::string::npos);

  auto loader = from(sample::sequential(r.size())) | read(r) | collate({.batch = 4}) |
                prefetch(2, {.errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(n == 10);
  CHECK(loader.stats().skipped == 1);

  // Labels for the whole records only are accepted too; the partial record's label is -1.
  write_file(lab, bytes(l.begin(), l.begin() + 10));
  io::fixed_records r10(data, {.record_bytes = 8, .labels_path = lab, .label_type = io::label_type::u8,
                               .bad_records = io::bad_records::defer});
  CHECK(r10.label(9) == 9);
  CHECK(r10.label(10) == -1);
  // ... but not any other count.
  write_file(lab, bytes(l.begin(), l.begin() + 9));
  CHECK(expect_format_error([&] {
          io::fixed_records r9(data, {.record_bytes = 8, .labels_path = lab, .label_type = io::label_type::u8,
                                      .bad_records = io::bad_records::defer});
        }).file() == lab);
}

// ---------------------------------------------------------------------------------------------
// 6. No 32-bit length in the TFRecord reader: a 5 GiB record (a sparse file: only the header and
// the trailer are written, and with payload CRCs off nothing else is touched).

TEST_CASE("tfrecord: a 5 GiB record is indexed and served whole") {
  temp_dir dir;
  const auto path = dir.file("huge.tfrecord");
  const std::uint64_t len = std::uint64_t{5} << 30;
  bytes head;
  {
    bytes h(8);
    std::memcpy(h.data(), &len, 8);
    const std::uint32_t c = io::mask_crc32c(io::crc32c(h));
    head = h;
    head.resize(12);
    std::memcpy(head.data() + 8, &c, 4);
  }
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    const bool sparse_ok = ::ftruncate(fd, static_cast<off_t>(12 + len + 4)) == 0;
    ::close(fd);
    if (!sparse_ok) sluice_test::skip("cannot make a 5 GiB sparse file in " + dir.path().string());
  }
  overwrite_in_place(path, head);
  io::tfrecord_reader r(path, {.check_payload_crc = false, .index = io::saved_index::ignore});
  REQUIRE(r.size() == 1);
  CHECK(r.record(0).size() == len);
  CHECK(r.offset(0) == 12);
}

// ---------------------------------------------------------------------------------------------
// 4 and 5. npy: uint64 labels beyond int64, text after the header dict.

TEST_CASE("npy: a uint64 label above INT64_MAX is a format_error naming the labels file and record") {
  temp_dir dir;
  auto x = io::npy_header_bytes("<u1", {4, 3});
  x.resize(x.size() + 12);
  write_file(dir.file("x.npy"), x);
  auto l = io::npy_header_bytes("<u8", {4});
  const std::uint64_t labels[4] = {0, 7, std::uint64_t{1} << 63, 9};
  const auto* lp = reinterpret_cast<const std::byte*>(labels);
  l.insert(l.end(), lp, lp + sizeof labels);
  write_file(dir.file("l.npy"), l);
  auto e = expect_format_error([&] { io::npy_reader r(dir.file("x.npy"), {.labels_path = dir.file("l.npy")}); });
  CHECK(e.file() == dir.file("l.npy"));
  CHECK(e.record() == 2);
  CHECK(e.cause().find("9223372036854775808") != std::string::npos);

  // INT64_MAX itself is a label.
  const std::uint64_t ok[4] = {0, 1, static_cast<std::uint64_t>(INT64_MAX), 3};
  l.resize(l.size() - sizeof labels);
  l.insert(l.end(), reinterpret_cast<const std::byte*>(ok), reinterpret_cast<const std::byte*>(ok) + sizeof ok);
  write_file(dir.file("l.npy"), l);
  io::npy_reader r(dir.file("x.npy"), {.labels_path = dir.file("l.npy")});
  CHECK(r.label(2) == INT64_MAX);
}

TEST_CASE("npy: text after the header dict's closing brace is refused, padding and the newline are not") {
  temp_dir dir;
  const auto path = dir.file("h.npy");
  auto with_header = [&](std::string dict) {
    std::size_t total = 10 + dict.size();
    if (total % 64) dict.insert(dict.size() - 1, 64 - total % 64, ' ');  // pad before the '\n'
    bytes out(10);
    std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
    out[8] = static_cast<std::byte>(dict.size() & 0xff);
    out[9] = static_cast<std::byte>(dict.size() >> 8);
    for (char c : dict) out.push_back(static_cast<std::byte>(c));
    out.resize(out.size() + 6);  // shape (3, 2) of u1
    write_file(path, out);
  };
  const std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2), }";
  with_header(dict + "\n");
  CHECK(io::npy_reader(path).size() == 3);
  for (std::string tail : {" x\n", "}\n", "\n\n", " ('more', 1)\n", "#\n"}) {
    CAPTURE(tail);
    with_header(dict + tail);
    auto e = expect_format_error([&] { io::npy_reader r(path); });
    CHECK(e.file() == path);
    CHECK(e.cause().find("after the header dict") != std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// 8. Paths that are not regular files fail at once, naming the path.

TEST_CASE("readers: a FIFO, a directory or a character device is refused at once as not a regular file") {
  temp_dir dir;
  const auto fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto good_tok = dir.file("tok.bin");
  {
    std::vector<std::uint16_t> t(64, 1);
    write_file(good_tok, {reinterpret_cast<const std::byte*>(t.data()), t.size() * 2});
  }
  const auto good_npy = dir.file("x.npy");
  {
    auto x = io::npy_header_bytes("<u1", {4, 3});
    x.resize(x.size() + 12);
    write_file(good_npy, x);
  }
  hang_guard guard(60);  // a blocking open would end the test here, not at the ctest timeout

  for (std::string p : {fifo, dir.path().string(), std::string("/dev/null")}) {
    CAPTURE(p);
    auto refused = [&](auto&& open) {
      std::string w = "<no error>";
      try {
        open();
      } catch (const format_error& e) {
        w = e.what();
      } catch (const std::exception& e) {
        w = std::string("<not a format_error> ") + e.what();
      }
      CHECK(w.find("not a regular file") != std::string::npos);
      CHECK(w.find(p) != std::string::npos);
    };
    refused([&] { io::tfrecord_reader r(p); });
    refused([&] { io::npy_reader r(p); });
    refused([&] { io::npy_reader r(good_npy, {.labels_path = p}); });
    refused([&] { io::idx_file f(p); });
    refused([&] { io::fixed_records r(p, {.record_bytes = 4}); });
    refused([&] { io::fixed_records r(good_tok, {.record_bytes = 4, .labels_path = p, .label_type = io::label_type::u8}); });
    refused([&] { io::token_windows<std::uint16_t> w(p, {.length = 4}); });
    refused([&] { io::token_documents<std::uint16_t> d(p, good_tok); });
    refused([&] { io::token_documents<std::uint16_t> d(good_tok, p); });
  }
  // A FIFO at the writer's temporary name is refused too (opening it for writing would block).
  REQUIRE(::mkfifo(dir.file("docs.bin.partial").c_str(), 0600) == 0);
  std::vector<std::vector<std::uint16_t>> docs{{1, 2}, {3}};
  CHECK(io_error_text([&] { io::write_token_documents<std::uint16_t>(dir.file("docs.bin"), dir.file("docs.idx"), docs); })
            .find("not a regular file") != std::string::npos);
}
