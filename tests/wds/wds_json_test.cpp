// Detection annotations in a WebDataset `.json` member (stage/json_fields.hpp): typed fields by
// path, COCO's xywh and YOLO's cxcywh made xyxy, boxes following a crop exactly as the same boxes
// stored as .npy do, and every kind of bad JSON named with its file, sample, member and path.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "sluice/stage/json_fields.hpp"
#include "wds_util.hpp"

#ifdef SLUICE_TEST_HAVE_JPEG
#include "sluice/codec/jpeg.hpp"
#endif

using namespace sluice;
using namespace wds_test;
using sluice_test::temp_dir;

namespace {

using with_json = schema<field<"jpg", std::uint8_t, variable>, field<"json", std::uint8_t, variable>>;
using ann = json_fields<"json", field<"boxes", float, variable>, field<"classes", std::int64_t, variable>,
                        field<"iscrowd", std::uint8_t, variable>>;

// Sample g: g % 3 boxes, COCO-style annotations (xywh pixels) of a 64x48 image.
std::vector<float> boxes_xyxy(std::uint64_t g) {
  std::vector<float> b;
  for (std::uint64_t k = 0; k < g % 3; ++k) {
    const float x = static_cast<float>(2 + 5 * k + g % 7), y = static_cast<float>(3 + 4 * k), w = 20, h = static_cast<float>(10 + g % 5);
    b.insert(b.end(), {x, y, x + w, y + h});
  }
  return b;
}
std::string annotations_json(std::uint64_t g) {
  std::string s = "{\"image_id\": " + std::to_string(g) + ", \"annotations\": [";
  const auto b = boxes_xyxy(g);
  for (std::size_t r = 0; r < b.size() / 4; ++r)
    s += std::string(r ? ", " : "") + "{\"bbox\": [" + std::to_string(b[4 * r]) + ", " + std::to_string(b[4 * r + 1]) + ", " +
         std::to_string(b[4 * r + 2] - b[4 * r]) + ", " + std::to_string(b[4 * r + 3] - b[4 * r + 1]) +
         "], \"category_id\": " + std::to_string(g + r) + (r == 1 ? ".0" : "") + ", \"iscrowd\": " + (r == 1 ? "true" : "0") + "}";
  return s + "]}";
}

std::vector<std::byte> picture(std::uint64_t g) {
#ifdef SLUICE_TEST_HAVE_JPEG
  std::vector<std::uint8_t> px(64 * 48 * 3, static_cast<std::uint8_t>(g * 13 % 200 + 20));
  return codecs::encode_jpeg(px, 64, 48, codecs::pixels::rgb, 90);
#else
  return sluice_test::random_bytes(100, g);
#endif
}

std::string write_json_shard(const temp_dir& d, std::size_t n, bool with_npy) {
  std::vector<member> m;
  for (std::uint64_t g = 0; g < n; ++g) {
    const std::string k = "s" + std::to_string(1000 + g);
    m.push_back({k + ".jpg", picture(g)});
    m.push_back({k + ".json", bytes_of(annotations_json(g))});
    if (with_npy) {
      const auto b = boxes_xyxy(g);
      auto npy = io::npy_header_bytes("<f4", {b.size() / 4, 4});
      const auto* p = reinterpret_cast<const std::byte*>(b.data());
      npy.insert(npy.end(), p, p + b.size() * 4);
      m.push_back({k + ".boxes.npy", npy});
      std::vector<std::int64_t> c;
      for (std::size_t r = 0; r < b.size() / 4; ++r) c.push_back(static_cast<std::int64_t>(g + r));
      auto cn = io::npy_header_bytes("<i8", {c.size()});
      const auto* q = reinterpret_cast<const std::byte*>(c.data());
      cn.insert(cn.end(), q, q + c.size() * 8);
      m.push_back({k + ".classes.npy", cn});
    }
  }
  const std::string p = d.file("ann.tar");
  write_tar(p, m);
  return p;
}

template <class T>
std::vector<T> values_of(std::span<const std::byte> b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// The format_error json_fields raises for one sample's JSON text ("" when it is read).
std::string error_for(const std::string& json, const std::vector<json_path>& paths) {
  fields_sample<with_json> s;
  s.id = 5;
  s.origin = "x.tar";
  s.set<"json">(std::as_bytes(std::span(json.data(), json.size())));
  try {
    (void)ann(paths)(s, sample_context{});
  } catch (const format_error& e) {
    CHECK(e.file() == "x.tar");
    CHECK(e.record() == 5);
    return e.what();
  }
  return "";
}

const std::vector<json_path> coco_paths = {{"boxes", "annotations[*].bbox", json_box::xywh},
                                           {"classes", "annotations[*].category_id"},
                                           {"iscrowd", "annotations[*].iscrowd"}};

}  // namespace

TEST_CASE("json_fields: typed fields by path, xywh made xyxy, through the loader for 1 and 2 workers") {
  temp_dir d;
  io::wds_dataset<with_json> data(write_json_shard(d, 12, false));
  for (std::size_t workers : {1, 2}) {
    CAPTURE(workers);
    auto loader = from(sample::sequential(data.size())) | read(data) | ann(coco_paths) |
                  collate({.batch = 4}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}, ragged<"iscrowd">{}) |
                  prefetch(2, {.workers = workers});
    std::uint64_t g0 = 0;
    for (auto& b : loader.epoch(0)) {
      for (std::size_t i = 0; i < b.size(); ++i) {
        const std::uint64_t g = g0 + i;
        const auto want = boxes_xyxy(g);
        const auto boxes = b.rows_of<"boxes">(i);
        const auto cls = b.rows_of<"classes">(i);
        const auto crowd = b.rows_of<"iscrowd">(i);
        REQUIRE(boxes.size() == want.size());
        REQUIRE(cls.size() == want.size() / 4);
        REQUIRE(crowd.size() == want.size() / 4);
        for (std::size_t k = 0; k < want.size(); ++k) CHECK(boxes[k] == doctest::Approx(want[k]));
        for (std::size_t r = 0; r < cls.size(); ++r) {
          CHECK(cls[r] == static_cast<std::int64_t>(g + r));
          CHECK(crowd[r] == (r == 1 ? 1 : 0));
        }
      }
      g0 += b.size();
    }
    CHECK(g0 == 12);
  }
}

TEST_CASE("json_fields: paths, conventions and types") {
  using one = json_fields<"json", field<"v", float, variable>>;
  auto values = [](const std::string& json, json_path p) {
    fields_sample<with_json> s;
    s.set<"json">(std::as_bytes(std::span(json.data(), json.size())));
    return values_of<float>(one({std::move(p)})(s, sample_context{}).bytes_of<"v">());
  };
  CHECK(values(R"({"boxes": [[1, 2, 3, 4], [5, 6, 7, 8]]})", {"v", "boxes[*]"}) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(values(R"({"boxes": [[1, 2, 3, 4]]})", {"v", "boxes"}) == std::vector<float>{1, 2, 3, 4});
  CHECK(values(R"([{"b": [0.5, 0.5, 0.2, 0.4]}])", {"v", "[*].b", json_box::cxcywh}) ==
        std::vector<float>{0.4f, 0.3f, 0.6f, 0.7f});
  CHECK(values(R"({"a": {"b": {"c": 3}}})", {"v", "a.b.c"}) == std::vector<float>{3});
  CHECK(values(R"({"o": [{"p": [[1, 2]]}, {"p": []}, {"p": [[3, 4], [5, 6]]}]})", {"v", "o[*].p[*]"}) ==
        std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(values(R"({"annotations": []})", {"v", "annotations[*].bbox"}).empty());
  // Integers keep their sign where the field has one; one outside an unsigned field is refused.
  using ints = json_fields<"json", field<"i", std::int64_t, variable>, field<"s", std::int8_t, variable>,
                           field<"u", std::uint16_t, variable>>;
  const std::string text = R"({"i": [-5, 9007199254740993, -1.0], "s": [-128, 127], "u": [0, 65535]})";
  fields_sample<with_json> s;
  s.set<"json">(std::as_bytes(std::span(text.data(), text.size())));
  const auto out = ints({{"i", "i"}, {"s", "s"}, {"u", "u"}})(s, sample_context{});
  CHECK(values_of<std::int64_t>(out.bytes_of<"i">()) == std::vector<std::int64_t>{-5, 9007199254740993, -1});
  CHECK(values_of<std::int8_t>(out.bytes_of<"s">()) == std::vector<std::int8_t>{-128, 127});
  CHECK(values_of<std::uint16_t>(out.bytes_of<"u">()) == std::vector<std::uint16_t>{0, 65535});
  for (const char* bad : {R"({"i": [], "s": [-129], "u": []})", R"({"i": [], "s": [], "u": [-1]})",
                          R"({"i": [], "s": [], "u": [65536]})"}) {
    CAPTURE(bad);
    fields_sample<with_json> b;
    const std::string t(bad);
    b.set<"json">(std::as_bytes(std::span(t.data(), t.size())));
    CHECK_THROWS_AS((void)ints({{"i", "i"}, {"s", "s"}, {"u", "u"}})(b, sample_context{}), format_error);
  }

  for (const char* bad : {"", "a..b", "a.", ".a", "a[0]", "a[*", "a[*]b"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(one({{"v", bad}}), usage_error);
  }
  CHECK_THROWS_AS(one({}), usage_error);
  CHECK_THROWS_AS(one({{"v", "a"}, {"v", "b"}}), usage_error);
  CHECK_THROWS_AS(one({{"w", "a"}}), usage_error);
  CHECK_THROWS_AS(ann({{"boxes", "a"}, {"classes", "b", json_box::xywh}, {"iscrowd", "c"}}), usage_error);
}

TEST_CASE("json_fields: bad JSON is a format_error naming file, sample, member and path") {
  CHECK(error_for(annotations_json(4), coco_paths).empty());
  CHECK(error_for("{\"annotations\": [", coco_paths).find("field 'json', byte 17: not valid JSON") != std::string::npos);
  CHECK(error_for("{}", coco_paths).find("path 'annotations[*].bbox' (field 'boxes'): annotations is missing") !=
        std::string::npos);
  CHECK(error_for(R"({"annotations": {"bbox": 1}})", coco_paths).find("annotations is an object, not an array") !=
        std::string::npos);
  CHECK(error_for(R"({"annotations": [{"bbox": [1, 2, 3, 4], "category_id": 1, "iscrowd": 0}, {"bbox": [1, 2, 3]}]})",
                  coco_paths)
            .find("holds 7 numbers, not rows of 4") != std::string::npos);
  CHECK(error_for(R"({"annotations": [{"bbox": [1, 2, "3", 4]}]})", coco_paths)
            .find("annotations[0].bbox holds a string, not a number") != std::string::npos);
  const std::string two = R"({"annotations": [{"bbox": [1, 2, 3, 4], "category_id": 1, "iscrowd": 0}, )";
  CHECK(error_for(two + R"({"bbox": [1, 2, 3, 4], "category_id": 2.5, "iscrowd": 0}]})", coco_paths)
            .find("annotations[1].category_id holds 2.500000, not an integer (the field is i64)") != std::string::npos);
  CHECK(error_for(two + R"({"bbox": [1, 2, 3, 4], "category_id": 2, "iscrowd": 300}]})", coco_paths)
            .find("annotations[1].iscrowd holds 300, outside the field's type u8") != std::string::npos);
  CHECK(error_for(two + R"({"bbox": [1, 2, 3, 4], "iscrowd": 0}]})", coco_paths)
            .find("annotations[1].category_id is missing") != std::string::npos);
  CHECK(error_for(two + R"({"bbox": [1, 2, 1e39, 4], "category_id": 2, "iscrowd": 0}]})", coco_paths)
            .find("not a finite f32") != std::string::npos);
  CHECK(error_for(R"({"annotations": [null]})", coco_paths).find("annotations[0].bbox is missing (annotations[0] is null, not an object)") !=
        std::string::npos);

  // Through the loader: raise names the sample; skip drops and counts it.
  temp_dir d;
  std::vector<member> m;
  for (int g = 0; g < 4; ++g)
    m.push_back({"k" + std::to_string(g) + ".jpg", bytes_of("x")}),
        m.push_back({"k" + std::to_string(g) + ".json", bytes_of(g == 2 ? "{\"annotations\": 3}" : annotations_json(static_cast<std::uint64_t>(g)))});
  write_tar(d.file("b.tar"), m);
  io::wds_dataset<with_json> data(d.file("b.tar"));
  auto make = [&](on_error e) {
    return from(sample::sequential(data.size())) | read(data) | ann(coco_paths) |
           collate({.batch = 4, .drop_last = false}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}, ragged<"iscrowd">{}) |
           prefetch(2, {.workers = 2, .errors = e});
  };
  auto raising = make(on_error::raise);
  try {
    for (auto& b : raising.epoch(0)) (void)b;
    FAIL("sample 2 is bad");
  } catch (const stage_error& e) {
    CHECK(std::string(e.what()).find("annotations is an integer, not an array") != std::string::npos);
    CHECK(std::string(e.what()).find(d.file("b.tar")) != std::string::npos);
  }
  auto skipping = make(on_error::skip);
  std::size_t n = 0;
  for (auto& b : skipping.epoch(0)) n += b.size();
  CHECK(n == 3);
  CHECK(skipping.stats().skipped == 1);
}

#ifdef SLUICE_TEST_HAVE_JPEG
TEST_CASE("json_fields: boxes from JSON follow random_resized_crop + flip exactly as the same boxes stored as .npy") {
  temp_dir d;
  const std::string tar = write_json_shard(d, 24, true);
  using both = schema<field<"jpg", std::uint8_t, variable>, field<"json", std::uint8_t, variable>,
                      field<"boxes.npy", float, variable>, field<"classes.npy", std::int64_t, variable>>;
  io::wds_dataset<both> data(tar);
  const codecs::jpeg jpeg{{.width = 32, .height = 32, .mode = codecs::fit::random_resized_crop, .random_flip = true}};
  auto from_json = from(sample::shuffle(data.size(), {.seed = 4})) | read(data) | ann(coco_paths) |
                   decode<"jpg">(jpeg, boxes<"boxes", "classes", "iscrowd">{.min_size = 2}) |
                   collate({.batch = 8}, stack<"jpg">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}) |
                   prefetch(2, {.workers = 2});
  auto from_npy = from(sample::shuffle(data.size(), {.seed = 4})) | read(data) |
                  decode<"jpg">(jpeg, boxes<"boxes.npy", "classes.npy">{.min_size = 2}) |
                  collate({.batch = 8}, stack<"jpg">{}, ragged<"boxes.npy">{.row = {4}}, ragged<"classes.npy">{}) |
                  prefetch(2, {.workers = 2});
  std::vector<std::vector<float>> a, b;
  std::vector<std::vector<std::int64_t>> ca, cb;
  std::size_t kept = 0;
  for (auto& x : from_json.epoch(1)) {
    const auto v = x.get<"boxes">().values();
    const auto c = x.get<"classes">().values();
    a.emplace_back(v.begin(), v.end());
    ca.emplace_back(c.begin(), c.end());
    kept += c.size();
  }
  for (auto& x : from_npy.epoch(1)) {
    const auto v = x.get<"boxes.npy">().values();
    const auto c = x.get<"classes.npy">().values();
    b.emplace_back(v.begin(), v.end());
    cb.emplace_back(c.begin(), c.end());
  }
  REQUIRE(a.size() == 3);
  CHECK(kept > 0);
  CHECK(ca == cb);
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    REQUIRE(a[k].size() == b[k].size());
    for (std::size_t j = 0; j < a[k].size(); ++j) CHECK(a[k][j] == doctest::Approx(b[k][j]).epsilon(1e-5));
  }
}
#endif
