// PNG codec: every colour type and bit depth, plain and interlaced, decodes to exactly the pixels
// the file holds (converted to RGB, grey, with or without alpha); the resize/crop/flip pass is the
// shared one of codec/transform.hpp; CHW is the transpose of HWC; the decode stage and
// decode<"f"> take it like the JPEG codec.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "png_writer.hpp"
#include "sluice/codec/png.hpp"
#include "sluice/stage/decode.hpp"

using namespace sluice;
using namespace sluice::codecs;
using sluice_test::expected_png_pixels;
using sluice_test::make_png_spec;
using sluice_test::write_png;

namespace {
std::vector<std::uint8_t> decode_native(const sluice_test::png_spec& s, pixels f, bool alpha,
                                        image_layout l = image_layout::hwc) {
  const png dec({.width = s.width, .height = s.height, .mode = fit::stretch, .layout = l},
                {.format = f, .keep_alpha = alpha});
  std::vector<std::byte> out(dec.output_bytes());
  dec.decode(write_png(s), out, {});
  std::vector<std::uint8_t> u(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) u[i] = std::to_integer<std::uint8_t>(out[i]);
  return u;
}
std::string kind(const sluice_test::png_spec& s) {
  return "colour type " + std::to_string(s.color_type) + ", " + std::to_string(s.bit_depth) + "-bit" +
         (s.interlaced ? ", interlaced" : "") + (s.palette_alpha.empty() ? "" : ", tRNS");
}
struct png_kind {
  int color_type, bit_depth;
  bool trns = false;
};
const png_kind kAllKinds[] = {
    {PNG_COLOR_TYPE_GRAY, 1},       {PNG_COLOR_TYPE_GRAY, 2},          {PNG_COLOR_TYPE_GRAY, 4},
    {PNG_COLOR_TYPE_GRAY, 8},       {PNG_COLOR_TYPE_GRAY, 16},         {PNG_COLOR_TYPE_GRAY_ALPHA, 8},
    {PNG_COLOR_TYPE_GRAY_ALPHA, 16}, {PNG_COLOR_TYPE_PALETTE, 1},      {PNG_COLOR_TYPE_PALETTE, 2},
    {PNG_COLOR_TYPE_PALETTE, 4},    {PNG_COLOR_TYPE_PALETTE, 8},       {PNG_COLOR_TYPE_PALETTE, 8, true},
    {PNG_COLOR_TYPE_PALETTE, 4, true}, {PNG_COLOR_TYPE_RGB, 8},        {PNG_COLOR_TYPE_RGB, 16},
    {PNG_COLOR_TYPE_RGB_ALPHA, 8},  {PNG_COLOR_TYPE_RGB_ALPHA, 16},
};
sluice_test::png_spec spec_of(const png_kind& k, bool interlaced, int w = 13, int h = 7) {
  auto s = make_png_spec(k.color_type, k.bit_depth, interlaced, w, h);
  if (k.trns)
    for (std::size_t i = 0; i < s.palette.size() / 2 + 1; ++i) s.palette_alpha.push_back(static_cast<std::uint8_t>(i * 29));
  return s;
}
int max_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  int d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(int(a[i]) - int(b[i])));
  return d;
}
}  // namespace

TEST_CASE("png: every colour type and bit depth, plain and interlaced, decodes to the stored pixels") {
  for (const auto& k : kAllKinds)
    for (bool interlaced : {false, true}) {
      const auto s = spec_of(k, interlaced);
      INFO(kind(s));
      CHECK(decode_native(s, pixels::rgb, false) == expected_png_pixels(s, true, false));
      CHECK(decode_native(s, pixels::rgb, true) == expected_png_pixels(s, true, true));
      const bool colour = (k.color_type & PNG_COLOR_MASK_COLOR) != 0;
      if (!colour) {
        CHECK(decode_native(s, pixels::grey, false) == expected_png_pixels(s, false, false));
        CHECK(decode_native(s, pixels::grey, true) == expected_png_pixels(s, false, true));
      } else {  // luma by libpng's fixed-point weights: within one step of the rounded formula
        CHECK(max_abs_diff(decode_native(s, pixels::grey, false), expected_png_pixels(s, false, false)) <= 1);
        CHECK(max_abs_diff(decode_native(s, pixels::grey, true), expected_png_pixels(s, false, true)) <= 1);
      }
    }
}

TEST_CASE("png: a larger interlaced image (every Adam7 pass non-empty) equals its non-interlaced twin") {
  for (const auto& k : {png_kind{PNG_COLOR_TYPE_RGB, 8}, png_kind{PNG_COLOR_TYPE_GRAY, 2},
                        png_kind{PNG_COLOR_TYPE_RGB_ALPHA, 16}}) {
    const auto a = spec_of(k, false, 67, 45), b = spec_of(k, true, 67, 45);
    INFO(kind(b));
    CHECK(write_png(a) != write_png(b));
    CHECK(decode_native(b, pixels::rgb, true) == expected_png_pixels(a, true, true));
    CHECK(decode_native(a, pixels::rgb, true) == decode_native(b, pixels::rgb, true));
  }
}

TEST_CASE("png: the header is read without decoding") {
  const auto s = spec_of({PNG_COLOR_TYPE_PALETTE, 4}, true, 31, 9);
  const auto h = read_png_header(write_png(s));
  CHECK(h.width == 31);
  CHECK(h.height == 9);
  CHECK(h.bit_depth == 4);
  CHECK(h.color_type == PNG_COLOR_TYPE_PALETTE);
  CHECK(h.interlaced);
}

TEST_CASE("png: resize, crop and flip are the shared transform pass, CHW is the transpose of HWC") {
  const auto s = spec_of({PNG_COLOR_TYPE_RGB, 8}, false, 80, 60);
  const auto enc = write_png(s);
  const auto full = expected_png_pixels(s, true, false);
  const geometry_options o{
      .width = 24, .height = 20, .crop = crop_at::random, .resize_scale = 1.3, .random_flip = true};
  const png hwc(o);
  geometry_options oc = o;
  oc.layout = image_layout::chw;
  const png chw(oc);
  CHECK(chw.geometry().shape[0] == 3);
  CHECK(hwc.geometry().shape[2] == 3);
  for (std::uint64_t id = 0; id < 8; ++id) {
    const sample_context ctx{.seed = 3, .epoch = 1, .id = id};
    std::vector<std::byte> got(hwc.output_bytes()), ref(hwc.output_bytes()), planes(chw.output_bytes());
    hwc.decode(enc, got, ctx);
    resample(full.data(), s.width, s.height, static_cast<std::size_t>(s.width) * 3, 3, ref,
             plan_geometry(s.width, s.height, hwc.transform_options(), ctx));
    CHECK(got == ref);
    chw.decode(enc, planes, ctx);
    const std::size_t plane = 24 * 20;
    bool transposed = true;
    for (std::size_t p = 0; p < plane; ++p)
      for (std::size_t k = 0; k < 3; ++k) transposed = transposed && planes[k * plane + p] == got[p * 3 + k];
    CHECK(transposed);
  }
}

TEST_CASE("png: RGBA output keeps four channels through resize, usage errors") {
  const auto s = spec_of({PNG_COLOR_TYPE_RGB_ALPHA, 8}, false, 40, 30);
  const png dec({.width = 10, .height = 10, .layout = image_layout::chw}, {.keep_alpha = true});
  CHECK(dec.channels() == 4);
  CHECK(dec.output_bytes() == 400);
  CHECK(dec.geometry().shape[0] == 4);
  std::vector<std::byte> out(dec.output_bytes());
  dec.decode(write_png(s), out, {});
  std::vector<std::byte> small(10);
  CHECK_THROWS_AS(dec.decode(write_png(s), small, {}), usage_error);
  CHECK_THROWS_AS(png({.width = 0}), usage_error);
  CHECK_THROWS_AS(png({.layout = image_layout::none}), usage_error);
}

namespace {
struct png_records {
  using reader_concept = reader_tag;
  std::vector<std::vector<std::byte>> enc;
  explicit png_records(int n, int corrupt_at = -1) {
    for (int i = 0; i < n; ++i) {
      const auto& k = kAllKinds[static_cast<std::size_t>(i) % std::size(kAllKinds)];
      enc.push_back(write_png(spec_of(k, i % 2 == 1, 20 + i, 16 + i % 5)));
      if (i == corrupt_at) enc.back().resize(enc.back().size() - 20);
    }
  }
  std::size_t size() const { return enc.size(); }
  std::span<const std::byte> record(std::size_t i) const { return enc[i]; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(i % 3); }
  std::string_view path() const { return "memory-pngs"; }
};
using png_schema = schema<field<"png", std::uint8_t, variable>, field<"label", std::int64_t>>;
}  // namespace

TEST_CASE("decode stage with the png codec: identical for 1 and 2 workers, a bad record is named") {
  const png_records r(23);
  const png codec({.width = 12, .height = 10, .crop = crop_at::random, .resize_scale = 1.2, .random_flip = true});
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::sequential(r.size())) | read(r) | decode(codec) | collate({.batch = 5}) |
                  prefetch(2, {.workers = workers, .seed = 4});
    std::vector<std::byte> all;
    for (auto& b : loader.epoch(0)) all.insert(all.end(), b.bytes().begin(), b.bytes().end());
    return all;
  };
  const auto one = run(1);
  REQUIRE(one.size() == r.size() * codec.output_bytes());
  std::vector<std::byte> direct(codec.output_bytes());
  codec.decode(r.record(7), direct, {.seed = 4, .epoch = 0, .id = 7, .position = 7});
  CHECK(std::equal(direct.begin(), direct.end(), one.begin() + 7 * codec.output_bytes()));
  CHECK(run(2) == one);

  const png_records bad(9, 6);
  auto loader = from(sample::sequential(bad.size())) | read(bad) | decode(codec) | collate({.batch = 3}) |
                prefetch(2, {.workers = 2});
  std::string msg;
  try {
    for (auto& b : loader.epoch(0)) (void)b;
  } catch (const sluice::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("memory-pngs") != std::string::npos);
  CHECK(msg.find("record 6") != std::string::npos);
  CHECK(msg.find("PNG") != std::string::npos);
}

TEST_CASE("decode<\"png\">: a field decoded by the png codec, a bad field names file, record and field") {
  const png_records r(6);
  std::vector<std::int64_t> labels{0, 1, 2, 0, 1, 2};
  auto make = [&](std::size_t i, std::span<const std::byte> bytes) {
    fields_sample<png_schema> s{.id = i, .origin = "memory-fields"};
    s.set<"png">(bytes);
    s.set<"label">(std::span<const std::int64_t>(&labels[i], 1));
    return s;
  };
  const png codec({.width = 8, .height = 8, .layout = image_layout::chw});
  const auto stage = decode<"png">(codec);
  const auto d = stage(make(3, r.record(3)), {});
  std::vector<std::byte> got(codec.output_bytes()), direct(codec.output_bytes());
  d.write<"png">(got, {});
  codec.decode(r.record(3), direct, {});
  CHECK(got == direct);
  CHECK(d.geometry_of<"png">().layout == image_layout::chw);

  const auto dbad = stage(make(2, r.record(2).first(40)), {});
  try {
    try {
      dbad.write<"png">(got, {});
      FAIL("no error");
    } catch (const stage_error& se) {  // the decode stage's error, the codec's nested in it
      CHECK(std::string(se.what()).find("decode<\"png\">") != std::string::npos);
      std::rethrow_if_nested(se);
    }
    FAIL("no nested error");
  } catch (const format_error& e) {
    CHECK(e.file() == "memory-fields");
    CHECK(e.record() == 2);
    CHECK(std::string(e.what()).find("field 'png'") != std::string::npos);
  }
}

TEST_CASE("png: no heap allocation per image once the largest image has been seen") {
  auto& arena = sluice::codecs::detail::thread_png_arena();
  std::vector<std::vector<std::byte>> pngs;
  for (int i = 0; i < 12; ++i)  // different kinds and sizes, the largest among them
    pngs.push_back(write_png(spec_of(kAllKinds[static_cast<std::size_t>(i) % std::size(kAllKinds)], i % 3 == 0,
                                     200 + 37 * (i % 4), 50 + 11 * (i % 5))));
  const png dec({.width = 32, .height = 32}, {.keep_alpha = true});
  std::vector<std::byte> out(dec.output_bytes());
  for (const auto& p : pngs) dec.decode(p, out, {});  // warm-up
  const auto before = arena.heap_allocations;
  for (int round = 0; round < 5; ++round)
    for (const auto& p : pngs) dec.decode(p, out, {});
  CHECK(arena.heap_allocations == before);
  CHECK(arena.blocks == 1);
  // Errors leave the arena usable.
  CHECK_THROWS_AS(dec.decode(std::span(pngs[3]).first(100), out, {}), format_error);
  dec.decode(pngs[3], out, {});
  CHECK(arena.heap_allocations == before);
}
