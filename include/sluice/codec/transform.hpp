// sluice/codec/transform.hpp — fixed-size output for batching: resize, crop, flip in one pass.
//
// A batch needs every sample the same size, so a decoded image of any size is mapped to exactly
// width × height × channels bytes. Two fits:
//   fit::crop     keep the aspect ratio: scale so the image covers the output times resize_scale
//                 (e.g. 1.14 ≈ 256/224, the classic "resize to 256, crop 224"), then cut a
//                 width × height window, centred or at a random place;
//   fit::stretch  scale each axis independently to the output size (aspect not kept).
// A horizontal flip may be drawn at random. Resampling is bilinear (pixel centres aligned), done
// in one pass from the source straight into the destination: no intermediate resized image.
//
// The output layout is HWC (rows of interleaved channels, as the source is) or CHW (one plane per
// channel): `.layout = image_layout::chw` transposes in that same pass, each output byte is
// stored once at its planar place — no extra copy. Both layouts hold the same values: the CHW
// output is the transpose of the HWC output, bit for bit.
//
// Randomness comes only from counter_rng(ctx.seed, ctx.epoch, ctx.id), so a sample's crop and
// flip are the same whichever worker computes them, and change from epoch to epoch.
//
//   auto plan = sluice::codecs::plan_geometry(src_w, src_h, {.width = 64, .height = 64,
//                                             .layout = sluice::image_layout::chw}, ctx);
//   sluice::codecs::resample(src, src_w, src_h, src_pitch, channels, dst, plan);
//
// Bilinear sampling of a source more than ~2× larger than the output aliases; the JPEG codec
// avoids that by letting libjpeg-turbo's DCT scaling do the bulk of a large reduction first
// (see source_scale_needed()).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

namespace sluice::codecs {

// The pixels a codec writes: three channels (RGB) or one (grey), whatever the file holds.
enum class pixels { rgb, grey };
enum class fit { crop, stretch };
enum class crop_at { center, random };

struct geometry_options {
  int width = 224;
  int height = 224;
  fit mode = fit::crop;
  crop_at crop = crop_at::center;
  double resize_scale = 1.0;  // fit::crop: cover (width, height) × this before cropping; >= 1
  bool random_flip = false;   // mirror left-right with probability 1/2
  image_layout layout = image_layout::hwc;  // of the output: hwc (interleaved) or chw (planes)
};

// Where output pixel (x, y) reads from: source coordinate = offset + (x + 0.5) * step - 0.5.
struct geometry_plan {
  int out_width = 0, out_height = 0;
  double step_x = 1, step_y = 1;      // source pixels per output pixel
  double offset_x = 0, offset_y = 0;  // source coordinate of the window's left/top edge
  bool flip = false;
  image_layout layout = image_layout::hwc;  // of the output (none counts as hwc)
};

// The factor the source must be scaled by (before cropping) for this output; < 1 is a reduction.
// The JPEG codec decodes at the smallest DCT scale >= this, so the bilinear pass reduces < 2×.
inline double source_scale_needed(int src_w, int src_h, const geometry_options& o) noexcept {
  const double sx = static_cast<double>(o.width) / src_w, sy = static_cast<double>(o.height) / src_h;
  return o.mode == fit::stretch ? std::max(sx, sy) : std::max(sx, sy) * std::max(1.0, o.resize_scale);
}

inline geometry_plan plan_geometry(int src_w, int src_h, const geometry_options& o, const sample_context& ctx) {
  if (o.width <= 0 || o.height <= 0) throw usage_error("sluice: output width and height must be positive");
  geometry_plan p;
  p.out_width = o.width;
  p.out_height = o.height;
  counter_rng rng(ctx.seed, ctx.epoch, ctx.id);
  if (o.mode == fit::stretch) {
    p.step_x = static_cast<double>(src_w) / o.width;
    p.step_y = static_cast<double>(src_h) / o.height;
  } else {
    const double s = source_scale_needed(src_w, src_h, o);  // output pixels per source pixel
    p.step_x = p.step_y = 1.0 / s;
    const double slack_x = src_w - o.width / s, slack_y = src_h - o.height / s;  // in source pixels
    const double ux = o.crop == crop_at::random ? rng.uniform() : 0.5;
    const double uy = o.crop == crop_at::random ? rng.uniform() : 0.5;
    p.offset_x = std::max(0.0, slack_x) * ux;
    p.offset_y = std::max(0.0, slack_y) * uy;
  }
  p.flip = o.random_flip && (rng() >> 63) != 0;
  p.layout = o.layout;
  return p;
}

namespace detail {
struct tap {
  std::int32_t i0, i1;  // source indices
  float w1;             // weight of i1 (i0 gets 1 - w1)
};
inline void make_taps(std::vector<tap>& taps, int n_out, int n_src, double step, double offset, bool flip) {
  taps.resize(static_cast<std::size_t>(n_out));
  for (int x = 0; x < n_out; ++x) {
    const int xo = flip ? n_out - 1 - x : x;
    double c = offset + (xo + 0.5) * step - 0.5;
    c = std::clamp(c, 0.0, static_cast<double>(n_src - 1));
    const int i0 = static_cast<int>(c);
    const int i1 = std::min(i0 + 1, n_src - 1);
    taps[static_cast<std::size_t>(x)] = {i0, i1, static_cast<float>(c - i0)};
  }
}
}  // namespace detail

// Bilinear resample of an 8-bit interleaved image (rows of src_w * channels bytes, `src_pitch`
// apart) into dst (out_width * out_height * channels bytes, packed, in p.layout). No allocation
// after the first call on a thread (tap tables are thread_local and reused).
namespace detail {
// Planar: channel k of output pixel i goes to out[k * plane + i]; else to out[i * c + k]. A
// template so the interleaved loop stays exactly the sequential store it was.
template <bool Planar>
void resample_into(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int c, std::uint8_t* out,
                   const geometry_plan& p) {
  const std::size_t plane = static_cast<std::size_t>(p.out_width) * p.out_height;
  // A window of whole source pixels at scale 1 (the common case of images stored at the training
  // size): bilinear sampling reads exactly one source pixel with weight 0 for each output pixel, so
  // copying rows gives the same bytes — at a tiny fraction of the cost (measured 12 KiB RGB:
  // ~1 µs instead of ~110 µs, which was more than the JPEG decode itself).
  if (p.step_x == 1.0 && p.step_y == 1.0 && !p.flip && p.offset_x == std::floor(p.offset_x) &&
      p.offset_y == std::floor(p.offset_y) && p.offset_x >= 0 && p.offset_y >= 0 &&
      p.offset_x + p.out_width <= src_w && p.offset_y + p.out_height <= src_h) {
    const auto ox = static_cast<std::size_t>(p.offset_x), oy = static_cast<std::size_t>(p.offset_y);
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
    return;
  }
  thread_local std::vector<tap> tx, ty;
  make_taps(tx, p.out_width, src_w, p.step_x, p.offset_x, p.flip);
  make_taps(ty, p.out_height, src_h, p.step_y, p.offset_y, false);
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
}  // namespace detail

inline void resample(const std::uint8_t* src, int src_w, int src_h, std::size_t src_pitch, int channels,
                     std::span<std::byte> dst, const geometry_plan& p) {
  const std::size_t need = static_cast<std::size_t>(p.out_width) * p.out_height * channels;
  if (dst.size() < need) throw usage_error("sluice: resample destination is smaller than the output");
  auto out = reinterpret_cast<std::uint8_t*>(dst.data());
  // One channel: both layouts are the same bytes.
  if (p.layout == image_layout::chw && channels > 1)
    detail::resample_into<true>(src, src_w, src_h, src_pitch, channels, out, p);
  else
    detail::resample_into<false>(src, src_w, src_h, src_pitch, channels, out, p);
}

}  // namespace sluice::codecs
