// The fixed-point bilinear pass (codec/transform.hpp): within 1 of the float pass it replaced, in
// few values; its SSE2 row blend and its scalar fallback give the same bytes; every channel count
// and layout; regions (origin) give the bytes of the whole image.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "sluice/codec/transform.hpp"
#include "sluice/core/random.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
std::vector<std::uint8_t> random_image(int w, int h, int c, std::uint64_t seed, bool smooth) {
  std::vector<std::uint8_t> img(static_cast<std::size_t>(w) * h * c);
  counter_rng g(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        img[(static_cast<std::size_t>(y) * w + x) * c + k] =
            smooth ? static_cast<std::uint8_t>((x * 3 + y * 2 + k * 40) % 256) : static_cast<std::uint8_t>(g.below(256));
  return img;
}
}  // namespace

TEST_CASE("resample: the fixed-point pass is within 1 of the float pass, in about 1 % of the values") {
  std::size_t values = 0, off_by_one = 0;
  int worst = 0;
  for (int c : {1, 2, 3, 4}) {
    for (auto layout : {image_layout::hwc, image_layout::chw}) {
      for (std::uint64_t id = 0; id < 40; ++id) {
        const int w = 37 + static_cast<int>(id * 13 % 400), h = 29 + static_cast<int>(id * 7 % 300);
        const auto img = random_image(w, h, c, id, id % 2 == 0);
        const geometry_options o{.width = 24 + static_cast<int>(id % 5) * 20, .height = 16 + static_cast<int>(id % 3) * 30,
                                 .mode = id % 4 == 0 ? fit::stretch : fit::random_resized_crop,
                                 .random_flip = true, .layout = layout};
        const auto p = to_plan(plan_transform(w, h, o, {.seed = 3, .id = id}), w, h, layout);
        std::vector<std::byte> a(static_cast<std::size_t>(o.width) * o.height * c), b(a.size());
        resample(img.data(), w, h, static_cast<std::size_t>(w) * c, c, a, p);
        codecs::detail::resample_float(img.data(), w, h, static_cast<std::size_t>(w) * c, c, b, p);
        for (std::size_t i = 0; i < a.size(); ++i) {
          const int d = std::abs(std::to_integer<int>(a[i]) - std::to_integer<int>(b[i]));
          worst = std::max(worst, d);
          off_by_one += d != 0;
        }
        values += a.size();
      }
    }
  }
  MESSAGE("fixed vs float: " << values << " values, " << off_by_one << " differ by 1");
  CHECK(worst <= 1);
  CHECK(off_by_one * 100 < values * 3);  // measured: about 1 %
  CHECK(values > 500000);
}

TEST_CASE("resample: the SSE2 row blend and the scalar fallback give the same values") {
  counter_rng g(11);
  std::vector<std::uint8_t> a(300), b(300);
  std::vector<std::int16_t> m1(300), m2(300);
  for (int round = 0; round < 200; ++round) {
    for (auto& v : a) v = static_cast<std::uint8_t>(g.below(256));
    for (auto& v : b) v = static_cast<std::uint8_t>(g.below(256));
    if (round % 10 == 0) std::fill(a.begin(), a.end(), 255), std::fill(b.begin(), b.end(), 255);
    const auto w = static_cast<std::int32_t>(g.below((1 << codecs::detail::weight_bits) + 1));
    const std::size_t n = g.below(300);
    codecs::detail::blend_rows_scalar(a.data(), b.data(), w, m1.data(), n);
    codecs::detail::blend_rows(a.data(), b.data(), w, m2.data(), n);
    REQUIRE(std::equal(m1.begin(), m1.begin() + static_cast<std::ptrdiff_t>(n), m2.begin()));
    // and the scalar values are the exact blend, rounded, with 7 fractional bits
    for (std::size_t i = 0; i < n; ++i) {
      const double exact = (a[i] * (16384.0 - w) + b[i] * static_cast<double>(w)) / 16384.0 * 128.0;
      REQUIRE(std::abs(m1[i] - exact) <= 0.5);
    }
  }
}

TEST_CASE("resample: a window of whole pixels at scale 1 is copied, flips and upscales blend") {
  const int w = 50, h = 40, c = 3;
  const auto img = random_image(w, h, c, 5, false);
  image_transform t{.src_width = w, .src_height = h, .x = 7, .y = 5, .w = 20, .h = 10, .out_width = 20, .out_height = 10};
  std::vector<std::byte> out(20 * 10 * 3);
  resample(img.data(), w, h, w * c, c, out, to_plan(t, w, h));
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 20; ++x)
      for (int k = 0; k < 3; ++k)
        REQUIRE(std::to_integer<int>(out[(static_cast<std::size_t>(y) * 20 + x) * 3 + k]) ==
                img[(static_cast<std::size_t>(y + 5) * w + x + 7) * 3 + k]);
  // A 2x upscale of a constant image stays constant; a flip mirrors exactly.
  std::vector<std::uint8_t> flat(static_cast<std::size_t>(w) * h * c, 77);
  t = {.src_width = w, .src_height = h, .x = 3.3, .y = 2.7, .w = 10, .h = 5, .out_width = 20, .out_height = 10};
  resample(flat.data(), w, h, w * c, c, out, to_plan(t, w, h));
  CHECK(std::all_of(out.begin(), out.end(), [](std::byte v) { return std::to_integer<int>(v) == 77; }));
  std::vector<std::byte> a(out.size()), b(out.size());
  t = {.src_width = w, .src_height = h, .x = 3.3, .y = 2.7, .w = 31, .h = 17, .out_width = 20, .out_height = 10};
  resample(img.data(), w, h, w * c, c, a, to_plan(t, w, h));
  t.flip = true;
  resample(img.data(), w, h, w * c, c, b, to_plan(t, w, h));
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 20; ++x)
      for (int k = 0; k < 3; ++k)
        REQUIRE(a[(static_cast<std::size_t>(y) * 20 + x) * 3 + k] == b[(static_cast<std::size_t>(y) * 20 + 19 - x) * 3 + k]);
}

TEST_CASE("resample: the SSE2 pixel blend (3 and 4 channels) gives the bytes of the scalar loop") {
  for (int c : {3, 4}) {
    for (bool planar : {false, true}) {
      for (std::uint64_t id = 0; id < 30; ++id) {
        const int w = 60 + static_cast<int>(id * 17 % 300), h = 40 + static_cast<int>(id * 11 % 200);
        const auto img = random_image(w, h, c, id + 100, false);
        const geometry_options o{.width = 33 + static_cast<int>(id % 4) * 40, .height = 21 + static_cast<int>(id % 3) * 50,
                                 .mode = fit::random_resized_crop, .random_flip = true,
                                 .layout = planar ? image_layout::chw : image_layout::hwc};
        const auto p = to_plan(plan_transform(w, h, o, {.seed = 9, .id = id}), w, h, o.layout);
        std::vector<std::uint8_t> a(static_cast<std::size_t>(o.width) * o.height * c), b(a.size());
        const auto pitch = static_cast<std::size_t>(w) * c;
        if (c == 3 && planar) codecs::detail::bilinear_fixed<true, 3>(img.data(), w, h, pitch, c, a.data(), p, {});
        if (c == 3 && !planar) codecs::detail::bilinear_fixed<false, 3>(img.data(), w, h, pitch, c, a.data(), p, {});
        if (c == 4 && planar) codecs::detail::bilinear_fixed<true, 4>(img.data(), w, h, pitch, c, a.data(), p, {});
        if (c == 4 && !planar) codecs::detail::bilinear_fixed<false, 4>(img.data(), w, h, pitch, c, a.data(), p, {});
        // C = 0: the channel count at run time, which takes the scalar loop
        if (planar) codecs::detail::bilinear_fixed<true, 0>(img.data(), w, h, pitch, c, b.data(), p, {});
        else codecs::detail::bilinear_fixed<false, 0>(img.data(), w, h, pitch, c, b.data(), p, {});
        REQUIRE(a == b);
      }
    }
  }
}
