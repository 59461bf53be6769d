// The device's one-pass crop/resize/flip/normalise/layout (cuda/fused_resample.cuh) against its
// host reference (codec/fused_resample.hpp), bit for bit: a batch of images of different sizes,
// channel counts 1, 3 and 4, both layouts, u8 and float output, random resized crops with flips.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/codec/fused_resample.hpp"
#include "sluice/core/random.hpp"
#include "sluice/cuda/fused_resample.cuh"

namespace {

using sluice::cuda::check;
using namespace sluice::codecs;

using gpu_test::device_buffer;

template <class T>
void upload(void* d, const std::vector<T>& h) {
  check(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

}  // namespace

GPU_TEST("fused resample: a batch on the device equals the host reference bit for bit") {
  struct image {
    int w, h, c;
    std::size_t pitch;
    std::vector<std::uint8_t> px;
    fused_taps taps;
    fused_plan host_plan;
  };
  std::vector<image> images;
  sluice::counter_rng g(11);
  for (std::uint64_t id = 0; id < 24; ++id) {
    const int c = id % 3 == 0 ? 1 : id % 3 == 1 ? 3 : 4;
    const int w = 40 + static_cast<int>(g.below(600)), h = 30 + static_cast<int>(g.below(450));
    const std::size_t pitch = static_cast<std::size_t>(w) * c + (id % 2) * 13;
    std::vector<std::uint8_t> px(pitch * static_cast<std::size_t>(h));
    for (auto& v : px) v = static_cast<std::uint8_t>(g.below(256));
    const auto layout = id % 2 == 0 ? sluice::image_layout::hwc : sluice::image_layout::chw;
    const geometry_options o{.width = 224, .height = 160 + static_cast<int>(id % 3) * 32, .mode = fit::random_resized_crop,
                             .random_flip = true, .layout = layout};
    const image_transform t = plan_transform(w, h, o, {.seed = 5, .id = id});
    fused_taps taps(to_plan(t, w, h, layout), w, h);
    sluice::normalize_params norm(c);
    for (int k = 0; k < c; ++k) norm.set(k, 110.0f + 9.0f * k, 61.0f - 2.5f * k);
    const fused_plan p = taps.plan(c, id % 4 < 2 ? fused_output::u8 : fused_output::f32, norm);
    images.push_back({w, h, c, pitch, std::move(px), std::move(taps), p});
    images.back().host_plan = images.back().taps.plan(c, p.output, norm);
  }
  // Device copies: pixels, taps, outputs, and the batch's fused_image array.
  std::vector<std::unique_ptr<device_buffer>> keep;
  std::vector<sluice::cuda::fused_image> batch;
  std::vector<void*> outs;
  int max_w = 0, max_h = 0;
  for (const image& im : images) {
    auto& src = *keep.emplace_back(std::make_unique<device_buffer>(im.px.size()));
    upload(src.p, im.px);
    auto& cols = *keep.emplace_back(std::make_unique<device_buffer>(im.taps.cols().size() * sizeof(fused_tap)));
    auto& rows = *keep.emplace_back(std::make_unique<device_buffer>(im.taps.rows().size() * sizeof(fused_tap)));
    upload(cols.p, im.taps.cols());
    upload(rows.p, im.taps.rows());
    auto& out = *keep.emplace_back(std::make_unique<device_buffer>(im.host_plan.output_bytes()));
    fused_plan dp = im.host_plan;
    dp.cols = static_cast<const fused_tap*>(cols.p);
    dp.rows = static_cast<const fused_tap*>(rows.p);
    batch.push_back({static_cast<const std::uint8_t*>(src.p), im.pitch, dp, out.p});
    outs.push_back(out.p);
    max_w = std::max(max_w, dp.out_width);
    max_h = std::max(max_h, dp.out_height);
  }
  device_buffer d_batch(batch.size() * sizeof(sluice::cuda::fused_image));
  upload(d_batch.p, batch);
  sluice::cuda::fused_resample(static_cast<const sluice::cuda::fused_image*>(d_batch.p), static_cast<int>(batch.size()), max_w,
                               max_h, nullptr);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (std::size_t i = 0; i < images.size(); ++i) {
    const image& im = images[i];
    std::vector<std::byte> want(im.host_plan.output_bytes()), got(want.size());
    fused_resample_host(im.px.data(), im.w, im.h, im.pitch, im.host_plan, want);
    check(cudaMemcpy(got.data(), outs[i], got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
  }
}
