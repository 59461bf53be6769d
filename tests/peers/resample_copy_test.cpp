// codec/transform.hpp: a window of whole pixels at scale 1 is copied, not resampled. The peers
// JPEG bench depends on this path (64x64 JPEGs decoded to 64x64); it must give exactly the bytes
// bilinear sampling gives (one source pixel per output pixel, weight 0 on its neighbour).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "sluice/codec/transform.hpp"

namespace {
std::vector<std::uint8_t> random_image(int w, int h, int c, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(w) * h * c);
  for (auto& x : v) x = static_cast<std::uint8_t>(rng());
  return v;
}
}  // namespace

TEST_CASE("scale-1 windows are exact copies of the source pixels") {
  using namespace sluice::codecs;
  const int c = 3;
  SUBCASE("same size") {
    auto src = random_image(64, 64, c, 1);
    std::vector<std::byte> dst(src.size());
    resample(src.data(), 64, 64, 64 * c, c, dst, plan_geometry(64, 64, {.width = 64, .height = 64}, {}));
    CHECK(std::memcmp(dst.data(), src.data(), src.size()) == 0);
  }
  SUBCASE("centre crop of a taller image (whole-pixel offset) and a pitch wider than a row") {
    const int w = 64, h = 80, pitch = w * c + 16;
    auto img = random_image(pitch, h, 1, 2);
    std::vector<std::byte> dst(64 * 64 * c);
    const auto plan = plan_geometry(w, h, {.width = 64, .height = 64}, {});
    REQUIRE(plan.offset_y == 8.0);
    resample(img.data(), w, h, pitch, c, dst, plan);
    for (int y = 0; y < 64; ++y)
      CHECK(std::memcmp(dst.data() + y * 64 * c, img.data() + (y + 8) * pitch, 64 * c) == 0);
  }
  SUBCASE("the bilinear path at scale 1 (forced by a flip) gives the mirrored same pixels") {
    auto src = random_image(64, 64, c, 3);
    std::vector<std::byte> dst(src.size());
    auto plan = plan_geometry(64, 64, {.width = 64, .height = 64}, {});
    plan.flip = true;
    resample(src.data(), 64, 64, 64 * c, c, dst, plan);
    std::uint64_t mismatches = 0;
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 64; ++x)
        for (int k = 0; k < c; ++k)
          mismatches += static_cast<std::uint8_t>(dst[static_cast<std::size_t>((y * 64 + x) * c + k)]) !=
                        src[static_cast<std::size_t>((y * 64 + 63 - x) * c + k)];
    CHECK(mismatches == 0);
  }
  SUBCASE("a half-pixel offset still interpolates") {
    const int w = 64, h = 65;
    auto src = random_image(w, h, c, 4);
    std::vector<std::byte> dst(64 * 64 * c);
    const auto plan = plan_geometry(w, h, {.width = 64, .height = 64}, {});
    REQUIRE(plan.offset_y == 0.5);
    resample(src.data(), w, h, w * c, c, dst, plan);
    // Output row 0 is the rounded mean of source rows 0 and 1.
    for (int x = 0; x < 64 * c; ++x) {
      const float v = 0.5f * src[static_cast<std::size_t>(x)] + 0.5f * src[static_cast<std::size_t>(w * c + x)];
      CHECK(static_cast<int>(static_cast<std::uint8_t>(dst[static_cast<std::size_t>(x)])) == static_cast<int>(v + 0.5f));
    }
  }
}
