// sluice/core/batch_ops.hpp — numeric operations on a collated batch, on the host.
//
// These are the reference implementation of the device operations in sluice/cuda/batch_ops.cuh
// (same names, same arguments, same results bit for bit where stated), and what a pipeline uses
// when there is no GPU. All are single-threaded, allocate nothing, and take spans.
//
//   normalize(in, out, params)    uint8 pixels, channels interleaved (HWC: channel = index % C),
//                                 to float / f16 / bf16: out = (in - mean[c]) * (1 / std[c]).
//                                 Computed in float as one subtraction then one multiplication, so
//                                 the device gives the same float bit for bit; f16/bf16 round to
//                                 nearest even from that float.
//   cast_count_overflow(in, out)  float -> f16 or bf16, returns how many finite inputs became
//                                 +-inf. fp16 overflows from 65520 on; bf16 only near 3.4e38.
//   label_histogram(labels, counts) counts[l] = how many labels equal l, for l in [0, counts.size());
//                                 returns how many labels fell outside (e.g. -1 for "no label").
//   class_count_std(counts)       population standard deviation of the per-class counts (0 for a
//                                 perfectly balanced batch), in double.
//
//   sluice::normalize_params p{3};
//   p.set(0, 0.485f * 255, 0.229f * 255); ...
//   sluice::normalize(pixels, std::span<float>(out), p);
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "sluice/core/error.hpp"
#include "sluice/core/half.hpp"

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

template <class Out>
void normalize(std::span<const std::uint8_t> in, std::span<Out> out, const normalize_params& p) {
  static_assert(detail::is_batch_float<Out>, "sluice::normalize: output is float, sluice::f16 or sluice::bf16");
  if (out.size() < in.size()) throw usage_error("sluice::normalize: output is shorter than the input");
  int c = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const float diff = static_cast<float>(in[i]) - p.mean[c];
    out[i] = detail::from_float<Out>(diff * p.inv_std[c]);
    c = c + 1 == p.channels ? 0 : c + 1;
  }
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
