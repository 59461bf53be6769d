// sluice/cuda/nvjpeg.cuh — nvjpeg_backend: stage/device_jpeg.hpp's backend on a GPU. A job's
// images are decoded by nvJPEG's batched decoder to interleaved RGB in device memory — with the
// hardware JPEG engine where the GPU has one (A100, H100, H200: NVJPEG_BACKEND_HARDWARE, baseline
// single-scan JPEGs; an image it does not take is left to the host, said so), else the CUDA decoder
// (NVJPEG_BACKEND_DEFAULT, which also takes progressive JPEGs) — then cropped, resized, flipped
// and laid out by cuda/fused_resample.cuh in one kernel for the whole job, and copied back to the
// job's outputs through pinned memory. An image nvJPEG cannot decode is marked failed with
// nvJPEG's status (the host codec then decodes it, or reports it corrupt).
//
// Compile with nvcc and link sluice::nvjpeg (cmake/SluiceCuda.cmake: the toolkit's libnvjpeg, or
// PyPI's nvidia-nvjpeg). Device buffers grow to the largest job and are kept. Threads: run() is
// called by the decoder's one thread; copies of a backend share its state under a mutex.
//
//   sluice::jpeg_device_decoder dev(sluice::cuda::nvjpeg_backend{}, geometry);
//   auto split = sluice::split_decode<"jpg">(sluice::codecs::jpeg(geometry), dev, sluice::placement::balanced{});
#pragma once

#if !defined(__CUDACC__)
#error "sluice/cuda/nvjpeg.cuh needs nvcc: include it from a .cu file that links sluice::nvjpeg"
#endif

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "sluice/codec/fused_resample.hpp"
#include "sluice/cuda/fused_resample.cuh"
#include "sluice/cuda/runtime.hpp"
#include "sluice/stage/device_jpeg.hpp"

namespace sluice::cuda {

inline const char* nvjpeg_text(nvjpegStatus_t s) noexcept {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialised";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
  }
  return "unknown status";
}

inline void nvjpeg_check(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS) throw sluice::error(std::string("sluice: nvJPEG ") + what + ": " + nvjpeg_text(s));
}

struct nvjpeg_options {
  bool hardware = true;  // try the hardware JPEG engine first; false: the CUDA decoder always
  int device = 0;
};

class nvjpeg_backend {
 public:
  explicit nvjpeg_backend(nvjpeg_options o = {}) : s_(std::make_shared<state>(o)) {}

  // The hardware engine takes baseline single-scan JPEGs only; the CUDA decoder takes progressive ones.
  [[nodiscard]] bool takes_progressive() const noexcept { return !s_->hardware; }
  // Whether the hardware JPEG engine decodes (else nvJPEG's CUDA decoder).
  [[nodiscard]] bool hardware() const noexcept { return s_->hardware; }

  void run(std::span<device_jpeg_item> items) const {
    state& s = *s_;
    const std::lock_guard lock(s.m);
    check(cudaSetDevice(s.device), "cudaSetDevice");
    // Which images the decoder takes (the hardware engine says per image), their buffers' sizes.
    std::vector<std::size_t> take;
    std::size_t decoded_bytes = 0, taps = 0, out_bytes = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      device_jpeg_item& it = items[i];
      const auto* data = reinterpret_cast<const unsigned char*>(it.encoded.data());
      // nvJPEG's own reading of the size, which sizes its output: an image whose header nvJPEG
      // reads otherwise than sluice's scan (a second frame header, a crafted file) is not decoded
      // here, so nvJPEG never writes past the image's slice of the buffer.
      int comps = 0, widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
      nvjpegChromaSubsampling_t sub{};
      const nvjpegStatus_t info = nvjpegGetImageInfo(s.handle, data, it.encoded.size(), &comps, &sub, widths, heights);
      if (info != NVJPEG_STATUS_SUCCESS) {
        it.why = std::string("nvJPEG: ") + nvjpeg_text(info);
        continue;
      }
      if (widths[0] != it.frame.width || heights[0] != it.frame.height || comps != it.frame.components) {
        it.why = "nvJPEG reads " + std::to_string(widths[0]) + "x" + std::to_string(heights[0]) + " with " +
                 std::to_string(comps) + " components where the frame header says " + std::to_string(it.frame.width) +
                 "x" + std::to_string(it.frame.height) + " with " + std::to_string(it.frame.components);
        continue;
      }
      if (s.hardware) {
        int unsupported = 1;
        if (nvjpegJpegStreamParseHeader(s.handle, data, it.encoded.size(), s.stream_info) != NVJPEG_STATUS_SUCCESS ||
            nvjpegDecodeBatchedSupported(s.handle, s.stream_info, &unsupported) != NVJPEG_STATUS_SUCCESS || unsupported != 0) {
          it.refused = true;
          it.why = "nvJPEG's hardware decoder does not take this image";
          continue;
        }
      }
      take.push_back(i);
      decoded_bytes += round_up(static_cast<std::size_t>(it.frame.width) * 3 * static_cast<std::size_t>(it.frame.height));
      taps += it.taps->cols().size() + it.taps->rows().size();
      out_bytes += round_up(it.plan.output_bytes());
    }
    if (take.empty()) return;
    s.decoded.reserve(decoded_bytes);
    s.taps.reserve(taps * sizeof(codecs::fused_tap));
    s.out.reserve(out_bytes);
    s.pinned_out.reserve(out_bytes);
    s.images.reserve(take.size() * sizeof(fused_image));

    // Decode: one batched call; if nvJPEG refuses the batch, image by image, to find the bad ones.
    std::vector<const unsigned char*> data;
    std::vector<std::size_t> lengths;
    // (not a std::vector: nvcc 13's front end fails on destroying the unnamed struct nvjpegImage_t
    // through std::destroy_at)
    const std::unique_ptr<nvjpegImage_t[]> dest(new nvjpegImage_t[take.size()]());
    std::vector<std::size_t> decoded_at;
    std::size_t at = 0;
    for (std::size_t i : take) {
      const device_jpeg_item& it = items[i];
      data.push_back(reinterpret_cast<const unsigned char*>(it.encoded.data()));
      lengths.push_back(it.encoded.size());
      nvjpegImage_t& d = dest[decoded_at.size()];
      d.channel[0] = static_cast<unsigned char*>(s.decoded.p) + at;
      d.pitch[0] = static_cast<std::size_t>(it.frame.width) * 3;
      decoded_at.push_back(at);
      at += round_up(static_cast<std::size_t>(it.frame.width) * 3 * static_cast<std::size_t>(it.frame.height));
    }
    std::vector<char> ok(take.size(), 1);
    nvjpegStatus_t st = nvjpegDecodeBatchedInitialize(s.handle, s.jstate, static_cast<int>(take.size()), 1, NVJPEG_OUTPUT_RGBI);
    if (st == NVJPEG_STATUS_SUCCESS) st = nvjpegDecodeBatched(s.handle, s.jstate, data.data(), lengths.data(), dest.get(), s.stream);
    if (st != NVJPEG_STATUS_SUCCESS) {
      // Batches of one (the hardware engine has no single-image call): the bad images fail alone.
      for (std::size_t k = 0; k < take.size(); ++k) {
        nvjpegStatus_t one = nvjpegDecodeBatchedInitialize(s.handle, s.jstate, 1, 1, NVJPEG_OUTPUT_RGBI);
        if (one == NVJPEG_STATUS_SUCCESS)
          one = nvjpegDecodeBatched(s.handle, s.jstate, &data[k], &lengths[k], &dest[k], s.stream);
        if (one != NVJPEG_STATUS_SUCCESS) {
          ok[k] = 0;
          items[take[k]].why = std::string("nvJPEG: ") + nvjpeg_text(one);
        }
      }
    }
    // The fused pass over the decoded images: taps and the image table uploaded, one launch.
    std::vector<codecs::fused_tap> tap_host;
    tap_host.reserve(taps);
    std::vector<fused_image> table;
    std::vector<std::size_t> out_at;
    std::size_t o = 0;
    int max_w = 0, max_h = 0;
    for (std::size_t k = 0; k < take.size(); ++k) {
      if (ok[k] == 0) continue;
      const device_jpeg_item& it = items[take[k]];
      codecs::fused_plan p = it.plan;
      const std::size_t cols_at = tap_host.size();
      tap_host.insert(tap_host.end(), it.taps->cols().begin(), it.taps->cols().end());
      const std::size_t rows_at = tap_host.size();
      tap_host.insert(tap_host.end(), it.taps->rows().begin(), it.taps->rows().end());
      p.cols = static_cast<const codecs::fused_tap*>(s.taps.p) + cols_at;
      p.rows = static_cast<const codecs::fused_tap*>(s.taps.p) + rows_at;
      table.push_back({static_cast<const std::uint8_t*>(s.decoded.p) + decoded_at[k], dest[k].pitch[0], p,
                       static_cast<std::byte*>(s.out.p) + o});
      out_at.push_back(o);
      o += round_up(it.plan.output_bytes());
      max_w = std::max(max_w, p.out_width);
      max_h = std::max(max_h, p.out_height);
    }
    if (!table.empty()) {
      check(cudaMemcpyAsync(s.taps.p, tap_host.data(), tap_host.size() * sizeof(codecs::fused_tap), cudaMemcpyHostToDevice, s.stream),
            "cudaMemcpyAsync (taps)");
      check(cudaMemcpyAsync(s.images.p, table.data(), table.size() * sizeof(fused_image), cudaMemcpyHostToDevice, s.stream),
            "cudaMemcpyAsync (image table)");
      fused_resample(static_cast<const fused_image*>(s.images.p), static_cast<int>(table.size()), max_w, max_h, s.stream);
      check(cudaMemcpyAsync(s.pinned_out.p, s.out.p, o, cudaMemcpyDeviceToHost, s.stream), "cudaMemcpyAsync (outputs)");
    }
    check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");  // also: the host vectors above are read until here
    std::size_t t = 0;
    for (std::size_t k = 0; k < take.size(); ++k) {
      if (ok[k] == 0) continue;
      device_jpeg_item& it = items[take[k]];
      std::memcpy(it.output.data(), static_cast<const std::byte*>(s.pinned_out.p) + out_at[t++], it.plan.output_bytes());
      it.ok = true;
    }
  }

 private:
  static std::size_t round_up(std::size_t n) noexcept { return (n + 255) & ~std::size_t{255}; }

  // A buffer that grows (device or pinned host memory) and is kept.
  struct buffer {
    void* p = nullptr;
    std::size_t size = 0;
    bool pinned = false;
    explicit buffer(bool host_pinned) : pinned(host_pinned) {}
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() { release(); }
    void release() noexcept {
      if (p != nullptr) {
        if (pinned) cudaFreeHost(p);
        else cudaFree(p);
      }
      p = nullptr;
      size = 0;
    }
    void reserve(std::size_t n) {
      if (n <= size) return;
      release();
      const std::size_t want = std::max(n, std::size_t{1} << 20);
      check(pinned ? cudaHostAlloc(&p, want, cudaHostAllocDefault) : cudaMalloc(&p, want), pinned ? "cudaHostAlloc" : "cudaMalloc");
      size = want;
    }
  };

  struct state {
    explicit state(nvjpeg_options o) : device(o.device) {
      try {
        check(cudaSetDevice(device), "cudaSetDevice");
        hardware = o.hardware && nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &handle) == NVJPEG_STATUS_SUCCESS;
        if (!hardware) {
          handle = nullptr;
          nvjpeg_check(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &handle), "create");
        }
        nvjpeg_check(nvjpegJpegStateCreate(handle, &jstate), "state");
        nvjpeg_check(nvjpegJpegStreamCreate(handle, &stream_info), "stream");
        check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      } catch (...) {
        close();  // a constructor that throws runs no destructor
        throw;
      }
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() { close(); }
    void close() noexcept {
      if (stream != nullptr) cudaStreamSynchronize(stream);
      decoded.release();
      taps.release();
      out.release();
      images.release();
      pinned_out.release();
      if (stream != nullptr) cudaStreamDestroy(stream);
      if (stream_info != nullptr) nvjpegJpegStreamDestroy(stream_info);
      if (jstate != nullptr) nvjpegJpegStateDestroy(jstate);
      if (handle != nullptr) nvjpegDestroy(handle);
      stream = nullptr;
      stream_info = nullptr;
      jstate = nullptr;
      handle = nullptr;
    }
    int device = 0;
    bool hardware = false;
    nvjpegHandle_t handle = nullptr;
    nvjpegJpegState_t jstate = nullptr;
    nvjpegJpegStream_t stream_info = nullptr;
    cudaStream_t stream = nullptr;
    buffer decoded{false}, taps{false}, out{false}, images{false}, pinned_out{true};
    std::mutex m;
  };
  std::shared_ptr<state> s_;
};

}  // namespace sluice::cuda
