// sluice/cuda/batch_ops.cuh — the batch operations of sluice/core/batch_ops.hpp, on the device.
//
// Compile with nvcc (a .cu file that links sluice::cuda). Every function enqueues work on the stream it is given and
// returns at once: no host synchronisation, no allocation. Scalars the operations produce (overflow count, labels
// outside the range, the class std) are written to device memory the caller owns; copy them back when needed.
//
// Results match the host reference bit for bit: normalize computes (x - mean) * inv_std as one rounded subtraction and
// one rounded multiplication (__fsub_rn/__fmul_rn: nvcc cannot fuse them), and converts with __float2half_rn /
// __float2bfloat16_rn (ties to even), which is what sluice::to_f16 / to_bf16 do on the host. class_count_std sums
// integers in double (exact) and uses the same formula; only its last rounding may differ (tests allow 1e-12 relative).
// Memory access: normalize reads 4 input bytes and writes 4 outputs per thread and step (one 16-byte float4 store for
// float, 8 bytes for f16/bf16), coalesced across the warp, four steps in flight per thread; cast reads one float4 and
// writes 8 bytes. Misaligned pointers fall back to a scalar kernel (same results).
//
//   sluice::cuda::normalize(d_pixels, d_out, n, params, stream);         // uint8 -> float
//   sluice::cuda::cast_count_overflow(d_f32, d_f16, n, d_overflow, stream);
//   sluice::cuda::label_histogram(d_labels, batch, d_counts, classes, d_outside, stream);
//   sluice::cuda::class_count_std(d_counts, classes, d_std, stream);
#pragma once

#if !defined(__CUDACC__)
#error "sluice/cuda/batch_ops.cuh needs nvcc: include it from a .cu file that links sluice::cuda"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "sluice/core/batch_ops.hpp"
#include "sluice/cuda/runtime.hpp"

namespace sluice::cuda {
namespace detail {

inline constexpr int block_threads = 256;
inline constexpr int unroll = 4;

// Enough blocks to fill the device a few times over; the kernels loop over the rest.
inline unsigned grid_for(std::size_t items_per_thread_step) {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const std::size_t wanted = (items_per_thread_step + block_threads - 1) / block_threads;
  const std::size_t cap = static_cast<std::size_t>(sms > 0 ? sms : 1) * 8;
  const std::size_t blocks = wanted < cap ? wanted : cap;
  return static_cast<unsigned>(blocks > 0 ? blocks : 1);
}

template <class Out>
__device__ __forceinline__ Out device_from_float(float v) {
  if constexpr (std::is_same_v<Out, float>) return v;
  else if constexpr (std::is_same_v<Out, f16>) return Out{__half_as_ushort(__float2half_rn(v))};
  else return Out{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}
template <class Out>
__device__ __forceinline__ std::uint32_t bits_of(Out v) {
  if constexpr (std::is_same_v<Out, float>) return __float_as_uint(v);
  else return v.bits;
}
__device__ __forceinline__ bool device_is_inf(f16 h) { return (h.bits & 0x7fffu) == 0x7c00u; }
__device__ __forceinline__ bool device_is_inf(bf16 b) { return (b.bits & 0x7fffu) == 0x7f80u; }

// Stores four consecutive outputs: one 16-byte store for float, one 8-byte store for 16-bit types.
template <class Out>
__device__ __forceinline__ void store4(Out* dst, Out a, Out b, Out c, Out d) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float4*>(dst) = make_float4(a, b, c, d);
  } else {
    uint2 w;
    w.x = bits_of(a) | (bits_of(b) << 16);
    w.y = bits_of(c) | (bits_of(d) << 16);
    *reinterpret_cast<uint2*>(dst) = w;
  }
}

template <class Out>
__global__ void __launch_bounds__(block_threads)
normalize_quads(const std::uint32_t* __restrict__ in, Out* __restrict__ out, std::size_t quads, normalize_params p) {
  __shared__ float mean[normalize_params::max_channels];
  __shared__ float inv_std[normalize_params::max_channels];
  if (threadIdx.x < normalize_params::max_channels) {
    mean[threadIdx.x] = p.mean[threadIdx.x];
    inv_std[threadIdx.x] = p.inv_std[threadIdx.x];
  }
  __syncthreads();
  const int channels = p.channels;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  // Channel of a quad's first byte: (4 * quad) % channels, advanced incrementally (no 64-bit
  // division in the loop).
  const int step = static_cast<int>((4 * (stride % static_cast<std::size_t>(channels))) % channels);
  int c0 = static_cast<int>((4 * (first % static_cast<std::size_t>(channels))) % channels);
  for (std::size_t base = first; base < quads; base += unroll * stride) {
    std::uint32_t word[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::size_t q = base + u * stride;
      word[u] = q < quads ? __ldg(in + q) : 0u;
    }
    int c = c0;
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::size_t q = base + u * stride;
      Out o[4];
      int k = c;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float x = static_cast<float>((word[u] >> (8 * b)) & 0xffu);
        o[b] = device_from_float<Out>(__fmul_rn(__fsub_rn(x, mean[k]), inv_std[k]));
        k = k + 1 == channels ? 0 : k + 1;
      }
      if (q < quads) store4(out + 4 * q, o[0], o[1], o[2], o[3]);
      c += step;
      if (c >= channels) c -= channels;
    }
    c0 = c;
  }
}

// Scalar path: the tail of the vector path, and misaligned pointers.
template <class Out>
__global__ void __launch_bounds__(block_threads)
normalize_scalar(const std::uint8_t* __restrict__ in, Out* __restrict__ out, std::size_t begin, std::size_t n,
                 normalize_params p) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = begin + static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int c = static_cast<int>(i % static_cast<std::size_t>(p.channels));
    out[i] = device_from_float<Out>(__fmul_rn(__fsub_rn(static_cast<float>(in[i]), p.mean[c]), p.inv_std[c]));
  }
}

__device__ __forceinline__ unsigned warp_sum(unsigned v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

template <class Out>
__global__ void __launch_bounds__(block_threads)
cast_quads(const float4* __restrict__ in, Out* __restrict__ out, std::size_t quads, const float* __restrict__ in_scalar,
           std::size_t n, unsigned long long* __restrict__ overflowed) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned count = 0;
  for (std::size_t base = first; base < quads; base += unroll * stride) {
    float4 v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::size_t q = base + u * stride;
      v[u] = q < quads ? __ldg(in + q) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::size_t q = base + u * stride;
      const float x[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      Out o[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        o[b] = device_from_float<Out>(x[b]);
        count += (q < quads && device_is_inf(o[b]) && isfinite(x[b])) ? 1u : 0u;
      }
      if (q < quads) store4(out + 4 * q, o[0], o[1], o[2], o[3]);
    }
  }
  // The scalar rest (n not a multiple of 4, or everything when misaligned: quads == 0).
  for (std::size_t i = 4 * quads + first; i < n; i += stride) {
    const Out o = device_from_float<Out>(in_scalar[i]);
    out[i] = o;
    count += (device_is_inf(o) && isfinite(in_scalar[i])) ? 1u : 0u;
  }
  count = warp_sum(count);
  if ((threadIdx.x & 31u) == 0 && count != 0) atomicAdd(overflowed, static_cast<unsigned long long>(count));
}

template <class Label>
__global__ void __launch_bounds__(block_threads)
histogram_kernel(const Label* __restrict__ labels, std::size_t n, std::uint32_t* __restrict__ counts,
                 std::size_t classes, unsigned long long* __restrict__ outside) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned missed = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const Label l = labels[i];
    if (l >= 0 && static_cast<unsigned long long>(l) < classes) atomicAdd(counts + l, 1u);
    else ++missed;
  }
  missed = warp_sum(missed);
  if ((threadIdx.x & 31u) == 0 && missed != 0 && outside != nullptr)
    atomicAdd(outside, static_cast<unsigned long long>(missed));
}

// One block: sums and sums of squares in double (exact for integer counts), then the same formula
// as the host reference, with each operation rounded on its own.
template <int Threads>
__global__ void __launch_bounds__(Threads)
class_std_kernel(const std::uint32_t* __restrict__ counts, std::size_t classes, double* __restrict__ result) {
  __shared__ double sum[Threads];
  __shared__ double sum_sq[Threads];
  double s = 0, q = 0;
  for (std::size_t i = threadIdx.x; i < classes; i += Threads) {
    const double c = counts[i];
    s += c;
    q = __dadd_rn(q, __dmul_rn(c, c));
  }
  sum[threadIdx.x] = s;
  sum_sq[threadIdx.x] = q;
  __syncthreads();
  for (int half = Threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sum[threadIdx.x] += sum[threadIdx.x + half];
      sum_sq[threadIdx.x] += sum_sq[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (classes == 0) {
      *result = 0.0;
      return;
    }
    const double k = static_cast<double>(classes);
    const double mean = __ddiv_rn(sum[0], k);
    const double var = __dsub_rn(__ddiv_rn(sum_sq[0], k), __dmul_rn(mean, mean));
    *result = var > 0 ? sqrt(var) : 0.0;
  }
}

inline bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace detail

// out[i] = (in[i] - mean[c]) * inv_std[c], c = i % p.channels. Out: float, sluice::f16, sluice::bf16.
template <class Out>
void normalize(const std::uint8_t* in, Out* out, std::size_t n, const normalize_params& p, cudaStream_t stream) {
  static_assert(sluice::detail::is_batch_float<Out>, "sluice::cuda::normalize: output is float, sluice::f16 or sluice::bf16");
  if (n == 0) return;
  const bool vector = detail::aligned(in, 4) && detail::aligned(out, 4 * sizeof(Out));
  const std::size_t quads = vector ? n / 4 : 0;
  if (quads > 0) {
    const unsigned grid = detail::grid_for((quads + detail::unroll - 1) / detail::unroll);
    detail::normalize_quads<Out><<<grid, detail::block_threads, 0, stream>>>(
        reinterpret_cast<const std::uint32_t*>(in), out, quads, p);
    check(cudaGetLastError(), "normalize_quads<<<>>>");
  }
  if (4 * quads < n) {
    const unsigned grid = detail::grid_for(n - 4 * quads);
    detail::normalize_scalar<Out><<<grid, detail::block_threads, 0, stream>>>(in, out, 4 * quads, n, p);
    check(cudaGetLastError(), "normalize_scalar<<<>>>");
  }
}

// float -> f16/bf16; *overflowed (device memory) is set to the number of finite inputs that
// became +-inf.
template <class Out>
void cast_count_overflow(const float* in, Out* out, std::size_t n, unsigned long long* overflowed, cudaStream_t stream) {
  static_assert(std::is_same_v<Out, f16> || std::is_same_v<Out, bf16>,
                "sluice::cuda::cast_count_overflow: output is sluice::f16 or sluice::bf16");
  check(cudaMemsetAsync(overflowed, 0, sizeof(unsigned long long), stream), "cudaMemsetAsync");
  if (n == 0) return;
  const bool vector = detail::aligned(in, 16) && detail::aligned(out, 4 * sizeof(Out));
  const std::size_t quads = vector ? n / 4 : 0;
  const std::size_t work = quads > 0 ? (quads + detail::unroll - 1) / detail::unroll : n;
  detail::cast_quads<Out><<<detail::grid_for(work), detail::block_threads, 0, stream>>>(
      reinterpret_cast<const float4*>(in), out, quads, in, n, overflowed);
  check(cudaGetLastError(), "cast_quads<<<>>>");
}

// counts[0, classes) = histogram of labels; *outside (device memory, may be null) = labels outside.
template <class Label>
void label_histogram(const Label* labels, std::size_t n, std::uint32_t* counts, std::size_t classes,
                     unsigned long long* outside, cudaStream_t stream) {
  static_assert(std::is_integral_v<Label>, "sluice::cuda::label_histogram: labels are integers");
  check(cudaMemsetAsync(counts, 0, classes * sizeof(std::uint32_t), stream), "cudaMemsetAsync");
  if (outside != nullptr) check(cudaMemsetAsync(outside, 0, sizeof(unsigned long long), stream), "cudaMemsetAsync");
  if (n == 0) return;
  detail::histogram_kernel<Label><<<detail::grid_for(n), detail::block_threads, 0, stream>>>(labels, n, counts, classes,
                                                                                            outside);
  check(cudaGetLastError(), "histogram_kernel<<<>>>");
}

// *result (device memory) = population standard deviation of counts[0, classes).
inline void class_count_std(const std::uint32_t* counts, std::size_t classes, double* result, cudaStream_t stream) {
  detail::class_std_kernel<detail::block_threads><<<1, detail::block_threads, 0, stream>>>(counts, classes, result);
  check(cudaGetLastError(), "class_std_kernel<<<>>>");
}

}  // namespace sluice::cuda
