// Pinned and device pools on a real device, and the to_device stage end to end: every batch the
// consumer's stream reads is the right one, with small pools that force reuse while copies and
// consumer work are still in flight.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/cuda/memory.hpp"

using sluice::cuda::check;

GPU_TEST("pinned pool: cudaHostAlloc memory is reused, capped, and shrinks at epoch ends") {
  sluice::cuda::pinned_pool pool{{}, {.cap_bytes = 64u << 20, .granularity_bytes = 1u << 20}, "pinned pool"};
  for (int i = 0; i < 20; ++i) {
    auto a = pool.acquire(8u << 20);
    auto b = pool.acquire(8u << 20);
    std::memset(a.data(), i, a.size());
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, a.data()), "cudaPointerGetAttributes");
    CHECK(attr.type == cudaMemoryTypeHost);  // page-locked, registered with the driver
  }
  CHECK(pool.stats().allocations == 2);
  CHECK(pool.stats().reuses == 38);
  bool threw = false;
  try {
    std::vector<sluice::cuda::pinned_pool::lease> too_many;
    for (int i = 0; i < 9; ++i) too_many.push_back(pool.acquire(8u << 20));
  } catch (const sluice::usage_error&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(pool.stats().held_bytes <= 64u << 20);
  pool.end_epoch();  // peak 8 blocks this epoch: keeps them (all used)
  pool.end_epoch();  // nothing used: all go
  CHECK(pool.stats().held_bytes == 0);
}

GPU_TEST("device pool: a block whose fence is pending is reused only with the wait it needs") {
  sluice::cuda::stream copy, consumer;
  const std::size_t bytes = 64u << 20;
  sluice::cuda::device_pool pool{{}, {.cap_bytes = bytes, .granularity_bytes = 1u << 20}, "device pool"};
  sluice::cuda::pinned_pool pinned{{}, {.granularity_bytes = 1u << 20}, "pinned pool"};
  auto host_a = pinned.acquire(bytes);
  auto host_b = pinned.acquire(bytes);
  std::memset(host_a.data(), 0xaa, bytes);
  std::memset(host_b.data(), 0xbb, bytes);
  {
    auto d = pool.acquire(bytes);
    check(cudaMemcpyAsync(d.data(), host_a.data(), bytes, cudaMemcpyHostToDevice, copy.get()), "H2D a");
    // The consumer reads the block back (long: 64 MiB D2H into pageable memory is not needed;
    // a pinned D2H keeps it asynchronous) after the copy.
    sluice::cuda::event copied;
    copied.record(copy.get());
    check(cudaStreamWaitEvent(consumer.get(), copied.get(), 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(host_a.data(), d.data(), bytes, cudaMemcpyDeviceToHost, consumer.get()), "D2H a");
    sluice::cuda::record(d, consumer.get());  // released while the consumer still reads it
  }
  auto d2 = pool.acquire(bytes);  // cap = one block: the same block, maybe still busy
  sluice::cuda::order_after_last_use(d2, copy.get());
  check(cudaMemcpyAsync(d2.data(), host_b.data(), bytes, cudaMemcpyHostToDevice, copy.get()), "H2D b");
  consumer.synchronize();
  copy.synchronize();
  // The consumer's read-back saw a's bytes, never b's: the second copy waited for it on the device.
  const auto* first = reinterpret_cast<const unsigned char*>(host_a.data());
  const auto* last = reinterpret_cast<const unsigned char*>(host_a.data()) + bytes - 4096;
  bool all_a = true;
  for (std::size_t i = 0; i < 4096; ++i) all_a = all_a && first[i] == 0xaa && last[i] == 0xaa;
  CHECK(all_a);
  MESSAGE("second acquire was %s", d2.pending() ? "pending (ordered on the device)" : "already free");
  CHECK(pool.stats().allocations == 1);
}
