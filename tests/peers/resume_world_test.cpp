// Resuming an epoch across a change of world size: the distributed sampler's state is the global
// position, so a run checkpointed at world 4 and resumed at world 2 neither loses nor repeats a
// sample (beyond the documented padding of tail::pad). Ranks are simulated in one process: each
// rank is its own sampler or its own loader, exactly as each MPI rank would build it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "sluice/sluice.hpp"
#include "sluice/sample/rank.hpp"
#include "test_util.hpp"

using sluice::sample::distributed;
using sluice::sample::shuffle;
using sluice::sample::tail;

namespace {

// Ids rank r of `world` takes from `start` on, at most `limit` of them.
std::vector<std::uint64_t> take(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch, std::uint64_t rank,
                                std::uint64_t world, tail t, std::uint64_t start, std::uint64_t limit) {
  distributed d{shuffle{n, {.seed = seed}}, {.rank = rank, .world = world, .tail = t, .start = start}};
  std::vector<std::uint64_t> ids;
  for (std::uint64_t j = 0; j < std::min<std::uint64_t>(limit, d.size(epoch)); ++j) ids.push_back(d.at(epoch, j));
  return ids;
}

}  // namespace

TEST_CASE("the global order for a seed is the same on 1, 2, 3 and 4 ranks") {
  const std::uint64_t n = 1003, seed = 11, epoch = 2;
  std::vector<std::uint64_t> one = take(n, seed, epoch, 0, 1, tail::drop, 0, n);
  REQUIRE(one.size() == n);
  for (std::uint64_t world : {2u, 3u, 4u}) {
    std::vector<std::uint64_t> global(n - n % world, UINT64_MAX);
    for (std::uint64_t r = 0; r < world; ++r) {
      auto ids = take(n, seed, epoch, r, world, tail::drop, 0, n);
      CHECK(ids.size() == n / world);  // every rank gets the same count
      for (std::uint64_t j = 0; j < ids.size(); ++j) global[r + world * j] = ids[j];
    }
    CHECK(std::equal(global.begin(), global.end(), one.begin()));
  }
}

TEST_CASE("checkpoint at world 4, resume at world 2 (and other changes): nothing lost or repeated") {
  const std::uint64_t seed = 5, epoch = 1;
  struct change { std::uint64_t from, to; };
  for (std::uint64_t n : {1000u, 1003u, 37u}) {
    for (change c : {change{4, 2}, change{2, 4}, change{4, 3}, change{1, 4}}) {
      for (tail t : {tail::drop, tail::pad}) {
        CAPTURE(n);
        CAPTURE(c.from);
        CAPTURE(c.to);
        CAPTURE(t == tail::pad);
        const std::uint64_t consumed = n / c.from / 3;  // each rank of the first run consumed this many
        std::map<std::uint64_t, int> seen;
        for (std::uint64_t r = 0; r < c.from; ++r)
          for (auto id : take(n, seed, epoch, r, c.from, t, 0, consumed)) ++seen[id];
        // The checkpoint: one number, the same on every rank.
        const std::uint64_t resume_at =
            distributed{shuffle{n, {.seed = seed}}, {.rank = 0, .world = c.from, .tail = t}}.global_position(consumed);
        CHECK(resume_at == consumed * c.from);
        std::uint64_t per_rank = 0;
        for (std::uint64_t r = 0; r < c.to; ++r) {
          auto ids = take(n, seed, epoch, r, c.to, t, resume_at, n);
          if (r == 0) per_rank = ids.size();
          CHECK(ids.size() == per_rank);
          for (auto id : ids) ++seen[id];
        }
        const std::uint64_t rest = n - resume_at;
        const shuffle order{n, {.seed = seed}};
        if (t == tail::drop) {
          // Every id at most once; the missing ones are exactly the last rest % world positions.
          for (auto& [id, k] : seen) CHECK(k == 1);
          CHECK(seen.size() == n - rest % c.to);
          for (std::uint64_t g = n - rest % c.to; g < n; ++g) CHECK(seen.count(order.at(epoch, g)) == 0);
        } else {
          // Every id at least once; the repeats are the first `padded` positions of the resumed run.
          const std::uint64_t padded = per_rank * c.to - rest;
          CHECK(padded == distributed{order, {.rank = 0, .world = c.to, .tail = t, .start = resume_at}}.padded_samples(epoch));
          CHECK(seen.size() == n);
          std::uint64_t repeats = 0;
          for (auto& [id, k] : seen) {
            CHECK(k <= 2);
            repeats += static_cast<std::uint64_t>(k - 1);
          }
          CHECK(repeats == padded);
          for (std::uint64_t g = resume_at; g < resume_at + padded; ++g) CHECK(seen[order.at(epoch, g)] == 2);
        }
      }
    }
  }
}

TEST_CASE("loaders: four ranks stop mid-epoch, two ranks finish it, every record delivered once") {
  // Records of 8 bytes holding their own index, so the content proves which record arrived.
  sluice_test::temp_dir dir;
  const std::uint64_t n = 1000, batch = 16;
  std::vector<std::byte> bytes(n * 8);
  for (std::uint64_t i = 0; i < n; ++i) std::memcpy(bytes.data() + i * 8, &i, 8);
  sluice_test::write_file(dir.file("records.u8"), bytes);
  const sluice::io::fixed_records reader{dir.file("records.u8"), {.record_bytes = 8}};
  const std::uint64_t seed = 3, epoch = 4;

  std::map<std::uint64_t, int> seen;
  auto run_rank = [&](std::uint64_t rank, std::uint64_t world, std::uint64_t start, std::uint64_t max_batches) {
    auto loader = sluice::from(distributed{shuffle{n, {.seed = seed}},
                                           sluice::sample::rank_info::of(rank, world).distributed({.tail = tail::drop, .start = start})}) |
                  sluice::read(reader) | sluice::collate({.batch = batch}) | sluice::prefetch(2, {.workers = 2});
    std::uint64_t batches = 0, position = 0;
    for (auto& b : loader.epoch(epoch)) {
      for (std::size_t i = 0; i < b.size(); ++i) {
        std::uint64_t content = 0;
        std::memcpy(&content, b.sample(i).data(), 8);
        CHECK(content == b.ids()[i]);
        ++seen[content];
      }
      position = loader.state().position;
      if (++batches == max_batches) break;
    }
    return loader.sampler().global_position(position);
  };
  // World 4: every rank stops after 5 batches; all ranks agree on the checkpoint.
  std::uint64_t checkpoint = 0;
  for (std::uint64_t r = 0; r < 4; ++r) {
    const std::uint64_t g = run_rank(r, 4, 0, 5);
    if (r == 0) checkpoint = g;
    CHECK(g == checkpoint);
  }
  CHECK(checkpoint == 4 * 5 * batch);
  // World 2 resumes from the checkpoint and runs the epoch to its end.
  for (std::uint64_t r = 0; r < 2; ++r) run_rank(r, 2, checkpoint, UINT64_MAX);
  CHECK(seen.size() == n);  // (n - checkpoint) is even: nothing dropped
  for (auto& [id, k] : seen) CHECK(k == 1);
}

// ---- shard_shuffle: a two-level shuffle whose order does not depend on the world size ----

namespace {

using sluice::sample::shard_shuffle;
using ranges_t = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

ranges_t shards_of(const std::vector<std::uint64_t>& sizes) {
  ranges_t r;
  std::uint64_t at = 0;
  for (auto s : sizes) {
    r.emplace_back(at, at + s);
    at += s;
  }
  return r;
}
std::size_t shard_of(const ranges_t& r, std::uint64_t id) {
  for (std::size_t s = 0; s < r.size(); ++s)
    if (id >= r[s].first && id < r[s].second) return s;
  return r.size();
}
std::vector<std::uint64_t> global_order(shard_shuffle s, std::uint64_t epoch) {
  s.prepare(epoch);
  std::vector<std::uint64_t> out;
  for (std::uint64_t p = 0; p < s.size(epoch); ++p) out.push_back(s.at(epoch, p));
  return out;
}

}  // namespace

TEST_CASE("shard_shuffle: each epoch is a permutation leaving out fewer than `partitions` samples, with empty and uneven shards") {
  const ranges_t r = shards_of({0, 5, 17, 0, 3, 40, 1, 9, 0, 26, 13, 2});
  const std::uint64_t n = r.back().second;
  for (std::uint64_t window : {1u, 2u, 4u, 64u}) {
    for (std::uint64_t parts : {1u, 3u, 8u}) {
      const shard_shuffle s(r, {.seed = 5, .window = window, .partitions = parts});
      CAPTURE(window);
      CAPTURE(parts);
      CHECK(s.size(0) == n - n % parts);
      CHECK(s.left_out() == n % parts);
      for (std::uint64_t epoch : {0u, 1u}) {
        const auto o = global_order(s, epoch);
        std::vector<std::uint64_t> sorted = o;
        std::sort(sorted.begin(), sorted.end());
        CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
        CHECK(sorted.back() < n);
      }
      CHECK(global_order(s, 0) != global_order(s, 1));
      CHECK(global_order(s, 1) == global_order(shard_shuffle(r, {.seed = 5, .window = window, .partitions = parts}), 1));
    }
  }
  CHECK_THROWS_AS(shard_shuffle(r, {.window = 0}), sluice::usage_error);
  CHECK_THROWS_AS(shard_shuffle(r, {.partitions = 0}), sluice::usage_error);
  shard_shuffle s(r, {});
  CHECK_THROWS_AS((void)s.at(0, 0), sluice::usage_error);  // not prepared
  s.prepare(0);
  CHECK_THROWS_AS((void)s.at(0, s.size(0)), sluice::usage_error);
}

TEST_CASE("shard_shuffle: a window's samples come from its shards only, and partitions read disjoint shards") {
  // 64 shards of 100: 8 partitions of 800 samples cut at shard boundaries.
  const ranges_t r = shards_of(std::vector<std::uint64_t>(64, 100));
  for (std::uint64_t window : {1u, 4u}) {
    shard_shuffle s(r, {.seed = 9, .window = window, .partitions = 8});
    s.prepare(3);
    std::vector<std::set<std::size_t>> by_partition(8);
    for (std::uint64_t p = 0; p < s.size(3); ++p) {
      const std::uint64_t id = s.at(3, p);
      const auto [c, k] = s.window_at(3, p);
      CHECK(c == p % 8);
      const auto ws = s.window_shards(3, c, k);
      CHECK(ws.size() == window);
      CHECK(std::find(ws.begin(), ws.end(), shard_of(r, id)) != ws.end());
      by_partition[c].insert(shard_of(r, id));
    }
    std::set<std::size_t> all;
    for (const auto& part : by_partition) {
      CHECK(part.size() == 8);
      all.insert(part.begin(), part.end());
    }
    CHECK(all.size() == 64);
    CHECK(s.window_count(3, 0) == 8 / window);
  }
  // Shards cut by the partition boundaries: only the cut shards are shared, at most partitions - 1.
  const ranges_t uneven = shards_of({37, 101, 5, 64, 90, 13, 77, 250, 8, 99, 120, 44});
  shard_shuffle s(uneven, {.seed = 2, .window = 2, .partitions = 4});
  s.prepare(0);
  std::vector<std::set<std::size_t>> by_partition(4);
  for (std::uint64_t p = 0; p < s.size(0); ++p) by_partition[p % 4].insert(shard_of(uneven, s.at(0, p)));
  std::size_t shared = 0;
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = a + 1; b < 4; ++b)
      for (auto x : by_partition[a]) shared += by_partition[b].count(x);
  CHECK(shared <= 3);
}

TEST_CASE("shard_shuffle: the same order on 1, 2, 4 and 8 ranks, each rank on its own shards, resumed from 4 ranks at 2") {
  const ranges_t r = shards_of(std::vector<std::uint64_t>(32, 50));  // 1600 samples, partitions of 4 whole shards
  const shard_shuffle order(r, {.seed = 17, .window = 2, .partitions = 8});
  const std::uint64_t epoch = 4;
  const auto one = global_order(order, epoch);
  REQUIRE(one.size() == 1600);
  for (std::uint64_t world : {2u, 4u, 8u}) {
    std::vector<std::uint64_t> global(one.size(), UINT64_MAX);
    std::vector<std::set<std::size_t>> shards(world);
    for (std::uint64_t rank = 0; rank < world; ++rank) {
      distributed d{order, {.rank = rank, .world = world, .tail = tail::drop}};
      d.prepare(epoch);
      for (std::uint64_t j = 0; j < d.size(epoch); ++j) {
        global[rank + j * world] = d.at(epoch, j);
        shards[rank].insert(shard_of(r, d.at(epoch, j)));
      }
    }
    CHECK(global == one);
    std::set<std::size_t> all;
    std::size_t total = 0;
    for (const auto& s : shards) {
      total += s.size();
      all.insert(s.begin(), s.end());
    }
    CHECK(total == 32);  // no shard read by two ranks
    CHECK(all.size() == 32);
  }
  // World 4 stops at global position 4 * 150; world 2 resumes there: every sample exactly once.
  std::map<std::uint64_t, int> seen;
  const std::uint64_t checkpoint = 4 * 150;
  for (std::uint64_t rank = 0; rank < 4; ++rank) {
    distributed d{order, {.rank = rank, .world = 4, .tail = tail::drop}};
    d.prepare(epoch);
    for (std::uint64_t j = 0; j < 150; ++j) ++seen[d.at(epoch, j)];
  }
  for (std::uint64_t rank = 0; rank < 2; ++rank) {
    distributed d{order, {.rank = rank, .world = 2, .tail = tail::drop, .start = checkpoint}};
    d.prepare(epoch);
    for (std::uint64_t j = 0; j < d.size(epoch); ++j) ++seen[d.at(epoch, j)];
  }
  CHECK(seen.size() == 1600);
  for (const auto& [id, k] : seen) CHECK(k == 1);
}

TEST_CASE("shard_shuffle: under a loader, a rank's batches are its ids of the global order") {
  sluice_test::mem_reader reader(600, 8);
  const ranges_t r = shards_of(std::vector<std::uint64_t>(12, 50));
  const shard_shuffle order(r, {.seed = 3, .window = 2, .partitions = 4});
  const auto one = global_order(order, 1);
  auto loader = sluice::from(distributed{order, {.rank = 1, .world = 2}}) | sluice::read(reader) |
                sluice::collate({.batch = 16}) | sluice::prefetch(2, {.workers = 2});
  std::vector<std::uint64_t> got;
  for (auto& b : loader.epoch(1))
    for (std::size_t i = 0; i < b.size(); ++i) got.push_back(b.ids()[i]);
  REQUIRE(got.size() == 300);  // the last batch holds 300 % 16 (drop_last is off)
  for (std::size_t j = 0; j < got.size(); ++j) CHECK(got[j] == one[1 + 2 * j]);
}

namespace {
// A sharded reader that records what fetch_ahead asks it to prefetch.
struct prefetch_log {
  mutable std::mutex m;
  mutable std::vector<std::size_t> asked;
  void prefetch(std::size_t s) const {
    std::lock_guard lk(m);
    asked.push_back(s);
  }
};
}  // namespace

TEST_CASE("fetch_ahead: the shards of the next window of each partition are asked for once, before the rank reads them") {
  const ranges_t r = shards_of(std::vector<std::uint64_t>(24, 10));  // 240 samples
  const shard_shuffle order(r, {.seed = 4, .window = 3, .partitions = 2});
  for (std::uint64_t world : {1u, 2u}) {
    prefetch_log log;
    sluice::sample::fetch_ahead ahead{distributed{order, {.rank = 0, .world = world}}, log, {.windows = 1}};
    ahead.prepare(2);
    const auto& inner = ahead.order().inner();
    std::set<std::size_t> read;
    for (std::uint64_t j = 0; j < ahead.size(2); ++j) {
      const std::uint64_t id = ahead.at(2, j);
      const std::uint64_t g = j * world;
      CHECK(id == inner.at(2, g));  // the same ids as the order itself
      const std::size_t shard = shard_of(r, id);
      read.insert(shard);
      const auto [c, k] = inner.window_at(2, g);
      std::lock_guard lk(log.m);
      // Every shard read so far was asked for, and so were the next window's of this partition.
      CHECK(std::find(log.asked.begin(), log.asked.end(), shard) != log.asked.end());
      if (k + 1 < inner.window_count(2, c))
        for (std::size_t s : inner.window_shards(2, c, k + 1)) CHECK(std::find(log.asked.begin(), log.asked.end(), s) != log.asked.end());
    }
    // Each shard asked for once, and only the rank's own (world 2: partition 0's).
    std::vector<std::size_t> sorted = log.asked;
    std::sort(sorted.begin(), sorted.end());
    CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    CHECK(std::set<std::size_t>(sorted.begin(), sorted.end()) == read);
  }
}

namespace {
struct releasing_log : prefetch_log {
  mutable int releases = 0;
  void release_all() const { ++releases; }
};
}  // namespace

TEST_CASE("fetch_ahead: the reader's shards are released when a new epoch is prepared, not when the same one is") {
  const ranges_t r = shards_of(std::vector<std::uint64_t>(8, 10));
  const shard_shuffle order(r, {.seed = 1, .window = 2, .partitions = 2});
  releasing_log log;
  sluice::sample::fetch_ahead ahead{distributed{order, {}}, log};
  ahead.prepare(0);
  CHECK(log.releases == 0);  // nothing was open before the first epoch
  (void)ahead.at(0, 0);
  ahead.prepare(0);  // the same epoch again (a resume): nothing released
  CHECK(log.releases == 0);
  ahead.prepare(1);
  CHECK(log.releases == 1);
  releasing_log kept;
  sluice::sample::fetch_ahead keep{distributed{order, {}}, kept, {.release_between_epochs = false}};
  keep.prepare(0);
  keep.prepare(1);
  CHECK(kept.releases == 0);
}
