// Test helper: PNGs of every kind, written with libpng's writer from raw sample values, plus the
// pixels a decoder must produce from them (8-bit, as codecs::png converts).
#pragma once

#include <png.h>

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice_test {

struct png_spec {
  int width = 13, height = 7;  // odd sizes: sub-byte rows end mid-byte
  int bit_depth = 8;
  int color_type = PNG_COLOR_TYPE_RGB;
  bool interlaced = false;
  std::vector<std::uint16_t> samples;      // width × height × channels raw values (palette: indices)
  std::vector<png_color> palette;          // PNG_COLOR_TYPE_PALETTE
  std::vector<std::uint8_t> palette_alpha; // tRNS for a palette (may be shorter than the palette)
};

inline int png_channels_of(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_PALETTE: return 1;
    case PNG_COLOR_TYPE_RGB: return 3;
    default: return 4;
  }
}

// A deterministic image whose samples use the whole range of the bit depth.
inline png_spec make_png_spec(int color_type, int bit_depth, bool interlaced, int w = 13, int h = 7) {
  png_spec s;
  s.width = w, s.height = h, s.bit_depth = bit_depth, s.color_type = color_type, s.interlaced = interlaced;
  const int c = png_channels_of(color_type);
  const std::uint32_t maxv = (1u << bit_depth) - 1;
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    const int n = 1 << bit_depth;
    for (int i = 0; i < n; ++i)
      s.palette.push_back({static_cast<png_byte>(i * 37 + 5), static_cast<png_byte>(255 - i * 11),
                           static_cast<png_byte>(i * 73 % 256)});
  }
  std::uint32_t x = 12345;
  for (int i = 0; i < w * h * c; ++i) {
    x = x * 1103515245u + 12345u;
    s.samples.push_back(static_cast<std::uint16_t>((x >> 8) % (maxv + 1)));
  }
  s.samples[0] = 0;
  if (s.samples.size() > 1) s.samples[1] = static_cast<std::uint16_t>(maxv);
  return s;
}

namespace detail {
struct png_sink {
  std::vector<std::uint8_t>* out;
};
extern "C" {
inline void test_png_write(png_structp png, png_bytep data, png_size_t n) {
  auto* s = static_cast<png_sink*>(png_get_io_ptr(png));
  s->out->insert(s->out->end(), data, data + n);
}
inline void test_png_flush(png_structp) {}
}
// setjmp confined here: nothing with a destructor lives in this frame.
inline int write_png_c(png_structp png, png_infop info, const png_spec* s, png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return 1;
  png_set_IHDR(png, info, static_cast<png_uint_32>(s->width), static_cast<png_uint_32>(s->height), s->bit_depth,
               s->color_type, s->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s->palette.empty()) png_set_PLTE(png, info, s->palette.data(), static_cast<int>(s->palette.size()));
  if (!s->palette_alpha.empty())
    png_set_tRNS(png, info, s->palette_alpha.data(), static_cast<int>(s->palette_alpha.size()), nullptr);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, info);
  return 0;
}
}  // namespace detail

inline std::vector<std::byte> write_png(const png_spec& s) {
  const int c = png_channels_of(s.color_type);
  const std::size_t rowbytes = (static_cast<std::size_t>(s.width) * c * s.bit_depth + 7) / 8;
  std::vector<std::uint8_t> px(rowbytes * s.height, 0);
  std::vector<png_bytep> rows;
  for (int y = 0; y < s.height; ++y) {
    std::uint8_t* row = px.data() + static_cast<std::size_t>(y) * rowbytes;
    rows.push_back(row);
    for (int i = 0; i < s.width * c; ++i) {
      const std::uint16_t v = s.samples[static_cast<std::size_t>(y) * s.width * c + i];
      if (s.bit_depth == 16) {
        row[2 * i] = static_cast<std::uint8_t>(v >> 8);
        row[2 * i + 1] = static_cast<std::uint8_t>(v);
      } else if (s.bit_depth == 8) {
        row[i] = static_cast<std::uint8_t>(v);
      } else {  // packed, most significant bits first
        const int bit = i * s.bit_depth;
        row[bit / 8] |= static_cast<std::uint8_t>(v << (8 - s.bit_depth - bit % 8));
      }
    }
  }
  std::vector<std::uint8_t> out;
  detail::png_sink sink{&out};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &sink, detail::test_png_write, detail::test_png_flush);
  const int rc = detail::write_png_c(png, info, &s, rows.data());
  png_destroy_write_struct(&png, &info);
  if (rc != 0) throw std::runtime_error("test: libpng could not write the PNG");
  std::vector<std::byte> b(out.size());
  std::memcpy(b.data(), out.data(), out.size());
  return b;
}

// What codecs::png must write at the image's own size (no resize), HWC: `rgb` 3 or 1 channels,
// plus alpha when `alpha`. Colour to grey is left to the caller (libpng's weights; compared ±1).
inline std::vector<std::uint8_t> expected_png_pixels(const png_spec& s, bool rgb, bool alpha) {
  const int c = png_channels_of(s.color_type);
  auto to8 = [&](std::uint16_t v) -> std::uint8_t {
    switch (s.bit_depth) {
      case 16: return static_cast<std::uint8_t>((v * 255u + 32767u) / 65535u);
      case 8: return static_cast<std::uint8_t>(v);
      default: return static_cast<std::uint8_t>(v * 255u / ((1u << s.bit_depth) - 1));
    }
  };
  std::vector<std::uint8_t> out;
  for (int p = 0; p < s.width * s.height; ++p) {
    const std::uint16_t* v = &s.samples[static_cast<std::size_t>(p) * c];
    std::uint8_t r = 0, g = 0, b = 0, a = 255;
    bool colour = true;
    switch (s.color_type) {
      case PNG_COLOR_TYPE_GRAY: r = g = b = to8(v[0]); colour = false; break;
      case PNG_COLOR_TYPE_GRAY_ALPHA: r = g = b = to8(v[0]); a = to8(v[1]); colour = false; break;
      case PNG_COLOR_TYPE_PALETTE:
        r = s.palette[v[0]].red, g = s.palette[v[0]].green, b = s.palette[v[0]].blue;
        if (v[0] < s.palette_alpha.size()) a = s.palette_alpha[v[0]];
        break;
      case PNG_COLOR_TYPE_RGB: r = to8(v[0]), g = to8(v[1]), b = to8(v[2]); break;
      default: r = to8(v[0]), g = to8(v[1]), b = to8(v[2]), a = to8(v[3]); break;
    }
    if (rgb) {
      out.insert(out.end(), {r, g, b});
    } else {
      // libpng's default Rec. 709 weights (6968, 23434, 2366) / 32768, rounded.
      out.push_back(colour ? static_cast<std::uint8_t>((6968u * r + 23434u * g + 2366u * b + 16384u) >> 15) : r);
    }
    if (alpha) out.push_back(a);
  }
  return out;
}

// CRC-32 as PNG chunks use it (for tests that edit a chunk and then make its CRC right again).
inline std::uint32_t png_crc(const std::byte* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= std::to_integer<std::uint32_t>(p[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

}  // namespace sluice_test
