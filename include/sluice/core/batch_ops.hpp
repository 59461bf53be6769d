// sluice/core/batch_ops.hpp — numeric operations on a collated batch, on the host.
//
// These are the reference implementation of the device operations in sluice/cuda/batch_ops.cuh (same names, same
// arguments, same results bit for bit where stated), and what a pipeline uses when there is no GPU. All are
// single-threaded, allocate nothing, and take spans.
//
//   normalize(in, out, params)    uint8 pixels, channels interleaved (HWC: channel = index % C), to float / f16 / bf16:
//                                 out = (in - mean[c]) * (1 / std[c]). Computed in float as one subtraction then one
//                                 multiplication, so the device gives the same float bit for bit; f16/bf16 round to
//                                 nearest even from that float. collate({.output = f32}) and normalized<> run the same
//                                 loop (detail::normalize_u8).
//   cast_count_overflow(in, out)  float -> f16 or bf16, returns how many finite inputs became +-inf. fp16 overflows
//                                 from 65520 on; bf16 only near 3.4e38.
//   label_histogram(labels, counts) counts[l] = how many labels equal l, for l in [0, counts.size()); returns how many
//                                 labels fell outside (e.g. -1 for "no label").
//   class_count_std(counts)       population standard deviation of the per-class counts (0 for a perfectly balanced
//                                 batch), in double.
//
//   sluice::normalize_params p{3};  p.set(0, 0.485f * 255, 0.229f * 255); ...
//   sluice::normalize(pixels, std::span<float>(out), p);
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/core/half.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice {

// Per-channel mean and reciprocal standard deviation, passed by value to the device kernels (no
// device allocation). At most max_channels channels.
struct normalize_params {
  static constexpr int max_channels = 8;
  int channels = 1;
  float mean[max_channels] = {};
  float inv_std[max_channels] = {1, 1, 1, 1, 1, 1, 1, 1};

  normalize_params() = default;
  explicit normalize_params(int c) : channels(c) {
    if (c < 1 || c > max_channels) throw usage_error("sluice: normalize_params: channels must be 1..8");
  }
  // std_dev must be non-zero; the reciprocal is stored so host and device multiply by the same float.
  normalize_params& set(int c, float mean_value, float std_dev) {
    if (c < 0 || c >= channels) throw usage_error("sluice: normalize_params::set: channel out of range");
    if (std_dev == 0.0f) throw usage_error("sluice: normalize_params::set: standard deviation is 0");
    mean[c] = mean_value;
    inv_std[c] = 1.0f / std_dev;
    return *this;
  }
};

namespace detail {
template <class Out>
inline Out from_float(float v) noexcept {
  if constexpr (std::is_same_v<Out, float>) return v;
  else if constexpr (std::is_same_v<Out, f16>) return to_f16(v);
  else return to_bf16(v);
}
template <class Out>
inline constexpr bool is_batch_float = std::is_same_v<Out, float> || std::is_same_v<Out, f16> || std::is_same_v<Out, bf16>;
}  // namespace detail

namespace detail {
// The one per-channel normalisation loop: y = (x - mean[c]) * inv_std[c] in float, a subtraction
// then a multiplication (no fused multiply-add to differ by: cuda/batch_ops.cuh gives the same
// bits). x holds n values of ch channels in layout `in` (none reads as hwc); y gets them in layout
// `out`, transposed in the same pass when the two differ (then n is a whole number of pixels).
// In place of a transpose, a tail past the last whole pixel continues channel = index % ch.
template <class Out>
void normalize_u8(const std::uint8_t* x, Out* y, std::size_t n, std::size_t ch, const float* mean,
                  const float* inv_std, image_layout in, image_layout out) noexcept {
  auto f = [&](std::uint8_t v, std::size_t c) { return from_float<Out>((static_cast<float>(v) - mean[c]) * inv_std[c]); };
  const bool in_chw = in == image_layout::chw, out_chw = out == image_layout::chw;
  if (ch == 1) {
    for (std::size_t i = 0; i < n; ++i) y[i] = f(x[i], 0);
    return;
  }
  const std::size_t plane = n / ch;
  if (in_chw && out_chw) {
    for (std::size_t c = 0; c < ch; ++c)
      for (std::size_t p = 0; p < plane; ++p) y[c * plane + p] = f(x[c * plane + p], c);
  } else if (!in_chw && !out_chw) {
    for (std::size_t p = 0; p < plane; ++p)
      for (std::size_t c = 0; c < ch; ++c) y[p * ch + c] = f(x[p * ch + c], c);
    for (std::size_t i = plane * ch; i < n; ++i) y[i] = f(x[i], i - plane * ch);
  } else if (!in_chw) {  // hwc -> chw
    for (std::size_t c = 0; c < ch; ++c)
      for (std::size_t p = 0; p < plane; ++p) y[c * plane + p] = f(x[p * ch + c], c);
  } else {  // chw -> hwc
    for (std::size_t p = 0; p < plane; ++p)
      for (std::size_t c = 0; c < ch; ++c) y[p * ch + c] = f(x[c * plane + p], c);
  }
}

// The layout a normaliser reads: what the producer wrote, else the user's claim (none: none).
// A claim the producer contradicts is a usage_error, never a reinterpretation: the per-channel
// values would go to the wrong channels. `who` names the option, e.g. "collate's .layout".
inline image_layout agreed_layout(image_layout claimed, image_layout wrote, const std::string& who) {
  auto name = [](image_layout l) { return l == image_layout::chw ? "CHW" : "HWC"; };
  if (claimed != image_layout::none && wrote != image_layout::none && claimed != wrote)
    throw usage_error(who + " says " + name(claimed) + " but the producer wrote " + name(wrote) +
                      " pixels: the per-channel values would go to the wrong channels; drop it or make the two agree");
  return wrote != image_layout::none ? wrote : claimed;
}

// x as a message shows it: 4 significant digits (0.2859, 123.7, 0.003922).
inline std::string short_float(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", static_cast<double>(x));
  return buf;
}

// A collator's options, mean and std per channel on the scale of x * scale (e.g. 0.485 with
// scale 1/255), as normalize_u8's mean and inv_std on the scale of x: (x * scale - m) / s ==
// (x - m / scale) * (scale / s). Empty: mean 0, std 1; one value: every channel. `what` names the
// collator in the usage_error for a count that fits neither, a std that is not positive, a scale
// that is zero or not finite, or values on another scale than x * scale: a mean outside the range
// the scaled bytes take, or a std wider than that range (ImageNet's 123.7 / 58.4, or mean 0 and
// std 255, given with scale 1/255 would put every pixel near one value without a word).
struct channel_affine {
  std::vector<float> mean, inv_std;
  channel_affine() = default;
  channel_affine(const std::vector<float>& m, const std::vector<float>& s, float scale, std::size_t channels,
                 const std::string& what) {
    if (!(std::isfinite(scale) && scale != 0.f)) throw usage_error(what + ".scale must be finite and non-zero");
    auto each = [&](const std::vector<float>& v, const char* name) {
      if (!v.empty() && v.size() != 1 && v.size() != channels)
        throw usage_error(what + name + " has " + std::to_string(v.size()) + " values for " + std::to_string(channels) +
                          " channels");
    };
    each(m, ".mean");
    each(s, ".std");
    mean.resize(channels);
    inv_std.resize(channels);
    const float lo = std::min(0.f, 255.f * scale), hi = std::max(0.f, 255.f * scale);
    auto units = [&](const char* name, std::size_t c, float v, const std::string& how) {
      throw usage_error(what + name + "[" + std::to_string(c) + "] = " + detail::short_float(v) + " " + how +
                        " [" + detail::short_float(lo) + ", " + detail::short_float(hi) +
                        "] of the scaled bytes (x * scale, scale " + detail::short_float(scale) +
                        "): give mean and std in those units (" + detail::short_float(v) + " * scale = " +
                        detail::short_float(v * std::abs(scale)) + "), or scale = 1 for the bytes' own 0-255 units");
    };
    for (std::size_t c = 0; c < channels; ++c) {
      const float mc = m.empty() ? 0.f : m[m.size() == 1 ? 0 : c];
      const float sc = s.empty() ? 1.f : s[s.size() == 1 ? 0 : c];
      if (!(sc > 0.f)) throw usage_error(what + ".std must be positive");
      if (!m.empty() && !(mc >= lo && mc <= hi)) units(".mean", c, mc, "lies outside the range");
      if (!s.empty() && !(sc <= hi - lo)) units(".std", c, sc, "is wider than the whole range");
      mean[c] = mc / scale;
      inv_std[c] = scale / sc;
    }
  }
};
}  // namespace detail

template <class Out>
void normalize(std::span<const std::uint8_t> in, std::span<Out> out, const normalize_params& p) {
  static_assert(detail::is_batch_float<Out>, "sluice::normalize: output is float, sluice::f16 or sluice::bf16");
  if (out.size() < in.size()) throw usage_error("sluice::normalize: output is shorter than the input");
  detail::normalize_u8(in.data(), out.data(), in.size(), static_cast<std::size_t>(p.channels), p.mean, p.inv_std,
                       image_layout::hwc, image_layout::hwc);
}

template <class Out>
std::uint64_t cast_count_overflow(std::span<const float> in, std::span<Out> out) {
  static_assert(std::is_same_v<Out, f16> || std::is_same_v<Out, bf16>,
                "sluice::cast_count_overflow: output is sluice::f16 or sluice::bf16");
  if (out.size() < in.size()) throw usage_error("sluice::cast_count_overflow: output is shorter than the input");
  std::uint64_t overflowed = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    out[i] = detail::from_float<Out>(in[i]);
    overflowed += static_cast<std::uint64_t>(is_inf(out[i]) && std::isfinite(in[i]));
  }
  return overflowed;
}

template <class Label>
std::uint64_t label_histogram(std::span<const Label> labels, std::span<std::uint32_t> counts) {
  static_assert(std::is_integral_v<Label>, "sluice::label_histogram: labels are integers");
  for (auto& c : counts) c = 0;
  std::uint64_t outside = 0;
  for (const Label l : labels) {
    if (l >= 0 && static_cast<std::uint64_t>(l) < counts.size()) ++counts[static_cast<std::size_t>(l)];
    else ++outside;
  }
  return outside;
}

[[nodiscard]] inline double class_count_std(std::span<const std::uint32_t> counts) {
  if (counts.empty()) return 0.0;
  double sum = 0, sum_sq = 0;  // exact: integers far below 2^53
  for (const std::uint32_t c : counts) {
    sum += c;
    sum_sq += static_cast<double>(c) * c;
  }
  const double k = static_cast<double>(counts.size());
  const double mean = sum / k;
  const double var = sum_sq / k - mean * mean;
  return var > 0 ? std::sqrt(var) : 0.0;
}

}  // namespace sluice
