// tf.train.Example's "image/encoded" decoded in the pipeline: decode<"image/encoded">(jpeg) over
// tf_example_reader, the usual ImageNet-style TFRecord layout. Built when TurboJPEG is found.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/sluice.hpp"
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
