// Bad files: every reader turns truncation, wrong magic, checksum mismatches, lengths past the end,
// empty files and random garbage into a sluice::format_error that names the file, where, and why —
// never a crash, a hang or an out-of-bounds view.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sluice/io/fixed_records.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/tfrecord.hpp"
#include "sluice/io/wds_tar.hpp"
#include "test_util.hpp"

using sluice_test::expect_format_error;

using namespace sluice;
using sluice_test::as_bytes;
using sluice_test::random_bytes;
using sluice_test::temp_dir;
using sluice_test::write_file;

namespace {


std::vector<std::byte> good_tfrecord() {
  std::vector<std::byte> img;
  for (int i = 0; i < 3; ++i) io::append_tfrecord(img, random_bytes(100, i));
  return img;
}
std::vector<std::byte> good_tar() {
  std::vector<std::byte> t;
  for (int i = 0; i < 3; ++i) {
    io::append_tar_member(t, "k" + std::to_string(i) + ".jpg", random_bytes(700, i));
    io::append_tar_member(t, "k" + std::to_string(i) + ".cls", as_bytes(std::to_string(i)));
  }
  t.resize(t.size() + 1024);
  return t;
}
std::vector<std::byte> good_npy() {
  auto img = io::npy_header_bytes("<u2", {4, 5});
  auto d = random_bytes(40, 1);
  img.insert(img.end(), d.begin(), d.end());
  return img;
}
constexpr auto no_index = io::saved_index::ignore;
}  // namespace

TEST_CASE("tfrecord: truncated, bad CRCs, length past the end, garbage") {
  temp_dir dir;
  const auto path = dir.file("bad.tfrecord");
  auto open = [&] { io::tfrecord_reader r(path, {.index = no_index}); };
  auto good = good_tfrecord();
  const std::uint64_t rec_bytes = 12 + 100 + 4;

  SUBCASE("truncated inside a header") {
    auto b = good;
    b.resize(rec_bytes + 5);
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.file() == path);
    CHECK(e.record() == 1);
    CHECK(e.offset() == rec_bytes);
    CHECK(e.cause().find("truncated") != std::string::npos);
  }
  SUBCASE("truncated inside a payload") {
    auto b = good;
    b.resize(2 * rec_bytes + 50);
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.record() == 2);
    CHECK(e.cause().find("past the end") != std::string::npos);
  }
  SUBCASE("length CRC mismatch") {
    auto b = good;
    b[rec_bytes + 9] ^= std::byte{1};
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.record() == 1);
    CHECK(e.cause().find("length CRC") != std::string::npos);
  }
  SUBCASE("payload CRC mismatch, and the flag that skips it") {
    auto b = good;
    b[rec_bytes + 12 + 40] ^= std::byte{0x80};
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.record() == 1);
    CHECK(e.offset() == rec_bytes + 12);
    CHECK(e.cause().find("payload CRC") != std::string::npos);
    io::tfrecord_reader fast(path, {.check_payload_crc = false, .index = no_index});
    CHECK(fast.size() == 3);
  }
  SUBCASE("a huge length with a valid length CRC is refused before anything is allocated") {
    std::vector<std::byte> b(16);
    const std::uint64_t len = std::uint64_t{1} << 62;
    std::memcpy(b.data(), &len, 8);
    const std::uint32_t c = io::mask_crc32c(io::crc32c(std::span<const std::byte>(b.data(), 8)));
    std::memcpy(b.data() + 8, &c, 4);
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.offset() == 0);
    CHECK(e.cause().find("past the end") != std::string::npos);
  }
  SUBCASE("random garbage") {
    write_file(path, random_bytes(4096, 77));
    auto e = expect_format_error(open);
    CHECK(e.record() == 0);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}

TEST_CASE("wds tar: empty, garbage, bad checksum, truncated, size past the end, missing fields") {
  temp_dir dir;
  const auto path = dir.file("bad.tar");
  auto open = [&] { io::wds_tar_reader r(path, {.record_field = "jpg", .label_field = "cls", .index = no_index}); };
  auto good = good_tar();

  SUBCASE("empty file") {
    write_file(path, std::string{});
    CHECK(expect_format_error(open).cause().find("empty") != std::string::npos);
  }
  SUBCASE("random garbage: wrong magic / checksum") {
    write_file(path, random_bytes(4096, 5));
    auto e = expect_format_error(open);
    CHECK(e.offset() == 0);
    CHECK(e.cause().find("not a tar") != std::string::npos);
  }
  SUBCASE("header checksum mismatch in the middle") {
    auto b = good;
    b[512 + 1024 + 10] ^= std::byte{1};  // name of the 2nd member (after 1st header + 2 data blocks)
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.offset() == 1536);
    CHECK(e.cause().find("checksum") != std::string::npos);
  }
  SUBCASE("truncated header") {
    auto b = good;
    b.resize(3 * 512 + 100);
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.offset() == 3 * 512);
    CHECK(e.cause().find("truncated") != std::string::npos);
  }
  SUBCASE("member size past the end of the file") {
    auto b = good;
    b.resize(512 + 300);  // first member claims 700 bytes
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.offset() == 0);
    CHECK(e.cause().find("past the end") != std::string::npos);
  }
  SUBCASE("sample missing the record field names the key") {
    std::vector<std::byte> t;
    io::append_tar_member(t, "a.jpg", as_bytes("x"));
    io::append_tar_member(t, "a.cls", as_bytes("1"));
    io::append_tar_member(t, "dir/b.cls", as_bytes("2"));
    t.resize(t.size() + 1024);
    write_file(path, t);
    auto e = expect_format_error(open);
    CHECK(e.record() == 1);
    CHECK(e.cause().find("'dir/b'") != std::string::npos);
    CHECK(e.cause().find("'jpg'") != std::string::npos);
  }
  SUBCASE("sample missing the label field names the key") {
    std::vector<std::byte> t;
    io::append_tar_member(t, "a.jpg", as_bytes("x"));
    t.resize(t.size() + 1024);
    write_file(path, t);
    auto e = expect_format_error(open);
    CHECK(e.cause().find("'a'") != std::string::npos);
    CHECK(e.cause().find("'cls'") != std::string::npos);
  }
  SUBCASE("label that is not an integer") {
    std::vector<std::byte> t;
    io::append_tar_member(t, "a.jpg", as_bytes("x"));
    io::append_tar_member(t, "a.cls", as_bytes("cat"));
    write_file(path, t);
    CHECK(expect_format_error(open).cause().find("not an ASCII integer") != std::string::npos);
  }
  SUBCASE("a sample with a field twice") {
    std::vector<std::byte> t;
    io::append_tar_member(t, "a.jpg", as_bytes("x"));
    io::append_tar_member(t, "a.jpg", as_bytes("y"));
    write_file(path, t);
    CHECK(expect_format_error(open).cause().find("two 'jpg'") != std::string::npos);
  }
}

TEST_CASE("compressed inputs: a gzip, zstd, bzip2, xz or zlib tar or TFRecord is named as such") {
  temp_dir dir;
  struct kind {
    const char* name;
    std::vector<unsigned char> magic;
    const char* command;
  };
  const kind kinds[] = {{"gzip", {0x1f, 0x8b, 0x08}, "gzip -dc"},
                        {"zstd", {0x28, 0xb5, 0x2f, 0xfd}, "zstd -d"},
                        {"bzip2", {'B', 'Z', 'h', '9', 0x31, 0x41, 0x59, 0x26, 0x53, 0x59}, "bzip2 -dc"},
                        {"xz", {0xfd, '7', 'z', 'X', 'Z', 0x00}, "xz -dc"},
                        {"zlib", {0x78, 0x9c}, "zlib.decompress"}};
  SUBCASE("each kind, smaller and larger than a tar block") {
    for (const auto& k : kinds) {
      CAPTURE(k.name);
      // What a compressor writes: its magic, then data that is no tar header or TFRecord frame. A
      // small archive compresses to under one tar block, a large one to many.
      for (const std::size_t size : {std::size_t{90}, std::size_t{5000}}) {
        CAPTURE(size);
        auto b = random_bytes(size, 3);
        for (std::size_t i = 0; i < k.magic.size(); ++i) b[i] = static_cast<std::byte>(k.magic[i]);
        const auto tar = dir.file(std::string("s-") + k.name + ".tar.gz");
        const auto tfr = dir.file(std::string("r-") + k.name + ".tfrecord");
        write_file(tar, b);
        write_file(tfr, b);
        auto e = expect_format_error([&] { io::wds_tar_reader r(tar, {.record_field = "jpg", .index = no_index}); });
        CHECK(e.file() == tar);
        CHECK(e.cause().find(std::string("is ") + k.name + "-compressed") != std::string::npos);
        CHECK(e.cause().find("uncompressed tar archives") != std::string::npos);
        CHECK(e.cause().find(k.command) != std::string::npos);
        e = expect_format_error([&] { io::tfrecord_reader r(tfr, {.index = no_index}); });
        CHECK(e.file() == tfr);
        CHECK(e.cause().find(std::string("is ") + k.name + "-compressed") != std::string::npos);
        CHECK(e.cause().find("uncompressed TFRecord files") != std::string::npos);
        e = expect_format_error([&] {
          io::tfrecord_reader r(tfr, {.index = no_index, .bad_records = io::bad_records::defer});
        });
        CHECK(e.cause().find(std::string("is ") + k.name + "-compressed") != std::string::npos);
      }
    }
  }
  SUBCASE("a valid file that starts with a magic is read, not refused") {
    // A TFRecord whose first record is 0x088b1f bytes long begins 1f 8b 08, gzip's magic.
    std::vector<std::byte> t;
    io::append_tfrecord(t, random_bytes(0x088b1f, 4));
    io::append_tfrecord(t, random_bytes(10, 5));
    CHECK(t[0] == std::byte{0x1f});
    CHECK(t[1] == std::byte{0x8b});
    write_file(dir.file("g.tfrecord"), t);
    CHECK(io::tfrecord_reader(dir.file("g.tfrecord"), {.index = no_index}).size() == 2);
    // A tar whose first member is named like a bzip2 stream.
    std::vector<std::byte> a;
    io::append_tar_member(a, "BZh91AY&SY.jpg", as_bytes("x"));
    a.resize(a.size() + 1024);
    write_file(dir.file("b.tar"), a);
    CHECK(io::wds_tar_reader(dir.file("b.tar"), {.record_field = "jpg", .index = no_index}).size() == 1);
  }
}

TEST_CASE("npy: empty, wrong magic, bad header, fortran order, truncated, garbage") {
  temp_dir dir;
  const auto path = dir.file("bad.npy");
  auto open = [&] { io::npy_reader r(path); };
  auto good = good_npy();
  auto with_dict = [&](std::string dict) {
    std::vector<std::byte> v(10);
    std::memcpy(v.data(), "\x93NUMPY\x01\x00", 8);
    dict += '\n';
    v[8] = static_cast<std::byte>(dict.size());
    for (char c : dict) v.push_back(static_cast<std::byte>(c));
    v.resize(v.size() + 8);
    write_file(path, v);
    return expect_format_error(open);
  };

  SUBCASE("empty") {
    write_file(path, std::string{});
    CHECK(expect_format_error(open).cause().find("empty") != std::string::npos);
  }
  SUBCASE("wrong magic") {
    auto b = good;
    b[1] = std::byte{'X'};
    write_file(path, b);
    auto e = expect_format_error(open);
    CHECK(e.file() == path);
    CHECK(e.cause().find("magic") != std::string::npos);
  }
  SUBCASE("what people hand an .npy reader instead: an .npz or torch.save zip, a pickle, a gzipped .npy") {
    auto cause_of = [&](std::vector<std::byte> b) {
      write_file(path, b);
      auto e = expect_format_error(open);
      CHECK(e.file() == path);
      return e.cause();
    };
    const auto z = as_bytes(std::string_view("PK\x03\x04\x14\x00\x00\x00\x00\x00arr_0.npy", 19));
    const std::vector<std::byte> zip(z.begin(), z.end());
    CHECK(cause_of(zip).find("a zip archive, not an .npy file (numpy.savez") != std::string::npos);
    std::vector<std::byte> pickle{std::byte{0x80}, std::byte{0x02}, std::byte{'c'}, std::byte{'t'}, std::byte{'o'},
                                  std::byte{'r'}, std::byte{'c'}, std::byte{'h'}, std::byte{'\n'}, std::byte{'.'}};
    CHECK(cause_of(pickle).find("a Python pickle, not an .npy file") != std::string::npos);
    std::vector<std::byte> gz{std::byte{0x1f}, std::byte{0x8b}, std::byte{8}, std::byte{0}};
    gz.resize(40);
    CHECK(cause_of(gz).find("gzip-compressed") != std::string::npos);
    CHECK(cause_of(gz).find(".npy files") != std::string::npos);
  }
  SUBCASE("an .npy given to the raw-records reader is named; header_bytes skips its header") {
    write_file(path, good);
    const std::size_t hb = io::npy_header_bytes("<u2", {4, 5}).size();
    auto e = expect_format_error([&] { io::fixed_records r(path, {.record_bytes = 10}); });
    CHECK(e.cause().find("an .npy file (numpy.save; shape (4, 5)), not raw records: its " + std::to_string(hb) +
                         "-byte header would be read as values") != std::string::npos);
    CHECK(e.cause().find("or skip the header with header_bytes = " + std::to_string(hb)) != std::string::npos);
    io::fixed_records r(path, {.record_bytes = 10, .header_bytes = hb});
    CHECK(r.size() == 4);
  }
  SUBCASE("truncated data") {
    auto b = good;
    b.resize(b.size() - 3);
    write_file(path, b);
    CHECK(expect_format_error(open).cause().find("truncated") != std::string::npos);
  }
  SUBCASE("header length past the end") {
    auto b = good;
    b[9] = std::byte{0x7f};
    write_file(path, b);
    CHECK(expect_format_error(open).cause().find("past the end") != std::string::npos);
  }
  SUBCASE("unknown version") {
    auto b = good;
    b[6] = std::byte{9};
    write_file(path, b);
    CHECK(expect_format_error(open).cause().find("version 9") != std::string::npos);
  }
  SUBCASE("fortran order is refused clearly") {
    auto e = with_dict("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 4), }");
    CHECK(e.cause().find("fortran_order is True") != std::string::npos);
  }
  SUBCASE("structured dtype, object dtype, big-endian") {
    CHECK(with_dict("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }").cause().find("structured") != std::string::npos);
    CHECK(with_dict("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }").cause().find("not supported") != std::string::npos);
    CHECK(with_dict("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }").cause().find("big-endian") != std::string::npos);
  }
  SUBCASE("a shape that overflows or does not fit the file") {
    CHECK(with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }").cause().find("overflow") != std::string::npos);
    CHECK(with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000,), }").cause().find("truncated") != std::string::npos);
    CHECK(with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (), }").cause().find("0-d") != std::string::npos);
  }
  SUBCASE("malformed dict") {
    CHECK(with_dict("{'descr': '|u1', 'fortran_order': False}").cause().find("lacks") != std::string::npos);
    CHECK(with_dict("{'descr': '|u1', 'fortran_order': False, 'shape': (8,), 'x': 1}").cause().find("unexpected key") != std::string::npos);
    CHECK(with_dict("{'descr': '|u1', 'fortran_order': False, 'shape': (8,").cause().find("npy header") != std::string::npos);
  }
  SUBCASE("random garbage after a valid magic") {
    auto b = random_bytes(2000, 11);
    std::memcpy(b.data(), "\x93NUMPY\x01\x00", 8);
    write_file(path, b);
    (void)expect_format_error(open);
  }
  SUBCASE("labels that do not match") {
    write_file(path, good);
    auto lab = io::npy_header_bytes("<f4", {4});
    lab.resize(lab.size() + 16);
    write_file(dir.file("l.npy"), lab);
    auto e = expect_format_error([&] { io::npy_reader r(path, {.labels_path = dir.file("l.npy")}); });
    CHECK(e.file() == dir.file("l.npy"));
    CHECK(e.cause().find("integer") != std::string::npos);
  }
  SUBCASE("rows of no elements (shape (10, 0)): refused at open, naming the shape, for npy_any too") {
    write_file(path, io::npy_header_bytes("<f4", {10, 0}));
    auto e = expect_format_error(open);
    CHECK(e.file() == path);
    CHECK(e.cause().find("shape (10, 0)") != std::string::npos);
    CHECK(e.cause().find("hold no elements") != std::string::npos);
    e = expect_format_error([&] { io::npy_any a({{"x", path}}); });
    CHECK(e.file() == path);
  }
}
