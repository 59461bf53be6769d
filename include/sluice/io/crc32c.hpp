// sluice/io/crc32c.hpp — CRC-32C (Castagnoli), as TFRecord and sluice shards use it.
//
// Two paths: the SSE4.2 `crc32` instruction (8 bytes a cycle-ish, three streams would be faster
// still but one is already ~20 GB/s, far above what the readers need), chosen at run time by
// cpuid so the library still runs on CPUs without it; and slicing-by-8 tables (~2-3 GB/s).
// `masked_crc32c` is TFRecord's rotation + constant, which keeps a CRC of data that itself
// contains CRCs from being trivially zero.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  include <cpuid.h>
#  define SLUICE_CRC32C_X86 1
#else
#  define SLUICE_CRC32C_X86 0
#endif

namespace sluice::io {

namespace detail {

inline constexpr std::uint32_t crc32c_poly = 0x82f63b78u;  // reflected Castagnoli polynomial

struct crc32c_tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  constexpr crc32c_tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? crc32c_poly : 0u);
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  }
};
inline constexpr crc32c_tables crc32c_table{};

inline std::uint32_t crc32c_update_table(std::uint32_t crc, const unsigned char* p,
                                         std::size_t n) noexcept {
  const auto& t = crc32c_table.t;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= crc;
    crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
          t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^
          t[0][(w >> 56) & 0xff];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xffu];
  return crc;
}

#if SLUICE_CRC32C_X86
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_hw(
    std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
inline bool cpu_has_sse42() noexcept {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2) != 0;
  }();
  return has;
}
#endif

}  // namespace detail

// Continues a CRC-32C over more bytes: crc32c(b, crc32c(a)) == crc32c(a ++ b).
inline std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  auto p = reinterpret_cast<const unsigned char*>(data.data());
  crc = ~crc;
#if SLUICE_CRC32C_X86
  if (detail::cpu_has_sse42()) return ~detail::crc32c_update_hw(crc, p, data.size());
#endif
  return ~detail::crc32c_update_table(crc, p, data.size());
}

// The portable path alone (tests compare both paths; benchmarks measure both).
inline std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  return ~detail::crc32c_update_table(~crc, reinterpret_cast<const unsigned char*>(data.data()),
                                      data.size());
}

inline constexpr std::uint32_t mask_crc32c(std::uint32_t crc) noexcept {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline std::uint32_t masked_crc32c(std::span<const std::byte> data) noexcept {
  return mask_crc32c(crc32c(data));
}

}  // namespace sluice::io
