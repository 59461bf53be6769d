#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "sluice/core/random.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/sample/shuffle.hpp"

using namespace sluice;

namespace {
template <class S>
std::vector<std::uint64_t> order(const S& s, std::uint64_t epoch) {
  std::vector<std::uint64_t> v(s.size(epoch));
  for (std::uint64_t p = 0; p < v.size(); ++p) v[p] = s.at(epoch, p);
  return v;
}
bool is_permutation_of_n(std::vector<std::uint64_t> v, std::uint64_t n) {
  if (v.size() != n) return false;
  std::sort(v.begin(), v.end());
  for (std::uint64_t i = 0; i < n; ++i)
    if (v[i] != i) return false;
  return true;
}
}  // namespace

TEST_CASE("feistel permutation is a bijection for many sizes") {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 100ull, 1000ull, 4097ull}) {
    feistel_permutation f(n, 42);
    std::vector<std::uint64_t> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = f(i);
    CHECK(is_permutation_of_n(v, n));
  }
}

TEST_CASE("sequential sampler yields 0..n-1") {
  sample::sequential s(10);
  auto v = order(s, 3);
  std::vector<std::uint64_t> want(10);
  std::iota(want.begin(), want.end(), 0);
  CHECK(v == want);
}

TEST_CASE("shuffle: a permutation per epoch, deterministic by (seed, epoch), different across epochs and seeds") {
  sample::shuffle s(5000, {.seed = 7});
  auto e0 = order(s, 0), e0b = order(sample::shuffle(5000, {.seed = 7}), 0), e1 = order(s, 1);
  auto other = order(sample::shuffle(5000, {.seed = 8}), 0);
  CHECK(is_permutation_of_n(e0, 5000));
  CHECK(is_permutation_of_n(e1, 5000));
  CHECK(e0 == e0b);
  CHECK(e0 != e1);
  CHECK(e0 != other);
  // Mixed: the first 500 positions are not concentrated in one part of the dataset.
  std::uint64_t low = 0;
  for (int i = 0; i < 500; ++i) low += e0[i] < 2500;
  CHECK(low > 200);
  CHECK(low < 300);
  // Not close to identity: few fixed points (expected about 1).
  int fixed = 0;
  for (std::uint64_t i = 0; i < e0.size(); ++i) fixed += e0[i] == i;
  CHECK(fixed < 10);
}

TEST_CASE("block shuffle: a permutation that keeps consecutive positions inside one block") {
  for (std::uint64_t n : {1000ull, 1024ull, 999ull}) {
    sample::block_shuffle s(n, {.seed = 3, .block = 100});
    auto v = order(s, 2);
    CHECK(is_permutation_of_n(v, n));
    // positions [k*100, (k+1)*100) all come from one block of 100 consecutive ids
    for (std::uint64_t k = 0; k < n / 100; ++k) {
      std::uint64_t b = v[k * 100] / 100;
      for (std::uint64_t i = 1; i < 100; ++i) CHECK(v[k * 100 + i] / 100 == b);
    }
    CHECK(order(s, 2) != order(s, 3));
  }
}

TEST_CASE("distributed: shards are disjoint, cover the epoch, equal in size (pad and drop)") {
  const std::uint64_t n = 1003;
  for (std::uint64_t world : {1ull, 2ull, 4ull, 7ull}) {
    for (auto t : {sample::tail::pad, sample::tail::drop}) {
      std::multiset<std::uint64_t> all;
      std::size_t per_rank = 0;
      for (std::uint64_t r = 0; r < world; ++r) {
        sample::distributed d(sample::shuffle(n, {.seed = 1}), {.rank = r, .world = world, .tail = t});
        auto v = order(d, 0);
        if (r == 0) per_rank = v.size();
        CHECK(v.size() == per_rank);
        all.insert(v.begin(), v.end());
      }
      std::set<std::uint64_t> uniq(all.begin(), all.end());
      if (t == sample::tail::pad) {
        CHECK(uniq.size() == n);  // every sample seen
        CHECK(all.size() == per_rank * world);
        CHECK(all.size() - n == (world - n % world) % world);  // the documented padding
      } else {
        CHECK(all.size() == uniq.size());  // nothing repeated
        CHECK(all.size() == n - n % world);
      }
    }
  }
}

TEST_CASE("distributed: the global order is the inner order, interleaved by rank") {
  const std::uint64_t n = 100, world = 4;
  sample::shuffle inner(n, {.seed = 9});
  for (std::uint64_t r = 0; r < world; ++r) {
    sample::distributed d(inner, {.rank = r, .world = world});
    for (std::uint64_t p = 0; p < d.size(0); ++p) CHECK(d.at(0, p) == inner.at(0, r + p * world));
  }
}

TEST_CASE("distributed: resume across a change of world size loses and repeats nothing") {
  const std::uint64_t n = 1000;
  sample::shuffle inner(n, {.seed = 5});
  // World 4 consumes 37 samples per rank, then checkpoints the global position.
  std::multiset<std::uint64_t> seen;
  std::uint64_t consumed = 37, global = 0;
  for (std::uint64_t r = 0; r < 4; ++r) {
    sample::distributed d(inner, {.rank = r, .world = 4, .tail = sample::tail::drop});
    for (std::uint64_t p = 0; p < consumed; ++p) seen.insert(d.at(0, p));
    global = d.global_position(consumed);
  }
  CHECK(global == 148);
  // Resume at world 2 from the global position.
  for (std::uint64_t r = 0; r < 2; ++r) {
    sample::distributed d(inner, {.rank = r, .world = 2, .tail = sample::tail::drop, .start = global});
    for (std::uint64_t p = 0; p < d.size(0); ++p) seen.insert(d.at(0, p));
  }
  std::set<std::uint64_t> uniq(seen.begin(), seen.end());
  CHECK(uniq.size() == seen.size());  // nothing repeated
  CHECK(seen.size() == n);            // nothing lost (n - 148 is even)
}

TEST_CASE("distributed: invalid rank or world is a clear error") {
  CHECK_THROWS_AS(sample::distributed(sample::sequential(10), {.rank = 2, .world = 2}), usage_error);
  CHECK_THROWS_AS(sample::distributed(sample::sequential(10), {.rank = 0, .world = 0}), usage_error);
}
