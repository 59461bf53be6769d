// resident_dataset on Thrust's CPP backend: each epoch's order equals the host sampler's at every
// position; each batch's bytes, labels and ids equal a host gather of the same records; the
// normalised floats equal sluice::normalize's bit for bit; the last short batch, drop_last, rank
// shards, random access to batches, and every usage error.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sluice/core/batch_ops.hpp"
#include "sluice/cuda/resident.hpp"
#include "resident_data.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/sample/shuffle.hpp"

namespace {

using sluice::cuda::resident_dataset;

using sluice_resident_test::data;

// The host reference: records `ids` one after another.
std::vector<std::uint8_t> host_gather(const data& d, const std::uint64_t* ids, std::size_t count) {
  std::vector<std::uint8_t> out(count * d.rb);
  for (std::size_t j = 0; j < count; ++j) std::memcpy(out.data() + j * d.rb, d.bytes.data() + ids[j] * d.rb, d.rb);
  return out;
}

// Every batch of `ep` against the host sampler `s`: ids, bytes, labels, sizes; returns samples seen.
template <class Sampler>
std::size_t check_epoch(const data& d, sluice::cuda::resident_epoch ep, const Sampler& s, std::uint64_t e,
                        std::size_t batch, bool drop_last) {
  const std::size_t total = s.size(e);
  REQUIRE(ep.samples() == total);
  REQUIRE(ep.size() == (drop_last ? total / batch : (total + batch - 1) / batch));
  std::size_t seen = 0, k = 0;
  for (const auto& b : ep) {
    CHECK(b.index == k);
    CHECK(b.epoch == e);
    const std::size_t want = total - k * batch < batch ? total - k * batch : batch;
    REQUIRE(b.size == want);
    std::vector<std::uint64_t> ids(b.size);
    for (std::size_t j = 0; j < b.size; ++j) ids[j] = s.at(e, k * batch + j);
    CHECK(std::vector<std::uint64_t>(b.ids, b.ids + b.size) == ids);
    const auto ref = host_gather(d, ids.data(), ids.size());
    REQUIRE(b.bytes != nullptr);
    CHECK(std::memcmp(b.bytes, ref.data(), ref.size()) == 0);
    for (std::size_t j = 0; j < b.size; ++j) CHECK(b.labels[j] == d.labels[ids[j]]);
    seen += b.size;
    ++k;
  }
  CHECK(k == ep.size());
  return seen;
}

}  // namespace

TEST_CASE("resident: each epoch's order is sample::shuffle's at every position") {
  for (std::size_t n : {1u, 2u, 3u, 7u, 64u, 100u, 1000u, 4097u}) {
    data d(n, 3);
    resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 32});
    for (std::uint64_t seed : {0ull, 7ull, 123456789ull}) {
      sluice::sample::shuffle s{n, {.seed = seed}};
      for (std::uint64_t e : {0ull, 1ull, 5ull}) {
        const auto ids = ds.epoch(e, s).ids_on_host();
        REQUIRE(ids.size() == n);
        std::size_t mismatches = 0;
        for (std::uint64_t p = 0; p < n; ++p) mismatches += ids[p] != s.at(e, p);
        INFO("n=" << n << " seed=" << seed << " epoch=" << e);
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("resident: sequential order, and epoch(e) without a sampler is sequential") {
  data d(50, 4);
  resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 8});
  std::vector<std::uint64_t> seq(50);
  for (std::size_t i = 0; i < seq.size(); ++i) seq[i] = i;
  CHECK(ds.epoch(3).ids_on_host() == seq);
  CHECK(ds.epoch(3, sluice::sample::sequential{50}).ids_on_host() == seq);
  CHECK(check_epoch(d, ds.epoch(2), sluice::sample::sequential{50}, 2, 8, false) == 50);
}

TEST_CASE("resident: batches hold the host gather of their records, labels and ids, last batch short") {
  for (std::size_t rb : {1u, 5u, 8u, 784u}) {
    data d(1000, rb);
    resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 64});
    sluice::sample::shuffle s{1000, {.seed = 42}};
    for (std::uint64_t e : {0ull, 1ull}) {
      INFO("record_bytes=" << rb << " epoch=" << e);
      CHECK(check_epoch(d, ds.epoch(e, s), s, e, 64, false) == 1000);  // 15 full batches + 40
    }
  }
}

TEST_CASE("resident: drop_last leaves out the short batch, a batch above n gives one short batch") {
  data d(1000, 6);
  sluice::sample::shuffle s{1000, {.seed = 3}};
  resident_dataset dropped(d.bytes, d.rb, d.labels, {.batch = 64, .drop_last = true});
  CHECK(dropped.epoch(1, s).size() == 15);
  CHECK(check_epoch(d, dropped.epoch(1, s), s, 1, 64, true) == 960);
  resident_dataset big(d.bytes, d.rb, d.labels, {.batch = 4096});
  CHECK(check_epoch(d, big.epoch(0, s), s, 0, 4096, false) == 1000);
  resident_dataset big_dropped(d.bytes, d.rb, d.labels, {.batch = 4096, .drop_last = true});
  CHECK(big_dropped.epoch(0, s).size() == 0);
}

TEST_CASE("resident: normalised floats equal sluice::normalize of the host batch, bit for bit") {
  data d(300, 12);
  sluice::normalize_params grey{1};
  grey.set(0, 72.9f, 90.0f);
  sluice::normalize_params rgb{3};
  rgb.set(0, 123.7f, 58.4f).set(1, 116.3f, 57.1f).set(2, 103.5f, 57.4f);
  sluice::sample::shuffle s{300, {.seed = 9}};
  for (const auto& p : {grey, rgb})
  for (bool bytes : {true, false}) {
    INFO("channels=" << p.channels << " bytes=" << bytes);
    resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 128, .bytes = bytes, .normalize = p});
    std::size_t k = 0, mismatches = 0;
    for (const auto& b : ds.epoch(4, s)) {
      CHECK((b.bytes != nullptr) == bytes);
      REQUIRE(b.normalized != nullptr);
      std::vector<std::uint64_t> ids(b.size);
      for (std::size_t j = 0; j < b.size; ++j) ids[j] = s.at(4, k * 128 + j);
      const auto raw = host_gather(d, ids.data(), ids.size());
      std::vector<float> ref(raw.size());
      sluice::normalize(std::span<const std::uint8_t>(raw), std::span<float>(ref), p);
      for (std::size_t i = 0; i < ref.size(); ++i)
        mismatches += std::bit_cast<std::uint32_t>(b.normalized[i]) != std::bit_cast<std::uint32_t>(ref[i]);
      ++k;
    }
    CHECK(k == 3);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("resident: rank shards follow sample::distributed over shuffle and sequential") {
  using sluice::sample::distributed;
  data d(1001, 4);
  resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 50});
  for (auto tail : {sluice::sample::tail::pad, sluice::sample::tail::drop}) {
    for (std::uint64_t start : {0ull, 17ull}) {
      std::size_t total = 0;
      for (std::uint64_t rank = 0; rank < 3; ++rank) {
        INFO("rank=" << rank << " start=" << start << " pad=" << (tail == sluice::sample::tail::pad));
        distributed<sluice::sample::shuffle> s{sluice::sample::shuffle{1001, {.seed = 5}},
                                               {.rank = rank, .world = 3, .tail = tail, .start = start}};
        total += check_epoch(d, ds.epoch(2, s), s, 2, 50, false);
        distributed<sluice::sample::sequential> q{sluice::sample::sequential{1001},
                                                  {.rank = rank, .world = 3, .tail = tail, .start = start}};
        check_epoch(d, ds.epoch(2, q), q, 2, 50, false);
      }
      CHECK(total == (tail == sluice::sample::tail::pad ? (1001 - start + 2) / 3 * 3 : (1001 - start) / 3 * 3));
    }
  }
}

TEST_CASE("resident: batch(k) in any order (resume), and an epoch replaced by a later one throws") {
  data d(200, 7);
  resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 30});
  sluice::sample::shuffle s{200, {.seed = 1}};
  auto ep = ds.epoch(6, s);
  for (std::size_t k : {5u, 2u, 6u, 2u, 0u}) {
    const auto& b = ep.batch(k);
    CHECK(b.index == k);
    CHECK(b.size == (k == 6 ? 20u : 30u));
    CHECK(b.ids[0] == s.at(6, k * 30));
    const auto ref = host_gather(d, b.ids, b.size);
    CHECK(std::memcmp(b.bytes, ref.data(), ref.size()) == 0);
  }
  CHECK_THROWS_AS((void)ep.batch(7), sluice::usage_error);
  auto later = ds.epoch(7, s);
  CHECK_THROWS_WITH_AS((void)ep.batch(0), doctest::Contains("replaced by a later"), sluice::usage_error);
  CHECK_THROWS_AS((void)ep.ids_on_host(), sluice::usage_error);
  CHECK(later.batch(0).ids[0] == s.at(7, 0));
}

TEST_CASE("resident: bad input is a usage_error that says what is wrong") {
  data d(10, 4);
  using sluice::usage_error;
  CHECK_THROWS_WITH_AS(resident_dataset(d.bytes, 0, d.labels), doctest::Contains("record_bytes is 0"), usage_error);
  CHECK_THROWS_WITH_AS(resident_dataset(d.bytes, 3, d.labels), doctest::Contains("not a whole number of 3-byte records"),
                       usage_error);
  CHECK_THROWS_WITH_AS(resident_dataset(d.bytes, 4, std::span<const std::int64_t>(d.labels).first(9)),
                       doctest::Contains("9 labels for 10 records"), usage_error);
  CHECK_THROWS_WITH_AS(resident_dataset(d.bytes, 4, d.labels, {.batch = 0}), doctest::Contains("batch is 0"),
                       usage_error);
  CHECK_THROWS_WITH_AS(resident_dataset(d.bytes, 4, d.labels, {.normalize = sluice::normalize_params{3}}),
                       doctest::Contains("do not divide record_bytes 4"), usage_error);
  CHECK_THROWS_WITH_AS(resident_dataset(d.bytes, 4, d.labels, {.bytes = false}), doctest::Contains("gather nothing"),
                       usage_error);
  resident_dataset ds(d.bytes, 4, d.labels, {.batch = 4});
  CHECK_THROWS_WITH_AS((void)ds.epoch(0, sluice::sample::shuffle{11, {.seed = 1}}),
                       doctest::Contains("covers 11 samples but the dataset holds 10"), usage_error);
  CHECK_THROWS_AS((void)ds.epoch(0, sluice::sample::sequential{9}), usage_error);
  // An empty dataset is allowed: its epochs have no batches.
  resident_dataset empty(std::span<const std::uint8_t>{}, 4, std::span<const std::int64_t>{});
  CHECK(empty.epoch(0, sluice::sample::shuffle{0, {}}).size() == 0);
}
