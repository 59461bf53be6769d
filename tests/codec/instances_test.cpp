// Instance masks that follow the image (codec/instances.hpp, stage/decode.hpp's instance
// followers) from a COCO dataset read with .segmentation = true (io/coco.hpp): COCO's compressed
// run-length strings decode as pycocotools wrote them; through a loader with random_resized_crop +
// flip and boxes dropped by min_visible, every sample has one mask per kept box, mask k is box k's
// instance, and every mask pixel is the one a per-pixel reference (ray casting on the polygon,
// indexing the runs, through the transform) says, for 1 and 2 workers alike; bad segmentation
// values are named at open, a mask of another size than its image when the sample is decoded.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "png_writer.hpp"
#include "sluice/codec/instances.hpp"
#include "sluice/codec/png.hpp"
#include "sluice/io/coco.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {

// The mask of pycocotools_* below: an ellipse XOR a diagonal stripe pattern, 50 × 30.
bool formula_pixel(int x, int y) {
  const bool ellipse = (x - 25) * (x - 25) / 400.0 + (y - 15) * (y - 15) / 100.0 < 1;
  return ellipse != ((x + y) % 11 == 0);
}
// pycocotools.mask.encode(np.asfortranarray(m))["counts"] of that mask (and of a 7 × 5 one),
// written by pycocotools 2.0.11.
constexpr std::string_view pycocotools_formula =
    "01:00070I070I070I070I000L04000L003KN7ON003K05M0003K23K2012J42J3012J60H5012J7?HA80G>0B90H=OC90J=6CK4L1:KK3K2:"
    "KM1I40K8000H50L7O35FM6N36GM5M40G4004L50H:2F60I:0F70J:NF80K:LF90L3K39JM2J3:KM1I40K8000H50L7O35FM6N36GM5M40G4004"
    "L50H;1E70H<0D80I<ND90J<7DI5M00K80L4L10L7ON3K20N5M03K2003K23K2012J42J3030H62J3047II>0I070I070I070I000L04000G";
constexpr std::string_view pycocotools_small = "01:2H000003N";  // 7 × 5 (below)

// COCO's compressed string of column-major counts (the encoder pycocotools documents), for the
// test's own data; checked against pycocotools' strings by the first test case.
std::string encode_rle(const std::vector<std::uint32_t>& c) {
  std::string s;
  for (std::size_t i = 0; i < c.size(); ++i) {
    std::int64_t x = c[i];
    if (i > 2) x -= c[i - 2];
    bool more = true;
    while (more) {
      std::int64_t g = x & 0x1f;
      x >>= 5;
      more = (g & 0x10) != 0 ? x != -1 : x != 0;
      if (more) g |= 0x20;
      s += static_cast<char>(g + 48);
    }
  }
  return s;
}

// Column-major run lengths of a w × h bitmap (rows), starting with 0s.
std::vector<std::uint32_t> runs_of(const std::vector<std::uint8_t>& bits, int w, int h) {
  std::vector<std::uint32_t> c;
  std::uint8_t cur = 0;
  std::uint32_t n = 0;
  for (int x = 0; x < w; ++x)
    for (int y = 0; y < h; ++y) {
      const std::uint8_t b = bits[static_cast<std::size_t>(y) * w + x];
      if (b != cur) c.push_back(n), n = 0, cur = b;
      ++n;
    }
  c.push_back(n);
  return c;
}

image_transform identity(int w, int h) {
  image_transform t;
  t.src_width = t.out_width = w;
  t.src_height = t.out_height = h;
  t.w = w, t.h = h;
  return t;
}

std::vector<std::byte> record_of_runs(int w, int h, const std::vector<std::uint32_t>& counts) {
  std::vector<std::byte> rec;
  instance_writer(rec).runs(static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(w), counts);
  return rec;
}

// One object of a scene: polygons (source pixels), or a bitmap stored as runs.
struct object {
  int kind = 0;  // 0 polygon, 1 runs as a list, 2 runs as COCO's string, 3 no segmentation
  std::vector<std::vector<float>> polys;
  std::vector<std::uint8_t> bits;  // kinds 1, 2: w × h
  float box[4] = {};
};

// Even-odd ray casting at one point, written from the definition (not the scanline of the library).
bool inside(const std::vector<float>& p, double x, double y) {
  bool in = false;
  const std::size_t n = p.size() / 2;
  for (std::size_t i = 0, j = n - 1; i < n; j = i++) {
    const double xi = p[2 * i], yi = p[2 * i + 1], xj = p[2 * j], yj = p[2 * j + 1];
    if ((yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi) in = !in;
  }
  return in;
}

bool covers(const object& o, int w, int x, int y) {
  if (o.kind == 3) return false;
  if (o.kind != 0) return o.bits[static_cast<std::size_t>(y) * w + x] != 0;
  for (const auto& p : o.polys)
    if (p.size() >= 6 && inside(p, x + 0.5, y + 0.5)) return true;
  return false;
}

struct scene {
  int w = 0, h = 0;
  std::vector<object> objects;
};

scene make_scene(std::uint64_t i) {
  counter_rng rng(77, 0, i);
  scene s;
  s.w = 60 + static_cast<int>(rng.below(80));
  s.h = 50 + static_cast<int>(rng.below(70));
  const int n = 2 + static_cast<int>(rng.below(5));
  for (int k = 0; k < n; ++k) {
    object o;
    o.kind = static_cast<int>((i + static_cast<std::uint64_t>(k)) % 4);
    // a centre anywhere in the image (some objects end up outside a crop), radii 5..24 px
    const double cx = 3 + rng.below(static_cast<std::uint64_t>(s.w - 6)) + 0.37;
    const double cy = 3 + rng.below(static_cast<std::uint64_t>(s.h - 6)) + 0.21;
    const double rx = 5 + static_cast<double>(rng.below(20)), ry = 5 + static_cast<double>(rng.below(20));
    double x0 = 1e9, y0 = 1e9, x1 = -1e9, y1 = -1e9;
    if (o.kind == 0 || o.kind == 3) {
      // a star of 5..12 points (concave), sometimes two of them (an object in two parts)
      const int parts = rng.below(3) == 0 ? 2 : 1;
      for (int part = 0; part < parts; ++part) {
        const int m = 5 + static_cast<int>(rng.below(8));
        std::vector<float> p;
        for (int v = 0; v < m; ++v) {
          const double a = 6.283185307179586 * v / m, r = (v % 2 == 0 ? 1.0 : 0.45) + 0.01 * rng.below(10);
          const double px = cx + part * rx * 1.5 + r * rx * std::cos(a) + 0.013, py = cy + r * ry * std::sin(a) + 0.029;
          p.push_back(static_cast<float>(px));
          p.push_back(static_cast<float>(py));
        }
        o.polys.push_back(p);
      }
      for (const auto& p : o.polys)
        for (std::size_t v = 0; v < p.size(); v += 2)
          x0 = std::min<double>(x0, p[v]), x1 = std::max<double>(x1, p[v]), y0 = std::min<double>(y0, p[v + 1]),
          y1 = std::max<double>(y1, p[v + 1]);
      if (o.kind == 3) o.polys.clear();
    } else {
      o.bits.assign(static_cast<std::size_t>(s.w) * s.h, 0);
      for (int y = 0; y < s.h; ++y)
        for (int x = 0; x < s.w; ++x) {
          const double dx = (x + 0.5 - cx) / rx, dy = (y + 0.5 - cy) / ry;
          if (dx * dx + dy * dy < 1 && (x * 7 + y * 3) % 13 != 0) {  // an ellipse with holes
            o.bits[static_cast<std::size_t>(y) * s.w + x] = 1;
            x0 = std::min<double>(x0, x), x1 = std::max<double>(x1, x + 1), y0 = std::min<double>(y0, y),
            y1 = std::max<double>(y1, y + 1);
          }
        }
    }
    x0 = std::clamp<double>(x0, 0, s.w), x1 = std::clamp<double>(x1, 0, s.w);
    y0 = std::clamp<double>(y0, 0, s.h), y1 = std::clamp<double>(y1, 0, s.h);
    if (x1 <= x0 || y1 <= y0) continue;
    o.box[0] = static_cast<float>(x0), o.box[1] = static_cast<float>(y0);
    o.box[2] = static_cast<float>(x1 - x0), o.box[3] = static_cast<float>(y1 - y0);  // COCO's xywh
    s.objects.push_back(std::move(o));
  }
  return s;
}

std::string floats(const std::vector<float>& v) {
  std::string t = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v[i]));
    t += (i ? ", " : "") + std::string(b);
  }
  return t + "]";
}

// A COCO dataset of PNG images on disk, its annotations as pycocotools-era tools write them.
struct coco_scenes {
  sluice_test::temp_dir dir;
  std::string images, json;
  std::vector<scene> all;
  std::vector<std::vector<std::byte>> pngs;
  explicit coco_scenes(std::size_t n, int bad_size_at = -1) {
    images = dir.file("images");
    std::filesystem::create_directories(images);
    std::string anns, imgs;
    int ann_id = 1;
    for (std::size_t i = 0; i < n; ++i) {
      all.push_back(make_scene(i));
      const scene& s = all.back();
      sluice_test::png_spec p = sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB, 8, false, s.w, s.h);
      pngs.push_back(sluice_test::write_png(p));
      const std::string name = "im" + std::to_string(i) + ".png";
      sluice_test::write_file(images + "/" + name, pngs.back());
      imgs += std::string(i ? "," : "") + R"({"id": )" + std::to_string(100 + i) + R"(, "file_name": ")" + name + R"("})";
      for (const object& o : s.objects) {
        std::string seg;
        const int rh = static_cast<int>(i) == bad_size_at ? s.h + 1 : s.h;  // a mask one row taller
        std::vector<std::uint8_t> bits = o.bits;
        if (rh != s.h) bits.resize(static_cast<std::size_t>(s.w) * rh, 0);
        if (o.kind == 0) {
          seg = "[";
          for (std::size_t k = 0; k < o.polys.size(); ++k) seg += (k ? ", " : "") + floats(o.polys[k]);
          seg += "]";
        } else if (o.kind == 1 || o.kind == 2) {
          const auto c = runs_of(bits, s.w, rh);
          std::string counts;
          if (o.kind == 1) {
            counts = "[";
            for (std::size_t k = 0; k < c.size(); ++k) counts += (k ? ", " : "") + std::to_string(c[k]);
            counts += "]";
          } else {
            counts = "\"";
            for (const char ch : encode_rle(c)) counts += ch == '\\' ? std::string("\\\\") : std::string(1, ch);  // JSON escapes '\'
            counts += "\"";
          }
          seg = R"({"size": [)" + std::to_string(rh) + ", " + std::to_string(s.w) + R"(], "counts": )" + counts + "}";
        }
        anns += std::string(anns.empty() ? "" : ",\n") + R"({"id": )" + std::to_string(ann_id++) +
                R"(, "image_id": )" + std::to_string(100 + i) + R"(, "category_id": )" + std::to_string(1 + o.kind) +
                R"(, "iscrowd": )" + (o.kind == 1 ? "1" : "0") + R"(, "bbox": )" +
                floats({o.box[0], o.box[1], o.box[2], o.box[3]}) + (seg.empty() ? "" : R"(, "segmentation": )" + seg) +
                "}";
      }
    }
    json = dir.file("instances.json");
    sluice_test::write_file(json, R"({"images": [)" + imgs + R"(], "categories": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}],
"annotations": [)" + anns + "]}");
  }
};

geometry_options rrc() {
  return {.width = 72, .height = 56, .mode = fit::random_resized_crop, .random_flip = true, .scale = {0.2, 1.0}};
}

struct run_result {
  std::vector<std::uint8_t> masks;
  std::vector<float> boxes;
  std::size_t kept = 0, dropped = 0, filled = 0, flipped = 0;
};

run_result run_instances(const coco_scenes& data, std::size_t workers) {
  io::coco_dataset coco(data.images, data.json, {.segmentation = true});
  const boxes<"boxes", "classes", "iscrowd"> follow{.min_visible = 0.3};
  auto loader = from(sample::shuffle(coco.size(), {.seed = 3})) | read(coco) |
                decode<"image">(png(rrc()), follow, instance_masks<"segmentation", "boxes">{}) |
                collate({.batch = 4}, stack<"image">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{},
                        ragged<"segmentation">{.row = {56, 72}}) |
                prefetch(2, {.workers = workers});
  const png planner(rrc());
  run_result res;
  for (auto& b : loader.epoch(1)) {
    const auto m = b.get<"segmentation">();
    const auto moff = b.get<"segmentation.offsets">().values();
    const auto boff = b.get<"boxes.offsets">().values();
    const auto cls = b.get<"classes">().values();
    REQUIRE(m.shape().size() == 3);
    CHECK(m.shape()[1] == 56);
    CHECK(m.shape()[2] == 72);
    CHECK(std::vector<std::int64_t>(moff.begin(), moff.end()) == std::vector<std::int64_t>(boff.begin(), boff.end()));
    const auto* mb = reinterpret_cast<const std::uint8_t*>(m.data());
    res.masks.insert(res.masks.end(), mb, mb + m.numel());
    const auto bv = b.get<"boxes">().values();
    res.boxes.insert(res.boxes.end(), bv.begin(), bv.end());
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint64_t id = b.ids()[i];
      const scene& s = data.all[id];
      const image_transform t = planner.plan(data.pngs[id], {.seed = 0, .epoch = 1, .id = id});
      res.flipped += t.flip;
      // the boxes the follower keeps, by the library's box rule (tested on its own elsewhere)
      std::vector<std::size_t> kept;
      for (std::size_t k = 0; k < s.objects.size(); ++k) {
        float in[4], out[4];
        std::copy(std::begin(s.objects[k].box), std::end(s.objects[k].box), in);
        in[2] += in[0], in[3] += in[1];
        if (transform_box(t, {.min_visible = 0.3}, in, out)) kept.push_back(k);
      }
      res.kept += kept.size();
      res.dropped += s.objects.size() - kept.size();
      REQUIRE(static_cast<std::size_t>(moff[i + 1] - moff[i]) == kept.size());
      for (std::size_t j = 0; j < kept.size(); ++j) {
        const object& o = s.objects[kept[j]];
        CHECK(cls[static_cast<std::size_t>(moff[i]) + j] == o.kind);  // category 1 + kind is class kind
        const std::uint8_t* got = mb + (static_cast<std::size_t>(moff[i]) + j) * 56 * 72;
        std::size_t wrong = 0;
        for (int y = 0; y < 56; ++y)
          for (int x = 0; x < 72; ++x) {
            const int xo = t.flip ? 72 - 1 - x : x;
            const double sx = std::floor(t.x + (xo + 0.5) * t.w / 72), sy = std::floor(t.y + (y + 0.5) * t.h / 56);
            const bool in = sx >= 0 && sx < s.w && sy >= 0 && sy < s.h &&
                            covers(o, s.w, static_cast<int>(sx), static_cast<int>(sy));
            const std::uint8_t g = got[y * 72 + x];
            wrong += g != (in ? 1 : 0);
            res.filled += g;
          }
        CHECK_MESSAGE(wrong == 0, "sample ", id, " instance ", kept[j], " (kind ", o.kind, "): ", wrong,
                      " pixels differ from the reference");
      }
    }
  }
  return res;
}

}  // namespace

TEST_CASE("instances: COCO's compressed run-lengths decode as pycocotools wrote them, and draw in column order") {
  const auto c = coco_rle_counts(pycocotools_formula);
  std::vector<std::byte> out(50 * 30);
  draw_instances(record_of_runs(50, 30, c), out, identity(50, 30), std::vector<std::uint32_t>{0});
  std::size_t wrong = 0, ones = 0;
  for (int y = 0; y < 30; ++y)
    for (int x = 0; x < 50; ++x) {
      const bool g = out[static_cast<std::size_t>(y) * 50 + x] != std::byte{0};
      wrong += g != formula_pixel(x, y);
      ones += g;
    }
  CHECK(wrong == 0);
  CHECK(ones == 638);  // pycocotools' mask.sum()
  // 7 × 5: (0, 0), the block x 2..5 × y 1..3, and (6, 4)
  const auto s = coco_rle_counts(pycocotools_small);
  std::vector<std::byte> small(7 * 5);
  draw_instances(record_of_runs(7, 5, s), small, identity(7, 5), std::vector<std::uint32_t>{0});
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x) {
      const bool want = (x == 0 && y == 0) || (x == 6 && y == 4) || (x >= 2 && x <= 5 && y >= 1 && y <= 3);
      CHECK_MESSAGE((small[static_cast<std::size_t>(y) * 7 + x] != std::byte{0}) == want, "pixel ", x, ", ", y);
    }
  // the test's encoder writes what pycocotools writes
  CHECK(encode_rle(c) == pycocotools_formula);
  CHECK(encode_rle(s) == pycocotools_small);

  CHECK_THROWS_AS((void)coco_rle_counts("0a~"), format_error);  // a character outside '0'..'o'
  CHECK_THROWS_AS((void)coco_rle_counts("0P"), format_error);   // ends inside a count (0x20 set)
  CHECK_THROWS_AS((void)coco_rle_counts("00000N"), format_error);  // a delta that makes a count negative
}

TEST_CASE("instances: through a loader, one mask per kept box, every pixel the reference's, any worker count") {
  const coco_scenes data(24);
  const run_result one = run_instances(data, 1);
  const run_result two = run_instances(data, 2);
  // Not vacuous: boxes were dropped by the crop, polygons, runs and empty masks were drawn, flips happened.
  CHECK(one.kept > 40);
  CHECK(one.dropped > 5);
  CHECK(one.filled > 1000);
  CHECK(one.flipped > 3);
  CHECK(one.masks == two.masks);
  CHECK(one.boxes == two.boxes);
}

TEST_CASE("instances: bad segmentation values are named at open, a mask of another size when decoded") {
  auto open_error = [](const std::string& seg) {
    const std::string text = R"({"images": [{"id": 1, "file_name": "a.png"}], "categories": [{"id": 1}],
      "annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2]},
                      {"image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "segmentation": )" + seg + "}]}";
    const auto e = sluice_test::expect_format_error([&] { (void)io::parse_coco(text, "ann.json", {.segmentation = true}); });
    CHECK(e.file() == "ann.json");
    CHECK(std::string(e.what()).find("annotations[1].segmentation") != std::string::npos);
    return std::string(e.what());
  };
  CHECK(open_error("[[1, 2, 3]]").find("x, y pairs") != std::string::npos);
  CHECK(open_error("[[1, 2, \"a\", 4, 5, 6]]").find("segmentation[0][2]") != std::string::npos);
  CHECK(open_error("7").find("polygons") != std::string::npos);
  CHECK(open_error(R"({"counts": [1, 2]})").find("size") != std::string::npos);
  CHECK(open_error(R"({"counts": [1, 2], "size": [2, 2]})").find("sum to 3 pixels") != std::string::npos);
  CHECK(open_error(R"({"counts": [1, -2, 5], "size": [2, 2]})").find("0 or more") != std::string::npos);
  CHECK(open_error(R"({"counts": "0a~", "size": [2, 2]})").find("outside '0'..'o'") != std::string::npos);
  CHECK(open_error(R"({"counts": [4], "size": [0, 2]})").find("a side of 0") != std::string::npos);
  // without .segmentation the values are checked as JSON only, and the field is empty
  const auto t = io::parse_coco(R"({"images": [{"id": 1, "file_name": "a.png"}], "categories": [{"id": 1}],
      "annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "segmentation": 7}]})", "ann.json");
  CHECK(t.segments.empty());

  SUBCASE("a run-length mask of another size than its image: raised naming the file, record and field, or skipped") {
    const coco_scenes data(8, 5);
    io::coco_dataset coco(data.images, data.json, {.segmentation = true});
    for (on_error policy : {on_error::raise, on_error::skip}) {
      auto loader = from(sample::sequential(coco.size())) | read(coco) |
                    decode<"image">(png(rrc()), boxes<"boxes", "classes">{}, instance_masks<"segmentation", "boxes">{}) |
                    collate({.batch = 2}, stack<"image">{}, ragged<"segmentation">{.row = {56, 72}}) |
                    prefetch(2, {.workers = 2, .errors = policy});
      std::size_t samples = 0;
      try {
        for (auto& b : loader.epoch(0)) samples += b.size();
        CHECK(policy == on_error::skip);
        CHECK(samples == 7);
        CHECK(loader.stats().skipped == 1);
      } catch (const std::exception& e) {
        CHECK(policy == on_error::raise);
        const std::string text = sluice_test::nested_text(e);
        INFO(text);
        CHECK(text.find("im5.png") != std::string::npos);
        CHECK(text.find("field 'segmentation' (following 'image')") != std::string::npos);
        CHECK(text.find("the image is " + std::to_string(data.all[5].w) + "x" + std::to_string(data.all[5].h)) !=
              std::string::npos);
      }
    }
  }
  SUBCASE("instance masks from a dataset opened without .segmentation: an error saying so") {
    const coco_scenes data(2);
    io::coco_dataset coco(data.images, data.json);
    auto loader = from(sample::sequential(coco.size())) | read(coco) |
                  decode<"image">(png(rrc()), boxes<"boxes">{}, instance_masks<"segmentation", "boxes">{}) |
                  collate({.batch = 2}, ragged<"segmentation">{.row = {56, 72}}) | prefetch(1);
    try {
      for (auto& b : loader.epoch(0)) (void)b;
      FAIL("no error");
    } catch (const std::exception& e) {
      CHECK(sluice_test::nested_text(e).find(".segmentation = true") != std::string::npos);
    }
  }
}

TEST_CASE("instances: parse_json keeps a raw member as where its text lies, checked") {
  static constexpr std::string_view raw[] = {"segmentation"};
  const std::string text = R"({"a": [{"segmentation":  [[1, 2.5, 3]] , "bbox": 1}]})";
  const auto doc = io::parse_json(text, "x.json", {}, raw);
  const auto& span = doc.at("a", "x.json").items()[0].at("segmentation", "x.json").items();
  REQUIRE(span.size() == 2);
  CHECK(text.substr(static_cast<std::size_t>(span[0].as_int("x.json", "o")),
                    static_cast<std::size_t>(span[1].as_int("x.json", "n"))) == "[[1, 2.5, 3]]");
  CHECK_THROWS_AS((void)io::parse_json(R"({"segmentation": [1,]})", "x.json", {}, raw), format_error);
}

TEST_CASE("instances: a polygon's huge vertices are clamped, not cast (the whole image stays covered)") {
  for (const float big : {1e9f, 1e10f, 1e30f}) {
    CAPTURE(big);
    std::vector<std::byte> rec;
    instance_writer(rec).polygons(std::vector<std::vector<float>>{{-big, -big, big, -big, 0, big}});
    std::vector<std::byte> out(8 * 6);
    check_instances(rec, identity(8, 6), 1);
    draw_instances(rec, out, identity(8, 6), std::vector<std::uint32_t>{0});
    CHECK(std::count(out.begin(), out.end(), std::byte{1}) == 48);
  }
}

TEST_CASE("instances: a polygon of many vertices (a 20,000-point circle with a notch) against ray casting") {
  std::vector<float> p;
  for (int k = 0; k < 20000; ++k) {
    const double a = 6.283185307179586 * k / 20000, r = (k > 100 && k < 2000) ? 9.0 : 27.0;  // a notch
    p.push_back(static_cast<float>(40.3 + r * std::cos(a))), p.push_back(static_cast<float>(30.7 + r * std::sin(a)));
  }
  std::vector<std::byte> rec;
  instance_writer(rec).polygons(std::vector<std::vector<float>>{p});
  std::vector<std::byte> out(80 * 60);
  draw_instances(rec, out, identity(80, 60), std::vector<std::uint32_t>{0});
  std::size_t wrong = 0, ones = 0;
  for (int y = 0; y < 60; ++y)
    for (int x = 0; x < 80; ++x) {
      const bool g = out[static_cast<std::size_t>(y) * 80 + x] == std::byte{1};
      wrong += g != inside(p, x + 0.5, y + 0.5);
      ones += g;
    }
  CHECK(wrong == 0);
  CHECK(ones > 1500);
}

namespace {
using boxed = schema<field<"image", std::uint8_t, variable>, field<"boxes", float, variable>,
                     field<"segmentation", std::uint8_t, variable>>;
struct boxed_reader {
  using reader_concept = reader_tag;
  std::vector<std::byte> png_bytes, segs;
  std::vector<float> boxes;
  [[nodiscard]] std::size_t size() const { return 1; }
  [[nodiscard]] std::string_view path() const { return "boxed"; }
  [[nodiscard]] fields_sample<boxed> fields(std::size_t i) const {
    fields_sample<boxed> s{.id = i, .origin = path()};
    s.set<"image">(png_bytes);
    s.set<"boxes">(boxes);
    s.set<"segmentation">(std::span<const std::byte>(segs));
    return s;
  }
};
}  // namespace

TEST_CASE("instances: a boxes field of broken rows is named as the boxes' error, whichever follower is listed first") {
  boxed_reader r;
  r.png_bytes = sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB, 8, false, 20, 10));
  r.boxes = {1, 1, 5, 5, 2};  // 20 bytes: not a whole row of 4 floats
  instance_writer(r.segs).none();
  instance_writer(r.segs).none();
  auto loader = from(sample::sequential(1)) | read(r) |
                decode<"image">(png({.width = 8, .height = 8}), instance_masks<"segmentation", "boxes">{},
                                boxes<"boxes">{}) |
                collate({.batch = 1}, ragged<"segmentation">{.row = {8, 8}}) | prefetch(1);
  try {
    for (auto& b : loader.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const std::exception& e) {
    const std::string text = sluice_test::nested_text(e);
    INFO(text);
    CHECK(text.find("field 'boxes': 20 bytes is not a whole number of rows of 4") != std::string::npos);
  }
}
