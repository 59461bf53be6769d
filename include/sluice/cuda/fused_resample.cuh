// sluice/cuda/fused_resample.cuh — codec/fused_resample.hpp's one-pass crop, resize, flip,
// normalise and layout over a batch of decoded images on the device: one thread an output pixel,
// one grid plane (blockIdx.z) an image. Each image's plan must point at device copies of its taps
// (fused_taps::cols()/rows() uploaded), its source at device memory. Enqueues on `stream` and
// returns; no allocation, no synchronisation. The output equals fused_resample_host's bit for bit
// (the same function per pixel; the float path rounds its subtraction and multiplication
// separately). Compile with nvcc (a .cu file that links sluice::cuda).
//
//   sluice::cuda::fused_image im{d_rgb, pitch, plan_with_device_taps, d_out};   // per image, in device memory
//   sluice::cuda::fused_resample(d_images, n, max_out_w, max_out_h, stream);
#pragma once

#if !defined(__CUDACC__)
#error "sluice/cuda/fused_resample.cuh needs nvcc: include it from a .cu file that links sluice::cuda"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sluice/codec/fused_resample.hpp"
#include "sluice/cuda/runtime.hpp"

namespace sluice::cuda {

// One image of a batch: its decoded pixels (rows `pitch` bytes apart, plan.channels interleaved),
// its plan (taps in device memory) and where its output goes.
struct fused_image {
  const std::uint8_t* src = nullptr;
  std::size_t pitch = 0;
  codecs::fused_plan plan{};
  void* out = nullptr;
};

namespace detail {
inline constexpr int fused_block_x = 32, fused_block_y = 8;

__global__ void __launch_bounds__(fused_block_x * fused_block_y)
fused_resample_kernel(const fused_image* __restrict__ images) {
  const fused_image& im = images[blockIdx.z];
  const int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= im.plan.out_width || y >= im.plan.out_height) return;
  codecs::fused_pixel(im.src, im.pitch, im.plan, x, y, im.out);
}
}  // namespace detail

// Runs the pass for images[0, n) (device memory); max_w × max_h covers every image's output.
inline void fused_resample(const fused_image* images, int n, int max_w, int max_h, cudaStream_t stream) {
  if (n <= 0) return;
  if (n > 65535) throw usage_error("sluice: cuda::fused_resample: at most 65535 images a launch");
  const dim3 block(detail::fused_block_x, detail::fused_block_y);
  const dim3 grid(static_cast<unsigned>((max_w + detail::fused_block_x - 1) / detail::fused_block_x),
                  static_cast<unsigned>((max_h + detail::fused_block_y - 1) / detail::fused_block_y), static_cast<unsigned>(n));
  detail::fused_resample_kernel<<<grid, block, 0, stream>>>(images);
  check(cudaGetLastError(), "fused_resample launch");
}

}  // namespace sluice::cuda
