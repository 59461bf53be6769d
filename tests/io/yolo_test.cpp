// YOLO detection datasets through io/yolo.hpp: images/ beside labels/ as Ultralytics lays them
// out, boxes as fractions converted from cx cy w h, background images kept, polygons by choice,
// images of kinds sluice does not decode refused, every bad line named with its file and line.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "sluice/io/yolo.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {

struct dataset {
  temp_dir dir;
  std::string images, labels;
  dataset() {
    images = dir.file("ds/images/train");
    labels = dir.file("ds/labels/train");
    std::filesystem::create_directories(images + "/sub");
    std::filesystem::create_directories(labels + "/sub");
    for (const char* name : {"b.jpg", "a.PNG", "sub/c.jpeg", "d.jpg"})
      sluice_test::write_file(images + "/" + name, std::string("bytes of ") + name);
    sluice_test::write_file(images + "/notes.txt", std::string("not an image"));
    sluice_test::write_file(labels + "/a.txt", std::string("2 0.5 0.5 0.2 0.4\n\n0 0.25 0.75 0.5 0.5\n"));
    sluice_test::write_file(labels + "/b.txt", std::string(""));  // background
    sluice_test::write_file(labels + "/sub/c.txt", std::string("7 0.1 0.2 0.3 0.4"));  // no newline at the end
    // d.jpg has no label file: background
  }
};

template <class T>
std::vector<T> values(std::span<const std::byte> b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == doctest::Approx(want[k]).epsilon(1e-6));
}

std::string label_error(const std::string& text, io::yolo_options o = {}) {
  std::vector<float> b;
  std::vector<std::int64_t> c;
  try {
    io::detail::parse_yolo_labels(text, "x.txt", o, b, c);
  } catch (const format_error& e) {
    CHECK(e.file() == "x.txt");
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("yolo: images in path order, labels by Ultralytics' rule, boxes as fractions xyxy, background images kept") {
  dataset d;
  io::yolo_dataset y(d.images);
  REQUIRE(y.size() == 4);
  CHECK(y.image_path(0) == d.images + "/a.PNG");
  CHECK(y.image_path(1) == d.images + "/b.jpg");
  CHECK(y.image_path(2) == d.images + "/d.jpg");
  CHECK(y.image_path(3) == d.images + "/sub/c.jpeg");
  CHECK(y.label_path(3) == d.labels + "/sub/c.txt");
  const auto a = y.fields(0);
  CHECK(a.origin == d.images + "/a.PNG");
  const auto img = a.bytes_of<"image">();
  CHECK(std::string(reinterpret_cast<const char*>(img.data()), img.size()) == "bytes of a.PNG");
  check_close(values<float>(a.bytes_of<"boxes">()), {0.4f, 0.3f, 0.6f, 0.7f, 0.0f, 0.5f, 0.5f, 1.0f});
  CHECK(values<std::int64_t>(a.bytes_of<"classes">()) == std::vector<std::int64_t>{2, 0});
  CHECK(y.boxes_of(1) == 0);
  CHECK(y.boxes_of(2) == 0);
  check_close(values<float>(y.fields(3).bytes_of<"boxes">()), {-0.05f, 0.0f, 0.25f, 0.4f});
  CHECK_THROWS_AS((void)y.fields(4), usage_error);

  SUBCASE("options: xywh, background dropped, a labels folder given, a class count") {
    io::yolo_dataset o(d.images, {.boxes = codecs::box_format::xywh, .labels = d.labels, .keep_empty = false});
    REQUIRE(o.size() == 2);
    check_close(values<float>(o.fields(0).bytes_of<"boxes">()), {0.4f, 0.3f, 0.2f, 0.4f, 0.0f, 0.5f, 0.5f, 0.5f});
    CHECK(o.label_path(1) == d.labels + "/sub/c.txt");
    io::yolo_dataset c(d.images, {.boxes = codecs::box_format::cxcywh, .labels = d.labels, .keep_empty = false});
    check_close(values<float>(c.fields(0).bytes_of<"boxes">()), {0.5f, 0.5f, 0.2f, 0.4f, 0.25f, 0.75f, 0.5f, 0.5f});
    const auto e = sluice_test::expect_format_error([&] { io::yolo_dataset c(d.images, {.classes = 5}); });
    CHECK(e.file() == d.labels + "/sub/c.txt");
    CHECK(std::string(e.what()).find("line 1: class 7 is not below the class count 5") != std::string::npos);
  }
}

TEST_CASE("yolo: through the loader, boxes following a centre crop as fractions, for 1 and 2 workers") {
  dataset d;
  io::yolo_dataset y(d.images);
  for (std::size_t workers : {1, 2}) {
    CAPTURE(workers);
    auto loader = from(sample::sequential(y.size())) | read(y) |
                  collate({.batch = 4}, ragged<"image">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}) |
                  prefetch(2, {.workers = workers});
    std::size_t batches = 0;
    for (auto& b : loader.epoch(0)) {
      ++batches;
      const auto off = b.get<"boxes.offsets">().values();
      CHECK(std::vector<std::int64_t>(off.begin(), off.end()) == std::vector<std::int64_t>{0, 2, 2, 2, 3});
      const auto cls = b.get<"classes">().values();
      CHECK(std::vector<std::int64_t>(cls.begin(), cls.end()) == std::vector<std::int64_t>{2, 0, 7});
    }
    CHECK(batches == 1);
  }
}

TEST_CASE("yolo: a bad label line is a format_error naming the file and the line") {
  CHECK(label_error("0 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1\n").find("line 2: 3 numbers after the class") != std::string::npos);
  CHECK(label_error("x 0.5 0.5 0.1 0.1").find("line 1: the class 'x' is not a number") != std::string::npos);
  CHECK(label_error("-1 0.5 0.5 0.1 0.1").find("the class '-1' is not a non-negative integer") != std::string::npos);
  CHECK(label_error("1.5 0.5 0.5 0.1 0.1").find("not a non-negative integer") != std::string::npos);
  CHECK(label_error("1 0.5 1.5 0.1 0.1").find("the coordinate 1.5 is outside [0, 1]") != std::string::npos);
  CHECK(label_error("1 0.5 nan 0.1 0.1").find("'nan' is not a number") != std::string::npos);
  CHECK(label_error("1 0.5 0.5 0.1 0.1e").find("is not a number") != std::string::npos);
  // A polygon is an error unless asked for; then its bounding box.
  const std::string poly = "3 0.1 0.2 0.5 0.1 0.4 0.6\n";
  CHECK(label_error(poly).find(".polygons = true") != std::string::npos);
  std::vector<float> b;
  std::vector<std::int64_t> c;
  io::detail::parse_yolo_labels(poly + "1 0.5 0.5 0.2 0.2\r\n", "x.txt", {.polygons = true}, b, c);
  check_close(b, {0.1f, 0.1f, 0.5f, 0.6f, 0.4f, 0.4f, 0.6f, 0.6f});
  CHECK(c == std::vector<std::int64_t>{3, 1});
  CHECK(label_error("3 0.1 0.2 0.5 0.1 0.4", {.polygons = true}).find("5 numbers") != std::string::npos);
  CHECK(label_error("1.0 0.5 0.5 0.2 0.2\n  \n").empty());

  // Every prefix of a good file parses or is refused, never a crash.
  const std::string good = "0 0.5 0.5 0.25 0.125\n12 0.1 0.9 0.05 0.05\n";
  for (std::size_t n = 0; n <= good.size(); ++n) (void)label_error(good.substr(0, n));
}

TEST_CASE("yolo: images sluice does not decode are refused at open, naming them") {
  dataset d;
  sluice_test::write_file(d.images + "/e.webp", std::string("RIFF"));
  try {
    io::yolo_dataset y(d.images);
    FAIL("a .webp image is in the folder");
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("1 images that are not JPEG or PNG (" + d.images + "/e.webp)") != std::string::npos);
  }
  CHECK_THROWS_AS(io::yolo_dataset(d.dir.file("nowhere")), io_error);
  CHECK_THROWS_AS(io::yolo_dataset(d.images + "/b.jpg"), usage_error);
  CHECK_THROWS_AS(io::yolo_dataset(d.images, {.labels = d.dir.file("nowhere")}), io_error);
}

TEST_CASE("yolo: a relative images folder finds its labels, and labels found nowhere are an error, not background") {
  dataset d;
  const auto here = std::filesystem::current_path();
  std::filesystem::current_path(d.dir.path());
  struct back {
    std::filesystem::path p;
    ~back() { std::filesystem::current_path(p); }
  } restore{here};
  io::yolo_dataset rel("ds/images/train");
  REQUIRE(rel.size() == 4);
  CHECK(rel.boxes_of(0) == 2);
  CHECK(rel.image_path(0) == "ds/images/train/a.PNG");

  std::filesystem::remove_all(d.labels);
  try {
    io::yolo_dataset none("ds/images/train");
    FAIL("no label file anywhere");
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("none of the 4 images under 'ds/images/train' has a label file") != std::string::npos);
    CHECK(std::string(e.what()).find("/ds/labels/train/a.txt") != std::string::npos);
  }
  std::filesystem::create_directories("empty/images");
  CHECK_THROWS_AS(io::yolo_dataset("empty/images"), usage_error);
}
