// sluice/codec/transform.hpp — fixed-size output for batching: resize, crop, flip in one pass,
// and the per-sample transform value that boxes and points follow.
//
// A batch needs every sample the same size, so an image of any size is mapped to exactly
// width × height × channels bytes: fit::crop (cover, then a centred or random window), fit::stretch,
// or fit::random_resized_crop (torchvision's), with an optional random flip, bilinear (separable,
// fixed point, SSE2) straight into the destination, in HWC or CHW (the CHW output is the HWC one
// transposed, bit for bit). plan_transform decides a sample's geometry (window, output size, flip) from
// counter_rng(seed, epoch, id) alone, so any worker computes the same; codecs take that value
// (plan, decode_with), and the same value maps boxes and points (map_point, map_box) and, through
// resample_nearest, a mask's class ids.
// Errors: options that cannot describe an output (a size of 0, ranges out of order) are
// usage_errors. Threads: every function is pure, or writes only into the caller's memory.
// Every rule: docs/images.md.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

namespace sluice::codecs {

// The pixels a codec writes: three channels (RGB) or one (grey), whatever the file holds.
enum class pixels { rgb, grey };
enum class fit { crop, stretch, random_resized_crop };
enum class crop_at { center, random };

// A closed range [min, max] of a random draw.
struct value_range {
  double min = 0, max = 0;
};

struct geometry_options {
  int width = 224;
  int height = 224;
  fit mode = fit::crop;
  crop_at crop = crop_at::center;
  double resize_scale = 1.0;  // fit::crop: cover (width, height) × this before cropping; >= 1
  bool random_flip = false;   // mirror left-right with probability 1/2
  image_layout layout = image_layout::hwc;  // of the output: hwc (interleaved) or chw (planes)
  value_range scale{0.08, 1.0};             // fit::random_resized_crop: window area / image area
  value_range ratio{3.0 / 4.0, 4.0 / 3.0};  // fit::random_resized_crop: window width / height
};

// A sample's geometry: source window (x, y, w, h) in source pixels → the whole out_width ×
// out_height output, mirrored left-right after the resize when `flip`. A plain value: copy it,
// store it, hand it to another process; the same value gives the same pixels and coordinates.
struct image_transform {
  int src_width = 0, src_height = 0;  // of the image it was planned for
  double x = 0, y = 0, w = 0, h = 0;  // the source window
  int out_width = 0, out_height = 0;
  bool flip = false;

  // Output coordinates of source point (sx, sy), both in pixel units with pixel i spanning
  // [i, i+1): a point inside the window lands in [0, out_width] × [0, out_height].
  [[nodiscard]] std::array<double, 2> map_point(double sx, double sy) const noexcept {
    double ox = (sx - x) * out_width / w;
    const double oy = (sy - y) * out_height / h;
    if (flip) ox = out_width - ox;
    return {ox, oy};
  }
  // Box (x0, y0, x1, y1) in source pixels → the same box in output pixels (x0 <= x1 kept under
  // a flip), not clipped.
  [[nodiscard]] std::array<double, 4> map_box(double x0, double y0, double x1, double y1) const noexcept {
    auto a = map_point(x0, y0), b = map_point(x1, y1);
    return {std::min(a[0], b[0]), std::min(a[1], b[1]), std::max(a[0], b[0]), std::max(a[1], b[1])};
  }
  friend bool operator==(const image_transform&, const image_transform&) = default;
};

namespace detail {
inline void check_geometry_options(const geometry_options& o) {
  if (o.width <= 0 || o.height <= 0) throw usage_error("sluice: output width and height must be positive");
  if (o.mode == fit::random_resized_crop &&
      !(o.scale.min > 0 && o.scale.min <= o.scale.max && o.scale.max <= 1.0 && o.ratio.min > 0 &&
        o.ratio.min <= o.ratio.max && std::isfinite(o.ratio.max)))
    throw usage_error("sluice: random_resized_crop needs 0 < scale.min <= scale.max <= 1 and 0 < ratio.min <= ratio.max");
}

// torchvision's RandomResizedCrop.get_params, on counter_rng draws: (x, y, w, h), whole pixels.
inline std::array<int, 4> random_resized_window(int W, int H, const geometry_options& o, counter_rng& rng) {
  const double area = static_cast<double>(W) * H;
  const double lr0 = std::log(o.ratio.min), lr1 = std::log(o.ratio.max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (o.scale.min + (o.scale.max - o.scale.min) * rng.uniform());
    const double aspect = std::exp(lr0 + (lr1 - lr0) * rng.uniform());
    const long w = std::lround(std::sqrt(target * aspect)), h = std::lround(std::sqrt(target / aspect));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      const auto x = static_cast<int>(rng.below(static_cast<std::uint64_t>(W - w + 1)));
      const auto y = static_cast<int>(rng.below(static_cast<std::uint64_t>(H - h + 1)));
      return {x, y, static_cast<int>(w), static_cast<int>(h)};
    }
  }
  // Fallback: the whole image, cut to the nearest ratio in range, centred.
  const double in_ratio = static_cast<double>(W) / H;
  long w = W, h = H;
  if (in_ratio < o.ratio.min) h = std::max(1L, std::lround(W / o.ratio.min));
  else if (in_ratio > o.ratio.max) w = std::max(1L, std::lround(H * o.ratio.max));
  return {static_cast<int>((W - w) / 2), static_cast<int>((H - h) / 2), static_cast<int>(w), static_cast<int>(h)};
}
}  // namespace detail

// Decides a sample's geometry for a src_w × src_h image (see the top of this file).
inline image_transform plan_transform(int src_w, int src_h, const geometry_options& o, const sample_context& ctx) {
  detail::check_geometry_options(o);
  if (src_w <= 0 || src_h <= 0) throw usage_error("sluice: plan_transform of an image with a zero dimension");
  image_transform t{.src_width = src_w, .src_height = src_h, .out_width = o.width, .out_height = o.height};
  counter_rng rng(ctx.seed, ctx.epoch, ctx.id);
  if (o.mode == fit::stretch) {
    t.w = src_w;
    t.h = src_h;
  } else if (o.mode == fit::random_resized_crop) {
    const auto win = detail::random_resized_window(src_w, src_h, o, rng);
    t.x = win[0], t.y = win[1], t.w = win[2], t.h = win[3];
  } else {
    // Output pixels per source pixel: the image covers the output (times resize_scale).
    const double s = std::max(static_cast<double>(o.width) / src_w, static_cast<double>(o.height) / src_h) *
                     std::max(1.0, o.resize_scale);
    t.w = o.width / s;
    t.h = o.height / s;
    const double ux = o.crop == crop_at::random ? rng.uniform() : 0.5;
    const double uy = o.crop == crop_at::random ? rng.uniform() : 0.5;
    t.x = std::max(0.0, src_w - t.w) * ux;
    t.y = std::max(0.0, src_h - t.h) * uy;
  }
  t.flip = o.random_flip && (rng() >> 63) != 0;
  return t;
}

// The factor the source must be scaled by for this transform; < 1 is a reduction. The JPEG codec
// decodes at the smallest DCT scale >= this, so the bilinear pass reduces < 2×.
inline double source_scale_needed(const image_transform& t) noexcept {
  return std::max(t.out_width / t.w, t.out_height / t.h);
}
inline double source_scale_needed(int src_w, int src_h, const geometry_options& o) noexcept {
  if (o.mode == fit::stretch)
    return std::max(static_cast<double>(o.width) / src_w, static_cast<double>(o.height) / src_h);
  if (o.mode == fit::random_resized_crop)  // the largest window: the whole image
    return std::max(static_cast<double>(o.width) / src_w, static_cast<double>(o.height) / src_h);
  return std::max(static_cast<double>(o.width) / src_w, static_cast<double>(o.height) / src_h) *
         std::max(1.0, o.resize_scale);
}

// Boxes and points through a transform. Boxes are rows of 4 numbers, (x0, y0, x1, y1), (x, y,
// width, height) from the top-left corner (COCO's xywh) or (cx, cy, width, height) from the centre
// (YOLO's, cxcywh), in pixels of the source image or, `normalized`, as fractions of its width
// and height; they come out in the same form relative to the output. A box is clipped to the
// output; with `drop_outside` (default) a box is dropped when its clipped width or height is below
// `min_size` output pixels (1: torchvision's SanitizeBoundingBoxes) or less than `min_visible` of
// its area stays in view; without, every box is kept, clipped (possibly to zero area), so rows
// stay aligned with whatever else the dataset keeps per box. Points are rows of 2 (x, y), mapped
// and not clipped; with `drop_outside` a point outside the output is dropped.
enum class box_format { xyxy, xywh, cxcywh };

// A box of `f` as (x0, y0, x1, y1), in place, and back.
inline void box_to_corners(box_format f, double* v) noexcept {
  if (f == box_format::xywh) v[2] += v[0], v[3] += v[1];
  if (f == box_format::cxcywh) {
    const double w = v[2], h = v[3];
    v[0] -= w / 2, v[1] -= h / 2, v[2] = v[0] + w, v[3] = v[1] + h;
  }
}
inline void corners_to_box(box_format f, double* v) noexcept {
  if (f == box_format::xywh) v[2] -= v[0], v[3] -= v[1];
  if (f == box_format::cxcywh) {
    const double w = v[2] - v[0], h = v[3] - v[1];
    v[0] += w / 2, v[1] += h / 2, v[2] = w, v[3] = h;
  }
}

struct box_options {
  box_format format = box_format::xyxy;
  bool normalized = false;
  bool drop_outside = true;
  double min_size = 1.0;     // output pixels
  double min_visible = 0.0;  // of the box's area in the output, before clipping
};

struct point_options {
  bool normalized = false;
  bool drop_outside = false;
};

// Box `in` (4 values) through `t` into `out` (4 values); false when the options drop it.
template <class T>
bool transform_box(const image_transform& t, const box_options& o, const T* in, T* out) noexcept {
  double v[4] = {static_cast<double>(in[0]), static_cast<double>(in[1]), static_cast<double>(in[2]),
                 static_cast<double>(in[3])};
  box_to_corners(o.format, v);
  if (o.normalized) v[0] *= t.src_width, v[2] *= t.src_width, v[1] *= t.src_height, v[3] *= t.src_height;
  const auto m = t.map_box(v[0], v[1], v[2], v[3]);
  const double W = t.out_width, H = t.out_height;
  const double c0 = std::clamp(m[0], 0.0, W), c1 = std::clamp(m[1], 0.0, H), c2 = std::clamp(m[2], 0.0, W),
               c3 = std::clamp(m[3], 0.0, H);
  if (o.drop_outside) {
    if (!(c2 - c0 >= o.min_size && c3 - c1 >= o.min_size)) return false;  // NaN input dropped too
    const double area = (m[2] - m[0]) * (m[3] - m[1]);
    if (o.min_visible > 0 && !((c2 - c0) * (c3 - c1) >= o.min_visible * area)) return false;
  }
  double r[4] = {c0, c1, c2, c3};
  if (o.normalized) r[0] /= W, r[2] /= W, r[1] /= H, r[3] /= H;
  corners_to_box(o.format, r);
  for (int k = 0; k < 4; ++k) out[k] = static_cast<T>(r[k]);
  return true;
}

// Point `in` (x, y) through `t` into `out`; false when the options drop it.
template <class T>
bool transform_point(const image_transform& t, const point_options& o, const T* in, T* out) noexcept {
  double px = static_cast<double>(in[0]), py = static_cast<double>(in[1]);
  if (o.normalized) px *= t.src_width, py *= t.src_height;
  auto m = t.map_point(px, py);
  if (o.drop_outside && !(m[0] >= 0 && m[0] <= t.out_width && m[1] >= 0 && m[1] <= t.out_height)) return false;
  if (o.normalized) m[0] /= t.out_width, m[1] /= t.out_height;
  out[0] = static_cast<T>(m[0]);
  out[1] = static_cast<T>(m[1]);
  return true;
}

// Where output pixel (x, y) reads from: source coordinate = offset + (x + 0.5) * step - 0.5.
struct geometry_plan {
  int out_width = 0, out_height = 0;
  double step_x = 1, step_y = 1;      // source pixels per output pixel
  double offset_x = 0, offset_y = 0;  // source coordinate of the window's left/top edge
  bool flip = false;
  image_layout layout = image_layout::hwc;  // of the output (none counts as hwc)
};

// The resample plan of transform `t` on the image as decoded, dec_w × dec_h (the source itself,
// or a DCT-reduced version of it: the window scales with it).
inline geometry_plan to_plan(const image_transform& t, int dec_w, int dec_h, image_layout layout = image_layout::hwc) {
  if (t.src_width <= 0 || t.src_height <= 0 || t.w <= 0 || t.h <= 0 || t.out_width <= 0 || t.out_height <= 0)
    throw usage_error("sluice: an empty image_transform (plan it with plan_transform or codec.plan)");
  const double kx = static_cast<double>(dec_w) / t.src_width, ky = static_cast<double>(dec_h) / t.src_height;
  geometry_plan p;
  p.out_width = t.out_width;
  p.out_height = t.out_height;
  p.step_x = dec_w == t.src_width ? t.w / t.out_width : t.w * kx / t.out_width;
  p.step_y = dec_h == t.src_height ? t.h / t.out_height : t.h * ky / t.out_height;
  p.offset_x = t.x * kx;
  p.offset_y = t.y * ky;
  p.flip = t.flip;
  p.layout = layout;
  return p;
}

inline geometry_plan plan_geometry(int src_w, int src_h, const geometry_options& o, const sample_context& ctx) {
  return to_plan(plan_transform(src_w, src_h, o, ctx), src_w, src_h, o.layout);
}

namespace detail {
struct tap {
  std::int32_t i0, i1;  // source indices
  float w1;             // weight of i1 (i0 gets 1 - w1)
};
// The source coordinate output pixel xo samples, clamped to the source: one expression, used by
// the taps and by the region they read, so the two cannot disagree.
inline double tap_coord(int xo, int n_src, double step, double offset) noexcept {
  return std::clamp(offset + (xo + 0.5) * step - 0.5, 0.0, static_cast<double>(n_src - 1));
}
inline void make_taps(std::vector<tap>& taps, int n_out, int n_src, double step, double offset, bool flip,
                      int origin = 0) {
  taps.resize(static_cast<std::size_t>(n_out));
  for (int x = 0; x < n_out; ++x) {
    const double c = tap_coord(flip ? n_out - 1 - x : x, n_src, step, offset);
    const int i0 = static_cast<int>(c);
    const int i1 = std::min(i0 + 1, n_src - 1);
    taps[static_cast<std::size_t>(x)] = {i0 - origin, i1 - origin, static_cast<float>(c - i0)};
  }
}
// [first, last] source indices the taps of n_out outputs read (the coordinate rises with xo).
inline std::array<int, 2> tap_span(int n_out, int n_src, double step, double offset) noexcept {
  const int lo = static_cast<int>(tap_coord(0, n_src, step, offset));
  const int hi = static_cast<int>(tap_coord(n_out - 1, n_src, step, offset));
  return {lo, std::min(hi + 1, n_src - 1)};
}
}  // namespace detail

// A rectangle of an image in pixels: columns [x, x + w), rows [y, y + h).
struct pixel_region {
  int x = 0, y = 0, w = 0, h = 0;
  friend bool operator==(const pixel_region&, const pixel_region&) = default;
};

// The pixels of the src_w × src_h image (as decoded) that resampling with plan `p` reads: the
// bilinear pass below reads nothing outside it, so a decoder may produce only this rectangle
// (resample's `origin` then says where it sits). The JPEG codec decodes only this region.
inline pixel_region source_region(const geometry_plan& p, int src_w, int src_h) noexcept {
  const auto cx = detail::tap_span(p.out_width, src_w, p.step_x, p.offset_x);
  const auto cy = detail::tap_span(p.out_height, src_h, p.step_y, p.offset_y);
  return {cx[0], cy[0], cx[1] - cx[0] + 1, cy[1] - cy[0] + 1};
}

// Bilinear resample of an 8-bit interleaved image (rows of src_w * channels bytes, `src_pitch`
// apart) into dst (out_width * out_height * channels bytes, packed, in p.layout). With an
// `origin`, src holds only a region of that image: its first byte is pixel (origin.x, origin.y),
// and the region must cover source_region(p, src_w, src_h); the output is the same bytes as from
// the whole image. No allocation after the first call on a thread (tap tables and the row buffer
// are thread_local and reused).
//
// The pass is separable and in fixed point: for each output row, the two source rows it reads are
// blended into one row of 16-bit values (weights in 1/16384, 7 fractional bits kept; SSE2 on
// x86-64, 16 bytes at a time, else the same arithmetic in scalar code), then each output pixel
// blends two of those. It differs from exact bilinear arithmetic by less than 0.01 before rounding,
// so from the float pass it replaced (detail::bilinear_float, kept as the reference) by at most 1,
// in about 1 % of the values (tests/codec/resample_test.cpp).
namespace detail {
inline constexpr int weight_bits = 14;  // tap weights in 1/16384
inline constexpr int mid_bits = 7;      // fractional bits of the blended row: 255 << 7 fits int16

// Planar: channel k of output pixel i goes to out[k * plane + i]; else to out[i * c + k].
// C > 0: the channel count known when compiled (1, 3 or 4: the inner loop unrolls); C == 0: `c`
// at run time.
// A window of whole source pixels at scale 1 (the common case of images stored at the training
// size): bilinear sampling reads exactly one source pixel with weight 0 for each output pixel, so
// copying rows gives the same bytes at a tiny fraction of the cost. True when it copied.
template <bool Planar, int C>
bool copy_window(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int c, std::uint8_t* out,
                 const geometry_plan& p, pixel_region origin) {
  if (!(p.step_x == 1.0 && p.step_y == 1.0 && !p.flip && p.offset_x == std::floor(p.offset_x) &&
        p.offset_y == std::floor(p.offset_y) && p.offset_x >= 0 && p.offset_y >= 0 &&
        p.offset_x + p.out_width <= src_w && p.offset_y + p.out_height <= src_h))
    return false;
  const std::size_t plane = static_cast<std::size_t>(p.out_width) * p.out_height;
  const auto ox = static_cast<std::size_t>(p.offset_x - origin.x), oy = static_cast<std::size_t>(p.offset_y - origin.y);
  const std::size_t row = static_cast<std::size_t>(p.out_width) * c;
  for (int y = 0; y < p.out_height; ++y) {
    const std::uint8_t* s = src + (oy + static_cast<std::size_t>(y)) * src_pitch + ox * c;
    if constexpr (!Planar) {
      std::copy_n(s, row, out + static_cast<std::size_t>(y) * row);
    } else {  // deinterleave the row into the planes
      std::uint8_t* o = out + static_cast<std::size_t>(y) * p.out_width;
      for (int x = 0; x < p.out_width; ++x)
        for (int k = 0; k < c; ++k) o[static_cast<std::size_t>(k) * plane + x] = s[x * c + k];
    }
  }
  return true;
}

// The vertical blend: mid[i] = (a[i] * (16384 - w) + b[i] * w + 64) >> 7 for i < n.
inline void blend_rows_scalar(const std::uint8_t* a, const std::uint8_t* b, std::int32_t w, std::int16_t* mid,
                              std::size_t n) noexcept {
  const std::int32_t w0 = (1 << weight_bits) - w;
  constexpr std::int32_t round = 1 << (weight_bits - mid_bits - 1);
  for (std::size_t i = 0; i < n; ++i)
    mid[i] = static_cast<std::int16_t>((a[i] * w0 + b[i] * w + round) >> (weight_bits - mid_bits));
}
#if defined(__SSE2__)
// The same, 16 bytes a step: bytes widened to 16 bits, a's and b's interleaved in pairs so one
// pmaddwd computes a * w0 + b * w for four values.
inline void blend_rows_sse2(const std::uint8_t* a, const std::uint8_t* b, std::int32_t w, std::int16_t* mid,
                            std::size_t n) noexcept {
  const std::int32_t w0 = (1 << weight_bits) - w;
  const __m128i wts = _mm_set1_epi32(static_cast<std::int32_t>((static_cast<std::uint32_t>(w) << 16) |
                                                               static_cast<std::uint32_t>(w0)));
  const __m128i round = _mm_set1_epi32(1 << (weight_bits - mid_bits - 1));
  const __m128i zero = _mm_setzero_si128();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m128i a_lo = _mm_unpacklo_epi8(va, zero), a_hi = _mm_unpackhi_epi8(va, zero);
    const __m128i b_lo = _mm_unpacklo_epi8(vb, zero), b_hi = _mm_unpackhi_epi8(vb, zero);
    auto blend = [&](__m128i x, __m128i y) {
      return _mm_srai_epi32(_mm_add_epi32(_mm_madd_epi16(_mm_unpacklo_epi16(x, y), wts), round), weight_bits - mid_bits);
    };
    auto blend_hi = [&](__m128i x, __m128i y) {
      return _mm_srai_epi32(_mm_add_epi32(_mm_madd_epi16(_mm_unpackhi_epi16(x, y), wts), round), weight_bits - mid_bits);
    };
    _mm_storeu_si128(reinterpret_cast<__m128i*>(mid + i), _mm_packs_epi32(blend(a_lo, b_lo), blend_hi(a_lo, b_lo)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(mid + i + 8), _mm_packs_epi32(blend(a_hi, b_hi), blend_hi(a_hi, b_hi)));
  }
  blend_rows_scalar(a + i, b + i, w, mid + i, n - i);
}
#endif
inline void blend_rows(const std::uint8_t* a, const std::uint8_t* b, std::int32_t w, std::int16_t* mid,
                       std::size_t n) noexcept {
#if defined(__SSE2__)
  blend_rows_sse2(a, b, w, mid, n);
#else
  blend_rows_scalar(a, b, w, mid, n);
#endif
}

inline std::int32_t fixed_weight(float w1) noexcept {
  return static_cast<std::int32_t>(std::lround(static_cast<double>(w1) * (1 << weight_bits)));
}

template <bool Planar, int C = 0>
void bilinear_fixed(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int c_runtime,
                    std::uint8_t* out, const geometry_plan& p, pixel_region origin) {
  const int c = C > 0 ? C : c_runtime;
  const std::size_t plane = static_cast<std::size_t>(p.out_width) * p.out_height;
  // One thread_local, bound to plain references once: in a shared library (the Python module) each
  // use of a thread_local is a call to __tls_get_addr, which the loops below would pay per row.
  struct scratch {
    std::vector<tap> tx, ty;
    std::vector<std::int32_t> wx;
    std::vector<std::int16_t> mid;
    std::vector<std::int32_t> wv;  // SSE2: per column, its (w0, w1) pair four times: one load
  };
  thread_local scratch tls;
  scratch& sc = tls;
  auto& tx = sc.tx;
  auto& ty = sc.ty;
  auto& wx = sc.wx;
  auto& mid = sc.mid;
#if defined(__SSE2__)
  auto& wv = sc.wv;
#endif
  make_taps(tx, p.out_width, src_w, p.step_x, p.offset_x, p.flip, origin.x);
  make_taps(ty, p.out_height, src_h, p.step_y, p.offset_y, false, origin.y);
  // The columns the horizontal taps read, relative to origin; the row buffer holds those only.
  std::int32_t lo = tx.front().i0, hi = tx.front().i1;
  wx.resize(tx.size());
  for (std::size_t x = 0; x < tx.size(); ++x) {
    lo = std::min(lo, tx[x].i0);
    hi = std::max(hi, tx[x].i1);
    wx[x] = fixed_weight(tx[x].w1);
  }
  for (auto& t : tx) t.i0 = (t.i0 - lo) * c, t.i1 = (t.i1 - lo) * c;  // now offsets into mid
  const std::size_t n = static_cast<std::size_t>(hi - lo + 1) * c;
  mid.resize(n + 4);  // + 4: the SIMD pixel blend loads 4 values from a pixel's first
  constexpr int shift = weight_bits + mid_bits;
  constexpr std::int32_t round = 1 << (shift - 1);
  for (int y = 0; y < p.out_height; ++y) {
    const auto& t = ty[static_cast<std::size_t>(y)];
    blend_rows(src + static_cast<std::size_t>(t.i0) * src_pitch + static_cast<std::size_t>(lo) * c,
               src + static_cast<std::size_t>(t.i1) * src_pitch + static_cast<std::size_t>(lo) * c, fixed_weight(t.w1),
               mid.data(), n);
    const std::int16_t* m = mid.data();
    std::uint8_t* o = Planar ? out + static_cast<std::size_t>(y) * p.out_width
                             : out + static_cast<std::size_t>(y) * p.out_width * c;
#if defined(__SSE2__)
    if constexpr (C >= 2 && C <= 4) {
      // A pixel's C values at once: its two source pixels' values interleaved in pairs, one
      // pmaddwd with (w0, w1), then packed to bytes. Same arithmetic as the scalar loop below.
      const __m128i rnd = _mm_set1_epi32(round);
      if (y == 0) {  // the (w0, w1) pairs of every column, broadcast once per image
        wv.resize(tx.size() * 4);
        for (std::size_t x = 0; x < tx.size(); ++x)
          std::fill_n(wv.begin() + static_cast<std::ptrdiff_t>(x * 4), 4,
                      static_cast<std::int32_t>((static_cast<std::uint32_t>(wx[x]) << 16) |
                                                static_cast<std::uint32_t>((1 << weight_bits) - wx[x])));
      }
      auto pixel = [&](int x) {
        const auto& s = tx[static_cast<std::size_t>(x)];
        const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + s.i0));
        const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + s.i1));
        const __m128i v = _mm_srai_epi32(
            _mm_add_epi32(_mm_madd_epi16(_mm_unpacklo_epi16(va, vb),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(wv.data() + 4 * x))), rnd), shift);
        return static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(v, v), v)));
      };
      if constexpr (Planar) {
        for (int x = 0; x < p.out_width; ++x) {
          const std::uint32_t word = pixel(x);
          for (int k = 0; k < C; ++k) o[static_cast<std::size_t>(k) * plane + x] = static_cast<std::uint8_t>(word >> (8 * k));
        }
      } else {
        // 4 bytes a pixel; for C = 3 the 4th is the next pixel's first, written after. The last
        // pixel of the row writes C bytes only.
        const int last = p.out_width - 1;
        for (int x = 0; x < last; ++x) {
          const std::uint32_t word = pixel(x);
          std::memcpy(o + static_cast<std::size_t>(x) * C, &word, 4);
        }
        const std::uint32_t word = pixel(last);
        std::uint8_t bytes[4];
        std::memcpy(bytes, &word, 4);
        std::memcpy(o + static_cast<std::size_t>(last) * C, bytes, C);
      }
    } else  // (a discarded branch, not an unreachable loop: nvcc warns of the latter)
#endif
    {
      for (int x = 0; x < p.out_width; ++x) {
        const auto& s = tx[static_cast<std::size_t>(x)];
        const std::int32_t w1 = wx[static_cast<std::size_t>(x)], w0 = (1 << weight_bits) - w1;
        for (int k = 0; k < c; ++k) {
          const auto q = static_cast<std::uint8_t>((m[s.i0 + k] * w0 + m[s.i1 + k] * w1 + round) >> shift);
          if constexpr (Planar) o[static_cast<std::size_t>(k) * plane + x] = q;
          else o[x * c + k] = q;
        }
      }
    }
  }
}

// The float pass sluice used before the fixed-point one: the reference its tests and benchmark
// compare against.
template <bool Planar, int C = 0>
void bilinear_float(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int c_runtime,
                    std::uint8_t* out, const geometry_plan& p, pixel_region origin) {
  const int c = C > 0 ? C : c_runtime;
  const std::size_t plane = static_cast<std::size_t>(p.out_width) * p.out_height;
  thread_local std::vector<tap> tls_tx, tls_ty;
  auto& tx = tls_tx;  // bound once (see bilinear_fixed)
  auto& ty = tls_ty;
  make_taps(tx, p.out_width, src_w, p.step_x, p.offset_x, p.flip, origin.x);
  make_taps(ty, p.out_height, src_h, p.step_y, p.offset_y, false, origin.y);
  for (int y = 0; y < p.out_height; ++y) {
    const auto& t = ty[static_cast<std::size_t>(y)];
    const std::uint8_t* r0 = src + static_cast<std::size_t>(t.i0) * src_pitch;
    const std::uint8_t* r1 = src + static_cast<std::size_t>(t.i1) * src_pitch;
    const float wy1 = t.w1, wy0 = 1.0f - t.w1;
    for (int x = 0; x < p.out_width; ++x) {
      const auto& s = tx[static_cast<std::size_t>(x)];
      const float wx1 = s.w1, wx0 = 1.0f - s.w1;
      const std::uint8_t* a = r0 + s.i0 * c;
      const std::uint8_t* b = r0 + s.i1 * c;
      const std::uint8_t* d = r1 + s.i0 * c;
      const std::uint8_t* e = r1 + s.i1 * c;
      std::uint8_t* o = Planar ? out + static_cast<std::size_t>(y) * p.out_width + x : out;
      for (int k = 0; k < c; ++k) {
        const float v = wy0 * (wx0 * a[k] + wx1 * b[k]) + wy1 * (wx0 * d[k] + wx1 * e[k]);
        const auto q = static_cast<std::uint8_t>(std::min(255.0f, v + 0.5f));
        if constexpr (Planar) o[static_cast<std::size_t>(k) * plane] = q;
        else *out++ = q;
      }
    }
  }
}

template <bool Fixed, bool Planar, int C = 0>
void resample_into(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int c_runtime,
                   std::uint8_t* out, const geometry_plan& p, pixel_region origin) {
  if (copy_window<Planar, C>(src, src_w, src_h, src_pitch, C > 0 ? C : c_runtime, out, p, origin)) return;
  if constexpr (Fixed) bilinear_fixed<Planar, C>(src, src_w, src_h, src_pitch, c_runtime, out, p, origin);
  else bilinear_float<Planar, C>(src, src_w, src_h, src_pitch, c_runtime, out, p, origin);
}

template <bool Fixed>
void resample_checked(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int channels,
                      std::span<std::byte> dst, const geometry_plan& p, pixel_region origin) {
  const std::size_t need = static_cast<std::size_t>(p.out_width) * p.out_height * channels;
  if (dst.size() < need) throw usage_error("sluice: resample destination is smaller than the output");
  if (origin != pixel_region{}) {
    const auto r = source_region(p, src_w, src_h);
    if (r.x < origin.x || r.y < origin.y || r.x + r.w > origin.x + origin.w || r.y + r.h > origin.y + origin.h)
      throw usage_error("sluice: resample given a region that does not cover the pixels the plan reads");
  }
  auto out = reinterpret_cast<std::uint8_t*>(dst.data());
  // One channel: both layouts are the same bytes.
  const bool planar = p.layout == image_layout::chw && channels > 1;
  switch (channels) {
    case 1: return resample_into<Fixed, false, 1>(src, src_w, src_h, src_pitch, 1, out, p, origin);
    case 3:
      return planar ? resample_into<Fixed, true, 3>(src, src_w, src_h, src_pitch, 3, out, p, origin)
                    : resample_into<Fixed, false, 3>(src, src_w, src_h, src_pitch, 3, out, p, origin);
    case 4:
      return planar ? resample_into<Fixed, true, 4>(src, src_w, src_h, src_pitch, 4, out, p, origin)
                    : resample_into<Fixed, false, 4>(src, src_w, src_h, src_pitch, 4, out, p, origin);
    default:
      return planar ? resample_into<Fixed, true>(src, src_w, src_h, src_pitch, channels, out, p, origin)
                    : resample_into<Fixed, false>(src, src_w, src_h, src_pitch, channels, out, p, origin);
  }
}

// The float pass (the reference), same arguments as resample().
inline void resample_float(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int channels,
                           std::span<std::byte> dst, const geometry_plan& p, pixel_region origin = {}) {
  resample_checked<false>(src, src_w, src_h, src_pitch, channels, dst, p, origin);
}
}  // namespace detail

inline void resample(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int channels,
                     std::span<std::byte> dst, const geometry_plan& p, pixel_region origin = {}) {
  detail::resample_checked<true>(src, src_w, src_h, src_pitch, channels, dst, p, origin);
}


// Nearest-neighbour resample of one 8-bit channel (class ids: values are copied, never blended)
// through transform `t`, at the source's own size (src_w × src_h must be t's source size). Output
// pixel (x, y) reads source pixel (floor(sx), floor(sy)) of its centre,
//   sx = t.x + (x' + 0.5) * t.w / t.out_width,  x' = t.flip ? t.out_width - 1 - x : x
//   sy = t.y + (y + 0.5) * t.h / t.out_height,
// the same window, output size and flip the bilinear pass samples for the image; a centre that
// falls outside the source (a window reaching past the image, as a pad or letterbox fit would
// make) gets `fill`. Writes out_width × out_height bytes into dst (rows, packed). No allocation
// after the first call on a thread.
// `rows` [first, last) may say that only those source rows hold anything but `fill` (the rest
// are not read, the output rows they feed get `fill`): an instance mask's rows.
inline void resample_nearest(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch,
                             std::span<std::byte> dst, const image_transform& t, std::uint8_t fill,
                             std::pair<int, int> rows = {0, 1 << 30}) {
  if (t.src_width != src_w || t.src_height != src_h)
    throw usage_error("sluice: resample_nearest given a transform planned for another source size");
  if (t.w <= 0 || t.h <= 0 || t.out_width <= 0 || t.out_height <= 0)
    throw usage_error("sluice: an empty image_transform (plan it with plan_transform or codec.plan)");
  const std::size_t ow = static_cast<std::size_t>(t.out_width), oh = static_cast<std::size_t>(t.out_height);
  if (dst.size() < ow * oh) throw usage_error("sluice: resample_nearest destination is smaller than the output");
  // The source column of each output column, -1 outside the source.
  thread_local std::vector<std::int32_t> tls_cols;
  auto& cols = tls_cols;  // bound once (see bilinear_fixed)
  cols.resize(ow);
  for (int x = 0; x < t.out_width; ++x) {
    const int xo = t.flip ? t.out_width - 1 - x : x;
    const double sx = std::floor(t.x + (xo + 0.5) * t.w / t.out_width);
    cols[static_cast<std::size_t>(x)] = sx >= 0 && sx < src_w ? static_cast<std::int32_t>(sx) : -1;
  }
  auto* out = reinterpret_cast<std::uint8_t*>(dst.data());
  for (int y = 0; y < t.out_height; ++y) {
    std::uint8_t* o = out + static_cast<std::size_t>(y) * ow;
    const double sy = std::floor(t.y + (y + 0.5) * t.h / t.out_height);
    if (!(sy >= 0 && sy < src_h && sy >= rows.first && sy < rows.second)) {
      std::fill_n(o, ow, fill);
      continue;
    }
    const std::uint8_t* r = src + static_cast<std::size_t>(sy) * src_pitch;
    for (std::size_t x = 0; x < ow; ++x) o[x] = cols[x] >= 0 ? r[cols[x]] : fill;
  }
}

}  // namespace sluice::codecs
