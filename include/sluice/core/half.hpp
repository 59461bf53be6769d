// sluice/core/half.hpp — IEEE half (fp16) and bfloat16 as 16-bit storage types, with exact
// round-to-nearest-even conversions from float on the host.
//
// f16 and bf16 are layout-compatible with CUDA's __half and __nv_bfloat16 (two bytes, no padding),
// so a device buffer of either can be viewed as the other. The conversions here are the host
// reference for sluice/cuda/batch_ops.cuh: they round exactly like __float2half_rn and
// __float2bfloat16_rn (ties to even, overflow to +-inf), so device results can be compared bit for
// bit. NaN converts to a quiet NaN of the same sign (the payload is not kept).
//
// The range matters when casting: fp16's largest finite value is 65504 (anything from 65520 on
// rounds to infinity), bf16 keeps float's exponent range (overflow only near 3.4e38) at 8 bits of
// precision. batch_ops counts the values that overflowed.
//
//   auto h = sluice::to_f16(1.5f);   // h.bits == 0x3e00
//   float back = sluice::to_float(h);
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace sluice {

struct f16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(f16, f16) = default;
};
struct bf16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(bf16, bf16) = default;
};
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

[[nodiscard]] inline f16 to_f16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return {static_cast<std::uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (ax >= 0x477ff000u) return {static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65520: rounds to inf
  if (ax < 0x38800000u) {
    // Below fp16's smallest normal (2^-14): a multiple of 2^-24. Scaling by 2^24 is exact, and
    // nearbyint rounds ties to even in the default rounding mode; 1024 is the smallest normal's
    // encoding, so a carry lands right.
    const float scaled = std::bit_cast<float>(ax) * 16777216.0f;
    return {static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)))};
  }
  const std::uint32_t rebased = ax - ((127u - 15u) << 23);  // exponent re-biased, mantissa kept
  std::uint32_t h = rebased >> 13;
  const std::uint32_t rest = rebased & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // ties to even; a carry is right
  return {static_cast<std::uint16_t>(sign | h)};
}

[[nodiscard]] inline bf16 to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u)};
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // ties to even; overflow reaches inf
  return {static_cast<std::uint16_t>(rounded >> 16)};
}

[[nodiscard]] inline float to_float(bf16 b) noexcept { return std::bit_cast<float>(std::uint32_t{b.bits} << 16); }

[[nodiscard]] inline float to_float(f16 h) noexcept {
  const std::uint32_t sign = std::uint32_t{h.bits & 0x8000u} << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  const std::uint32_t man = h.bits & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // subnormal or zero: exact
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 127u - 15u) << 23) | (man << 13));
}

[[nodiscard]] inline bool is_inf(f16 h) noexcept { return (h.bits & 0x7fffu) == 0x7c00u; }
[[nodiscard]] inline bool is_inf(bf16 b) noexcept { return (b.bits & 0x7fffu) == 0x7f80u; }

}  // namespace sluice
