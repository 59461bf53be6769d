// The loader's parts (core/detail/) tested alone: the epoch history and one batch's fill without a
// thread, the batch stage set's hook calls and failures, and the shared write's claim protocol
// with threads.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sluice/core/detail/batch_fill.hpp"
#include "sluice/core/detail/batch_stages.hpp"
#include "sluice/core/detail/epoch_history.hpp"
#include "sluice/core/detail/ring_slots.hpp"
#include "sluice/core/detail/shared_write.hpp"

using namespace sluice;

namespace {

constexpr std::size_t kStages = 2;  // two timed stages + the last index
using history = detail::epoch_history<kStages>;

history::snapshot snap(std::uint64_t epoch, std::uint64_t t, std::uint64_t batches) {
  history::snapshot s;
  s.epoch = epoch;
  s.t_ns = t;
  s.batches = batches;
  s.samples = batches * 4;
  for (std::size_t i = 0; i <= kStages; ++i) s.stage_ns[i] = t * (i + 1);
  return s;
}
const history::names kNames{"read", "decode", "collate"};

}  // namespace

TEST_CASE("epoch history: the running run, its end time, closed runs newest first, the oldest evicted") {
  history h;
  CHECK_FALSE(h.running());
  const auto none = [] { return std::pair{snap(0, 0, 0), false}; };
  CHECK_FALSE(h.of_epoch(0, kNames, none).has_value());
  CHECK(h.all(kNames, none).empty());

  // Epoch 0 runs from t=100 with 0 batches; at t=160 it has 6.
  h.open(snap(0, 100, 0));
  auto now = [] { return std::pair{snap(0, 160, 6), false}; };
  auto e0 = h.of_epoch(0, kNames, now);
  REQUIRE(e0.has_value());
  CHECK(e0->wall_ns == 60);
  CHECK(e0->batches == 6);
  CHECK(e0->samples == 24);
  CHECK_FALSE(e0->complete);
  REQUIRE(e0->stages.size() == 3);
  CHECK(e0->stages[1].name == "decode");
  CHECK(e0->stages[1].busy_ns == 120);

  // It ends at t=150: later snapshots do not move its end.
  h.mark_end(150);
  CHECK(h.ended());
  h.mark_end(170);  // a later mark (the trainer leaving after the last batch) keeps the first
  auto later = [] { return std::pair{snap(0, 900, 6), true}; };
  e0 = h.of_epoch(0, kNames, later);
  CHECK(e0->wall_ns == 50);
  CHECK(e0->complete);
  h.close(snap(0, 900, 6), true);
  CHECK_FALSE(h.running());
  e0 = h.of_epoch(0, kNames, none);
  REQUIRE(e0.has_value());
  CHECK(e0->wall_ns == 50);
  CHECK(e0->complete);
  h.close(snap(0, 999, 99), false);  // no run is open: nothing filed
  CHECK(h.all(kNames, none).size() == 1);

  // Epoch 0 again (a resumed run), not complete: the newest run of an epoch is the one found.
  h.open(snap(0, 1000, 6));
  h.close(snap(0, 1010, 7), false);
  e0 = h.of_epoch(0, kNames, none);
  CHECK(e0->wall_ns == 10);
  CHECK(e0->batches == 1);
  CHECK_FALSE(e0->complete);

  // 20 more runs: only closed_kept closed runs stay, oldest first, the running one last.
  for (std::uint64_t e = 1; e <= 20; ++e) {
    h.open(snap(e, 2000 + 100 * e, 10 * e));
    h.close(snap(e, 2000 + 100 * e + e, 10 * e + e), true);
  }
  h.open(snap(21, 9000, 500));
  const auto run21 = [] { return std::pair{snap(21, 9005, 502), false}; };
  const auto all = h.all(kNames, run21);
  REQUIRE(all.size() == history::closed_kept + 1);
  CHECK(history::closed_kept + 1 == epoch_stats_kept);
  for (std::size_t i = 0; i < history::closed_kept; ++i) {
    const std::uint64_t e = 21 - history::closed_kept + i;
    CHECK(all[i].epoch == e);
    CHECK(all[i].wall_ns == e);
    CHECK(all[i].batches == e);
  }
  CHECK(all.back().epoch == 21);
  CHECK(all.back().batches == 2);
  CHECK_FALSE(h.of_epoch(0, kNames, run21).has_value());  // evicted
  CHECK_FALSE(h.of_epoch(5, kNames, run21).has_value());  // evicted
  CHECK(h.of_epoch(6, kNames, run21).has_value());        // the oldest kept
}

namespace {

std::vector<std::string>* g_calls = nullptr;

struct state_a {
  int filled = 0;
};
struct stage_a {
  static constexpr std::string_view name = "stage_a";
  static constexpr hook hooks = hook::on_filled | hook::on_release;
  using slot_state = state_a;
  bool fail_filled = false;
  void on_filled(batch_slot&, state_a& st) {
    g_calls->push_back("a.on_filled");
    ++st.filled;
    if (fail_filled) throw std::runtime_error("a broke");
  }
  void on_release(batch_slot&, state_a&) { g_calls->push_back("a.on_release"); }
};
struct stage_b {
  static constexpr std::string_view name = "stage_b";
  static constexpr hook hooks = hook::on_filled | hook::before_fill | hook::storage;
  bool fail_filled = false;
  std::size_t allocated = 0, freed = 0;
  void before_fill(batch_slot&, no_slot_state&) { g_calls->push_back("b.before_fill"); }
  void on_filled(batch_slot&, no_slot_state&) {
    g_calls->push_back("b.on_filled");
    if (fail_filled) throw std::runtime_error("b broke");
  }
  void* allocate(std::size_t n) {
    allocated += n;
    return ::operator new(n);
  }
  void deallocate(void* p, std::size_t n) {
    freed += n;
    ::operator delete(p);
  }
};
struct stage_c {  // no hooks at all
  static constexpr std::string_view name = "stage_c";
  static constexpr hook hooks = hook::none;
};

template <class... S>
using slot_for = detail::slot<typename detail::batch_stage_set<S...>::states>;

std::string stage_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const stage_error& s) {
    return s.stage() + "/" + std::to_string(s.sample_id()) + "/" + s.cause();
  } catch (...) {
  }
  return "not a stage_error";
}

}  // namespace

TEST_CASE(
    "batch stage set: hooks in order on declaring stages only, stop or go on after a failure, the first failure named") {
  std::vector<std::string> calls;
  g_calls = &calls;
  std::tuple<stage_a, stage_c, stage_b> stages;
  using set = detail::batch_stage_set<stage_a, stage_c, stage_b>;
  set ss(stages);
  slot_for<stage_a, stage_c, stage_b> s;
  static_assert(set::checked<decltype(s)>);
  static_assert(!set::own_storage);

  CHECK(ss.invoke_hook<hook::on_filled>(s, 7, detail::on_hook_failure::go_on) == nullptr);
  CHECK(calls == std::vector<std::string>{"a.on_filled", "b.on_filled"});
  CHECK(std::get<0>(s.states).filled == 1);

  // `around` sees each call with the stage's index among the batch stages.
  calls.clear();
  std::vector<std::size_t> indices;
  (void)ss.invoke_hook<hook::on_filled>(s, 7, detail::on_hook_failure::go_on, [&](std::size_t i, auto&& call) {
    indices.push_back(i);
    call();
  });
  CHECK(indices == std::vector<std::size_t>{0, 2});

  // Both fail: go_on runs both and returns the first; stop runs the first only.
  std::get<0>(stages).fail_filled = std::get<2>(stages).fail_filled = true;
  calls.clear();
  auto e = ss.invoke_hook<hook::on_filled>(s, 7, detail::on_hook_failure::go_on);
  CHECK(calls == std::vector<std::string>{"a.on_filled", "b.on_filled"});
  CHECK(stage_of(e) == "stage_a/7/a broke");
  calls.clear();
  e = ss.invoke_hook<hook::on_filled>(s, 9, detail::on_hook_failure::stop);
  CHECK(calls == std::vector<std::string>{"a.on_filled"});
  CHECK(stage_of(e) == "stage_a/9/a broke");
  std::get<0>(stages).fail_filled = false;
  calls.clear();
  e = ss.invoke_hook<hook::on_filled>(s, 3, detail::on_hook_failure::stop);
  CHECK(calls == std::vector<std::string>{"a.on_filled", "b.on_filled"});
  CHECK(stage_of(e) == "stage_b/3/b broke");

  // A hook no stage declares calls nothing.
  calls.clear();
  CHECK(ss.invoke_hook<hook::on_deliver>(s, 0, detail::on_hook_failure::stop) == nullptr);
  CHECK(calls.empty());

  // Storage comes from the first stage that provides it.
  void* p = ss.allocate(128);
  CHECK(std::get<2>(stages).allocated == 128);
  ss.deallocate(p, 128);
  CHECK(std::get<2>(stages).freed == 128);

  // Without a providing stage the loader's own storage is cache-line aligned.
  std::tuple<stage_a> only_a;
  detail::batch_stage_set<stage_a> own(only_a);
  static_assert(detail::batch_stage_set<stage_a>::own_storage);
  void* q = own.allocate(256);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % cache_line == 0);
  own.deallocate(q, 256);
  g_calls = nullptr;
}

TEST_CASE("slot table: slots keep their address as the table grows, grown slots are told apart") {
  using slot_t = detail::slot<std::tuple<int>>;
  detail::slot_table<slot_t> t(3);
  CHECK(t.size() == 3);
  CHECK(t.base() == 3);
  slot_t* first = &t[0];
  std::vector<slot_t*> addresses;
  for (int i = 0; i < 40; ++i) {
    t.grow();
    addresses.push_back(&t[t.size() - 1]);
  }
  CHECK(t.size() == 43);
  CHECK(t.grown() == 40);
  CHECK(&t[0] == first);
  for (int i = 0; i < 40; ++i) CHECK(&t[3 + static_cast<std::size_t>(i)] == addresses[static_cast<std::size_t>(i)]);
  for (std::size_t i = 0; i < t.size(); ++i) {
    CHECK(t[i].stage_state == &t[i].states);
    CHECK(t.is_grown(t[i]) == (i >= 3));
  }
}

TEST_CASE("slot storage: grown to the high-water mark, by a quarter at least, in cache lines, never for what fits") {
  constexpr std::size_t line = 64;
  CHECK(detail::storage_size(0, 0, 0, line) == line);        // at least one line
  CHECK(detail::storage_size(0, 100, 0, line) == 128);       // rounded up to lines
  CHECK(detail::storage_size(0, 100, 1000, line) == 1024);   // brought up to the largest slot
  CHECK(detail::storage_size(1024, 1000, 1024, line) == 0);  // fits: keep it
  CHECK(detail::storage_size(1024, 1024, 1024, line) == 0);
  CHECK(detail::storage_size(1024, 1030, 1024, line) == 1280);  // grows by a quarter, not by 6 bytes
  CHECK(detail::storage_size(1024, 4000, 1024, line) == 4032);  // or to what it needs, if more
  CHECK(detail::storage_size(512, 100, 1024, line) == 1024);    // below the mark: brought up to it
  CHECK(detail::storage_size(1024, 100, 4096, line) == 4096);
  // A slowly growing field reallocates a few times, not once a batch.
  std::size_t have = 0, allocations = 0;
  for (std::size_t need = 1000; need < 100000; need += 100)
    if (const std::size_t w = detail::storage_size(have, need, have, line); w != 0) {
      CHECK(w >= need);
      have = w;
      ++allocations;
    }
  CHECK(allocations < 25);
}

TEST_CASE("slot warming: the first free slot without storage, until as many as allowed have storage or are in use") {
  using slot_t = detail::slot<std::tuple<int>>;
  detail::slot_table<slot_t> t(5);
  std::byte storage[64];
  CHECK(detail::warm_target(t, 3) == &t[0]);
  t[0].status = detail::slot_status::filling;  // in use counts, with or without storage
  CHECK(detail::warm_target(t, 3) == &t[1]);
  t[1].data = storage;  // free with storage counts
  CHECK(detail::warm_target(t, 3) == &t[2]);
  t[2].status = detail::slot_status::warming;
  CHECK(detail::warm_target(t, 3) == nullptr);  // 3 of 3: enough
  CHECK(detail::warm_target(t, 4) == &t[3]);
  t[3].data = storage;
  t[4].status = detail::slot_status::held;
  CHECK(detail::warm_target(t, 10) == nullptr);  // nothing left to warm
  t[1].data = nullptr;
  t[1].status = detail::slot_status::free;
  CHECK(detail::warm_target(t, 10) == &t[1]);
  CHECK(detail::warm_target(t, 0) == nullptr);
}

TEST_CASE("shared write: each sample claimed once, the lowest failure kept, nothing after it written") {
  constexpr std::size_t n = 5000;
  for (const std::size_t fail_at : {std::size_t{0}, std::size_t{777}, std::size_t{4999}, detail::no_failure}) {
    for (const std::size_t writers : {1, 4}) {
      struct slot_t {};
      detail::write_job<slot_t, int, int> job;
      job.reset(1, 7);
      job.n.store(n);
      std::vector<std::atomic<int>> written(n);
      std::atomic<std::size_t> total{0};
      const auto run = [&] {
        int plan = 0;
        total += job.write_chunks(
            plan, [] { return false; }, [] {},
            [&](std::size_t i, int&) {
              // A second failure, later in the order, must never replace the first.
              if (i == fail_at || (fail_at != detail::no_failure && i == fail_at + 500 && i < n))
                throw std::runtime_error("bad sample " + std::to_string(i));
              written[i].fetch_add(1);
            });
      };
      std::vector<std::thread> threads;
      for (std::size_t w = 1; w < writers; ++w) threads.emplace_back(run);
      run();
      for (auto& t : threads) t.join();
      CHECK(job.failed.load() == fail_at);
      const std::size_t end = fail_at == detail::no_failure ? n : fail_at;
      std::size_t ok = 0;
      for (std::size_t i = 0; i < end; ++i) ok += written[i].load() == 1;
      CHECK(ok == end);
      for (std::size_t i = 0; i < n; ++i) CHECK(written[i].load() <= 1);
      if (fail_at != detail::no_failure) {
        REQUIRE(job.error != nullptr);
        try {
          std::rethrow_exception(job.error);
        } catch (const std::runtime_error& e) {
          CHECK(std::string(e.what()) == "bad sample " + std::to_string(fail_at));
        }
        if (writers == 1) {  // one writer stops at the failure: nothing after it is written
          CHECK(total.load() == fail_at);
          std::size_t after = 0;
          for (std::size_t i = fail_at; i < n; ++i) after += written[i].load() != 0;
          CHECK(after == 0);
        }
      } else {
        CHECK(total.load() == n);
      }
    }
  }
}

TEST_CASE("shared write: a cancelled run stops within one sample") {
  struct slot_t {};
  detail::write_job<slot_t, int, int> job;
  job.reset(3, 1000);
  job.n.store(1000);
  int plan = 0;
  std::size_t calls = 0;
  const std::size_t wrote = job.write_chunks(
      plan, [&] { return calls >= 10; }, [] {}, [&](std::size_t, int&) { ++calls; });
  CHECK(wrote == 10);
  CHECK(calls == 10);
  CHECK(job.failed.load() == detail::no_failure);
}

namespace {

// A sample chain of one stage and a collator, each failing where a test says: what
// detail::batch_fill needs of them and nothing more. Sample i of the epoch is id 100 + i; the
// batch is one u32 tensor of the ids written in order.
struct fake_sampler {
  std::uint64_t at(std::uint64_t, std::uint64_t pos) const noexcept { return 100 + pos; }
};
struct fake_chain {
  using output_type = std::uint64_t;
  static constexpr std::size_t stage_count = 1;
  std::vector<std::uint64_t> fail_stage;  // ids whose stage throws
  const fake_sampler& sampler() const noexcept { return s; }
  template <bool Timed = false>
  std::uint64_t apply(std::uint64_t id, const sample_context&, std::string_view& origin,
                      std::uint64_t* ns = nullptr) const {
    origin = {};
    if (Timed && ns != nullptr) ns[0] += 1;
    for (auto f : fail_stage)
      if (f == id) throw stage_error("map", id, "stage broke");  // as sample_chain names a stage
    return id;
  }
  fake_sampler s;
};
struct fake_collate {
  static constexpr std::string_view name = "collate";
  struct scratch_type {
    std::size_t begun = 0, checked = 0, finished = 0;
  };
  std::vector<std::uint64_t> fail_check, fail_write;  // ids the check / the write refuse
  void begin(scratch_type& sc) const {
    ++sc.begun;
    sc.checked = 0;
  }
  void check(std::uint64_t id, scratch_type& sc) const {
    for (auto f : fail_check)
      if (f == id) throw std::runtime_error("check refused");
    ++sc.checked;
  }
  void plan(std::span<const std::uint64_t> samples, scratch_type&, batch_layout& l) const {
    const std::int64_t n = static_cast<std::int64_t>(samples.size());
    l.add("ids", dtype::u32, std::span<const std::int64_t>(&n, 1));
  }
  void finish(std::span<const std::uint64_t>, std::byte*, scratch_type& sc, const batch_layout&) const {
    ++sc.finished;
  }
};
using fill_t = detail::batch_fill<fake_chain, fake_collate>;
using fill_slot = detail::slot<std::tuple<>>;

// Runs a whole fill of positions [0, n) as the ring does; `cancel_after` cancels it after that
// many cancellation checks. Returns the ids written, in order (empty on error or cancel).
struct fill_result {
  bool completed = false;
  std::vector<std::uint64_t> written;
  std::uint64_t skipped = 0, skip_calls = 0, writes = 0;
  std::size_t begun = 0, finished = 0;
  std::string error;
};
fill_result run_fill(const fake_chain& chain, const fake_collate& col, std::uint64_t n, on_error errors,
                     std::size_t cancel_after = static_cast<std::size_t>(-1)) {
  fill_result r;
  const fill_t f(chain, col);
  fill_t::scratch_type ws;
  fill_slot s;
  std::vector<std::uint64_t> ids(n), storage;
  s.ids = ids.data();
  fill_t::tally t;
  std::uint64_t counter = 0;
  std::size_t checks = 0;
  const detail::fill_run run{.epoch = 3, .first = 0, .last = n, .errors = errors, .check_files = false};
  auto cancelled = [&] { return checks++ >= cancel_after; };
  auto skip = [&] { ++r.skip_calls; };
  bool ok = f.gather(run, ws, s.ids, counter, t, s.error, cancelled, skip);
  if (ok)
    ok = f.write(
        run, s, ws, t, cancelled,
        [&](fill_slot& sl, std::size_t bytes) {
          storage.assign((bytes + 7) / 8, 0);
          sl.data = reinterpret_cast<std::byte*>(storage.data());
        },
        [&](fill_slot& sl, fill_t::scratch_type& w) {
          ++r.writes;
          detail::write_outcome o;
          r.written.clear();
          for (std::size_t i = 0; i < w.samples.size(); ++i) {
            CHECK(sl.ids[i] == w.samples[i]);  // ids stay aligned with the samples
            CHECK(w.positions[i] + 100 == w.samples[i]);
            for (auto id : col.fail_write)
              if (id == w.samples[i]) {
                try {
                  throw std::runtime_error("write broke");
                } catch (...) {
                  o.failed = i;
                  o.error = std::current_exception();
                  return o;
                }
              }
            r.written.push_back(w.samples[i]);
          }
          return o;
        },
        skip);
  r.completed = ok;
  r.skipped = t.skipped;
  r.begun = ws.collate.begun;
  r.finished = ws.collate.finished;
  if (s.error) {
    r.error = stage_of(s.error);
    CHECK(s.layout.count == 0);  // an error leaves nothing planned
    r.written.clear();
  } else if (ok) {
    CHECK(s.layout.count == (ws.samples.empty() ? 0u : 1u));  // every sample skipped: nothing planned
    if (s.layout.count == 1) CHECK(s.layout.tensors[0].shape[0] == static_cast<std::int64_t>(r.written.size()));
  }
  return r;
}

}  // namespace

TEST_CASE("batch fill: every sample once in order, a skip drops and counts stage, check and write failures") {
  fake_chain chain;
  fake_collate col;
  auto r = run_fill(chain, col, 6, on_error::raise);
  CHECK(r.completed);
  CHECK(r.written == std::vector<std::uint64_t>{100, 101, 102, 103, 104, 105});
  CHECK(r.writes == 1);
  CHECK(r.finished == 1);
  CHECK(r.skipped == 0);

  // Raise: the first failure is the batch's error, named by the stage that failed.
  chain.fail_stage = {102};
  r = run_fill(chain, col, 6, on_error::raise);
  CHECK(r.error == "map/102/stage broke");
  CHECK(r.writes == 0);
  chain.fail_stage = {};
  col.fail_check = {101};
  r = run_fill(chain, col, 6, on_error::raise);
  CHECK(r.error == "collate/101/check refused");
  col.fail_check = {};
  col.fail_write = {104};
  r = run_fill(chain, col, 6, on_error::raise);
  CHECK(r.error == "collate/104/write broke");

  // Skip: a stage failure and a check failure are dropped before the write; a write failure
  // drops its sample, re-checks the rest and re-plans (one more begin and write).
  chain.fail_stage = {100};
  col.fail_check = {103};
  col.fail_write = {104};
  r = run_fill(chain, col, 6, on_error::skip);
  CHECK(r.completed);
  CHECK(r.error.empty());
  CHECK(r.written == std::vector<std::uint64_t>{101, 102, 105});
  CHECK(r.skipped == 3);
  CHECK(r.skip_calls == 3);
  CHECK(r.writes == 2);
  CHECK(r.begun == 2);
  CHECK(r.finished == 1);  // only the re-planned batch is finished

  // Every sample skipped: an empty batch, no write, no error.
  chain.fail_stage = {100, 101};
  col.fail_check = {};
  col.fail_write = {};
  r = run_fill(chain, col, 2, on_error::skip);
  CHECK(r.completed);
  CHECK(r.error.empty());
  CHECK(r.written.empty());
  CHECK(r.writes == 0);
  CHECK(r.skipped == 2);
}

TEST_CASE("batch fill: a cancelled fill returns false in either phase and writes nothing after") {
  fake_chain chain;
  fake_collate col;
  // Cancelled during gather (before the third sample).
  auto r = run_fill(chain, col, 6, on_error::raise, 2);
  CHECK_FALSE(r.completed);
  CHECK(r.writes == 0);
  // Cancelled at the write phase's first check (6 in gather, then 1).
  r = run_fill(chain, col, 6, on_error::raise, 6);
  CHECK_FALSE(r.completed);
  CHECK(r.writes == 0);
  // Cancelled right after the write: the batch is not finished.
  r = run_fill(chain, col, 6, on_error::raise, 7);
  CHECK_FALSE(r.completed);
  CHECK(r.writes == 1);
  CHECK(r.finished == 0);
  // Not cancelled: written and finished once.
  r = run_fill(chain, col, 6, on_error::raise);
  CHECK(r.completed);
  CHECK(r.finished == 1);
}
