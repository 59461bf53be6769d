// packed_rows (stage/pack_rows.hpp): a fixed token budget a step. Every token of every document
// arrives exactly once an epoch, in the order's sequence, in batches of R x L; doc_ids and
// position_ids agree with the documents; bit-identical for any worker count; resumable at any row;
// .split = false keeps documents whole and names one that cannot be.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sluice/io/tokens.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/field_collate.hpp"
#include "sluice/stage/pack_rows.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {

using docs_t = io::token_documents<std::uint16_t>;

// Documents of lengths 0..max_len; token k of document i is (i * 131 + k) % 60000 + 1 (never 0,
// the pad token), so a token says where it comes from.
std::vector<std::vector<std::uint16_t>> make_docs(std::size_t n, std::size_t max_len, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<std::vector<std::uint16_t>> d(n);
  for (std::size_t i = 0; i < n; ++i) {
    d[i].resize(g() % (max_len + 1));
    for (std::size_t k = 0; k < d[i].size(); ++k) d[i][k] = static_cast<std::uint16_t>((i * 131 + k) % 60000 + 1);
  }
  return d;
}

struct flat_batches {
  std::vector<std::uint16_t> tokens;
  std::vector<std::int32_t> doc_ids;
  std::vector<std::int32_t> position_ids;
  std::vector<std::int64_t> rows_per_batch;
};

template <class Loader>
flat_batches collect(Loader& loader, std::uint64_t epoch, std::size_t L) {
  flat_batches f;
  for (auto& b : loader.epoch(epoch)) {
    const auto t = b.template get<"tokens">();
    const auto d = b.template get<"doc_ids">();
    const auto p = b.template get<"position_ids">();
    REQUIRE(t.shape().size() == 2);
    CHECK(t.shape()[1] == static_cast<std::int64_t>(L));
    CHECK(d.shape()[0] == t.shape()[0]);
    CHECK(p.shape()[0] == t.shape()[0]);
    f.rows_per_batch.push_back(t.shape()[0]);
    f.tokens.insert(f.tokens.end(), t.data(), t.data() + t.numel());
    f.doc_ids.insert(f.doc_ids.end(), d.data(), d.data() + d.numel());
    f.position_ids.insert(f.position_ids.end(), p.data(), p.data() + p.numel());
  }
  return f;
}

}  // namespace

TEST_CASE("packed_rows: every token once an epoch, in the order's sequence, R x L a batch, ids that agree") {
  temp_dir dir;
  const auto docs_v = make_docs(300, 90, 5);
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t docs(tp, op);
  constexpr std::size_t L = 64, R = 4;
  auto make = [&](std::size_t workers) {
    auto rows = packed_rows(docs, sample::shuffle(docs.size(), {.seed = 9}), {.length = L});
    return from(rows.sampler()) | rows |
           collate({.batch = R}, stack<"tokens">{}, stack<"doc_ids">{}, stack<"position_ids">{}) |
           prefetch(2, {.workers = workers, .seed = 1});
  };
  auto loader = make(2);
  const auto order = sample::shuffle(docs.size(), {.seed = 9});
  for (std::uint64_t epoch : {0u, 1u}) {
    CAPTURE(epoch);
    const auto f = collect(loader, epoch, L);
    // Every batch but the last has R rows; the rows hold ceil(tokens / L) x L tokens.
    for (std::size_t k = 0; k + 1 < f.rows_per_batch.size(); ++k) CHECK(f.rows_per_batch[k] == static_cast<std::int64_t>(R));
    const std::size_t total = docs.tokens();
    REQUIRE(f.tokens.size() == (total + L - 1) / L * L);
    // The stream is the documents in the order's sequence, then padding.
    std::vector<std::uint16_t> want;
    std::vector<std::int32_t> want_doc;
    std::vector<std::int32_t> want_pos;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      const auto d = order.at(epoch, i);
      for (std::size_t k = 0; k < docs_v[d].size(); ++k) {
        want.push_back(docs_v[d][k]);
        want_doc.push_back(static_cast<std::int32_t>(d));
        want_pos.push_back(static_cast<std::int32_t>(k));
      }
    }
    want.resize(f.tokens.size(), 0);
    want_doc.resize(f.tokens.size(), -1);
    want_pos.resize(f.tokens.size(), 0);
    CHECK(f.tokens == want);
    CHECK(f.doc_ids == want_doc);
    CHECK(f.position_ids == want_pos);
  }
  // Bit-identical with one worker, and with workers = 0.
  auto one = make(1);
  auto zero = make(0);
  const auto a = collect(loader, 3, L), b = collect(one, 3, L), c = collect(zero, 3, L);
  CHECK(a.tokens == b.tokens);
  CHECK(a.doc_ids == b.doc_ids);
  CHECK(a.tokens == c.tokens);
  // Another epoch, another order.
  CHECK(collect(loader, 4, L).tokens != a.tokens);
}

TEST_CASE("packed_rows: a state saved mid-epoch resumes at its row, in another loader") {
  temp_dir dir;
  const auto docs_v = make_docs(120, 200, 8);
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t docs(tp, op);
  constexpr std::size_t L = 100;
  auto make = [&] {
    auto rows = packed_rows(docs, sample::shuffle(docs.size(), {.seed = 2}), {.length = L});
    return from(rows.sampler()) | rows | collate({.batch = 3, .drop_last = true}, stack<"tokens">{}, stack<"doc_ids">{}) |
           prefetch(2, {.workers = 2});
  };
  auto full = make();
  std::vector<std::uint16_t> all;
  for (auto& b : full.epoch(5)) {
    const auto t = b.get<"tokens">();
    all.insert(all.end(), t.data(), t.data() + t.numel());
  }
  auto first = make();
  std::vector<std::uint16_t> got;
  loader_state saved;
  std::size_t k = 0;
  for (auto& b : first.epoch(5)) {
    const auto t = b.get<"tokens">();
    got.insert(got.end(), t.data(), t.data() + t.numel());
    if (++k == 4) {
      saved = first.state();
      break;
    }
  }
  CHECK(saved.position == 4 * 3);
  auto second = make();
  for (auto& b : second.resume(saved)) {
    CHECK(b.index() >= 4);
    const auto t = b.get<"tokens">();
    got.insert(got.end(), t.data(), t.data() + t.numel());
  }
  CHECK(got == all);
  // A state of another shuffle seed is refused by the fingerprint.
  auto rows_other = packed_rows(docs, sample::shuffle(docs.size(), {.seed = 3}), {.length = L});
  auto other = from(rows_other.sampler()) | rows_other |
               collate({.batch = 3, .drop_last = true}, stack<"tokens">{}, stack<"doc_ids">{}) | prefetch(2);
  CHECK_THROWS_AS(other.resume(saved).begin(), usage_error);
}

TEST_CASE("packed_rows .split = false: whole documents, padding where the next does not fit, a too-long one named") {
  temp_dir dir;
  auto docs_v = make_docs(80, 40, 4);
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t docs(tp, op);
  constexpr std::size_t L = 48;
  auto rows = packed_rows(docs, sample::shuffle(docs.size(), {.seed = 1}), {.length = L, .split = false});
  auto loader = from(rows.sampler()) | rows | collate({.batch = 2}, stack<"tokens">{}, stack<"doc_ids">{}, stack<"position_ids">{}) |
                prefetch(2, {.workers = 2});
  const auto f = collect(loader, 0, L);
  // No document crosses a row, every document is there once, whole.
  std::vector<std::size_t> seen(docs.size(), 0);
  for (std::size_t r = 0; r * L < f.tokens.size(); ++r) {
    for (std::size_t k = r * L; k < (r + 1) * L; ++k) {
      const auto d = f.doc_ids[k];
      if (d < 0) {
        CHECK(f.tokens[k] == 0);
        continue;
      }
      const auto pos = static_cast<std::size_t>(f.position_ids[k]);
      CHECK(f.tokens[k] == docs_v[static_cast<std::size_t>(d)][pos]);
      if (pos == 0) ++seen[static_cast<std::size_t>(d)];
      // The document's first token is in this row.
      CHECK(k >= r * L + pos);
    }
  }
  for (std::size_t d = 0; d < docs.size(); ++d) CHECK(seen[d] == (docs_v[d].empty() ? 0u : 1u));
  CHECK(f.tokens.size() / L == rows.rows(0));
  CHECK(f.tokens.size() >= docs.tokens());

  // A document longer than a row: the rows that would hold it fail, naming the document.
  docs_v[17].assign(L + 5, 7);
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t long_docs(tp, op);
  for (on_error errors : {on_error::raise, on_error::skip}) {
    auto r2 = packed_rows(long_docs, sample::sequential(long_docs.size()), {.length = L, .split = false});
    auto l2 = from(r2.sampler()) | r2 | collate({.batch = 2}, stack<"tokens">{}) | prefetch(2, {.errors = errors});
    if (errors == on_error::raise) {
      try {
        for (auto& b : l2.epoch(0)) (void)b;
        FAIL("no error for a document longer than the row");
      } catch (const stage_error& e) {
        const auto why = sluice_test::innermost_text(e);
        CHECK(why.find("document 17 has " + std::to_string(L + 5) + " tokens") != std::string::npos);
        CHECK(why.find(tp) != std::string::npos);
      }
    } else {
      std::size_t n = 0;
      for (auto& b : l2.epoch(0)) n += b.size();
      CHECK(l2.stats().skipped == 2);  // the two rows it would take
      CHECK(n + 2 == r2.rows(0));
    }
  }
}

TEST_CASE("packed_rows: bad options are usage errors") {
  temp_dir dir;
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, make_docs(4, 10, 1));
  docs_t docs(tp, op);
  CHECK_THROWS_AS(packed_rows(docs, sample::sequential(4), {.length = 0}), usage_error);
  CHECK_THROWS_AS(packed_rows(docs, sample::sequential(4), {.pad = 70000}), usage_error);
  auto bad_order = packed_rows(docs, sample::sequential(9), {.length = 4, .split = false});
  CHECK_THROWS_AS((void)bad_order.rows(0), usage_error);
}

TEST_CASE("packed_rows: a token past the vocabulary fails the row that holds it, naming the document") {
  temp_dir dir;
  auto docs_v = make_docs(30, 50, 6);
  docs_v[3].assign(40, 5);
  docs_v[3][33] = 60500;  // past a vocabulary of 60001; the rest of the data is inside it
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t docs(tp, op, {.vocab = 60001});
  auto rows = packed_rows(docs, sample::sequential(docs.size()), {.length = 16});
  auto loader = from(rows.sampler()) | rows | collate({.batch = 2}, stack<"tokens">{}) | prefetch(2, {.errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(loader.stats().skipped == 1);  // only the row holding token 33 of document 3
  CHECK(n + 1 == rows.rows(0));
  REQUIRE_FALSE(loader.stats().skip_causes.empty());
  CHECK(loader.stats().skip_causes.front().find("60500") != std::string::npos);
  CHECK(loader.stats().skip_causes.front().find(tp) != std::string::npos);
}

TEST_CASE("packed_rows .bins: best-fit keeps every document whole and once, pads less than next-fit, resumes") {
  temp_dir dir;
  auto docs_v = make_docs(400, 60, 11);
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t docs(tp, op);
  constexpr std::size_t L = 64;
  auto run = [&](std::size_t bins, std::size_t workers) {
    auto rows = packed_rows(docs, sample::shuffle(docs.size(), {.seed = 3}), {.length = L, .split = false, .bins = bins});
    auto loader = from(rows.sampler()) | rows |
                  collate({.batch = 4, .drop_last = false}, stack<"tokens">{}, stack<"doc_ids">{}, stack<"position_ids">{}) |
                  prefetch(2, {.workers = workers});
    auto f = collect(loader, 1, L);
    CHECK(f.tokens.size() / L == rows.rows(1));
    return f;
  };
  std::size_t pad_next = 0;
  for (std::size_t bins : {std::size_t{1}, std::size_t{4}, std::size_t{32}}) {
    CAPTURE(bins);
    const auto f = run(bins, 2);
    // Whole documents, each once, its tokens in order within one row; pad tokens are padding.
    std::vector<std::size_t> seen(docs.size(), 0);
    std::size_t pad = 0;
    for (std::size_t k = 0; k < f.tokens.size(); ++k) {
      const auto d = f.doc_ids[k];
      if (d < 0) {
        ++pad;
        CHECK(f.tokens[k] == 0);
        continue;
      }
      const auto pos = static_cast<std::size_t>(f.position_ids[k]);
      REQUIRE(pos < docs_v[static_cast<std::size_t>(d)].size());
      CHECK(f.tokens[k] == docs_v[static_cast<std::size_t>(d)][pos]);
      CHECK(k % L >= pos);  // starts in this row
      if (pos == 0) ++seen[static_cast<std::size_t>(d)];
    }
    for (std::size_t d = 0; d < docs.size(); ++d) CHECK(seen[d] == (docs_v[d].empty() ? 0u : 1u));
    CHECK(f.tokens.size() - pad == docs.tokens());
    if (bins == 1) pad_next = pad;
    else CHECK(pad < pad_next);
    // Bit-identical for any worker count.
    const auto one = run(bins, 1);
    CHECK(one.tokens == f.tokens);
    CHECK(one.doc_ids == f.doc_ids);
  }

  // A state saved mid-epoch resumes at its row in another loader; another bin count is refused.
  auto make = [&](std::size_t bins) {
    return packed_rows(docs, sample::shuffle(docs.size(), {.seed = 3}), {.length = L, .split = false, .bins = bins});
  };
  auto rows_a = make(8);
  auto a = from(rows_a.sampler()) | rows_a | collate({.batch = 4}, stack<"tokens">{}) | prefetch(2, {.workers = 2});
  std::vector<std::vector<std::uint16_t>> whole;
  for (auto& b : a.epoch(0)) whole.emplace_back(b.get<"tokens">().data(), b.get<"tokens">().data() + b.get<"tokens">().numel());
  REQUIRE(whole.size() > 6);
  loader_state st;
  {
    auto rows_b = make(8);
    auto b = from(rows_b.sampler()) | rows_b | collate({.batch = 4}, stack<"tokens">{}) | prefetch(2, {.workers = 2});
    std::size_t n = 0;
    for (auto& x : b.epoch(0)) {
      (void)x;
      if (++n == 3) {
        st = b.state();
        break;
      }
    }
  }
  auto rows_c = make(8);
  auto c = from(rows_c.sampler()) | rows_c | collate({.batch = 4}, stack<"tokens">{}) | prefetch(2, {.workers = 1});
  std::size_t k = 3;
  for (auto& x : c.resume(st)) {
    REQUIRE(k < whole.size());
    CHECK(std::vector<std::uint16_t>(x.get<"tokens">().data(), x.get<"tokens">().data() + x.get<"tokens">().numel()) == whole[k]);
    ++k;
  }
  CHECK(k == whole.size());
  auto rows_d = make(16);
  auto other = from(rows_d.sampler()) | rows_d | collate({.batch = 4}, stack<"tokens">{}) | prefetch(2);
  CHECK_THROWS_AS(other.resume(st).begin(), usage_error);
  CHECK_THROWS_AS(make(0), usage_error);
}

namespace {
// Where the segments of rows of L start, from doc_ids and position_ids: at every row's start, where
// the document changes, and where a document starts again (position 0). Then L, repeated to L + 1.
std::vector<std::int32_t> segments_from_ids(const std::vector<std::int32_t>& doc, const std::vector<std::int32_t>& pos,
                                            std::size_t L) {
  std::vector<std::int32_t> cu;
  for (std::size_t r = 0; r * L < doc.size(); ++r) {
    std::vector<std::int32_t> row{0};
    for (std::size_t k = r * L + 1; k < (r + 1) * L; ++k)
      if (doc[k] != doc[k - 1] || (doc[k] >= 0 && pos[k] == 0)) row.push_back(static_cast<std::int32_t>(k - r * L));
    row.resize(L + 1, static_cast<std::int32_t>(L));
    cu.insert(cu.end(), row.begin(), row.end());
  }
  return cu;
}
}  // namespace

TEST_CASE("packed_rows: cu_seqlens per row agree with the ids, for split, whole-document and best-fit packing") {
  temp_dir dir;
  const auto docs_v = make_docs(150, 60, 12);
  const std::string tp = dir.file("t.bin"), op = dir.file("o.bin");
  io::write_token_documents<std::uint16_t>(tp, op, docs_v);
  docs_t docs(tp, op);
  constexpr std::size_t L = 64, R = 3;
  for (const packed_rows_options o : {packed_rows_options{.length = L}, packed_rows_options{.length = L, .split = false},
                                      packed_rows_options{.length = L, .split = false, .bins = 4}}) {
    CAPTURE(o.split);
    CAPTURE(o.bins);
    auto rows = packed_rows(docs, sample::shuffle(docs.size(), {.seed = 4}), o);
    auto loader = from(rows.sampler()) | rows |
                  collate({.batch = R}, stack<"tokens">{}, stack<"doc_ids">{}, stack<"position_ids">{}, stack<"cu_seqlens">{}) |
                  prefetch(2, {.workers = 2});
    std::vector<std::int32_t> doc, pos, cu;
    std::size_t segments = 0, batches = 0;
    for (auto& b : loader.epoch(1)) {
      const auto d = b.get<"doc_ids">(), p = b.get<"position_ids">(), c = b.get<"cu_seqlens">();
      REQUIRE(c.shape().size() == 2);
      CHECK(c.shape()[0] == d.shape()[0]);
      CHECK(c.shape()[1] == static_cast<std::int64_t>(L + 1));
      doc.insert(doc.end(), d.data(), d.data() + d.numel());
      pos.insert(pos.end(), p.data(), p.data() + p.numel());
      cu.insert(cu.end(), c.data(), c.data() + c.numel());
      // The flattened batch: every row's boundaries, offset, empty segments left out; the longest.
      const auto v = flat_cu_seqlens(std::span<const std::int32_t>(c.data(), static_cast<std::size_t>(c.numel())), L);
      const auto rows_here = static_cast<std::size_t>(c.shape()[0]);
      std::vector<std::int32_t> want{0};
      std::int32_t longest = 0;
      for (std::size_t k = 1; k < rows_here * L; ++k) {
        if (k % L == 0 || d.data()[k] != d.data()[k - 1] || (d.data()[k] >= 0 && p.data()[k] == 0)) {
          longest = std::max(longest, static_cast<std::int32_t>(k) - want.back());
          want.push_back(static_cast<std::int32_t>(k));
        }
      }
      longest = std::max(longest, static_cast<std::int32_t>(rows_here * L) - want.back());
      want.push_back(static_cast<std::int32_t>(rows_here * L));
      CHECK(v.cu_seqlens == want);
      CHECK(v.max_seqlen == longest);
      segments += want.size() - 1;
      ++batches;
    }
    CHECK(cu == segments_from_ids(doc, pos, L));
    CHECK(segments > batches * R);  // rows of several segments: the check above has teeth
  }
}

TEST_CASE("packed_rows: flat_cu_seqlens joins the rows of a batch and refuses what is not rows of L + 1") {
  // The picture at the top of stage/pack_rows.hpp: L = 8, two rows.
  const std::vector<std::int32_t> rows{0, 5, 8, 8, 8, 8, 8, 8, 8, 0, 3, 6, 8, 8, 8, 8, 8, 8};
  const auto v = flat_cu_seqlens(rows, 8);
  CHECK(v.cu_seqlens == std::vector<std::int32_t>{0, 5, 8, 11, 14, 16});
  CHECK(v.max_seqlen == 5);
  CHECK_THROWS_AS((void)flat_cu_seqlens(rows, 7), usage_error);   // 18 values are not rows of 8
  CHECK_THROWS_AS((void)flat_cu_seqlens(rows, 17), usage_error);  // one row of 18 that does not end at 17
  std::vector<std::int32_t> bad = rows;
  bad[2] = 4;  // falls
  CHECK_THROWS_AS((void)flat_cu_seqlens(bad, 8), usage_error);
  CHECK(flat_cu_seqlens(std::span<const std::int32_t>{}, 8).cu_seqlens == std::vector<std::int32_t>{0});
}
