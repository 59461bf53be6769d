// nvJPEG through jpeg_device_decoder (stage/device_jpeg.hpp, cuda/nvjpeg.cuh) against the host
// codec: the same crops of ~500x375 JPEGs decoded on the device and by libjpeg-turbo (the host
// codec's DCT scaling off, so only the decoders differ), every image within the stated tolerance;
// a corrupt image and a CMYK one left to the host; and images/s of the device path against the
// host codec on every host core, printed for bench/gpu_check.sh's summary.
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/codec/jpeg.hpp"
#include "sluice/core/random.hpp"
#include "sluice/cuda/nvjpeg.cuh"
#include "sluice/stage/device_jpeg.hpp"

namespace {

using namespace sluice::codecs;

std::vector<std::byte> photo(int w, int h, std::uint64_t seed, int pf = TJPF_RGB, int samp = TJSAMP_420) {
  const int ch = tjPixelSize[pf];
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * ch);
  sluice::counter_rng g(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < ch; ++c)
        px[(static_cast<std::size_t>(y) * w + x) * ch + c] =
            static_cast<std::uint8_t>(128 + 90 * std::sin((x * (c + 1) + y * 2) * 0.02 + static_cast<double>(seed)) + g.below(12));
  tjhandle c = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  tjCompress2(c, px.data(), w, 0, h, pf, &buf, &size, samp, 90, 0);
  std::vector<std::byte> out(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
  tjFree(buf);
  tjDestroy(c);
  return out;
}

constexpr geometry_options rrc{.width = 224, .height = 224, .mode = fit::random_resized_crop, .random_flip = true};

std::shared_ptr<sluice::device_job> job_of(const std::vector<std::vector<std::byte>>& jpegs, std::size_t bytes) {
  std::vector<sluice::device_job::item> items;
  for (std::size_t i = 0; i < jpegs.size(); ++i) items.push_back({jpegs[i], {.seed = 3, .epoch = 1, .id = i}});
  return std::make_shared<sluice::device_job>(std::move(items), bytes);
}

}  // namespace

GPU_TEST("nvJPEG: the device's crops are the host codec's within the tolerance; CMYK and corrupt images go to the host") {
  std::vector<std::vector<std::byte>> jpegs;
  for (std::uint64_t i = 0; i < 64; ++i) jpegs.push_back(photo(440 + static_cast<int>(i % 5) * 30, 330 + static_cast<int>(i % 3) * 25, i));
  jpegs[10] = photo(200, 150, 99, TJPF_CMYK);
  jpegs[20].resize(jpegs[20].size() / 3);  // cut mid-scan
  const jpeg host(rrc, {.dct_scaling = false});
  const sluice::jpeg_device_decoder dev(sluice::cuda::nvjpeg_backend{}, rrc);
  MESSAGE("nvJPEG backend: %s", dev.backend().hardware() ? "hardware JPEG engine" : "CUDA decoder");
  auto job = job_of(jpegs, host.output_bytes());
  dev.run(*job);
  double worst_mean = 0;
  int worst = 0;
  std::size_t on_device = 0;
  for (std::size_t i = 0; i < jpegs.size(); ++i) {
    if (i == 10 || i == 20) {
      CHECK(!job->decoded(i));
      continue;
    }
    REQUIRE(job->decoded(i));
    ++on_device;
    std::vector<std::byte> want(host.output_bytes());
    host.decode(jpegs[i], want, job->at(i).ctx);
    const auto got = job->output(i);
    double sum = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
      const int d = std::abs(static_cast<int>(got[k]) - static_cast<int>(want[k]));
      sum += d;
      worst = std::max(worst, d);
    }
    worst_mean = std::max(worst_mean, sum / static_cast<double>(want.size()));
  }
  MESSAGE("device vs host codec, %zu images: worst per-image mean |diff| %.3f, max %d", on_device, worst_mean, worst);
  CHECK(worst_mean < 1.5);  // IDCT and chroma upsampling differ by a level or two; the pass itself is exact
  CHECK(dev.counters().refused_for(sluice::device_refusal::cmyk) == 1);
  CHECK(dev.counters().failed >= 1);
}

GPU_TEST("nvJPEG: images/s of ~500x375 JPEGs to 224x224, hardware engine and CUDA decoder, against the host codec on every host core") {
  std::vector<std::vector<std::byte>> jpegs;
  for (std::uint64_t i = 0; i < 256; ++i) jpegs.push_back(photo(500, 375, i + 1000));
  const jpeg host(rrc);  // the host codec as users run it: DCT scaling on
  using clock = std::chrono::steady_clock;
  const int rounds = 8;
  const double n = static_cast<double>(jpegs.size() * rounds);
  // The host codec on every core, the baseline of both device figures.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<std::size_t> next{0};
  auto t0 = clock::now();
  std::vector<std::thread> pool;
  for (unsigned c = 0; c < cores; ++c)
    pool.emplace_back([&] {
      std::vector<std::byte> out(host.output_bytes());
      for (std::size_t k; (k = next.fetch_add(1)) < jpegs.size() * rounds;)
        host.decode(jpegs[k % jpegs.size()], out, {.seed = 3, .id = k});
    });
  for (auto& t : pool) t.join();
  const double host_s = std::chrono::duration<double>(clock::now() - t0).count();
  MESSAGE("host_images_per_s %.0f host_cores %u", n / host_s, cores);
  for (const bool hardware : {true, false}) {
    const sluice::jpeg_device_decoder dev(sluice::cuda::nvjpeg_backend({.hardware = hardware}), rrc);
    if (hardware && !dev.backend().hardware()) {
      MESSAGE("no hardware JPEG engine on this GPU");
      continue;
    }
    dev.run(*job_of(jpegs, host.output_bytes()));  // warm: buffers, the engine
    t0 = clock::now();
    for (int r = 0; r < rounds; ++r) dev.run(*job_of(jpegs, host.output_bytes()));
    const double device_s = std::chrono::duration<double>(clock::now() - t0).count();
    MESSAGE("nvjpeg_%s_images_per_s %.0f ratio_to_host %.2f (jobs of %zu images, one device thread)",
            hardware ? "hardware" : "cuda", n / device_s, host_s / device_s, jpegs.size());
    CHECK(dev.counters().decoded == jpegs.size() * (rounds + 1));
  }
}
