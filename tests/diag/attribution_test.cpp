// Per-stage attribution per epoch (loader.epoch_stats, bottleneck): an injected slow stage is
// named, a fast one never; per-epoch figures add up to the cumulative ones; the ring keeps the
// last epoch_stats_kept runs.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <thread>

#include "sluice/diag/report.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace std::chrono_literals;

TEST_CASE("an injected slow stage is named the bottleneck of (nearly) every epoch, a fast one never") {
  sluice_test::mem_reader r(64, 16);
  auto loader = from(sample::sequential(64)) | read(r) |
                map([](record_view v) {  // slow: 1 ms a sample
                  std::this_thread::sleep_for(1ms);
                  return v;
                }) |
                map([](record_view v) { return v; }) |  // fast
                collate({.batch = 16}) | prefetch(2, {.workers = 2});
  const std::size_t epochs = 20;
  std::size_t named_slow = 0;
  for (std::uint64_t e = 0; e < epochs; ++e) {
    for (auto& b : loader.epoch(e)) (void)b;
    const auto st = loader.epoch_stats(e);
    REQUIRE(st);
    CHECK(st->complete);
    CHECK(st->samples == 64);
    CHECK(st->batches == 4);
    REQUIRE(st->stages.size() == 4);  // read, map, map, collate
    const auto b = bottleneck(*st);
    named_slow += b.index == 1 && b.stage == "map";
    CHECK(b.index != 0);  // read is fast
    CHECK(b.index != 2);  // the second map is fast
    CHECK(b.index != 3);  // collate of 16 x 16 bytes is fast
    // The slow stage's busy time is about 64 ms an epoch (sampled 1 in 16, scaled back).
    CHECK(st->stages[1].busy_ns > 20'000'000ull);
  }
  CHECK(named_slow * 100 >= 95 * epochs);
  const auto whole = bottleneck(loader.stats());
  CHECK(whole.index == 1);
  CHECK(whole.share > 0.5);
  CHECK(whole.share <= 1.0);

  // The JSON report carries each epoch's figures and bottleneck; the trace its shares.
  const auto recent = loader.recent_epochs();
  REQUIRE(recent.size() == epoch_stats_kept);
  diag::json_writer w;
  diag::to_json(w, std::span<const epoch_stats>(recent));
  CHECK(w.complete());
  CHECK(w.str().find("\"bottleneck\":{\"stage\":\"map\",\"index\":1,\"share\":") != std::string::npos);
  CHECK(w.str().find("\"epoch\":19,\"complete\":true") != std::string::npos);
  diag::json_writer all;
  diag::to_json(all, loader.stats());
  CHECK(all.str().find("\"bottleneck\":{\"stage\":\"map\",\"index\":1,") != std::string::npos);
  diag::trace_recorder t;
  diag::record_epoch_counters(t, recent.back());
  const auto ev = t.events();
  REQUIRE(ev.size() == 5);  // four stages and the stall fraction
  CHECK(ev[0].name == "worker share: read");
  CHECK(ev[1].name == "worker share: map #1");
  CHECK(ev[2].name == "worker share: map #2");
  CHECK(ev[3].name == "worker share: collate");
  CHECK(ev[4].name == "epoch stall_fraction");
  CHECK(ev[1].value > 0.5);
  CHECK(ev[1].value > ev[2].value);
  // The advisor's observation of that epoch names the map stage.
  const auto o = diag::observe(recent.back(), 2);
  CHECK(o.bottleneck_stage == "map");
  CHECK(o.bottleneck_share > 0.5);
}

TEST_CASE("per-epoch figures add up to the cumulative ones, the ring keeps the last runs") {
  sluice_test::mem_reader r(300, 8);
  auto loader = from(sample::sequential(300)) | read(r) | map([](record_view v) { return v; }) |
                collate({.batch = 32}) | prefetch(2, {.workers = 2});
  CHECK(!loader.epoch_stats(0));  // nothing ran yet
  const std::uint64_t runs = epoch_stats_kept + 3;
  for (std::uint64_t e = 0; e < runs; ++e) {
    for (auto& b : loader.epoch(e)) {
      (void)b;
      std::this_thread::sleep_for(200us);
    }
  }
  const auto all = loader.stats();
  CHECK(!loader.epoch_stats(0));  // older than the last epoch_stats_kept runs
  CHECK(!loader.epoch_stats(2));
  const auto recent = loader.recent_epochs();
  REQUIRE(recent.size() == epoch_stats_kept);
  CHECK(recent.front().epoch == 3);
  CHECK(recent.back().epoch == runs - 1);
  std::uint64_t samples = 0, batches = 0;
  for (const auto& e : recent) {
    CHECK(e.complete);
    CHECK(e.samples == 300);
    CHECK(e.batches == 10);  // 9 full batches and one of 12
    CHECK(e.stages[0].calls == 300);
    CHECK(e.stages[2].calls == 300);
    CHECK(e.stall_fraction >= 0.0);
    CHECK(e.stall_fraction <= 1.0);
    CHECK(e.consumer_busy_ns >= 9 * 200'000ull);  // nine measured steps of >= 0.2 ms
    CHECK(e.wall_ns >= e.consumer_busy_ns);
    samples += e.samples;
    batches += e.batches;
  }
  CHECK(samples == all.samples - 3 * 300);
  CHECK(batches == all.batches - 3 * 10);
  const auto last = loader.epoch_stats(runs - 1);
  REQUIRE(last);
  CHECK(last->epoch == runs - 1);

  // A run the trainer leaves early is not complete; the same epoch run again replaces it in
  // epoch_stats(e) (the most recent run), the running epoch reports its figures so far.
  {
    auto range = loader.epoch(100);
    auto it = range.begin();
    ++it;
    const auto so_far = loader.epoch_stats(100);
    REQUIRE(so_far);
    CHECK(!so_far->complete);
    CHECK(so_far->batches >= 1);
    CHECK(so_far->batches <= 2);
  }
  for (auto& b : loader.epoch(101)) (void)b;
  const auto cut = loader.epoch_stats(100);
  REQUIRE(cut);
  CHECK(!cut->complete);
  CHECK(cut->batches == 2);
  for (auto& b : loader.epoch(100)) (void)b;
  const auto full = loader.epoch_stats(100);
  REQUIRE(full);
  CHECK(full->complete);
  CHECK(full->batches == 10);
}

TEST_CASE("stage timing off: no stage is timed and no bottleneck is named") {
  sluice_test::mem_reader r(200, 8);
  auto loader = from(sample::sequential(200)) | read(r) | map([](record_view v) { return v; }) |
                collate({.batch = 20}) | prefetch(2, {.workers = 1, .stage_timing = false});
  for (auto& b : loader.epoch(0)) (void)b;
  const auto st = loader.epoch_stats(0);
  REQUIRE(st);
  for (const auto& s : st->stages) CHECK(s.busy_ns == 0);
  CHECK(st->stages[1].calls == 200);  // calls are still counted
  CHECK(bottleneck(*st).stage.empty());
  CHECK(st->worker_busy_ns > 0);
}

TEST_CASE("batch stages are attributed too: pin and the copy of to_device (host backend), per batch") {
  sluice_test::mem_reader r(512, 4096);
  auto loader = from(sample::sequential(512)) | read(r) | collate({.batch = 64}) | pin() | to_device() |
                prefetch(2, {.workers = 1});
  for (std::uint64_t e = 0; e < 2; ++e)
    for (auto& b : loader.epoch(e)) (void)b;
  const auto st = loader.epoch_stats(1);
  REQUIRE(st);
  REQUIRE(st->stages.size() == 4);
  CHECK(st->stages[0].name == "read");
  CHECK(st->stages[1].name == "collate");
  CHECK(st->stages[2].name == "pin");
  CHECK(st->stages[3].name == "to_device");
  CHECK(st->stages[1].calls == 512);  // samples
  CHECK(st->stages[2].calls == 8);    // batches
  CHECK(st->stages[3].calls == 8);
  CHECK(st->stages[3].busy_ns > 0);   // the host backend copies 8 x 256 KiB
  std::uint64_t sum = 0;
  for (const auto& s : st->stages) sum += s.busy_ns;
  CHECK(sum <= st->worker_busy_ns + st->worker_busy_ns / 4);  // the hooks run inside worker busy time
  const auto all = loader.stats();
  REQUIRE(all.stages.size() == 4);
  CHECK(all.stages[3].name == "to_device");
  CHECK(all.stages[3].calls == 16);
}

namespace {
// A codec that spends `ms` milliseconds a sample (sleeping) and writes its input's first byte.
struct sleepy_codec {
  using codec_concept = codec_tag;
  int ms = 0;
  [[nodiscard]] std::size_t output_bytes() const noexcept { return 4; }
  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context&) const {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (auto& b : out) b = in.empty() ? std::byte{0} : in[0];
  }
};
using two_images = schema<field<"a", std::uint8_t, variable>, field<"b", std::uint8_t, variable>>;
struct two_image_reader {
  using reader_concept = reader_tag;
  std::vector<std::byte> bytes = std::vector<std::byte>(16, std::byte{7});
  [[nodiscard]] std::size_t size() const { return 48; }
  [[nodiscard]] std::string_view path() const { return "two"; }
  [[nodiscard]] fields_sample<two_images> fields(std::size_t i) const {
    fields_sample<two_images> s{.id = i, .origin = path()};
    s.set<"a">(std::span<const std::byte>(bytes));
    s.set<"b">(std::span<const std::byte>(bytes));
    return s;
  }
};
}  // namespace

TEST_CASE("two deferred decodes of one pipeline are each credited their own time, not one the other's") {
  two_image_reader r;
  // "a" is slow (2 ms a sample), "b" fast; collate writes "a" then "b" for each sample, so a single
  // shared slot for deferred time would credit both to "b".
  auto loader = from(sample::sequential(48)) | read(r) | decode<"a">(sleepy_codec{2}) | decode<"b">(sleepy_codec{0}) |
                collate({.batch = 8}, stack<"a">{}, stack<"b">{}) | prefetch(2, {.workers = 1});
  for (auto& b : loader.epoch(0)) (void)b;
  const auto st = loader.epoch_stats(0);
  REQUIRE(st);
  REQUIRE(st->stages.size() == 4);  // read, decode<"a">, decode<"b">, collate
  CHECK(st->stages[1].name == "decode<\"a\">");
  CHECK(st->stages[2].name == "decode<\"b\">");
  CHECK(st->stages[1].busy_ns >= 48 * 2'000'000ull * 9 / 10);  // ~96 ms of sleeping
  CHECK(st->stages[2].busy_ns < st->stages[1].busy_ns / 10);
  CHECK(st->stages[3].busy_ns < st->stages[1].busy_ns / 10);  // moved out of collate's time
  const auto b = bottleneck(*st);
  CHECK(b.stage == "decode<\"a\">");
}

TEST_CASE("an epoch ends with its last batch: a trainer that never asks past it is not timed through what follows") {
  // for i in range(len(loader)): next(it) — the trainer takes every batch and never sees the
  // end; what it does next (validation) is not the epoch's time, and the epoch is complete.
  sluice_test::mem_reader r(64, 8);
  auto loader = from(sample::sequential(64)) | read(r) | collate({.batch = 16}) | prefetch(2, {.workers = 1});
  {
    auto range = loader.epoch(0);
    auto it = range.begin();
    for (int k = 1; k < 4; ++k) {
      std::this_thread::sleep_for(1ms);
      ++it;
    }
    const auto taken = loader.epoch_stats(0);
    REQUIRE(taken);
    CHECK(taken->complete);
    CHECK(taken->batches == 4);
    CHECK(taken->steps == 3);
    std::this_thread::sleep_for(30ms);  // "validation"
    CHECK(loader.epoch_stats(0)->wall_ns == taken->wall_ns);
  }  // the range goes (a new epoch would start here): the run is filed as it ended
  const auto filed = loader.epoch_stats(0);
  REQUIRE(filed);
  CHECK(filed->complete);
  CHECK(filed->batches == 4);
  for (auto& b : loader.epoch(1)) (void)b;
  CHECK(loader.epoch_stats(0)->wall_ns == filed->wall_ns);
  CHECK(loader.recent_epochs().size() == 2);
}

TEST_CASE("an epoch's step spread is its own steps' standard deviation") {
  // One epoch: its spread equals the run's (stats().step_std_ns, kept by Welford's method).
  sluice_test::mem_reader r(96, 8);
  auto loader = from(sample::sequential(96)) | read(r) | collate({.batch = 8}) | prefetch(2, {.workers = 1});
  int k = 0;
  for (auto& b : loader.epoch(0)) {
    (void)b;
    std::this_thread::sleep_for(std::chrono::microseconds(k++ % 2 == 0 ? 300 : 2000));
  }
  const auto e = loader.epoch_stats(0);
  REQUIRE(e);
  CHECK(e->steps == 11);
  const auto s = loader.stats();
  CHECK(s.step_std_ns > 0);
  CHECK(e->step_std_ns == doctest::Approx(s.step_std_ns).epsilon(1e-6));
}
