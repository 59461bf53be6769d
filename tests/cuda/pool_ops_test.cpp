// The GPU path's logic, tested on the CPU: the block pool (reuse, cap, shrink rule, fences) with a
// host backend standing in for cudaHostAlloc/cudaMalloc, and the host reference of the batch ops
// (fp16/bf16 rounding, normalize, cast with overflow count, label histogram, class std).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "sluice/core/batch_ops.hpp"
#include "sluice/core/block_pool.hpp"
#include "sluice/core/half.hpp"

namespace {

// Host memory with fences the test controls, and a ledger of every allocation.
struct ledger {
  std::map<void*, std::size_t> live;
  std::uint64_t allocations = 0, deallocations = 0, freed_while_busy = 0;
};
struct test_backend {
  struct fence_type {
    std::shared_ptr<bool> busy = std::make_shared<bool>(false);
  };
  ledger* book = nullptr;
  void* allocate(std::size_t bytes) {
    void* p = ::operator new(bytes);
    book->live[p] = bytes;
    ++book->allocations;
    return p;
  }
  void deallocate(void* p, std::size_t bytes, fence_type& f) noexcept {
    if (*f.busy) ++book->freed_while_busy;
    CHECK(book->live.at(p) == bytes);
    book->live.erase(p);
    ++book->deallocations;
    ::operator delete(p);
  }
  fence_type make_fence() { return {}; }
  void destroy_fence(fence_type&) noexcept {}
  bool fence_ready(const fence_type& f) noexcept { return !*f.busy; }
};
using test_pool = sluice::block_pool<test_backend>;

std::size_t live_bytes(const ledger& l) {
  std::size_t s = 0;
  for (auto& [p, n] : l.live) s += n;
  return s;
}

}  // namespace

TEST_CASE("block pool reuses blocks across batches: no allocation in steady state") {
  ledger book;
  test_pool pool{{&book}, {.granularity_bytes = 1024}};
  for (int batch = 0; batch < 100; ++batch) {
    auto a = pool.acquire(10000);
    auto b = pool.acquire(10000);  // two batches in flight
    CHECK(a.capacity() >= 10000);
    CHECK(a.size() == 10000);
    CHECK(a.data() != b.data());
    std::memset(a.data(), batch, a.size());
  }
  const auto s = pool.stats();
  CHECK(s.allocations == 2);
  CHECK(book.allocations == 2);
  CHECK(s.reuses == 198);
  CHECK(s.acquires == 200);
  CHECK(s.in_use_bytes == 0);
  CHECK(s.held_bytes == 2 * 10240);
  CHECK(live_bytes(book) == s.held_bytes);
}

TEST_CASE("block pool picks the smallest idle block that fits and does not waste big blocks on small requests") {
  ledger book;
  test_pool pool{{&book}, {.granularity_bytes = 1024, .max_waste = 2.0}};
  { auto big = pool.acquire(64 * 1024); auto mid = pool.acquire(16 * 1024); }
  auto m = pool.acquire(12 * 1024);  // fits mid (16K <= 2 x 12K + granule), not big
  CHECK(m.capacity() == 16 * 1024);
  auto tiny = pool.acquire(1000);  // big is far too big: a new 1K block
  CHECK(tiny.capacity() == 1024);
  CHECK(pool.stats().allocations == 3);
}

TEST_CASE("block pool cap: idle blocks are freed to make room, and an impossible request throws") {
  ledger book;
  test_pool pool{{&book}, {.cap_bytes = 100 * 1024, .granularity_bytes = 1024}};
  { auto a = pool.acquire(60 * 1024); }
  auto b = pool.acquire(25 * 1024);   // the idle 60K is too big for 25K (max_waste 2) -> new, held 85K
  CHECK(b.capacity() == 25 * 1024);
  CHECK(pool.stats().held_bytes == 85 * 1024);
  auto c = pool.acquire(50 * 1024);   // the idle 60K serves it
  CHECK(c.capacity() == 60 * 1024);
  c.reset();
  auto d = pool.acquire(70 * 1024);   // 85 + 70 > 100: the idle 60K is freed first -> 95K
  CHECK(pool.stats().held_bytes == 95 * 1024);
  CHECK(pool.stats().deallocations == 1);
  CHECK(live_bytes(book) <= 100 * 1024);
  CHECK_THROWS_AS((void)pool.acquire(6 * 1024), sluice::usage_error);  // 95K in use, 101K > cap
  try {
    (void)pool.acquire(6 * 1024);
  } catch (const sluice::usage_error& e) {
    CHECK(std::string(e.what()).find("cap") != std::string::npos);
  }
  auto e = pool.acquire(5 * 1024);   // exactly the cap
  CHECK(pool.stats().held_bytes == 100 * 1024);
  CHECK(live_bytes(book) <= 100 * 1024);
}

TEST_CASE("block pool shrinks: blocks unused for a whole epoch are freed, and held memory tracks the peak") {
  ledger book;
  test_pool pool{{&book}, {.granularity_bytes = 1024, .idle_epochs = 1, .headroom = 0.25}};
  {
    // epoch 0: a burst of 8 batches in flight
    std::vector<test_pool::lease> burst;
    for (int i = 0; i < 8; ++i) burst.push_back(pool.acquire(8192));
  }
  CHECK(pool.end_epoch() == 0);  // all 8 were used this epoch, and the peak was 8
  CHECK(pool.stats().held_bytes == 8 * 8192);
  // epoch 1: steady state with 2 in flight
  for (int i = 0; i < 50; ++i) {
    auto a = pool.acquire(8192);
    auto b = pool.acquire(8192);
  }
  const std::size_t freed = pool.end_epoch();
  // The 2 busiest blocks stay; the 6 idle ones are freed (unused all epoch, and above 1.25 x peak).
  CHECK(freed == 6 * 8192);
  CHECK(pool.stats().held_bytes == 2 * 8192);
  CHECK(live_bytes(book) == 2 * 8192);
  // epoch 2: nothing used at all -> everything idle goes
  pool.end_epoch();
  CHECK(pool.stats().held_bytes == 0);
  CHECK(book.live.empty());
}

TEST_CASE("block pool high-water rule frees idle blocks above (1 + headroom) x the epoch's peak") {
  ledger book;
  test_pool pool{{&book}, {.granularity_bytes = 1024, .idle_epochs = 0, .headroom = 0.5}};
  {
    std::vector<test_pool::lease> burst;
    for (int i = 0; i < 10; ++i) burst.push_back(pool.acquire(1024));
  }
  pool.end_epoch();  // peak 10 blocks: keeps all
  CHECK(pool.stats().blocks_held == 10);
  for (int i = 0; i < 5; ++i) {
    auto a = pool.acquire(1024);
    auto b = pool.acquire(1024);
  }
  pool.end_epoch();  // peak 2 blocks: keeps 3 (2 x 1.5)
  CHECK(pool.stats().blocks_held == 3);
}

TEST_CASE("block pool fences: busy blocks are not reused first, never freed, and reuse of one is flagged") {
  ledger book;
  test_pool pool{{&book}, {.cap_bytes = 2 * 4096, .granularity_bytes = 4096}};
  auto a = pool.acquire(4096);
  auto busy_flag = a.fence().busy;
  *busy_flag = true;  // an asynchronous copy still reads a
  a.reset();
  auto b = pool.acquire(4096);  // a is busy and there is room: a new block, not a
  CHECK_FALSE(b.pending());
  CHECK(pool.stats().allocations == 2);
  auto c = pool.acquire(4096);  // cap reached: the busy block is handed out, flagged pending
  CHECK(c.pending());
  CHECK(c.fence().busy == busy_flag);
  CHECK(pool.stats().pending_reuses == 1);
  c.reset();
  b.reset();
  CHECK(pool.trim() == 4096);  // only the ready block may be freed
  CHECK(book.freed_while_busy == 0);
  pool.end_epoch();
  pool.end_epoch();
  CHECK(pool.stats().blocks_held == 1);  // still busy: kept
  *busy_flag = false;
  CHECK(pool.trim() == 4096);
  CHECK(book.live.empty());
}

TEST_CASE("block pool with device work lagging behind: no free and re-allocate at epoch ends (steady workload)") {
  // The GPU pattern: the consumer holds at most 2 batches on the host, but each released block's
  // fence stays pending while the consumer stream's queued work (6 batches deep) still reads it.
  // The pool allocates instead of reusing a pending block while under the cap, so it needs 8
  // blocks; the epoch-end shrink must count those pending blocks as needed, or it frees them and
  // the next epoch allocates them again (cudaFree/cudaMalloc churn, a hidden device sync).
  ledger book;
  constexpr std::size_t block = 4096;
  test_pool pool{{&book}, {.cap_bytes = 8 * block, .granularity_bytes = block, .idle_epochs = 1, .headroom = 0.25}};
  std::deque<std::shared_ptr<bool>> device_queue;  // fences of work queued on the consumer stream
  const auto run_epoch = [&](std::size_t device_lag, int batches) {
    test_pool::lease held;
    for (int i = 0; i < batches; ++i) {
      auto next = pool.acquire(block);
      if (held) {  // the consumer drops the previous batch with its read still queued
        *held.fence().busy = true;
        device_queue.push_back(held.fence().busy);
        held.reset();
        while (device_queue.size() > device_lag) {
          *device_queue.front() = false;
          device_queue.pop_front();
        }
      }
      held = std::move(next);
    }
    held.reset();
    for (auto& f : device_queue) *f = false;  // consumer.synchronize() after the epoch
    device_queue.clear();
  };
  for (int epoch = 0; epoch < 3; ++epoch) {
    if (epoch > 0) CHECK(pool.end_epoch() == 0);
    run_epoch(6, 200);
  }
  auto s = pool.stats();
  CHECK(s.allocations == 8);
  CHECK(s.deallocations == 0);
  CHECK(s.held_bytes == 8 * block);
  CHECK(s.peak_in_use_bytes == 2 * block);  // what the host held; the device still read 6 more
  CHECK(s.peak_demand_bytes == 8 * block);
  // The shrink rule still returns memory once the workload needs less: no device lag -> 2 blocks.
  pool.end_epoch();
  run_epoch(0, 200);
  CHECK(pool.end_epoch() == 6 * block);
  CHECK(pool.stats().held_bytes == 2 * block);
  pool.end_epoch();  // a whole epoch unused: all go
  CHECK(book.live.empty());
  CHECK(book.freed_while_busy == 0);
}

TEST_CASE("block pool at its cap never frees a fitting block to allocate the same size again") {
  // A block whose device work finishes between the pool's look for a ready block and its eviction
  // is a block to reuse, not one to free.
  struct flip_backend : test_backend {
    std::shared_ptr<int> queries_until_ready = std::make_shared<int>(0);
    std::shared_ptr<bool> flips{};
    bool fence_ready(const fence_type& f) noexcept {
      if (*f.busy && f.busy == flips && --*queries_until_ready <= 0) *f.busy = false;
      return !*f.busy;
    }
  };
  ledger book;
  sluice::block_pool<flip_backend> pool{{{&book}}, {.cap_bytes = 2 * 4096, .granularity_bytes = 4096}};
  auto a = pool.acquire(4096);
  auto b = pool.acquire(4096);
  pool.backend().flips = a.fence().busy;
  *a.fence().busy = true;
  *pool.backend().queries_until_ready = 2;  // pending when acquire looks, ready when it evicts
  a.reset();
  auto c = pool.acquire(4096);
  CHECK(pool.stats().allocations == 2);
  CHECK(pool.stats().deallocations == 0);
  CHECK(book.freed_while_busy == 0);
}

TEST_CASE("block pool leases outlive the pool, and concurrent use keeps the books straight") {
  ledger book;
  test_pool::lease survivor;
  {
    test_pool pool{{&book}, {.granularity_bytes = 256}};
    survivor = pool.acquire(1000);
  }
  CHECK(book.live.size() == 1);
  std::memset(survivor.data(), 7, survivor.size());
  survivor.reset();
  CHECK(book.live.empty());

  sluice::block_pool<sluice::host_block_backend> pool{{}, {.cap_bytes = 64 * 4096, .granularity_bytes = 4096}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        auto l = pool.acquire(static_cast<std::size_t>(1000 + 1000 * ((t + i) % 4)));
        l.data()[0] = std::byte{1};
      }
    });
  for (auto& th : threads) th.join();
  const auto s = pool.stats();
  CHECK(s.in_use_bytes == 0);
  CHECK(s.blocks_in_use == 0);
  CHECK(s.acquires == 8000);
  CHECK(s.held_bytes <= 64 * 4096);
}

TEST_CASE("f16 and bf16 round to nearest even and overflow where IEEE says") {
  using sluice::to_bf16;
  using sluice::to_f16;
  CHECK(to_f16(1.0f).bits == 0x3c00);
  CHECK(to_f16(1.5f).bits == 0x3e00);
  CHECK(to_f16(-2.0f).bits == 0xc000);
  CHECK(to_f16(65504.0f).bits == 0x7bff);
  CHECK(to_f16(65519.0f).bits == 0x7bff);  // below the halfway point
  CHECK(to_f16(65520.0f).bits == 0x7c00);  // halfway, odd mantissa: rounds up to inf
  CHECK(to_f16(1e6f).bits == 0x7c00);
  CHECK(to_f16(-1e6f).bits == 0xfc00);
  CHECK(to_f16(std::ldexp(1.0f, -24)).bits == 0x0001);   // smallest subnormal
  CHECK(to_f16(std::ldexp(1.0f, -25)).bits == 0x0000);   // halfway to it: ties to even (0)
  CHECK(to_f16(std::ldexp(3.0f, -26)).bits == 0x0001);   // 0.75 of the smallest: up
  CHECK(to_f16(std::ldexp(1.0f, -14)).bits == 0x0400);   // smallest normal
  CHECK(to_f16(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);  // tie, even stays
  CHECK(to_f16(1.0f + 3 * std::ldexp(1.0f, -11)).bits == 0x3c02);  // tie, odd rounds up
  CHECK(to_bf16(1.0f).bits == 0x3f80);
  CHECK(to_bf16(1e6f).bits == 0x4974);
  CHECK(to_bf16(std::numeric_limits<float>::max()).bits == 0x7f80);  // rounds past the largest bf16
  CHECK(to_bf16(3.0e38f).bits == 0x7f62);
  CHECK(to_bf16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);       // tie, even stays
  CHECK(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits == 0x3f82);   // tie, odd rounds up
  // Every f16 converts back and forth exactly.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const sluice::f16 h{static_cast<std::uint16_t>(b)};
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0) continue;  // NaN payloads are not kept
    REQUIRE(to_f16(sluice::to_float(h)).bits == b);
  }
}

TEST_CASE("normalize: per-channel mean and std, channels interleaved") {
  sluice::normalize_params p{3};
  p.set(0, 10.0f, 2.0f).set(1, 20.0f, 4.0f).set(2, 0.0f, 0.5f);
  const std::vector<std::uint8_t> in = {10, 20, 1, 12, 28, 3, 255, 0, 255};
  std::vector<float> out(in.size());
  sluice::normalize(std::span<const std::uint8_t>(in), std::span<float>(out), p);
  const std::vector<float> expect = {0, 0, 2, 1, 2, 6, 122.5f, -5, 510};
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(out[i] == expect[i]);
  std::vector<sluice::f16> h(in.size());
  std::vector<sluice::bf16> b(in.size());
  sluice::normalize(std::span<const std::uint8_t>(in), std::span<sluice::f16>(h), p);
  sluice::normalize(std::span<const std::uint8_t>(in), std::span<sluice::bf16>(b), p);
  for (std::size_t i = 0; i < in.size(); ++i) {
    CHECK(h[i] == sluice::to_f16(expect[i]));
    CHECK(b[i] == sluice::to_bf16(expect[i]));
  }
  CHECK_THROWS_AS(sluice::normalize_params(0), sluice::usage_error);
  CHECK_THROWS_AS(p.set(1, 0.0f, 0.0f), sluice::usage_error);
}

TEST_CASE("cast counts values that overflow fp16 but not bf16") {
  std::vector<float> in = {1.0f, 65504.0f, 65520.0f, -70000.0f, 1e30f, std::numeric_limits<float>::infinity(), 3.0f};
  std::vector<sluice::f16> h(in.size());
  std::vector<sluice::bf16> b(in.size());
  // 65520, -70000 and 1e30 become inf in fp16; the input inf is not an overflow.
  CHECK(sluice::cast_count_overflow(std::span<const float>(in), std::span<sluice::f16>(h)) == 3);
  CHECK(sluice::cast_count_overflow(std::span<const float>(in), std::span<sluice::bf16>(b)) == 0);
  CHECK(sluice::is_inf(h[2]));
  CHECK_FALSE(sluice::is_inf(h[1]));
  CHECK(sluice::to_float(b[4]) == doctest::Approx(1e30).epsilon(0.01));
  in.push_back(std::numeric_limits<float>::max());
  b.resize(in.size());
  CHECK(sluice::cast_count_overflow(std::span<const float>(in), std::span<sluice::bf16>(b)) == 1);
}

TEST_CASE("label histogram and class-count standard deviation") {
  const std::vector<std::int64_t> labels = {0, 1, 1, 2, 2, 2, -1, 7};
  std::vector<std::uint32_t> counts(4, 99);
  CHECK(sluice::label_histogram(std::span<const std::int64_t>(labels), std::span<std::uint32_t>(counts)) == 2);
  CHECK(counts == std::vector<std::uint32_t>{1, 2, 3, 0});
  // mean 1.5, var = (2.25 + 0.25 + 2.25 + 2.25) / 4 = 1.25
  CHECK(sluice::class_count_std(counts) == doctest::Approx(std::sqrt(1.25)).epsilon(1e-12));
  const std::vector<std::uint32_t> balanced(10, 25);
  CHECK(sluice::class_count_std(balanced) == 0.0);
  CHECK(sluice::class_count_std({}) == 0.0);
}
