// Multi-field sluice shards (format version 3, io/shard.hpp and io/shard_fields.hpp): round trips
// of several dtypes, fixed and variable, empty fields; old single-field shards still open; a loader
// over a multi-field shard; and every kind of bad input, including crafted bytes whose checksums
// were recomputed so that only the field checks can catch them.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "sluice/io/crc32c.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/shard_fields.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {

using det = schema<field<"jpg", std::uint8_t, variable>, field<"boxes", float, variable>,
                   field<"size", std::int32_t>, field<"ids", std::int64_t, variable>, field<"w", double>>;

struct record_data {
  std::vector<std::byte> jpg;
  std::vector<float> boxes;  // rows of 4
  std::array<std::int32_t, 2> size{};
  std::vector<std::int64_t> ids;
  double w = 0;
};

record_data make_record(std::size_t i) {
  record_data r;
  r.jpg = sluice_test::random_bytes(i % 4 == 0 ? 0 : 3 + i * 7 % 61, i);  // some empty
  for (std::size_t k = 0; k < (i % 3) * 4; ++k) r.boxes.push_back(static_cast<float>(i) + 0.25f * static_cast<float>(k));
  r.size = {static_cast<std::int32_t>(i), -static_cast<std::int32_t>(i) * 2};
  for (std::size_t k = 0; k < i % 5; ++k) r.ids.push_back(static_cast<std::int64_t>(i * 1000 + k) - 3);
  r.w = 0.5 * static_cast<double>(i);
  return r;
}

std::string write_det(const temp_dir& d, std::size_t n, std::string name = "det.sluice") {
  const std::string p = d.file(name);
  io::shard_writer w(p);
  w.set_schema<det>({{"boxes", {-1, 4}}, {"size", {2}}});
  w.set_class_names({"a", "b", "c"});
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = make_record(i);
    fields_sample<det> s;
    s.set<"jpg">(std::span<const std::byte>(r.jpg)).set<"boxes">(r.boxes).set<"size">(r.size).set<"ids">(r.ids);
    s.set<"w">(std::span<const double>(&r.w, 1));
    w.add_fields(s, static_cast<std::int64_t>(i % 3));
  }
  w.finish();
  return p;
}

template <class T>
std::vector<T> typed(std::span<const std::byte> b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}
std::string text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }
bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// A shard's bytes with its parts located, to craft bad shards whose checksums still hold.
struct shard_bytes {
  std::vector<std::byte> b;
  explicit shard_bytes(const std::string& path) : b(sluice_test::read_file(path)) {}
  template <class T>
  T get(std::size_t at) const {
    T v;
    std::memcpy(&v, b.data() + at, sizeof v);
    return v;
  }
  template <class T>
  void put(std::size_t at, T v) {
    std::memcpy(b.data() + at, &v, sizeof v);
  }
  std::uint64_t count() const { return get<std::uint64_t>(16); }
  std::uint64_t index_offset() const { return get<std::uint64_t>(24); }
  std::uint32_t meta_bytes() const { return get<std::uint32_t>(44); }
  std::uint64_t meta_offset() const { return get<std::uint64_t>(48); }
  std::uint64_t record_offset(std::size_t i) const { return get<std::uint64_t>(index_offset() + 24 * i); }
  std::uint32_t record_length(std::size_t i) const { return get<std::uint32_t>(index_offset() + 24 * i + 8); }
  std::span<std::byte> meta() { return std::span(b).subspan(meta_offset(), meta_bytes()); }
  // Where the bytes `s` first occur inside the metadata (absolute offset).
  std::size_t find_in_meta(std::string_view s) {
    auto m = meta();
    for (std::size_t k = 0; k + s.size() <= m.size(); ++k)
      if (std::memcmp(m.data() + k, s.data(), s.size()) == 0) return meta_offset() + k;
    FAIL("not in the metadata: " << s);
    return 0;
  }
  void fix_meta_crc() { put<std::uint32_t>(meta_offset() + meta_bytes(), io::crc32c(meta())); }
  void fix_record_crc(std::size_t i) {
    put<std::uint32_t>(index_offset() + 24 * i + 12, io::crc32c(std::span(b).subspan(record_offset(i), record_length(i))));
    put<std::uint32_t>(index_offset() + 24 * count(), io::crc32c(std::span(b).subspan(index_offset(), 24 * count())));
  }
  void write(const std::string& path) const { sluice_test::write_file(path, b); }
};

}  // namespace

TEST_CASE("shard fields: round trip of fixed and variable fields of five dtypes, empty fields, aligned views") {
  temp_dir d;
  const auto p = write_det(d, 40);
  io::shard_reader r(p);
  CHECK(r.version() == 3);
  CHECK(r.has_fields());
  REQUIRE(r.schema().size() == 5);
  CHECK(r.schema()[0] == io::shard_schema_field{"jpg", dtype::u8, extent::variable, {-1}});
  CHECK(r.schema()[1] == io::shard_schema_field{"boxes", dtype::f32, extent::variable, {-1, 4}});
  CHECK(r.schema()[2] == io::shard_schema_field{"size", dtype::i32, extent::fixed, {2}});
  CHECK(r.schema()[3] == io::shard_schema_field{"ids", dtype::i64, extent::variable, {-1}});
  CHECK(r.schema()[4] == io::shard_schema_field{"w", dtype::f64, extent::fixed, {1}});  // learnt from record 0
  CHECK(r.class_names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(r.verify_all() == 40);

  io::shard_fields<det> s(p);
  REQUIRE(s.size() == 40);
  CHECK(s.shape_of<"boxes">() == std::vector<std::int64_t>{-1, 4});
  CHECK(s.class_names().size() == 3);
  std::size_t empty_jpg = 0, empty_boxes = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto want = make_record(i);
    const auto f = s.fields(i);
    CHECK(f.id == i);
    CHECK(f.origin == p);
    CHECK(same(f.bytes_of<"jpg">(), want.jpg));
    CHECK(typed<float>(f.bytes_of<"boxes">()) == want.boxes);
    CHECK(typed<std::int32_t>(f.bytes_of<"size">()) == std::vector<std::int32_t>(want.size.begin(), want.size.end()));
    CHECK(typed<std::int64_t>(f.bytes_of<"ids">()) == want.ids);
    CHECK(typed<double>(f.bytes_of<"w">()) == std::vector<double>{want.w});
    CHECK(s.label(i) == static_cast<std::int64_t>(i % 3));
    empty_jpg += f.bytes_of<"jpg">().empty();
    empty_boxes += f.bytes_of<"boxes">().empty();
    // Views point into the mapping (zero copy), each aligned for its type (8 at least).
    const auto whole = s.file().bytes();
    for (const auto& v : f.values) {
      if (v.empty()) continue;
      CHECK(v.data() >= whole.data());
      CHECK(v.data() + v.size() <= whole.data() + whole.size());
      CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % 8 == 0);
    }
  }
  CHECK(empty_jpg == 10);
  CHECK(empty_boxes > 0);

  // A schema naming fewer fields, in another order, reads those.
  using two = schema<field<"ids", std::int64_t, variable>, field<"jpg", std::byte, variable>>;
  io::shard_fields<two> t(p);
  CHECK(typed<std::int64_t>(t.fields(9).bytes_of<"ids">()) == make_record(9).ids);
  CHECK(same(t.fields(9).bytes_of<"jpg">(), make_record(9).jpg));
  // The run-time views.
  std::array<std::span<const std::byte>, 5> views;
  r.field_views(7, views);
  CHECK(typed<std::int64_t>(views[3]) == make_record(7).ids);
}

TEST_CASE("shard fields: the run-time schema API, a scalar fixed field, a zero-size fixed field") {
  temp_dir d;
  const auto p = d.file("rt.sluice");
  {
    io::shard_writer w(p, {.checksums = false});
    w.set_schema({{"tok", dtype::u16, extent::variable},
                  {"y", dtype::boolean, extent::fixed, {}},
                  {"nothing", dtype::f16, extent::fixed, {3, 0}},
                  {"img", dtype::u8, extent::fixed, {2, 2, 3}}});
    CHECK(w.schema()[0].shape == std::vector<std::int64_t>{-1});
    std::vector<std::uint16_t> tok{1, 2, 65535};
    const bool y = true;
    auto img = sluice_test::random_bytes(12, 5);
    w.add_fields({std::as_bytes(std::span(tok)), std::as_bytes(std::span(&y, 1)), {}, img}, 4);
    w.add_fields({{}, std::as_bytes(std::span(&y, 1)), {}, img}, 5);
    // Wrong sizes are refused while writing, naming the record and the field.
    const auto e = sluice_test::expect_format_error([&] { w.add_fields({{}, std::as_bytes(std::span(&y, 1)), {}, std::span(img).first(11)}); });
    CHECK(e.record() == 2);
    CHECK(e.cause().find("field 'img'") != std::string::npos);
    const auto e2 = sluice_test::expect_format_error([&] { w.add_fields({std::span(img).first(3), std::as_bytes(std::span(&y, 1)), {}, img}); });
    CHECK(e2.cause().find("field 'tok'") != std::string::npos);
    CHECK_THROWS_AS(w.add(img), usage_error);                 // a shard with fields takes add_fields
    CHECK_THROWS_AS(w.add_fields({img, img}), usage_error);  // one span per field
    w.finish();
  }
  io::shard_reader r(p);
  CHECK(r.size() == 2);
  CHECK_FALSE(r.has_checksums());
  std::array<std::span<const std::byte>, 4> v;
  r.field_views(0, v);
  CHECK(typed<std::uint16_t>(v[0]) == std::vector<std::uint16_t>{1, 2, 65535});
  CHECK(v[1].size() == 1);
  CHECK(v[2].empty());
  CHECK(v[3].size() == 12);
  r.field_views(1, v);
  CHECK(v[0].empty());

  // Invalid schemas are usage errors naming the field.
  io::shard_writer w(d.file("x.sluice"));
  auto why = [&](std::vector<io::shard_schema_field> f) {
    try {
      w.set_schema(std::move(f));
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(why({{"a", dtype::u8, extent::variable, {3}}}).find("field 'a'") != std::string::npos);
  CHECK(why({{"b", dtype::u8, extent::fixed, {-1}}}).find("field 'b'") != std::string::npos);
  CHECK(why({{"c", dtype::u8, extent::fixed, {1, 1, 1, 1, 1, 1, 1}}}).find("dimensions") != std::string::npos);
  CHECK(why({{"d", dtype::u8}, {"d", dtype::f32}}).find("named twice") != std::string::npos);
  CHECK(why({{"", dtype::u8}}).find("empty name") != std::string::npos);
  CHECK(why({}).find("1 to") != std::string::npos);
  CHECK_THROWS_AS(w.set_schema<det>({{"nope", {1}}}), usage_error);
}

TEST_CASE("shard fields: version 1 and 2 shards are written and read as before, shard_fields refuses them by name") {
  temp_dir d;
  const auto p1 = d.file("v1.sluice"), p2 = d.file("v2.sluice");
  {
    io::shard_writer w(p1);
    w.add(sluice_test::as_bytes("abc"), 1);
    w.finish();
  }
  {
    io::shard_writer w(p2);
    w.set_class_names({"x"});
    w.add(sluice_test::as_bytes("defg"), 0);
    w.finish();
  }
  io::shard_reader r1(p1), r2(p2);
  CHECK(r1.version() == 1);
  CHECK(r2.version() == 2);
  CHECK_FALSE(r1.has_fields());
  CHECK_FALSE(r2.has_fields());
  CHECK(text(r1.record(0)) == "abc");
  CHECK(text(r2.record(0)) == "defg");
  // A version-1 header is the 44 bytes it always was, then zeros.
  const auto b1 = sluice_test::read_file(p1);
  for (std::size_t k = 44; k < 64; ++k) CHECK(b1[k] == std::byte{0});
  CHECK_THROWS_AS(r1.for_each_field(0, [](std::size_t, std::span<const std::byte>) {}), usage_error);
  for (const auto& p : {p1, p2}) {
    const auto e = sluice_test::expect_format_error([&] { io::shard_fields<det> s(p); });
    CHECK(e.file() == p);
    CHECK(e.cause().find("without fields") != std::string::npos);
  }
}

TEST_CASE("shard fields: a loader with read, stack and ragged gives the written bytes, for any worker count") {
  temp_dir d;
  const auto p = write_det(d, 37);
  io::shard_fields<det> s(p);
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(s.size(), {.seed = 11})) | read(s)
                | collate({.batch = 8}, ragged<"jpg">{}, ragged<"boxes">{.row = {4}}, stack<"size">{}, ragged<"ids">{},
                          stack<"w">{})
                | prefetch(2, {.workers = workers});
    std::vector<std::uint64_t> order;
    for (auto& b : loader.epoch(0)) {
      auto jpg = b.get<"jpg">();
      auto jo = b.get<"jpg.offsets">();
      auto boxes = b.get<"boxes">();
      auto bo = b.get<"boxes.offsets">();
      auto size = b.get<"size">();
      auto ids = b.get<"ids">();
      auto io_ = b.get<"ids.offsets">();
      auto w = b.get<"w">();
      for (std::size_t i = 0; i < b.size(); ++i) {
        const std::uint64_t g = b.ids()[i];
        order.push_back(g);
        const auto want = make_record(g);
        CHECK(same(std::as_bytes(std::span(jpg.data() + jo[i], static_cast<std::size_t>(jo[i + 1] - jo[i]))), want.jpg));
        CHECK(std::vector<float>(boxes.data() + bo[i] * 4, boxes.data() + bo[i + 1] * 4) == want.boxes);
        CHECK(size[2 * i] == want.size[0]);
        CHECK(size[2 * i + 1] == want.size[1]);
        CHECK(std::vector<std::int64_t>(ids.data() + io_[i], ids.data() + io_[i + 1]) == want.ids);
        CHECK(w[i] == want.w);
      }
    }
    CHECK(order.size() == 37);
    return order;
  };
  const auto one = run(1);
  CHECK(run(3) == one);
}

TEST_CASE("shard fields: a truncated file is a format_error naming the file") {
  temp_dir d;
  const auto p = write_det(d, 12);
  const auto good = sluice_test::read_file(p);
  const auto bad = d.file("cut.sluice");
  for (std::size_t n : {std::size_t{0}, std::size_t{63}, std::size_t{64}, good.size() / 2, good.size() - 1}) {
    sluice_test::write_file(bad, std::span(good).first(n));
    const auto e = sluice_test::expect_format_error([&] { io::shard_fields<det> s(bad); });
    CHECK(e.file() == bad);
  }
}

TEST_CASE("shard fields: a corrupt schema section fails its checksum, crafted schemas with a good checksum name the field") {
  temp_dir d;
  const auto p = write_det(d, 6);
  const auto bad = d.file("bad.sluice");
  auto open = [&](const shard_bytes& sb) {
    sb.write(bad);
    return sluice_test::expect_format_error([&] { io::shard_reader r(bad); });
  };
  SUBCASE("a flipped byte without a new checksum") {
    shard_bytes sb(p);
    sb.b[sb.find_in_meta("boxes")] ^= std::byte{1};
    CHECK(open(sb).cause().find("metadata checksum mismatch") != std::string::npos);
  }
  SUBCASE("a dtype code that is no dtype") {
    shard_bytes sb(p);
    sb.b[sb.find_in_meta("boxes") + 5] = std::byte{99};
    sb.fix_meta_crc();
    const auto e = open(sb);
    CHECK(e.file() == bad);
    CHECK(e.cause().find("field 'boxes'") != std::string::npos);
    CHECK(e.cause().find("dtype code 99") != std::string::npos);
  }
  SUBCASE("an extent code that is neither fixed nor variable") {
    shard_bytes sb(p);
    sb.b[sb.find_in_meta("size") + 5] = std::byte{7};
    sb.fix_meta_crc();
    CHECK(open(sb).cause().find("field 'size': extent code 7") != std::string::npos);
  }
  SUBCASE("a variable field whose leading dimension is not -1") {
    shard_bytes sb(p);
    sb.put<std::int64_t>(sb.find_in_meta("ids") + 7, 5);
    sb.fix_meta_crc();
    CHECK(open(sb).cause().find("field 'ids': a variable field's shape must start with -1") != std::string::npos);
  }
  SUBCASE("a fixed field with a negative dimension") {
    shard_bytes sb(p);
    sb.put<std::int64_t>(sb.find_in_meta("size") + 8, -2);
    sb.fix_meta_crc();
    CHECK(open(sb).cause().find("field 'size': dimension 0 is -2") != std::string::npos);
  }
  SUBCASE("more dimensions than the section holds") {
    shard_bytes sb(p);
    sb.b[sb.find_in_meta("w") + 3] = std::byte{6};
    sb.fix_meta_crc();
    CHECK(open(sb).cause().find("field 'w'") != std::string::npos);
  }
  SUBCASE("a field count past the section") {
    shard_bytes sb(p);
    sb.put<std::uint32_t>(sb.find_in_meta("jpg") - 8, 1000);
    sb.fix_meta_crc();
    CHECK(open(sb).cause().find("schema: field count 1000") != std::string::npos);
  }
  SUBCASE("two fields of the same name") {
    shard_bytes sb(p);
    std::memcpy(sb.b.data() + sb.find_in_meta("ids"), "jpg", 3);  // "ids" -> "jpg"
    sb.fix_meta_crc();
    CHECK(open(sb).cause().find("field 'jpg': named twice") != std::string::npos);
  }
  SUBCASE("a version-2 header over a schema section, and a version-3 header without one") {
    shard_bytes sb(p);
    sb.put<std::uint32_t>(8, 2);
    sb.put<std::uint32_t>(40, io::crc32c(std::span(sb.b).first(40)));
    sb.put<std::uint32_t>(56, io::crc32c(std::span(sb.b).first(56)));
    CHECK(open(sb).cause().find("a schema section in a version-2 shard") != std::string::npos);
    temp_dir d2;
    io::shard_writer w(d2.file("v2.sluice"));
    w.set_class_names({"k"});
    w.add(sluice_test::as_bytes("x"));
    w.finish();
    shard_bytes v2(d2.file("v2.sluice"));
    v2.put<std::uint32_t>(8, 3);
    v2.put<std::uint32_t>(40, io::crc32c(std::span(v2.b).first(40)));
    v2.put<std::uint32_t>(56, io::crc32c(std::span(v2.b).first(56)));
    CHECK(open(v2).cause().find("version-3 shard without a schema") != std::string::npos);
  }
  SUBCASE("any single flipped byte gives a format_error or a shard whose records all check out") {
    const auto good = sluice_test::read_file(p);
    for (std::size_t at = 0; at < good.size(); ++at) {
      auto b = good;
      b[at] ^= std::byte{0x5a};
      sluice_test::write_file(bad, b);
      try {
        io::shard_fields<det> s(bad);
        for (std::size_t i = 0; i < s.size(); ++i) (void)s.fields(i);
      } catch (const format_error&) {
      }
    }
  }
}

TEST_CASE("shard fields: a field table pointing outside the record names the file, the record and the field") {
  temp_dir d;
  const auto p = write_det(d, 6);
  const auto bad = d.file("bad.sluice");
  auto read5 = [&](const shard_bytes& sb, bool verify = true) {
    sb.write(bad);
    io::shard_fields<det> s(bad, {.verify = verify});
    (void)s.fields(2);  // record 2 is untouched
    return sluice_test::expect_format_error([&] { (void)s.fields(5); });
  };
  SUBCASE("a length past the record's end, with its CRC recomputed") {
    shard_bytes sb(p);
    sb.put<std::uint32_t>(sb.record_offset(5) + 4 * 1, 0x7fffffffu);  // boxes
    sb.fix_record_crc(5);
    const auto e = read5(sb);
    CHECK(e.file() == bad);
    CHECK(e.record() == 5);
    CHECK(e.cause().find("field 'boxes'") != std::string::npos);
    CHECK(e.cause().find("past the end of the record") != std::string::npos);
  }
  SUBCASE("without the CRC recomputed, the record's checksum catches it, and with verify off the table check does") {
    shard_bytes sb(p);
    sb.put<std::uint32_t>(sb.record_offset(5) + 4 * 3, 0xffffffffu);  // ids
    CHECK(read5(sb).cause().find("record checksum mismatch") != std::string::npos);
    const auto e = read5(sb, false);
    CHECK(e.record() == 5);
    CHECK(e.cause().find("field 'ids'") != std::string::npos);
  }
  SUBCASE("a fixed field of the wrong size") {
    shard_bytes sb(p);
    sb.put<std::uint32_t>(sb.record_offset(5) + 4 * 2, 4);  // size: 8 bytes -> 4
    sb.fix_record_crc(5);
    const auto e = read5(sb);
    CHECK(e.cause().find("field 'size': 4 bytes, but the field is i32 fixed [2], which is 8 bytes") != std::string::npos);
  }
  SUBCASE("a variable field that is not whole rows") {
    shard_bytes sb(p);
    const auto at = sb.record_offset(5) + 4 * 1;
    sb.put<std::uint32_t>(at, sb.get<std::uint32_t>(at) - 4);  // boxes: one float short of whole rows of 4
    sb.fix_record_crc(5);
    const auto e = read5(sb);
    CHECK(e.cause().find("field 'boxes'") != std::string::npos);
    CHECK(e.cause().find("not a whole number of rows of 16 bytes") != std::string::npos);
  }
  SUBCASE("fields that end before the record does") {
    shard_bytes sb(p);
    const auto at = sb.record_offset(5) + 4 * 0;
    sb.put<std::uint32_t>(at, 0);  // jpg emptied: the rest no longer line up or end early
    sb.fix_record_crc(5);
    const auto e = read5(sb);
    CHECK(e.record() == 5);
    CHECK(e.cause().find("field '") != std::string::npos);
  }
}

TEST_CASE("shard fields: a compile-time schema that does not match the shard names the file and the field") {
  temp_dir d;
  const auto p = write_det(d, 3);
  {
    using s = schema<field<"jpg", std::uint8_t, variable>, field<"boxes", double, variable>>;
    const auto e = sluice_test::expect_format_error([&] { io::shard_fields<s> r(p); });
    CHECK(e.file() == p);
    CHECK(e.cause().find("field 'boxes': the shard stores it as f32 variable [n, 4], the schema asks for f64 variable") !=
          std::string::npos);
  }
  {
    using s = schema<field<"size", std::int32_t, variable>>;
    const auto e = sluice_test::expect_format_error([&] { io::shard_fields<s> r(p); });
    CHECK(e.cause().find("field 'size': the shard stores it as i32 fixed [2]") != std::string::npos);
  }
  {
    using s = schema<field<"mask", std::uint8_t, variable>>;
    const auto e = sluice_test::expect_format_error([&] { io::shard_fields<s> r(p); });
    CHECK(e.cause().find("field 'mask': not in the shard (its fields: jpg, boxes, size, ids, w)") != std::string::npos);
  }
}

TEST_CASE("shard fields: fields named at run time read the shard's fields of those names") {
  temp_dir d;
  const auto p = write_det(d, 9);
  using two = schema<field<"image", std::uint8_t, variable>, field<"b", float, variable>>;
  io::shard_fields<two> r(p, {}, {{"image", "jpg"}, {"b", "boxes"}});
  REQUIRE(r.size() == 9);
  CHECK(r.shape_of<"b">() == std::vector<std::int64_t>{-1, 4});
  for (std::size_t i = 0; i < 9; ++i) {
    const auto want = make_record(i);
    const auto s = r.fields(i);
    CHECK(same(s.bytes_of<"image">(), std::span<const std::byte>(want.jpg)));
    CHECK(typed<float>(s.bytes_of<"b">()) == want.boxes);
  }
  // The shard's name in errors: a mapping to a field of another type, to no field, from no field.
  CHECK(sluice_test::expect_format_error([&] { io::shard_fields<two> x(p, {}, {{"image", "jpg"}, {"b", "w"}}); })
            .cause()
            .find("field 'w': the shard stores it as f64") != std::string::npos);
  CHECK(sluice_test::expect_format_error([&] { io::shard_fields<two> x(p, {}, {{"image", "png"}, {"b", "boxes"}}); })
            .cause()
            .find("field 'png': not in the shard") != std::string::npos);
  CHECK_THROWS_AS((io::shard_fields<two>(p, {}, {{"img", "jpg"}})), usage_error);
  // A swap swaps: entries map by the schema's own names, never by each other's renaming (read one
  // after the other, the second entry would find the first's result and undo it: a type error here).
  const auto want0 = make_record(5);
  using swapped = schema<field<"boxes", std::uint8_t, variable>, field<"jpg", float, variable>>;
  io::shard_fields<swapped> sw(p, {}, {{"boxes", "jpg"}, {"jpg", "boxes"}});
  CHECK(same(sw.fields(5).bytes_of<"boxes">(), std::span<const std::byte>(want0.jpg)));
  CHECK(typed<float>(sw.fields(5).bytes_of<"jpg">()) == want0.boxes);
  // A field named twice takes the last entry.
  using ff = schema<field<"a", float, variable>, field<"b", double>>;
  io::shard_fields<ff> last(p, {}, {{"a", "jpg"}, {"a", "boxes"}, {"b", "w"}});
  CHECK(typed<float>(last.fields(5).bytes_of<"a">()) == want0.boxes);
  CHECK(typed<double>(last.fields(5).bytes_of<"b">()) == std::vector<double>{want0.w});
  // Two schema fields reading one shard field: the first would be left empty.
  using twin = schema<field<"x", float, variable>, field<"y", float, variable>>;
  CHECK_THROWS_WITH_AS((io::shard_fields<twin>(p, {}, {{"x", "boxes"}, {"y", "boxes"}})),
                       doctest::Contains("fields 'x' and 'y' both read the shard's field 'boxes'"), usage_error);
}

TEST_CASE("shard fields: under the loader, skip drops and counts a record with a bad field table, raise names it") {
  temp_dir d;
  const auto p = write_det(d, 16);
  shard_bytes sb(p);
  sb.put<std::uint32_t>(sb.record_offset(9) + 4 * 3, 0x10000000u);  // ids of record 9: past the record
  sb.fix_record_crc(9);
  const auto bad = d.file("bad.sluice");
  sb.write(bad);
  io::shard_fields<det> s(bad);
  auto make = [&](on_error policy) {
    return from(sample::sequential(s.size())) | read(s) | collate({.batch = 4}, stack<"size">{}, ragged<"ids">{}) |
           prefetch(2, {.workers = 2, .errors = policy});
  };
  auto skip = make(on_error::skip);
  std::size_t seen = 0;
  for (auto& b : skip.epoch(0)) {
    auto size = b.get<"size">();
    for (std::size_t i = 0; i < b.size(); ++i) {
      CHECK(b.ids()[i] != 9);
      CHECK(size[2 * i] == static_cast<std::int32_t>(b.ids()[i]));
      ++seen;
    }
  }
  const auto st = skip.stats();
  CHECK(seen == 15);
  CHECK(st.skipped == 1);
  REQUIRE_FALSE(st.skip_causes.empty());
  CHECK(st.skip_causes.front().find("field 'ids'") != std::string::npos);

  auto raise = make(on_error::raise);
  std::string what;
  try {
    for (auto& b : raise.epoch(0)) (void)b;
  } catch (const std::exception& e) {
    what = sluice_test::nested_text(e);
  }
  CHECK(what.find(bad) != std::string::npos);
  CHECK(what.find("record 9") != std::string::npos);
  CHECK(what.find("field 'ids'") != std::string::npos);
}

TEST_CASE("shard_any: the shard's own fields at run time, fixed shapes as stored, the batches shard_fields<> gives") {
  temp_dir d;
  const std::string p = write_det(d, 23);
  io::shard_any all(p);
  CHECK(all.schema().describe() == "jpg (u8, variable), boxes (f32, variable), size (i32, fixed), ids (i64, variable), w (f64, fixed)");
  // Picked and renamed, in the given order.
  io::shard_any some(p, {}, {{"sz", "size"}, {"b", "boxes"}});
  REQUIRE(some.schema().size() == 2);
  CHECK(some.schema()[0].name == "sz");
  const auto s7 = some.fields(7);
  CHECK(s7.origin == p);
  CHECK(typed<std::int32_t>(s7.fields[0].bytes) == std::vector<std::int32_t>{7, -14});
  CHECK(s7.geometry_of(0).ndim == 1);
  CHECK(s7.geometry_of(0).shape[0] == 2);
  CHECK(typed<float>(s7.fields[1].bytes) == make_record(7).boxes);
  CHECK(all.labels() == io::shard_fields<det>(p).labels());

  io::shard_fields<det> typed_reader(p);
  auto compiled = from(sample::shuffle(typed_reader.size(), {.seed = 2})) | read(typed_reader) |
                  collate({.batch = 5}, stack<"size">{}, ragged<"boxes">{.row = {4}}, pad<"ids">{.value = -1}) |
                  prefetch(2, {.workers = 2});
  auto run_time = from(sample::shuffle(all.size(), {.seed = 2})) | read(all) |
                  collate({.batch = 5}, all.schema(),
                          {{"size", stack<>{}}, {"boxes", ragged<>{.row = {4}}}, {"ids", pad<>{.value = -1}}}) |
                  prefetch(2, {.workers = 2});
  std::vector<std::vector<std::byte>> want, got;
  std::vector<std::vector<std::int64_t>> want_shape, got_shape;
  for (auto& b : compiled.epoch(1))
    for (std::size_t t = 0; t < b.tensor_count(); ++t) {
      const auto v = b.tensor(t);
      want.emplace_back(v.bytes().begin(), v.bytes().end());
      want_shape.emplace_back(v.shape().begin(), v.shape().end());
    }
  for (auto& b : run_time.epoch(1))
    for (std::size_t t = 0; t < b.tensor_count(); ++t) {
      const auto v = b.tensor(t);
      got.emplace_back(v.bytes().begin(), v.bytes().end());
      got_shape.emplace_back(v.shape().begin(), v.shape().end());
    }
  REQUIRE(want.size() == 5 * 5);  // 5 batches x (size, boxes, boxes.offsets, ids, ids.lengths)
  CHECK(got == want);
  CHECK(got_shape == want_shape);
  CHECK(want_shape[0] == std::vector<std::int64_t>{5, 2});  // stack<> took the stored shape {2}

  CHECK_THROWS_WITH_AS(io::shard_any(p, {}, {{"x", "nope"}}), doctest::Contains("field 'nope': not in the shard (its fields: jpg"),
                       format_error);
  CHECK_THROWS_WITH_AS(io::shard_any(p, {}, {{"x", "size"}, {"y", "size"}}), doctest::Contains("is read twice"), usage_error);
}
