// sluice/core/random.hpp — counter-based randomness: every draw is a pure function of its keys.
//
// Determinism for any worker count needs randomness that does not depend on which thread asked
// first. So sluice never keeps a shared generator: a draw is hash(seed, epoch, stream, counter).
// `splitmix64` is the finaliser from Steele et al. (fast, passes BigCrush as a hash of a counter);
// `counter_rng` is a small generator keyed by (seed, epoch, id) for per-sample augmentation;
// `feistel_permutation` maps position -> index as a bijection on [0, n) without materialising it.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "sluice/core/config.hpp"

namespace sluice {

SLUICE_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines keys into one 64-bit key; order matters.
SLUICE_HOST_DEVICE constexpr std::uint64_t mix_keys(std::uint64_t a, std::uint64_t b) noexcept {
  return splitmix64(a ^ splitmix64(b + 0x632be59bd9b4e019ULL));
}
SLUICE_HOST_DEVICE constexpr std::uint64_t mix_keys(std::uint64_t a, std::uint64_t b,
                                                    std::uint64_t c) noexcept {
  return mix_keys(mix_keys(a, b), c);
}

// A tiny generator whose whole state is (key, counter). Satisfies UniformRandomBitGenerator.
class counter_rng {
 public:
  using result_type = std::uint64_t;
  constexpr counter_rng() noexcept = default;
  constexpr explicit counter_rng(std::uint64_t key) noexcept : key_(key) {}
  constexpr counter_rng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t id) noexcept
      : key_(mix_keys(seed, epoch, id)) {}
  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }
  constexpr result_type operator()() noexcept { return splitmix64(key_ + counter_++ * 0xd1342543de82ef95ULL); }
  // Uniform double in [0, 1) from the top 53 bits.
  constexpr double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) by Lemire's multiply-shift (bias < n / 2^64, negligible here).
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
#if defined(__SIZEOF_INT128__)
    __extension__ using u128 = unsigned __int128;
    return static_cast<std::uint64_t>((static_cast<u128>((*this)()) * n) >> 64);
#else
    return (*this)() % n;
#endif
  }

 private:
  std::uint64_t key_ = 0;
  std::uint64_t counter_ = 0;
};

// Bijection on [0, n): a balanced Feistel network on the smallest even-bit power of two >= n,
// with cycle walking to stay inside [0, n). Cycle walking needs < 4 rounds on average since the
// domain is at most 4n. Six rounds of a splitmix-based round function mix well enough that
// consecutive positions land far apart (tested for uniformity of position -> index).
// Built on the host (the constructor uses std::bit_width); applying it, operator(), also runs on
// the device: cuda/resident.hpp computes each epoch's order there with the host samplers' keys.
class feistel_permutation {
 public:
  constexpr feistel_permutation() noexcept = default;
  constexpr feistel_permutation(std::uint64_t n, std::uint64_t key) noexcept : n_(n), key_(key) {
    unsigned bits = n <= 1 ? 2 : static_cast<unsigned>(std::bit_width(n - 1));
    bits += bits & 1u;  // even, so both halves have the same width
    if (bits < 2) bits = 2;
    half_bits_ = bits / 2;
    mask_ = (std::uint64_t{1} << half_bits_) - 1;
  }
  [[nodiscard]] SLUICE_HOST_DEVICE constexpr std::uint64_t size() const noexcept { return n_; }
  [[nodiscard]] SLUICE_HOST_DEVICE constexpr std::uint64_t operator()(std::uint64_t pos) const noexcept {
    std::uint64_t x = pos;
    do { x = encrypt(x); } while (x >= n_);
    return x;
  }

 private:
  [[nodiscard]] SLUICE_HOST_DEVICE constexpr std::uint64_t encrypt(std::uint64_t x) const noexcept {
    std::uint64_t l = x >> half_bits_, r = x & mask_;
    for (std::uint64_t round = 0; round < 6; ++round) {
      std::uint64_t f = splitmix64(r ^ mix_keys(key_, round)) & mask_;
      std::uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    return (l << half_bits_) | r;
  }
  std::uint64_t n_ = 0;
  std::uint64_t key_ = 0;
  unsigned half_bits_ = 1;
  std::uint64_t mask_ = 1;
};

}  // namespace sluice
