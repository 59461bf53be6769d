// Segmentation masks that follow the image (codec/mask.hpp, stage/decode.hpp's rendered
// followers): resample_nearest copies ids (never blends), mirrors with the flip and fills
// ignore_index outside the source; every mask PNG kind decodes to its raw ids (palette indices,
// not colours; sub-8-bit unpacked, not scaled; 16-bit only when the ids fit u8), other kinds are
// refused; through a loader with random_resized_crop + random flip every mask pixel of every batch
// is the id the transform says (nearest neighbour of the output pixel centre), the image's colours
// agree with the mask's ids away from region edges, 1 and 2 workers give the same bytes, a
// WebDataset shard with k.jpg + k.seg.png gives the same batches as the in-memory reader, boxes<>
// and mask<> follow one transform together; a mask of the wrong size and a corrupt PNG (header or
// body) name the file, the record and the field, under raise, and are skipped and counted under
// on_error::skip.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "png_writer.hpp"
#include "sluice/codec/jpeg.hpp"
#include "sluice/codec/mask.hpp"
#include "sluice/io/wds.hpp"
#include "sluice/io/wds_tar.hpp"
#include "sluice/stage/decode.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {

using seg = schema<field<"jpg", std::uint8_t, variable>, field<"seg.png", std::uint8_t, variable>,
                   field<"boxes", float, variable>, field<"classes", std::int64_t, variable>>;

constexpr int border = 6;  // the border band (class 3), thick enough to check its colour too
constexpr int kOutW = 96, kOutH = 80;

// An image and its mask: a frame of class 3, inside it class 1 left of `split` and 2 right of it;
// the image paints class 1 red, 2 blue, 3 green. Boxes: the two inner regions, classes 1 and 2.
struct scene {
  int w = 0, h = 0, split = 0;
  std::vector<std::uint8_t> ids, rgb;
  std::vector<float> boxes;
  std::vector<std::int64_t> classes;
};

int class_at(const scene& s, int x, int y) {
  if (x < border || y < border || x >= s.w - border || y >= s.h - border) return 3;
  return x < s.split ? 1 : 2;
}

scene make_scene(std::uint64_t i) {
  counter_rng rng(91, 0, i);
  scene s;
  s.w = 64 + static_cast<int>(rng.below(96));
  s.h = 48 + static_cast<int>(rng.below(72));
  s.split = s.w / 3 + static_cast<int>(rng.below(static_cast<std::uint64_t>(s.w / 3)));  // asymmetric
  s.ids.resize(static_cast<std::size_t>(s.w) * s.h);
  s.rgb.resize(s.ids.size() * 3);
  for (int y = 0; y < s.h; ++y)
    for (int x = 0; x < s.w; ++x) {
      const auto k = static_cast<std::size_t>(y) * s.w + x;
      const int c = class_at(s, x, y);
      s.ids[k] = static_cast<std::uint8_t>(c);
      std::uint8_t* p = &s.rgb[k * 3];
      p[0] = p[1] = p[2] = 20;
      p[c == 1 ? 0 : c == 2 ? 2 : 1] = 235;
    }
  s.boxes = {float(border), float(border), float(s.split), float(s.h - border),
             float(s.split), float(border), float(s.w - border), float(s.h - border)};
  s.classes = {1, 2};
  return s;
}

// The mask as a PNG of kind k (the kinds a mask may be): 8-bit grey, 8-bit palette whose colours
// say nothing of the ids, 4-bit grey interlaced, 2-bit palette, 16-bit grey.
std::vector<std::byte> mask_png(const scene& s, int kind) {
  sluice_test::png_spec p;
  p.width = s.w, p.height = s.h;
  p.samples.assign(s.ids.begin(), s.ids.end());
  switch (kind % 5) {
    case 0: p.color_type = PNG_COLOR_TYPE_GRAY, p.bit_depth = 8; break;
    case 1: p.color_type = PNG_COLOR_TYPE_PALETTE, p.bit_depth = 8; break;
    case 2: p.color_type = PNG_COLOR_TYPE_GRAY, p.bit_depth = 4, p.interlaced = true; break;
    case 3: p.color_type = PNG_COLOR_TYPE_PALETTE, p.bit_depth = 2; break;
    default: p.color_type = PNG_COLOR_TYPE_GRAY, p.bit_depth = 16; break;
  }
  if (p.color_type == PNG_COLOR_TYPE_PALETTE)
    for (int i = 0; i < (1 << p.bit_depth); ++i)
      p.palette.push_back({static_cast<png_byte>(200 - i), static_cast<png_byte>(17 * i), static_cast<png_byte>(99)});
  return sluice_test::write_png(p);
}

// The reference: output pixel (x, y) takes the id of the source pixel under its centre (through
// the flip), `fill` outside the source. Written from the definition, not from the library.
std::vector<std::uint8_t> expected_mask(const std::vector<std::uint8_t>& ids, int w, int h, const image_transform& t,
                                        std::uint8_t fill) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(t.out_width) * t.out_height);
  for (int y = 0; y < t.out_height; ++y)
    for (int x = 0; x < t.out_width; ++x) {
      const int xo = t.flip ? t.out_width - 1 - x : x;
      const double sx = std::floor(t.x + (xo + 0.5) * t.w / t.out_width);
      const double sy = std::floor(t.y + (y + 0.5) * t.h / t.out_height);
      const bool in = sx >= 0 && sx < w && sy >= 0 && sy < h;
      out[static_cast<std::size_t>(y) * t.out_width + x] =
          in ? ids[static_cast<std::size_t>(sy) * w + static_cast<std::size_t>(sx)] : fill;
    }
  return out;
}

geometry_options rrc() {
  return {.width = kOutW, .height = kOutH, .mode = fit::random_resized_crop, .random_flip = true};
}

struct segs {
  using reader_concept = reader_tag;
  std::vector<scene> all;
  std::vector<std::vector<std::byte>> jpegs, masks;
  std::string name = "segs.tar";
  explicit segs(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      all.push_back(make_scene(i));
      jpegs.push_back(encode_jpeg(all.back().rgb, all.back().w, all.back().h, pixels::rgb, 95, TJSAMP_444));
      masks.push_back(mask_png(all.back(), static_cast<int>(i)));
    }
  }
  [[nodiscard]] std::size_t size() const { return all.size(); }
  [[nodiscard]] std::string_view path() const { return name; }
  [[nodiscard]] fields_sample<seg> fields(std::size_t i) const {
    fields_sample<seg> s{.id = i, .origin = path()};
    s.set<"jpg">(jpegs[i]);
    s.set<"seg.png">(masks[i]);
    s.set<"boxes">(all[i].boxes);
    s.set<"classes">(all[i].classes);
    return s;
  }
};

struct run_result {
  std::vector<std::byte> images, masks;
  std::vector<std::uint64_t> ids;
  std::vector<float> boxes;
  std::size_t checked_colour = 0, flipped = 0;
  std::set<int> seen;
};

// Every batch of an epoch: every mask pixel against the reference, the ids' set, the image's
// colour against the mask's id where the source pixel is far from any region edge.
template <class Reader>
run_result run_masks(const Reader& r, const segs& data, std::size_t workers, std::uint64_t epoch) {
  auto loader = from(sample::shuffle(r.size(), {.seed = 5})) | read(r) |
                decode<"jpg">(jpeg(rrc()), mask<"seg.png">{.ignore_index = 255}) |
                collate({.batch = 8}, stack<"jpg">{}, stack<"seg.png">{}) | prefetch(2, {.workers = workers});
  const jpeg planner(rrc());
  run_result res;
  for (auto& b : loader.epoch(epoch)) {
    auto img = b.template get<"jpg">();
    auto m = b.template get<"seg.png">();
    REQUIRE(m.shape().size() == 3);
    CHECK(m.shape()[0] == static_cast<std::int64_t>(b.size()));
    CHECK(m.shape()[1] == kOutH);
    CHECK(m.shape()[2] == kOutW);
    const auto* ib = reinterpret_cast<const std::uint8_t*>(img.data());
    const auto* mb = reinterpret_cast<const std::uint8_t*>(m.data());
    res.images.insert(res.images.end(), reinterpret_cast<const std::byte*>(ib),
                      reinterpret_cast<const std::byte*>(ib) + img.numel());
    res.masks.insert(res.masks.end(), reinterpret_cast<const std::byte*>(mb),
                     reinterpret_cast<const std::byte*>(mb) + m.numel());
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint64_t id = b.ids()[i];
      res.ids.push_back(id);
      const scene& s = data.all[id];
      const image_transform t = planner.plan(data.jpegs[id], {.seed = 0, .epoch = epoch, .id = id});
      res.flipped += t.flip;
      const auto want = expected_mask(s.ids, s.w, s.h, t, 255);
      const std::uint8_t* got = mb + i * kOutW * kOutH;
      std::size_t wrong = 0;
      for (std::size_t k = 0; k < want.size(); ++k) {
        wrong += got[k] != want[k];
        res.seen.insert(got[k]);
      }
      CHECK_MESSAGE(wrong == 0, "sample ", id, ": ", wrong, " mask pixels differ from the transform's");
      // Colour vs id, where the output pixel's source centre lies well inside one region.
      const double step = std::max(t.w / kOutW, t.h / kOutH);
      const double margin = 2 * step + 4;
      for (int y = 0; y < kOutH; ++y)
        for (int x = 0; x < kOutW; ++x) {
          const int xo = t.flip ? kOutW - 1 - x : x;
          const double sx = t.x + (xo + 0.5) * t.w / kOutW, sy = t.y + (y + 0.5) * t.h / kOutH;
          const double d = std::min({std::abs(sx - border), std::abs(sx - s.split), std::abs(sx - (s.w - border)),
                                     std::abs(sy - border), std::abs(sy - (s.h - border))});
          if (d < margin) continue;
          const int c = got[static_cast<std::size_t>(y) * kOutW + x];
          const std::uint8_t* p = ib + ((i * kOutH + y) * kOutW + x) * 3;
          const int ch = c == 1 ? 0 : c == 2 ? 2 : 1;
          bool ok = c >= 1 && c <= 3;
          for (int k = 0; k < 3 && ok; ++k) ok = k == ch ? p[k] > 160 : p[k] < 100;
          if (!ok) {
            FAIL_CHECK("sample ", id, " pixel (", x, ", ", y, "): id ", c, " but colour (", int(p[0]), ", ", int(p[1]),
                       ", ", int(p[2]), ")");
            break;
          }
          ++res.checked_colour;
        }
    }
  }
  return res;
}

std::vector<std::byte> corrupt_idat(std::vector<std::byte> png) {
  for (std::size_t k = 8; k + 12 < png.size(); ++k)
    if (std::memcmp(png.data() + k, "IDAT", 4) == 0) {
      png[k + 4 + 2] ^= std::byte{0x5a};  // inside the chunk's data: its CRC no longer matches
      return png;
    }
  FAIL("no IDAT chunk");
  return png;
}

}  // namespace

TEST_CASE("resample_nearest: ids copied never blended, the flip mirrors, ignore_index outside the source") {
  const int w = 7, h = 5;
  std::vector<std::uint8_t> ids(static_cast<std::size_t>(w) * h);
  for (std::size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<std::uint8_t>(10 + k);
  auto run = [&](const image_transform& t, std::uint8_t fill) {
    std::vector<std::byte> out(static_cast<std::size_t>(t.out_width) * t.out_height);
    resample_nearest(ids.data(), w, h, w, out, t, fill);
    std::vector<std::uint8_t> u(out.size());
    std::memcpy(u.data(), out.data(), out.size());
    return u;
  };
  // Identity: a copy.
  const image_transform same{.src_width = w, .src_height = h, .w = w, .h = h, .out_width = w, .out_height = h};
  CHECK(run(same, 0) == ids);
  // Up- and down-scaling, fractional windows, flipped or not: the reference, and only source ids.
  for (const bool flip : {false, true})
    for (const image_transform t :
         {image_transform{w, h, 0.5, 1.25, 5.5, 3.0, 13, 11, flip}, image_transform{w, h, 1, 0, 6, 5, 3, 2, flip},
          image_transform{w, h, 0, 0, 7, 5, 20, 3, flip}}) {
      const auto got = run(t, 255);
      CHECK(got == expected_mask(ids, w, h, t, 255));
      for (auto v : got) CHECK((v >= 10 && v < 10 + w * h));
    }
  // The flip mirrors every row.
  const image_transform a{w, h, 0.5, 0.5, 6, 4, 9, 6, false};
  image_transform b = a;
  b.flip = true;
  const auto ua = run(a, 0), ub = run(b, 0);
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 9; ++x) CHECK(ua[y * 9 + x] == ub[y * 9 + (8 - x)]);
  // A pad / letterbox window reaching past the image on every side: ignore_index there.
  for (const bool flip : {false, true}) {
    const image_transform pad{w, h, -3.5, -2, 14, 9, 28, 18, flip};
    const auto got = run(pad, 255);
    CHECK(got == expected_mask(ids, w, h, pad, 255));
    std::size_t filled = 0, inside = 0;
    for (auto v : got) (v == 255 ? filled : inside) += 1;
    CHECK(filled > 0);
    CHECK(inside == static_cast<std::size_t>(w * 2) * (h * 2));  // exactly 2x: each source pixel 4 times
  }
  std::vector<std::byte> small(3);
  CHECK_THROWS_AS(resample_nearest(ids.data(), w, h, w, small, same, 0), usage_error);
  image_transform other = same;
  other.src_width = w + 1;
  std::vector<std::byte> out(static_cast<std::size_t>(w) * h);
  CHECK_THROWS_AS(resample_nearest(ids.data(), w, h, w, out, other, 0), usage_error);
}

TEST_CASE("decode_mask: raw ids of every mask kind (palette indices, unscaled sub-8-bit, 16-bit that fits)") {
  const scene s = make_scene(3);
  const image_transform same{.src_width = s.w, .src_height = s.h, .w = double(s.w), .h = double(s.h),
                             .out_width = s.w, .out_height = s.h};
  std::vector<std::byte> out(s.ids.size());
  for (int kind = 0; kind < 5; ++kind) {
    CAPTURE(kind);
    const auto png = mask_png(s, kind);
    (void)read_mask_header(png, s.w, s.h);
    decode_mask(png, out, same, 255);
    CHECK(std::memcmp(out.data(), s.ids.data(), out.size()) == 0);
  }
  // Interlaced 8-bit palette with every index 0..255 (index 255 too): each pixel is its index.
  sluice_test::png_spec p = sluice_test::make_png_spec(PNG_COLOR_TYPE_PALETTE, 8, true, 37, 11);
  const image_transform t37{.src_width = 37, .src_height = 11, .w = 37, .h = 11, .out_width = 37, .out_height = 11};
  std::vector<std::byte> o37(37 * 11);
  decode_mask(sluice_test::write_png(p), o37, t37, 0);
  for (std::size_t k = 0; k < o37.size(); ++k) CHECK(std::to_integer<int>(o37[k]) == p.samples[k]);
  // 16-bit: an id above 255 is a format_error naming it.
  sluice_test::png_spec g16;
  g16.width = 37, g16.height = 11, g16.bit_depth = 16, g16.color_type = PNG_COLOR_TYPE_GRAY;
  g16.samples.assign(37 * 11, 4);
  g16.samples[37 * 2 + 5] = 300;
  CHECK_THROWS_WITH_AS(decode_mask(sluice_test::write_png(g16), o37, t37, 0),
                       doctest::Contains("16-bit mask value 300 at (5, 2)"), format_error);
  // Colour kinds are refused, naming the kind; so is another size than the image's.
  for (const int ct : {PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA, PNG_COLOR_TYPE_GRAY_ALPHA}) {
    const auto png = sluice_test::write_png(sluice_test::make_png_spec(ct, 8, false, 37, 11));
    CHECK_THROWS_WITH_AS(decode_mask(png, o37, t37, 0), doctest::Contains("grey or palette"), format_error);
    CHECK_THROWS_AS((void)read_mask_header(png, 37, 11), format_error);
  }
  const std::string sizes = "the mask is " + std::to_string(s.w) + "x" + std::to_string(s.h) + " but the image is " +
                            std::to_string(s.w + 1) + "x" + std::to_string(s.h);
  CHECK_THROWS_WITH_AS((void)read_mask_header(mask_png(s, 0), s.w + 1, s.h), doctest::Contains(sizes.c_str()),
                       format_error);
}

TEST_CASE("decode<jpg> with mask<seg.png>: every mask pixel is the transform's, colours agree, any worker count") {
  const segs data(40);
  const auto one = run_masks(data, data, 1, 2);
  const auto two = run_masks(data, data, 2, 2);
  CHECK(one.ids.size() == data.size());
  CHECK(one.seen == std::set<int>{1, 2, 3});  // only source ids: never blended, never ignore_index
  CHECK(one.flipped > 5);
  CHECK(one.flipped < data.size() - 5);
  CHECK(one.checked_colour > 20000);
  CHECK(one.ids == two.ids);
  CHECK(one.masks == two.masks);
  CHECK(one.images == two.images);
  // Another epoch draws other windows.
  const auto other = run_masks(data, data, 2, 3);
  CHECK(other.masks != one.masks);
}

TEST_CASE("decode<jpg> with mask<seg.png>: a WebDataset shard of k.jpg + k.seg.png gives the same batches") {
  const segs data(20);
  sluice_test::temp_dir dir;
  std::vector<std::byte> tar;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const std::string key = "s/" + std::to_string(1000 + i);
    io::append_tar_member(tar, key + ".jpg", data.jpegs[i]);
    io::append_tar_member(tar, key + ".seg.png", data.masks[i]);
  }
  tar.resize(tar.size() + 1024);
  sluice_test::write_file(dir.file("seg-0.tar"), tar);
  using wds_seg = schema<field<"jpg", std::uint8_t, variable>, field<"seg.png", std::uint8_t, variable>>;
  io::wds_dataset<wds_seg> wds(dir.file("seg-0.tar"));
  REQUIRE(wds.size() == data.size());
  const auto from_wds = run_masks(wds, data, 2, 1);
  const auto from_mem = run_masks(data, data, 1, 1);
  CHECK(from_wds.ids == from_mem.ids);
  CHECK(from_wds.masks == from_mem.masks);
  CHECK(from_wds.images == from_mem.images);
}

TEST_CASE("decode<jpg> with boxes<> and mask<> together: one transform for both") {
  const segs data(24);
  auto both = from(sample::shuffle(data.size(), {.seed = 2})) | read(data) |
              decode<"jpg">(jpeg(rrc()), boxes<"boxes", "classes">{.drop_outside = false},
                            mask<"seg.png">{.ignore_index = 0}) |
              collate({.batch = 6}, stack<"jpg">{}, stack<"seg.png">{}, ragged<"boxes">{.row = {4}},
                      ragged<"classes">{}) |
              prefetch(2, {.workers = 2});
  const jpeg planner(rrc());
  std::size_t centres = 0;
  for (auto& b : both.epoch(0)) {
    auto m = b.get<"seg.png">();
    auto bx = b.get<"boxes">();
    auto off = b.get<"boxes.offsets">();
    auto cls = b.get<"classes">();
    const auto* mb = reinterpret_cast<const std::uint8_t*>(m.data());
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint64_t id = b.ids()[i];
      const scene& s = data.all[id];
      const auto t = planner.plan(data.jpegs[id], {.seed = 0, .epoch = 0, .id = id});
      const std::uint8_t* got = mb + i * kOutW * kOutH;
      CHECK(std::equal(got, got + kOutW * kOutH, expected_mask(s.ids, s.w, s.h, t, 0).begin()));
      REQUIRE(off[i + 1] - off[i] == 2);
      // Each box's centre, where the box is wide enough to have one clear of its edges, shows
      // its class in the mask.
      for (auto k = off[i]; k < off[i + 1]; ++k) {
        const float* r = bx.data() + k * 4;
        if (r[2] - r[0] < 6 || r[3] - r[1] < 6) continue;
        const int cx = static_cast<int>((r[0] + r[2]) / 2), cy = static_cast<int>((r[1] + r[3]) / 2);
        CHECK(got[cy * kOutW + cx] == cls[static_cast<std::size_t>(k)]);
        ++centres;
      }
    }
  }
  CHECK(centres > 20);
}

namespace {
struct run_errors {
  std::string first;  // nested text of the error, under raise
  std::size_t delivered = 0;
  std::uint64_t skipped = 0;
  std::vector<std::string> causes;
  bool bad_delivered = false;
};

run_errors errors_of(const segs& data, std::uint64_t bad) {
  run_errors r;
  auto make = [&](on_error e) {
    return from(sample::sequential(data.size())) | read(data) |
           decode<"jpg">(jpeg(rrc()), mask<"seg.png">{}) |
           collate({.batch = 4}, stack<"jpg">{}, stack<"seg.png">{}) | prefetch(2, {.workers = 2, .errors = e});
  };
  {
    auto loader = make(on_error::raise);
    try {
      for (auto& b : loader.epoch(0)) (void)b;
    } catch (const std::exception& e) {
      r.first = sluice_test::nested_text(e);
    }
  }
  auto loader = make(on_error::skip);
  for (auto& b : loader.epoch(0)) {
    r.delivered += b.size();
    for (std::size_t i = 0; i < b.size(); ++i) r.bad_delivered |= b.ids()[i] == bad;
  }
  r.skipped = loader.stats().skipped;
  r.causes = loader.stats().skip_causes;
  return r;
}
}  // namespace

TEST_CASE("decode<jpg> with mask<seg.png>: wrong size and corrupt PNGs name file, record, field, and skip counts them") {
  const std::uint64_t bad = 5;
  auto check_named = [&](const std::string& e) {
    CHECK(e.find("segs.tar") != std::string::npos);
    CHECK(e.find("record 5") != std::string::npos);
    CHECK(e.find("field 'seg.png'") != std::string::npos);
    CHECK(e.find("following 'jpg'") != std::string::npos);
  };
  auto check_skipped = [&](const run_errors& r, const segs& data) {
    CHECK(r.skipped == 1);
    CHECK(r.delivered == data.size() - 1);
    CHECK_FALSE(r.bad_delivered);
    REQUIRE(r.causes.size() == 1);
    CHECK(r.causes[0].find("field 'seg.png'") != std::string::npos);
  };
  SUBCASE("a mask of another size than its image") {
    segs data(12);
    scene small = data.all[bad];
    small.w -= 1;  // one column less
    small.ids.clear();
    for (int y = 0; y < small.h; ++y)
      for (int x = 0; x < small.w; ++x) small.ids.push_back(static_cast<std::uint8_t>(class_at(small, x, y)));
    data.masks[bad] = mask_png(small, 0);
    const auto r = errors_of(data, bad);
    INFO(r.first);
    check_named(r.first);
    CHECK(r.first.find("the mask is " + std::to_string(small.w) + "x" + std::to_string(small.h) +
                       " but the image is " + std::to_string(small.w + 1) + "x" + std::to_string(small.h)) !=
          std::string::npos);
    check_skipped(r, data);
  }
  SUBCASE("a PNG whose header is corrupt (found when the stage runs)") {
    segs data(12);
    data.masks[bad][20] ^= std::byte{0xff};  // inside IHDR: its CRC fails
    const auto r = errors_of(data, bad);
    INFO(r.first);
    check_named(r.first);
    CHECK(r.first.find("PNG header") != std::string::npos);
    check_skipped(r, data);
  }
  SUBCASE("a PNG whose image data is corrupt (found when collate decodes it)") {
    segs data(12);
    data.masks[bad] = corrupt_idat(data.masks[bad]);
    (void)read_mask_header(data.masks[bad], data.all[bad].w, data.all[bad].h);  // the header still reads
    const auto r = errors_of(data, bad);
    INFO(r.first);
    check_named(r.first);
    CHECK(r.first.find("PNG decode") != std::string::npos);
    CHECK(r.first.find("decode<\"jpg\">") != std::string::npos);  // reported as the decode stage's
    check_skipped(r, data);
  }
  SUBCASE("a colour PNG as a mask") {
    segs data(12);
    data.masks[bad] = sluice_test::write_png(
        sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB, 8, false, data.all[bad].w, data.all[bad].h));
    const auto r = errors_of(data, bad);
    INFO(r.first);
    check_named(r.first);
    CHECK(r.first.find("grey or palette") != std::string::npos);
    check_skipped(r, data);
  }
}

TEST_CASE("any_decode_stage with any_mask and any_boxes: run-time samples get the compiled mask<> and boxes<> batches") {
  segs data(16);
  data.masks[11] = mask_png(make_scene(12), 0);  // another scene's size: refused, naming both fields
  sluice_test::temp_dir dir;
  std::vector<std::byte> tar;
  const auto npy = [](const auto& v, const char* descr, std::vector<std::uint64_t> shape) {
    auto out = io::npy_header_bytes(descr, shape);
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(v[0]));
    return out;
  };
  for (std::size_t i = 0; i < data.size(); ++i) {
    const std::string key = "s/" + std::to_string(1000 + i);
    io::append_tar_member(tar, key + ".jpg", data.jpegs[i]);
    io::append_tar_member(tar, key + ".seg.png", data.masks[i]);
    io::append_tar_member(tar, key + ".boxes.npy", npy(data.all[i].boxes, "<f4", {data.all[i].boxes.size() / 4, 4}));
    io::append_tar_member(tar, key + ".classes.npy", npy(data.all[i].classes, "<i8", {data.all[i].classes.size()}));
  }
  tar.resize(tar.size() + 1024);
  sluice_test::write_file(dir.file("seg-0.tar"), tar);
  using wds_seg = schema<field<"jpg", std::uint8_t, variable>, field<"seg.png", std::uint8_t, variable>,
                         field<"boxes.npy", float, variable>, field<"classes.npy", std::int64_t, variable>>;
  io::wds_dataset<wds_seg> typed(dir.file("seg-0.tar"));
  auto compiled = from(sample::shuffle(typed.size(), {.seed = 2})) | read(typed) |
                  decode<"jpg">(jpeg(rrc()), boxes<"boxes.npy", "classes.npy">{}, mask<"seg.png">{.ignore_index = 7}) |
                  collate({.batch = 5}, stack<"jpg">{}, stack<"seg.png">{}, ragged<"boxes.npy">{.row = {4}}, ragged<"classes.npy">{}) |
                  prefetch(2, {.workers = 2, .errors = on_error::skip});
  io::wds_any any(dir.file("seg-0.tar"), {{"jpg"}, {"seg.png"}, {"boxes.npy", dtype::f32}, {"classes.npy", dtype::i64}});
  any_decode_stage dec(any.schema());
  dec.add("jpg", jpeg(rrc()), {any_boxes({"boxes.npy"}, {"classes.npy"}), any_mask("seg.png", 7)});
  CHECK(dec.schema().describe() == "jpg (u8, fixed), seg.png (u8, fixed), boxes.npy (f32, variable), classes.npy (i64, variable)");
  auto run_time = from(sample::shuffle(any.size(), {.seed = 2})) | read(any) | dec |
                  collate({.batch = 5}, dec.schema(), {{"jpg", stack<>{}}, {"seg.png", stack<>{}}, {"boxes.npy", ragged<>{.row = {4}}},
                                                       {"classes.npy", ragged<>{}}}) |
                  prefetch(2, {.workers = 2, .errors = on_error::skip});
  std::size_t batches = 0, samples = 0;
  auto want = compiled.epoch(1);
  auto a = want.begin();
  for (auto& b : run_time.epoch(1)) {
    REQUIRE(b.size() == (*a).size());
    CHECK(std::vector<std::uint64_t>(b.ids().begin(), b.ids().end()) == std::vector<std::uint64_t>((*a).ids().begin(), (*a).ids().end()));
    const auto m = b.field("seg.png");
    CHECK(std::vector<std::int64_t>(m.shape().begin(), m.shape().end()) == std::vector<std::int64_t>{static_cast<std::int64_t>(b.size()), kOutH, kOutW});
    const auto same = [](auto x, auto y) { return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin()); };
    CHECK(same(m.bytes(), std::as_bytes(std::span((*a).get<"seg.png">().data(), (*a).get<"seg.png">().numel()))));
    CHECK(same(b.field("jpg").bytes(), std::as_bytes(std::span((*a).get<"jpg">().data(), (*a).get<"jpg">().numel()))));
    CHECK(same(b.field("boxes.npy").bytes(), std::as_bytes(std::span((*a).get<"boxes.npy">().data(), (*a).get<"boxes.npy">().numel()))));
    CHECK(same(b.field("classes.npy").bytes(), std::as_bytes(std::span((*a).get<"classes.npy">().data(), (*a).get<"classes.npy">().numel()))));
    samples += b.size();
    ++batches;
    ++a;
  }
  CHECK(batches == 4);  // 16 samples in fives, one of them skipped
  CHECK(samples == 15);  // sample 11's mask is another size: skipped, and counted
  CHECK(run_time.stats().skipped == 1);
  auto raising = from(sample::sequential(any.size())) | read(any) | dec |
                 collate({.batch = 16}, dec.schema(), {{"seg.png", stack<>{}}}) | prefetch(1);
  try {
    for (auto& b : raising.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const std::exception& e) {
    const std::string what = sluice_test::nested_text(e);
    CHECK(what.find("seg-0.tar") != std::string::npos);
    CHECK(what.find("record 11") != std::string::npos);
    CHECK(what.find("field 'seg.png' (following 'jpg')") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(any_decode_stage(any.schema()).add("jpg", jpeg(rrc()), {any_mask("boxes.npy")}),
                       doctest::Contains("field 'boxes.npy' (following 'jpg') holds f32 elements"), usage_error);
}
