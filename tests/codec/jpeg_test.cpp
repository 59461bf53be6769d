// JPEG codec and transforms: decoded pixels match the encoded image, DCT scaling picks the right
// factor and agrees with a full decode, crops land where the geometry says, flips mirror, and
// random augmentation is a function of (seed, epoch, id) only — identical across threads.
#include <doctest/doctest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "sluice/codec/jpeg.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
// A smooth RGB test image: R follows x, G follows y, B constant; smooth so JPEG error is small.
std::vector<std::uint8_t> gradient(int w, int h) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* q = &p[(static_cast<std::size_t>(y) * w + x) * 3];
      q[0] = static_cast<std::uint8_t>(x * 255 / (w - 1));
      q[1] = static_cast<std::uint8_t>(y * 255 / (h - 1));
      q[2] = 100;
    }
  return p;
}
double mean_abs_diff(std::span<const std::byte> a, std::span<const std::uint8_t> b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(std::to_integer<int>(a[i]) - int(b[i]));
  return s / static_cast<double>(a.size());
}
int at(const std::vector<std::byte>& img, int w, int x, int y, int c, int ch = 3) {
  return std::to_integer<int>(img[(static_cast<std::size_t>(y) * w + x) * ch + c]);
}
}  // namespace

TEST_CASE("jpeg: full-size decode matches the encoded pixels, header is read") {
  const int w = 64, h = 48;
  auto src = gradient(w, h);
  auto enc = encode_jpeg(src, w, h, pixels::rgb, 95, TJSAMP_444);
  auto hd = read_jpeg_header(enc);
  CHECK(hd.width == w);
  CHECK(hd.height == h);
  jpeg dec({.width = w, .height = h, .mode = fit::stretch});
  CHECK(dec.output_bytes() == std::size_t(w * h * 3));
  std::vector<std::byte> out(dec.output_bytes());
  dec.decode(enc, out, {});
  CHECK(mean_abs_diff(out, src) < 2.0);
}

TEST_CASE("jpeg: grey output") {
  std::vector<std::uint8_t> g(32 * 32);
  for (int i = 0; i < 32 * 32; ++i) g[i] = static_cast<std::uint8_t>((i % 32) * 8);
  auto enc = encode_jpeg(g, 32, 32, pixels::grey, 95);
  jpeg dec({.width = 32, .height = 32, .mode = fit::stretch}, {.format = pixels::grey});
  CHECK(dec.output_bytes() == 32u * 32u);
  std::vector<std::byte> out(dec.output_bytes());
  dec.decode(enc, out, {});
  CHECK(mean_abs_diff(out, g) < 2.0);
  // An RGB codec decodes a grey JPEG too (replicated channels).
  jpeg rgb({.width = 32, .height = 32, .mode = fit::stretch});
  std::vector<std::byte> o3(rgb.output_bytes());
  rgb.decode(enc, o3, {});
  CHECK(std::abs(at(o3, 32, 20, 5, 0) - at(o3, 32, 20, 5, 2)) <= 1);
}

TEST_CASE("jpeg: DCT scaling picks the smallest sufficient factor of 1, 1/2, 1/4, 1/8 and agrees with a full decode") {
  CHECK(codecs::detail::pick_scale(0.125).num * 8 == codecs::detail::pick_scale(0.125).denom * 1);
  auto s3 = codecs::detail::pick_scale(0.3);  // 3/8 would do, but runs without SIMD: 1/2
  CHECK(s3.num == 1);
  CHECK(s3.denom == 2);
  auto s2 = codecs::detail::pick_scale(0.25);
  CHECK(s2.denom == 4 * s2.num);
  auto s7 = codecs::detail::pick_scale(0.8);  // 7/8 is slower than a full decode
  CHECK(s7.num == s7.denom);
  auto s1 = codecs::detail::pick_scale(1.7);  // upscaling: decode at full size, never above
  CHECK(s1.num == s1.denom);

  const int w = 256, h = 256;
  auto enc = encode_jpeg(gradient(w, h), w, h, pixels::rgb, 95);
  jpeg fast({.width = 32, .height = 32, .mode = fit::stretch});
  jpeg full({.width = 32, .height = 32, .mode = fit::stretch}, {.dct_scaling = false});
  std::vector<std::byte> a(fast.output_bytes()), b(full.output_bytes());
  fast.decode(enc, a, {});
  full.decode(enc, b, {});
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::abs(std::to_integer<int>(a[i]) - std::to_integer<int>(b[i]));
  CHECK(d / a.size() < 3.0);
  // And both follow the gradient: left column dark red, right column bright red.
  CHECK(at(a, 32, 0, 16, 0) < 20);
  CHECK(at(a, 32, 31, 16, 0) > 235);
}

TEST_CASE("transform: centre crop keeps the middle, stretch keeps everything") {
  const int w = 128, h = 64;
  auto enc = encode_jpeg(gradient(w, h), w, h, pixels::rgb, 95, TJSAMP_444);
  // Cover 32x32 keeping aspect: scale 0.5 -> 64x32, centre window = source columns 32..96.
  jpeg crop({.width = 32, .height = 32});
  std::vector<std::byte> o(crop.output_bytes());
  crop.decode(enc, o, {});
  const double per_col = 255.0 / (w - 1);
  CHECK(std::abs(at(o, 32, 0, 16, 0) - 33.0 * per_col) < 8);
  CHECK(std::abs(at(o, 32, 31, 16, 0) - 95.0 * per_col) < 8);
  jpeg stretch({.width = 32, .height = 32, .mode = fit::stretch});
  stretch.decode(enc, o, {});
  CHECK(at(o, 32, 0, 16, 0) < 12);
  CHECK(at(o, 32, 31, 16, 0) > 243);
}

TEST_CASE("transform: flip mirrors, random crop and flip depend only on (seed, epoch, id)") {
  const int w = 96, h = 80;
  auto enc = encode_jpeg(gradient(w, h), w, h, pixels::rgb, 90);
  jpeg plain({.width = 40, .height = 40});
  jpeg flipping({.width = 40, .height = 40, .random_flip = true});
  std::vector<std::byte> p(plain.output_bytes()), f(plain.output_bytes());
  plain.decode(enc, p, {});
  int flipped = 0, kept = 0;
  for (std::uint64_t id = 0; id < 16; ++id) {
    const sample_context ctx{.seed = 5, .epoch = 1, .id = id};
    flipping.decode(enc, f, ctx);
    const bool flip = plan_geometry(w, h, flipping.transform_options(), ctx).flip;
    bool mirrored = true, same = true;
    for (int y = 0; y < 40; ++y)
      for (int x = 0; x < 40; ++x)
        for (int c = 0; c < 3; ++c) {
          mirrored = mirrored && at(f, 40, x, y, c) == at(p, 40, 39 - x, y, c);
          same = same && at(f, 40, x, y, c) == at(p, 40, x, y, c);
        }
    CHECK(mirrored == flip);
    CHECK(same == !flip);
    (flip ? flipped : kept)++;
  }
  CHECK(flipped > 0);
  CHECK(kept > 0);

  // Random crops: same context, same bytes; the offsets vary with id and epoch.
  jpeg rnd({.width = 40, .height = 40, .crop = crop_at::random, .resize_scale = 1.3, .random_flip = true});
  std::vector<std::byte> a(rnd.output_bytes()), b(rnd.output_bytes());
  rnd.decode(enc, a, {.seed = 9, .epoch = 2, .id = 7});
  rnd.decode(enc, b, {.seed = 9, .epoch = 2, .id = 7});
  CHECK(a == b);
  int differ = 0;
  for (std::uint64_t id = 0; id < 8; ++id) {
    auto p1 = plan_geometry(w, h, rnd.transform_options(), {.seed = 9, .epoch = 2, .id = id});
    auto p2 = plan_geometry(w, h, rnd.transform_options(), {.seed = 9, .epoch = 3, .id = id});
    differ += (p1.offset_x != p2.offset_x || p1.offset_y != p2.offset_y);
    CHECK(p1.offset_x >= 0);
    CHECK(p1.offset_x + 40 * p1.step_x <= w + 1e-9);
    CHECK(p1.offset_y + 40 * p1.step_y <= h + 1e-9);
  }
  CHECK(differ >= 6);
}

TEST_CASE("jpeg: output is bit-identical whatever thread decodes it") {
  std::vector<std::vector<std::byte>> encs;
  for (int i = 0; i < 12; ++i) encs.push_back(encode_jpeg(gradient(60 + i * 7, 50 + i * 3), 60 + i * 7, 50 + i * 3, pixels::rgb, 85));
  jpeg dec({.width = 24, .height = 24, .crop = crop_at::random, .resize_scale = 1.2, .random_flip = true});
  auto run = [&](int threads) {
    std::vector<std::byte> all(encs.size() * dec.output_bytes());
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (std::size_t i = t; i < encs.size(); i += threads)
          dec.decode(encs[i], std::span(all).subspan(i * dec.output_bytes(), dec.output_bytes()),
                     {.seed = 3, .epoch = 0, .id = i});
      });
    for (auto& th : ts) th.join();
    return all;
  };
  auto one = run(1);
  CHECK(one == run(2));
  CHECK(one == run(3));
}

// ---- decode stage in a pipeline -------------------------------------------------------------
#include <sluice/sluice.hpp>

#include "sluice/io/tfrecord.hpp"
#include "sluice/stage/decode.hpp"
#include "test_util.hpp"

namespace {
// A TFRecord file of n JPEGs of varying size (image i is 40 + i wide, so a label extractor can
// recover i % 5 from the JPEG header).
std::string write_jpeg_tfrecord(const sluice_test::temp_dir& dir, int n, int corrupt_at = -1) {
  std::vector<std::byte> file;
  for (int i = 0; i < n; ++i) {
    auto enc = encode_jpeg(gradient(40 + i, 30 + (i * 7) % 20), 40 + i, 30 + (i * 7) % 20, pixels::rgb, 80);
    if (i == corrupt_at) enc.resize(enc.size() / 2);
    io::append_tfrecord(file, enc);
  }
  auto path = dir.file("jpegs.tfrecord");
  sluice_test::write_file(path, file);
  return path;
}
std::int64_t label_from_width(std::span<const std::byte> p) { return (read_jpeg_header(p).width - 40) % 5; }
}  // namespace

TEST_CASE("decode stage: batches are decoded in place, labelled, identical for 1 and 2 workers") {
  sluice_test::temp_dir dir;
  const int n = 37;
  io::tfrecord_reader r(write_jpeg_tfrecord(dir, n), {.index = io::saved_index::ignore, .label_of = label_from_width});
  const jpeg codec({.width = 20, .height = 16, .crop = crop_at::random, .resize_scale = 1.25, .random_flip = true});
  auto run = [&](std::size_t workers) {
    auto loader = sluice::from(sluice::sample::sequential(r.size())) | sluice::read(r) | sluice::decode(codec) |
                  sluice::collate({.batch = 8}) | sluice::prefetch(2, {.workers = workers, .seed = 11});
    std::vector<std::byte> all;
    std::vector<std::int64_t> labels;
    for (auto& b : loader.epoch(1)) {
      CHECK(b.sample_bytes() == codec.output_bytes());
      // The classic collate takes the decoder's shape: {n, 16, 20, 3} (HWC), not {n, bytes}.
      const auto data = b.field("data");
      REQUIRE(data.ndim() == 4);
      CHECK(data.shape()[0] == static_cast<std::int64_t>(b.size()));
      CHECK(data.shape()[1] == 16);
      CHECK(data.shape()[2] == 20);
      CHECK(data.shape()[3] == 3);
      all.insert(all.end(), b.bytes().begin(), b.bytes().end());
      labels.insert(labels.end(), b.labels().begin(), b.labels().end());
    }
    return std::pair(all, labels);
  };
  auto [one, labels] = run(1);
  REQUIRE(one.size() == n * codec.output_bytes());
  for (int i = 0; i < n; ++i) CHECK(labels[i] == i % 5);
  // Sample 4 equals a direct decode with the same context.
  std::vector<std::byte> direct(codec.output_bytes());
  codec.decode(r.record(4), direct, {.seed = 11, .epoch = 1, .id = 4, .position = 4});
  CHECK(std::equal(direct.begin(), direct.end(), one.begin() + 4 * codec.output_bytes()));
  CHECK(run(2).first == one);
}

TEST_CASE("decode stage: a corrupt record names the file and the record") {
  sluice_test::temp_dir dir;
  const auto path = write_jpeg_tfrecord(dir, 12, 9);
  io::tfrecord_reader r(path, {.index = io::saved_index::ignore});
  auto loader = sluice::from(sluice::sample::sequential(r.size())) | sluice::read(r) |
                sluice::decode(jpeg({.width = 8, .height = 8})) | sluice::collate({.batch = 4}) |
                sluice::prefetch(2, {.workers = 2});
  std::string msg;
  try {
    for (auto& b : loader.epoch(0)) (void)b;
  } catch (const sluice::error& e) {
    msg = e.what();
  }
  CHECK(msg.find(path) != std::string::npos);
  CHECK(msg.find("record 9") != std::string::npos);
  CHECK(msg.find("JPEG") != std::string::npos);
}

TEST_CASE("decode stage: the JPEG column of a dataset written by Streaming's MDSWriter decodes in a loader") {
  // tests/data/mds/plain (make_fixtures.py there): image i is (8 + i % 3) x 6, red channel i * 20
  // everywhere, green a ramp of 10 a column.
  using mds = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  io::mds_dataset<mds> d(std::string(SLUICE_TEST_DATA_DIR) + "/mds/plain");
  auto loader = sluice::from(sluice::sample::sequential(d.size())) | sluice::read(d) |
                sluice::decode<"image">(jpeg({.width = 8, .height = 6})) |
                sluice::collate({.batch = 4}, sluice::stack<"image">{}, sluice::stack<"label">{}) |
                sluice::prefetch(2, {.workers = 2});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) {
    const auto img = b.get<"image">();
    const auto label = b.get<"label">();
    REQUIRE(img.shape().size() == 4);
    CHECK(img.shape()[1] == 6);
    CHECK(img.shape()[2] == 8);
    CHECK(img.shape()[3] == 3);
    for (std::size_t k = 0; k < b.size(); ++k, ++n) {
      const std::uint64_t i = b.ids()[k];
      CHECK(label[k] == static_cast<std::int64_t>(i * 7 % 10));
      const std::uint8_t* px = img.data() + k * 6 * 8 * 3;
      CAPTURE(i);
      CHECK(std::abs(static_cast<int>(px[3 * 8 * 3 + 4 * 3]) - static_cast<int>(i * 20)) <= 12);  // red at (3, 4)
    }
  }
  CHECK(n == 10);  // the last batch holds 2 (drop_last is off by default)
}
