// sluice/codec/image.hpp — one codec for datasets that mix JPEG and PNG: picks by the first bytes.
//
// Needs both optional targets, sluice::jpeg and sluice::png.
//
// codecs::image holds a codecs::jpeg and a codecs::png built from the same options, and hands
// each record to the one its magic bytes name (JPEG: FF D8 FF; PNG: the 8-byte PNG signature),
// whatever the file was called. Output, geometry and augmentation are the same for both — a
// sample's crop and flip depend on (seed, epoch, id), not on its format — so a batch may hold
// both. Anything else is a sluice::format_error that says what the bytes look like (GIF, WebP,
// BMP, TIFF, HEIF/AVIF, JPEG 2000, gzip, an HTML or JSON text, ...), which is usually the clue to
// a mislabelled or corrupt record. There is no alpha option: JPEGs have none, and a batch needs one
// channel count (use codecs::png directly for RGBA).
//
//   auto loader = sluice::from(sampler) | sluice::read(wds)         // .jpg and .png members
//               | sluice::decode<"img">(sluice::codecs::image{{.width = 224, .height = 224}})
//               | sluice::collate({.batch = 64}, sluice::stack<"img">{}) | sluice::prefetch(2);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "sluice/codec/jpeg.hpp"
#include "sluice/codec/png.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"

namespace sluice::codecs {

// What an image decode does beyond the geometry: a JPEG's options, of which PNG uses `format` and
// `max_decoded_pixels` (dct_scaling and fast_dct are JPEG's only).
using image_options = jpeg_options;

enum class image_format { unknown, jpeg, png };

// The format the first bytes announce: JPEG (SOI then a marker) or PNG (its full signature).
inline image_format sniff_image(std::span<const std::byte> in) noexcept {
  auto b = [&](std::size_t i) { return std::to_integer<unsigned char>(in[i]); };
  if (in.size() >= 3 && b(0) == 0xff && b(1) == 0xd8 && b(2) == 0xff) return image_format::jpeg;
  if (in.size() >= 8) {
    bool png = true;
    for (std::size_t i = 0; i < 8; ++i) png = png && b(i) == detail::png_signature[i];
    if (png) return image_format::png;
  }
  return image_format::unknown;
}

// What an unrecognised input looks like, in words, for the error message.
inline std::string describe_image_bytes(std::span<const std::byte> in) {
  if (in.empty()) return "empty input";
  const auto n = in.size();
  auto b = [&](std::size_t i) { return i < n ? std::to_integer<unsigned char>(in[i]) : 0u; };
  auto starts = [&](std::string_view s, std::size_t at = 0) {
    if (n < at + s.size()) return false;
    for (std::size_t i = 0; i < s.size(); ++i)
      if (b(at + i) != static_cast<unsigned char>(s[i])) return false;
    return true;
  };
  if (starts("GIF87a") || starts("GIF89a")) return "a GIF image (not supported)";
  if (starts("RIFF") && starts("WEBP", 8)) return "a WebP image (not supported)";
  if (starts("BM")) return "a BMP image (not supported)";
  if (starts("II*") || starts("MM")) {
    if ((b(2) == 0x2a && b(3) == 0) || (b(2) == 0 && b(3) == 0x2a)) return "a TIFF image (not supported)";
  }
  if (starts("ftyp", 4)) {
    if (starts("avif", 8) || starts("avis", 8)) return "an AVIF image (not supported)";
    if (starts("heic", 8) || starts("heix", 8) || starts("mif1", 8) || starts("msf1", 8)) return "a HEIF/HEIC image (not supported)";
    return "an ISO media file (MP4/MOV/HEIF family; not supported)";
  }
  if (starts(std::string_view("\x00\x00\x00\x0cjP  ", 10)) || starts("\xff\x4f\xff\x51")) return "a JPEG 2000 image (not supported)";
  if (b(0) == 0xff && b(1) == 0xd8) return "a truncated JPEG (SOI without a marker after it)";
  if (b(0) == 0x89 && starts("PNG", 1)) return "a damaged PNG signature";
  if (starts("\x1f\x8b")) return "gzip-compressed data";
  if (starts("%PDF")) return "a PDF document";
  if (starts("PK\x03\x04")) return "a ZIP archive";
  if (starts("ustar", 257)) return "a tar archive";
  if (starts("\x93NUMPY")) return "a NumPy .npy array";
  // Text: the first bytes are printable ASCII or whitespace.
  std::size_t printable = 0, k = n < 64 ? n : 64;
  for (std::size_t i = 0; i < k; ++i) {
    const unsigned c = b(i);
    if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t') ++printable;
  }
  if (printable == k) {
    std::size_t i = 0;
    while (i < k && (b(i) == ' ' || b(i) == '\n' || b(i) == '\r' || b(i) == '\t')) ++i;
    if (i < k && b(i) == '<') return "text (HTML or XML; an error page saved as an image?)";
    if (i < k && (b(i) == '{' || b(i) == '[')) return "text (JSON)";
    return "text";
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string first;
  for (std::size_t i = 0; i < (n < 8 ? n : 8); ++i) {
    if (i) first += ' ';
    first += hex[b(i) >> 4];
    first += hex[b(i) & 15];
  }
  return "unknown data starting " + first;
}

class image {
 public:
  using codec_concept = codec_tag;

  image() : image(geometry_options{}) {}
  explicit image(geometry_options g, image_options o = {})
      : opt_(o),
        jpeg_(g, o),
        png_(g, {.format = o.format, .keep_alpha = false, .max_decoded_pixels = o.max_decoded_pixels}) {}

  [[nodiscard]] int channels() const noexcept { return jpeg_.channels(); }
  [[nodiscard]] std::size_t output_bytes() const noexcept { return jpeg_.output_bytes(); }
  [[nodiscard]] const image_options& options() const noexcept { return opt_; }
  [[nodiscard]] field_geometry geometry() const noexcept { return jpeg_.geometry(); }
  [[nodiscard]] const geometry_options& transform_options() const noexcept { return jpeg_.transform_options(); }
  // Sample ctx's geometry for this image (reads the header only), JPEG or PNG alike.
  [[nodiscard]] image_transform plan(std::span<const std::byte> in, const sample_context& ctx) const {
    switch (sniff_image(in)) {
      case image_format::jpeg: return jpeg_.plan(in, ctx);
      case image_format::png: return png_.plan(in, ctx);
      case image_format::unknown: break;
    }
    unknown(in);
  }

  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context& ctx) const {
    switch (sniff_image(in)) {
      case image_format::jpeg: return jpeg_.decode(in, out, ctx);
      case image_format::png: return png_.decode(in, out, ctx);
      case image_format::unknown: break;
    }
    unknown(in);
  }
  void decode_with(std::span<const std::byte> in, std::span<std::byte> out, const image_transform& t) const {
    switch (sniff_image(in)) {
      case image_format::jpeg: return jpeg_.decode_with(in, out, t);
      case image_format::png: return png_.decode_with(in, out, t);
      case image_format::unknown: break;
    }
    unknown(in);
  }

 private:
  [[noreturn]] static void unknown(std::span<const std::byte> in) {
    throw format_error("<image data>", {}, "neither JPEG nor PNG: " + describe_image_bytes(in));
  }

  image_options opt_;
  jpeg jpeg_;
  png png_;
};

static_assert(sluice::codec<image>);

}  // namespace sluice::codecs
