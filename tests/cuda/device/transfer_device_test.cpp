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

// ---------------------------------------------------------------------------------------------
// The pipeline with pin() and to_device() on the device.
#include <chrono>
#include <span>
#include <thread>

#include "sluice/core/pipeline.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/stage/collate.hpp"
#include "sluice/stage/map.hpp"
#include "sluice/stage/pin.hpp"
#include "sluice/stage/prefetch.hpp"
#include "sluice/stage/to_device.hpp"

namespace {
constexpr std::size_t kSampleBytes = 4096;
unsigned char pattern(std::uint64_t id, std::size_t j) { return static_cast<unsigned char>((id * 131 + j * 7 + (j >> 8)) & 0xff); }
struct pattern_sample {
  std::uint64_t id = 0;
  std::int64_t label = 0;
  [[nodiscard]] std::size_t size_bytes() const noexcept { return kSampleBytes; }
  void write_into(std::span<std::byte> dst, const sluice::sample_context&) const {
    for (std::size_t j = 0; j < dst.size(); ++j) dst[j] = static_cast<std::byte>(pattern(id, j));
  }
};
auto make_source(std::uint64_t n) {
  return sluice::from(sluice::sample::sequential(n)) |
         sluice::map([](sluice::sample_id id) { return pattern_sample{id.value, static_cast<std::int64_t>(id.value % 7)}; });
}
}  // namespace

GPU_TEST("to_device: every batch the consumer stream reads is right, with a small device pool forcing reuse") {
  const std::uint64_t n = 64 * 200, batch = 64;
  const std::size_t batch_bytes = batch * kSampleBytes;
  sluice::cuda::stream consumer;
  // The consumer stream is slowed down before each read so that, if ordering were missing, the
  // copy stream would overwrite blocks the consumer has not read yet.
  void* scratch = nullptr;
  const std::size_t scratch_bytes = 256u << 20;
  check(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc");
  unsigned char* results = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void**>(&results), n * kSampleBytes, cudaHostAllocDefault), "cudaHostAlloc");
  // Cap = exactly the batches the ring keeps alive (depth 4 + 4 workers): a block is only ever
  // reused right after the consumer dropped it, usually with its read still queued.
  auto transfer = sluice::to_device(consumer.get(), {.cap_bytes = 8 * ((batch_bytes + 65535) / 65536 * 65536)});
  auto pinned = sluice::pin();
  auto loader = make_source(n) | sluice::collate({.batch = batch}) | pinned | transfer | sluice::prefetch(4, {.workers = 4});
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::memset(results, 0, n * kSampleBytes);
    std::uint64_t k = 0;
    for (auto& b : loader.epoch(static_cast<std::uint64_t>(epoch))) {
      REQUIRE(b.ready_event() != nullptr);
      if (k == 0) {
        cudaPointerAttributes attr{};
        check(cudaPointerGetAttributes(&attr, b.device_data()), "cudaPointerGetAttributes");
        CHECK(attr.type == cudaMemoryTypeDevice);
      }
      check(cudaMemsetAsync(scratch, static_cast<int>(k & 0xff), scratch_bytes, consumer.get()), "cudaMemsetAsync");
      check(cudaMemcpyAsync(results + b.first_position() * kSampleBytes, b.device_data(), b.size() * kSampleBytes,
                            cudaMemcpyDeviceToHost, consumer.get()),
            "cudaMemcpyAsync D2H");
      ++k;
    }  // each batch is dropped while the consumer's read of it is still queued
    consumer.synchronize();
    std::size_t bad = 0;
    for (std::uint64_t id = 0; id < n; ++id)
      for (std::size_t j = 0; j < kSampleBytes; j += 61) bad += results[id * kSampleBytes + j] != pattern(id, j);
    CHECK(bad == 0);
    CHECK(k == n / batch);
  }
  const auto st = transfer.stats();
  MESSAGE("device pool: %zu allocations, %llu reuses (%llu pending: ordered on the device), held %zu bytes",
          static_cast<std::size_t>(st.pool.allocations), static_cast<unsigned long long>(st.pool.reuses),
          static_cast<unsigned long long>(st.pool.pending_reuses), st.pool.held_bytes);
  CHECK(st.pool.allocations <= 8);
  CHECK(st.bytes_copied == 2 * n * kSampleBytes);
  CHECK(pinned.stats().bytes_in_place == 2 * n * kSampleBytes);
  check(cudaFreeHost(results), "cudaFreeHost");
  check(cudaFree(scratch), "cudaFree");
}

GPU_TEST("to_device: releasing a batch and taking the next does not wait for the consumer's stream") {
  const std::uint64_t n = 64 * 32, batch = 64;
  sluice::cuda::stream consumer;
  void* scratch = nullptr;
  const std::size_t scratch_bytes = 1u << 30;
  check(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc");
  auto loader = make_source(n) | sluice::collate({.batch = batch}) | sluice::pin() | sluice::to_device(consumer.get()) |
                sluice::prefetch(4, {.workers = 2});
  int checked = 0, consumer_still_busy = 0;
  std::uint64_t k = 0;
  for (auto& b : loader.epoch(0)) {
    (void)b;
    if (k++ % 8 != 0) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the ring fill
    for (int i = 0; i < 20; ++i)  // ~20 GiB of memset: several milliseconds of queued work
      check(cudaMemsetAsync(scratch, i, scratch_bytes, consumer.get()), "cudaMemsetAsync");
    const auto t0 = std::chrono::steady_clock::now();
    b.reset();  // the consumer's work on the batch is still queued
    ++checked;
    consumer_still_busy += cudaStreamQuery(consumer.get()) == cudaErrorNotReady ? 1 : 0;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK(ms < 2.0);
  }
  consumer.synchronize();
  CHECK(checked == 4);
  CHECK(consumer_still_busy == checked);  // release did not synchronise the consumer stream
  check(cudaFree(scratch), "cudaFree");
}
