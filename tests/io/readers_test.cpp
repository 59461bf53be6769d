// Well-formed files: TFRecord, WebDataset tar and .npy readers return the records, labels and
// counts that were written, zero copy, and the saved index is reused and invalidated correctly.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "sluice/io/npy.hpp"
#include "sluice/io/tfrecord.hpp"
#include "sluice/core/pipeline.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/stage/any_collate.hpp"
#include "sluice/stage/prefetch.hpp"
#include "sluice/stage/read.hpp"
#include "sluice/io/wds_tar.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::as_bytes;
using sluice_test::random_bytes;
using sluice_test::temp_dir;
using sluice_test::write_file;

namespace {
bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}
std::vector<std::vector<std::byte>> payloads(std::size_t n, std::uint64_t seed) {
  std::vector<std::vector<std::byte>> p;
  for (std::size_t i = 0; i < n; ++i) p.push_back(random_bytes((i * 37 + seed) % 300, seed + i));
  return p;
}
}  // namespace

TEST_CASE("tfrecord: records round-trip, zero copy, CRCs checked") {
  temp_dir dir;
  auto recs = payloads(50, 3);
  std::vector<std::byte> img;
  for (auto& r : recs) io::append_tfrecord(img, r);
  write_file(dir.file("a.tfrecord"), img);

  io::tfrecord_reader r(dir.file("a.tfrecord"), {.index = io::saved_index::ignore});
  REQUIRE(r.size() == recs.size());
  for (std::size_t i = 0; i < recs.size(); ++i) {
    CHECK(same(r.record(i), recs[i]));
    CHECK(r.label(i) == -1);
    // zero copy: the view points into the mapping
    CHECK(r.record(i).data() >= r.file().data());
    CHECK(r.record(i).data() + r.record(i).size() <= r.file().data() + r.file().size());
  }
  CHECK(r.view(3).origin == dir.file("a.tfrecord"));
  CHECK_THROWS_AS((void)r.record(recs.size()), usage_error);
  CHECK_FALSE(std::filesystem::exists(dir.file("a.tfrecord.sidx")));

  // A label extractor: first byte of the payload (or -1 for an empty one).
  io::tfrecord_reader l(dir.file("a.tfrecord"), {.index = io::saved_index::ignore,
                                                 .label_of = [](std::span<const std::byte> p) {
                                                   return p.empty() ? std::int64_t{-1} : std::to_integer<std::int64_t>(p[0]);
                                                 }});
  for (std::size_t i = 0; i < recs.size(); ++i)
    CHECK(l.label(i) == (recs[i].empty() ? -1 : std::to_integer<std::int64_t>(recs[i][0])));
}

TEST_CASE("tfrecord: empty file has zero records") {
  temp_dir dir;
  write_file(dir.file("e.tfrecord"), std::string{});
  io::tfrecord_reader r(dir.file("e.tfrecord"), {.index = io::saved_index::ignore});
  CHECK(r.size() == 0);
}

TEST_CASE("saved index: written once, reused, rebuilt when the file changes or the index is bad") {
  temp_dir dir;
  const auto path = dir.file("b.tfrecord");
  auto recs = payloads(20, 9);
  std::vector<std::byte> img;
  for (auto& r : recs) io::append_tfrecord(img, r);
  write_file(path, img);
  { io::tfrecord_reader r(path); CHECK(r.size() == 20); }
  REQUIRE(std::filesystem::exists(path + ".sidx"));
  CHECK(io::detail::load_index(path, "tfrecord:crc").has_value());
  CHECK_FALSE(io::detail::load_index(path, "tfrecord:nocrc").has_value());  // other settings: not reused

  // Prove the saved index is what the second open uses: plant a valid index with fewer entries.
  auto idx = *io::detail::load_index(path, "tfrecord:crc");
  idx.resize(5);
  REQUIRE(io::detail::save_index(path, "tfrecord:crc", idx));
  { io::tfrecord_reader r(path); CHECK(r.size() == 5); }
  // A reader that skips payload CRCs may use an index built with them.
  { io::tfrecord_reader r(path, {.check_payload_crc = false}); CHECK(r.size() == 5); }

  // Corrupt one byte of the index: its CRC fails, the file is rescanned and the index rewritten.
  auto raw = sluice_test::read_file(path + ".sidx");
  raw[raw.size() / 2] ^= std::byte{0x40};
  write_file(path + ".sidx", raw);
  { io::tfrecord_reader r(path); CHECK(r.size() == 20); }
  CHECK(io::detail::load_index(path, "tfrecord:crc")->size() == 20);

  // Change the file (size and mtime): the index no longer matches.
  io::append_tfrecord(img, recs[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  write_file(path, img);
  CHECK_FALSE(io::detail::load_index(path, "tfrecord:crc").has_value());
  { io::tfrecord_reader r(path, {.index = io::saved_index::use_only}); CHECK(r.size() == 21); }
  CHECK_FALSE(io::detail::load_index(path, "tfrecord:crc").has_value());  // use_only never writes
}

TEST_CASE("wds tar: samples grouped by key, record and label fields, long and pax names") {
  temp_dir dir;
  std::vector<std::byte> tar;
  std::vector<std::vector<std::byte>> jpgs;
  const std::string long_dir(120, 'd');
  for (int i = 0; i < 12; ++i) {
    std::string key = (i == 5 ? long_dir + "/" : std::string("train/")) + "s" + std::to_string(i);
    jpgs.push_back(random_bytes(100 + i * 61, 40 + i));
    io::append_tar_member(tar, key + ".jpg", jpgs.back());
    io::append_tar_member(tar, key + ".cls", as_bytes(std::to_string(i % 4) + "\n"));
    io::append_tar_member(tar, key + ".json", as_bytes("{}"));
  }
  tar.resize(tar.size() + 1024);
  write_file(dir.file("s.tar"), tar);

  io::wds_tar_reader r(dir.file("s.tar"), {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::ignore});
  REQUIRE(r.size() == 12);
  for (std::size_t i = 0; i < 12; ++i) {
    CHECK(same(r.record(i), jpgs[i]));
    CHECK(r.label(i) == static_cast<std::int64_t>(i % 4));
  }
  io::wds_tar_reader nolabel(dir.file("s.tar"), {.record_field = "json", .index = io::saved_index::ignore});
  CHECK(nolabel.size() == 12);
  CHECK(nolabel.label(0) == -1);
  CHECK(same(nolabel.record(0), as_bytes("{}")));
}

TEST_CASE("wds tar: pax path header and multi-dot extensions") {
  temp_dir dir;
  std::vector<std::byte> tar;
  // A pax header giving the path of the next member; its own name field is junk.
  std::string rec = "path=deep/key0.seg.png\n";
  std::string body = std::to_string(rec.size() + 3) + " " + rec;  // "NN path=...": 2-digit length + space
  REQUIRE(body.size() == rec.size() + 3);
  std::vector<std::byte> pax_member;
  io::append_tar_member(pax_member, "PaxHeader/x", as_bytes(body));
  pax_member[156] = std::byte{'x'};
  // recompute the checksum after changing the type flag
  std::memset(pax_member.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(pax_member[i]);
  std::snprintf(reinterpret_cast<char*>(pax_member.data() + 148), 8, "%06o", sum);
  tar.insert(tar.end(), pax_member.begin(), pax_member.end());
  io::append_tar_member(tar, "ignored-name", as_bytes("PNGDATA"));
  io::append_tar_member(tar, "deep/key0.cls", as_bytes("7"));
  io::append_tar_member(tar, "deep/key1.seg.png", as_bytes("OTHER"));
  io::append_tar_member(tar, "deep/key1.cls", as_bytes(" 3 "));
  // no end-of-archive blocks: end of file also ends it
  write_file(dir.file("p.tar"), tar);
  io::wds_tar_reader r(dir.file("p.tar"), {.record_field = "seg.png", .label_field = "cls", .index = io::saved_index::ignore});
  REQUIRE(r.size() == 2);
  CHECK(same(r.record(0), as_bytes("PNGDATA")));
  CHECK(r.label(0) == 7);
  CHECK(same(r.record(1), as_bytes("OTHER")));
  CHECK(r.label(1) == 3);
}

TEST_CASE("wds tar: saved index carries labels") {
  temp_dir dir;
  std::vector<std::byte> tar;
  for (int i = 0; i < 4; ++i) {
    io::append_tar_member(tar, "k" + std::to_string(i) + ".jpg", as_bytes("J" + std::to_string(i)));
    io::append_tar_member(tar, "k" + std::to_string(i) + ".cls", as_bytes(std::to_string(10 + i)));
  }
  tar.resize(tar.size() + 1024);
  write_file(dir.file("i.tar"), tar);
  { io::wds_tar_reader r(dir.file("i.tar"), {.record_field = "jpg", .label_field = "cls"}); CHECK(r.size() == 4); }
  REQUIRE(io::detail::load_index(dir.file("i.tar"), io::detail::wds_index_kind({.record_field = "jpg", .label_field = "cls"})).has_value());
  io::wds_tar_reader r(dir.file("i.tar"), {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::use_only});
  CHECK(r.label(2) == 12);
  CHECK(same(r.record(3), as_bytes("J3")));
}

TEST_CASE("npy: rows, dtype, shape, labels, versions 1 to 3") {
  temp_dir dir;
  std::vector<float> data(6 * 4 * 3);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  auto img = io::npy_header_bytes("<f4", {6, 4, 3});
  auto p = reinterpret_cast<const std::byte*>(data.data());
  img.insert(img.end(), p, p + data.size() * 4);
  write_file(dir.file("x.npy"), img);

  std::vector<std::int16_t> lab = {3, -1, 0, 2, 7, -5};
  auto limg = io::npy_header_bytes("<i2", {6});
  auto lp = reinterpret_cast<const std::byte*>(lab.data());
  limg.insert(limg.end(), lp, lp + lab.size() * 2);
  write_file(dir.file("y.npy"), limg);

  io::npy_reader r(dir.file("x.npy"), {.labels_path = dir.file("y.npy")});
  CHECK(r.size() == 6);
  CHECK(r.row_bytes() == 48);
  CHECK(r.dtype().kind == 'f');
  CHECK(r.dtype().item_bytes == 4);
  CHECK(r.shape() == std::vector<std::uint64_t>{6, 4, 3});
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(same(r.record(i), std::span<const std::byte>(p + i * 48, 48)));
    CHECK(r.label(i) == lab[i]);
  }

  // Version 2.0 and 3.0: a u32 header length, otherwise the same.
  for (int major : {2, 3}) {
    std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2), }";
    dict.append((64 - (12 + dict.size() + 1) % 64) % 64, ' ');
    dict += '\n';
    std::vector<std::byte> v(12);
    std::memcpy(v.data(), "\x93NUMPY", 6);
    v[6] = static_cast<std::byte>(major);
    std::uint32_t hl = static_cast<std::uint32_t>(dict.size());
    std::memcpy(v.data() + 8, &hl, 4);
    for (char c : dict) v.push_back(static_cast<std::byte>(c));
    for (int i = 0; i < 6; ++i) v.push_back(static_cast<std::byte>(i));
    write_file(dir.file("v.npy"), v);
    io::npy_reader r2(dir.file("v.npy"));
    CHECK(r2.header().major == major);
    CHECK(r2.size() == 3);
    CHECK(std::to_integer<int>(r2.record(2)[1]) == 5);
    CHECK(r2.label(0) == -1);
  }
}

TEST_CASE("npy_any: several arrays of one length are a sample's fields, each with its dtype and row shape") {
  temp_dir dir;
  const std::size_t n = 7;
  auto write = [&](const std::string& name, std::string_view descr, std::vector<std::uint64_t> shape, auto value) {
    auto out = io::npy_header_bytes(descr, shape);
    std::size_t count = 1;
    for (const auto d : shape) count *= d;
    for (std::size_t k = 0; k < count; ++k) {
      const auto v = value(k);
      const auto* p = reinterpret_cast<const std::byte*>(&v);
      out.insert(out.end(), p, p + sizeof v);
    }
    write_file(dir.file(name), out);
    return dir.file(name);
  };
  const auto x = write("x.npy", "<f4", {n, 3, 2}, [](std::size_t k) { return 0.5f * static_cast<float>(k); });
  const auto y = write("y.npy", "<i8", {n}, [](std::size_t k) { return static_cast<std::int64_t>(k) * 3 - 4; });
  const auto m = write("m.npy", "|b1", {n, 4}, [](std::size_t k) { return static_cast<std::uint8_t>(k % 3 == 0); });
  io::npy_any d({{"x", x}, {"y", y}, {"m", m}});
  CHECK(d.size() == n);
  CHECK(d.schema().describe() == "x (f32, fixed), y (i64, fixed), m (bool, fixed)");
  auto loader = from(sample::sequential(d.size())) | read(d) |
                collate({.batch = 3}, d.schema(), {{"x", stack<>{}}, {"y", stack<>{}}, {"m", stack<>{}}}) | prefetch(2, {.workers = 2});
  std::size_t rows = 0;
  for (auto& b : loader.epoch(0)) {
    const auto bx = b.field("x"), by = b.field("y"), bm = b.field("m");
    const auto b0 = static_cast<std::int64_t>(b.size());
    CHECK(std::vector<std::int64_t>(bx.shape().begin(), bx.shape().end()) == std::vector<std::int64_t>{b0, 3, 2});
    CHECK(std::vector<std::int64_t>(by.shape().begin(), by.shape().end()) == std::vector<std::int64_t>{b0});
    CHECK(std::vector<std::int64_t>(bm.shape().begin(), bm.shape().end()) == std::vector<std::int64_t>{b0, 4});
    for (std::size_t i = 0; i < b.size(); ++i, ++rows) {
      const std::size_t id = b.ids()[i];
      CHECK(by.as<std::int64_t>()[i] == static_cast<std::int64_t>(id) * 3 - 4);
      for (std::size_t k = 0; k < 6; ++k) CHECK(bx.as<float>()[i * 6 + k] == 0.5f * static_cast<float>(id * 6 + k));
      const auto mask = bm.bytes();
      for (std::size_t k = 0; k < 4; ++k) CHECK(std::to_integer<int>(mask[i * 4 + k]) == int((id * 4 + k) % 3 == 0));
    }
  }
  CHECK(rows == n);
  // Arrays of other lengths, and dtypes no tensor holds, name the files.
  const auto z = write("z.npy", "<f4", {n + 1}, [](std::size_t k) { return static_cast<float>(k); });
  CHECK_THROWS_WITH_AS(io::npy_any({{"x", x}, {"z", z}}),
                       doctest::Contains(("8 rows beside 7 in '" + x + "' (field 'x')").c_str()), format_error);
  const auto c = write("c.npy", "<c8", {n}, [](std::size_t k) { return static_cast<std::uint64_t>(k); });
  CHECK_THROWS_WITH_AS(io::npy_any({{"c", c}}), doctest::Contains("holds dtype '<c8', which has no tensor element type"),
                       format_error);
  CHECK_THROWS_AS(io::npy_any({}), usage_error);
}
