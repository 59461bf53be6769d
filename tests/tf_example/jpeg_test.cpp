// tf.train.Example's "image/encoded" decoded in the pipeline: decode<"image/encoded">(jpeg) over
// tf_example_reader, the usual ImageNet-style TFRecord layout. Built when TurboJPEG is found.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/any_collate.hpp"
#include "sluice/stage/any_decode.hpp"
#include "sluice/stage/decode.hpp"
#include "test_util.hpp"

using namespace sluice;

TEST_CASE("tf_example: decode<\"image/encoded\">(jpeg) | stack: every image's colour and label arrive") {
  using imagenet = schema<field<"image/encoded", std::uint8_t, variable>, field<"image/class/label", std::int64_t>>;
  const int n = 12, W = 32, H = 24;
  std::vector<std::byte> file;
  for (int i = 0; i < n; ++i) {
    std::vector<std::uint8_t> px(static_cast<std::size_t>(W * H * 3));
    for (std::size_t k = 0; k < px.size(); k += 3) {
      px[k] = static_cast<std::uint8_t>(20 * i);
      px[k + 1] = static_cast<std::uint8_t>(200 - 10 * i);
      px[k + 2] = 128;
    }
    const auto jpg = codecs::encode_jpeg(px, W, H, codecs::pixels::rgb, 95);
    const std::int64_t label[] = {i % 4};
    io::append_tfrecord(file, io::tf_example_builder{}
                                  .bytes("image/format", sluice_test::as_bytes("jpeg"))
                                  .bytes("image/encoded", jpg)
                                  .int64s("image/class/label", label)
                                  .build());
  }
  sluice_test::temp_dir d;
  const std::string p = d.file("imagenet.tfrecord");
  sluice_test::write_file(p, file);
  io::tf_example_reader<imagenet> r{p};
  auto loader = from(sample::sequential(r.size())) | read(r) |
                decode<"image/encoded">(codecs::jpeg{{.width = 16, .height = 16}}) |
                collate({.batch = 5}, stack<"image/encoded">{}, stack<"image/class/label">{}) |
                prefetch(2, {.workers = 2});
  int seen = 0;
  for (auto& b : loader.epoch(0)) {
    auto img = b.get<"image/encoded">();
    auto lab = b.get<"image/class/label">();
    REQUIRE(img.shape().size() == 4);
    CHECK(img.shape()[1] == 16);
    CHECK(img.shape()[3] == 3);
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto id = static_cast<int>(b.ids()[k]);
      CHECK(lab[k] == id % 4);
      const std::uint8_t* px = img.data() + k * 16 * 16 * 3;
      CHECK(std::abs(int(px[0]) - 20 * id) <= 4);  // a flat colour survives JPEG within a few levels
      CHECK(std::abs(int(px[1]) - (200 - 10 * id)) <= 4);
      CHECK(std::abs(int(px[2]) - 128) <= 4);
    }
    seen += static_cast<int>(b.size());
  }
  CHECK(seen == n);
}

TEST_CASE("tf_example: the Object Detection API's four box lists follow random_resized_crop, classes with them") {
  // Boxes as xmin, ymin, xmax, ymax float lists (normalized), labels as an int64 list (varints:
  // written by the reader's producer), read as f64 (floats widened: a producer too).
  const int n = 10, W = 40, H = 30;
  std::vector<std::byte> file;
  std::vector<std::vector<std::byte>> jpgs;
  std::vector<std::vector<double>> box(n);
  std::vector<std::vector<std::int64_t>> cls(n);
  for (int i = 0; i < n; ++i) {
    std::vector<std::uint8_t> px(static_cast<std::size_t>(W * H * 3), static_cast<std::uint8_t>(10 * i));
    jpgs.push_back(codecs::encode_jpeg(px, W, H, codecs::pixels::rgb, 90));
    std::vector<float> col[4];
    for (int b = 0; b < i % 5; ++b) {
      const float x0 = 0.1f * static_cast<float>((i + 3 * b) % 8), y0 = 0.05f * static_cast<float>((2 * i + b) % 12);
      const float r[4] = {x0, y0, x0 + 0.15f + 0.05f * static_cast<float>(b), y0 + 0.2f};
      for (int c = 0; c < 4; ++c) col[c].push_back(r[c]), box[static_cast<std::size_t>(i)].push_back(r[c]);
      cls[static_cast<std::size_t>(i)].push_back(100 * i + b);
    }
    io::tf_example_builder e;
    e.bytes("image/encoded", jpgs.back()).int64s("image/object/class/label", cls[static_cast<std::size_t>(i)]);
    const char* names[4] = {"image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax"};
    for (int c = 0; c < 4; ++c) e.floats(names[c], col[c]);
    io::append_tfrecord(file, e.build());
  }
  sluice_test::temp_dir d;
  const std::string p = d.file("od.tfrecord");
  sluice_test::write_file(p, file);
  io::tf_example_any r{p, {{"image", "image/encoded"}, {"x0", "image/object/bbox/xmin", dtype::f64},
                           {"y0", "image/object/bbox/ymin", dtype::f64}, {"x1", "image/object/bbox/xmax", dtype::f64},
                           {"y1", "image/object/bbox/ymax", dtype::f64}, {"cls", "image/object/class/label", dtype::i64}}};
  const codecs::jpeg codec{{.width = 16, .height = 16, .mode = codecs::fit::random_resized_crop, .random_flip = true}};
  const codecs::box_options bo{.normalized = true, .min_size = 1.0};
  any_decode_stage dec(r.schema());
  dec.add("image", codec, {any_boxes({"x0", "y0", "x1", "y1"}, {"cls"}, bo)});
  auto loader = from(sample::shuffle(r.size(), {.seed = 2})) | read(r) | dec |
                collate({.batch = 4}, dec.schema(), {{"image", stack<>{}}, {"x0", ragged<>{}}, {"y0", ragged<>{}},
                                                     {"x1", ragged<>{}}, {"y1", ragged<>{}}, {"cls", ragged<>{}}}) |
                prefetch(2, {.workers = 2, .seed = 11});
  std::size_t kept = 0, total = 0;
  for (auto& b : loader.epoch(3)) {
    const auto off = b.field("x0.offsets").as<std::int64_t>();
    const auto c = b.field("cls").as<std::int64_t>();
    const char* names[4] = {"x0", "y0", "x1", "y1"};
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::size_t id = b.ids()[k];
      // The reference: the codec's own plan for (seed, epoch, id), every box through it.
      const auto t = codec.plan(jpgs[id], {.seed = 11, .epoch = 3, .id = id});
      std::vector<double> want;
      std::vector<std::int64_t> want_cls;
      for (std::size_t j = 0; j < cls[id].size(); ++j) {
        double out[4];
        if (codecs::transform_box(t, bo, box[id].data() + 4 * j, out)) want.insert(want.end(), out, out + 4), want_cls.push_back(cls[id][j]);
      }
      total += cls[id].size();
      kept += want_cls.size();
      REQUIRE(static_cast<std::size_t>(off[k + 1] - off[k]) == want_cls.size());
      for (std::size_t j = 0; j < want_cls.size(); ++j) {
        const auto row = static_cast<std::size_t>(off[k]) + j;
        CHECK(c[row] == want_cls[j]);
        for (std::size_t q = 0; q < 4; ++q) CHECK(b.field(names[q]).as<double>()[row] == want[4 * j + q]);
      }
    }
  }
  CHECK(total == 20);
  CHECK(kept > 0);
  CHECK(kept < total);
}
