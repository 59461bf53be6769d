// split_decode<"jpg"> (stage/split_decode.hpp): a batch's images decoded partly on the host and
// partly on a device, here the simulated device that decodes with the host codec.
//   - the batches are bit-identical to decode<"jpg"> + stack<"jpg"> (random crops and flips
//     included) for every split, worker count and batch sharing, and every image is counted once;
//   - images the device cannot decode go to the host, counted, with the same output;
//   - a corrupt image fails with the host path's error text (file, record, field) whichever side
//     it was given to, and on_error::skip drops the same samples;
//   - a device whose submit throws leaves its images to the host, counted and its text kept;
//   - destroying a loader while the device holds jobs returns and leaks nothing (ASan in CI);
//   - the balanced policy, fed by real measurements, moves towards the faster side.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/decode.hpp"
#include "sluice/stage/split_decode.hpp"
#include "jpeg_pictures.hpp"
#include "simulated_device.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;
using namespace std::chrono_literals;
using sluice_test::simulated_device;

namespace {

struct pictures : sluice_test::jpeg_pictures {
  explicit pictures(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      counter_rng rng(11, 0, i);
      const int w = 40 + static_cast<int>(rng.below(80)), h = 30 + static_cast<int>(rng.below(60));
      std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
      for (std::size_t p = 0; p < rgb.size(); ++p) rgb[p] = static_cast<std::uint8_t>((p * 7 + i * 31 + (p / 97) * 13) & 0xff);
      add(encode_jpeg(rgb, w, h, pixels::rgb, 90, TJSAMP_420));
    }
  }
};

jpeg crop_codec() { return jpeg({.width = 48, .height = 40, .mode = fit::random_resized_crop, .random_flip = true}); }

struct epoch_out {
  std::vector<std::byte> images;
  std::vector<std::int64_t> cls;
  std::vector<std::uint64_t> ids;
  std::vector<std::int64_t> shape;
};

template <class Loader>
epoch_out drain(Loader& loader, std::uint64_t epoch) {
  epoch_out o;
  for (auto& b : loader.epoch(epoch)) {
    auto img = b.template get<"jpg">();
    auto c = b.template get<"cls">();
    const auto* p = reinterpret_cast<const std::byte*>(img.data());
    o.images.insert(o.images.end(), p, p + img.numel());
    o.cls.insert(o.cls.end(), c.data(), c.data() + c.numel());
    o.ids.insert(o.ids.end(), b.ids().begin(), b.ids().end());
    o.shape.assign(img.shape().begin(), img.shape().end());
  }
  return o;
}

epoch_out reference(const pictures& data, std::uint64_t epoch, on_error errors = on_error::raise) {
  auto loader = from(sample::shuffle(data.size(), {.seed = 3})) | read(data) | decode<"jpg">(crop_codec()) |
                collate({.batch = 8}, stack<"jpg">{}, stack<"cls">{}) |
                prefetch(2, {.workers = 2, .seed = 9, .errors = errors});
  return drain(loader, epoch);
}

template <class Device, class Policy>
auto split_loader(const pictures& data, Device dev, Policy pol, std::size_t workers, bool share = true,
                  on_error errors = on_error::raise) {
  return from(sample::shuffle(data.size(), {.seed = 3})) | read(data) |
         collate({.batch = 8}, split_decode<"jpg">(crop_codec(), std::move(dev), std::move(pol)), stack<"cls">{}) |
         prefetch(2, {.workers = workers, .seed = 9, .errors = errors, .split_batches = share});
}

std::string error_text(auto&& loader) {
  try {
    for (auto& b : loader.epoch(1)) (void)b;
  } catch (const std::exception& e) {
    return sluice_test::nested_text(e);
  }
  return "";
}

// Writes zeros: a device far faster than the host codec (its output is not compared).
struct blank_codec {
  using codec_concept = codec_tag;
  [[nodiscard]] std::size_t output_bytes() const noexcept { return 48 * 40 * 3; }
  void decode(std::span<const std::byte>, std::span<std::byte> out, const sample_context&) const {
    std::memset(out.data(), 0, out.size());
  }
};

// A device that cannot take work.
struct broken_device {
  void submit(std::shared_ptr<device_job>) const { throw std::runtime_error("device lost"); }
};

}  // namespace

TEST_CASE("split_decode: the same batches as the host decoder for every split, worker count and batch sharing") {
  const pictures data(44);  // 5 full batches and one of 4
  const auto want = reference(data, 1);
  REQUIRE(want.shape == std::vector<std::int64_t>{4, 40, 48, 3});
  auto check_with = [&](auto policy, std::size_t workers, bool share) {
    CAPTURE(workers);
    CAPTURE(share);
    INFO(std::string(decltype(policy)::name));
    const simulated_device dev(crop_codec(), {.launch = 100us, .per_image = 20us});
    auto split = split_decode<"jpg">(crop_codec(), dev, policy);
    auto loader = from(sample::shuffle(data.size(), {.seed = 3})) | read(data) | collate({.batch = 8}, split, stack<"cls">{}) |
                  prefetch(2, {.workers = workers, .seed = 9, .split_batches = share});
    const auto got = drain(loader, 1);
    CHECK(got.images == want.images);
    CHECK(got.cls == want.cls);
    CHECK(got.ids == want.ids);
    const auto st = split.stats();
    CHECK(st.host_images + st.device_images == data.size());
    CHECK(st.fallbacks == 0);
    CHECK(st.device_errors == 0);
    return st;
  };
  for (const std::size_t workers : {1, 3})
    for (const bool share : {false, true}) {
      CHECK(check_with(placement::host_only{}, workers, share).device_images == 0);
      const auto all = check_with(placement::device_only{}, workers, share);
      CHECK(all.host_images == 0);
      CHECK(all.batches == 6);
      const auto part = check_with(placement::fixed{0.3}, workers, share);
      CHECK(part.device_images == 5 * 2 + 1);  // round(0.3 * 8) = 2 a batch; round(1.2) = 1 of the last
      check_with(placement::balanced{}, workers, share);
    }
}

TEST_CASE("split_decode: images the device cannot decode are decoded on the host, counted") {
  const pictures data(44);
  const auto want = reference(data, 1);
  const simulated_device dev(crop_codec(), {.launch = 50us, .per_image = 10us, .unsupported = [](std::uint64_t id) { return id % 3 == 0; }});
  auto split = split_decode<"jpg">(crop_codec(), dev, placement::device_only{});
  auto loader = from(sample::shuffle(data.size(), {.seed = 3})) | read(data) | collate({.batch = 8}, split, stack<"cls">{}) |
                prefetch(2, {.workers = 2, .seed = 9});
  const auto got = drain(loader, 1);
  CHECK(got.images == want.images);
  const auto st = split.stats();
  CHECK(st.fallbacks == 15);  // ids 0, 3, ..., 42
  CHECK(st.device_images == data.size() - 15);
}

TEST_CASE("split_decode: a corrupt image fails as on the host path, whichever side had it, and skip drops the same samples") {
  pictures data(24);
  auto& bad = data.jpegs[5];
  bad.resize(bad.size() / 3);  // cut mid-scan
  std::fill(bad.begin() + 2, bad.begin() + 40, std::byte{0x5a});  // and its header garbled
  const std::string host_error = error_text(from(sample::shuffle(data.size(), {.seed = 3})) | read(data) |
                                            decode<"jpg">(crop_codec()) |
                                            collate({.batch = 8}, stack<"jpg">{}, stack<"cls">{}) |
                                            prefetch(2, {.workers = 2, .seed = 9}));
  REQUIRE(!host_error.empty());
  CHECK(host_error.find("pictures.tar") != std::string::npos);
  CHECK(host_error.find("record 5") != std::string::npos);
  CHECK(host_error.find("field 'jpg'") != std::string::npos);
  const simulated_device dev(crop_codec(), {.launch = 50us, .per_image = 10us});
  CHECK(error_text(split_loader(data, dev, placement::device_only{}, 2)) == host_error);
  CHECK(error_text(split_loader(data, dev, placement::host_only{}, 2)) == host_error);
  CHECK(error_text(split_loader(data, dev, placement::fixed{0.5}, 1)) == host_error);

  const auto want = reference(data, 1, on_error::skip);
  CHECK(want.ids.size() == data.size() - 1);
  for (const double f : {0.0, 0.5, 1.0}) {
    auto loader = split_loader(data, dev, placement::fixed{f}, 2, true, on_error::skip);
    const auto got = drain(loader, 1);
    CHECK(got.ids == want.ids);
    CHECK(got.images == want.images);
  }
}

TEST_CASE("split_decode: a device whose submit throws leaves its images to the host, and says so") {
  const pictures data(20);
  const auto want = reference(data, 1);
  auto split = split_decode<"jpg">(crop_codec(), broken_device{}, placement::device_only{});
  auto loader = from(sample::shuffle(data.size(), {.seed = 3})) | read(data) | collate({.batch = 8}, split, stack<"cls">{}) |
                prefetch(2, {.workers = 2, .seed = 9});
  CHECK(drain(loader, 1).images == want.images);
  CHECK(split.stats().device_errors == 3);
  CHECK(split.stats().fallbacks == data.size());
  CHECK(split.last_device_error() == "device lost");
}

TEST_CASE("split_decode: destroying a loader while the device holds jobs returns, and leaks nothing") {
  // The device outlives each loader and each dataset: once a loader is gone the device must no
  // longer read the dataset's bytes (ASan in CI sees a read of the freed records otherwise).
  const simulated_device dev(crop_codec(), {.launch = 20ms, .per_image = 1ms});
  for (int round = 0; round < 3; ++round) {
    const pictures data(64);
    auto loader = split_loader(data, dev, placement::fixed{0.5}, 3);
    auto range = loader.epoch(0);
    auto it = range.begin();
    CHECK((*it).size() == 8);
  }  // each destroyed with batches in flight on the device
  CHECK(dev.jobs_run() >= 1);
}

TEST_CASE("split_decode: balanced placement, fed by real timings, gives the faster side more") {
  const pictures data(96);
  auto share_after = [&](auto device_codec, std::chrono::nanoseconds per_image) {
    placement::balanced place({.initial_fraction = 0.5});
    const simulated_device dev(device_codec, {.launch = 0ns, .per_image = per_image});
    auto loader = split_loader(data, dev, place, 1);
    for (std::uint64_t e = 0; e < 3; ++e) drain(loader, e);
    CHECK(place.batches_observed() >= 36);
    return place.fraction();
  };
  // A device image costing 20 ms is far slower than a 48x40 host decode (well under 1 ms even
  // under a sanitizer); a device that only clears its output is far faster.
  CHECK(share_after(crop_codec(), 20ms) < 0.2);
  CHECK(share_after(blank_codec{}, 0ns) > 0.8);
}
