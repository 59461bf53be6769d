#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sluice/io/tokens.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/field_collate.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {

template <class T>
void write_tokens(const std::string& path, const std::vector<T>& t) {
  sluice_test::write_file(path, std::as_bytes(std::span<const T>(t)));
}
void write_offsets(const std::string& path, const std::vector<std::uint64_t>& o) {
  sluice_test::write_file(path, std::as_bytes(std::span<const std::uint64_t>(o)));
}

template <class T>
std::vector<T> iota_tokens(std::size_t n, std::uint64_t seed = 3) {
  std::mt19937_64 g(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(g() % 50000);
  return v;
}

// Documents of lengths 0..max (some empty), token values that say where they come from.
std::vector<std::vector<std::uint16_t>> make_docs(std::size_t n, std::size_t max_len, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<std::vector<std::uint16_t>> d(n);
  for (std::size_t i = 0; i < n; ++i) {
    d[i].resize(g() % (max_len + 1));
    for (std::size_t k = 0; k < d[i].size(); ++k) d[i][k] = static_cast<std::uint16_t>((i * 100 + k) % 50000);
  }
  return d;
}

template <class Fn>
std::string format_error_text(Fn&& fn) {
  try {
    fn();
  } catch (const format_error& e) {
    return e.what();
  }
  return "(no format_error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

static_assert(fields_reader<io::token_windows<std::uint16_t>>);
static_assert(fields_reader<io::token_windows<std::uint32_t>>);
static_assert(fields_reader<io::token_documents<std::uint16_t>>);
static_assert(fields_reader<io::token_documents<std::uint32_t>>);

TEST_CASE_TEMPLATE("windows: content equals the file, input and target shift by one", T, std::uint16_t, std::uint32_t) {
  temp_dir dir;
  const std::string p = dir.file("train.bin");
  const std::size_t L = 8, n = 10 * L + 1 + 3;  // 10 windows and a tail of 3 that fills none
  const auto tok = iota_tokens<T>(n);
  write_tokens(p, tok);

  io::token_windows<T> w{p, {.length = L}};
  CHECK(w.tokens() == n);
  CHECK(w.size() == (n - 1) / L);
  CHECK(w.size() == 10);
  CHECK(w.path() == p);
  for (std::size_t i = 0; i < w.size(); ++i) {
    auto s = w.fields(i);
    CHECK(s.id == i);
    CHECK(s.origin == p);
    auto in = s.template bytes_of<"input">();
    auto tg = s.template bytes_of<"target">();
    REQUIRE(in.size() == L * sizeof(T));
    REQUIRE(tg.size() == L * sizeof(T));
    CHECK(std::memcmp(in.data(), tok.data() + i * L, L * sizeof(T)) == 0);
    CHECK(std::memcmp(tg.data(), tok.data() + i * L + 1, L * sizeof(T)) == 0);
    CHECK(tg.data() == in.data() + sizeof(T));                          // views into one mapping
    CHECK(in.data() == w.file().data() + i * L * sizeof(T));            // zero copy
  }
  CHECK_THROWS_AS((void)w.fields(w.size()), format_error);

  SUBCASE("another stride: overlapping windows") {
    io::token_windows<T> o{p, {.length = L, .stride = 3}};
    CHECK(o.size() == (n - 1 - L) / 3 + 1);
    for (std::size_t i = 0; i < o.size(); ++i) {
      auto s = o.fields(i);
      CHECK(std::memcmp(s.template bytes_of<"input">().data(), tok.data() + i * 3, L * sizeof(T)) == 0);
      CHECK(std::memcmp(s.template bytes_of<"target">().data(), tok.data() + i * 3 + 1, L * sizeof(T)) == 0);
    }
    const std::size_t last = o.size() - 1;
    CHECK(last * 3 + L + 1 <= n);        // the last window fits
    CHECK((last + 1) * 3 + L + 1 > n);   // the next would not
  }
  SUBCASE("exactly L + 1 tokens: one window") {
    const std::string q = dir.file("one.bin");
    write_tokens(q, std::vector<T>(tok.begin(), tok.begin() + L + 1));
    CHECK(io::token_windows<T>{q, {.length = L}}.size() == 1);
  }
}

TEST_CASE("windows: shuffled pipeline yields {4, L} input and target") {
  temp_dir dir;
  const std::string p = dir.file("train.bin");
  const std::size_t L = 16, windows = 37;
  const auto tok = iota_tokens<std::uint16_t>(windows * L + 1, 9);
  write_tokens(p, tok);
  io::token_windows<std::uint16_t> w{p, {.length = L}};
  REQUIRE(w.size() == windows);

  auto loader = from(sample::shuffle(w.size(), {.seed = 4})) | read(w) |
                collate(batch_options{.batch = 4}, stack<"input">{}, stack<"target">{}) | prefetch(2);
  std::multiset<std::uint64_t> seen;
  std::size_t batches = 0;
  for (auto& b : loader.epoch(0)) {
    auto in = b.get<"input">();
    auto tg = b.get<"target">();
    static_assert(std::is_same_v<typename decltype(in)::value_type, std::uint16_t>);
    REQUIRE(in.shape().size() == 2);
    CHECK(in.shape()[0] == static_cast<std::int64_t>(b.size()));
    CHECK(in.shape()[1] == static_cast<std::int64_t>(L));
    CHECK(std::vector<std::int64_t>(tg.shape().begin(), tg.shape().end()) ==
          std::vector<std::int64_t>(in.shape().begin(), in.shape().end()));
    if (batches < windows / 4) CHECK(b.size() == 4);
    for (std::size_t r = 0; r < b.size(); ++r) {
      const std::uint64_t id = b.ids()[r];
      seen.insert(id);
      for (std::size_t k = 0; k < L; ++k) {
        REQUIRE(in[r * L + k] == tok[id * L + k]);
        REQUIRE(tg[r * L + k] == tok[id * L + k + 1]);
      }
    }
    ++batches;
  }
  CHECK(batches == (windows + 3) / 4);
  CHECK(seen.size() == windows);
  CHECK(std::set<std::uint64_t>(seen.begin(), seen.end()).size() == windows);  // each window once
}

TEST_CASE("documents: write_token_documents round trip, pad with token 50256") {
  temp_dir dir;
  const std::string tp = dir.file("docs.bin"), op = dir.file("docs.idx");
  const auto docs = make_docs(23, 20, 5);
  io::write_token_documents<std::uint16_t>(tp, op, docs);
  io::token_documents<std::uint16_t> d{tp, op};
  REQUIRE(d.size() == docs.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    auto s = d.fields(i);
    CHECK(s.id == i);
    CHECK(s.origin == tp);
    auto doc = d.document(i);
    REQUIRE(std::vector<std::uint16_t>(doc.begin(), doc.end()) == docs[i]);
    CHECK(s.bytes_of<"tokens">().size() == docs[i].size() * 2);
    total += docs[i].size();
  }
  CHECK(d.tokens() == total);

  auto loader = from(sample::shuffle(d.size(), {.seed = 2})) | read(d) |
                collate(batch_options{.batch = 4}, pad<"tokens">{.value = 50256}) | prefetch(2);
  std::size_t seen = 0;
  for (auto& b : loader.epoch(1)) {
    auto t = b.get<"tokens">();
    auto lens = b.get<"tokens.lengths">();
    std::size_t longest = 0;
    for (std::size_t r = 0; r < b.size(); ++r) longest = std::max(longest, docs[b.ids()[r]].size());
    REQUIRE(t.shape().size() == 2);
    CHECK(t.shape()[0] == static_cast<std::int64_t>(b.size()));
    CHECK(t.shape()[1] == static_cast<std::int64_t>(longest));
    for (std::size_t r = 0; r < b.size(); ++r) {
      const auto& ref = docs[b.ids()[r]];
      CHECK(lens[r] == static_cast<std::int64_t>(ref.size()));
      for (std::size_t k = 0; k < longest; ++k)
        REQUIRE(t[r * longest + k] == (k < ref.size() ? ref[k] : 50256));
    }
    seen += b.size();
  }
  CHECK(seen == docs.size());
}

namespace {
// What pack<"tokens">{.length = L} (split = true) must emit for documents in this order.
struct packed_ref {
  std::vector<std::uint16_t> tokens;
  std::vector<std::int32_t> doc_ids, position_ids, cu_seqlens;
  std::size_t rows = 0;
};
packed_ref reference_pack(const std::vector<const std::vector<std::uint16_t>*>& batch, std::size_t L, std::uint16_t pad) {
  packed_ref r;
  for (std::size_t i = 0; i < batch.size(); ++i)
    for (auto t : *batch[i]) {
      r.tokens.push_back(t);
      r.doc_ids.push_back(static_cast<std::int32_t>(i));
    }
  r.rows = (r.tokens.size() + L - 1) / L;
  r.tokens.resize(r.rows * L, pad);
  r.doc_ids.resize(r.rows * L, -1);
  r.position_ids.resize(r.rows * L);
  r.cu_seqlens.push_back(0);
  for (std::size_t k = 0; k < r.rows * L; ++k) {
    const bool starts = k % L == 0 || r.doc_ids[k] != r.doc_ids[k - 1];
    if (starts && k != 0) r.cu_seqlens.push_back(static_cast<std::int32_t>(k));
    r.position_ids[k] = starts ? 0 : r.position_ids[k - 1] + 1;
  }
  if (r.rows != 0) r.cu_seqlens.push_back(static_cast<std::int32_t>(r.rows * L));
  return r;
}
template <class T>
std::vector<T> as_vec(auto t) {
  auto v = t.values();
  return {v.begin(), v.end()};
}
}  // namespace

TEST_CASE("documents: pack into rows of 16 with doc_ids, position_ids and cu_seqlens") {
  temp_dir dir;
  const std::string tp = dir.file("docs.bin"), op = dir.file("docs.idx");
  const auto docs = make_docs(41, 30, 8);  // some longer than a row: they continue in the next
  io::write_token_documents<std::uint16_t>(tp, op, docs);
  io::token_documents<std::uint16_t> d{tp, op};
  const std::size_t L = 16;

  auto loader = from(sample::shuffle(d.size(), {.seed = 6})) | read(d) |
                collate(batch_options{.batch = 5}, pack<"tokens">{.length = L, .value = 50256}) | prefetch(2);
  std::size_t batches = 0;
  for (auto& b : loader.epoch(0)) {
    std::vector<const std::vector<std::uint16_t>*> in;
    for (auto id : b.ids()) in.push_back(&docs[id]);
    const auto ref = reference_pack(in, L, 50256);
    auto t = b.get<"tokens">();
    REQUIRE(t.shape().size() == 2);
    CHECK(t.shape()[0] == static_cast<std::int64_t>(ref.rows));
    CHECK(t.shape()[1] == static_cast<std::int64_t>(L));
    CHECK(as_vec<std::uint16_t>(t) == ref.tokens);
    CHECK(as_vec<std::int32_t>(b.get<"tokens.doc_ids">()) == ref.doc_ids);
    CHECK(as_vec<std::int32_t>(b.get<"tokens.position_ids">()) == ref.position_ids);
    CHECK(as_vec<std::int32_t>(b.get<"tokens.cu_seqlens">()) == ref.cu_seqlens);
    ++batches;
  }
  CHECK(batches == (docs.size() + 4) / 5);
}

TEST_CASE("determinism: the same packed batches for 1 and 3 workers") {
  temp_dir dir;
  const std::string tp = dir.file("docs.bin"), op = dir.file("docs.idx");
  const auto docs = make_docs(300, 40, 12);
  io::write_token_documents<std::uint16_t>(tp, op, docs);
  io::token_documents<std::uint16_t> d{tp, op};
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(d.size(), {.seed = 7})) | read(d) |
                  collate(batch_options{.batch = 8}, pack<"tokens">{.length = 32}) |
                  prefetch(3, {.workers = workers});
    std::vector<std::vector<std::int64_t>> out;
    for (std::uint64_t e : {0u, 1u}) {
      for (auto& b : loader.epoch(e)) {
        std::vector<std::int64_t> v;
        for (auto id : b.ids()) v.push_back(static_cast<std::int64_t>(id));
        for (auto x : b.get<"tokens">().values()) v.push_back(x);
        for (auto x : b.get<"tokens.doc_ids">().values()) v.push_back(x);
        for (auto x : b.get<"tokens.cu_seqlens">().values()) v.push_back(x);
        out.push_back(std::move(v));
      }
    }
    return out;
  };
  const auto one = run(1), three = run(3);
  CHECK(one.size() == 2 * ((docs.size() + 7) / 8));
  CHECK(one == three);
  // and a windows pipeline
  const std::string wp = dir.file("train.bin");
  write_tokens(wp, iota_tokens<std::uint32_t>(64 * 50 + 1, 1));
  io::token_windows<std::uint32_t> w{wp, {.length = 64}};
  auto runw = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(w.size(), {.seed = 1})) | read(w) |
                  collate(batch_options{.batch = 4}, stack<"input">{}, stack<"target">{}) |
                  prefetch(2, {.workers = workers});
    std::vector<std::uint32_t> v;
    for (auto& b : loader.epoch(3)) {
      for (auto x : b.get<"input">().values()) v.push_back(x);
      for (auto x : b.get<"target">().values()) v.push_back(x);
    }
    return v;
  };
  CHECK(runw(1) == runw(3));
}

TEST_CASE("bad token files: format_error names the file, the record and the cause") {
  temp_dir dir;
  const std::string tp = dir.file("docs.bin"), op = dir.file("docs.idx");
  write_tokens(tp, iota_tokens<std::uint16_t>(100));  // 100 tokens

  SUBCASE("truncated u16 token file (odd bytes)") {
    const std::string odd = dir.file("odd.bin");
    auto bytes = sluice_test::read_file(tp);
    bytes.pop_back();  // 199 bytes
    sluice_test::write_file(odd, bytes);
    const auto m = format_error_text([&] { io::token_windows<std::uint16_t>{odd, {.length = 8}}; });
    CHECK(contains(m, "'" + odd + "'"));
    CHECK(contains(m, "record 99"));
    CHECK(contains(m, "199 bytes is not a whole number of uint16 tokens (1 trailing bytes"));
    write_offsets(op, {0, 99});
    const auto m2 = format_error_text([&] { io::token_documents<std::uint16_t>{odd, op}; });
    CHECK(contains(m2, "'" + odd + "'"));
    CHECK(contains(m2, "not a whole number of uint16 tokens"));
    // a u32 reader of a file of 2 mod 4 bytes
    const std::string six = dir.file("six.bin");
    write_tokens(six, std::vector<std::uint16_t>{1, 2, 3});
    CHECK(contains(format_error_text([&] { io::token_windows<std::uint32_t>{six, {.length = 1}}; }),
                   "6 bytes is not a whole number of uint32 tokens"));
  }
  SUBCASE("tokens of the other width are named, never read as other tokens") {
    // uint32 ids (a 100k vocabulary) read as uint16: every second value would be a 0 or a 1.
    const std::string wide = dir.file("wide.bin");
    auto ids = iota_tokens<std::uint32_t>(1000);
    for (std::size_t k = 0; k < ids.size(); k += 3) ids[k] += 50000;  // past 65535 too: high halves 0 and 1
    write_tokens(wide, ids);
    const auto m = format_error_text([&] { io::token_windows<std::uint16_t>{wide, {.length = 8}}; });
    CHECK(contains(m, "'" + wide + "'"));
    CHECK(contains(m, "every second uint16 token in the first 2000 tokens is below 8, as when uint32 tokens are read as uint16"));
    CHECK(contains(m, "dtype=\"uint32\""));
    write_offsets(op, {0, 1000});
    CHECK(contains(format_error_text([&] { io::token_documents<std::uint16_t>{wide, op}; }), "read the file as uint32"));
    // uint16 ids read as uint32: two ids a value, past any vocabulary.
    const std::string narrow = dir.file("narrow.bin");
    write_tokens(narrow, iota_tokens<std::uint16_t>(1000, 5));
    const auto m2 = format_error_text([&] { io::token_windows<std::uint32_t>{narrow, {.length = 8}}; });
    CHECK(contains(m2, "uint32 tokens in the first 500 tokens are 2^24 or more"));
    CHECK(contains(m2, "dtype=\"uint16\""));
    // Either width read as itself is fine, and so are ids that happen to repeat 0 or run large.
    CHECK(io::token_windows<std::uint32_t>{wide, {.length = 8}}.size() > 0);
    CHECK(io::token_windows<std::uint16_t>{narrow, {.length = 8}}.size() > 0);
    std::vector<std::uint16_t> zeros(1000, 0);
    for (std::size_t k = 0; k < zeros.size(); k += 10) zeros[k] = 7;  // mostly padding: both halves 0
    write_tokens(dir.file("pad.bin"), zeros);
    CHECK(io::token_windows<std::uint16_t>{dir.file("pad.bin"), {.length = 8}}.size() > 0);
  }
  SUBCASE("an .npy of the tokens or of the offsets (numpy.save) is named, its header never read as values") {
    // What numpy.save writes: magic, version 1.0, a header padded to a multiple of 64 bytes (128
    // here), then the values.
    auto npy = [&](const std::string& path, const std::string& descr, std::size_t n, std::size_t item) {
      std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
      while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
      dict += '\n';
      std::string b = std::string("\x93NUMPY\x01\x00", 8);
      b += static_cast<char>(dict.size() & 0xff);
      b += static_cast<char>(dict.size() >> 8);
      b += dict;
      b.append(n * item, '\x01');
      sluice_test::write_file(path, b);
    };
    const std::string tn = dir.file("tokens.npy"), on = dir.file("offsets.npy");
    npy(tn, "<u2", 100, 2);
    const auto m = format_error_text([&] { io::token_windows<std::uint16_t>{tn, {.length = 8}}; });
    CHECK(contains(m, "'" + tn + "'"));
    CHECK(contains(m, "an .npy file (numpy.save; shape (100,)), not a flat token file (uint16, as ndarray.tofile "
                      "writes it): its 128-byte header would be read as values; write the values alone: "
                      "numpy.load(FILE).astype(numpy.uint16).tofile(OUT)"));
    npy(on, "<u8", 3, 8);
    const auto m2 = format_error_text([&] { io::token_documents<std::uint16_t>{tp, on}; });
    CHECK(contains(m2, "'" + on + "'"));
    CHECK(contains(m2, "not an offsets file (uint64, as ndarray.tofile writes it)"));
  }
  SUBCASE("fewer than L + 1 tokens") {
    const auto m = format_error_text([&] { io::token_windows<std::uint16_t>{tp, {.length = 100}}; });
    CHECK(contains(m, "'" + tp + "'"));
    CHECK(contains(m, "holds 100 uint16 tokens, fewer than one window of length + 1 = 101"));
    CHECK(io::token_windows<std::uint16_t>{tp, {.length = 99}}.size() == 1);
  }
  SUBCASE("offsets not monotonic") {
    write_offsets(op, {0, 10, 40, 30, 100});
    const auto m = format_error_text([&] { io::token_documents<std::uint16_t>{tp, op}; });
    CHECK(contains(m, "'" + op + "', record 2, byte offset 24"));
    CHECK(contains(m, "offsets are not monotonic: offset 3 = 30 is less than offset 2 = 40 (document 2 would end before it starts)"));
  }
  SUBCASE("last offset != n_tokens") {
    write_offsets(op, {0, 10, 40, 90});
    const auto m = format_error_text([&] { io::token_documents<std::uint16_t>{tp, op}; });
    CHECK(contains(m, "'" + op + "', record 2"));
    CHECK(contains(m, "the last offset (3) is 90, but '" + tp + "' holds 100 tokens"));
  }
  SUBCASE("offset past the end") {
    write_offsets(op, {0, 10, 140, 100});
    const auto m = format_error_text([&] { io::token_documents<std::uint16_t>{tp, op}; });
    CHECK(contains(m, "'" + op + "', record 1, byte offset 16"));
    CHECK(contains(m, "offset 2 = 140 is past the end of '" + tp + "' (100 tokens)"));
  }
  SUBCASE("first offset not 0") {
    write_offsets(op, {5, 100});
    CHECK(contains(format_error_text([&] { io::token_documents<std::uint16_t>{tp, op}; }),
                   "record 0, byte offset 0: offset 0 is 5; the first offset must be 0"));
  }
  SUBCASE("offsets file not whole uint64, or empty") {
    sluice_test::write_file(op, std::string(12, '\0'));
    CHECK(contains(format_error_text([&] { io::token_documents<std::uint16_t>{tp, op}; }),
                   "offsets file size 12 bytes is not a whole number of uint64 offsets"));
    sluice_test::write_file(op, std::string());
    CHECK(contains(format_error_text([&] { io::token_documents<std::uint16_t>{tp, op}; }), "offsets file is empty"));
  }
  SUBCASE("format_error carries the parts") {
    write_offsets(op, {0, 50, 20, 100});
    try {
      io::token_documents<std::uint16_t> d{tp, op};
      FAIL("no error");
    } catch (const format_error& e) {
      CHECK(e.file() == op);
      CHECK(e.record() == 1);
      CHECK(e.offset() == 16);
    }
  }
}

TEST_CASE("vocabulary bound: lazily in fields(i), or once at open") {
  temp_dir dir;
  const std::string p = dir.file("train.bin");
  auto tok = std::vector<std::uint16_t>(8 * 6 + 1, 7);
  tok[29] = 300;  // in window 3 (tokens 24..32)
  write_tokens(p, tok);

  io::token_windows<std::uint16_t> lazy{p, {.length = 8, .vocab = 256}};  // opens: no scan
  CHECK_NOTHROW((void)lazy.fields(2));
  const auto m = format_error_text([&] { (void)lazy.fields(3); });
  CHECK(contains(m, "'" + p + "', record 3, byte offset 58"));
  CHECK(contains(m, "token 300 at token position 29 is outside the vocabulary (vocab = 256)"));
  CHECK_NOTHROW((void)io::token_windows<std::uint16_t>(p, {.length = 8, .vocab = 301}).fields(3));

  const auto mo = format_error_text([&] {
    io::token_windows<std::uint16_t>{p, {.length = 8, .vocab = 256, .vocab_check = io::vocab_check::open}};
  });
  CHECK(contains(mo, "record 3"));
  CHECK(contains(mo, "token position 29"));

  // In a pipeline the error reaches the consumer with the same text.
  auto loader = from(sample::sequential(lazy.size())) | read(lazy) |
                collate(batch_options{.batch = 2}, stack<"input">{}, stack<"target">{}) | prefetch(1);
  try {
    for (auto& b : loader.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const sluice::error& e) {
    CHECK(contains(e.what(), "token position 29"));
    CHECK(contains(e.what(), p));
  }

  // documents
  const std::string tp = dir.file("d.bin"), op = dir.file("d.idx");
  io::write_token_documents<std::uint16_t>(tp, op, std::vector<std::vector<std::uint16_t>>{{1, 2}, {3, 999, 4}, {5}});
  io::token_documents<std::uint16_t> d{tp, op, {.vocab = 256}};
  CHECK_NOTHROW((void)d.fields(0));
  CHECK(contains(format_error_text([&] { (void)d.fields(1); }),
                 "'" + tp + "', record 1, byte offset 6: token 999 at token position 3"));
  CHECK(contains(format_error_text([&] { io::token_documents<std::uint16_t>{tp, op, {.vocab = 256, .vocab_check = io::vocab_check::open}}; }),
                 "record 1"));
}

TEST_CASE("documents: empty documents, and pack without split") {
  temp_dir dir;
  const std::string tp = dir.file("docs.bin"), op = dir.file("docs.idx");
  // 0 tokens in documents 0..2; then 5, 12, 7, 16, 3 tokens
  std::vector<std::vector<std::uint16_t>> docs{{}, {}, {}};
  for (std::size_t n : {5u, 12u, 7u, 16u, 3u}) {
    docs.emplace_back();
    for (std::size_t k = 0; k < n; ++k) docs.back().push_back(static_cast<std::uint16_t>(docs.size() * 100 + k));
  }
  io::write_token_documents<std::uint16_t>(tp, op, docs);
  io::token_documents<std::uint16_t> d{tp, op};
  REQUIRE(d.size() == 8);
  CHECK(d.length(0) == 0);
  CHECK(d.fields(1).bytes_of<"tokens">().empty());

  SUBCASE("a batch of only empty documents") {
    auto pk = from(sample::sequential(3)) | read(d) | collate(batch_options{.batch = 3}, pack<"tokens">{.length = 16}) |
              prefetch(1);
    std::size_t n = 0;
    for (auto& b : pk.epoch(0)) {
      CHECK(b.size() == 3);
      CHECK(b.get<"tokens">().shape()[0] == 0);
      CHECK(as_vec<std::int32_t>(b.get<"tokens.cu_seqlens">()) == std::vector<std::int32_t>{0});
      ++n;
    }
    CHECK(n == 1);
    auto pd = from(sample::sequential(3)) | read(d) | collate(batch_options{.batch = 3}, pad<"tokens">{.value = 50256}) |
              prefetch(1);
    for (auto& b : pd.epoch(0)) {
      CHECK(b.get<"tokens">().shape()[1] == 0);
      CHECK(as_vec<std::int64_t>(b.get<"tokens.lengths">()) == std::vector<std::int64_t>{0, 0, 0});
    }
  }
  SUBCASE("split = false: a document that does not fit the row's rest starts a new row") {
    auto pk = from(sample::sequential(d.size())) | read(d) |
              collate(batch_options{.batch = 8}, pack<"tokens">{.length = 16, .split = false, .value = 50256}) | prefetch(1);
    for (auto& b : pk.epoch(0)) {
      // documents 3..7 of 5, 12, 7, 16, 3 tokens (document i's token k is (i + 1) * 100 + k):
      // row 0: doc3 (5) + pad 11; row 1: doc4 (12) + pad 4; row 2: doc5 (7) + pad 9;
      // row 3: doc6 (16); row 4: doc7 (3) + pad 13
      auto t = b.get<"tokens">();
      REQUIRE(t.shape()[0] == 5);
      auto doc = as_vec<std::int32_t>(b.get<"tokens.doc_ids">());
      auto row_doc = [&](std::size_t r, std::size_t k) { return doc[r * 16 + k]; };
      CHECK(row_doc(0, 0) == 3);
      CHECK(row_doc(0, 5) == -1);
      CHECK(row_doc(1, 0) == 4);
      CHECK(row_doc(1, 12) == -1);
      CHECK(row_doc(2, 6) == 5);
      CHECK(row_doc(2, 7) == -1);
      CHECK(row_doc(3, 15) == 6);
      CHECK(row_doc(4, 2) == 7);
      CHECK(row_doc(4, 3) == -1);
      CHECK(t[1 * 16 + 11] == 511);
      CHECK(t[1 * 16 + 12] == 50256);
      CHECK(as_vec<std::int32_t>(b.get<"tokens.cu_seqlens">()) ==
            std::vector<std::int32_t>{0, 5, 16, 28, 32, 39, 48, 64, 67, 80});
    }
  }
}

// ---------------------------------------------------------------------------------------------
// convert<"f", To>: token ids widened for consumers without uint16 tensors (PyTorch < 2.3).

namespace {
// A field sample whose field is deferred (write only, no bytes_of), as a decoder's output is.
using deferred_tokens_schema = sluice::schema<sluice::field<"x", std::uint16_t, sluice::variable>>;
struct deferred_tokens {
  using schema_type = deferred_tokens_schema;
  std::uint64_t id = 0;
  std::string_view origin = "mem";
  const std::vector<std::uint16_t>* v = nullptr;
  template <sluice::fixed_string N>
  std::size_t size_of() const { return v->size() * 2; }
  template <sluice::fixed_string N>
  void write(std::span<std::byte> dst, const sluice::sample_context&) const {
    REQUIRE(dst.size() == v->size() * 2);
    if (!dst.empty()) std::memcpy(dst.data(), v->data(), dst.size());
  }
};
// The same, claiming 5 bytes: not a whole number of uint16 elements.
struct odd_tokens : deferred_tokens {
  template <sluice::fixed_string N>
  std::size_t size_of() const { return 5; }
};
template <class S>
constexpr bool has_bytes_of_x = requires(const S& s) { s.template bytes_of<"x">(); };
}  // namespace

TEST_CASE("convert: windows of uint16 reach the batch as int64 with the same ids, for 1 and 2 workers") {
  temp_dir dir;
  const std::string p = dir.file("t.bin");
  auto tokens = iota_tokens<std::uint16_t>(5000, 11);
  tokens[7] = 65535;  // the largest uint16 stays 65535 (not -1)
  write_tokens(p, tokens);
  io::token_windows<std::uint16_t> w{p, {.length = 32}};
  auto plain = from(sample::shuffle(w.size(), {.seed = 4})) | read(w) |
               collate(batch_options{.batch = 8}, stack<"input">{}, stack<"target">{}) | prefetch(2);
  for (std::size_t workers : {1u, 2u}) {
    auto wide = from(sample::shuffle(w.size(), {.seed = 4})) | read(w) | convert<"input", std::int64_t>() |
                convert<"target", std::int64_t>() |
                collate(batch_options{.batch = 8}, stack<"input">{}, stack<"target">{}) |
                prefetch(2, {.workers = workers});
    auto ref = plain.epoch(0);
    auto a = ref.begin();
    std::size_t batches = 0;
    for (auto& b : wide.epoch(0)) {
      REQUIRE(a != std::default_sentinel);
      auto in = b.get<"input">();
      static_assert(std::is_same_v<typename decltype(in)::value_type, std::int64_t>);
      REQUIRE(std::ranges::equal(in.shape(), (*a).get<"input">().shape()));
      std::vector<std::int64_t> want;
      for (auto t : as_vec<std::uint16_t>((*a).get<"input">())) want.push_back(t);
      CHECK(as_vec<std::int64_t>(in) == want);
      want.clear();
      for (auto t : as_vec<std::uint16_t>((*a).get<"target">())) want.push_back(t);
      CHECK(as_vec<std::int64_t>(b.get<"target">()) == want);
      ++a;
      ++batches;
    }
    CHECK(a == std::default_sentinel);
    CHECK(batches == (w.size() + 7) / 8);
  }
  // Window 0 holds token 7: its value is 65535 once widened.
  auto one = from(sample::sequential(1)) | read(w) | convert<"input", std::int32_t>() |
             collate(batch_options{.batch = 1}, stack<"input">{}) | prefetch(1);
  for (auto& b : one.epoch(0)) CHECK(b.get<"input">()[7] == 65535);
}

TEST_CASE("convert: packed and padded documents widened keep every token and the side tensors") {
  temp_dir dir;
  const std::string tp = dir.file("docs.bin"), op = dir.file("docs.idx");
  const auto docs = make_docs(37, 30, 12);
  io::write_token_documents<std::uint16_t>(tp, op, docs);
  io::token_documents<std::uint16_t> d{tp, op};
  const std::size_t L = 16;
  auto packed = from(sample::shuffle(d.size(), {.seed = 9})) | read(d) | convert<"tokens", std::int64_t>() |
                collate(batch_options{.batch = 5}, pack<"tokens">{.length = L, .value = 50256}) | prefetch(2);
  std::size_t batches = 0;
  for (auto& b : packed.epoch(0)) {
    std::vector<const std::vector<std::uint16_t>*> in;
    for (auto id : b.ids()) in.push_back(&docs[id]);
    const auto ref = reference_pack(in, L, 50256);
    const std::vector<std::int64_t> want(ref.tokens.begin(), ref.tokens.end());
    CHECK(as_vec<std::int64_t>(b.get<"tokens">()) == want);
    CHECK(as_vec<std::int32_t>(b.get<"tokens.doc_ids">()) == ref.doc_ids);
    CHECK(as_vec<std::int32_t>(b.get<"tokens.cu_seqlens">()) == ref.cu_seqlens);
    ++batches;
  }
  CHECK(batches == (docs.size() + 4) / 5);

  auto padded = from(sample::sequential(d.size())) | read(d) | convert<"tokens", std::int64_t>() |
                collate(batch_options{.batch = 4}, pad<"tokens">{.value = -1}) | prefetch(2);
  for (auto& b : padded.epoch(0)) {
    auto t = b.get<"tokens">();
    const auto longest = static_cast<std::size_t>(t.shape()[1]);
    for (std::size_t r = 0; r < b.size(); ++r) {
      const auto& ref = docs[b.ids()[r]];
      for (std::size_t k = 0; k < longest; ++k)
        REQUIRE(t[r * longest + k] == (k < ref.size() ? static_cast<std::int64_t>(ref[k]) : -1));
    }
  }
}

TEST_CASE("convert: a deferred field is written into the destination's tail and widened in place") {
  for (std::size_t n : {0u, 1u, 2u, 3u, 17u, 1000u}) {
    std::vector<std::uint16_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint16_t>(65535 - i * 61);
    const auto stage = convert<"x", std::int64_t>();
    const auto c = stage(deferred_tokens{.id = 3, .v = &v}, sample_context{});
    static_assert(!has_bytes_of_x<std::remove_cvref_t<decltype(c)>>);
    REQUIRE(c.size_of<"x">() == n * 8);
    std::vector<std::int64_t> out(n, -7);
    c.write<"x">(std::as_writable_bytes(std::span(out)), sample_context{});
    for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == static_cast<std::int64_t>(v[i]));
    // to float: uint16 fits a float's mantissa
    const auto f = convert<"x", float>()(deferred_tokens{.v = &v}, sample_context{});
    std::vector<float> fo(n);
    f.write<"x">(std::as_writable_bytes(std::span(fo)), sample_context{});
    for (std::size_t i = 0; i < n; ++i) REQUIRE(fo[i] == static_cast<float>(v[i]));
  }
  static_assert(detail::keeps_values<std::uint16_t, std::int32_t>());
  static_assert(detail::keeps_values<std::uint32_t, std::int64_t>());
  static_assert(!detail::keeps_values<std::uint32_t, std::int32_t>());
  static_assert(!detail::keeps_values<std::int16_t, std::uint64_t>());  // negative values
  static_assert(!detail::keeps_values<std::int32_t, float>());          // 24-bit mantissa
  static_assert(detail::keeps_values<std::int32_t, double>());
  static_assert(!detail::keeps_values<double, float>());
  static_assert(!detail::keeps_values<float, std::int64_t>());
}

TEST_CASE("convert: a field that is not whole elements is a format_error naming the file, record and field") {
  std::vector<std::uint16_t> v(3, 7);
  const auto c = convert<"x", std::int64_t>()(deferred_tokens{.id = 9, .origin = "toks.bin", .v = &v}, sample_context{});
  CHECK(c.size_of<"x">() == 24);
  // An odd byte count from a producer of uint16 elements (a 5-byte member, say).
  const auto o = convert<"x", std::int64_t>()(odd_tokens{{.id = 9, .origin = "toks.bin", .v = &v}}, sample_context{});
  const std::string e = format_error_text([&] { (void)o.size_of<"x">(); });
  CHECK(contains(e, "toks.bin"));
  CHECK(contains(e, "record 9"));
  CHECK(contains(e, "field 'x': 5 bytes are not a whole number of u16 elements"));
}
