// sluice/codec/mask.hpp — segmentation masks that follow an image's geometry: PNG class ids,
// resampled nearest-neighbour through the image's transform.
//
// Needs the sluice::png CMake target (libpng; defines SLUICE_WITH_PNG=1), as codec/png.hpp.
//
// mask<"seg.png">{.ignore_index = 255} follows the image of decode<"jpg">(codec, mask<...>{}): when
// a collator writes the sample, the mask's PNG (grey or palette; the stored values are the ids,
// never colours) is decoded at source size and resampled nearest-neighbour through the very
// transform the image was decoded with, so every output id is an id of the source, or
// ignore_index where the window leaves the image. The field becomes u8 {out_h, out_w}. any_mask is
// the same for run-time samples.
// Errors: a mask of another size than its image (both sizes named), a colour PNG, or a header that
// does not read is a format_error found when the stage runs; a corrupt body when collate decodes
// it; both name the file, the record and the field, and on_error::skip skips the sample.
// Threads and memory: libpng's memory from the thread's arena, the ids in a thread_local scratch;
// nothing allocated per mask once warm. Every rule: docs/decode.md.
#pragma once

#include <png.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/codec/png.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/stage/any_decode.hpp"
#include "sluice/stage/decode.hpp"

namespace sluice::codecs {

namespace detail {
// Reads every row of a grey or palette PNG as stored: one byte a pixel for depths <= 8 (unpacked,
// not scaled; palette indices, not colours), two (big-endian) for 16. C-style: see png.hpp.
inline int png_read_ids_c(png_structp png, png_infop info, unsigned char* out, std::size_t pitch, std::uint32_t rows) {
  if (setjmp(png_jmpbuf(png))) return 1;
  if (png_get_bit_depth(png, info) < 8) png_set_packing(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 1 || png_get_rowbytes(png, info) != pitch)
    png_error(png, "unexpected pixel layout of a mask");
  for (int p = 0; p < passes; ++p)
    for (std::uint32_t y = 0; y < rows; ++y) png_read_row(png, out + y * pitch, nullptr);
  png_read_end(png, nullptr);
  return 0;
}

inline const char* png_kind_name(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return "grey";
    case PNG_COLOR_TYPE_GRAY_ALPHA: return "grey + alpha";
    case PNG_COLOR_TYPE_PALETTE: return "palette";
    case PNG_COLOR_TYPE_RGB: return "RGB";
    case PNG_COLOR_TYPE_RGB_ALPHA: return "RGBA";
    default: return "unknown";
  }
}

// A header a mask may have (see the top of this file), and the size of the image it follows.
inline void check_mask_header(const png_header& h, int image_w, int image_h) {
  if (h.color_type != PNG_COLOR_TYPE_GRAY && h.color_type != PNG_COLOR_TYPE_PALETTE)
    throw format_error("<png data>", {},
                       std::string("a mask PNG holds class ids as grey or palette indices; this one is ") +
                           png_kind_name(h.color_type) + " (a colour-coded mask needs a colour -> id map first)");
  if (h.width != image_w || h.height != image_h)
    throw format_error("<png data>", {},
                       "the mask is " + std::to_string(h.width) + "x" + std::to_string(h.height) +
                           " but the image is " + std::to_string(image_w) + "x" + std::to_string(image_h) +
                           " (a mask must be the size of its image)");
}
}  // namespace detail

// The header of a mask PNG, checked against the size of the image it follows (format_error if it
// cannot be read, is not grey or palette, or has another size).
inline png_header read_mask_header(std::span<const std::byte> in, int image_w, int image_h) {
  const png_header h = read_png_header(in);
  detail::check_mask_header(h, image_w, image_h);
  return h;
}

// Decodes mask PNG `in` (t.src_width × t.src_height) to its ids and writes them through `t`,
// nearest-neighbour, into out (t.out_width × t.out_height bytes); `fill` where the window leaves
// the image.
inline void decode_mask(std::span<const std::byte> in, std::span<std::byte> out, const image_transform& t,
                        std::uint8_t fill) {
  if (in.empty()) throw format_error("<png data>", {file_position::npos, 0}, "empty PNG input");
  if (out.size() < static_cast<std::size_t>(t.out_width) * static_cast<std::size_t>(t.out_height))
    throw usage_error("sluice: decode_mask destination is smaller than the transform's output");
  detail::png_reader r(in);
  png_header h;
  if (detail::png_read_header_c(r.png, r.info, &h, PNG_UINT_31_MAX) != 0) detail::png_fail(r.src, "header");
  detail::check_mask_header(h, t.src_width, t.src_height);  // before anything the image's size exists
  const bool wide = h.bit_depth == 16;
  const std::size_t w = static_cast<std::size_t>(h.width), pitch = w * (wide ? 2 : 1);
  thread_local std::vector<std::uint8_t> ids;
  if (ids.size() < pitch * static_cast<std::size_t>(h.height)) ids.resize(pitch * static_cast<std::size_t>(h.height));
  if (detail::png_read_ids_c(r.png, r.info, ids.data(), pitch, static_cast<std::uint32_t>(h.height)) != 0)
    detail::png_fail(r.src, "decode");
  if (wide) {  // 16-bit ids that fit u8: packed in place to one byte each (i <= 2i: safe forwards)
    const std::size_t n = w * static_cast<std::size_t>(h.height);
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned v = (unsigned{ids[2 * i]} << 8) | ids[2 * i + 1];
      if (v > 255)
        throw format_error("<png data>", {},
                           "16-bit mask value " + std::to_string(v) + " at (" + std::to_string(i % w) + ", " +
                               std::to_string(i / w) + ") does not fit a u8 class id");
      ids[i] = static_cast<std::uint8_t>(v);
    }
  }
  resample_nearest(ids.data(), h.width, h.height, w, out, t, fill);
}

}  // namespace sluice::codecs

namespace sluice {

// mask<"seg.png">{.ignore_index = 255}: field "seg.png" (a PNG of class ids, see the top of this
// file) follows the image of decode<"img">(codec, mask<"seg.png">{}) — a rendered follower
// (stage/decode.hpp): the sample's field becomes u8 {out_h, out_w}.
template <fixed_string Field>
struct mask {
  std::uint8_t ignore_index = 255;  // where the transform's window lies outside the image

  using follower_concept = rendered_follower_tag;
  using value_type = std::uint8_t;
  static constexpr auto field = Field;
  template <fixed_string N>
  static constexpr bool carries = N == Field;

  [[nodiscard]] std::size_t output_bytes(const codecs::image_transform& t) const noexcept {
    return static_cast<std::size_t>(t.out_width) * static_cast<std::size_t>(t.out_height);
  }
  [[nodiscard]] field_geometry geometry(const codecs::image_transform& t) const noexcept {
    field_geometry g{.ndim = 2};
    g.shape[0] = t.out_height;
    g.shape[1] = t.out_width;
    return g;
  }
  void check(std::span<const std::byte> in, const codecs::image_transform& t) const {
    (void)codecs::read_mask_header(in, t.src_width, t.src_height);
  }
  void render(std::span<const std::byte> in, std::span<std::byte> out, const codecs::image_transform& t) const {
    codecs::decode_mask(in, out, t, ignore_index);
  }
};

// The same for run-time samples: field `field` (a PNG of class ids) follows the image of
// any_decode_stage::add(image, codec, {any_mask("seg", 255), ...}) (stage/any_decode.hpp).
inline any_follower any_mask(std::string field, std::uint8_t ignore_index = 255) {
  return any_rendered(std::move(field), mask<"">{ignore_index});
}

}  // namespace sluice
