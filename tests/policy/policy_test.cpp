// Tests for policies: cache tiers and the cache stage (and, below, prefetch-depth and worker
// controllers driven by synthetic signals).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/random.hpp"
#include "sluice/policy/cache.hpp"
#include "sluice/policy/cache_disk.hpp"
#include "sluice/stage/cache.hpp"
#include "test_util.hpp"

namespace {
// Bytes of item `key`: a pattern derived from the key, so any mix-up is visible.
std::vector<std::byte> item_bytes(std::uint64_t key, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(sluice::splitmix64(key * 131 + i) & 0xff);
  return v;
}
bool holds_item(std::span<const std::byte> b, std::uint64_t key, std::size_t n) {
  auto want = item_bytes(key, n);
  return b.size() == n && std::memcmp(b.data(), want.data(), n) == 0;
}
template <class Tier>
double steady_hit_rate_under_permutations(Tier t, std::uint64_t n, int epochs) {
  std::uint64_t hits_after_first = 0, lookups_after_first = 0;
  for (int e = 0; e < epochs; ++e) {
    sluice::feistel_permutation perm(n, sluice::mix_keys(7, static_cast<std::uint64_t>(e)));
    for (std::uint64_t p = 0; p < n; ++p) {
      const auto key = perm(p);
      auto r = t.lookup(key);
      if (e > 0) {
        ++lookups_after_first;
        hits_after_first += r.hit;
      }
      if (!r.hit) sluice::cache_insert_copy(t, key, item_bytes(key, 16));
    }
  }
  return static_cast<double>(hits_after_first) / static_cast<double>(lookups_after_first);
}
}  // namespace

static_assert(sluice::cache_tier<sluice::tier::none>);
static_assert(sluice::cache_tier<sluice::tier::lru>);
static_assert(sluice::cache_tier<sluice::tier::minio>);
static_assert(sluice::cache_tier<sluice::tier::weighted>);
static_assert(sluice::cache_tier<sluice::tier::disk>);
static_assert(sluice::cache_tier<sluice::tiered<sluice::tier::lru, sluice::tier::disk>>);
static_assert(sluice::sample_stage<sluice::cache_stage<sluice::tier::lru>>);

TEST_CASE("lru: evicts the least recently used entry and counts it") {
  sluice::tier::lru t(3 * 100, /*shards=*/1);
  for (std::uint64_t k = 0; k < 3; ++k) CHECK(sluice::cache_insert_copy(t, k, item_bytes(k, 100)).hit);
  CHECK(t.lookup(0).hit);  // 0 is now most recent; 1 is the LRU
  CHECK(sluice::cache_insert_copy(t, 3, item_bytes(3, 100)).hit);
  CHECK_FALSE(t.lookup(1).hit);
  CHECK(t.lookup(0).hit);
  CHECK(t.lookup(2).hit);
  CHECK(holds_item(t.lookup(3).bytes, 3, 100));
  auto s = t.stats();
  CHECK(s.evictions == 1);
  CHECK(s.bytes == 300);
  CHECK(s.entries == 3);
  CHECK(s.hits == 4);
  CHECK(s.misses == 1);
  CHECK_FALSE(sluice::cache_insert_copy(t, 9, item_bytes(9, 301)).hit);  // larger than the cache
  CHECK(t.stats().rejected == 1);
}

TEST_CASE("lru: a view handed out stays valid after its entry is evicted (pinned)") {
  sluice::tier::lru t(2 * 64, 1);
  sluice::cache_insert_copy(t, 1, item_bytes(1, 64));
  auto held = t.lookup(1);
  REQUIRE(held.hit);
  for (std::uint64_t k = 10; k < 20; ++k) sluice::cache_insert_copy(t, k, item_bytes(k, 64));
  CHECK_FALSE(t.lookup(1).hit);              // evicted from the cache ...
  CHECK(holds_item(held.bytes, 1, 64));      // ... but the reader's bytes are intact (ASan checks)
}

TEST_CASE("minio: fills once, never evicts, hit rate under random permutations = capacity share") {
  sluice::tier::minio t(3 * 10, 1);
  for (std::uint64_t k = 0; k < 5; ++k) sluice::cache_insert_copy(t, k, item_bytes(k, 10));
  CHECK(t.stats().entries == 3);
  CHECK(t.stats().rejected == 2);
  CHECK(t.stats().evictions == 0);
  CHECK(holds_item(t.lookup(2).bytes, 2, 10));
  CHECK_FALSE(t.lookup(4).hit);

  const std::uint64_t n = 20000;
  const double minio_rate = steady_hit_rate_under_permutations(sluice::tier::minio(n / 2 * 16), n, 4);
  const double lru_rate = steady_hit_rate_under_permutations(sluice::tier::lru(n / 2 * 16), n, 4);
  CHECK(minio_rate == doctest::Approx(0.5).epsilon(0.002));
  CHECK(lru_rate < minio_rate);  // LRU thrashes under permutations
}

TEST_CASE("weighted: keeps the items with the most expected hits, no churn among equals") {
  std::vector<double> p{0.1, 0.5, 0.2, 0.9, 0.2, 0.2};
  sluice::tier::weighted t(3 * 10, p, 1);
  for (std::uint64_t k = 0; k < p.size(); ++k) sluice::cache_insert_copy(t, k, item_bytes(k, 10));
  // Residents: 1 (0.5), 3 (0.9), and the first 0.2 that fit (2); 4 and 5 tie with 2 and stay out.
  CHECK(t.lookup(1).hit);
  CHECK(t.lookup(3).hit);
  CHECK(t.lookup(2).hit);
  CHECK_FALSE(t.lookup(0).hit);
  CHECK_FALSE(t.lookup(4).hit);
  CHECK_FALSE(t.lookup(5).hit);
  CHECK(t.stats().evictions == 1);  // 0 was admitted while there was room, then displaced
  // An unknown id (probability 0) is never admitted.
  CHECK_FALSE(sluice::cache_insert_copy(t, 99, item_bytes(99, 10)).hit);
  // Expected hits per byte: a larger item of the same probability ranks lower.
  sluice::tier::weighted u(100, std::vector<double>{0.5, 0.5}, 1);
  CHECK(sluice::cache_insert_copy(u, 0, item_bytes(0, 80)).hit);
  CHECK(sluice::cache_insert_copy(u, 1, item_bytes(1, 40)).hit);  // displaces the larger one
  CHECK_FALSE(u.lookup(0).hit);
}

TEST_CASE("weighted: new probabilities re-rank residents, better items then displace them") {
  sluice::tier::weighted t(2 * 10, std::vector<double>{0.9, 0.8, 0.1, 0.1}, 1);
  for (std::uint64_t k = 0; k < 4; ++k) sluice::cache_insert_copy(t, k, item_bytes(k, 10));
  CHECK(t.lookup(0).hit);
  CHECK(t.lookup(1).hit);
  CHECK_FALSE(t.lookup(2).hit);
  t.set_probabilities({0.05, 0.8, 0.1, 0.7});  // the schedule moved: 0 is now rare, 3 common
  CHECK(sluice::cache_insert_copy(t, 3, item_bytes(3, 10)).hit);  // displaces 0, the new lowest
  CHECK_FALSE(t.lookup(0).hit);
  CHECK(t.lookup(1).hit);
  CHECK(holds_item(t.lookup(3).bytes, 3, 10));
}

TEST_CASE("tiered: looks in A, then B, a hit in B is promoted into A") {
  sluice::tiered both{sluice::tier::lru(2 * 8, 1), sluice::tier::minio(100 * 8, 1)};
  for (std::uint64_t k = 0; k < 10; ++k) both.insert(k, sluice::make_cache_buffer(item_bytes(k, 8)), 8);
  CHECK(both.first().stats().entries == 2);   // A holds the last two
  CHECK(both.second().stats().entries == 10);
  auto r = both.lookup(3);  // miss in A, hit in B, promoted
  CHECK(holds_item(r.bytes, 3, 8));
  auto a = both.first();  // a handle onto the same cache
  CHECK(a.lookup(3).hit);
  CHECK_FALSE(both.lookup(1000).hit);
  auto s = both.stats();
  CHECK(s.misses == 1);
  CHECK(s.hits == 2);  // the B hit, then the direct A hit through first()
}

TEST_CASE("disk: round trip through the file, whole-chunk eviction, file removed at the end") {
  sluice_test::temp_dir dir;
  const auto path = dir.file("cache.bin");
  {
    sluice::tier::disk t({.path = path, .bytes = 4 * 100, .chunk = 100});
    for (std::uint64_t k = 0; k < 12; ++k) CHECK(sluice::cache_insert_copy(t, k, item_bytes(k, 30)).hit);
    // 3 entries a chunk, 4 chunks: keys 0..2 were in chunk 0, evicted when key 12's chunk wrapped?
    // 12 inserts fill chunks 0..3 exactly (3 each); nothing evicted yet.
    CHECK(t.stats().evictions == 0);
    CHECK(holds_item(t.lookup(0).bytes, 0, 30));
    CHECK(sluice::cache_insert_copy(t, 12, item_bytes(12, 30)).hit);  // wraps to chunk 0
    CHECK(t.stats().evictions == 3);
    CHECK_FALSE(t.lookup(0).hit);
    CHECK(holds_item(t.lookup(12).bytes, 12, 30));
    CHECK(holds_item(t.lookup(11).bytes, 11, 30));
    CHECK_FALSE(sluice::cache_insert_copy(t, 50, item_bytes(50, 101)).hit);  // bigger than a chunk
    CHECK(std::filesystem::exists(path));
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_THROWS_AS(sluice::tier::disk({.path = dir.file("x"), .bytes = 100, .chunk = 100}), sluice::usage_error);
  CHECK_THROWS_AS(sluice::tier::disk({.path = dir.file("no/such/dir/x"), .bytes = 400, .chunk = 100}),
                  sluice::io_error);
}

namespace {
// A record source that counts how often its bytes are read.
struct counting_record {
  std::uint64_t id = 0;
  std::int64_t label = 0;
  std::span<const std::byte> data;
  std::atomic<int>* reads = nullptr;
  [[nodiscard]] std::span<const std::byte> bytes() const {
    reads->fetch_add(1);
    return data;
  }
};
// A "decoder output" that counts how often it is asked to write itself.
struct counting_decoded {
  std::uint64_t id = 0;
  std::int64_t label = 0;
  std::atomic<int>* decodes = nullptr;
  [[nodiscard]] std::size_t size_bytes() const { return 24; }
  void write_into(std::span<std::byte> dst, const sluice::sample_context&) const {
    decodes->fetch_add(1);
    auto v = item_bytes(id, 24);
    std::memcpy(dst.data(), v.data(), 24);
  }
};
}  // namespace

TEST_CASE("cache stage before decode: a hit never touches the input's bytes") {
  auto t = sluice::tier::minio(1 << 20);
  auto stage = sluice::cache(t);
  std::atomic<int> reads{0};
  auto data = item_bytes(5, 40);
  for (int epoch = 0; epoch < 3; ++epoch) {
    sluice::sample_context ctx{.seed = 1, .epoch = static_cast<std::uint64_t>(epoch), .id = 5, .position = 0};
    auto out = stage(counting_record{5, 3, data, &reads}, ctx);
    static_assert(sluice::bytes_sample<decltype(out)>);
    CHECK(holds_item(out.bytes(), 5, 40));
    CHECK(out.label == 3);
    CHECK(out.from_cache == (epoch > 0));
  }
  CHECK(reads.load() == 1);
  CHECK(t.stats().hits == 2);
  CHECK(stage.stats().misses == 1);
}

TEST_CASE("cache stage after decode: decoded once, later epochs copy from the cache") {
  auto t = sluice::tier::lru(1 << 20);
  auto stage = sluice::cache(t);
  std::atomic<int> decodes{0};
  std::vector<std::byte> slot(24);
  for (int epoch = 0; epoch < 3; ++epoch)
    for (std::uint64_t id = 0; id < 10; ++id) {
      sluice::sample_context ctx{.epoch = static_cast<std::uint64_t>(epoch), .id = id};
      auto out = stage(counting_decoded{id, 0, &decodes}, ctx);
      static_assert(sluice::deferred_sample<decltype(out)>);
      CHECK(out.size_bytes() == 24);
      out.write_into(slot, ctx);
      CHECK(holds_item(slot, id, 24));
    }
  CHECK(decodes.load() == 10);
  // A tier that admits nothing passes the sample through: decoded every time, straight to the slot.
  auto pass = sluice::cache(sluice::tier::none{});
  decodes = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto out = pass(counting_decoded{1, 0, &decodes}, {.id = 1});
    out.write_into(slot, {.id = 1});
  }
  CHECK(decodes.load() == 2);
}

TEST_CASE("cache stage under threads: every sample gets its own bytes while entries churn") {
  // A small LRU shared by 4 threads over 512 ids: constant eviction, lookups and inserts racing.
  auto stage = sluice::cache(sluice::tier::lru(64 * 32, 4));
  std::vector<std::vector<std::byte>> items(512);
  for (std::uint64_t k = 0; k < items.size(); ++k) items[k] = item_bytes(k, 64);
  std::atomic<int> bad{0}, reads{0};
  {
    std::vector<std::jthread> ts;
    for (unsigned w = 0; w < 4; ++w)
      ts.emplace_back([&, w] {
        for (std::uint64_t i = 0; i < 20000; ++i) {
          const std::uint64_t id = sluice::splitmix64(i * 4 + w) % items.size();
          auto out = stage(counting_record{id, 0, items[id], &reads}, {.id = id});
          std::this_thread::yield();  // let other threads evict the entry meanwhile
          if (!holds_item(out.bytes(), id, 64)) bad.fetch_add(1);
        }
      });
  }
  CHECK(bad.load() == 0);
  auto s = stage.stats();
  CHECK(s.hits + s.misses == 80000);
  CHECK(s.evictions > 0);
  CHECK(s.bytes <= 64 * 32);
}

TEST_CASE("tiered<lru, disk> under threads: promotions, chunk evictions and reads never mix up bytes") {
  sluice_test::temp_dir dir;
  auto stage = sluice::cache(sluice::tiered{sluice::tier::lru(64 * 16, 2),
                                            sluice::tier::disk({.path = dir.file("c"), .bytes = 64 * 96, .chunk = 64 * 8})});
  std::vector<std::vector<std::byte>> items(256);
  for (std::uint64_t k = 0; k < items.size(); ++k) items[k] = item_bytes(k, 64);
  std::atomic<int> bad{0}, reads{0};
  {
    std::vector<std::jthread> ts;
    for (unsigned w = 0; w < 4; ++w)
      ts.emplace_back([&, w] {
        for (std::uint64_t i = 0; i < 5000; ++i) {
          const std::uint64_t id = sluice::splitmix64(i * 4 + w) % items.size();
          auto out = stage(counting_record{id, 0, items[id], &reads}, {.id = id});
          if (!holds_item(out.bytes(), id, 64)) bad.fetch_add(1);
        }
      });
  }
  CHECK(bad.load() == 0);
  auto s = stage.stats();
  CHECK(s.hits > 0);
  CHECK(stage.tier().second().stats().evictions > 0);
  CHECK(s.evictions > 0);
}

// ------------------------------------------------------------------ depth and worker policies
#include <chrono>

#include "../../bench/policy/pipeline_sim.hpp"
#include "sluice/policy/depth.hpp"
#include "sluice/policy/workers.hpp"
#include "sluice/sluice.hpp"

static_assert(sluice::depth_policy<sluice::depth::utilization_rule>);
static_assert(sluice::depth_policy<sluice::depth::adaptive>);
static_assert(sluice::depth_policy<sluice::with_workers<sluice::depth::adaptive>>);

namespace {
sluice::depth_signal signal(std::size_t depth, double wait_ms, double busy_ms, std::size_t ready,
                            std::size_t workers = 2, std::size_t batch_bytes = 1 << 20) {
  return {0, static_cast<std::uint64_t>(wait_ms * 1e6), static_cast<std::uint64_t>(busy_ms * 1e6), ready, depth,
          workers, batch_bytes};
}
// Feeds `n` batches produced by `make(i, depth)` and returns the depths after each.
template <class P, class F>
std::vector<std::size_t> drive(P& p, std::size_t n, F make) {
  std::size_t d = std::clamp<std::size_t>(p.initial_depth(), 1, p.max_depth());
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i) {
    d = std::clamp<std::size_t>(p.update(make(i, d)), 1, p.max_depth());
    out.push_back(d);
  }
  return out;
}
}  // namespace

TEST_CASE("utilization_rule: >85 % -> 1, <60 % -> 3, else 2, from the wait fraction") {
  sluice::depth::utilization_rule r({.window = 4, .source = sluice::depth::utilization_source::wait_fraction});
  CHECK_FALSE(r.uses_nvml());
  CHECK(r.depth_for(0.95) == 1);
  CHECK(r.depth_for(0.86) == 1);
  CHECK(r.depth_for(0.85) == 2);
  CHECK(r.depth_for(0.70) == 2);
  CHECK(r.depth_for(0.60) == 2);
  CHECK(r.depth_for(0.59) == 3);
  // utilisation 9/(9+1) = 0.9 over a window -> 1; 5/(5+5) = 0.5 -> 3; 7/10 -> 2
  auto run = [&](double wait, double busy) {
    return drive(r, 4, [&](std::size_t, std::size_t d) { return signal(d, wait, busy, 0); }).back();
  };
  CHECK(run(1, 9) == 1);
  CHECK(run(5, 5) == 3);
  CHECK(run(3, 7) == 2);
  CHECK(r.last_utilization() == doctest::Approx(0.7));
  // Automatic source: NVML when the library loads, else the wait fraction; never throws.
  sluice::depth::utilization_rule automatic;
  MESSAGE("NVML available: " << automatic.uses_nvml());
  CHECK(automatic.uses_nvml() == automatic.nvml_unavailable_reason().empty());
}

TEST_CASE("utilization_rule: NVML asked for explicitly and unusable is an error with the reason, automatic falls back") {
  using sluice::depth::utilization_source;
  // No machine has a GPU at index 100000: without libnvidia-ml the library fails to load, with it
  // the device lookup fails. Either way the reason is named.
  constexpr unsigned no_such_gpu = 100000;
  std::string what;
  try {
    sluice::depth::utilization_rule r({.source = utilization_source::nvml, .gpu_index = no_such_gpu});
    FAIL("utilization_source::nvml with no usable NVML constructed without an error");
  } catch (const sluice::usage_error& e) {
    what = e.what();
  }
  MESSAGE(what);
  CHECK(what.find("utilization_source::nvml") != std::string::npos);
  const bool reason_named = what.find("libnvidia-ml.so.1") != std::string::npos ||
                            what.find("no GPU at index 100000") != std::string::npos;
  CHECK(reason_named);

  sluice::depth::utilization_rule automatic({.window = 1, .source = utilization_source::automatic, .gpu_index = no_such_gpu});
  CHECK_FALSE(automatic.uses_nvml());
  CHECK_FALSE(automatic.nvml_unavailable_reason().empty());
  CHECK(automatic.update(signal(2, 1, 9, 0)) == 1);  // the wait fraction decides: 9 / 10 busy
  CHECK(automatic.last_utilization() == doctest::Approx(0.9));

  sluice::depth::utilization_rule never({.source = utilization_source::wait_fraction, .gpu_index = no_such_gpu});
  CHECK_FALSE(never.uses_nvml());
  CHECK(never.nvml_unavailable_reason().empty());
}

TEST_CASE("adaptive: grows while the consumer waits and the producer can fill the queue") {
  sluice::depth::adaptive a({.initial = 2, .max = 16, .window = 8});
  // 20 % stall, and the queue was full (ready >= depth) once per window: depth is what is short.
  auto ds = drive(a, 400, [](std::size_t i, std::size_t d) {
    return i % 8 == 0 ? signal(d, 0, 10, d) : signal(d, 2.5, 10, 0);
  });
  CHECK(ds.back() == 16);
  CHECK(std::is_sorted(ds.begin(), ds.end()));  // only grew
}

TEST_CASE("adaptive: does not grow when the producer is slower on average (queue never fills)") {
  sluice::depth::adaptive a({.initial = 2, .window = 8});
  auto ds = drive(a, 2000, [](std::size_t, std::size_t d) { return signal(d, 5, 10, 0); });
  CHECK(ds.back() == 2);
  CHECK(a.changes() == 0);
}

TEST_CASE("adaptive: shrinks when the queue stays full, down to 1") {
  sluice::depth::adaptive a({.initial = 8, .window = 8});
  auto ds = drive(a, 2000, [](std::size_t, std::size_t d) { return signal(d, 0, 10, d + 1); });
  CHECK(ds.back() == 1);
  CHECK(std::is_sorted(ds.rbegin(), ds.rend()));  // only shrank
}

TEST_CASE("adaptive: never exceeds the RAM budget, and obeys it at once when batches grow") {
  // Budget 6 MiB, 1 MiB batches, 2 workers: (depth + 2) * 1 MiB <= 6 MiB -> depth <= 4.
  sluice::depth::adaptive a({.initial = 2, .max = 16, .ram_budget_bytes = 6 << 20, .window = 8});
  std::size_t peak = 0;
  auto ds = drive(a, 1000, [&](std::size_t i, std::size_t d) {
    peak = std::max(peak, d);
    return i % 8 == 0 ? signal(d, 0, 10, d) : signal(d, 5, 10, 0);
  });
  CHECK(peak <= 4);
  CHECK(ds.back() == 4);
  // Batches double in size: the cap falls to 1 ((1 + 2) * 2 MiB = 6 MiB) on the next batch.
  CHECK(a.update(signal(4, 5, 10, 0, 2, 2 << 20)) == 1);
}

TEST_CASE("adaptive: at a boundary it does not oscillate (hysteresis, dwell, growing shrink patience)") {
  // A stationary boundary: below depth 5 the consumer stalls 20 % with a queue that fills at
  // times; at 5 and above it never waits and the queue stays full — so a naive controller would
  // flip between 4 and 5 on almost every window (5000 windows here).
  sluice::depth::adaptive a({.initial = 2, .max = 16, .window = 8});
  std::uint64_t changes_first_half = 0;
  drive(a, 40000, [&](std::size_t i, std::size_t d) {
    if (i == 20000) changes_first_half = a.changes();
    if (d >= 5) return signal(d, 0, 10, d + 1);
    return i % 8 == 0 ? signal(d, 0, 10, d) : signal(d, 2.5, 10, 0);
  });
  const std::uint64_t second_half = a.changes() - changes_first_half;
  MESSAGE("depth changes: " << changes_first_half << " in the first 20000 batches, " << second_half
                            << " in the next 20000; shrink patience now " << a.shrink_patience_windows()
                            << " windows");
  CHECK(a.changes() < 100);                        // vs ~5000 for a controller without hysteresis
  CHECK(second_half <= changes_first_half);        // and the probing slows down, not up
  CHECK(a.shrink_patience_windows() > 4);          // undone shrinks doubled the patience
}

TEST_CASE("adaptive in the simulated loader: stall <= 5 % with no more memory than the smallest fixed depth that gets there") {
  sluice_sim::scenario sc;  // consumer 10 ms (cv 0.3), producer 18 ms a batch (cv 0.6), 2 workers
  sc.batches = 20000;
  std::size_t smallest_ok_peak = 0;
  for (std::size_t d = 1; d <= 16 && smallest_ok_peak == 0; ++d) {
    sluice::depth::fixed f{d};
    auto r = sluice_sim::simulate(f, sc);
    if (r.stall_fraction <= 0.05) smallest_ok_peak = r.peak_batches_alive;
  }
  REQUIRE(smallest_ok_peak > 0);
  sluice::depth::adaptive a;
  auto r = sluice_sim::simulate(a, sc);
  MESSAGE("adaptive stall " << r.stall_fraction << " peak " << r.peak_batches_alive << " (fixed needs "
                            << smallest_ok_peak << ")");
  CHECK(r.stall_fraction <= 0.05);
  CHECK(r.peak_batches_alive <= smallest_ok_peak);
}

TEST_CASE("worker autotune: adds workers while producer-bound, removes them when the consumer never waits") {
  sluice::workers::autotune t({.min = 1, .max = 8, .window = 8});
  std::size_t w = 2;
  for (int i = 0; i < 80; ++i) w = t.update(signal(2, 5, 10, 0, w));  // u = 0.67, queue empty
  CHECK(w == 8);
  sluice::workers::autotune u({.min = 1, .max = 8, .window = 8, .remove_windows = 2});
  w = 6;
  for (int i = 0; i < 400; ++i) w = u.update(signal(2, 0, 10, 3, w));  // never waits
  CHECK(w == 1);
  // Inside the band: hold.
  sluice::workers::autotune h({.window = 8});
  w = 3;
  for (int i = 0; i < 400; ++i) w = h.update(signal(2, 1.3, 10, 0, w));  // u = 0.885
  CHECK(w == 3);
  CHECK(h.changes() == 0);
}

TEST_CASE("depth::runtime: the chosen policy's depths, and the worker tuner only when asked") {
  auto f = sluice::depth::runtime::fixed(3);
  CHECK(!f.is_adaptive());
  CHECK(f.initial_depth() == 3);
  CHECK(f.max_depth() == 3);
  std::size_t w = 2;
  for (int i = 0; i < 80; ++i) {
    CHECK(f.update(signal(2, 5, 10, 0, w)) == 3);
    w = f.update_workers(signal(2, 5, 10, 0, w));
  }
  CHECK(w == 2);  // no tuner: the worker count stays
  auto a = sluice::depth::runtime::adaptive({.initial = 2, .max = 6});
  a.tune_workers({.min = 1, .max = 8, .window = 8});
  CHECK(a.is_adaptive());
  CHECK(a.tunes_workers());
  CHECK(a.initial_depth() == 2);
  CHECK(a.max_depth() == 6);
  for (int i = 0; i < 80; ++i) w = a.update_workers(signal(2, 5, 10, 0, w));  // producer-bound: grows
  CHECK(w == 8);
  std::size_t d = 2;
  for (int i = 0; i < 2000; ++i) d = a.update(signal(d, 5, 10, d, w));  // stalls with a full queue: deeper
  CHECK(d > 2);
  CHECK(d <= 6);
}

TEST_CASE("worker autotune in the simulated loader: utilisation lands near the band with few workers") {
  sluice_sim::scenario sc;
  sc.producer = {40, 0.5};  // one worker gives 25 % of what the consumer needs
  sc.workers = 1;
  sc.batches = 20000;
  sluice::with_workers p{sluice::depth::fixed{2}, sluice::workers::autotune{}};
  auto r = sluice_sim::simulate(p, sc);
  MESSAGE("workers " << r.final_workers << " (mean " << r.mean_workers << "), utilisation " << r.utilization);
  CHECK(r.final_workers >= 4);   // at least the throughput-matching count
  CHECK(r.final_workers <= 8);   // and not all it may use
  CHECK(r.utilization > 0.70);  // the rest is depth 2's share: the tuner leaves bursts to depth
  CHECK(p.workers.changes() < 40);
}

namespace {
using sluice_test::mem_reader;
template <class L>
std::pair<std::vector<std::uint64_t>, std::uint64_t> digest(L& loader, std::uint64_t epoch) {
  std::vector<std::uint64_t> ids;
  std::uint64_t h = 1469598103934665603ull;
  for (auto& b : loader.epoch(epoch)) {
    for (auto x : b.bytes()) h = (h ^ static_cast<std::uint8_t>(x)) * 1099511628211ull;
    for (auto id : b.ids()) ids.push_back(id);
  }
  return {ids, h};
}
}  // namespace

TEST_CASE("loader: a cache stage changes nothing in the batches and hits from the second epoch") {
  mem_reader r(2000, 32);
  auto plain = sluice::from(sluice::sample::shuffle(2000, {.seed = 3})) | sluice::read(r) |
               sluice::collate({.batch = 50}) | sluice::prefetch(2, {.workers = 2});
  auto t = sluice::tier::minio(2000 * 32);
  auto cached = sluice::from(sluice::sample::shuffle(2000, {.seed = 3})) | sluice::read(r) | sluice::cache(t) |
                sluice::collate({.batch = 50}) | sluice::prefetch(2, {.workers = 2});
  for (std::uint64_t e = 0; e < 2; ++e) CHECK(digest(plain, e) == digest(cached, e));
  auto s = t.stats();
  CHECK(s.hits >= 2000);  // the whole second epoch (the size probe may add a lookup)
  CHECK(s.entries == 2000);
  // The same counters reach the pipeline's own stats.
  const auto ps = cached.stats();
  REQUIRE(ps.reports.size() == 1);
  const sluice::stage_report* rep = ps.report("cache");
  REQUIRE(rep != nullptr);
  CHECK(rep == &ps.reports[0]);
  CHECK((*rep)["hits"] == s.hits);
  CHECK((*rep)["misses"] == s.misses);
  CHECK((*rep)["bytes"] == 2000u * 32u);
  CHECK(rep->has("evictions"));
  CHECK((*rep)["evictions"] == 0);
  CHECK_FALSE(rep->has("hit_rate"));
  CHECK(static_cast<double>((*rep)["hits"]) / static_cast<double>((*rep)["hits"] + (*rep)["misses"]) > 0.49);
  CHECK(plain.stats().reports.empty());
  CHECK(plain.stats().report("cache") == nullptr);
}

TEST_CASE("loader: the worker tuner changes active workers, batches stay identical") {
  mem_reader r(1200, 16);
  auto slow = [](sluice::record_view v) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // a producer-bound pipeline
    return v;
  };
  auto fixed = sluice::from(sluice::sample::shuffle(1200, {.seed = 5})) | sluice::read(r) | sluice::map(slow) |
               sluice::collate({.batch = 10}) | sluice::prefetch(2, {.workers = 1});
  auto tuned = sluice::from(sluice::sample::shuffle(1200, {.seed = 5})) | sluice::read(r) | sluice::map(slow) |
               sluice::collate({.batch = 10}) |
               sluice::prefetch(sluice::with_workers{sluice::depth::fixed{2}, sluice::workers::autotune({.window = 4})},
                                {.workers = 1, .max_workers = 4});
  auto a = digest(fixed, 0);
  auto b = digest(tuned, 0);
  CHECK(a == b);
  CHECK(tuned.depth_policy().workers.changes() > 0);
  CHECK(tuned.stats().workers > 1);
}

#include "sluice/sample/length_bucket.hpp"
#include "sluice/stage/pad.hpp"

namespace {
// Variable-length records: record i has lengths[i] bytes, byte j = (i * 7 + j) & 0xff.
struct varlen_reader {
  using reader_concept = sluice::reader_tag;
  std::vector<std::uint32_t> lengths;
  std::vector<std::uint64_t> offsets;
  std::vector<std::byte> data;
  explicit varlen_reader(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      sluice::counter_rng g(8, 0, i);
      const double u = g.uniform();
      lengths.push_back(static_cast<std::uint32_t>(1 + 500 * u * u * u));
      offsets.push_back(data.size());
      for (std::uint32_t j = 0; j < lengths.back(); ++j) data.push_back(static_cast<std::byte>((i * 7 + j) & 0xff));
    }
  }
  std::size_t size() const { return lengths.size(); }
  std::span<const std::byte> record(std::size_t i) const { return {data.data() + offsets[i], lengths[i]}; }
  std::int64_t label(std::size_t) const { return 0; }
  std::string_view path() const { return "varlen"; }
};
}  // namespace

TEST_CASE("pad_bytes + length_bucketed through the loader: lengths travel with the batch, bucketing cuts padding") {
  varlen_reader r(3000);
  auto run = [&](auto sampler) {
    auto loader = sluice::from(std::move(sampler)) | sluice::read(r) | sluice::pad_bytes(512) |
                  sluice::collate({.batch = 32}) | sluice::prefetch(2, {.workers = 2});
    std::uint64_t tokens = 0, trimmed = 0, samples = 0;
    bool ok = true;
    for (auto& b : loader.epoch(0)) {
      auto lens = sluice::padded_lengths(b);
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto id = b.ids()[i];
        ok = ok && lens[i] == r.lengths[id];
        auto rec = sluice::padded_record(b, i);
        ok = ok && rec.size() == r.lengths[id] && std::memcmp(rec.data(), r.record(id).data(), rec.size()) == 0;
        auto tail = b.sample(i).subspan(sluice::length_prefix_bytes + rec.size());
        ok = ok && std::all_of(tail.begin(), tail.end(), [](std::byte x) { return x == std::byte{0}; });
        tokens += lens[i];
      }
      trimmed += static_cast<std::uint64_t>(sluice::padded_max_length(b)) * b.size();
      samples += b.size();
    }
    CHECK(ok);
    CHECK(samples == 3000);
    return std::pair{tokens, trimmed};
  };
  auto [tok_b, trim_b] = run(sluice::sample::length_bucketed(r.lengths, {.seed = 1, .batch = 32, .pool_batches = 16}));
  auto [tok_s, trim_s] = run(sluice::sample::shuffle(3000, {.seed = 1}));
  MESSAGE("padded to batch max: shuffled " << trim_s << " bytes, bucketed " << trim_b << " for " << tok_b
                                           << " record bytes");
  CHECK(tok_b == tok_s);
  CHECK(trim_b * 2 < trim_s);
  // Too long without truncation: a stage_error naming the sample reaches the consumer.
  auto strict = sluice::from(sluice::sample::sequential(3000)) | sluice::read(r) | sluice::pad_bytes(8) |
                sluice::collate({.batch = 32}) | sluice::prefetch(2);
  CHECK_THROWS_AS([&] { for (auto& b : strict.epoch(0)) (void)b; }(), sluice::stage_error);
}
