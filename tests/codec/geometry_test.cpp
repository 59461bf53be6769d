// Geometry that fields follow: random_resized_crop draws windows as torchvision's
// RandomResizedCrop defines them (area fraction in `scale`, aspect ratio in `ratio`, whole pixels,
// the centred fallback); the transform value is a function of (seed, epoch, id) only; a codec
// decoding with a planned transform writes the same bytes as one planning itself; boxes and points
// mapped by the same value land on their objects in the decoded pixels (flip included); boxes
// that leave the crop are dropped with the rows of the fields that go with them, or kept clipped;
// bad box fields are format_errors naming the file, the record and the field; and a loader gives
// the same images and boxes for 1 and 2 workers.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/decode.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {

using det = schema<field<"img", std::uint8_t, variable>, field<"boxes", float, variable>,
                   field<"classes", std::int64_t, variable>>;

// A grey picture with up to 3 solid rectangles, object k in colour k (red, green, blue): a
// decoded pixel inside a mapped box shows which object it is.
struct scene {
  int w = 0, h = 0;
  std::vector<std::uint8_t> rgb;
  std::vector<float> boxes;  // x0 y0 x1 y1, source pixels
  std::vector<std::int64_t> classes;
};

scene make_scene(std::uint64_t i) {
  counter_rng rng(77, 0, i);
  scene s;
  s.w = 160 + static_cast<int>(rng.below(160));
  s.h = 120 + static_cast<int>(rng.below(120));
  s.rgb.assign(static_cast<std::size_t>(s.w) * s.h * 3, 128);
  const int n = 1 + static_cast<int>(rng.below(3));
  for (int k = 0; k < n; ++k) {
    // Objects in separate horizontal bands so they never overlap.
    const int band = s.w / n;
    const int bw = 24 + static_cast<int>(rng.below(static_cast<std::uint64_t>(band - 28)));
    const int bh = 24 + static_cast<int>(rng.below(static_cast<std::uint64_t>(s.h - 28)));
    const int x0 = k * band + static_cast<int>(rng.below(static_cast<std::uint64_t>(band - bw + 1)));
    const int y0 = static_cast<int>(rng.below(static_cast<std::uint64_t>(s.h - bh + 1)));
    for (int y = y0; y < y0 + bh; ++y)
      for (int x = x0; x < x0 + bw; ++x) {
        auto* p = &s.rgb[(static_cast<std::size_t>(y) * s.w + x) * 3];
        p[0] = p[1] = p[2] = 20;
        p[k] = 235;
      }
    s.boxes.insert(s.boxes.end(), {float(x0), float(y0), float(x0 + bw), float(y0 + bh)});
    s.classes.push_back(k);
  }
  return s;
}

struct scenes {
  using reader_concept = reader_tag;
  std::vector<scene> all;
  std::vector<std::vector<std::byte>> jpegs;
  explicit scenes(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      all.push_back(make_scene(i));
      jpegs.push_back(encode_jpeg(all.back().rgb, all.back().w, all.back().h, pixels::rgb, 95, TJSAMP_444));
    }
  }
  [[nodiscard]] std::size_t size() const { return all.size(); }
  [[nodiscard]] std::string_view path() const { return "scenes.tar"; }
  [[nodiscard]] fields_sample<det> fields(std::size_t i) const {
    fields_sample<det> s{.id = i, .origin = path()};
    s.set<"img">(jpegs[i]);
    s.set<"boxes">(all[i].boxes);
    s.set<"classes">(all[i].classes);
    return s;
  }
};

const geometry_options rrc{.width = 96, .height = 80, .mode = fit::random_resized_crop, .random_flip = true};

}  // namespace

TEST_CASE("random_resized_crop: windows lie in the image, with area and aspect in range, whole pixels") {
  std::size_t fallback = 0, flips = 0;
  double area_sum = 0;
  const int W = 500, H = 375;
  for (std::uint64_t id = 0; id < 4000; ++id) {
    const auto t = plan_transform(W, H, rrc, {.seed = 3, .epoch = 1, .id = id});
    REQUIRE(t.x >= 0);
    REQUIRE(t.y >= 0);
    REQUIRE(t.x + t.w <= W);
    REQUIRE(t.y + t.h <= H);
    REQUIRE(t.x == std::floor(t.x));
    REQUIRE(t.w == std::floor(t.w));
    REQUIRE(t.h == std::floor(t.h));
    const double area = t.w * t.h / (double(W) * H), ratio = t.w / t.h;
    if (t.w == W && t.h == H) ++fallback;
    // Rounding w and h to whole pixels moves area and ratio a little past the drawn values.
    CHECK(area >= 0.08 * 0.97);
    CHECK(area <= 1.0);
    if (!(t.w == W && t.h == H)) {
      CHECK(ratio >= 0.75 * 0.97);
      CHECK(ratio <= 4.0 / 3.0 * 1.03);
    }
    area_sum += area;
    flips += t.flip;
    CHECK(t.out_width == 96);
    CHECK(t.out_height == 80);
  }
  // For a 4:3 image the fallback almost never happens; the mean area fraction of torchvision's
  // procedure on 500 x 375 is 0.433 (2e5 draws of it simulated; tries whose window does not fit,
  // mostly large ones, are drawn again, which pulls the mean below the middle of [0.08, 1]).
  CHECK(fallback < 5);
  CHECK(area_sum / 4000 > 0.41);
  CHECK(area_sum / 4000 < 0.456);
  CHECK(flips > 1800);
  CHECK(flips < 2200);
}

TEST_CASE("random_resized_crop: no window fits, the centred fallback cuts to the nearest ratio") {
  geometry_options o = rrc;
  o.scale = {1.0, 1.0};
  o.ratio = {2.0, 2.0};  // a full-area window of ratio 2 never fits a square
  const auto t = plan_transform(300, 300, o, {.seed = 1, .id = 5});
  CHECK(t.w == 300);
  CHECK(t.h == 150);
  CHECK(t.x == 0);
  CHECK(t.y == 75);
  o.ratio = {0.25, 0.5};  // narrower than the image: full height, width cut
  const auto u = plan_transform(300, 300, o, {.seed = 1, .id = 5});
  CHECK(u.h == 300);
  CHECK(u.w == 150);
  CHECK(u.x == 75);
  CHECK_THROWS_AS(jpeg({.mode = fit::random_resized_crop, .scale = {0.5, 0.2}}), usage_error);
  CHECK_THROWS_AS(jpeg({.mode = fit::random_resized_crop, .ratio = {0.0, 1.0}}), usage_error);
}

TEST_CASE("image_transform: a function of seed, epoch and id only") {
  const auto a = plan_transform(640, 480, rrc, {.seed = 9, .epoch = 2, .id = 11, .position = 0});
  const auto b = plan_transform(640, 480, rrc, {.seed = 9, .epoch = 2, .id = 11, .position = 999});
  CHECK(a == b);
  std::size_t differ = 0;
  for (std::uint64_t id = 0; id < 50; ++id)
    differ += !(plan_transform(640, 480, rrc, {.seed = 9, .epoch = 2, .id = id}) ==
                plan_transform(640, 480, rrc, {.seed = 9, .epoch = 3, .id = id}));
  CHECK(differ >= 48);
}

TEST_CASE("image_transform: map_point, map_box and flip, by hand") {
  const image_transform t{.src_width = 200, .src_height = 100, .x = 50, .y = 20, .w = 100, .h = 50,
                          .out_width = 50, .out_height = 25};
  CHECK(t.map_point(50, 20) == std::array<double, 2>{0, 0});
  CHECK(t.map_point(150, 70) == std::array<double, 2>{50, 25});
  CHECK(t.map_point(100, 45) == std::array<double, 2>{25, 12.5});
  image_transform f = t;
  f.flip = true;
  CHECK(f.map_point(50, 20) == std::array<double, 2>{50, 0});
  CHECK(f.map_box(60, 30, 80, 40) == std::array<double, 4>{35, 5, 45, 10});
  // xywh and normalized describe the same box; the output comes back in the same form.
  const float xyxy[4] = {60, 30, 80, 40}, xywh[4] = {60, 30, 20, 10}, norm[4] = {0.3f, 0.3f, 0.4f, 0.4f};
  float o1[4], o2[4], o3[4];
  REQUIRE(transform_box(f, {}, xyxy, o1));
  REQUIRE(transform_box(f, {.format = box_format::xywh}, xywh, o2));
  REQUIRE(transform_box(f, {.normalized = true}, norm, o3));
  CHECK(o1[0] == doctest::Approx(35));
  CHECK(o1[2] == doctest::Approx(45));
  CHECK(o2[0] == doctest::Approx(35));
  CHECK(o2[2] == doctest::Approx(10));
  CHECK(o3[0] == doctest::Approx(35.0 / 50));
  CHECK(o3[3] == doctest::Approx(10.0 / 25));
  // cxcywh (YOLO's: the centre, then the size) is the same box again, and comes back as a centre.
  const float cxcywh[4] = {70, 35, 20, 10};
  float o4[4];
  REQUIRE(transform_box(f, {.format = box_format::cxcywh}, cxcywh, o4));
  CHECK(std::vector<float>(o4, o4 + 4) == std::vector<float>{40, 7.5f, 10, 5});  // corners 35 5 45 10
  // Clipping, dropping, keeping.
  const float half_out[4] = {140, 60, 170, 90};  // (90..120, 20..35) in the output: clipped to 50 x 25
  REQUIRE(transform_box(t, {}, half_out, o1));
  CHECK(o1[2] == 50);
  CHECK(o1[3] == 25);
  CHECK_FALSE(transform_box(t, {.min_visible = 0.5}, half_out, o1));  // 1/3 x 1/3 visible
  const float gone[4] = {0, 0, 40, 10};
  CHECK_FALSE(transform_box(t, {}, gone, o1));
  REQUIRE(transform_box(t, {.drop_outside = false}, gone, o1));
  CHECK(o1[0] == 0);
  CHECK(o1[2] == 0);
  const float nan_box[4] = {NAN, 0, 10, 10};
  CHECK_FALSE(transform_box(t, {}, nan_box, o1));
  const float pt[2] = {250, 40};
  CHECK(transform_point(t, {}, pt, o1));
  CHECK(o1[0] == doctest::Approx(100));
  CHECK_FALSE(transform_point(t, {.drop_outside = true}, pt, o1));
}

TEST_CASE("jpeg: decode with a planned transform writes what decode with the context writes") {
  const scenes data(12);
  for (auto mode : {fit::crop, fit::stretch, fit::random_resized_crop}) {
    geometry_options o = rrc;
    o.mode = mode;
    o.crop = crop_at::random;
    const jpeg dec(o);
    std::vector<std::byte> a(dec.output_bytes()), b(dec.output_bytes());
    for (std::uint64_t i = 0; i < data.size(); ++i) {
      const sample_context ctx{.seed = 4, .epoch = 1, .id = i};
      dec.decode(data.jpegs[i], a, ctx);
      dec.decode_with(data.jpegs[i], b, dec.plan(data.jpegs[i], ctx));
      CHECK(a == b);
    }
  }
  const jpeg dec(rrc);
  std::vector<std::byte> out(dec.output_bytes());
  auto t = dec.plan(data.jpegs[0], {});
  t.src_width += 1;
  CHECK_THROWS_AS(dec.decode_with(data.jpegs[0], out, t), usage_error);
}

namespace {
// Whether output pixel (x, y) of an HWC RGB image shows object colour k.
bool shows(const std::byte* img, int w, int x, int y, int k) {
  const auto* p = img + (static_cast<std::size_t>(y) * w + x) * 3;
  for (int c = 0; c < 3; ++c) {
    const int v = std::to_integer<int>(p[c]);
    if (c == k ? v < 180 : v > 80) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("decode<img> with boxes: every kept box lands on its object, dropped rows go with their classes") {
  const scenes data(64);
  auto run = [&](std::size_t workers, bool drop) {
    auto loader = from(sample::shuffle(data.size(), {.seed = 5})) | read(data) |
                  decode<"img">(jpeg(rrc), boxes<"boxes", "classes">{.drop_outside = drop}) |
                  collate({.batch = 8}, stack<"img">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}) |
                  prefetch(2, {.workers = workers});
    std::vector<std::byte> images;
    std::vector<float> all_boxes;
    std::vector<std::int64_t> all_classes;
    std::size_t kept = 0, on_object = 0, total_in = 0;
    for (auto& b : loader.epoch(2)) {
      auto img = b.get<"img">();
      const auto* bytes = reinterpret_cast<const std::byte*>(img.data());
      images.insert(images.end(), bytes, bytes + img.numel());
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto bx = b.rows_of<"boxes">(i);
        const auto cls = b.rows_of<"classes">(i);
        REQUIRE(bx.size() == 4 * cls.size());
        total_in += data.all[b.ids()[i]].classes.size();
        for (std::size_t k = 0; k < cls.size(); ++k) {
          const float* r = bx.data() + k * 4;
          all_boxes.insert(all_boxes.end(), r, r + 4);
          const auto c = cls[k];
          all_classes.push_back(c);
          CHECK(r[0] >= 0);
          CHECK(r[2] <= 96);
          CHECK(r[1] >= 0);
          CHECK(r[3] <= 80);
          CHECK(r[0] <= r[2]);
          if (r[2] - r[0] < 4 || r[3] - r[1] < 4) continue;  // too thin to hold a clean pixel
          ++kept;
          const int cx = static_cast<int>((r[0] + r[2]) / 2), cy = static_cast<int>((r[1] + r[3]) / 2);
          on_object += shows(bytes + i * 96 * 80 * 3, 96, cx, cy, static_cast<int>(c));
        }
      }
    }
    CHECK(kept > 40);
    CHECK(on_object == kept);
    if (!drop) CHECK(all_classes.size() == total_in);
    return std::tuple(images, all_boxes, all_classes, total_in);
  };
  const auto one = run(1, true), two = run(2, true);
  CHECK(std::get<0>(one) == std::get<0>(two));
  CHECK(std::get<1>(one) == std::get<1>(two));
  CHECK(std::get<2>(one) == std::get<2>(two));
  CHECK(std::get<2>(one).size() < std::get<3>(one));  // some boxes left their crops
  const auto keep = run(2, false);
  CHECK(std::get<0>(keep) == std::get<0>(one));
}

namespace {
// One record with whatever fields the test gives it.
struct one_record {
  using reader_concept = reader_tag;
  std::vector<std::byte> img;
  std::vector<float> bx;
  std::vector<std::int64_t> cls;
  [[nodiscard]] std::size_t size() const { return 1; }
  [[nodiscard]] std::string_view path() const { return "broken.tar"; }
  [[nodiscard]] fields_sample<det> fields(std::size_t i) const {
    fields_sample<det> s{.id = i, .origin = path()};
    s.set<"img">(img);
    s.set<"boxes">(bx);
    s.set<"classes">(cls);
    return s;
  }
};

std::string first_error(const one_record& r) {
  auto loader = from(sample::sequential(r.size())) | read(r) |
                decode<"img">(jpeg(rrc), boxes<"boxes", "classes">{}) |
                collate({.batch = 1}, stack<"img">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}) |
                prefetch(1);
  try {
    for (auto& b : loader.epoch(0)) (void)b;
  } catch (const std::exception& e) {
    return sluice_test::nested_text(e);
  }
  return "";
}
}  // namespace

TEST_CASE("decode<img> with boxes: bad box fields and bad images name the file, the record and the field") {
  const scenes data(1);
  one_record r{data.jpegs[0], data.all[0].boxes, data.all[0].classes};
  CHECK(first_error(r).empty());
  r.bx.push_back(1.0f);  // not a whole number of boxes
  auto e = first_error(r);
  CHECK(e.find("broken.tar") != std::string::npos);
  CHECK(e.find("record 0") != std::string::npos);
  CHECK(e.find("field 'boxes'") != std::string::npos);
  r.bx = data.all[0].boxes;
  r.cls.push_back(7);  // one class more than boxes
  e = first_error(r);
  CHECK(e.find("field 'classes'") != std::string::npos);
  r.cls = data.all[0].classes;
  r.img.resize(r.img.size() / 2);
  r.img[2] = std::byte{0};  // not a JPEG header any more
  e = first_error(r);
  CHECK(e.find("broken.tar") != std::string::npos);
  CHECK(e.find("field 'img'") != std::string::npos);
  CHECK(e.find("decode") != std::string::npos);
}

namespace {
// `jpeg` with an APP1 "Exif" segment after its SOI whose IFD0 holds Orientation `o` (a SHORT),
// little- or big-endian; `cut` bytes dropped from the TIFF block's end (a damaged EXIF).
std::vector<std::byte> with_orientation(const std::vector<std::byte>& jpeg, int o, bool little, std::size_t cut = 0) {
  std::vector<std::uint8_t> tiff = little ? std::vector<std::uint8_t>{'I', 'I', 42, 0, 8, 0, 0, 0}
                                          : std::vector<std::uint8_t>{'M', 'M', 0, 42, 0, 0, 0, 8};
  const auto put16 = [&](int v) {
    if (little) tiff.insert(tiff.end(), {std::uint8_t(v & 0xFF), std::uint8_t(v >> 8)});
    else tiff.insert(tiff.end(), {std::uint8_t(v >> 8), std::uint8_t(v & 0xFF)});
  };
  const auto put32 = [&](std::uint32_t v) {
    if (little) { put16(static_cast<int>(v & 0xFFFF)); put16(static_cast<int>(v >> 16)); }
    else { put16(static_cast<int>(v >> 16)); put16(static_cast<int>(v & 0xFFFF)); }
  };
  put16(2);                                   // two entries: a Make tag first, then Orientation
  put16(0x010F); put16(2); put32(4); put32(0x53434E45);
  put16(0x0112); put16(3); put32(1); put16(o); put16(0);
  put32(0);                                   // no next IFD
  tiff.resize(tiff.size() - cut);
  std::vector<std::uint8_t> seg = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  seg.insert(seg.end(), tiff.begin(), tiff.end());
  const std::size_t len = seg.size() - 2;
  seg[2] = static_cast<std::uint8_t>(len >> 8);
  seg[3] = static_cast<std::uint8_t>(len & 0xFF);
  std::vector<std::byte> out(jpeg.begin(), jpeg.begin() + 2);
  for (const auto b : seg) out.push_back(static_cast<std::byte>(b));
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}
}  // namespace

TEST_CASE("decode<img> with boxes: a JPEG turned by its EXIF orientation is refused, naming it, and upright ones pass") {
  // A phone's photo is stored sideways with Orientation 6; its boxes were drawn on the image as
  // shown. Decoded as stored (as torchvision and PIL decode it), the boxes would fall on other
  // pixels without a word: with fields following the image it is a format_error instead.
  const scenes data(1);
  for (const bool little : {true, false}) {
    CAPTURE(little);
    for (int o = 1; o <= 8; ++o) CHECK(scan_jpeg_frame(with_orientation(data.jpegs[0], o, little)).orientation == o);
    CHECK(scan_jpeg_frame(with_orientation(data.jpegs[0], 6, little, 8)).orientation == 1);  // cut: ignored
    CHECK(scan_jpeg_frame(with_orientation(data.jpegs[0], 9, little)).orientation == 1);     // out of range
  }
  CHECK(scan_jpeg_frame(data.jpegs[0]).orientation == 1);
  one_record r{with_orientation(data.jpegs[0], 6, true), data.all[0].boxes, data.all[0].classes};
  const std::string e = first_error(r);
  CHECK(e.find("broken.tar") != std::string::npos);
  CHECK(e.find("field 'img'") != std::string::npos);
  CHECK(e.find("EXIF Orientation 6 (shown rotated 90 degrees clockwise): the pixels decode as stored") !=
        std::string::npos);
  r.img = with_orientation(data.jpegs[0], 1, false);
  CHECK(first_error(r).empty());
  r.img = with_orientation(data.jpegs[0], 3, false, 8);  // a damaged EXIF is no orientation
  CHECK(first_error(r).empty());
  // Without followers the image decodes as stored, as before (classification is unaffected).
  const auto turned = with_orientation(data.jpegs[0], 8, true);
  std::vector<std::byte> a(jpeg(rrc).output_bytes()), b(a.size());
  jpeg(rrc).decode(turned, a, {.id = 3});
  jpeg(rrc).decode(data.jpegs[0], b, {.id = 3});
  CHECK(a == b);
}
