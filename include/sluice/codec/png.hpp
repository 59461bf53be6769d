// sluice/codec/png.hpp — PNG → fixed-size RGB, grey (optionally with alpha) uint8, through libpng.
//
// Needs the sluice::png CMake target (pkg-config libpng; defines SLUICE_WITH_PNG=1).
//
// The same codec as codecs::jpeg for the other format image datasets hold: every PNG kind (depths
// 1–16, grey, palette, RGB, alpha, interlaced) decodes to the output's pixels, resized, cropped
// and flipped by codec/transform.hpp's pass, in hwc or chw. 16-bit samples are scaled with
// rounding; alpha is dropped unless `.keep_alpha`; no colour management (ancillary chunks are
// ignored, which also defuses compressed-text bombs).
// Errors: a truncated stream, a bad CRC in a critical chunk, a zlib error, a wrong signature, a zero
// dimension, or an image past `max_decoded_pixels` (from the header, before any allocation) is a
// format_error with libpng's message. libpng's longjmps land in C-style functions, so no
// destructor is skipped.
// Threads: decode() is const and thread-safe; libpng's memory and the scratch image come from
// thread_local buffers, reused. Every rule: docs/images.md.
#pragma once

#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sluice/codec/transform.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice::codecs {

// What a PNG decode does beyond the geometry (codecs::geometry_options: size, fit, flip, layout).
struct png_options {
  pixels format = pixels::rgb;
  bool keep_alpha = false;  // add an alpha channel: RGBA (4) or grey + alpha (2)
  std::uint64_t max_decoded_pixels = std::uint64_t{1} << 26;  // 64 Mpixel
};

struct png_header {
  int width = 0, height = 0;
  int bit_depth = 0;   // 1, 2, 4, 8 or 16
  int color_type = 0;  // PNG_COLOR_TYPE_GRAY, _GRAY_ALPHA, _PALETTE, _RGB, _RGB_ALPHA
  bool interlaced = false;
};

namespace detail {

// The reader's view of its input and the message of the error that stopped it. Trivial on
// purpose: it is the only state libpng's callbacks touch, and they may be left by longjmp.
struct png_source {
  const unsigned char* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  char message[160] = {};
  char warning[160] = {};  // the last warning: libpng's IHDR check warns the reason, then errors
};

extern "C" {
inline void sluice_png_read(png_structp png, png_bytep out, png_size_t n) {
  auto* s = static_cast<png_source*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) {
    s->pos = s->size;
    png_error(png, "truncated PNG (input ends inside a chunk)");
  }
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}
inline void sluice_png_error(png_structp png, png_const_charp msg) {
  auto* s = static_cast<png_source*>(png_get_error_ptr(png));
  std::strncpy(s->message, msg != nullptr ? msg : "unknown libpng error", sizeof s->message - 1);
  png_longjmp(png, 1);
}
// Warnings do not stop the decode (an ancillary chunk's CRC, extra data after the image); the last
// one is kept for the message of an error that follows it.
inline void sluice_png_warning(png_structp png, png_const_charp msg) {
  auto* s = static_cast<png_source*>(png_get_error_ptr(png));
  if (msg != nullptr) std::strncpy(s->warning, msg, sizeof s->warning - 1);
}
}

// Per-thread memory for libpng and zlib: a bump allocator over blocks that are kept from image to
// image (libpng's frees are no-ops; everything is released at once when the reader is destroyed).
// When an image needed more than one block, they are merged into one of the total size before the
// next image, so once the largest image has been seen a decode asks the heap for nothing.
// Plain C state only: it is used from inside libpng, where nothing may throw.
struct png_arena {
  static constexpr int max_blocks = 32;
  unsigned char* block[max_blocks] = {};
  std::size_t size[max_blocks] = {};
  int blocks = 0;
  std::size_t used = 0;                 // in the last block
  std::uint64_t heap_allocations = 0;   // blocks taken from the heap, ever (tests watch it)
  png_arena() = default;
  png_arena(const png_arena&) = delete;
  png_arena& operator=(const png_arena&) = delete;
  ~png_arena() { release(); }
  void release() noexcept {
    for (int i = 0; i < blocks; ++i) std::free(block[i]);
    blocks = 0;
    used = 0;
  }
  void* take(std::size_t n) noexcept {
    n = (n + 15) & ~std::size_t{15};
    if (blocks > 0 && n <= size[blocks - 1] - used) {
      void* p = block[blocks - 1] + used;
      used += n;
      return p;
    }
    if (blocks == max_blocks) return nullptr;  // libpng reports "out of memory" as an error
    const std::size_t want = n > (std::size_t{64} << 10) ? n : (std::size_t{64} << 10);
    auto* b = static_cast<unsigned char*>(std::malloc(want));
    if (b == nullptr) return nullptr;
    ++heap_allocations;
    block[blocks] = b;
    size[blocks++] = want;
    used = n;
    return b;
  }
  // After an image: everything it took is free again, in one block big enough for all of it.
  void reset() noexcept {
    if (blocks > 1) {
      std::size_t total = 0;
      for (int i = 0; i < blocks; ++i) total += size[i];
      release();
      if (auto* b = static_cast<unsigned char*>(std::malloc(total))) {
        ++heap_allocations;
        block[0] = b;
        size[0] = total;
        blocks = 1;
      }
    }
    used = 0;
  }
};
inline png_arena& thread_png_arena() {
  thread_local png_arena a;
  return a;
}
extern "C" {
inline png_voidp sluice_png_malloc(png_structp png, png_alloc_size_t n) {
  return static_cast<png_arena*>(png_get_mem_ptr(png))->take(n);
}
inline void sluice_png_free(png_structp, png_voidp) {}
}

// Owns one libpng reader; destroyed normally (no longjmp crosses this object's frame). One at a
// time on a thread (the arena is the thread's).
struct png_reader {
  png_source src;
  png_structp png = nullptr;
  png_infop info = nullptr;
  explicit png_reader(std::span<const std::byte> in) {
    src.data = reinterpret_cast<const unsigned char*>(in.data());
    src.size = in.size();
    png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &src, sluice_png_error, sluice_png_warning,
                                   &thread_png_arena(), sluice_png_malloc, sluice_png_free);
    if (png == nullptr) {
      thread_png_arena().reset();
      throw std::runtime_error("sluice: png_create_read_struct failed");
    }
    info = png_create_info_struct(png);
    if (info == nullptr) {
      png_destroy_read_struct(&png, nullptr, nullptr);
      thread_png_arena().reset();
      throw std::runtime_error("sluice: png_create_info_struct failed");
    }
    png_set_read_fn(png, &src, sluice_png_read);
  }
  png_reader(const png_reader&) = delete;
  png_reader& operator=(const png_reader&) = delete;
  ~png_reader() {
    png_destroy_read_struct(&png, &info, nullptr);
    thread_png_arena().reset();
  }
};

// C-style phases: setjmp here, so libpng's longjmp unwinds only C frames and these trivial ones.
// Each returns 0 on success, 1 with the message in the reader's png_source.
inline int png_read_header_c(png_structp png, png_infop info, png_header* h, std::uint32_t max_axis) {
  if (setjmp(png_jmpbuf(png))) return 1;
  png_set_user_limits(png, max_axis, max_axis);
  // Only IHDR, PLTE, tRNS, IDAT and IEND matter; skip every other chunk unread.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_read_info(png, info);
  h->width = static_cast<int>(png_get_image_width(png, info));
  h->height = static_cast<int>(png_get_image_height(png, info));
  h->bit_depth = png_get_bit_depth(png, info);
  h->color_type = png_get_color_type(png, info);
  h->interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;
  return 0;
}

// Sets the transforms that turn any PNG into `channels` 8-bit samples a pixel (1 grey, 2 grey +
// alpha, 3 RGB, 4 RGBA) and reads every row (every pass when interlaced) into out.
inline int png_read_pixels_c(png_structp png, png_infop info, int channels, unsigned char* out, std::size_t pitch,
                             std::uint32_t rows) {
  if (setjmp(png_jmpbuf(png))) return 1;
  const int ct = png_get_color_type(png, info);
  const bool want_alpha = channels == 2 || channels == 4;
  const bool want_colour = channels >= 3;
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (ct == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_bit_depth(png, info) == 16) png_set_scale_16(png);
  const bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  if (want_alpha) {
    if (has_trns) png_set_tRNS_to_alpha(png);
    else if ((ct & PNG_COLOR_MASK_ALPHA) == 0) png_set_add_alpha(png, 0xffff, PNG_FILLER_AFTER);
  } else {
    png_set_strip_alpha(png);  // also the alpha that palette expansion makes from tRNS
  }
  const bool is_colour = (ct & PNG_COLOR_MASK_COLOR) != 0;  // palette included
  if (want_colour && !is_colour) png_set_gray_to_rgb(png);
  if (!want_colour && is_colour) png_set_rgb_to_gray_fixed(png, PNG_ERROR_ACTION_NONE, -1, -1);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != channels || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != pitch)
    png_error(png, "unexpected pixel layout after conversion");
  for (int p = 0; p < passes; ++p)
    for (std::uint32_t y = 0; y < rows; ++y) png_read_row(png, out + y * pitch, nullptr);
  png_read_end(png, nullptr);
  return 0;
}

[[noreturn]] inline void png_fail(const png_source& s, const char* step) {
  std::string msg = std::string("PNG ") + step + ": " + s.message;
  if (s.warning[0] != '\0') msg += std::string(" (") + s.warning + ")";
  throw format_error("<png data>", {}, std::move(msg));
}

inline constexpr unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

}  // namespace detail

// Reads the header only (dimensions, bit depth, colour type); throws format_error if it is not a
// PNG or its IHDR is invalid (zero or > 2^31 − 1 dimension, bad CRC, unknown colour type).
inline png_header read_png_header(std::span<const std::byte> in) {
  if (in.empty()) throw format_error("<png data>", {file_position::npos, 0}, "empty PNG input");
  detail::png_reader r(in);
  png_header h;
  if (detail::png_read_header_c(r.png, r.info, &h, PNG_UINT_31_MAX) != 0) detail::png_fail(r.src, "header");
  return h;
}

class png {
 public:
  using codec_concept = codec_tag;

  png() = default;
  explicit png(geometry_options g, png_options o = {}) : geo_(g), opt_(o) {
    if (g.width <= 0 || g.height <= 0) throw usage_error("sluice: png output width and height must be positive");
    if (g.layout != image_layout::hwc && g.layout != image_layout::chw)
      throw usage_error("sluice: png .layout is image_layout::hwc or image_layout::chw");
    detail::check_geometry_options(g);
  }

  [[nodiscard]] int channels() const noexcept { return (opt_.format == pixels::rgb ? 3 : 1) + (opt_.keep_alpha ? 1 : 0); }
  [[nodiscard]] std::size_t output_bytes() const noexcept {
    return static_cast<std::size_t>(geo_.width) * static_cast<std::size_t>(geo_.height) * channels();
  }
  [[nodiscard]] const png_options& options() const noexcept { return opt_; }
  // What decode writes: shape {H, W, C} (hwc) or {C, H, W} (chw), and the layout.
  [[nodiscard]] field_geometry geometry() const noexcept {
    const std::int64_t h = geo_.height, w = geo_.width, c = channels();
    field_geometry g{.ndim = 3, .layout = geo_.layout};
    if (geo_.layout == image_layout::chw) g.shape = {c, h, w};
    else g.shape = {h, w, c};
    return g;
  }
  // The resize/crop/flip options of the transform pass (codec/transform.hpp).
  [[nodiscard]] const geometry_options& transform_options() const noexcept { return geo_; }
  // Sample ctx's geometry for this PNG (reads the header only): what decode(in, out, ctx)
  // applies, and what boxes and points of the same sample follow.
  [[nodiscard]] image_transform plan(std::span<const std::byte> in, const sample_context& ctx) const {
    const png_header h = read_png_header(in);
    return plan_transform(h.width, h.height, transform_options(), ctx);
  }

  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context& ctx) const {
    decode_as(in, out, nullptr, &ctx);
  }
  // Decodes with a transform planned before (plan(), or plan_transform for this image's size).
  void decode_with(std::span<const std::byte> in, std::span<std::byte> out, const image_transform& t) const {
    decode_as(in, out, &t, nullptr);
  }

 private:
  // One of `given` (a planned transform) or `ctx` (plan here, from the header read anyway).
  void decode_as(std::span<const std::byte> in, std::span<std::byte> out, const image_transform* given,
                 const sample_context* ctx) const {
    if (out.size() < output_bytes()) throw usage_error("sluice: png decode destination is smaller than output_bytes()");
    if (in.empty()) throw format_error("<png data>", {file_position::npos, 0}, "empty PNG input");
    detail::png_reader r(in);
    png_header h;
    // libpng refuses a longer axis itself, before any row buffer exists; the product is ours.
    const auto axis = static_cast<std::uint32_t>(std::min<std::uint64_t>(opt_.max_decoded_pixels, PNG_UINT_31_MAX));
    if (detail::png_read_header_c(r.png, r.info, &h, std::max<std::uint32_t>(axis, 1)) != 0)
      detail::png_fail(r.src, "header");
    if (static_cast<std::uint64_t>(h.width) * static_cast<std::uint64_t>(h.height) > opt_.max_decoded_pixels)
      throw format_error("<png data>", {}, "PNG of " + std::to_string(h.width) + "x" + std::to_string(h.height) +
                                              " has more than max_decoded_pixels");
    const image_transform t = given != nullptr ? *given : plan_transform(h.width, h.height, transform_options(), *ctx);
    if (t.src_width != h.width || t.src_height != h.height || t.out_width != geo_.width || t.out_height != geo_.height)
      throw usage_error("sluice: png decode given a transform planned for another image or output size");
    const int c = channels();
    const std::size_t pitch = static_cast<std::size_t>(h.width) * c;
    thread_local std::vector<std::uint8_t> scratch;
    if (scratch.size() < pitch * h.height) scratch.resize(pitch * h.height);
    if (detail::png_read_pixels_c(r.png, r.info, c, scratch.data(), pitch, static_cast<std::uint32_t>(h.height)) != 0)
      detail::png_fail(r.src, "decode");
    resample(scratch.data(), h.width, h.height, pitch, c, out, to_plan(t, h.width, h.height, geo_.layout));
  }

  geometry_options geo_{};
  png_options opt_{};
};

static_assert(sluice::codec<png>);

}  // namespace sluice::codecs
