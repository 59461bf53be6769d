// The device JPEG decoder (stage/device_jpeg.hpp) through its host double (host_jpeg_backend):
// every line jpeg_device_decoder runs with nvJPEG up to the CUDA calls, on this machine.
//   - scan_jpeg_frame reads size, components, precision, progressive and coding from the markers,
//     and refuses what is not a JPEG with a format_error;
//   - through split_decode with the device taking every image: the batches are the host codec's
//     byte for byte when the host codec's DCT scaling is off, and within a stated bound with it on;
//   - CMYK, progressive (where the backend refuses it) and grey: refused ones counted and decoded
//     by the host, the batches the host's;
//   - a corrupt image: the device fails it, the host raises the host path's error, and skip
//     drops the same sample;
//   - a loader destroyed while the decoder holds jobs returns (ASan/TSan in CI).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/decode.hpp"
#include "sluice/stage/device_jpeg.hpp"
#include "sluice/stage/device_jpeg_host.hpp"
#include "sluice/stage/split_decode.hpp"
#include "jpeg_pictures.hpp"
#include "test_util.hpp"
#include "tj_util.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {

std::vector<std::uint8_t> noisy(int w, int h, int ch, std::uint64_t seed, std::uint64_t noise = 40) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(w) * h * ch);
  counter_rng g(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < ch; ++c)
        p[(static_cast<std::size_t>(y) * w + x) * ch + c] = static_cast<std::uint8_t>((x * (c + 1) + y * (3 - c % 3)) /
                                                                                          3 +
                                                                                      g.below(noise));
  return p;
}

// n JPEGs of mixed sizes and chroma subsamplings: gradients with `noise` levels of noise.
struct pictures : sluice_test::jpeg_pictures {
  pictures(std::size_t n, int min_side, int spread, std::uint64_t noise = 40) {
    for (std::size_t i = 0; i < n; ++i) {
      counter_rng rng(5, 0, i);
      const int w = min_side + static_cast<int>(rng.below(static_cast<std::uint64_t>(spread)));
      const int h = min_side * 3 / 4 + static_cast<int>(rng.below(static_cast<std::uint64_t>(spread)));
      const int samp = i % 3 == 0 ? TJSAMP_420 : i % 3 == 1 ? TJSAMP_422 : TJSAMP_444;
      add(sluice_test::tj_compress(noisy(w, h, 3, i, noise), w, h, TJPF_RGB, samp, 0));
    }
  }
};

constexpr geometry_options crop{.width = 56, .height = 48, .mode = fit::random_resized_crop, .random_flip = true};

struct epoch_out {
  std::vector<std::uint8_t> images;
  std::vector<std::uint64_t> ids;
};

template <class Loader>
epoch_out drain(Loader& loader, std::uint64_t epoch) {
  epoch_out o;
  for (auto& b : loader.epoch(epoch)) {
    auto img = b.template get<"jpg">();
    o.images.insert(o.images.end(), img.data(), img.data() + img.numel());
    o.ids.insert(o.ids.end(), b.ids().begin(), b.ids().end());
  }
  return o;
}

epoch_out host_epoch(const pictures& data, const jpeg& codec, on_error errors = on_error::raise) {
  auto loader = from(sample::shuffle(data.size(), {.seed = 3})) | read(data) | decode<"jpg">(codec) |
                collate({.batch = 8}, stack<"jpg">{}, stack<"cls">{}) |
                prefetch(2, {.workers = 2, .seed = 9, .errors = errors});
  return drain(loader, 1);
}

template <class Split>
auto split_loader(const pictures& data, Split split, on_error errors = on_error::raise) {
  return from(sample::shuffle(data.size(), {.seed = 3})) | read(data) |
         collate({.batch = 8}, std::move(split), stack<"cls">{}) |
         prefetch(2, {.workers = 2, .seed = 9, .errors = errors});
}

using device = jpeg_device_decoder<host_jpeg_backend>;

}  // namespace

TEST_CASE("device jpeg: scan_jpeg_frame reads the frame header from the markers") {
  const auto base = sluice_test::tj_compress(noisy(123, 77, 3, 1), 123, 77, TJPF_RGB, TJSAMP_420, 0);
  jpeg_frame f = scan_jpeg_frame(base);
  CHECK(f.width == 123);
  CHECK(f.height == 77);
  CHECK(f.components == 3);
  CHECK(f.precision == 8);
  CHECK(!f.progressive);
  CHECK(!f.arithmetic);
  CHECK(!f.lossless);
  f = scan_jpeg_frame(sluice_test::tj_compress(noisy(64, 40, 3, 2), 64, 40, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE));
  CHECK(f.progressive);
  CHECK(f.width == 64);
  f = scan_jpeg_frame(sluice_test::tj_compress(noisy(50, 30, 1, 3), 50, 30, TJPF_GRAY, TJSAMP_GRAY, 0));
  CHECK(f.components == 1);
  f = scan_jpeg_frame(sluice_test::tj_compress(noisy(40, 30, 4, 4), 40, 30, TJPF_CMYK, TJSAMP_420, 0));
  CHECK(f.components == 4);
  CHECK(f.adobe);
  // Not a JPEG, cut before the frame header, a scan first, a zero height.
  const auto text = [](std::vector<std::byte> b) {
    try {
      (void)scan_jpeg_frame(b);
    } catch (const format_error& e) {
      return std::string(e.cause());
    }
    return std::string("no error");
  };
  CHECK(text({}).find("not a JPEG") != std::string::npos);
  CHECK(text(std::vector<std::byte>(base.begin(), base.begin() + 20)).find("JPEG header") != std::string::npos);
  const auto b = [](std::initializer_list<int> v) {
    std::vector<std::byte> o;
    for (int x : v) o.push_back(static_cast<std::byte>(x));
    return o;
  };
  CHECK(text(b({0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02})).find("a scan before the frame header") != std::string::npos);
  CHECK(text(b({0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 8, 0, 0, 0, 16, 1, 1, 0x11, 0})).find("zero dimension") !=
        std::string::npos);
  CHECK(text(b({0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x40, 8})).find("longer than the data") != std::string::npos);
  // Two frame headers (nvJPEG and libjpeg might each believe another), and the Adobe segment read
  // wherever it stands before the scan (libjpeg reads it there too: an RGB-coded file says so late).
  const auto cat = [](std::vector<std::vector<std::byte>> parts) {
    std::vector<std::byte> o;
    for (const auto& p : parts) o.insert(o.end(), p.begin(), p.end());
    return o;
  };
  const auto sof = [&](int w) { return b({0xFF, 0xC0, 0x00, 0x0B, 8, 0, 16, 0, w, 1, 1, 0x11, 0}); };
  const auto soi = b({0xFF, 0xD8}), sos = b({0xFF, 0xDA, 0x00, 0x02});
  CHECK(text(cat({soi, sof(16), sof(64), sos})).find("two frame headers") != std::string::npos);
  const auto late = cat({soi, sof(16), b({0xFF, 0xEE, 0x00, 0x0E, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0}), sos});
  CHECK(scan_jpeg_frame(late).adobe);
  CHECK(scan_jpeg_frame(late).adobe_transform == 0);
  CHECK(codecs::detail::has_adobe_marker(late));
  // Every prefix of a real file: an error or the right frame, never a read past the end (ASan).
  for (std::size_t n = 0; n <= base.size(); n += 7) {
    int width = 123;
    try {
      width = scan_jpeg_frame(std::span(base).first(n)).width;
    } catch (const format_error&) {
    }
    CHECK(width == 123);
  }
}

TEST_CASE("device jpeg: the device's batches are the host codec's byte for byte without DCT scaling") {
  const pictures data(44, 60, 90);
  const jpeg codec(crop, {.dct_scaling = false});
  const auto want = host_epoch(data, codec);
  const device dev(host_jpeg_backend{}, crop);
  for (const double share : {1.0, 0.5}) {
    CAPTURE(share);
    auto split = split_decode<"jpg">(codec, dev, placement::fixed{share});
    auto loader = split_loader(data, split);
    const auto got = drain(loader, 1);
    CHECK(got.ids == want.ids);
    CHECK(got.images == want.images);
    CHECK(split.stats().fallbacks == 0);
    CHECK(split.stats().device_images > 0);
  }
  CHECK(dev.counters().decoded == dev.counters().images);
  CHECK(dev.counters().failed == 0);
}

TEST_CASE("device jpeg: with the host's DCT scaling on, the two differ by the reduced decode only, within a bound") {
  // 400-600 wide to 56x48: the host decodes at 1/2 to 1/8. Gradients with mild noise: on pure
  // noise the two differ far more (a DCT-reduced decode averages it, bilinear taps sample it).
  const pictures data(32, 400, 200, 8);
  const jpeg codec(crop);
  const auto want = host_epoch(data, codec);
  const device dev(host_jpeg_backend{}, crop);
  auto loader = split_loader(data, split_decode<"jpg">(codec, dev, placement::device_only{}));
  const auto got = drain(loader, 1);
  REQUIRE(got.images.size() == want.images.size());
  CHECK(got.ids == want.ids);
  double sum = 0;
  int worst = 0;
  for (std::size_t i = 0; i < got.images.size(); ++i) {
    const int d = std::abs(static_cast<int>(got.images[i]) - static_cast<int>(want.images[i]));
    sum += d;
    worst = std::max(worst, d);
  }
  const double mean = sum / static_cast<double>(got.images.size());
  MESSAGE("full-size decode vs DCT-scaled decode, then the same crop: mean |diff| " << mean << ", max " << worst);
  CHECK(mean < 6.0);                 // the documented bound (docs/device.md)
  CHECK(got.images != want.images);  // the bound measures a difference that exists
}

TEST_CASE("device jpeg: CMYK, progressive (refused by the backend) and corrupt images go to the host, counted") {
  pictures data(30, 60, 40);
  data.jpegs[4] = sluice_test::tj_compress(noisy(70, 50, 4, 40), 70, 50, TJPF_CMYK, TJSAMP_420, 0);
  data.jpegs[9] = sluice_test::tj_compress(noisy(80, 60, 3, 41), 80, 60, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE);
  data.jpegs[14] = sluice_test::tj_compress(noisy(90, 70, 1, 42), 90, 70, TJPF_GRAY, TJSAMP_GRAY,
                                            0);  // grey: the device takes it
  const jpeg codec(crop, {.dct_scaling = false});
  const auto want = host_epoch(data, codec);
  const device dev(host_jpeg_backend{.progressive = false}, crop);
  auto split = split_decode<"jpg">(codec, dev, placement::device_only{});
  auto loader = split_loader(data, split);
  CHECK(drain(loader, 1).images == want.images);
  CHECK(dev.counters().refused_for(device_refusal::cmyk) == 1);
  CHECK(dev.counters().refused_for(device_refusal::progressive) == 1);
  CHECK(dev.counters().decoded == data.size() - 2);
  CHECK(split.stats().fallbacks == 2);

  // A corrupt image: the device fails it, the host path's error names the file and record; skip
  // drops the same sample as the host path.
  auto& bad = data.jpegs[7];
  bad.resize(bad.size() / 2);
  const std::string host_error = [&] {
    try {
      (void)host_epoch(data, codec);
    } catch (const std::exception& e) {
      return sluice_test::nested_text(e);
    }
    return std::string();
  }();
  REQUIRE(!host_error.empty());
  CHECK(host_error.find("record 7") != std::string::npos);
  const device dev2(host_jpeg_backend{}, crop);
  std::string split_error;
  try {
    auto l = split_loader(data, split_decode<"jpg">(codec, dev2, placement::device_only{}));
    (void)drain(l, 1);
  } catch (const std::exception& e) {
    split_error = sluice_test::nested_text(e);
  }
  CHECK(split_error == host_error);
  CHECK(dev2.counters().failed >= 1);
  CHECK(!dev2.last_failure().empty());
  const auto want_skip = host_epoch(data, codec, on_error::skip);
  auto l = split_loader(data, split_decode<"jpg">(codec, dev2, placement::device_only{}), on_error::skip);
  const auto got_skip = drain(l, 1);
  CHECK(got_skip.ids == want_skip.ids);
  CHECK(got_skip.images == want_skip.images);
  CHECK(got_skip.ids.size() == data.size() - 1);
}

TEST_CASE("device jpeg: a loader destroyed while the decoder holds jobs returns, and the decoder outlives it") {
  const jpeg codec(crop, {.dct_scaling = false});
  const device dev(host_jpeg_backend{}, crop);
  for (int round = 0; round < 3; ++round) {
    const pictures data(64, 200, 200);
    auto loader = split_loader(data, split_decode<"jpg">(codec, dev, placement::device_only{}));
    auto range = loader.epoch(0);
    auto it = range.begin();
    CHECK(it != range.end());
  }  // the loader and its dataset go first; the decoder finishes or drops their jobs
  const pictures data(16, 60, 40);
  const auto want = host_epoch(data, codec);
  auto loader = split_loader(data, split_decode<"jpg">(codec, dev, placement::device_only{}));
  CHECK(drain(loader, 1).images == want.images);
}

TEST_CASE(
    "device jpeg: RGB-coded, 2-component, 12-bit and hierarchical frames are refused by reason, before any decode") {
  // Headers only (what the refusal reads): SOI, an optional APP14 "Adobe" segment, a frame header,
  // the start of a scan.
  const auto jpeg_of = [](int sof, int precision, int components, int adobe_transform) {
    std::vector<std::byte> b;
    const auto put = [&](std::initializer_list<int> v) {
      for (int x : v) b.push_back(static_cast<std::byte>(x));
    };
    put({0xFF, 0xD8});
    if (adobe_transform >= 0)
      put({0xFF, 0xEE, 0x00, 0x0E, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, adobe_transform});
    const int len = 8 + 3 * components;
    put({0xFF, sof, len >> 8, len & 0xFF, precision, 0, 32, 0, 48, components});
    for (int c = 0; c < components; ++c) put({c + 1, 0x11, 0});
    put({0xFF, 0xDA, 0x00, 0x02, 0xFF, 0xD9});  // a (bare) scan: the header ends there
    return b;
  };
  const std::vector<std::vector<std::byte>> frames = {
      jpeg_of(0xC0, 8, 3, 0),    // RGB-coded (Adobe transform 0)
      jpeg_of(0xC0, 8, 2, -1),   // two components
      jpeg_of(0xC1, 12, 3, -1),  // 12-bit
      jpeg_of(0xC5, 8, 3, -1),   // hierarchical
      jpeg_of(0xC9, 8, 3, -1),   // arithmetic
  };
  CHECK(scan_jpeg_frame(frames[0]).adobe_transform == 0);
  CHECK(scan_jpeg_frame(frames[3]).hierarchical);
  const device dev(host_jpeg_backend{}, crop);
  std::vector<device_job::item> items;
  for (const auto& f : frames) items.push_back({f, {}});
  device_job job(std::move(items), jpeg(crop).output_bytes());
  dev.run(job);
  for (std::size_t i = 0; i < frames.size(); ++i) CHECK(!job.decoded(i));
  CHECK(dev.counters().refused_for(device_refusal::colour) == 2);
  CHECK(dev.counters().refused_for(device_refusal::precision) == 1);
  CHECK(dev.counters().refused_for(device_refusal::coding) == 2);
  CHECK(dev.counters().decoded == 0);
  CHECK(dev.counters().failed == 0);
}
