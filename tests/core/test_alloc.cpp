// No heap allocation per batch after warm-up: the global operator new is replaced to count
// allocations from every thread while the steady-state part of an epoch runs.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "sluice/policy/cache_disk.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<std::size_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {
struct mem_reader {
  using reader_concept = sluice::reader_tag;
  std::vector<std::byte> data = std::vector<std::byte>(20000 * 64, std::byte{7});
  std::size_t size() const { return 20000; }
  std::span<const std::byte> record(std::size_t i) const { return {data.data() + i * 64, 64}; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(i % 10); }
  std::string_view path() const { return "memory"; }
};
}  // namespace

namespace {
// Warm-up is a whole epoch and then a pause: each worker thread reserves its scratch when it first
// runs, and on a loaded machine a worker can first run after its peer has delivered many batches
// (the counted window used to start at batch 20 of epoch 0, and failed about one run in three
// here with the two allocations of a late worker's scratch). The pause lets a late thread reach
// its wait before counting starts. Counts allocations while batches 20..180 of epoch 1 are
// delivered.
template <class Loader>
std::size_t steady_epoch_allocations(Loader& loader) {
  for (auto& b : loader.epoch(0)) (void)b;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::size_t k = 0, during = 0;
  for (auto& b : loader.epoch(1)) {
    (void)b;
    if (k == 20) {
      g_allocations = 0;
      g_counting = true;
    }
    if (k == 180) {
      g_counting = false;
      during = g_allocations.load();
    }
    ++k;
  }
  CHECK(k == 200);
  return during;
}
}  // namespace

TEST_CASE("no heap allocation per batch after warm-up") {
  mem_reader r;
  for (auto out : {sluice::dtype::u8, sluice::dtype::f32}) {
    auto loader = sluice::from(sluice::sample::shuffle(20000, {.seed = 1})) | sluice::read(r) |
                  sluice::collate({.batch = 100, .output = out}) | sluice::prefetch(3, {.workers = 2});
    CHECK(steady_epoch_allocations(loader) == 0);
  }
}

namespace {
// Token documents of 1..64 tokens (lengths from a fixed-seed generator): every batch has its own
// longest sequence and its own token count.
using tok_schema = sluice::schema<sluice::field<"tokens", std::uint32_t, sluice::variable>>;
struct doc_reader {
  using reader_concept = sluice::reader_tag;
  std::vector<std::uint32_t> tokens;
  std::vector<std::size_t> offsets{0};
  doc_reader() {
    sluice::counter_rng rng(5);
    for (std::size_t d = 0; d < 20000; ++d) {
      const std::size_t n = 1 + rng.below(64);
      for (std::size_t j = 0; j < n; ++j) tokens.push_back(static_cast<std::uint32_t>(d + j));
      offsets.push_back(tokens.size());
    }
  }
  std::size_t size() const { return offsets.size() - 1; }
  std::string_view path() const { return "docs"; }
  sluice::fields_sample<tok_schema> fields(std::size_t i) const {
    sluice::fields_sample<tok_schema> s{.id = i, .origin = path()};
    s.set<"tokens">(std::span<const std::uint32_t>(tokens.data() + offsets[i], offsets[i + 1] - offsets[i]));
    return s;
  }
};
}  // namespace

TEST_CASE("no heap allocation per batch after warm-up, with variable-length fields") {
  doc_reader r;
  // Warm-up (epoch 0): slots grow to their high-water marks.
  auto steady = [&](auto&& loader) { return steady_epoch_allocations(loader); };
  using namespace sluice;
  CHECK(steady(from(sample::shuffle(20000, {.seed = 2})) | read(r) |
               collate({.batch = 100}, pad<"tokens">{.mask = true}) | prefetch(3, {.workers = 2})) == 0);
  CHECK(steady(from(sample::shuffle(20000, {.seed = 2})) | read(r) |
               collate({.batch = 100}, pack<"tokens">{.length = 256}) | prefetch(3, {.workers = 2})) == 0);
  CHECK(steady(from(sample::shuffle(20000, {.seed = 2})) | read(r) |
               collate({.batch = 100}, ragged<"tokens">{}) | prefetch(3, {.workers = 2})) == 0);
}

namespace {
template <class Tier>
std::size_t cached_steady_allocations(const mem_reader& r, Tier tier) {
  auto loader = sluice::from(sluice::sample::shuffle(20000, {.seed = 3})) | sluice::read(r) | sluice::cache(tier) |
                sluice::collate({.batch = 100}) | sluice::prefetch(3, {.workers = 2});
  return steady_epoch_allocations(loader);
}
}  // namespace

// README ("What it guarantees") states where the no-allocation rule holds for the cache stage and
// where it does not; these cases pin both halves, so a change to either shows up here.
TEST_CASE("cache stage after warm-up: minio and an LRU that holds everything allocate nothing") {
  mem_reader r;  // 20,000 records of 64 bytes
  const std::uint64_t data_bytes = 20000 * 64;
  // minio filled to half the data in epoch 0: hits hand out views, misses it cannot admit pass through.
  CHECK(cached_steady_allocations(r, sluice::tier::minio{data_bytes / 2}) == 0);
  // An LRU four times the data (so no shard overflows): every lookup hits.
  CHECK(cached_steady_allocations(r, sluice::tier::lru{4 * data_bytes}) == 0);
}

TEST_CASE("cache stage after warm-up: an evicting memory tier allocates per admitted miss, the disk tier per hit") {
  mem_reader r;
  const std::uint64_t data_bytes = 20000 * 64;
  // An LRU half the data size admits every miss: a buffer for the bytes and the index's nodes.
  const std::size_t lru = cached_steady_allocations(r, sluice::tier::lru{data_bytes / 2});
  // The disk tier reads each hit into a fresh buffer (the entry's pin), and indexes each insert.
  sluice_test::temp_dir dir;
  const std::size_t disk =
      cached_steady_allocations(r, sluice::tier::disk{{.path = dir.file("c"), .bytes = 4 * data_bytes, .chunk = data_bytes}});
  MESSAGE("allocations over 160 batches of 100: lru (half the data) " << lru << ", disk " << disk);
  CHECK(lru > 0);
  CHECK(disk > 0);
}
