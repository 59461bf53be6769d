// sluice/cuda/memory.hpp — pinned host memory and device memory pools (block_pool backends).
//
// Host-only (g++ compiles it; link sluice::cuda). Both pools are sluice::block_pool — reuse, a cap in bytes, and the
// epoch shrink rule are described and tested there with host memory standing in (docs/device.md). Here each block also
// owns a CUDA event, its fence:
//   - pinned_pool: the copy engine reads a pinned block asynchronously. Record the block's fence on the copy stream
//     right after the cudaMemcpyAsync, then drop the lease; a worker that gets the block back while the copy is still
//     running waits on the host (wait_before_write) before writing into it — the only wait, and only when the pool has
//     nothing idle.
//   - device_pool: the trainer's kernels read a device block asynchronously. Record the fence on the consumer's stream
//     when the batch is released; the next copy into the block is ordered after it on the device (cudaStreamWaitEvent),
//     with no host synchronisation.
// Freeing a block waits for its fence first, so memory is never freed under a running copy or kernel; the pools only
// free blocks whose fence is complete, except in their destructor.
//
//   sluice::cuda::pinned_pool pinned{{}, {.cap_bytes = 1ull << 30}, "pinned pool"};
//   auto host = pinned.acquire(bytes);
//   sluice::cuda::wait_before_write(host);  fill(host.data());   // host waits only if the block is busy
//   cudaMemcpyAsync(dev, host.data(), bytes, cudaMemcpyHostToDevice, copy_stream);
//   sluice::cuda::record(host, copy_stream);           // then drop `host`
#pragma once

#include "sluice/core/block_pool.hpp"
#include "sluice/core/config.hpp"
#include "sluice/cuda/runtime.hpp"

#if SLUICE_HAS_CUDART()

namespace sluice::cuda {

namespace detail {
struct event_fence {
  using fence_type = cudaEvent_t;
  fence_type make_fence() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void destroy_fence(fence_type& e) noexcept {
    if (e != nullptr) (void)cudaEventDestroy(e);
    e = nullptr;
  }
  bool fence_ready(const fence_type& e) noexcept {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return true;
    if (r != cudaErrorNotReady) (void)cudaGetLastError();  // a failed query: treat as busy, keep the block
    return false;
  }
};
}  // namespace detail

// Page-locked host memory, portable across devices (the copy engine reads it directly).
struct pinned_backend : detail::event_fence {
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    return p;
  }
  void deallocate(void* p, std::size_t, fence_type& e) noexcept {
    if (e != nullptr) (void)cudaEventSynchronize(e);
    (void)cudaFreeHost(p);
  }
};

// Device memory on the device that is current when the pool allocates.
struct device_backend : detail::event_fence {
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void deallocate(void* p, std::size_t, fence_type& e) noexcept {
    if (e != nullptr) (void)cudaEventSynchronize(e);
    (void)cudaFree(p);
  }
};

using pinned_pool = block_pool<pinned_backend>;
using device_pool = block_pool<device_backend>;

// Marks asynchronous work queued on `stream` as the block's last use.
template <class Backend>
void record(const pool_lease<Backend>& lease, cudaStream_t stream) {
  check(cudaEventRecord(lease.fence(), stream), "cudaEventRecord");
}

// Before the host writes into a block the pool handed out while its last user may still run.
template <class Backend>
void wait_before_write(const pool_lease<Backend>& lease) {
  if (lease.pending()) check(cudaEventSynchronize(lease.fence()), "cudaEventSynchronize");
}

// Before `stream` writes into a block: orders the write after the block's last use, on the device.
template <class Backend>
void order_after_last_use(const pool_lease<Backend>& lease, cudaStream_t stream) {
  if (lease.pending()) check(cudaStreamWaitEvent(stream, lease.fence(), 0), "cudaStreamWaitEvent");
}

}  // namespace sluice::cuda

#endif
