#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sluice/core/random.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/loss_aware.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"
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

// ---------------------------------------------------------------------------------------------
// loss_aware: weights from fed-back losses, frozen per epoch.
namespace {
// Loss 10 for ids below `hot`, 0 for the rest, for every id in [0, n).
void feed_step(sample::loss_aware& s, std::uint64_t n, std::uint64_t hot) {
  std::vector<std::uint64_t> ids(n);
  std::vector<double> losses(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    ids[i] = i;
    losses[i] = i < hot ? 10.0 : 0.0;
  }
  s.feedback(ids, losses);
}
}  // namespace

TEST_CASE("loss_aware: draws shift toward high-loss samples from the next epoch, and the floor holds") {
  sample::loss_aware s(100, {.seed = 5, .uniform_share = 0.2});
  CHECK(s.size(0) == 100);
  for (double p : s.probabilities()) CHECK(p == doctest::Approx(0.01));  // no feedback: uniform
  const auto before = order(s, 0);
  feed_step(s, 100, 10);
  CHECK(order(s, 0) == before);  // feedback during epoch 0 leaves epoch 0 alone
  CHECK_THROWS_AS((void)s.at(1, 0), usage_error);  // epoch 1 not prepared yet
  s.prepare(1);
  const auto& p = s.probabilities();
  // P(i) = 0.2 / 100 + 0.8 * l_i / sum(l): 0.082 for the ten hot ids, the floor 0.002 for the rest.
  for (std::uint64_t i = 0; i < 100; ++i) CHECK(p[i] == doctest::Approx(i < 10 ? 0.082 : 0.002));
  const std::uint64_t draws = 200000;
  std::vector<std::uint64_t> count(100, 0);
  for (std::uint64_t pos = 0; pos < draws; ++pos) ++count[s.at(1, pos)];
  std::uint64_t hot = 0;
  for (std::uint64_t i = 0; i < 10; ++i) hot += count[i];
  CHECK(static_cast<double>(hot) / draws == doctest::Approx(0.82).epsilon(0.01));
  for (std::uint64_t i = 10; i < 100; ++i) {  // expected 400 each; none starves
    CHECK(count[i] > 300);
    CHECK(count[i] < 500);
  }
  // uniform_share 0: the zero-loss samples are never drawn (what the floor prevents).
  sample::loss_aware greedy(100, {.seed = 5, .uniform_share = 0.0});
  feed_step(greedy, 100, 10);
  greedy.prepare(1);
  for (std::uint64_t pos = 0; pos < 5000; ++pos) CHECK(greedy.at(1, pos) < 10);
}

TEST_CASE("loss_aware: a sample's loss is a moving average, and samples never fed back get the mean") {
  sample::loss_aware s(4, {.seed = 1, .uniform_share = 0.0, .alpha = 0.5});
  const std::vector<std::uint64_t> ids{0, 1, 0};
  const std::vector<float> losses{4.0f, 2.0f, 2.0f};
  s.feedback(ids, losses);
  const auto avg = s.average_losses();
  CHECK(avg[0] == doctest::Approx(3.0));  // 4, then 0.5 * 2 + 0.5 * 4
  CHECK(avg[1] == doctest::Approx(2.0));
  CHECK(s.samples_seen() == 2);
  s.prepare(1);
  // Ids 2 and 3 were never fed back: they count as the mean of the seen averages, 2.5.
  const auto& p = s.probabilities();
  CHECK(p[0] == doctest::Approx(3.0 / 10));
  CHECK(p[1] == doctest::Approx(2.0 / 10));
  CHECK(p[2] == doctest::Approx(2.5 / 10));
  CHECK(p[3] == doctest::Approx(2.5 / 10));
}

TEST_CASE("loss_aware: the same feedback gives the same epochs, other feedback other epochs") {
  auto run = [](std::uint64_t hot) {
    sample::loss_aware s(500, {.seed = 9});
    std::vector<std::vector<std::uint64_t>> epochs;
    for (std::uint64_t e = 0; e < 3; ++e) {
      s.prepare(e);
      epochs.push_back(order(s, e));
      feed_step(s, 500, hot + e);
    }
    return epochs;
  };
  const auto a = run(50), b = run(50), c = run(200);
  CHECK(a == b);
  CHECK(a[0] == c[0]);  // no feedback yet
  CHECK(a[1] != c[1]);
  CHECK(a[2] != c[2]);
  CHECK(a[1] != a[2]);
}

TEST_CASE("loss_aware: a saved and restored sampler yields the same next epochs, and a loader resumes with it") {
  sluice_test::mem_reader r(600, 8);
  const sample::loss_aware_options opt{.seed = 4, .uniform_share = 0.3};
  sample::loss_aware a(600, opt);
  feed_step(a, 600, 60);
  a.prepare(1);
  feed_step(a, 300, 30);  // part of epoch 1's feedback, before the interruption
  std::stringstream saved;
  a.save(saved);

  sample::loss_aware b(600, opt), fresh(600, opt);
  b.load(saved);
  CHECK(b.prepared_epoch() == 1);
  CHECK(order(b, 1) == order(a, 1));
  CHECK(b.fingerprint() == a.fingerprint());
  CHECK(!(fresh.fingerprint() == a.fingerprint()));  // other weights

  // The loader: epoch 1 interrupted at 4 batches, resumed with the restored sampler; a sampler
  // that was not restored is refused.
  auto make = [&](sample::loss_aware s) { return from(std::move(s)) | read(r) | collate({.batch = 50}) | prefetch(2, {.seed = 4}); };
  loader_state st;
  {
    auto la = make(a);
    std::size_t k = 0;
    for (auto& bt : la.epoch(1)) {
      (void)bt;
      if (++k == 4) {
        st = la.state();
        break;
      }
    }
  }
  CHECK(st.position == 200);
  std::vector<std::uint64_t> rest;
  {
    auto lb = make(b);
    for (auto& bt : lb.resume(st))
      for (auto id : bt.ids()) rest.push_back(id);
  }
  const auto full = order(a, 1);
  CHECK(rest == std::vector<std::uint64_t>(full.begin() + 200, full.end()));
  {
    sample::loss_aware c(600, opt);
    feed_step(c, 600, 60);  // same feedback, but epoch 1 is not prepared: other weights
    auto lc = make(c);
    CHECK_THROWS_AS((void)lc.resume(st), usage_error);
  }

  // The rest of epoch 1's feedback, then epoch 2 and 3: identical.
  for (auto* s : {&a, &b}) {
    feed_step(*s, 600, 10);
    s->prepare(2);
  }
  CHECK(order(a, 2) == order(b, 2));
  CHECK(a.probabilities() == b.probabilities());

  // A state from another population or options, or a truncated one, is refused.
  std::stringstream again;
  a.save(again);
  const std::string bytes = again.str();
  sample::loss_aware other(600, {.seed = 4, .uniform_share = 0.5});
  std::stringstream s1(bytes);
  CHECK_THROWS_AS(other.load(s1), usage_error);
  std::stringstream s2(bytes.substr(0, bytes.size() - 9));
  sample::loss_aware same(600, opt);
  CHECK_THROWS_AS(same.load(s2), usage_error);
  std::stringstream s3("not a state at all, not at all");
  CHECK_THROWS_AS(same.load(s3), usage_error);
}

TEST_CASE("loss_aware: feedback per batch while a 2-worker loader runs, and each epoch draws its frozen weights") {
  // Loss 5 for label 3, 0.1 for the rest, fed back per batch from the trainer thread while the
  // workers draw the prefetched batches. Run twice: the runs must match exactly.
  sluice_test::mem_reader r(2000, 16);
  auto run = [&] {
    sample::loss_aware s(2000, {.seed = 11, .uniform_share = 0.5});
    auto loader = from(s) | read(r) | collate({.batch = 32}) | prefetch(2, {.workers = 2, .seed = 11});
    std::vector<std::vector<std::uint64_t>> epochs;
    std::vector<double> losses;
    for (std::uint64_t e = 0; e < 3; ++e) {
      std::vector<std::uint64_t> ids;
      for (auto& b : loader.epoch(e)) {
        losses.clear();
        for (auto l : b.labels()) losses.push_back(l == 3 ? 5.0 : 0.1);
        s.feedback(b.ids(), losses);
        for (auto id : b.ids()) ids.push_back(id);
      }
      CHECK(s.prepared_epoch() == e);
      CHECK(ids == order(s, e));  // the loader drew exactly the weights frozen at the epoch's start
      epochs.push_back(std::move(ids));
    }
    return epochs;
  };
  const auto a = run(), b = run();
  CHECK(a == b);
  auto share3 = [](const std::vector<std::uint64_t>& ids) {
    double n = 0;
    for (auto id : ids) n += id % 10 == 3;
    return n / static_cast<double>(ids.size());
  };
  // Epoch 0 uniform (~0.1). Epoch 1: ~63 % of the ids were drawn in epoch 0; the rest count as the
  // mean seen loss (0.59), so label 3 gets 0.05 + 0.5 * (632 + 43) / 1180 = 0.336 in expectation.
  // Epoch 2: more ids seen, closer to 0.05 + 0.5 * 1000 / 1180 = 0.474.
  CHECK(share3(a[0]) < 0.15);
  CHECK(share3(a[1]) > 0.28);
  CHECK(share3(a[2]) > share3(a[1]));
  MESSAGE("label-3 share by epoch: ", share3(a[0]), " ", share3(a[1]), " ", share3(a[2]));
}

TEST_CASE("loss_aware: bad feedback is a usage_error naming the ids, and changes nothing") {
  sample::loss_aware s(100, std::vector<std::uint64_t>{1, 2, 3, 50}, {.seed = 2});
  CHECK(s.size(0) == 4);
  const std::vector<std::uint64_t> ok{1, 2};
  const std::vector<double> two{1.0, 2.0}, three{1.0, 2.0, 3.0};
  auto message = [&](std::span<const std::uint64_t> ids, std::span<const double> losses) {
    try {
      s.feedback(ids, losses);
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(ok, three).find("2 ids and 3 losses") != std::string::npos);
  const std::vector<std::uint64_t> outside{1, 100, 7, 2};  // 100: past the dataset; 7: not in the population
  const std::vector<double> four{1, 1, 1, 1};
  const auto m1 = message(outside, four);
  CHECK(m1.find("100") != std::string::npos);
  CHECK(m1.find("7") != std::string::npos);
  CHECK(m1.find("2 id(s)") != std::string::npos);
  const std::vector<double> nan{1.0, std::numeric_limits<double>::quiet_NaN()};
  CHECK(message(ok, nan).find("id(s) 2 (nan)") != std::string::npos);
  const std::vector<double> inf{std::numeric_limits<double>::infinity(), 1.0};
  CHECK(message(ok, inf).find("id(s) 1 (inf)") != std::string::npos);
  const std::vector<double> neg{1.0, -1.0};
  CHECK(message(ok, neg).find("id(s) 2") != std::string::npos);
  CHECK(s.samples_seen() == 0);  // none of the bad calls folded anything in
  CHECK(message(ok, two) == "no error");
  CHECK(s.samples_seen() == 2);
  // Bad construction.
  CHECK_THROWS_AS(sample::loss_aware(10, std::vector<std::uint64_t>{1, 1}), usage_error);
  CHECK_THROWS_AS(sample::loss_aware(10, std::vector<std::uint64_t>{10}), usage_error);
  CHECK_THROWS_AS(sample::loss_aware(10, {.uniform_share = 1.5}), usage_error);
  CHECK_THROWS_AS(sample::loss_aware(10, {.alpha = 0.0}), usage_error);
  CHECK_THROWS_AS(sample::loss_aware(0), usage_error);
}

TEST_CASE("any_sampler: the same batches and state as the sampler it holds, prepare forwarded, copies deep") {
  sluice_test::mem_reader r(500, 8);
  std::vector<std::int64_t> labels(500);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i < 400 ? 0 : 1 + i % 3);
  // An epoch-dependent rule: at() refuses an epoch that was not prepared, so a prepare() that
  // did not reach the held sampler fails the epoch.
  using cb = sample::class_balanced<sample::power_schedule>;
  auto ids_of = [&](auto order, std::uint64_t epoch, loader_state* st) {
    auto loader = from(std::move(order)) | read(r) | collate({.batch = 32}) | prefetch(2, {.workers = 2});
    std::vector<std::uint64_t> ids;
    for (auto& b : loader.epoch(epoch))
      for (auto id : b.ids()) ids.push_back(id);
    if (st != nullptr) *st = loader.state(epoch, 64);
    return ids;
  };
  for (std::uint64_t e : {0u, 3u}) {
    loader_state direct, erased;
    const auto want = ids_of(sample::distributed{cb(labels, {}, {.seed = 4}), {.rank = 1, .world = 2}}, e, &direct);
    const auto got = ids_of(sample::any_sampler(sample::distributed{cb(labels, {}, {.seed = 4}), {.rank = 1, .world = 2}}),
                            e, &erased);
    CHECK(got == want);
    CHECK(erased.fingerprint == direct.fingerprint);  // a state saved one way resumes the other
    CHECK(erased.fingerprint.sampler_kind == "distributed(class_balanced)");
  }
  // Another sampler or seed behind the same erased type is another fingerprint.
  sample::any_sampler a = sample::shuffle(500, {.seed = 1}), b = sample::shuffle(500, {.seed = 2});
  CHECK(a.fingerprint() != b.fingerprint());
  CHECK(a.inner<sample::shuffle>() != nullptr);
  CHECK(a.inner<sample::sequential>() == nullptr);
  // Copies are deep: preparing one does not prepare the other.
  sample::any_sampler c = cb(labels, {}, {.seed = 4});
  c.prepare(2);
  sample::any_sampler d = c;
  d.prepare(5);
  CHECK_NOTHROW((void)c.at(2, 0));
  CHECK_THROWS_AS((void)c.at(5, 0), usage_error);
  CHECK_NOTHROW((void)d.at(5, 0));
  CHECK(sample::any_sampler(sample::sequential(7)).size(0) == 7);
  // An lvalue sampler is copied in; a moved-from any_sampler copies as moved-from.
  const sample::shuffle sh(500, {.seed = 9});
  sample::any_sampler e(sh);
  CHECK(e.at(1, 3) == sh.at(1, 3));
  sample::any_sampler f = std::move(e);
  sample::any_sampler g = e;  // NOLINT(bugprone-use-after-move): what a copy of it does
  g = f;
  CHECK(g.at(2, 7) == sh.at(2, 7));
  // Where no reader names the dataset, the state takes the sampler's dataset_size(): forwarded.
  CHECK(sample::any_sampler(sample::shuffle(500, {})).dataset_size() == 500);
  CHECK(sample::any_sampler(sample::distributed{sample::sequential(5), {}}).dataset_size() ==
        state_fingerprint::unknown);
}
