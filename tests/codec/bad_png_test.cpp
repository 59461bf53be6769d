// Bad PNG input: empty, wrong magic, truncated at every byte, bad CRCs, zlib damage, zero and huge
// dimensions — each a sluice::format_error with libpng's cause, never a crash, a longjmp through
// C++ frames (ASan would see the leaked reader) or a half-decoded image returned as if fine.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "png_writer.hpp"
#include "sluice/codec/png.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
std::vector<std::byte> small_png(bool interlaced = false) {
  return sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB, 8, interlaced, 21, 11));
}
std::string decode_error(std::span<const std::byte> in, png_options o = {}) {
  const png dec({.width = 8, .height = 8}, o);
  std::vector<std::byte> out(dec.output_bytes());
  try {
    dec.decode(in, out, {});
  } catch (const format_error& e) {
    return e.cause().empty() ? "(empty cause)" : e.cause();
  }
  return "";
}
// Offset of the first chunk of this type (its length field); npos when absent.
std::size_t find_chunk(const std::vector<std::byte>& p, const char* type) {
  std::size_t at = 8;
  while (at + 12 <= p.size()) {
    const std::size_t len = (std::to_integer<std::size_t>(p[at]) << 24) | (std::to_integer<std::size_t>(p[at + 1]) << 16) |
                            (std::to_integer<std::size_t>(p[at + 2]) << 8) | std::to_integer<std::size_t>(p[at + 3]);
    if (std::memcmp(&p[at + 4], type, 4) == 0) return at;
    at += 12 + len;
  }
  return std::string::npos;
}
void put_be32(std::vector<std::byte>& p, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[at + i] = static_cast<std::byte>(v >> (24 - 8 * i));
}
// Sets IHDR's width and height and makes its CRC right again, so only the dimensions are wrong.
std::vector<std::byte> with_dimensions(std::vector<std::byte> p, std::uint32_t w, std::uint32_t h) {
  const std::size_t at = find_chunk(p, "IHDR");
  REQUIRE(at != std::string::npos);
  put_be32(p, at + 8, w);
  put_be32(p, at + 12, h);
  put_be32(p, at + 8 + 13, sluice_test::png_crc(&p[at + 4], 4 + 13));
  return p;
}
bool mentions(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }
}  // namespace

TEST_CASE("png bad input: each case is a format_error with a cause") {
  const auto good = small_png();
  CHECK(decode_error(good).empty());  // control

  SUBCASE("empty") { CHECK(mentions(decode_error({}), "empty")); }
  SUBCASE("wrong magic: a JPEG's, random bytes, a signature with one byte off") {
    std::vector<std::byte> jpeg_like(good);
    jpeg_like[0] = std::byte{0xff}, jpeg_like[1] = std::byte{0xd8}, jpeg_like[2] = std::byte{0xff};
    CHECK(mentions(decode_error(jpeg_like), "PNG header"));
    for (std::uint64_t seed = 0; seed < 20; ++seed) CHECK_FALSE(decode_error(sluice_test::random_bytes(1 + seed * 97, seed)).empty());
    for (std::size_t i = 0; i < 8; ++i) {
      auto b = good;
      b[i] ^= std::byte{0x20};
      CHECK_FALSE(decode_error(b).empty());
    }
  }
  SUBCASE("truncated at every byte, plain and interlaced") {
    for (bool interlaced : {false, true}) {
      const auto p = small_png(interlaced);
      CHECK(decode_error(p).empty());
      int failures = 0;
      for (std::size_t n = 0; n < p.size(); ++n) {
        const auto e = decode_error(std::span(p).first(n));
        if (e.empty()) ++failures;
        CHECK_MESSAGE(!e.empty(), "truncated to " << n << " of " << p.size());
      }
      CHECK(failures == 0);
    }
  }
  SUBCASE("bad CRC in IHDR and in IDAT") {
    for (const char* type : {"IHDR", "IDAT"}) {
      auto b = good;
      const std::size_t at = find_chunk(b, type);
      REQUIRE(at != std::string::npos);
      const std::size_t len = std::to_integer<std::size_t>(b[at + 3]) | (std::to_integer<std::size_t>(b[at + 2]) << 8);
      b[at + 8 + len] ^= std::byte{0x01};
      INFO(type);
      CHECK(mentions(decode_error(b), "CRC"));
    }
  }
  SUBCASE("damaged compressed data (CRC made right again) is a zlib error") {
    auto b = good;
    const std::size_t at = find_chunk(b, "IDAT");
    const std::size_t len = std::to_integer<std::size_t>(b[at + 3]) | (std::to_integer<std::size_t>(b[at + 2]) << 8);
    for (std::size_t i = 2; i < len; i += 3) b[at + 8 + i] ^= std::byte{0x5a};
    put_be32(b, at + 8 + len, sluice_test::png_crc(&b[at + 4], 4 + len));
    CHECK_FALSE(decode_error(b).empty());
  }
  SUBCASE("zero width or height") {
    CHECK(mentions(decode_error(with_dimensions(good, 0, 11)), "width"));
    CHECK(mentions(decode_error(with_dimensions(good, 21, 0)), "height"));
  }
  SUBCASE("huge dimensions are refused from the header, before the image is allocated") {
    // 1,000,000 × 1,000,000 × 3 bytes could not be allocated: a format_error (not bad_alloc)
    // shows the refusal came first.
    CHECK(mentions(decode_error(with_dimensions(good, 1000000, 1000000)), "max_decoded_pixels"));
    CHECK(mentions(decode_error(with_dimensions(good, 60000, 60000)), "max_decoded_pixels"));
    // One axis longer than the cap: libpng refuses it while reading IHDR.
    CHECK(mentions(decode_error(with_dimensions(good, 100000000, 1)), "limit"));
    // Beyond PNG's own 2^31 - 1.
    CHECK_FALSE(decode_error(with_dimensions(good, 0x80000000u, 1)).empty());
    // The cap is the codec's option: this 21 × 11 image is over a cap of 200 pixels.
    CHECK(mentions(decode_error(good, {.max_decoded_pixels = 200}), "21x11"));
    CHECK(decode_error(good, {.max_decoded_pixels = 231}).empty());
  }
  SUBCASE("a bad CRC on an ancillary chunk is ignored with the chunk") {
    auto s = sluice_test::make_png_spec(PNG_COLOR_TYPE_PALETTE, 8, false, 21, 11);
    s.palette_alpha = {0, 128};
    auto b = sluice_test::write_png(s);
    const std::size_t at = find_chunk(b, "tRNS");
    REQUIRE(at != std::string::npos);
    // tRNS is kept (it matters to keep_alpha); a CRC error there is an error only if libpng says
    // so — either way, never a crash.
    b[at + 8 + 2] ^= std::byte{0x01};
    (void)decode_error(b);
    (void)decode_error(b, {.keep_alpha = true});
  }
  SUBCASE("the header reader refuses the same inputs") {
    CHECK_THROWS_AS(read_png_header({}), format_error);
    CHECK_THROWS_AS(read_png_header(std::span(good).first(20)), format_error);
    CHECK_THROWS_AS(read_png_header(with_dimensions(good, 0, 1)), format_error);
    CHECK(read_png_header(with_dimensions(good, 60000, 60000)).width == 60000);
  }
}
