// COCO detection datasets through io/coco.hpp: an image folder and an instances JSON read as
// samples (image bytes, boxes, contiguous classes, iscrowd) without conversion; every kind of
// bad annotation file named with its entry; images joined by id, images without annotations kept.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "sluice/io/coco.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {

// Categories out of id order; images 10 (two boxes, one crowd), 20 (none), 30 (one, in a
// sub-folder, written with Python floats for its ids) and 40 (none); annotations out of image order.
const std::string good = R"({
  "info": {"description": "test"},
  "categories": [{"id": 7, "name": "cat"}, {"id": 3, "name": "dog"}, {"id": 90, "name": "toothbrush"}],
  "images": [{"id": 10, "file_name": "a.jpg", "width": 64, "height": 48},
             {"id": 20, "file_name": "b.jpg"},
             {"id": 30, "file_name": "sub/c.jpg"},
             {"id": 40, "file_name": "d.jpg"}],
  "annotations": [
    {"id": 1, "image_id": 30, "bbox": [1.5, 2, 10, 20.25], "category_id": 3.0, "iscrowd": 0, "area": 5},
    {"id": 2, "image_id": 10, "bbox": [0, 0, 4, 8], "category_id": 90, "iscrowd": 0,
     "segmentation": [[0, 0, 4, 0, 4, 8]]},
    {"id": 3, "image_id": 10, "bbox": [5, 6, 7, 8], "category_id": 7, "iscrowd": 1,
     "segmentation": {"counts": [1, 2], "size": [48, 64]}}]
})";

struct dataset {
  temp_dir dir;
  std::string images, json;
  explicit dataset(const std::string& text = good) {
    images = dir.file("images");
    std::filesystem::create_directories(images + "/sub");
    for (const char* name : {"a.jpg", "b.jpg", "sub/c.jpg", "d.jpg"}) sluice_test::write_file(images + "/" + name, std::string("bytes of ") + name);
    json = dir.file("instances.json");
    sluice_test::write_file(json, text);
  }
};

template <class T>
std::vector<T> values(std::span<const std::byte> b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

std::string error_of(const std::string& text, io::coco_options o = {}) {
  try {
    (void)io::parse_coco(text, "ann.json", o);
  } catch (const format_error& e) {
    CHECK(e.file() == "ann.json");
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("coco: images in the file's order, boxes xyxy, contiguous classes in id order, iscrowd, empty images kept") {
  dataset d;
  io::coco_dataset coco(d.images, d.json);
  REQUIRE(coco.size() == 4);
  REQUIRE(coco.categories().size() == 3);
  CHECK(coco.categories()[0].id == 3);
  CHECK(coco.categories()[0].name == "dog");
  CHECK(coco.categories()[1].id == 7);
  CHECK(coco.categories()[2].name == "toothbrush");
  CHECK(coco.image_id(2) == 30);
  CHECK(coco.image_path(2) == d.images + "/sub/c.jpg");

  const auto a = coco.fields(0);
  CHECK(a.origin == d.images + "/a.jpg");
  const auto img = a.bytes_of<"image">();
  CHECK(std::string(reinterpret_cast<const char*>(img.data()), img.size()) == "bytes of a.jpg");
  CHECK(values<float>(a.bytes_of<"boxes">()) == std::vector<float>{0, 0, 4, 8, 5, 6, 12, 14});
  CHECK(values<std::int64_t>(a.bytes_of<"classes">()) == std::vector<std::int64_t>{2, 1});
  CHECK(values<std::uint8_t>(a.bytes_of<"iscrowd">()) == std::vector<std::uint8_t>{0, 1});
  CHECK(coco.fields(1).size_of<"boxes">() == 0);
  CHECK(coco.fields(1).size_of<"image">() == std::strlen("bytes of b.jpg"));
  CHECK(values<float>(coco.fields(2).bytes_of<"boxes">()) == std::vector<float>{1.5f, 2, 11.5f, 22.25f});
  CHECK(values<std::int64_t>(coco.fields(2).bytes_of<"classes">()) == std::vector<std::int64_t>{0});
  CHECK_THROWS_AS((void)coco.fields(4), usage_error);

  SUBCASE("options: boxes as stored, ids as stored, crowd dropped, empty images dropped") {
    io::coco_dataset o(d.images, d.json,
                       {.boxes = codecs::box_format::xywh, .contiguous = false, .crowd = false, .keep_empty = false});
    REQUIRE(o.size() == 2);
    CHECK(o.image_id(0) == 10);
    CHECK(o.image_id(1) == 30);
    CHECK(values<float>(o.fields(0).bytes_of<"boxes">()) == std::vector<float>{0, 0, 4, 8});
    CHECK(values<std::int64_t>(o.fields(0).bytes_of<"classes">()) == std::vector<std::int64_t>{90});
    CHECK(values<float>(o.fields(1).bytes_of<"boxes">()) == std::vector<float>{1.5f, 2, 10, 20.25f});
    io::coco_dataset c(d.images, d.json, {.boxes = codecs::box_format::cxcywh, .crowd = false, .keep_empty = false});
    CHECK(values<float>(c.fields(0).bytes_of<"boxes">()) == std::vector<float>{2, 4, 4, 8});
    CHECK(values<float>(c.fields(1).bytes_of<"boxes">()) == std::vector<float>{6.5f, 12.125f, 10, 20.25f});
  }
}

TEST_CASE("coco: through the loader, rows ragged per sample, for 1 and 2 workers") {
  dataset d;
  io::coco_dataset coco(d.images, d.json);
  for (std::size_t workers : {1, 2}) {
    CAPTURE(workers);
    auto loader = from(sample::sequential(coco.size())) | read(coco) |
                  collate({.batch = 4}, ragged<"image">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{},
                          ragged<"iscrowd">{}) |
                  prefetch(2, {.workers = workers});
    std::size_t batches = 0;
    for (auto& b : loader.epoch(0)) {
      ++batches;
      const auto boxes = b.get<"boxes">();
      CHECK(std::vector<std::int64_t>(boxes.shape().begin(), boxes.shape().end()) == std::vector<std::int64_t>{3, 4});
      CHECK(std::vector<float>(boxes.values().begin(), boxes.values().end()) ==
            std::vector<float>{0, 0, 4, 8, 5, 6, 12, 14, 1.5f, 2, 11.5f, 22.25f});
      const auto off = b.get<"boxes.offsets">().values();
      CHECK(std::vector<std::int64_t>(off.begin(), off.end()) == std::vector<std::int64_t>{0, 2, 2, 3, 3});
      const auto cls = b.get<"classes">().values();
      CHECK(std::vector<std::int64_t>(cls.begin(), cls.end()) == std::vector<std::int64_t>{2, 1, 0});
      const auto crowd = b.get<"iscrowd">().values();
      CHECK(std::vector<std::uint8_t>(crowd.begin(), crowd.end()) == std::vector<std::uint8_t>{0, 1, 0});
    }
    CHECK(batches == 1);
  }
}

TEST_CASE("coco: a bad annotation file is a format_error naming the file and the entry") {
  CHECK(error_of("{\"images\": [").find("not valid JSON") != std::string::npos);
  CHECK(error_of("[]").find("not a JSON object") != std::string::npos);
  CHECK(error_of("{}").find("no \"images\"") != std::string::npos);
  CHECK(error_of(R"({"images": [{"file_name": "a.jpg"}]})").find("images[0]: no \"id\"") != std::string::npos);
  CHECK(error_of(R"({"images": [{"id": 1.5, "file_name": "a.jpg"}]})").find("images[0].id: not an integer") != std::string::npos);
  CHECK(error_of(R"({"images": [{"id": 1, "file_name": "a.jpg"}, {"id": 1, "file_name": "b.jpg"}]})")
            .find("images[1]: image id 1 is given twice") != std::string::npos);
  CHECK(error_of(R"({"images": [{"id": 1, "file_name": "../etc/passwd"}]})").find("climbs out of the images folder") !=
        std::string::npos);
  CHECK(error_of(R"({"images": [{"id": 1, "file_name": "x/../../y.jpg"}]})").find("climbs out") != std::string::npos);
  CHECK(error_of(R"({"images": [{"id": 1, "file_name": "/abs.jpg"}]})").find("is absolute") != std::string::npos);
  CHECK(error_of(R"({"images": [{"id": 1, "file_name": 7}]})").find("images[0].file_name is an integer, not a string") !=
        std::string::npos);
  const std::string head = R"({"categories": [{"id": 1, "name": "a"}], "images": [{"id": 5, "file_name": "a.jpg"}], "annotations": [)";
  auto ann = [&](const std::string& a) { return error_of(head + a + "]}"); };
  CHECK(ann(R"({"image_id": 6, "bbox": [0, 0, 1, 1], "category_id": 1})").find("annotations[0]: image_id 6 is not an id of") !=
        std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, 1, 1], "category_id": 2})").find("category_id 2 is not an id of") !=
        std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, 1], "category_id": 1})").find("annotations[0].bbox: 3 numbers") !=
        std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, -3, 1], "category_id": 1})").find("a negative width") != std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, 1, "x"], "category_id": 1})").find("annotations[0].bbox[3] is a string") !=
        std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, 1e300, 1], "category_id": 1})").find("not a finite number") != std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, 1, 1], "category_id": 1, "iscrowd": 2})").find("iscrowd 2") !=
        std::string::npos);
  CHECK(ann(R"({"image_id": 5, "category_id": 1})").find("annotations[0]: no \"bbox\"") != std::string::npos);
  CHECK(error_of(R"({"categories": [{"id": 1}, {"id": 1}], "images": []})").find("id 1 is given twice") != std::string::npos);
  CHECK(ann(R"({"image_id": 5, "bbox": [0, 0, 1, 1], "category_id": 1})").empty());

  // Every prefix of a good file is refused with a format_error (never a crash or a hang).
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    CHECK(!error_of(good.substr(0, n)).empty());
  }
}

TEST_CASE("coco: images missing from the folder are listed at open, an image gone later is an io_error naming it") {
  dataset d;
  std::filesystem::remove(d.images + "/b.jpg");
  std::filesystem::remove(d.images + "/sub/c.jpg");
  const auto e = sluice_test::expect_format_error([&] { io::coco_dataset c(d.images, d.json); });
  CHECK(e.file() == d.json);
  CHECK(std::string(e.what()).find("2 of its 4 images are not files in '" + d.images + "': b.jpg, sub/c.jpg") !=
        std::string::npos);
  CHECK_THROWS_AS(io::coco_dataset(d.dir.file("nowhere"), d.json), io_error);
  CHECK_THROWS_AS(io::coco_dataset(d.json, d.json), usage_error);

  dataset later;
  io::coco_dataset c(later.images, later.json);
  std::filesystem::remove(later.images + "/d.jpg");
  try {
    (void)c.fields(3);
    FAIL("the image is gone");
  } catch (const io_error& e) {
    CHECK(e.path() == later.images + "/d.jpg");
  }
  // Under on_error::skip the loader drops it and counts it; the other three arrive.
  auto loader = from(sample::sequential(c.size())) | read(c) |
                collate({.batch = 4, .drop_last = false}, ragged<"image">{}, ragged<"boxes">{.row = {4}},
                        ragged<"classes">{}, ragged<"iscrowd">{}) |
                prefetch(2, {.workers = 2, .errors = on_error::skip});
  std::size_t samples = 0;
  for (auto& b : loader.epoch(0)) samples += b.size();
  CHECK(samples == 3);
  CHECK(loader.stats().skipped == 1);
}

TEST_CASE("coco: segmentation values are checked as JSON but not kept (parse_json with members dropped)") {
  static constexpr std::string_view drop[] = {"segmentation"};
  const auto doc = io::parse_json(R"({"a": [{"segmentation": [[1, 2, 3]], "bbox": [1, 2, 3, 4]}], "segmentation": 5})",
                                  "x.json", drop);
  CHECK(doc.find("segmentation") == nullptr);
  CHECK(doc.at("a", "x.json").items()[0].find("segmentation") == nullptr);
  CHECK(doc.at("a", "x.json").items()[0].find("bbox") != nullptr);
  const auto e = sluice_test::expect_format_error(
      [&] { (void)io::parse_json(R"({"segmentation": [[1, 2, ]]})", "x.json", drop); });
  CHECK(e.cause().find("not valid JSON") != std::string::npos);
  CHECK(error_of(R"({"images": [], "annotations": [{"segmentation": {"counts": [1, 2,], "size": [1, 1]}}]})")
            .find("not valid JSON") != std::string::npos);
}
