// No heap allocation per batch after warm-up: the global operator new is replaced to count
// allocations from every thread while the steady-state part of an epoch runs.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "sluice/sluice.hpp"

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

TEST_CASE("no heap allocation per batch after warm-up") {
  mem_reader r;
  for (auto out : {sluice::dtype::u8, sluice::dtype::f32}) {
    auto loader = sluice::from(sluice::sample::shuffle(20000, {.seed = 1})) | sluice::read(r) |
                  sluice::collate({.batch = 100, .output = out}) | sluice::prefetch(3, {.workers = 2});
    std::size_t k = 0, during = 0;
    for (auto& b : loader.epoch(0)) {
      (void)b;
      if (k == 20) {  // every slot has been used by now (capacity 5)
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
    CHECK(during == 0);
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
  auto steady = [&](auto&& loader) {
    for (auto& b : loader.epoch(0)) (void)b;  // warm-up: slots grow to their high-water marks
    std::size_t k = 0, during = 0;
    for (auto& b : loader.epoch(1)) {
      (void)b;
      if (k == 5) {
        g_allocations = 0;
        g_counting = true;
      }
      if (k == 190) {
        g_counting = false;
        during = g_allocations.load();
      }
      ++k;
    }
    CHECK(k == 200);
    return during;
  };
  using namespace sluice;
  CHECK(steady(from(sample::shuffle(20000, {.seed = 2})) | read(r) |
               collate({.batch = 100}, pad<"tokens">{.mask = true}) | prefetch(3, {.workers = 2})) == 0);
  CHECK(steady(from(sample::shuffle(20000, {.seed = 2})) | read(r) |
               collate({.batch = 100}, pack<"tokens">{.length = 256}) | prefetch(3, {.workers = 2})) == 0);
  CHECK(steady(from(sample::shuffle(20000, {.seed = 2})) | read(r) |
               collate({.batch = 100}, ragged<"tokens">{}) | prefetch(3, {.workers = 2})) == 0);
}
