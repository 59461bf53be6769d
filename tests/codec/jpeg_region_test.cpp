// Region decode: the JPEG codec decodes only the rectangle its resample reads (rows skipped, columns
// cropped to libjpeg's iMCU grid). Its output must be the bytes of a full TurboJPEG decode at the
// same DCT scale followed by the same resample, for every transform: random_resized_crop, centre
// and random crops, stretch, flips, grey and colour, every chroma subsampling, progressive files,
// CMYK, both layouts, with and without DCT scaling. And a file cut short or corrupt below the
// region still fails, whatever the crop.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "sluice/core/random.hpp"
#include "tj_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
// Photo-like pixels: gradients plus noise, so every block carries detail and an off-by-one row or
// column shows.
std::vector<std::uint8_t> noisy(int w, int h, int ch, std::uint64_t seed) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(w) * h * ch);
  counter_rng g(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < ch; ++c)
        p[(static_cast<std::size_t>(y) * w + x) * ch + c] =
            static_cast<std::uint8_t>((x * (c + 1) + y * (3 - c % 3)) / 4 + g.below(48));
  return p;
}

std::vector<std::byte> compress(const std::vector<std::uint8_t>& px, int w, int h, int pf, int samp, int flags) {
  return sluice_test::tj_compress(px, w, h, pf, samp, flags);
}

// What the codec must equal: TurboJPEG's full decode at the scale the codec picks, then the
// same resample over the whole image.
std::vector<std::byte> reference(const std::vector<std::byte>& jpg, const jpeg& codec, const image_transform& t) {
  tjhandle h = tjInitDecompress();
  int w = 0, hh = 0, ss = 0, cs = 0;
  REQUIRE(tjDecompressHeader3(h, reinterpret_cast<const unsigned char*>(jpg.data()), jpg.size(), &w, &hh, &ss, &cs) == 0);
  tjscalingfactor sf{1, 1};
  if (codec.options().dct_scaling) sf = codecs::detail::pick_scale(source_scale_needed(t));
  const int dw = TJSCALED(w, sf), dh = TJSCALED(hh, sf), c = codec.channels();
  const bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  std::vector<std::uint8_t> full(static_cast<std::size_t>(dw) * dh * (cmyk ? 4 : c));
  const int pf = cmyk ? TJPF_CMYK : c == 3 ? TJPF_RGB : TJPF_GRAY;
  REQUIRE(tjDecompress2(h, reinterpret_cast<const unsigned char*>(jpg.data()), jpg.size(), full.data(), dw, 0, dh, pf,
                        TJFLAG_STOPONWARNING | (codec.options().fast_dct ? TJFLAG_FASTDCT : 0)) == 0);
  tjDestroy(h);
  if (cmyk) codecs::detail::cmyk_to(full.data(), static_cast<std::size_t>(dw) * dh, c, codecs::detail::has_adobe_marker(jpg));
  std::vector<std::byte> out(codec.output_bytes());
  resample(full.data(), dw, dh, static_cast<std::size_t>(dw) * c, c, out,
           to_plan(t, dw, dh, codec.transform_options().layout));
  return out;
}

std::size_t differing(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

struct source {
  std::string name;
  std::vector<std::byte> jpg;
};
std::vector<source> sources() {
  std::vector<source> s;
  const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_411};
  const char* names[] = {"444", "422", "420", "440", "411"};
  for (int k = 0; k < 5; ++k) {
    const int w = 301 + 37 * k, h = 203 + 29 * k;  // sizes off the iMCU grid
    s.push_back({std::string("rgb ") + names[k] + " " + std::to_string(w) + "x" + std::to_string(h),
                 compress(noisy(w, h, 3, 7 + k), w, h, TJPF_RGB, samps[k], 0)});
  }
  s.push_back({"progressive 420", compress(noisy(333, 250, 3, 21), 333, 250, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE)});
  s.push_back({"grey", compress(noisy(257, 199, 1, 22), 257, 199, TJPF_GRAY, TJSAMP_GRAY, 0)});
  s.push_back({"cmyk (ycck, adobe)", compress(noisy(190, 150, 4, 23), 190, 150, TJPF_CMYK, TJSAMP_420, 0)});
  s.push_back({"large 420 (DCT scaling)", compress(noisy(1200, 900, 3, 24), 1200, 900, TJPF_RGB, TJSAMP_420, 0)});
  return s;
}
}  // namespace

TEST_CASE("jpeg region decode: the bytes of a full decode followed by the same resample, for many transforms") {
  const auto srcs = sources();
  struct setup {
    const char* name;
    geometry_options g;
    jpeg_options o;
  };
  const setup setups[] = {
      {"random_resized_crop 224", {.mode = fit::random_resized_crop, .random_flip = true}, {}},
      {"random_resized_crop 64 chw",
       {.width = 64, .height = 48, .mode = fit::random_resized_crop, .random_flip = true, .layout = image_layout::chw},
       {}},
      {"random_resized_crop small scale",
       {.width = 96, .height = 96, .mode = fit::random_resized_crop, .scale = {0.01, 0.1}},
       {}},
      {"centre crop", {.width = 128, .height = 96}, {}},
      {"random crop, resize_scale 1.3",
       {.width = 100, .height = 120, .crop = crop_at::random, .resize_scale = 1.3, .random_flip = true},
       {}},
      {"stretch", {.width = 80, .height = 50, .mode = fit::stretch}, {}},
      {"grey random_resized_crop",
       {.width = 90, .height = 70, .mode = fit::random_resized_crop},
       {.format = pixels::grey}},
      {"no DCT scaling, fast DCT",
       {.width = 64, .height = 64, .mode = fit::random_resized_crop},
       {.dct_scaling = false, .fast_dct = true}},
  };
  std::size_t checked = 0, regions = 0;
  for (const auto& st : setups) {
    const jpeg codec(st.g, st.o);
    std::vector<std::byte> out(codec.output_bytes());
    for (const auto& s : srcs) {
      for (std::uint64_t id = 0; id < 24; ++id) {
        CAPTURE(st.name);
        CAPTURE(s.name);
        CAPTURE(id);
        const sample_context ctx{.seed = 5, .epoch = id % 3, .id = id};
        const auto t = codec.plan(s.jpg, ctx);
        codec.decode(s.jpg, out, ctx);
        REQUIRE(differing(out, reference(s.jpg, codec, t)) == 0);
        ++checked;
        regions += t.w < t.src_width * 0.9 || t.h < t.src_height * 0.9;
      }
    }
  }
  CHECK(checked == 8 * 9 * 24);
  CHECK(regions > checked / 3);  // most transforms keep a real region, not the whole image
}

TEST_CASE("jpeg region decode: windows at every edge and corner, one pixel wide, and the whole image") {
  const auto jpg = compress(noisy(203, 141, 3, 3), 203, 141, TJPF_RGB, TJSAMP_420, 0);
  const jpeg codec({.width = 32, .height = 24});
  std::vector<std::byte> out(codec.output_bytes());
  const double windows[][4] = {{0, 0, 40, 30},     {163, 0, 40, 30},  {0, 111, 40, 30}, {163, 111, 40, 30},
                               {100, 70, 1, 1},    {0, 0, 203, 141},  {17.5, 9.25, 33.3, 20.1},
                               {202, 140, 1, 1},   {15, 15, 2, 120},  {8, 64, 190, 2}};
  for (const auto& w : windows) {
    for (bool flip : {false, true}) {
      CAPTURE(w[0]);
      CAPTURE(w[1]);
      CAPTURE(flip);
      const image_transform t{.src_width = 203, .src_height = 141, .x = w[0], .y = w[1], .w = w[2], .h = w[3],
                              .out_width = 32, .out_height = 24, .flip = flip};
      codec.decode_with(jpg, out, t);
      CHECK(differing(out, reference(jpg, codec, t)) == 0);
    }
  }
}

TEST_CASE("jpeg region decode: a file cut short or corrupt below the region fails as a full decode does") {
  const auto jpg = compress(noisy(320, 480, 3, 9), 320, 480, TJPF_RGB, TJSAMP_420, 0);
  const jpeg codec({.width = 32, .height = 32});
  std::vector<std::byte> out(codec.output_bytes());
  // A window in the top rows: the region ends long before the data does.
  const image_transform top{.src_width = 320, .src_height = 480, .x = 10, .y = 0, .w = 32, .h = 32,
                            .out_width = 32, .out_height = 32};
  codec.decode_with(jpg, out, top);  // whole: fine
  const std::vector<std::byte> cut(jpg.begin(), jpg.begin() + static_cast<std::ptrdiff_t>(jpg.size() * 2 / 3));
  try {
    codec.decode_with(cut, out, top);
    FAIL("a truncated JPEG decoded");
  } catch (const format_error& e) {
    CHECK(std::string(e.what()).find("JPEG decode") != std::string::npos);
  }
  // The thread's decompressor recovers: the next good image decodes to the reference.
  codec.decode_with(jpg, out, top);
  CHECK(differing(out, reference(jpg, codec, top)) == 0);
}

TEST_CASE("source_region: the rectangle covers every tap and nothing on a side it does not need") {
  const geometry_options g{.width = 50, .height = 40, .mode = fit::random_resized_crop, .random_flip = true};
  for (std::uint64_t id = 0; id < 200; ++id) {
    const auto t = plan_transform(640, 480, g, {.seed = 1, .id = id});
    const auto p = to_plan(t, 640, 480);
    const auto r = source_region(p, 640, 480);
    REQUIRE(r.x >= 0);
    REQUIRE(r.y >= 0);
    REQUIRE(r.x + r.w <= 640);
    REQUIRE(r.y + r.h <= 480);
    // It spans the window's first to last sample (half a step in from each edge), at most a
    // pixel more on each side.
    const double sx = t.w / 50, sy = t.h / 40;
    CHECK(r.x >= std::floor(t.x + sx / 2 - 0.5) - 1);
    CHECK(r.x <= t.x + sx / 2);
    CHECK(r.x + r.w <= std::ceil(t.x + t.w - sx / 2 + 0.5) + 1);
    CHECK(r.x + r.w >= t.x + t.w - sx / 2);
    CHECK(r.y >= std::floor(t.y + sy / 2 - 0.5) - 1);
    CHECK(r.y <= t.y + sy / 2);
    CHECK(r.y + r.h <= std::ceil(t.y + t.h - sy / 2 + 0.5) + 1);
    CHECK(r.y + r.h >= t.y + t.h - sy / 2);
    // Resampling from a copy of only that region gives the same bytes as from the whole image.
    std::vector<std::uint8_t> img(640 * 480 * 3);
    counter_rng rng(id);
    for (auto& v : img) v = static_cast<std::uint8_t>(rng.below(256));
    std::vector<std::uint8_t> part(static_cast<std::size_t>(r.w) * r.h * 3);
    for (int y = 0; y < r.h; ++y)
      std::copy_n(&img[(static_cast<std::size_t>(r.y + y) * 640 + r.x) * 3], static_cast<std::size_t>(r.w) * 3,
                  &part[static_cast<std::size_t>(y) * r.w * 3]);
    std::vector<std::byte> a(50 * 40 * 3), b(50 * 40 * 3);
    resample(img.data(), 640, 480, 640 * 3, 3, a, p);
    resample(part.data(), 640, 480, static_cast<std::size_t>(r.w) * 3, 3, b, p, r);
    REQUIRE(a == b);
  }
  // A region that misses a tap is refused, not read past.
  const auto t = plan_transform(640, 480, g, {.seed = 1, .id = 3});
  const auto p = to_plan(t, 640, 480);
  auto r = source_region(p, 640, 480);
  r.w -= 1;
  std::vector<std::uint8_t> part(static_cast<std::size_t>(r.w + 1) * (r.h + 1) * 3);
  std::vector<std::byte> b(50 * 40 * 3);
  CHECK_THROWS_AS(resample(part.data(), 640, 480, static_cast<std::size_t>(r.w) * 3, 3, b, p, r), usage_error);
}
