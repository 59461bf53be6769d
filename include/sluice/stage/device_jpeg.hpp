// sluice/stage/device_jpeg.hpp — split_decode's device decoder for JPEG fields
// (stage/split_decode.hpp), over a backend that does the device's part.
//
// jpeg_device_decoder<Backend>(backend, geometry) takes a job of a batch's images on its own
// thread (one device serves every worker; jobs run in submission order) and, for each image:
// reads its frame header (scan_jpeg_frame: size, components, precision, progressive, coding),
// refuses what the device does not take — CMYK/YCCK, RGB-coded (Adobe transform 0) or 2
// components, other than 8-bit, arithmetic, lossless or hierarchical coding, progressive where
// the backend says its decoder refuses it, more pixels than max_pixels — and plans its transform exactly as the host codec does (plan_transform of the
// image's size, the geometry and the sample's (seed, epoch, id)), made into the fused pass's taps
// (codec/fused_resample.hpp). The backend then decodes the accepted images at full size, runs the
// fused pass and copies each result into the job's output; an image it cannot decode (corrupt,
// or refused by the library) it marks failed. Refused and failed images go back to the host
// codec, so a corrupt image fails with the host path's format_error and `skip` drops the same
// samples whichever side was asked first. Counted: counters().
//
// Backends: cuda/nvjpeg.cuh's nvjpeg_backend (nvJPEG's batched decode — the hardware engine where
// the GPU has one, the hybrid CUDA decoder otherwise — then cuda/fused_resample.cuh), and
// host_jpeg_backend below: libjpeg-turbo's full-size decode and the fused pass's host reference,
// the double that runs every line of this file on a machine without a GPU (tests, and trying
// placement policies). A backend is a type with
//   bool takes_progressive() const;
//   void run(std::span<device_jpeg_item> items) const;  // decode, resample, copy; set ok / why
//
// Host and device agree: with the host codec's DCT scaling off, host_jpeg_backend's output is the
// host codec's byte for byte (the same libjpeg-turbo decode, the same bilinear arithmetic); with it
// on, the host codec resamples a DCT-reduced decode and the two differ by the reduction
// (tests/codec/device_jpeg_test.cpp states the bound it measures). nvJPEG's own IDCT and chroma
// upsampling differ from libjpeg-turbo's by a few levels; the device test measures that.
// Threads: submit() from any thread; copies share one decoder thread; the last copy's destruction
// completes what is queued undecoded (the workers decode it) and joins the thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sluice/codec/fused_resample.hpp"
#include "sluice/codec/jpeg_frame.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/core/error.hpp"
#include "sluice/stage/split_decode.hpp"

namespace sluice {

// Why an image was left to the host.
enum class device_refusal : std::uint8_t {
  none,
  cmyk,
  precision,
  coding,
  progressive,
  too_large,
  colour,
  backend,
  count
};

inline const char* refusal_name(device_refusal r) noexcept {
  switch (r) {
    case device_refusal::none: return "none";
    case device_refusal::cmyk: return "CMYK/YCCK";
    case device_refusal::precision: return "not 8-bit";
    case device_refusal::coding: return "arithmetic, lossless or hierarchical coding";
    case device_refusal::progressive: return "progressive (the device's decoder refuses it)";
    case device_refusal::too_large: return "more pixels than max_pixels";
    case device_refusal::colour: return "not grey or YCbCr (RGB-coded, or 2 components)";
    case device_refusal::backend: return "the backend's decoder does not take it";
    case device_refusal::count: break;
  }
  return "?";
}

// One image for the backend: its bytes and frame, its fused pass (host taps, u8 output in the
// codec's layout) and where the result goes; the backend sets ok, or leaves it false with why.
struct device_jpeg_item {
  std::span<const std::byte> encoded;
  jpeg_frame frame;
  std::shared_ptr<const codecs::fused_taps> taps;
  codecs::fused_plan plan;      // over taps (host pointers)
  std::span<std::byte> output;  // the job's output for the image (plan.output_bytes())
  bool ok = false;
  bool refused = false;  // set by the backend for an image its decoder does not take (not a failure)
  std::string why;       // set by the backend on failure (its library's text)
};

template <class B>
concept jpeg_device_backend = requires(const B& b, std::span<device_jpeg_item> items) {
  { b.takes_progressive() } -> std::convertible_to<bool>;
  b.run(items);
};

struct device_jpeg_options {
  std::uint64_t max_pixels = std::uint64_t{1} << 26;  // larger images go to the host
};

// What a decoder and its copies did.
struct device_jpeg_counters {
  std::atomic<std::uint64_t> jobs{0}, images{0}, decoded{0}, failed{0};
  std::atomic<std::uint64_t> refused[static_cast<int>(device_refusal::count)]{};
  std::mutex m;
  std::string last_failure;  // the backend's text for the last image it could not decode
  [[nodiscard]] std::uint64_t refused_for(device_refusal r) const noexcept {
    return refused[static_cast<int>(r)].load(std::memory_order_relaxed);
  }
};

template <jpeg_device_backend Backend>
class jpeg_device_decoder {
 public:
  // `geometry` must be the host codec's (the same size, fit, flip and layout), RGB output.
  jpeg_device_decoder(Backend backend, codecs::geometry_options geometry, device_jpeg_options o = {})
      : impl_(std::make_shared<impl>(std::move(backend), geometry, o)) {
    codecs::detail::check_geometry_options(geometry);
    if (geometry.layout != image_layout::hwc && geometry.layout != image_layout::chw)
      throw usage_error("sluice: jpeg_device_decoder: .layout is image_layout::hwc or image_layout::chw");
  }

  void submit(std::shared_ptr<device_job> job) const { impl_->jobs.submit(std::move(job)); }
  [[nodiscard]] const device_jpeg_counters& counters() const noexcept { return impl_->counts; }
  [[nodiscard]] std::string last_failure() const {
    std::lock_guard lk(impl_->counts.m);
    return impl_->counts.last_failure;
  }
  [[nodiscard]] const Backend& backend() const noexcept { return impl_->backend; }

  // One job on the calling thread (what the decoder's thread runs): every item finished, then
  // complete(). Public for tests and for a caller with its own device thread.
  void run(device_job& job) const { impl_->execute(job); }

 private:
  struct impl {
    impl(Backend b, codecs::geometry_options g, device_jpeg_options o) : backend(std::move(b)), geo(g), opt(o) {}
    device_refusal refusal(const jpeg_frame& f) const noexcept {
      if (f.components == 4) return device_refusal::cmyk;
      if (f.components != 1 && f.components != 3) return device_refusal::colour;
      if (f.components == 3 && f.adobe && f.adobe_transform == 0) return device_refusal::colour;  // RGB-coded
      if (f.precision != 8) return device_refusal::precision;
      if (f.arithmetic || f.lossless || f.hierarchical) return device_refusal::coding;
      if (f.progressive && !backend.takes_progressive()) return device_refusal::progressive;
      if (static_cast<std::uint64_t>(f.width) * static_cast<std::uint64_t>(f.height) > opt.max_pixels)
        return device_refusal::too_large;
      return device_refusal::none;
    }
    void execute(device_job& job) {
      counts.jobs.fetch_add(1, std::memory_order_relaxed);
      counts.images.fetch_add(job.size(), std::memory_order_relaxed);
      std::vector<device_jpeg_item> items;
      std::vector<std::size_t> which;  // job index of each item
      for (std::size_t i = 0; i < job.size() && !job.cancelled(); ++i) {
        const auto& in = job.at(i);
        jpeg_frame f;
        try {
          f = scan_jpeg_frame(in.encoded);
        } catch (const format_error&) {
          job.finish_item(i, false);  // the host says what is wrong with it
          counts.failed.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        const device_refusal r = refusal(f);
        if (r != device_refusal::none) {
          counts.refused[static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed);
          job.finish_item(i, false);
          continue;
        }
        const codecs::image_transform t = codecs::plan_transform(f.width, f.height, geo, in.ctx);
        auto taps = std::make_shared<const codecs::fused_taps>(codecs::to_plan(t, f.width, f.height, geo.layout),
                                                               f.width, f.height);
        device_jpeg_item item{.encoded = in.encoded,
                              .frame = f,
                              .taps = taps,
                              .plan = taps->plan(3),
                              .output = job.output(i),
                              .ok = false,
                              .refused = false,
                              .why = {}};
        if (item.plan.output_bytes() != job.output_bytes()) {  // a geometry that is not the host codec's
          job.finish_item(i, false);
          counts.failed.fetch_add(1, std::memory_order_relaxed);
          const std::lock_guard lk(counts.m);
          counts.last_failure = "the decoder's geometry writes " + std::to_string(item.plan.output_bytes()) +
                                " bytes an image, the host codec " + std::to_string(job.output_bytes()) +
                                ": give both the same geometry (RGB)";
          continue;
        }
        items.push_back(std::move(item));
        which.push_back(i);
      }
      if (!items.empty() && !job.cancelled()) {
        try {
          backend.run(items);
        } catch (const std::exception& e) {
          for (auto& it : items) {
            it.ok = false;
            it.why = std::string("the device backend failed: ") + e.what();
          }
        }
      }
      for (std::size_t k = 0; k < items.size(); ++k) {
        job.finish_item(which[k], items[k].ok);
        if (items[k].ok) {
          counts.decoded.fetch_add(1, std::memory_order_relaxed);
        } else if (items[k].refused) {
          counts.refused[static_cast<int>(device_refusal::backend)].fetch_add(1, std::memory_order_relaxed);
        } else if (!job.cancelled()) {  // (a cancelled job's images are nobody's failure)
          counts.failed.fetch_add(1, std::memory_order_relaxed);
          if (!items[k].why.empty()) {
            std::lock_guard lk(counts.m);
            counts.last_failure = items[k].why;
          }
        }
      }
      for (std::size_t i = 0; i < job.size(); ++i)
        if (!job.decoded(i)) job.finish_item(i, false);  // cancelled before it was looked at
      job.complete();
    }

    Backend backend;
    codecs::geometry_options geo;
    device_jpeg_options opt;
    device_jpeg_counters counts;
    device_job_thread jobs{[this](device_job& j) { execute(j); }};  // last: its thread runs execute
  };
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice
