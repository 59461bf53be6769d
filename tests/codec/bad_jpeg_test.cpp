// Bad JPEG input: empty, garbage, wrong magic, truncated, corrupt header, absurd dimensions — each a
// sluice::format_error with a cause, never a crash or a grey image returned as if nothing happened.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
std::vector<std::byte> small_jpeg() {
  std::vector<std::uint8_t> px(48 * 40 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 7) ^ (i >> 5));
  return encode_jpeg(px, 48, 40, pixels::rgb, 90);
}
std::string decode_error(std::span<const std::byte> in) {
  jpeg dec({.width = 16, .height = 16});
  std::vector<std::byte> out(dec.output_bytes());
  try {
    dec.decode(in, out, {});
  } catch (const format_error& e) {
    return e.cause();
  }
  return "";
}
// Offset of the SOF0 marker's height field (FF C0 len(2) precision(1) height(2) width(2)).
std::size_t sof_dims(const std::vector<std::byte>& j) {
  for (std::size_t i = 0; i + 9 < j.size(); ++i)
    if (j[i] == std::byte{0xff} && j[i + 1] == std::byte{0xc0}) return i + 5;
  FAIL("no SOF0 marker");
  return 0;
}
}  // namespace

TEST_CASE("jpeg bad input: each case is a format_error with a cause") {
  const auto good = small_jpeg();
  CHECK(decode_error(good).empty());  // control (CHECK, not REQUIRE: doctest loops on a fatal before subcases)

  SUBCASE("the thread's decoder recovers after every kind of error") {
    for (int k = 1; k < 10; ++k) {
      std::vector<std::byte> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() * k / 10));
      CHECK_FALSE(decode_error(b).empty());
      CHECK(decode_error(good).empty());
    }
  }

  SUBCASE("empty") { CHECK(decode_error({}).find("empty") != std::string::npos); }
  SUBCASE("random garbage") {
    for (std::uint64_t seed = 0; seed < 20; ++seed) CHECK_FALSE(decode_error(sluice_test::random_bytes(1 + seed * 97, seed)).empty());
  }
  SUBCASE("wrong magic (a PNG signature)") {
    auto b = good;
    const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    std::memcpy(b.data(), png, 8);
    CHECK_FALSE(decode_error(b).empty());
  }
  SUBCASE("truncated at every tenth of its length") {
    for (int k = 1; k < 10; ++k) {
      std::vector<std::byte> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() * k / 10));
      CHECK_MESSAGE(!decode_error(b).empty(), "truncated to " << b.size() << " of " << good.size());
    }
  }
  SUBCASE("cut near the end: the intact image or an error, never other pixels; only the end marker may be missing") {
    // A baseline JPEG whose data stops where its FF D9 end-of-image marker should be decodes to the
    // intact file's pixels, as PIL and libjpeg's djpeg take it; a progressive one is refused, as PIL
    // refuses it (cut at a scan boundary it would decode at a lower quality).
    std::vector<std::uint8_t> px(48 * 40 * 3);
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 7) ^ (i >> 5));
    jpeg dec({.width = 48, .height = 40});
    auto pixels_of = [&](std::span<const std::byte> in, std::vector<std::byte>& out) {
      out.assign(dec.output_bytes(), std::byte{0});
      try {
        dec.decode(in, out, {});
        return true;
      } catch (const format_error&) {
        return false;
      }
    };
    for (const bool progressive : {false, true}) {
      tjhandle tj = tjInitCompress();
      unsigned char* buf = nullptr;
      unsigned long size = 0;
      REQUIRE(tjCompress2(tj, px.data(), 48, 48 * 3, 40, TJPF_RGB, &buf, &size, TJSAMP_420, 90,
                          progressive ? TJFLAG_PROGRESSIVE : 0) == 0);
      const std::vector<std::byte> j(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
      tjFree(buf);
      tjDestroy(tj);
      std::vector<std::byte> want, got;
      REQUIRE(pixels_of(j, want));
      CHECK(pixels_of(std::span(j).first(j.size() - 2), got) == !progressive);  // no FF D9
      if (!progressive) CHECK(got == want);
      for (std::size_t cut = 1; cut <= 64; ++cut)
        if (pixels_of(std::span(j).first(j.size() - cut), got))
          CHECK_MESSAGE(got == want, (progressive ? "progressive" : "baseline") << " JPEG cut by " << cut << " bytes");
    }
  }
  SUBCASE("zero height in the frame header") {
    auto b = good;
    auto at = sof_dims(b);
    b[at] = b[at + 1] = std::byte{0};
    CHECK_FALSE(decode_error(b).empty());
  }
  SUBCASE("header claims 65000x65000: refused before allocating") {
    auto b = good;
    auto at = sof_dims(b);
    b[at] = std::byte{0xfd}; b[at + 1] = std::byte{0xe8};
    b[at + 2] = std::byte{0xfd}; b[at + 3] = std::byte{0xe8};
    jpeg dec({.width = 16, .height = 16, .mode = fit::stretch}, {.dct_scaling = false});
    std::vector<std::byte> out(dec.output_bytes());
    try {
      dec.decode(b, out, {});
      FAIL("no error");
    } catch (const format_error& e) {
      CHECK(std::string(e.cause()).find("max_decoded_pixels") != std::string::npos);
    }
  }
  SUBCASE("destination too small is a usage error") {
    jpeg dec({.width = 16, .height = 16});
    std::vector<std::byte> out(10);
    CHECK_THROWS_AS(dec.decode(good, out, {}), usage_error);
  }
}
