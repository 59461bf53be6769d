// JPEG colour spaces: grey JPEGs decode to RGB (the grey three times) and CMYK/YCCK JPEGs, which
// libjpeg cannot convert to RGB, decode to RGB or grey through the codec's own conversion —
// Adobe's inverted CMYK included. Test images are made with TurboJPEG's compressor
// (TJPF_CMYK writes a YCCK JPEG with the Adobe marker, as Photoshop does; TJSAMP_GRAY a grey one).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sluice/codec/jpeg.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
std::vector<std::byte> compress(const std::vector<std::uint8_t>& px, int w, int h, int pf, int samp, int quality = 95) {
  tjhandle c = tjInitCompress();
  REQUIRE(c != nullptr);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(c, px.data(), w, 0, h, pf, &buf, &size, samp, quality, 0);
  std::string err = rc != 0 ? tjGetErrorStr2(c) : "";
  tjDestroy(c);
  REQUIRE_MESSAGE(rc == 0, err);
  std::vector<std::byte> out(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
  tjFree(buf);
  return out;
}
// What libjpeg itself decodes the JPEG to, in pixel format pf (the reference for exact checks).
std::vector<std::uint8_t> tj_decode(const std::vector<std::byte>& jpg, int w, int h, int pf) {
  tjhandle d = tjInitDecompress();
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * tjPixelSize[pf]);
  const int rc = tjDecompress2(d, reinterpret_cast<const unsigned char*>(jpg.data()), static_cast<unsigned long>(jpg.size()),
                               px.data(), w, 0, h, pf, 0);
  tjDestroy(d);
  REQUIRE(rc == 0);
  return px;
}
std::vector<std::uint8_t> decode_native(const std::vector<std::byte>& jpg, int w, int h, pixels f) {
  const jpeg dec({.width = w, .height = h, .mode = fit::stretch}, {.format = f});
  std::vector<std::byte> out(dec.output_bytes());
  dec.decode(jpg, out, {});
  std::vector<std::uint8_t> u(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) u[i] = std::to_integer<std::uint8_t>(out[i]);
  return u;
}
// Four flat 16 × 16 blocks of stored CMYK values (Adobe inverted: 255 = no ink) side by side.
struct cmyk_block {
  std::uint8_t c, m, y, k;
  std::uint8_t r, g, b;  // the RGB they stand for
};
const cmyk_block kBlocks[] = {
    {255, 255, 255, 255, 255, 255, 255},  // no ink: white
    {255, 255, 255, 0, 0, 0, 0},          // full black ink
    {0, 255, 255, 255, 0, 255, 255},      // full cyan: (0, 255, 255)
    {255, 127, 255, 255, 255, 127, 255},  // half magenta
};
}  // namespace

TEST_CASE("jpeg colour: a grey JPEG decodes to RGB with R = G = B = the grey decode") {
  const int w = 40, h = 24;
  std::vector<std::uint8_t> g(static_cast<std::size_t>(w) * h);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<std::uint8_t>((i * 13) % 251);
  const auto jpg = compress(g, w, h, TJPF_GRAY, TJSAMP_GRAY);
  CHECK(read_jpeg_header(jpg).colorspace == TJCS_GRAY);
  const auto grey = decode_native(jpg, w, h, pixels::grey);
  const auto rgb = decode_native(jpg, w, h, pixels::rgb);
  REQUIRE(rgb.size() == grey.size() * 3);
  bool same = true;
  for (std::size_t i = 0; i < grey.size(); ++i)
    same = same && rgb[3 * i] == grey[i] && rgb[3 * i + 1] == grey[i] && rgb[3 * i + 2] == grey[i];
  CHECK(same);
  // Resized output works too (DCT-scaled decode of a grey JPEG into RGB).
  const jpeg small({.width = 10, .height = 6});
  std::vector<std::byte> out(small.output_bytes());
  small.decode(jpg, out, {});
}

TEST_CASE("jpeg colour: CMYK (YCCK, Adobe inverted) decodes to the RGB its inks stand for") {
  const int w = 64, h = 16;
  std::vector<std::uint8_t> cmyk(static_cast<std::size_t>(w) * h * 4);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const auto& b = kBlocks[x / 16];
      auto* p = &cmyk[(static_cast<std::size_t>(y) * w + x) * 4];
      p[0] = b.c, p[1] = b.m, p[2] = b.y, p[3] = b.k;
    }
  for (int samp : {TJSAMP_444, TJSAMP_420}) {
    INFO("subsampling " << samp);
    const auto jpg = compress(cmyk, w, h, TJPF_CMYK, samp, 100);
    CHECK(read_jpeg_header(jpg).colorspace == TJCS_YCCK);
    CHECK(codecs::detail::has_adobe_marker(jpg));
    const auto rgb = decode_native(jpg, w, h, pixels::rgb);
    // Exactly the conversion of what libjpeg decodes (stored values × K / 255, rounded).
    const auto ref = tj_decode(jpg, w, h, TJPF_CMYK);
    bool exact = true;
    for (int i = 0; i < w * h; ++i)
      for (int k = 0; k < 3; ++k)
        exact = exact && rgb[3 * i + k] == (ref[4 * i + k] * ref[4 * i + 3] + 127) / 255;
    CHECK(exact);
    // And, in the middle of each flat block, the colour the inks stand for (JPEG error aside).
    for (int blk = 0; blk < 4; ++blk) {
      const std::size_t i = (static_cast<std::size_t>(h / 2) * w + blk * 16 + 8) * 3;
      CHECK(std::abs(rgb[i] - kBlocks[blk].r) <= 3);
      CHECK(std::abs(rgb[i + 1] - kBlocks[blk].g) <= 3);
      CHECK(std::abs(rgb[i + 2] - kBlocks[blk].b) <= 3);
    }
    // Grey output: the JFIF luma of that RGB.
    const auto grey = decode_native(jpg, w, h, pixels::grey);
    bool luma = true;
    for (int i = 0; i < w * h; ++i)
      luma = luma && grey[i] == ((19595 * rgb[3 * i] + 38470 * rgb[3 * i + 1] + 7471 * rgb[3 * i + 2] + 32768) >> 16);
    CHECK(luma);
    // Through the DCT-scaled, resized, CHW path.
    const jpeg small({.width = 16, .height = 4, .mode = fit::stretch, .layout = image_layout::chw});
    std::vector<std::byte> out(small.output_bytes());
    small.decode(jpg, out, {});
    CHECK(std::abs(std::to_integer<int>(out[2 * 16 + 8]) - 0) <= 3);  // block 2 (cyan): R plane ≈ 0
  }
}

TEST_CASE("jpeg colour: CMYK conversion without the Adobe marker takes the values as ink") {
  std::uint8_t px[8] = {0, 0, 0, 0, 255, 0, 0, 0};  // no ink; full cyan
  codecs::detail::cmyk_to(px, 2, 3, false);
  CHECK(px[0] == 255);
  CHECK(px[1] == 255);
  CHECK(px[2] == 255);
  CHECK(px[3] == 0);
  CHECK(px[4] == 255);
  CHECK(px[5] == 255);
  std::uint8_t inv[4] = {0, 255, 255, 255};  // inverted: full cyan
  codecs::detail::cmyk_to(inv, 1, 3, true);
  CHECK(inv[0] == 0);
  CHECK(inv[1] == 255);
  CHECK(inv[2] == 255);
  // Marker scan: a JPEG without APP14 says no; a truncated segment is not read past.
  std::vector<std::uint8_t> g(64, 100);
  const auto plain = compress(g, 8, 8, TJPF_GRAY, TJSAMP_GRAY);
  CHECK_FALSE(codecs::detail::has_adobe_marker(plain));
  CHECK_FALSE(codecs::detail::has_adobe_marker(std::span(plain).first(5)));
}
