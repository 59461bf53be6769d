// tf.train.Example over TFRecord (io/tf_example.hpp): the wire format parsed by hand, fields by
// feature name through the loader, protobuf's merge rules, and bad input of every kind.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "sluice/io/tf_example.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using sluice_test::nested_text;

using namespace sluice;
using bytes = std::vector<std::byte>;

namespace {

// A protobuf encoder written for this test, independent of io::tf_example_builder.
namespace enc {
void varint(bytes& o, std::uint64_t v) {
  do {
    std::uint8_t b = v & 0x7f;
    v >>= 7;
    if (v) b |= 0x80;
    o.push_back(std::byte{b});
  } while (v);
}
void tag(bytes& o, std::uint32_t field, std::uint32_t wire) { varint(o, (std::uint64_t{field} << 3) | wire); }
void len(bytes& o, std::uint32_t field, const bytes& body) {
  tag(o, field, 2);
  varint(o, body.size());
  o.insert(o.end(), body.begin(), body.end());
}
bytes str(std::string_view s) { return bytes(reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size()); }
bytes cat(std::initializer_list<bytes> parts) {
  bytes o;
  for (const auto& p : parts) o.insert(o.end(), p.begin(), p.end());
  return o;
}
// List messages.
bytes bytes_list(std::initializer_list<std::string_view> vs) {
  bytes o;
  for (auto v : vs) len(o, 1, str(v));
  return o;
}
bytes float_list(const std::vector<float>& vs, bool packed = true) {
  bytes o, p;
  for (float v : vs) {
    if (!packed) tag(o, 1, 5);
    auto& d = packed ? p : o;
    const auto* b = reinterpret_cast<const std::byte*>(&v);
    d.insert(d.end(), b, b + 4);
  }
  if (packed) len(o, 1, p);
  return o;
}
bytes int64_list(const std::vector<std::int64_t>& vs, bool packed = true) {
  bytes o, p;
  for (auto v : vs) {
    if (!packed) tag(o, 1, 0);
    varint(packed ? p : o, static_cast<std::uint64_t>(v));
  }
  if (packed) len(o, 1, p);
  return o;
}
// Feature{kind: list}: kind 1 bytes, 2 float, 3 int64.
bytes feature(std::uint32_t kind, const bytes& list) {
  bytes o;
  len(o, kind, list);
  return o;
}
bytes entry(std::string_view key, const bytes& feat) {
  bytes o;
  len(o, 1, str(key));
  len(o, 2, feat);
  return o;
}
bytes example(const std::vector<bytes>& entries) {
  bytes feats, o;
  for (const auto& e : entries) len(feats, 1, e);
  len(o, 1, feats);
  return o;
}
}  // namespace enc

using det = schema<field<"image/encoded", std::uint8_t, variable>, field<"image/class/label", std::int64_t>,
                   field<"bbox/xmin", float, variable>>;

std::string image_of(std::size_t i) { return "jpeg-bytes-of-" + std::string(i % 7 + 1, static_cast<char>('a' + i % 26)); }
std::vector<float> boxes_of(std::size_t i) {
  std::vector<float> b;
  for (std::size_t k = 0; k < i % 4; ++k) b.push_back(static_cast<float>(i) + 0.125f * static_cast<float>(k));
  return b;
}

bytes det_example(std::size_t i, bool packed = true) {
  return enc::example({
      enc::entry("image/format", enc::feature(1, enc::bytes_list({"jpeg"}))),  // not in the schema
      enc::entry("image/encoded", enc::feature(1, enc::bytes_list({image_of(i)}))),
      enc::entry("image/class/label", enc::feature(3, enc::int64_list({static_cast<std::int64_t>(i % 10)}, packed))),
      enc::entry("bbox/xmin", enc::feature(2, enc::float_list(boxes_of(i), packed))),
  });
}

// One Example that exercises protobuf's merge rules (checked against Python's protobuf below).
bytes merge_example(bool unknown_in_entry) {
  bytes unknown;  // one unknown field of each allowed wire type, field number 15
  enc::tag(unknown, 15, 0);
  enc::varint(unknown, 12345);
  enc::tag(unknown, 15, 1);
  unknown.insert(unknown.end(), 8, std::byte{1});
  enc::len(unknown, 15, enc::str("junk"));
  enc::tag(unknown, 15, 5);
  unknown.insert(unknown.end(), 4, std::byte{2});

  // x: first a whole entry {9}, replaced by a later entry (the last name wins) whose float_list
  //    comes in two list messages (merged), one packed and one unpacked, with unknown fields inside
  //    the lists, the Feature and the entry.
  const bytes x_first = enc::entry("x", enc::feature(2, enc::float_list({9.f})));
  bytes x_feat = enc::cat({unknown, enc::feature(2, enc::cat({enc::float_list({1.f, 2.f}), unknown})),
                           enc::feature(2, enc::float_list({3.f}, false)), unknown});
  // y: int64_list then bytes_list then int64_list: the oneof switches twice; only the last run counts.
  bytes y_feat = enc::cat({enc::feature(3, enc::int64_list({100})), enc::feature(1, enc::bytes_list({"q"})),
                           enc::feature(3, enc::int64_list({-5}, false)), enc::feature(3, enc::int64_list({6, 7}))});
  // z: one bytes value (several are refused: their boundaries would be lost).
  bytes z_feat = enc::feature(1, enc::bytes_list({"abcde"}));
  // Example.features given twice: the two maps merge.
  bytes feats1, feats2;
  enc::len(feats1, 1, x_first);
  enc::len(feats1, 1, enc::entry("y", y_feat));
  enc::len(feats1, 15, enc::str("unknown in Features"));
  // An unknown field inside a map entry: sluice skips it like any other. Python's protobuf (upb)
  // (7.36) instead keeps the whole entry as an unknown field of Features (x stays {9}); no writer
  // emits one, so the cross-check leaves it out.
  enc::len(feats2, 1, unknown_in_entry ? enc::cat({unknown, enc::entry("x", x_feat)}) : enc::entry("x", x_feat));
  enc::len(feats2, 1, enc::entry("z", z_feat));
  return enc::cat({unknown, enc::cat({}), [&] { bytes o; enc::len(o, 1, feats1); return o; }(), unknown,
                 [&] { bytes o; enc::len(o, 1, feats2); return o; }()});
}

std::string write_records(const sluice_test::temp_dir& d, const std::string& name, const std::vector<bytes>& recs) {
  bytes file;
  for (const auto& r : recs) io::append_tfrecord(file, r);
  const std::string p = d.file(name);
  sluice_test::write_file(p, file);
  return p;
}


// The text of the format_error fields(i) throws ("" when it parses).
template <class R>
std::string error_of(const R& r, std::size_t i) {
  try {
    (void)r.fields(i);
  } catch (const format_error& e) {
    return e.what();
  }
  return "";
}

template <class T, class S, fixed_string N>
std::vector<T> written(const S& s) {
  bytes buf(s.template size_of<N>());
  s.template write<N>(std::span(buf), sample_context{});
  std::vector<T> v;
  for (std::size_t k = 0; k + sizeof(T) <= buf.size(); k += sizeof(T)) {
    T x;
    std::memcpy(&x, buf.data() + k, sizeof(T));
    v.push_back(x);
  }
  return v;
}

}  // namespace

TEST_CASE("tf_example: the test's encoder and io::tf_example_builder agree byte for byte") {
  const float f[] = {1.5f, -2.f};
  const std::int64_t n[] = {3, -1, 300};
  for (bool packed : {true, false}) {
    const bytes a = io::tf_example_builder({.packed = packed})
                        .bytes("b", sluice_test::as_bytes("xyz"))
                        .floats("f", f)
                        .int64s("i", n)
                        .build();
    const bytes b = enc::example({enc::entry("b", enc::feature(1, enc::bytes_list({"xyz"}))),
                                  enc::entry("f", enc::feature(2, enc::float_list({1.5f, -2.f}, packed))),
                                  enc::entry("i", enc::feature(3, enc::int64_list({3, -1, 300}, packed)))});
    CHECK(a == b);
  }
}

TEST_CASE("tf_example: fields by name through the loader (stack, ragged, pad), packed and unpacked") {
  sluice_test::temp_dir d;
  for (bool packed : {true, false}) {
    std::vector<bytes> recs;
    for (std::size_t i = 0; i < 37; ++i) recs.push_back(det_example(i, packed));
    io::tf_example_reader<det> r{write_records(d, packed ? "p.tfrecord" : "u.tfrecord", recs)};
    REQUIRE(r.size() == 37);
    CHECK(r.expected_count<"image/class/label">() == 1);
    auto loader = from(sample::shuffle(r.size(), {.seed = 3})) | read(r) |
                  collate({.batch = 8}, ragged<"image/encoded">{}, stack<"image/class/label">{},
                          pad<"bbox/xmin">{.value = -1}) |
                  prefetch(2, {.workers = 2});
    std::size_t seen = 0;
    for (auto& b : loader.epoch(0)) {
      auto img = b.get<"image/encoded">();
      auto off = b.get<"image/encoded.offsets">();
      auto lab = b.get<"image/class/label">();
      auto box = b.get<"bbox/xmin">();
      auto blen = b.get<"bbox/xmin.lengths">();
      static_assert(std::is_same_v<decltype(lab)::value_type, std::int64_t>);
      static_assert(std::is_same_v<decltype(box)::value_type, float>);
      const auto L = static_cast<std::size_t>(box.shape()[1]);
      for (std::size_t k = 0; k < b.size(); ++k) {
        const std::size_t id = b.ids()[k];
        const std::string want = image_of(id);
        const std::string got(reinterpret_cast<const char*>(img.data()) + off[k], static_cast<std::size_t>(off[k + 1] - off[k]));
        CHECK(got == want);
        CHECK(lab[k] == static_cast<std::int64_t>(id % 10));
        const auto bx = boxes_of(id);
        REQUIRE(blen[k] == static_cast<std::int64_t>(bx.size()));
        for (std::size_t j = 0; j < L; ++j) CHECK(box[k * L + j] == (j < bx.size() ? bx[j] : -1.f));
      }
      seen += b.size();
    }
    CHECK(seen == 37);
  }
}

TEST_CASE("tf_example: narrower integer fields are range-checked, double widened, u8 from int64_list") {
  using s = schema<field<"a", std::int32_t, variable>, field<"b", std::uint8_t, variable>, field<"c", double, variable>,
                   field<"d", bool, variable>, field<"e", std::uint64_t, variable>>;
  auto rec = [](std::int64_t a, std::int64_t b, std::int64_t dv, std::int64_t e) {
    return enc::example({enc::entry("a", enc::feature(3, enc::int64_list({a, -a}))),
                         enc::entry("b", enc::feature(3, enc::int64_list({b}))),
                         enc::entry("c", enc::feature(2, enc::float_list({0.5f, 3.25f}))),
                         enc::entry("d", enc::feature(3, enc::int64_list({dv}))),
                         enc::entry("e", enc::feature(3, enc::int64_list({e})))});
  };
  sluice_test::temp_dir d;
  io::tf_example_reader<s> r{write_records(d, "n.tfrecord", {rec(2147483647, 255, 1, 7), rec(2147483648, 1, 0, 0),
                                                              rec(1, 256, 0, 0), rec(1, 1, 2, 0), rec(1, 1, 1, -1)})};
  const auto s0 = r.fields(0);
  CHECK(written<std::int32_t, decltype(s0), "a">(s0) == std::vector<std::int32_t>{2147483647, -2147483647});
  CHECK(written<std::uint8_t, decltype(s0), "b">(s0) == std::vector<std::uint8_t>{255});
  CHECK(written<double, decltype(s0), "c">(s0) == std::vector<double>{0.5, 3.25});
  CHECK(written<bool, decltype(s0), "d">(s0) == std::vector<bool>{true});
  CHECK(written<std::uint64_t, decltype(s0), "e">(s0) == std::vector<std::uint64_t>{7});
  CHECK(error_of(r, 1).find("feature 'a': int64_list value 2147483648 does not fit the field's type i32") != std::string::npos);
  CHECK(error_of(r, 2).find("feature 'b': int64_list value 256 does not fit") != std::string::npos);
  CHECK(error_of(r, 3).find("feature 'd': int64_list value 2 does not fit the field's type bool") != std::string::npos);
  CHECK(error_of(r, 4).find("feature 'e': int64_list value -1 does not fit the field's type u64") != std::string::npos);
  CHECK(error_of(r, 1).find("record 1") != std::string::npos);
}

TEST_CASE("tf_example: protobuf's rules: unknown fields skipped, last name wins, lists merged, oneof switches") {
  using s = schema<field<"x", float, variable>, field<"y", std::int64_t, variable>, field<"z", std::uint8_t, variable>>;
  sluice_test::temp_dir d;
  io::tf_example_reader<s> r{write_records(d, "m.tfrecord", {merge_example(true), merge_example(false)})};
  CHECK(written<float, decltype(r.fields(1)), "x">(r.fields(1)) == std::vector<float>{1.f, 2.f, 3.f});
  const auto s0 = r.fields(0);
  CHECK(written<float, decltype(s0), "x">(s0) == std::vector<float>{1.f, 2.f, 3.f});
  CHECK(!s0.feature<"x">().contiguous);
  CHECK(written<std::int64_t, decltype(s0), "y">(s0) == std::vector<std::int64_t>{-5, 6, 7});
  const auto z = written<std::uint8_t, decltype(s0), "z">(s0);
  CHECK(std::string(z.begin(), z.end()) == "abcde");

  // Several bytes values (TF's BytesList(value=[a, b]), or a bytes_list given twice: protobuf
  // merges the values) would arrive joined, where each ends lost: refused, naming the count.
  {
    const bytes two = enc::example({enc::entry("z", enc::feature(1, enc::bytes_list({"ab", "", "cde"})))});
    const bytes merged = enc::example({enc::entry(
        "z", enc::cat({enc::feature(1, enc::bytes_list({"ab"})), enc::feature(1, enc::bytes_list({"cde"}))}))});
    using zs = schema<field<"z", std::uint8_t, variable>>;
    io::tf_example_reader<zs> rz{write_records(d, "z.tfrecord", {two, merged})};
    CHECK(error_of(rz, 0).find("feature 'z': a bytes_list of 3 values; a byte field reads one") != std::string::npos);
    CHECK(error_of(rz, 1).find("feature 'z': a bytes_list of 2 values") != std::string::npos);
    io::tf_example_any az(d.file("z.tfrecord"), {{"z", "z", dtype::u8}});
    bool refused = false;
    try {
      (void)az.fields(0);
    } catch (const format_error& e) {
      refused = std::string(e.what()).find("a bytes_list of 3 values") != std::string::npos;
    }
    CHECK(refused);
  }

  // The key after the value inside an entry is fine too.
  bytes value_first;
  enc::len(value_first, 2, enc::feature(2, enc::float_list({4.f})));
  enc::len(value_first, 1, enc::str("x"));
  const bytes ex2 = enc::example({value_first, enc::entry("y", enc::feature(3, {})), enc::entry("z", enc::feature(1, {}))});
  io::tf_example_reader<s> r2{write_records(d, "k.tfrecord", {ex2})};
  const auto s2 = r2.fields(0);
  CHECK(written<float, decltype(s2), "x">(s2) == std::vector<float>{4.f});
  CHECK(s2.count_of<"y">() == 0);  // an empty list of the right type is fine for a variable field
  CHECK(s2.size_of<"z">() == 0);
}

TEST_CASE("tf_example: zero copy: bytes and packed floats are views into the mapping") {
  sluice_test::temp_dir d;
  io::tf_example_reader<det> r{write_records(d, "z.tfrecord", {det_example(5)})};
  const auto s = r.fields(0);
  const auto rec = r.records().record(0);
  for (const auto& f : {s.feature<"image/encoded">(), s.feature<"bbox/xmin">(), s.feature<"image/class/label">()}) {
    CHECK(f.contiguous);
    CHECK(f.data.data() >= rec.data());
    CHECK(f.data.data() + f.data.size() <= rec.data() + rec.size());
  }
  CHECK(s.feature<"bbox/xmin">().count == 1);
}

TEST_CASE("tf_example: the word-at-a-time varint count agrees with the bytewise one") {
  std::uint64_t x = 12345;
  auto next = [&] { return x = sluice::splitmix64(x); };
  const io::detail::pb::where w{.file = "mem"};
  std::size_t agreed = 0, errors = 0;
  for (int round = 0; round < 20000; ++round) {
    bytes run(next() % 40);
    const unsigned bias = static_cast<unsigned>(next() % 4);  // how often a byte continues
    for (auto& b : run) {
      const auto r = next();
      b = static_cast<std::byte>((r & 0x7f) | ((r >> 8) % 4 < bias ? 0x80 : 0) | ((r >> 16) % 8 == 0 ? 0x7e : 0));
    }
    std::string e1, e2;
    std::uint64_t n1 = 0, n2 = 0;
    try { n1 = io::detail::pb::count_varints(run, w); } catch (const format_error& e) { e1 = e.what(); }
    try { n2 = io::detail::pb::count_varints_bytewise(run, w); } catch (const format_error& e) { e2 = e.what(); }
    CHECK(e1 == e2);
    CHECK(n1 == n2);
    ++agreed;
    errors += !e1.empty();
  }
  CHECK(errors > 100);
  CHECK(agreed - errors > 100);
}

TEST_CASE("tf_example: truncation at every byte of a record is a format_error naming file and record") {
  const bytes full = det_example(6);
  std::vector<bytes> recs;
  for (std::size_t n = 0; n < full.size(); ++n) recs.emplace_back(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
  recs.push_back(full);
  sluice_test::temp_dir d;
  const std::string p = write_records(d, "t.tfrecord", recs);
  // The fixed label's count comes from record 0 (empty here: missing), so give it.
  CHECK_THROWS_WITH_AS(io::tf_example_reader<det>{p}, doctest::Contains("record 0"), format_error);
  io::tf_example_reader<det> r{p, {.counts = {{"image/class/label", 1}}}};
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::string e = error_of(r, n);
    INFO("prefix of ", n, " bytes: ", e);
    CHECK(e.find("'" + p + "'") != std::string::npos);
    CHECK(e.find("record " + std::to_string(n)) != std::string::npos);
  }
  CHECK(error_of(r, full.size()).empty());
}

TEST_CASE("tf_example: bad varints, lengths, wire types and list types name file, record and feature") {
  using s = schema<field<"x", float, variable>, field<"y", std::int64_t>>;
  const bytes y_ok = enc::entry("y", enc::feature(3, enc::int64_list({1})));
  auto with_x_feature = [&](const bytes& feat) { return enc::example({enc::entry("x", feat), y_ok}); };
  auto with_x_list = [&](std::uint32_t kind, const bytes& list) { return with_x_feature(enc::feature(kind, list)); };
  auto raw = [](std::initializer_list<int> v) {
    bytes o;
    for (int b : v) o.push_back(static_cast<std::byte>(b));
    return o;
  };
  struct bad {
    const char* what;
    bytes rec;
    const char* expect;
  };
  std::vector<bad> cases;
  // Varints.
  {
    bytes list;
    enc::tag(list, 1, 0);
    for (int k = 0; k < 10; ++k) list.push_back(std::byte{0x80});
    list.push_back(std::byte{0});
    cases.push_back({"11-byte varint value", enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))),
                                                           enc::entry("y", enc::feature(3, list))}),
                     "feature 'y': varint longer than 10 bytes"});
    bytes list2;
    enc::tag(list2, 1, 0);
    for (int k = 0; k < 9; ++k) list2.push_back(std::byte{0xff});
    list2.push_back(std::byte{0x02});
    cases.push_back({"varint overflowing 64 bits", enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))),
                                                                 enc::entry("y", enc::feature(3, list2))}),
                     "feature 'y': varint overflows 64 bits"});
    bytes p11, p10;
    enc::len(p11, 1, raw({0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0x01}));
    enc::len(p10, 1, raw({0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03}));
    cases.push_back({"11-byte varint in a packed run", enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))),
                                                                     enc::entry("y", enc::feature(3, p11))}),
                     "feature 'y': varint longer than 10 bytes"});
    cases.push_back({"overflowing varint in a packed run", enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))),
                                                                         enc::entry("y", enc::feature(3, p10))}),
                     "feature 'y': varint overflows 64 bits"});
    bytes packed;
    enc::len(packed, 1, raw({0x01, 0x80}));  // the packed run ends inside a varint
    cases.push_back({"packed varints cut", enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))),
                                                         enc::entry("y", enc::feature(3, packed))}),
                     "feature 'y': varint runs past the end"});
    cases.push_back({"tag varint cut at the end", enc::cat({det_example(0), raw({0x80})}), "varint runs past the end"});
  }
  // Lengths.
  {
    bytes list;
    enc::tag(list, 1, 2);
    enc::varint(list, 100);
    list.insert(list.end(), 8, std::byte{0});
    cases.push_back({"packed length past its message", with_x_list(2, list), "feature 'x': length 100 runs past the end"});
    bytes list3;
    enc::len(list3, 1, bytes(6));
    cases.push_back({"packed floats not a multiple of 4", with_x_list(2, list3), "feature 'x': packed float_list of 6 bytes"});
    bytes ex = enc::example({y_ok});
    ex[1] = std::byte{0x7f};  // Example.features' length: past the record
    cases.push_back({"Example.features length past the record", ex, "length 127 runs past the end"});
    bytes fl;
    enc::tag(fl, 1, 5);
    fl.push_back(std::byte{0});
    cases.push_back({"unpacked float cut", with_x_list(2, fl), "feature 'x': float value runs past the end"});
  }
  // Wire types.
  for (int wt : {3, 4, 6, 7}) {
    bytes top = enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))), y_ok});
    bytes t;
    enc::tag(t, 9, static_cast<std::uint32_t>(wt));
    top.insert(top.begin(), t.begin(), t.end());
    cases.push_back({"bad wire type at the top", top, wt < 5 ? "group (wire type" : "invalid wire type"});
    bytes in_feature = enc::feature(2, enc::float_list({1.f}));
    in_feature.insert(in_feature.end(), t.begin(), t.end());
    cases.push_back({"bad wire type in a Feature", with_x_feature(in_feature),
                     wt < 5 ? "feature 'x': group (wire type" : "feature 'x': invalid wire type"});
    bytes in_list = enc::float_list({1.f});
    in_list.insert(in_list.end(), t.begin(), t.end());
    cases.push_back({"bad wire type in a list", with_x_list(2, in_list), "feature 'x':"});
  }
  {
    bytes list;
    enc::tag(list, 1, 0);  // a float value as a varint
    enc::varint(list, 1);
    cases.push_back({"float value with wire type 0", with_x_list(2, list), "feature 'x': float_list value with wire type 0"});
    bytes feat;
    enc::tag(feat, 2, 0);  // float_list as a varint
    enc::varint(feat, 1);
    cases.push_back({"list with wire type 0", with_x_feature(feat), "feature 'x': float_list with wire type 0"});
    bytes zero;
    enc::tag(zero, 0, 0);
    cases.push_back({"field number 0", enc::cat({zero, enc::example({})}), "field number 0"});
  }
  // Schema mismatches.
  cases.push_back({"wrong list type", with_x_list(3, enc::int64_list({1})),
                   "feature 'x': is a int64_list, but its field is f32, which takes float_list"});
  cases.push_back({"bytes for an int64 field", enc::example({enc::entry("x", enc::feature(2, {})),
                                                             enc::entry("y", enc::feature(1, enc::bytes_list({"1"})))}),
                   "feature 'y': is a bytes_list"});
  cases.push_back({"missing feature", enc::example({y_ok}), "feature 'x': missing from the record"});
  cases.push_back({"no list", with_x_feature({}), "feature 'x': holds no list"});
  cases.push_back({"fixed count", enc::example({enc::entry("x", enc::feature(2, {})),
                                                enc::entry("y", enc::feature(3, enc::int64_list({1, 2})))}),
                   "feature 'y': holds 2 values, but its field is fixed at 1"});
  {
    bytes e = enc::entry("x", enc::feature(2, {}));
    enc::len(e, 2, enc::feature(2, {}));
    cases.push_back({"entry value twice", enc::example({e, y_ok}), "feature 'x': map entry holds its value twice"});
  }

  std::vector<bytes> recs{enc::example({enc::entry("x", enc::feature(2, enc::float_list({1.f}))), y_ok})};
  for (const auto& c : cases) recs.push_back(c.rec);
  sluice_test::temp_dir d;
  const std::string p = write_records(d, "bad.tfrecord", recs);
  io::tf_example_reader<s> r{p};
  CHECK(error_of(r, 0).empty());
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const std::string e = error_of(r, k + 1);
    INFO(cases[k].what, ": ", e);
    CHECK(e.find(cases[k].expect) != std::string::npos);
    CHECK(e.find("'" + p + "', record " + std::to_string(k + 1) + ", byte offset ") != std::string::npos);
  }

  // Duplicate feature names: the last one wins, so a bad first one is still parsed (and refused),
  // and a good first one is replaced.
  const bytes dup = enc::example({enc::entry("y", enc::feature(3, enc::int64_list({1}))), enc::entry("x", enc::feature(2, {})),
                                  enc::entry("y", enc::feature(3, enc::int64_list({42})))});
  io::tf_example_reader<s> rd{write_records(d, "dup.tfrecord", {dup})};
  const auto sd = rd.fields(0);
  CHECK(written<std::int64_t, decltype(sd), "y">(sd) == std::vector<std::int64_t>{42});
}

TEST_CASE("tf_example: labels<Name>() for a class-balanced sampler") {
  std::vector<bytes> recs;
  for (std::size_t i = 0; i < 30; ++i) recs.push_back(det_example(i));
  sluice_test::temp_dir d;
  io::tf_example_reader<det> r{write_records(d, "lab.tfrecord", recs)};
  const auto labels = r.labels<"image/class/label">();
  REQUIRE(labels.size() == 30);
  for (std::size_t i = 0; i < 30; ++i) CHECK(labels[i] == static_cast<std::int64_t>(i % 10));
  auto loader = from(sample::class_balanced(labels, {}, {.seed = 1})) | read(r) |
                collate({.batch = 10}, stack<"image/class/label">{}) | prefetch(2);
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(n > 0);
  using two = schema<field<"bbox/xmin", float, variable>, field<"image/class/label", std::int32_t, variable>>;
  recs[4] = enc::example({enc::entry("bbox/xmin", enc::feature(2, {})), enc::entry("image/class/label", enc::feature(3, enc::int64_list({1, 2})))});
  io::tf_example_reader<two> r2{write_records(d, "lab2.tfrecord", recs)};
  CHECK_THROWS_WITH_AS((void)r2.labels<"image/class/label">(),
                       doctest::Contains("record 4: feature 'image/class/label': holds 2 values; a label needs exactly one"), format_error);
}

TEST_CASE("tf_example: .counts checks fixed fields, misuse is a usage_error") {
  using s = schema<field<"v", float>>;
  sluice_test::temp_dir d;
  const std::string p = write_records(d, "c.tfrecord", {enc::example({enc::entry("v", enc::feature(2, enc::float_list({1, 2, 3})))}),
                                                         enc::example({enc::entry("v", enc::feature(2, enc::float_list({1, 2})))})});
  io::tf_example_reader<s> learnt{p};
  CHECK(learnt.expected_count<"v">() == 3);
  CHECK(error_of(learnt, 1).find("feature 'v': holds 2 values, but its field is fixed at 3") != std::string::npos);
  io::tf_example_reader<s> given{p, {.counts = {{"v", 2}}}};
  CHECK(error_of(given, 0).find("holds 3 values") != std::string::npos);
  CHECK(error_of(given, 1).empty());
  CHECK_THROWS_WITH_AS((io::tf_example_reader<s>{p, {.counts = {{"w", 2}}}}), doctest::Contains("not a field of the schema"), usage_error);
  using sv = schema<field<"v", float, variable>>;
  CHECK_THROWS_WITH_AS((io::tf_example_reader<sv>{p, {.counts = {{"v", 2}}}}), doctest::Contains("a variable field"), usage_error);
}

TEST_CASE("tf_example: .features reads features named at run time, errors and labels name the feature") {
  std::vector<bytes> recs;
  for (std::size_t i = 0; i < 12; ++i) recs.push_back(det_example(i));
  recs[5] = enc::example({enc::entry("image/encoded", enc::feature(1, enc::bytes_list({"x"}))),
                          enc::entry("image/class/label", enc::feature(2, enc::float_list({1.f})))});
  sluice_test::temp_dir d;
  const std::string p = write_records(d, "f.tfrecord", recs);
  using cls = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  io::tf_example_reader<cls> r{p, {.counts = {{"label", 1}},
                                   .features = {{"image", "image/encoded"}, {"label", "image/class/label"}}}};
  CHECK(r.feature_names()[0] == "image/encoded");
  CHECK(r.feature_names()[1] == "image/class/label");
  const auto s = r.fields(3);
  CHECK(s.count_of<"image">() == image_of(3).size());
  CHECK(s.count_of<"label">() == 1);
  auto loader = from(sample::sequential(5)) | read(r) | collate({.batch = 5}, ragged<"image">{}, stack<"label">{}) | prefetch(1);
  for (auto& b : loader.epoch(0))
    for (std::size_t k = 0; k < 5; ++k) CHECK(b.get<"label">()[k] == static_cast<std::int64_t>(k % 10));
  CHECK(error_of(r, 5).find("feature 'image/class/label': is a float_list") != std::string::npos);
  CHECK_THROWS_WITH_AS((void)r.labels<"label">(), doctest::Contains("record 5, byte offset"), format_error);
  // Without the mapping the fields read features "image" and "label", which no record has.
  io::tf_example_reader<cls> plain{p, {.counts = {{"label", 1}}}};
  CHECK(error_of(plain, 0).find("feature 'image': missing from the record") != std::string::npos);
  CHECK_THROWS_WITH_AS((io::tf_example_reader<cls>{p, {.features = {{"img", "image/encoded"}}}}),
                       doctest::Contains("names field 'img', which is not a field of the schema"), usage_error);
  CHECK_THROWS_WITH_AS((io::tf_example_reader<cls>{p, {.features = {{"image", ""}}}}), doctest::Contains("an empty feature name"),
                       usage_error);
  CHECK_THROWS_WITH_AS((io::tf_example_reader<cls>{p, {.features = {{"image", "label"}}}}),
                       doctest::Contains("fields 'image' and 'label' both read the feature 'label'"), usage_error);
}

TEST_CASE("tf_example: in the loader a bad record is a stage_error naming it, or skipped under on_error::skip") {
  std::vector<bytes> recs;
  for (std::size_t i = 0; i < 20; ++i) recs.push_back(det_example(i));
  recs[7] = enc::example({enc::entry("image/encoded", enc::feature(1, enc::bytes_list({"x"}))),
                          enc::entry("image/class/label", enc::feature(2, enc::float_list({1.f}))),
                          enc::entry("bbox/xmin", enc::feature(2, {}))});
  recs[13].resize(recs[13].size() - 3);
  sluice_test::temp_dir d;
  const std::string p = write_records(d, "l.tfrecord", recs);
  io::tf_example_reader<det> r{p};
  auto make = [&](on_error e) {
    return from(sample::sequential(r.size())) | read(r) |
           collate({.batch = 4}, ragged<"image/encoded">{}, stack<"image/class/label">{}, ragged<"bbox/xmin">{}) |
           prefetch(2, {.workers = 2, .errors = e});
  };
  auto strict = make(on_error::raise);
  try {
    for (auto& b : strict.epoch(0)) (void)b;
    FAIL("a bad record passed");
  } catch (const stage_error& e) {
    const std::string t = nested_text(e);
    CHECK(t.find(p) != std::string::npos);
    CHECK(t.find("record 7") != std::string::npos);
    CHECK(t.find("feature 'image/class/label': is a float_list") != std::string::npos);
  }
  auto lenient = make(on_error::skip);
  std::vector<std::uint64_t> ids;
  for (auto& b : lenient.epoch(0))
    for (std::size_t k = 0; k < b.size(); ++k) {
      ids.push_back(b.ids()[k]);
      CHECK(b.get<"image/class/label">()[k] == static_cast<std::int64_t>(b.ids()[k] % 10));
    }
  CHECK(ids.size() == 18);
  CHECK(std::find(ids.begin(), ids.end(), 7u) == ids.end());
  CHECK(std::find(ids.begin(), ids.end(), 13u) == ids.end());
}

TEST_CASE("tf_example: cross-check with Python's protobuf (where installed)") {
  if (std::system("python3 -c 'import google.protobuf' >/dev/null 2>&1") != 0)
    sluice_test::skip("python3 with the protobuf module is not installed");
  sluice_test::temp_dir d;
  // Python writes Examples with protobuf's own serializer; sluice reads them. Then sluice's
  // builder writes, and Python parses and prints what it read.
  const std::string py_out = d.file("py.bin"), ours = d.file("ours.bin"), text = d.file("ours.txt");
  const std::string cmd = std::string("python3 ") + SLUICE_TF_EXAMPLE_PY + " write " + py_out;
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::vector<bytes> recs;  // u32 length + message, framed here as TFRecord
  {
    std::FILE* fp = std::fopen(py_out.c_str(), "rb");
    REQUIRE(fp != nullptr);
    std::uint32_t n = 0;
    while (std::fread(&n, 4, 1, fp) == 1) {
      bytes m(n);
      REQUIRE(std::fread(m.data(), 1, n, fp) == n);
      recs.push_back(std::move(m));
    }
    std::fclose(fp);
  }
  io::tf_example_reader<det> r{write_records(d, "py.tfrecord", recs)};
  REQUIRE(r.size() == 10);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const auto s = r.fields(i);
    const auto img = written<std::uint8_t, decltype(s), "image/encoded">(s);
    CHECK(std::string(img.begin(), img.end()) == image_of(i));
    CHECK(written<std::int64_t, decltype(s), "image/class/label">(s) == std::vector<std::int64_t>{static_cast<std::int64_t>(i) - 5});
    CHECK(written<float, decltype(s), "bbox/xmin">(s) == boxes_of(i));
  }
  const float f[] = {0.5f, -1.25f};
  const std::int64_t n[] = {-3, 1ll << 40};
  bytes b = io::tf_example_builder({.packed = false}).bytes("b", sluice_test::as_bytes("hi")).floats("f", f).int64s("i", n).build();
  auto python_reads = [&](const bytes& msg) {
    sluice_test::write_file(ours, msg);
    REQUIRE(std::system((std::string("python3 ") + SLUICE_TF_EXAMPLE_PY + " read " + ours + " > " + text).c_str()) == 0);
    std::FILE* fp = std::fopen(text.c_str(), "r");
    REQUIRE(fp != nullptr);
    char buf[512] = {};
    const std::size_t got = std::fread(buf, 1, sizeof buf - 1, fp);
    std::fclose(fp);
    return std::string(buf, got);
  };
  CHECK(python_reads(b) == "b bytes hi\nf float 0.5 -1.25\ni int64 -3 1099511627776\n");
  // The merge rules sluice follows (last name wins, Features and lists merged, oneof switches,
  // unknown fields skipped) are protobuf's: Python reads the same values from the same bytes.
  CHECK(python_reads(merge_example(false)) == "x float 1.0 2.0 3.0\ny int64 -5 6 7\nz bytes abcde\n");
}

namespace {
// Every tensor of every batch: bytes, shapes and names.
template <class L>
void tensors_of(L& loader, std::vector<bytes>& data, std::vector<std::vector<std::int64_t>>& shapes,
                std::vector<std::string>& names) {
  for (auto& b : loader.epoch(1))
    for (std::size_t t = 0; t < b.tensor_count(); ++t) {
      data.emplace_back(b.tensor(t).bytes().begin(), b.tensor(t).bytes().end());
      shapes.emplace_back(b.tensor(t).shape().begin(), b.tensor(t).shape().end());
      names.emplace_back(b.tensor(t).name());
    }
}
}  // namespace

TEST_CASE("tf_example_any: features at run time, types from record 0, the compiled reader's batches byte for byte") {
  sluice_test::temp_dir d;
  for (bool packed : {true, false}) {
    CAPTURE(packed);
    std::vector<bytes> recs;
    for (std::size_t i = 0; i < 29; ++i) recs.push_back(det_example(i, packed));
    const std::string p = write_records(d, packed ? "p.tfrecord" : "u.tfrecord", recs);
    io::tf_example_any any(p, {{"image", "image/encoded"},
                               {"label", "image/class/label", std::nullopt, extent::fixed},
                               {"xmin", "bbox/xmin"}});
    CHECK(any.schema().describe() == "image (u8, variable), label (i64, fixed), xmin (f32, variable)");
    CHECK(any.expected_count(1) == 1);
    io::tf_example_reader<det> typed{p};
    for (std::size_t workers : {1, 2}) {
      CAPTURE(workers);
      auto compiled = from(sample::shuffle(typed.size(), {.seed = 3})) | read(typed) |
                      collate({.batch = 8, .drop_last = false}, ragged<"image/encoded">{}, stack<"image/class/label">{},
                              pad<"bbox/xmin">{.value = -1}) |
                      prefetch(2, {.workers = workers});
      auto run_time = from(sample::shuffle(any.size(), {.seed = 3})) | read(any) |
                      collate({.batch = 8, .drop_last = false}, any.schema(),
                              {{"image", ragged<>{}}, {"label", stack<>{}}, {"xmin", pad<>{.value = -1}}}) |
                      prefetch(2, {.workers = workers});
      std::vector<bytes> want, got;
      std::vector<std::vector<std::int64_t>> want_shape, got_shape;
      std::vector<std::string> want_names, got_names;
      tensors_of(compiled, want, want_shape, want_names);
      tensors_of(run_time, got, got_shape, got_names);
      REQUIRE(want.size() == 4 * 5);  // 4 batches x (image, image.offsets, label, xmin, xmin.lengths)
      CHECK(got == want);
      CHECK(got_shape == want_shape);
      CHECK(got_names[2] == "label");
      CHECK(got_shape[2] == std::vector<std::int64_t>{8});
    }
  }
}

TEST_CASE("tf_example_any: narrowed, widened and merged lists are written as the compiled reader writes them") {
  sluice_test::temp_dir d;
  // x: float_list in pieces (not contiguous), y: int64s (oneof switched), z: one bytes value.
  const std::string p = write_records(d, "m.tfrecord", {merge_example(false), merge_example(false)});
  io::tf_example_any r(p, {{"x", "x", dtype::f64}, {"y", "y", dtype::i16}, {"z"}});
  CHECK(r.schema().describe() == "x (f64, variable), y (i16, variable), z (u8, variable)");
  auto loader = from(sample::sequential(r.size())) | read(r) |
                collate({.batch = 2}, r.schema(), {{"x", ragged<>{}}, {"y", ragged<>{}}, {"z", ragged<>{}}}) |
                prefetch(1, {.workers = 1});
  std::size_t batches = 0;
  for (auto& b : loader.epoch(0)) {
    ++batches;
    const auto x = b.field("x"), y = b.field("y"), z = b.field("z");
    REQUIRE(x.bytes().size() == 2 * 3 * sizeof(double));
    std::vector<double> xs(6);
    std::memcpy(xs.data(), x.bytes().data(), x.bytes().size());
    CHECK(xs == std::vector<double>{1, 2, 3, 1, 2, 3});
    REQUIRE(y.bytes().size() == 2 * 3 * sizeof(std::int16_t));
    std::vector<std::int16_t> ys(6);
    std::memcpy(ys.data(), y.bytes().data(), y.bytes().size());
    CHECK(ys == std::vector<std::int16_t>{-5, 6, 7, -5, 6, 7});
    CHECK(std::string(reinterpret_cast<const char*>(z.bytes().data()), z.bytes().size()) == "abcdeabcde");
  }
  CHECK(batches == 1);
  // The first record's x is the compiled reader's (a producer, not a view: two pieces).
  const auto s0 = r.fields(0);
  CHECK(s0.fields[0].producer != nullptr);
  CHECK(s0.size_of(0) == 3 * sizeof(double));
}

TEST_CASE("tf_example: a fixed field whose list is empty in record 0 is refused at open, pointing to variable") {
  // Record 0's count fixes the field: 0 would hold nothing in any record, and record 1's two
  // values would fail against a count of 0.
  sluice_test::temp_dir d;
  const std::string p = write_records(d, "e.tfrecord", {enc::example({enc::entry("ids", enc::feature(3, enc::int64_list({})))}),
                                                        enc::example({enc::entry("ids", enc::feature(3, enc::int64_list({1, 2})))})});
  const std::string words = "feature 'ids': holds no values in record 0, which gives fixed field 'ids' its count";
  auto refused = [&](auto open) {
    try {
      open();
    } catch (const format_error& e) {
      const std::string t = e.what();
      return t.find(words) != std::string::npos && t.find("e.tfrecord") != std::string::npos &&
             t.find("sluice.ragged()") != std::string::npos;
    }
    return false;
  };
  CHECK(refused([&] { io::tf_example_any r(p, {{"ids", "ids", dtype::i64, extent::fixed}}); }));
  CHECK(refused([&] { io::tf_example_any r(p, {{"ids", "", std::nullopt, extent::fixed}}); }));
  CHECK(refused([&] { io::tf_example_reader<schema<field<"ids", std::int64_t>>> r(p); }));
  // A count given, or a variable field, reads the file.
  io::tf_example_any ok(p, {{"ids", "ids", dtype::i64, extent::variable}});
  CHECK(ok.size() == 2);
}

TEST_CASE("tf_example_any: what does not fit is refused, naming the file, the record and the feature") {
  sluice_test::temp_dir d;
  std::vector<bytes> recs;
  for (std::size_t i = 0; i < 4; ++i) recs.push_back(det_example(i));
  // Record 2: the label as two values (a fixed field holds record 0's one); record 3: no boxes.
  recs[2] = enc::example({enc::entry("image/encoded", enc::feature(1, enc::bytes_list({"x"}))),
                          enc::entry("image/class/label", enc::feature(3, enc::int64_list({1, 2}))),
                          enc::entry("bbox/xmin", enc::feature(2, enc::float_list({})))});
  recs[3] = enc::example({enc::entry("image/encoded", enc::feature(1, enc::bytes_list({"x"}))),
                          enc::entry("image/class/label", enc::feature(3, enc::int64_list({1})))});
  const std::string p = write_records(d, "bad.tfrecord", recs);
  io::tf_example_any r(p, {{"image", "image/encoded"}, {"label", "image/class/label", std::nullopt, extent::fixed},
                           {"xmin", "bbox/xmin"}});
  CHECK(error_of(r, 1).empty());
  CHECK(error_of(r, 2).find("feature 'image/class/label': holds 2 values, but its field is fixed at 1") != std::string::npos);
  CHECK(error_of(r, 2).find("record 2") != std::string::npos);
  CHECK(error_of(r, 3).find("feature 'bbox/xmin': missing from the record") != std::string::npos);
  // Under skip: the two bad records dropped and counted.
  auto loader = from(sample::sequential(r.size())) | read(r) |
                collate({.batch = 4, .drop_last = false}, r.schema(), {{"label", stack<>{}}}) |
                prefetch(1, {.workers = 2, .errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(n == 2);
  CHECK(loader.stats().skipped == 2);
  // A type its list cannot hold; a type given that is not the list's; a feature not in record 0.
  CHECK_THROWS_WITH_AS(io::tf_example_any(p, {{"i", "image/encoded", dtype::f16}}), doctest::Contains("tf.train.Example holds"),
                       usage_error);
  io::tf_example_any wrong(p, {{"i", "image/encoded", dtype::f32}});
  CHECK(error_of(wrong, 0).find("feature 'image/encoded': is a bytes_list, but its field is f32, which takes float_list") !=
        std::string::npos);
  const auto e = sluice_test::expect_format_error([&] { io::tf_example_any none(p, {{"w", "weights"}}); });
  CHECK(e.cause().find("feature 'weights' (field 'w') is not in record 0") != std::string::npos);
  CHECK_THROWS_WITH_AS(io::tf_example_any(p, {{"a", "image/encoded"}, {"b", "image/encoded"}}),
                       doctest::Contains("both read the feature 'image/encoded'"), usage_error);
  CHECK_THROWS_WITH_AS(io::tf_example_any(p, {{"a", "x"}, {"a", "y"}}), doctest::Contains("names field 'a' twice"), usage_error);
}

namespace {
// A codec for the test: the first 4 bytes of the encoded value, as they are.
struct first_four {
  using codec_concept = codec_tag;
  [[nodiscard]] std::size_t output_bytes() const noexcept { return 4; }
  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context&) const {
    if (in.size() < 4) throw format_error("", {}, "shorter than 4 bytes");
    std::memcpy(out.data(), in.data(), 4);
  }
};
}  // namespace

TEST_CASE("tf_example_any: a decoded feature is one bytes value: a list of several is a format_error and never decoded") {
  sluice_test::temp_dir d;
  std::vector<bytes> recs = {det_example(0), det_example(1), det_example(2)};
  recs[1] = enc::example({enc::entry("image/encoded", enc::feature(1, enc::bytes_list({"abcd", "efgh"})))});
  io::tf_example_any r(write_records(d, "two.tfrecord", recs), {{"image", "image/encoded"}});
  auto dec = decode_field(r.schema(), "image", first_four{});
  for (auto errors : {on_error::raise, on_error::skip}) {
    auto loader = from(sample::sequential(r.size())) | read(r) | dec |
                  collate({.batch = 3, .drop_last = false}, dec.schema(), {{"image", stack<>{}}}) |
                  prefetch(1, {.workers = 1, .errors = errors});
    if (errors == on_error::raise) {
      try {
        for (auto& b : loader.epoch(0)) (void)b;
        FAIL("a list of two bytes values was decoded");
      } catch (const stage_error& e) {
        const std::string t = nested_text(e);
        CHECK(t.find("record 1") != std::string::npos);
        CHECK(t.find("feature 'image/encoded': a bytes_list of 2 values; a byte field reads one") != std::string::npos);
      }
    } else {
      std::vector<std::string> got;
      for (auto& b : loader.epoch(0)) {
        const auto v = b.field("image");
        for (std::size_t k = 0; k < b.size(); ++k) got.emplace_back(reinterpret_cast<const char*>(v.bytes().data()) + 4 * k, 4);
      }
      CHECK(got == std::vector<std::string>{"jpeg", "jpeg"});  // image_of(i) starts "jpeg-bytes-of-"
      CHECK(loader.stats().skipped == 1);
    }
  }
}

TEST_CASE("tf_example: several files read as one, by brace pattern or list, errors naming the file and its record") {
  sluice_test::temp_dir d;
  // Three shards of 5, 0 and 7 records: sample i is det_example(i).
  std::vector<bytes> recs;
  for (std::size_t i = 0; i < 12; ++i) recs.push_back(det_example(i));
  const std::string a = write_records(d, "s-0.tfrecord", {recs.begin(), recs.begin() + 5});
  const std::string b = write_records(d, "s-1.tfrecord", {});
  const std::string c = write_records(d, "s-2.tfrecord", {recs.begin() + 5, recs.end()});
  const std::string all = write_records(d, "all.tfrecord", recs);

  io::tfrecord_reader pattern(d.file("s-{0..2}.tfrecord"));
  io::tfrecord_reader list(std::vector<std::string>{a, b, c});
  for (const io::tfrecord_reader* r : {&pattern, &list}) {
    REQUIRE(r->size() == 12);
    CHECK(r->shard_count() == 3);
    CHECK(r->shard_range(1) == std::pair<std::uint64_t, std::uint64_t>{5, 5});
    CHECK(r->shard_range(2) == std::pair<std::uint64_t, std::uint64_t>{5, 12});
    for (std::size_t i = 0; i < 12; ++i) {
      const auto rec = r->record(i);
      CHECK(bytes(rec.begin(), rec.end()) == recs[i]);
      CHECK(r->view(i).origin == (i < 5 ? a : c));
      CHECK(r->place(i).record == (i < 5 ? i : i - 5));
    }
    CHECK_THROWS_AS((void)r->record(12), usage_error);
  }
  CHECK(pattern.path() == d.file("s-{0..2}.tfrecord"));
  CHECK(list.path() == a + " (+2 more files)");
  CHECK_THROWS_AS(io::tfrecord_reader(std::vector<std::string>{}), usage_error);

  // The compiled and the run-time reader over the shards give the batches of the one file.
  io::tf_example_reader<det> one{all}, three{d.file("s-{0..2}.tfrecord")};
  io::tf_example_any any3(d.file("s-{0..2}.tfrecord"), {{"image", "image/encoded"},
                                                       {"label", "image/class/label", std::nullopt, extent::fixed},
                                                       {"xmin", "bbox/xmin"}});
  CHECK(three.labels<"image/class/label">() == one.labels<"image/class/label">());
  CHECK(three.fields(7).origin == c);
  CHECK(three.fields(7).id == 7);
  CHECK(any3.fields(7).origin == c);
  CHECK(three.shard_count() == 3);
  CHECK(any3.shard_range(2) == std::pair<std::uint64_t, std::uint64_t>{5, 12});
  auto batches = [](auto& r, bool run_time) {
    std::vector<bytes> t;
    std::vector<std::vector<std::int64_t>> shapes;
    std::vector<std::string> names;
    if constexpr (requires { r.schema(); }) {
      auto l = from(sample::shuffle(r.size(), {.seed = 5})) | read(r) |
               collate({.batch = 4, .drop_last = false}, r.schema(),
                       {{"image", ragged<>{}}, {"label", stack<>{}}, {"xmin", pad<>{.value = -1}}}) |
               prefetch(2, {.workers = 2});
      tensors_of(l, t, shapes, names);
    } else {
      auto l = from(sample::shuffle(r.size(), {.seed = 5})) | read(r) |
               collate({.batch = 4, .drop_last = false}, ragged<"image/encoded">{}, stack<"image/class/label">{},
                       pad<"bbox/xmin">{.value = -1}) |
               prefetch(2, {.workers = 2});
      tensors_of(l, t, shapes, names);
    }
    (void)run_time;
    return t;
  };
  const auto want = batches(one, false);
  REQUIRE(want.size() == 3 * 5);
  CHECK(batches(three, false) == want);
  CHECK(batches(any3, true) == want);

  // A bad record in the third file: the error names that file and its own record 1; under defer
  // damaged() numbers it as the reader does (5 + 1).
  bytes broken;
  for (std::size_t i = 5; i < 12; ++i) io::append_tfrecord(broken, recs[i]);
  const std::size_t rec1_payload = 12 + recs[5].size() + 4 + 12;
  broken[rec1_payload + 3] ^= std::byte{0x40};
  sluice_test::write_file(c, broken);
  const std::string msg = [&] {
    try {
      io::tfrecord_reader r(d.file("s-{0..2}.tfrecord"), {.index = io::saved_index::ignore});
    } catch (const format_error& e) {
      CHECK(e.file() == c);
      CHECK(e.record() == 1);
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(msg.find("payload CRC mismatch") != std::string::npos);
  io::tfrecord_reader deferred(d.file("s-{0..2}.tfrecord"),
                               {.index = io::saved_index::ignore, .bad_records = io::bad_records::defer});
  REQUIRE(deferred.damaged().size() == 1);
  CHECK(deferred.damaged()[0].record == 6);
  try {
    (void)deferred.record(6);
    FAIL("record 6 is bad");
  } catch (const format_error& e) {
    CHECK(e.file() == c);
    CHECK(e.record() == 1);
  }
  CHECK(deferred.record(7).size() == recs[7].size());
}
