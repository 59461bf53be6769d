// Tests for long-tail sampling: alias tables, weighted sampling with and without replacement,
// class weights, the class-balanced and balanced-batch samplers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/sample/alias.hpp"
#include "sluice/sample/balanced_batch.hpp"
#include "sluice/sample/class_balanced.hpp"
#include "sluice/sample/class_weights.hpp"

namespace ss = sluice::sample;
namespace cw = sluice::sample;

static_assert(sluice::sampler<ss::weighted>);
static_assert(sluice::preparing_sampler<ss::weighted>);
static_assert(sluice::sampler<ss::class_balanced<>>);
static_assert(sluice::sampler<ss::class_balanced<cw::power_schedule>>);
static_assert(sluice::sampler<ss::balanced_batch<>>);

namespace {
// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<std::uint64_t>& observed, const std::vector<double>& p, double draws) {
  double x2 = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * draws;
    if (e > 0) x2 += (static_cast<double>(observed[i]) - e) * (static_cast<double>(observed[i]) - e) / e;
  }
  return x2;
}
// Labels with a long tail: class c has about n0 * ratio^c samples (at least 1).
std::vector<std::int64_t> long_tail_labels(std::size_t classes, std::size_t n0, double ratio) {
  std::vector<std::int64_t> labels;
  for (std::size_t c = 0; c < classes; ++c) {
    auto n = std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(n0) * std::pow(ratio, c)));
    for (std::size_t i = 0; i < n; ++i) labels.push_back(static_cast<std::int64_t>(c));
  }
  // interleave so that ids of a class are not contiguous
  std::vector<std::int64_t> shuffled(labels.size());
  sluice::feistel_permutation perm(labels.size(), 99);
  for (std::size_t i = 0; i < labels.size(); ++i) shuffled[i] = labels[perm(i)];
  return shuffled;
}
}  // namespace

TEST_CASE("alias table: table probabilities equal the normalised weights") {
  std::vector<double> w{0.0, 1.0, 2.0, 3.0, 0.5, 10.0, 0.0, 7.25};
  ss::alias_table t(w);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  auto p = t.probabilities();
  for (std::size_t i = 0; i < w.size(); ++i) CHECK(p[i] == doctest::Approx(w[i] / total).epsilon(1e-8));
}

TEST_CASE("alias table: draws follow the weights (chi-square) and never return zero weights") {
  std::vector<double> w(50);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = (i % 7 == 3) ? 0.0 : 1.0 + static_cast<double>(i * i % 13);
  ss::weighted s(w, {.seed = 5, .samples_per_epoch = 200000});
  std::vector<std::uint64_t> seen(w.size(), 0);
  for (std::uint64_t pos = 0; pos < s.size(0); ++pos) ++seen[s.at(0, pos)];
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<double> p(w.size());
  std::size_t dof = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    p[i] = w[i] / total;
    if (w[i] == 0) CHECK(seen[i] == 0);
    else ++dof;
  }
  // dof-1 = 41 degrees of freedom; the 99.9 % quantile is about 74.
  CHECK(chi_square(seen, p, 200000.0) < 74.0);
}

TEST_CASE("alias table: rejects bad weights") {
  CHECK_THROWS_AS(ss::alias_table(std::vector<double>{}), sluice::usage_error);
  CHECK_THROWS_AS(ss::alias_table(std::vector<double>{0.0, 0.0}), sluice::usage_error);
  CHECK_THROWS_AS(ss::alias_table(std::vector<double>{1.0, -1.0}), sluice::usage_error);
  CHECK_THROWS_AS(ss::alias_table(std::vector<double>{1.0, NAN}), sluice::usage_error);
  CHECK_THROWS_AS(ss::alias_table(std::vector<double>{1.0, INFINITY}), sluice::usage_error);
}

namespace {
// The textbook two-stack Vose build (masses in an n-sized vector, std::round), written
// independently of alias_table::build, which must produce exactly the same columns.
std::vector<ss::alias_table::column> textbook_vose(const std::vector<double>& weights) {
  using column = ss::alias_table::column;
  const std::size_t n = weights.size();
  double total = 0;
  for (double w : weights) total += w;
  std::vector<column> columns(n);
  std::vector<double> scaled(n);
  std::vector<std::uint32_t> small, large;
  const double scale = static_cast<double>(n) / total;
  for (std::size_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * scale;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<std::uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const std::uint32_t s = small.back(), l = large.back();
    small.pop_back();
    const double t = std::round(scaled[s] * 0x1.0p32);
    columns[s] = t >= 0x1.0p32 ? column{0, s} : column{static_cast<std::uint32_t>(t), l};
    scaled[l] = (scaled[l] + scaled[s]) - 1.0;
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  for (std::uint32_t i : large) columns[i] = column{0, i};
  for (std::uint32_t i : small) columns[i] = column{0, i};
  return columns;
}
std::vector<double> lognormal_weights(std::size_t n, std::uint64_t seed, double sigma) {
  std::vector<double> w(n);
  sluice::counter_rng rng(seed);
  for (auto& x : w) {
    // Box-Muller from two uniforms in (0, 1)
    const double u1 = rng.uniform() + 0x1.0p-54, u2 = rng.uniform();
    x = std::exp(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return w;
}
}  // namespace

TEST_CASE("alias table: the single-pass build gives exactly the textbook Vose columns") {
  std::vector<std::vector<double>> cases;
  cases.push_back({1.0});
  cases.push_back({0.0, 3.0});
  cases.push_back({0.0, 1.0, 2.0, 3.0, 0.5, 10.0, 0.0, 7.25});
  cases.push_back(std::vector<double>(1000, 2.5));                  // all exactly full
  cases.push_back(lognormal_weights(100'003, 1, 2.0));               // heavy tail
  cases.push_back(lognormal_weights(4'097, 2, 0.1));                 // nearly uniform
  auto one_giant = lognormal_weights(5'000, 3, 1.0);
  one_giant[1234] = 1e12;                                            // one column feeds all
  cases.push_back(one_giant);
  auto with_zeros = lognormal_weights(20'011, 4, 3.0);
  for (std::size_t i = 0; i < with_zeros.size(); i += 3) with_zeros[i] = 0.0;
  cases.push_back(with_zeros);
  std::vector<double> tiny_and_huge(3'001);
  for (std::size_t i = 0; i < tiny_and_huge.size(); ++i)
    tiny_and_huge[i] = (i % 5 == 0) ? 1e200 : 1e-200 * static_cast<double>(i);
  cases.push_back(tiny_and_huge);
  for (const auto& w : cases) {
    CAPTURE(w.size());
    ss::alias_table t(w);
    const auto expected = textbook_vose(w);
    const auto got = t.columns();
    REQUIRE(got.size() == expected.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < got.size(); ++i) mismatches += !(got[i] == expected[i]);
    CHECK(mismatches == 0);
    // Rebuilding the same table object over other weights starts clean.
    t.build(std::vector<double>{1.0, 1.0, 2.0});
    CHECK(t.size() == 3);
  }
}

TEST_CASE("weighted: draw_n gives exactly at()'s ids, element by element") {
  const std::size_t group = ss::alias_table::draw_group;
  for (std::size_t n_weights : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100'003}}) {
    const auto w = lognormal_weights(n_weights, 10 + n_weights, 2.0);
    const ss::weighted s(w, {.seed = 21});
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, group - 1, group, group + 1, 3 * group + 5, std::size_t{1001}}) {
      for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{17}, ~std::uint64_t{0} - 40}) {  // last one wraps
        CAPTURE(n_weights);
        CAPTURE(count);
        CAPTURE(first);
        std::vector<std::uint64_t> bulk(count, ~std::uint64_t{0});
        s.draw_n(5, first, bulk);
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < count; ++i) mismatches += bulk[i] != s.at(5, first + i);
        CHECK(mismatches == 0);
      }
    }
  }
  // Without replacement: the prepared order, with at()'s checks.
  std::vector<double> w(300, 1.0);
  ss::weighted wo(w, {.seed = 4, .samples_per_epoch = 100, .mode = ss::replacement::without});
  wo.prepare(2);
  std::vector<std::uint64_t> bulk(100);
  wo.draw_n(2, 0, bulk);
  for (std::uint64_t p = 0; p < bulk.size(); ++p) CHECK(bulk[p] == wo.at(2, p));
  std::vector<std::uint64_t> past_end(2);
  CHECK_THROWS_AS(wo.draw_n(2, 99, past_end), sluice::usage_error);
  CHECK_THROWS_AS(wo.draw_n(3, 0, past_end), sluice::usage_error);
}

TEST_CASE("alias table: draw_n over given random words equals draw()") {
  const auto w = lognormal_weights(50'000, 77, 2.0);
  const ss::alias_table t(w);
  sluice::counter_rng rng(9);
  const std::size_t count = 3 * ss::alias_table::draw_group + 11;
  std::vector<std::uint64_t> picks(count), coins(count), out(count);
  for (std::size_t i = 0; i < count; ++i) picks[i] = rng(), coins[i] = rng();
  picks[0] = 0;
  picks[1] = ~std::uint64_t{0};  // first and last column
  t.draw_n(picks, coins, out);
  for (std::size_t i = 0; i < count; ++i) CHECK(out[i] == t.draw(picks[i], coins[i]));
  std::vector<std::uint64_t> short_out(count - 1);
  CHECK_THROWS_AS(t.draw_n(picks, coins, short_out), sluice::usage_error);
}

TEST_CASE("weighted: at() is pure — same ids for any thread split and any order") {
  std::vector<double> w(1000);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 1.0 / (1.0 + static_cast<double>(i));
  ss::weighted s(w, {.seed = 11});
  std::vector<std::uint64_t> serial(s.size(3));
  for (std::uint64_t p = 0; p < serial.size(); ++p) serial[p] = s.at(3, p);
  std::vector<std::uint64_t> threaded(serial.size());
  {
    std::vector<std::jthread> ts;
    for (unsigned t = 0; t < 4; ++t)
      ts.emplace_back([&, t] {
        for (std::uint64_t p = serial.size(); p-- > 0;)  // backwards: order must not matter
          if (p % 4 == t) threaded[p] = s.at(3, p);
      });
  }
  CHECK(serial == threaded);
  // Different epochs and seeds give different sequences.
  std::size_t same_epoch = 0, same_seed = 0;
  ss::weighted other_seed(w, {.seed = 12});
  for (std::uint64_t p = 0; p < serial.size(); ++p) {
    same_epoch += s.at(4, p) == serial[p];
    same_seed += other_seed.at(3, p) == serial[p];
  }
  CHECK(same_epoch < serial.size() / 4);
  CHECK(same_seed < serial.size() / 4);
}

TEST_CASE("weighted without replacement: each id at most once, heavier ids included more often") {
  const std::size_t n = 200;
  std::vector<double> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = (i < 100) ? 1.0 : 4.0;
  w[7] = 0.0;
  ss::weighted s(w, {.seed = 3, .samples_per_epoch = 50, .mode = ss::replacement::without});
  CHECK_THROWS_AS((void)s.at(0, 0), sluice::usage_error);  // not prepared
  std::vector<double> included(n, 0);
  const int epochs = 400;
  for (int e = 0; e < epochs; ++e) {
    s.prepare(static_cast<std::uint64_t>(e));
    std::set<std::uint64_t> ids;
    for (std::uint64_t p = 0; p < s.size(e); ++p) ids.insert(s.at(static_cast<std::uint64_t>(e), p));
    CHECK(ids.size() == 50);
    CHECK(ids.count(7) == 0);
    for (auto id : ids) included[id] += 1.0 / epochs;
  }
  double light = 0, heavy = 0;
  for (std::size_t i = 0; i < 100; ++i) light += included[i] / 99.0;
  for (std::size_t i = 100; i < n; ++i) heavy += included[i] / 100.0;
  // Expected: the first 50 of a weighted order; heavy ids (4x weight) should dominate but light
  // ones must still appear. Ratio of inclusion rates is well above 1 and below the weight ratio's
  // unsaturated value is not required — only monotone and substantial.
  CHECK(heavy > 2.0 * light);
  CHECK(light > 0.01);
  // Sum of inclusion rates equals samples per epoch.
  CHECK(std::accumulate(included.begin(), included.end(), 0.0) == doctest::Approx(50.0));
  // A full-size epoch is a permutation of the nonzero ids.
  ss::weighted full(w, {.seed = 3, .mode = ss::replacement::without});
  full.prepare(1);
  std::set<std::uint64_t> all;
  for (std::uint64_t p = 0; p < full.size(1); ++p) all.insert(full.at(1, p));
  CHECK(all.size() == n - 1);
  CHECK(full.size(1) == n - 1);
}

TEST_CASE("class weights: the rules' formulas and masses") {
  std::vector<std::uint64_t> counts{1000, 100, 10, 1, 0};
  auto inv = cw::class_weights(counts, cw::inverse_frequency{});
  CHECK(inv[0] == doctest::Approx(1e-3));
  CHECK(inv[4] == 0.0);
  auto mass_inv = cw::class_mass(counts, cw::inverse_frequency{});
  for (int c = 0; c < 4; ++c) CHECK(mass_inv[c] == doctest::Approx(0.25));
  CHECK(mass_inv[4] == 0.0);

  auto lg = cw::class_weights(counts, cw::inverse_log{});
  CHECK(lg[1] == doctest::Approx(1.0 / std::log(101.0)));

  // effective number: E_n = (1 - b^n)/(1 - b); weight 1/E_n
  cw::effective_number en{0.99};
  auto ew = cw::class_weights(counts, en);
  for (int c = 0; c < 4; ++c) {
    const double n = static_cast<double>(counts[c]);
    CHECK(ew[c] == doctest::Approx((1 - 0.99) / (1 - std::pow(0.99, n))));
  }
  CHECK(ew[3] == doctest::Approx(1.0));  // one sample: E_1 = 1
  // beta -> 1 approaches class-balanced, beta = 0 is instance-balanced (weight 1 each).
  auto m_near1 = cw::class_mass(counts, cw::effective_number{0.999999});
  CHECK(m_near1[0] / m_near1[3] == doctest::Approx(1.0).epsilon(0.01));
  auto w0 = cw::class_weights(counts, cw::effective_number{0.0});
  CHECK(w0[0] == doctest::Approx(1.0));
  CHECK(w0[2] == doctest::Approx(1.0));
  CHECK_THROWS_AS((void)cw::effective_number{1.0}.weight(3), sluice::usage_error);

  // power family: mass ∝ n^q
  auto m_sqrt = cw::class_mass(counts, cw::power{0.5});
  CHECK(m_sqrt[0] / m_sqrt[2] == doctest::Approx(std::sqrt(100.0)));
  auto m_inst = cw::class_mass(counts, cw::power{1.0});
  CHECK(m_inst[0] / m_inst[1] == doctest::Approx(10.0));
  auto m_bal = cw::class_mass(counts, cw::power{0.0});
  CHECK(m_bal[0] == doctest::Approx(m_bal[3]));

  // schedule: q goes 1 -> 0 over 4 epochs, then stays at 0
  cw::power_schedule sched{.q_first = 1.0, .q_last = 0.0, .epochs = 4};
  CHECK(sched.q_at(0) == doctest::Approx(1.0));
  CHECK(sched.q_at(2) == doctest::Approx(0.5));
  CHECK(sched.q_at(4) == doctest::Approx(0.0));
  CHECK(sched.q_at(100) == doctest::Approx(0.0));

  // normalisation for loss weights: mean per-sample weight 1
  auto nw = cw::normalize_per_sample(inv, counts);
  double sum = 0, n = 0;
  for (std::size_t c = 0; c < counts.size(); ++c) { sum += nw[c] * counts[c]; n += counts[c]; }
  CHECK(sum / n == doctest::Approx(1.0));
}

TEST_CASE("class_balanced: class shares follow the rule on a long-tailed label set") {
  auto labels = long_tail_labels(10, 2000, 0.5);  // 2000, 1000, ..., ~4
  labels[5] = -1;                                  // one unlabelled sample: never drawn
  ss::class_balanced<cw::inverse_frequency> s(labels, {}, {.seed = 17, .samples_per_epoch = 100000});
  std::vector<std::uint64_t> per_class(10, 0);
  for (std::uint64_t p = 0; p < s.size(0); ++p) {
    const auto id = s.at(0, p);
    REQUIRE(labels[id] >= 0);
    ++per_class[static_cast<std::size_t>(labels[id])];
  }
  std::vector<double> expected(10, 0.1);
  CHECK(chi_square(per_class, expected, 100000.0) < 27.9);  // 9 dof, 99.9 %
  // square-root rule: mass ∝ sqrt(n)
  ss::class_balanced<cw::power> sq(labels, cw::power{0.5}, {.seed = 17, .samples_per_epoch = 100000});
  auto pc = sq.class_probabilities();
  auto counts = sq.class_counts();
  CHECK(pc[0] / pc[4] == doctest::Approx(std::sqrt(double(counts[0]) / counts[4])));
  // per-sample probabilities sum to 1 and are 0 for the unlabelled id
  auto ps = s.sample_probabilities();
  CHECK(std::accumulate(ps.begin(), ps.end(), 0.0) == doctest::Approx(1.0));
  CHECK(ps[5] == 0.0);
}

TEST_CASE("class_balanced: a q schedule moves from instance- to class-balanced, needs prepare") {
  auto labels = long_tail_labels(5, 1000, 0.2);
  ss::class_balanced<cw::power_schedule> s(labels, {.q_first = 1.0, .q_last = 0.0, .epochs = 2}, {.seed = 1});
  auto p0 = s.class_probabilities();
  auto counts = s.class_counts();
  CHECK(p0[0] / p0[1] == doctest::Approx(double(counts[0]) / counts[1]));
  CHECK_THROWS_AS((void)s.at(2, 0), sluice::usage_error);
  s.prepare(2);
  auto p2 = s.class_probabilities();
  CHECK(p2[0] == doctest::Approx(p2[4]));
  CHECK_NOTHROW((void)s.at(2, 0));
}

TEST_CASE("balanced_batch: every batch keeps each class within floor/ceil of its target") {
  auto labels = long_tail_labels(7, 3000, 0.4);
  const std::uint64_t b = 50;
  for (int rule = 0; rule < 2; ++rule) {
    std::vector<double> shares;
    std::vector<std::vector<std::uint64_t>> batches;
    auto run = [&](auto& s) {
      shares = s.class_shares();
      for (std::uint64_t e = 0; e < 3; ++e) {
        s.prepare(e);
        for (std::uint64_t k = 0; k < s.size(e) / b; ++k) {
          std::vector<std::uint64_t> cnt(shares.size(), 0);
          for (std::uint64_t p = 0; p < b; ++p) ++cnt[static_cast<std::size_t>(labels[s.at(e, k * b + p)])];
          batches.push_back(cnt);
        }
      }
    };
    if (rule == 0) {
      ss::balanced_batch<> s(labels, {}, {.seed = 9, .batch = b});
      run(s);
    } else {
      ss::balanced_batch<cw::power> s(labels, cw::power{0.5}, {.seed = 9, .batch = b});
      run(s);
    }
    std::vector<double> mean(shares.size(), 0);
    for (const auto& cnt : batches)
      for (std::size_t c = 0; c < cnt.size(); ++c) {
        const double target = static_cast<double>(b) * shares[c];
        CHECK(static_cast<double>(cnt[c]) >= std::floor(target) - 1e-9);
        CHECK(static_cast<double>(cnt[c]) <= std::ceil(target) + 1e-9);
        mean[c] += static_cast<double>(cnt[c]) / static_cast<double>(batches.size());
      }
    // and on average each class gets its share (unbiased offsets)
    for (std::size_t c = 0; c < shares.size(); ++c) CHECK(mean[c] == doctest::Approx(b * shares[c]).epsilon(0.05));
  }
}

TEST_CASE("balanced_batch: deterministic, and the batch order is shuffled within a batch") {
  auto labels = long_tail_labels(4, 400, 0.5);
  ss::balanced_batch<> a(labels, {}, {.seed = 2, .batch = 32});
  ss::balanced_batch<> b(labels, {}, {.seed = 2, .batch = 32});
  std::size_t sorted_batches = 0, k_total = a.size(0) / 32;
  for (std::uint64_t k = 0; k < k_total; ++k) {
    std::vector<std::int64_t> ls;
    for (std::uint64_t p = 0; p < 32; ++p) {
      CHECK(a.at(1, k * 32 + p) == b.at(1, k * 32 + p));
      ls.push_back(labels[a.at(1, k * 32 + p)]);
    }
    sorted_batches += std::is_sorted(ls.begin(), ls.end());
  }
  CHECK(sorted_batches < k_total);
}

#include "sluice/sample/length_bucket.hpp"
#include "sluice/sample/shuffle.hpp"

TEST_CASE("length_bucketed: a permutation each epoch, deterministic, and far less padding than shuffling") {
  // Skewed lengths: lognormal-like, many short sequences and a long tail (8 .. ~2000 tokens).
  std::vector<std::uint32_t> lengths(20000);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    sluice::counter_rng g(1, 0, i);
    const double u = g.uniform();
    lengths[i] = static_cast<std::uint32_t>(8 + 2000 * u * u * u * u);
  }
  ss::length_bucketed s(lengths, {.seed = 4, .batch = 32, .pool_batches = 64});
  CHECK_THROWS_AS((void)s.at(0, 0), sluice::usage_error);
  for (std::uint64_t e = 0; e < 2; ++e) {
    s.prepare(e);
    std::vector<char> seen(lengths.size(), 0);
    for (std::uint64_t p = 0; p < s.size(e); ++p) ++seen[s.at(e, p)];
    CHECK(std::all_of(seen.begin(), seen.end(), [](char c) { return c == 1; }));
  }
  ss::length_bucketed again(lengths, {.seed = 4, .batch = 32, .pool_batches = 64});
  again.prepare(1);
  bool same = true;
  for (std::uint64_t p = 0; p < s.size(1); ++p) same = same && again.at(1, p) == s.at(1, p);
  CHECK(same);
  ss::shuffle plain(lengths.size(), {.seed = 4});
  auto bucketed = ss::padding_report(lengths, s, 1, 32);
  auto shuffled = ss::padding_report(lengths, plain, 1, 32);
  MESSAGE("padding: shuffled " << shuffled.padding_fraction() << ", bucketed " << bucketed.padding_fraction());
  CHECK(bucketed.tokens == shuffled.tokens);
  CHECK(bucketed.padded_tokens * 3 < shuffled.padded_tokens);
  // A pool of one batch is plain shuffling: no saving.
  ss::length_bucketed nopool(lengths, {.seed = 4, .batch = 32, .pool_batches = 1});
  CHECK(ss::padding_report(lengths, nopool, 1, 32).padding_fraction() > 0.5);
}
