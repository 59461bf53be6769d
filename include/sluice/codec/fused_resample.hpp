// sluice/codec/fused_resample.hpp — crop, resize, flip, normalise and layout of a decoded image
// in one pass, one output pixel at a time: the form a GPU kernel takes (cuda/fused_resample.cuh
// launches it over a batch), and its host reference here, which the device test compares against.
//
// The arithmetic is sluice's fixed-point bilinear pass (codec/transform.hpp), per pixel: the same
// taps (detail::make_taps of the same geometry_plan), the same weights in 1/16384, the two source
// rows blended to 7 fractional bits, then the two columns. So the u8 output equals
// codecs::resample's byte for byte (tests/codec/fused_resample_test.cpp), and the float output is
// normalize_u8's (x - mean) * inv_std of that byte, bit for bit (the device rounds the
// subtraction and the multiplication separately, as cuda/batch_ops.cuh does). A decoder on the
// device that produces other pixels than the host codec (nvJPEG's IDCT and upsampling) differs by
// that, not by this pass.
//
//   fused_taps taps(codecs::to_plan(t, dec_w, dec_h, image_layout::chw), dec_w, dec_h);
//   fused_plan p = taps.plan(3, fused_output::f32, norm);   // host pointers; upload the taps for a kernel
//   fused_resample_host(rgb, dec_w, dec_h, pitch, p, out);
// Threads: fused_taps is a value; the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sluice/codec/transform.hpp"
#include "sluice/core/batch_ops.hpp"
#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"

namespace sluice::codecs {

// One output column's (or row's) two source indices and the weight of the second, in 1/16384.
struct fused_tap {
  std::int32_t i0 = 0, i1 = 0, w1 = 0;
};

enum class fused_output { u8, f32 };

// Everything one image's pass reads besides its pixels: plain data, copyable to a device (the tap
// pointers must then point at device copies of the taps).
struct fused_plan {
  const fused_tap* cols = nullptr;  // out_width of them
  const fused_tap* rows = nullptr;  // out_height of them
  int out_width = 0, out_height = 0, channels = 3;
  image_layout layout = image_layout::hwc;  // of the output (none counts as hwc)
  fused_output output = fused_output::u8;
  normalize_params norm{};  // f32: (x - mean[c]) * inv_std[c]
  [[nodiscard]] SLUICE_HOST_DEVICE std::size_t output_bytes() const noexcept {
    return static_cast<std::size_t>(out_width) * static_cast<std::size_t>(out_height) *
           static_cast<std::size_t>(channels) * (output == fused_output::f32 ? 4u : 1u);
  }
};

// The taps of a resample plan on a dec_w × dec_h image, made by the host pass's own functions.
class fused_taps {
 public:
  fused_taps(const geometry_plan& p, int dec_w, int dec_h) : layout_(p.layout) {
    if (dec_w <= 0 || dec_h <= 0 || p.out_width <= 0 || p.out_height <= 0)
      throw usage_error("sluice: fused_taps: empty source or output");
    std::vector<detail::tap> t;
    const auto fill = [&](std::vector<fused_tap>& out) {
      out.resize(t.size());
      for (std::size_t i = 0; i < t.size(); ++i) out[i] = {t[i].i0, t[i].i1, detail::fixed_weight(t[i].w1)};
    };
    detail::make_taps(t, p.out_width, dec_w, p.step_x, p.offset_x, p.flip);
    fill(cols_);
    detail::make_taps(t, p.out_height, dec_h, p.step_y, p.offset_y, false);
    fill(rows_);
  }
  [[nodiscard]] const std::vector<fused_tap>& cols() const noexcept { return cols_; }
  [[nodiscard]] const std::vector<fused_tap>& rows() const noexcept { return rows_; }
  // A plan over these taps (host pointers) for `channels` channels; f32 normalises with `norm`.
  [[nodiscard]] fused_plan plan(int channels, fused_output output = fused_output::u8,
                                const normalize_params& norm = {}) const {
    if (channels < 1 || channels > normalize_params::max_channels)
      throw usage_error("sluice: fused_taps: channels must be 1..8");
    if (output == fused_output::f32 && norm.channels != channels && !(norm.channels == 1 && channels == 1))
      throw usage_error("sluice: fused_taps: the normalisation has " + std::to_string(norm.channels) +
                        " channels, the image " + std::to_string(channels));
    fused_plan p;
    p.cols = cols_.data();
    p.rows = rows_.data();
    p.out_width = static_cast<int>(cols_.size());
    p.out_height = static_cast<int>(rows_.size());
    p.channels = channels;
    p.layout = layout_;
    p.output = output;
    p.norm = norm;
    return p;
  }

 private:
  std::vector<fused_tap> cols_, rows_;
  image_layout layout_;
};

namespace detail {
// Channel k of output pixel (tx, ty): rows blended to 7 fractional bits, then columns, rounded
// (blend_rows_scalar and bilinear_fixed's scalar loop, one value at a time).
SLUICE_HOST_DEVICE inline std::uint8_t fused_value(const std::uint8_t* src, std::size_t pitch, int c,
                                                   const fused_tap& tx, const fused_tap& ty, int k) noexcept {
  constexpr int vshift = 14 - 7, hshift = 14 + 7;
  constexpr std::int32_t vround = 1 << (vshift - 1), hround = 1 << (hshift - 1);
  const std::uint8_t* r0 = src + static_cast<std::size_t>(ty.i0) * pitch;
  const std::uint8_t* r1 = src + static_cast<std::size_t>(ty.i1) * pitch;
  const std::int32_t wy0 = (1 << 14) - ty.w1, wx0 = (1 << 14) - tx.w1;
  const std::size_t a = static_cast<std::size_t>(tx.i0) * static_cast<std::size_t>(c) + static_cast<std::size_t>(k);
  const std::size_t b = static_cast<std::size_t>(tx.i1) * static_cast<std::size_t>(c) + static_cast<std::size_t>(k);
  const std::int32_t m0 = (r0[a] * wy0 + r1[a] * ty.w1 + vround) >> vshift;
  const std::int32_t m1 = (r0[b] * wy0 + r1[b] * ty.w1 + vround) >> vshift;
  return static_cast<std::uint8_t>((m0 * wx0 + m1 * tx.w1 + hround) >> hshift);
}

SLUICE_HOST_DEVICE inline float fused_normalize(std::uint8_t v, float mean, float inv_std) noexcept {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(__fsub_rn(static_cast<float>(v), mean), inv_std);  // no fused multiply-add: the host's bits
#else
  return (static_cast<float>(v) - mean) * inv_std;
#endif
}
}  // namespace detail

// Writes every channel of output pixel (x, y) of plan p from the decoded image src (rows `pitch`
// bytes apart, p.channels interleaved) into out (p.output_bytes() bytes, packed, in p.layout).
SLUICE_HOST_DEVICE inline void fused_pixel(const std::uint8_t* src, std::size_t pitch, const fused_plan& p, int x,
                                           int y, void* out) noexcept {
  const fused_tap& tx = p.cols[x];
  const fused_tap& ty = p.rows[y];
  const std::size_t plane = static_cast<std::size_t>(p.out_width) * static_cast<std::size_t>(p.out_height);
  const std::size_t pixel = static_cast<std::size_t>(y) * static_cast<std::size_t>(p.out_width) +
                            static_cast<std::size_t>(x);
  const bool planar = p.layout == image_layout::chw && p.channels > 1;
  for (int k = 0; k < p.channels; ++k) {
    const std::uint8_t v = detail::fused_value(src, pitch, p.channels, tx, ty, k);
    const std::size_t at = planar ? static_cast<std::size_t>(k) * plane + pixel
                                  : pixel * static_cast<std::size_t>(p.channels) + static_cast<std::size_t>(k);
    if (p.output == fused_output::u8) static_cast<std::uint8_t*>(out)[at] = v;
    else static_cast<float*>(out)[at] = detail::fused_normalize(v, p.norm.mean[k], p.norm.inv_std[k]);
  }
}

// The host reference: every pixel of plan p from src (src_w × src_h, the size the taps were made
// for) into out.
inline void fused_resample_host(const std::uint8_t* src, int src_w, int src_h, std::size_t pitch, const fused_plan& p,
                                std::span<std::byte> out) {
  if (out.size() < p.output_bytes()) throw usage_error("sluice: fused_resample_host: the destination is too small");
  if (pitch < static_cast<std::size_t>(src_w) * static_cast<std::size_t>(p.channels))
    throw usage_error("sluice: fused_resample_host: rows shorter than the image's width");
  for (int x = 0; x < p.out_width; ++x)
    if (p.cols[x].i0 < 0 || p.cols[x].i1 >= src_w)
      throw usage_error("sluice: fused_resample_host: taps made for a wider image");
  for (int y = 0; y < p.out_height; ++y)
    if (p.rows[y].i0 < 0 || p.rows[y].i1 >= src_h)
      throw usage_error("sluice: fused_resample_host: taps made for a taller image");
  for (int y = 0; y < p.out_height; ++y)
    for (int x = 0; x < p.out_width; ++x) fused_pixel(src, pitch, p, x, y, out.data());
}

}  // namespace sluice::codecs
