// Resuming an epoch across a change of world size: the distributed sampler's state is the global
// position, so a run checkpointed at world 4 and resumed at world 2 neither loses nor repeats a
// sample (beyond the documented padding of tail::pad). Ranks are simulated in one process: each
// rank is its own sampler or its own loader, exactly as each MPI rank would build it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
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
