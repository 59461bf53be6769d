// Tests for sluice/io/idx.hpp on small generated files: round trip, gzip, and each way a file can
// be wrong (magic, type, dims, truncation, trailing bytes, counts that disagree, gzip damage).
#include <doctest/doctest.h>

#include <sluice/io/idx.hpp>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.hpp"

#if defined(SLUICE_WITH_ZLIB) && SLUICE_WITH_ZLIB
#  include <zlib.h>
#endif

namespace {

using bytes = std::vector<std::byte>;

void put_be32(bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::byte>((v >> s) & 0xff));
}

bytes idx_header(std::uint8_t type, std::vector<std::uint32_t> dims) {
  bytes b{std::byte{0}, std::byte{0}, std::byte{type}, static_cast<std::byte>(dims.size())};
  for (auto d : dims) put_be32(b, d);
  return b;
}

// n images of r x c, pixel (i, k) = (i * 7 + k) & 0xff; labels i % 10.
bytes make_images(std::uint32_t n, std::uint32_t r, std::uint32_t c) {
  bytes b = idx_header(0x08, {n, r, c});
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = 0; k < r * c; ++k) b.push_back(static_cast<std::byte>((i * 7 + k) & 0xff));
  return b;
}
bytes make_labels(std::uint32_t n) {
  bytes b = idx_header(0x08, {n});
  for (std::uint32_t i = 0; i < n; ++i) b.push_back(static_cast<std::byte>(i % 10));
  return b;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const sluice::format_error& e) {
    return e.what();
  }
  return "<no error>";
}

#if defined(SLUICE_WITH_ZLIB) && SLUICE_WITH_ZLIB
bytes gzip(const bytes& in) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  bytes out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}
#endif

}  // namespace

TEST_CASE("idx: images and labels round trip through the record_reader interface") {
  sluice_test::temp_dir dir;
  sluice_test::write_file(dir.file("img"), make_images(13, 4, 3));
  sluice_test::write_file(dir.file("lbl"), make_labels(13));
  sluice::io::idx_reader r(dir.file("img"), dir.file("lbl"));
  CHECK(r.size() == 13);
  CHECK(r.rows() == 4);
  CHECK(r.cols() == 3);
  CHECK(r.record_bytes() == 12);
  CHECK(r.has_labels());
  CHECK(r.path() == dir.file("img"));
  for (std::size_t i = 0; i < r.size(); ++i) {
    auto rec = r.record(i);
    REQUIRE(rec.size() == 12);
    for (std::size_t k = 0; k < 12; ++k) CHECK(static_cast<unsigned>(rec[k]) == ((i * 7 + k) & 0xff));
    CHECK(r.label(i) == static_cast<std::int64_t>(i % 10));
  }
  CHECK(r.labels().size() == 13);
  CHECK_THROWS_AS((void)r.record(13), sluice::format_error);
  CHECK(!r.images().compressed());
}

TEST_CASE("idx: without a labels file every label is -1") {
  sluice_test::temp_dir dir;
  sluice_test::write_file(dir.file("img"), make_images(3, 2, 2));
  sluice::io::idx_reader r(dir.file("img"));
  CHECK(r.size() == 3);
  CHECK(!r.has_labels());
  CHECK(r.label(0) == -1);
}

TEST_CASE("idx: malformed files name the file, offset and cause") {
  sluice_test::temp_dir dir;
  const auto p = dir.file("bad");
  auto open = [&] { sluice::io::idx_file f(p); };

  sluice_test::write_file(p, bytes{std::byte{0}, std::byte{0}});
  auto e = error_of(open);
  CHECK(e.find(p) != std::string::npos);
  CHECK(e.find("truncated header") != std::string::npos);

  auto b = make_images(2, 2, 2);
  b[1] = std::byte{1};
  sluice_test::write_file(p, b);
  e = error_of(open);
  CHECK(e.find("wrong magic") != std::string::npos);
  CHECK(e.find("byte offset 0") != std::string::npos);

  b = make_images(2, 2, 2);
  b[2] = std::byte{0x42};
  sluice_test::write_file(p, b);
  e = error_of(open);
  CHECK(e.find("unknown element type 0x42") != std::string::npos);
  CHECK(e.find("byte offset 2") != std::string::npos);

  b = make_images(5, 2, 2);  // header 16 bytes, 20 data bytes
  b.resize(16 + 11);         // two whole items and a part
  sluice_test::write_file(p, b);
  e = error_of(open);
  CHECK(e.find("truncated") != std::string::npos);
  CHECK(e.find("record 2") != std::string::npos);
  CHECK(e.find("byte offset 24") != std::string::npos);

  b = make_images(2, 2, 2);
  b.push_back(std::byte{9});
  sluice_test::write_file(p, b);
  e = error_of(open);
  CHECK(e.find("dimensions mismatch") != std::string::npos);
  CHECK(e.find("1 trailing") != std::string::npos);

  // A header that claims 4 G items of 4 G bytes must be refused before anything is allocated.
  b = idx_header(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu});
  sluice_test::write_file(p, b);
  e = error_of(open);
  CHECK(e.find("truncated") != std::string::npos);

  b = idx_header(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu});  // overflows 64 bits
  sluice_test::write_file(p, b);
  e = error_of(open);
  CHECK(e.find("overflow") != std::string::npos);

  b = idx_header(0x08, {3, 7});
  b.resize(b.size() - 2);  // dims cut short
  sluice_test::write_file(p, b);
  CHECK(error_of(open).find("truncated header") != std::string::npos);
}

TEST_CASE("idx: images and labels must agree") {
  sluice_test::temp_dir dir;
  sluice_test::write_file(dir.file("img"), make_images(4, 2, 2));
  sluice_test::write_file(dir.file("lbl"), make_labels(5));
  auto e = error_of([&] { sluice::io::idx_reader r(dir.file("img"), dir.file("lbl")); });
  CHECK(e.find("counts disagree") != std::string::npos);
  CHECK(e.find(dir.file("lbl")) != std::string::npos);

  sluice_test::write_file(dir.file("lbl2"), make_images(4, 2, 2));  // 3-d "labels"
  e = error_of([&] { sluice::io::idx_reader r(dir.file("img"), dir.file("lbl2")); });
  CHECK(e.find("dimensions mismatch: a labels file must be 1-dimensional; this one has 3 dimensions") != std::string::npos);

  // 1-d labels of another type: the type named, not the dimensions.
  auto l32 = idx_header(0x0C, {4});
  l32.resize(l32.size() + 16);
  sluice_test::write_file(dir.file("lbl32"), l32);
  e = error_of([&] { sluice::io::idx_reader r(dir.file("img"), dir.file("lbl32")); });
  CHECK(e.find("labels of type int32 (0x0C); a labels file holds unsigned bytes (type 0x08)") != std::string::npos);
  CHECK(e.find("dimensions") == std::string::npos);

  sluice_test::write_file(dir.file("img1"), make_labels(4));  // 1-d "images"
  e = error_of([&] { sluice::io::idx_reader r(dir.file("img1")); });
  CHECK(e.find("at least 2 dimensions") != std::string::npos);
}

#if defined(SLUICE_WITH_ZLIB) && SLUICE_WITH_ZLIB
TEST_CASE("idx: gzip files are inflated and give the same records") {
  sluice_test::temp_dir dir;
  auto img = make_images(50, 5, 5);
  auto lbl = make_labels(50);
  sluice_test::write_file(dir.file("img.gz"), gzip(img));
  sluice_test::write_file(dir.file("lbl.gz"), gzip(lbl));
  sluice::io::idx_reader r(dir.file("img.gz"), dir.file("lbl.gz"));
  CHECK(r.images().compressed());
  REQUIRE(r.size() == 50);
  for (std::size_t i = 0; i < r.size(); ++i) {
    auto rec = r.record(i);
    CHECK(std::memcmp(rec.data(), img.data() + 16 + i * 25, 25) == 0);
    CHECK(r.label(i) == static_cast<std::int64_t>(i % 10));
  }

  // Two concatenated gzip members are one valid gzip stream.
  auto half1 = bytes(img.begin(), img.begin() + 100);
  auto half2 = bytes(img.begin() + 100, img.end());
  auto g = gzip(half1);
  auto g2 = gzip(half2);
  g.insert(g.end(), g2.begin(), g2.end());
  sluice_test::write_file(dir.file("cat.gz"), g);
  CHECK(sluice::io::idx_file(dir.file("cat.gz")).count() == 50);
}

TEST_CASE("idx: damaged gzip files and decompression bombs are refused") {
  sluice_test::temp_dir dir;
  auto g = gzip(make_images(50, 5, 5));
  const auto p = dir.file("x.gz");

  auto cut = bytes(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(g.size() / 2));
  sluice_test::write_file(p, cut);
  auto e = error_of([&] { sluice::io::idx_file f(p); });
  CHECK(e.find(p) != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);

  auto bad = g;
  for (std::size_t i = 12; i < 40; ++i) bad[i] ^= std::byte{0x5a};
  sluice_test::write_file(p, bad);
  e = error_of([&] { sluice::io::idx_file f(p); });
  CHECK(e.find("gzip") != std::string::npos);

  // A header claiming far more than the gzip holds: the check is against what inflated.
  auto liar = idx_header(0x08, {1000000, 28, 28});
  liar.resize(liar.size() + 100);
  sluice_test::write_file(p, gzip(liar));
  e = error_of([&] { sluice::io::idx_file f(p); });
  CHECK(e.find("decompressed stream") != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);

  // 4 MB of zeros behind a small header compresses to a few KB; with a 1 MB cap it is refused.
  auto bomb = idx_header(0x08, {4096, 32, 32});
  bomb.resize(bomb.size() + 4096 * 1024);
  sluice_test::write_file(p, gzip(bomb));
  e = error_of([&] { sluice::io::idx_file f(p, {.max_inflated_bytes = 1 << 20}); });
  CHECK(e.find("max_inflated_bytes") != std::string::npos);
  CHECK(sluice::io::idx_file(p).count() == 4096);  // the default cap lets it through
}

TEST_CASE("idx: gzip inflation is capped by the size the IDX header describes") {
  sluice_test::temp_dir dir;
  const auto p = dir.file("c.gz");

  // One 28 x 28 image, then 16 MiB of zeros: refused at the first byte past the 800 the header
  // describes, not after inflating all of it (which the 8 GiB default cap would have allowed).
  auto more = make_images(1, 28, 28);
  REQUIRE(more.size() == 16 + 784);
  more.resize(more.size() + (std::size_t{16} << 20));
  sluice_test::write_file(p, gzip(more));
  more = {};
  sluice::format_error fe("", {}, "");
  try {
    sluice::io::idx_file f(p);
    FAIL("no error");
  } catch (const sluice::format_error& e) {
    fe = e;
  }
  CHECK(fe.file() == p);
  CHECK(fe.offset() == 800);
  CHECK(fe.cause().find("more than the 800 bytes its IDX header describes") != std::string::npos);
  CHECK(fe.cause().find("1 x 28 x 28") != std::string::npos);
  CHECK(fe.cause().find("decompressed stream") != std::string::npos);

  // A header describing more than max_inflated_bytes is refused as soon as the header is out,
  // whatever follows.
  auto big = idx_header(0x08, {4096, 1024, 1024});  // 4 GiB of pixels
  big.resize(big.size() + 1000);
  sluice_test::write_file(p, gzip(big));
  auto e = error_of([&] { sluice::io::idx_file f(p, {.max_inflated_bytes = 1 << 20}); });
  CHECK(e.find("describes 4294967312 bytes") != std::string::npos);
  CHECK(e.find("max_inflated_bytes") != std::string::npos);

  // Fewer bytes than the header describes: truncated, in decompressed-stream terms.
  auto less = make_images(10, 4, 4);
  less.resize(less.size() - 20);
  sluice_test::write_file(p, gzip(less));
  e = error_of([&] { sluice::io::idx_file f(p); });
  CHECK(e.find("truncated") != std::string::npos);
  CHECK(e.find("decompressed stream") != std::string::npos);

  // Exactly what the header says, in two gzip members: accepted.
  auto exact = make_images(10, 4, 4);
  auto g = gzip(bytes(exact.begin(), exact.begin() + 50));
  auto g2 = gzip(bytes(exact.begin() + 50, exact.end()));
  g.insert(g.end(), g2.begin(), g2.end());
  sluice_test::write_file(p, g);
  CHECK(sluice::io::idx_file(p).count() == 10);

  // A stream that is not IDX at all stops inflating at its first bytes; parse() names the magic.
  auto junk = bytes(1 << 20, std::byte{0x41});
  sluice_test::write_file(p, gzip(junk));
  e = error_of([&] { sluice::io::idx_file f(p); });
  CHECK(e.find("wrong magic") != std::string::npos);
}
#endif

TEST_CASE("idx: Fashion-MNIST from the Debian package, when installed") {
  const std::string d = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(d + "t10k-images-idx3-ubyte.gz") ||
      !std::filesystem::exists(d + "t10k-labels-idx1-ubyte.gz"))
    sluice_test::skip("Fashion-MNIST not found in " + d + " (Debian package dataset-fashion-mnist)");
#if defined(SLUICE_WITH_ZLIB) && SLUICE_WITH_ZLIB
  sluice::io::idx_reader r(d + "t10k-images-idx3-ubyte.gz", d + "t10k-labels-idx1-ubyte.gz");
  CHECK(r.size() == 10000);
  CHECK(r.rows() == 28);
  CHECK(r.cols() == 28);
  std::array<int, 10> per_class{};
  for (std::size_t i = 0; i < r.size(); ++i) {
    auto l = r.label(i);
    REQUIRE(l >= 0);
    REQUIRE(l < 10);
    ++per_class[static_cast<std::size_t>(l)];
  }
  for (int c : per_class) CHECK(c == 1000);
#else
  CHECK_THROWS_AS(sluice::io::idx_file(d + "t10k-labels-idx1-ubyte.gz"), sluice::usage_error);
#endif
}
