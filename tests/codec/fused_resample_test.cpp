// The one-pass crop/resize/flip/normalise/layout (codec/fused_resample.hpp), the host reference
// of the device kernel: its u8 output is codecs::resample's, byte for byte, and its float output
// is normalize_u8 of those bytes, bit for bit — every channel count, both layouts, random
// resized crops with flips, plain resizes, whole-pixel crops (the copy shortcut), padded pitches.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "sluice/codec/fused_resample.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/core/batch_ops.hpp"
#include "sluice/core/random.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
std::vector<std::uint8_t> random_image(int w, int h, int c, std::size_t pitch, std::uint64_t seed) {
  std::vector<std::uint8_t> img(pitch * static_cast<std::size_t>(h));
  counter_rng g(seed);
  for (int y = 0; y < h; ++y)
    for (std::size_t i = 0; i < static_cast<std::size_t>(w) * c; ++i)
      img[static_cast<std::size_t>(y) * pitch + i] = static_cast<std::uint8_t>(g.below(256));
  return img;
}
}  // namespace

TEST_CASE("fused resample: u8 equals codecs::resample and f32 equals normalize_u8 of it, bit for bit") {
  std::size_t images = 0;
  for (int c : {1, 3, 4}) {
    normalize_params norm(c);
    for (int k = 0; k < c; ++k) norm.set(k, 100.0f + 17.3f * k, 57.1f + 3.9f * k);
    for (auto layout : {image_layout::hwc, image_layout::chw}) {
      for (std::uint64_t id = 0; id < 30; ++id) {
        const int w = 31 + static_cast<int>(id * 37 % 500), h = 23 + static_cast<int>(id * 11 % 380);
        const std::size_t pitch = static_cast<std::size_t>(w) * c + (id % 3) * 7;  // packed and padded rows
        const auto img = random_image(w, h, c, pitch, id * 10 + static_cast<std::uint64_t>(c));
        const fit mode = id % 5 == 0 ? fit::stretch : id % 5 == 1 ? fit::crop : fit::random_resized_crop;
        const geometry_options o{.width = 16 + static_cast<int>(id % 7) * 30,
                                 .height = 12 + static_cast<int>(id % 4) * 40,
                                 .mode = mode,
                                 .crop = id % 2 == 0 ? crop_at::center : crop_at::random,
                                 .resize_scale = 1.0 + static_cast<double>(id % 3) * 0.15,
                                 .random_flip = true,
                                 .layout = layout};
        const image_transform t = plan_transform(w, h, o, {.seed = 9, .epoch = id % 2, .id = id});
        const geometry_plan gp = to_plan(t, w, h, layout);
        const std::size_t n = static_cast<std::size_t>(o.width) * o.height * c;
        std::vector<std::byte> want(n);
        resample(img.data(), w, h, pitch, c, want, gp);

        const fused_taps taps(gp, w, h);
        std::vector<std::byte> got(n);
        fused_resample_host(img.data(), w, h, pitch, taps.plan(c), got);
        REQUIRE_MESSAGE(got == want, "c=" << c << " id=" << id);

        std::vector<float> want_f(n), got_f(n);
        sluice::detail::normalize_u8(reinterpret_cast<const std::uint8_t*>(want.data()), want_f.data(), n,
                                     static_cast<std::size_t>(c), norm.mean, norm.inv_std, layout, layout);
        fused_resample_host(img.data(), w, h, pitch, taps.plan(c, fused_output::f32, norm),
                            std::as_writable_bytes(std::span<float>(got_f)));
        REQUIRE(std::memcmp(got_f.data(), want_f.data(), n * sizeof(float)) == 0);
        ++images;
      }
    }
  }
  CHECK(images == 180);
}

TEST_CASE("fused resample: a whole-pixel crop at scale 1 copies the source's pixels, as the host's shortcut does") {
  const int w = 64, h = 48, c = 3;
  const auto img = random_image(w, h, c, static_cast<std::size_t>(w) * c, 3);
  const image_transform
      t{.src_width = w, .src_height = h, .x = 5, .y = 7, .w = 32, .h = 20, .out_width = 32, .out_height = 20};
  const fused_taps taps(to_plan(t, w, h), w, h);
  std::vector<std::byte> got(32 * 20 * 3);
  fused_resample_host(img.data(), w, h, static_cast<std::size_t>(w) * c, taps.plan(c), got);
  for (int y = 0; y < 20; ++y)
    REQUIRE(std::memcmp(got.data() + static_cast<std::size_t>(y) * 32 * 3,
                        img.data() + (static_cast<std::size_t>(y + 7) * w + 5) * 3, 32 * 3) == 0);
}

TEST_CASE(
    "fused resample: taps for another image size, a short destination and a normalisation of other channels are refused") {
  const auto img = random_image(40, 30, 3, 120, 1);
  const image_transform t = plan_transform(40, 30, {.width = 20, .height = 20}, {});
  const fused_taps taps(to_plan(t, 40, 30), 40, 30);
  std::vector<std::byte> out(20 * 20 * 3);
  CHECK_THROWS_AS(fused_resample_host(img.data(), 20, 30, 60, taps.plan(3), out), usage_error);
  CHECK_THROWS_AS(fused_resample_host(img.data(), 40, 30, 120, taps.plan(3), std::span(out).first(100)), usage_error);
  CHECK_THROWS_AS((void)taps.plan(3, fused_output::f32, normalize_params(1)), usage_error);
  CHECK_THROWS_AS((void)taps.plan(0), usage_error);
}
