// WebDataset datasets that are well formed: every member of a key becomes a field, shards join
// in the given order, shards open lazily, saved indexes are reused, and the whole thing runs
// through the loader (decode + per-field collate + prefetch).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <atomic>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "wds_util.hpp"
#ifdef SLUICE_TEST_HAVE_JPEG
#include "sluice/codec/jpeg.hpp"
#endif

using namespace sluice;
using namespace wds_test;
using sluice_test::temp_dir;

namespace {
void check_sample(const io::wds_dataset<schema4>& d, std::uint64_t g, std::size_t shard) {
  const auto s = d.fields(g);
  CHECK(s.id == g);
  CHECK(s.origin == d.shard_path(shard));
  CHECK(d.key(g) == key_of(shard, g));
  const auto img = image_of(g);
  CHECK(s.bytes_of<"jpg">().size() == img.size());
  CHECK(std::equal(img.begin(), img.end(), s.bytes_of<"jpg">().begin()));
  CHECK(text(s.bytes_of<"json">()) == "{\"id\": " + std::to_string(g) + "}");
  REQUIRE(s.size_of<"cls">() == 8);
  std::int64_t cls = 0;
  std::memcpy(&cls, s.bytes_of<"cls">().data(), 8);
  CHECK(cls == 3 * static_cast<std::int64_t>(g) - 7);
  const auto boxes = s.bytes_of<"boxes.npy">();
  REQUIRE(boxes.size() == (g % 3) * 4 * sizeof(float));
  for (std::size_t k = 0; k < boxes.size() / 4; ++k) {
    float v;
    std::memcpy(&v, boxes.data() + 4 * k, 4);
    CHECK(v == static_cast<float>(g) + 0.25f * static_cast<float>(k));
  }
}
}  // namespace

TEST_CASE("wds brace patterns: lists, zero-padded ranges, nesting, bad patterns are usage errors") {
  using io::expand_braces;
  CHECK(expand_braces("a.tar") == std::vector<std::string>{"a.tar"});
  CHECK(expand_braces("train-{000000..000002}.tar") ==
        std::vector<std::string>{"train-000000.tar", "train-000001.tar", "train-000002.tar"});
  CHECK(expand_braces("s{8..11}") == std::vector<std::string>{"s8", "s9", "s10", "s11"});
  CHECK(expand_braces("s{08..11}") == std::vector<std::string>{"s08", "s09", "s10", "s11"});
  CHECK(expand_braces("s{2..0}") == std::vector<std::string>{"s2", "s1", "s0"});
  CHECK(expand_braces("{train,val}-{0..1}.tar") ==
        std::vector<std::string>{"train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"});
  CHECK(expand_braces("x{a,b{1..2},c}y") == std::vector<std::string>{"xay", "xb1y", "xb2y", "xcy"});
  CHECK(expand_braces("{a,}z") == std::vector<std::string>{"az", "z"});
  for (const char* bad : {"train-{0..3.tar", "train-0..3}.tar", "x{}y", "x{abc}y", "x{a..c}y", "x{1..}y",
                          "x{-1..2}y", "}{", "x{0..99999999999}"}) {
    CAPTURE(bad);
    try {
      (void)expand_braces(bad);
      FAIL("no error");
    } catch (const usage_error& e) {
      CHECK(std::string(e.what()).find(bad) != std::string::npos);
    }
  }
}

TEST_CASE("wds dataset: every member of a key, shards concatenated in order, shard accessors") {
  temp_dir dir;
  const auto paths = write_shards(dir, {3, 5, 0, 4});
  io::wds_dataset<schema4> d(dir.file("train-{0000..0003}.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 12);
  CHECK(d.shard_count() == 4);
  CHECK(d.sizes() == std::vector<std::size_t>{3, 5, 0, 4});
  CHECK(d.shard_range(1) == std::pair<std::uint64_t, std::uint64_t>{3, 8});
  CHECK(d.shard_range(2) == std::pair<std::uint64_t, std::uint64_t>{8, 8});
  CHECK(d.shard_of(0) == 0);
  CHECK(d.shard_of(2) == 0);
  CHECK(d.shard_of(3) == 1);
  CHECK(d.shard_of(8) == 3);  // past the empty shard
  CHECK(d.shard_of(11) == 3);
  CHECK_THROWS_AS((void)d.shard_of(12), usage_error);
  CHECK(d.path() == dir.file("train-{0000..0003}.tar"));
  const std::size_t shard_of_g[] = {0, 0, 0, 1, 1, 1, 1, 1, 3, 3, 3, 3};
  for (std::uint64_t g = 0; g < 12; ++g) check_sample(d, g, shard_of_g[g]);

  // The same as an explicit list, in another order: the global index follows the list.
  io::wds_dataset<schema4> r(std::vector<std::string>{paths[3], paths[0]}, {.index = io::saved_index::ignore});
  REQUIRE(r.size() == 7);
  CHECK(r.key(0) == key_of(3, 8));
  CHECK(r.key(4) == key_of(0, 0));
  CHECK(r.fields(4).origin == paths[0]);
  // A braced list of patterns, each expanded; brace-initialising with one pattern expands it.
  io::wds_dataset<schema4> braced({paths[1].c_str(), dir.file("train-{0002,0003,0000}.tar")}, {.index = io::saved_index::ignore});
  REQUIRE(braced.size() == 12);
  CHECK(braced.shard_count() == 4);
  CHECK(braced.key(0) == key_of(1, 3));
  CHECK(braced.key(5) == key_of(3, 8));
  CHECK(braced.key(9) == key_of(0, 0));
  io::wds_dataset<schema4> one{dir.file("train-{0000..0003}.tar")};
  CHECK(one.shard_count() == 4);
  CHECK(one.path() == dir.file("train-{0000..0003}.tar"));
}

TEST_CASE("wds dataset: a field takes any of its alternative extensions, text fields as bytes or numbers") {
  temp_dir dir;
  std::vector<member> ms = {{"a/1.jpeg", bytes_of("J1")}, {"a/1.txt", bytes_of(" 42 ")}, {"a/1.cls", bytes_of("-3")},
                            {"a/2.png", bytes_of("P2")},  {"a/2.txt", bytes_of("x")},    {"a/2.cls", bytes_of("250")},
                            {"a/3.jpg", bytes_of("J3")},  {"a/3.txt", bytes_of("")},     {"a/3.cls", bytes_of("0")}};
  write_tar(dir.file("alt.tar"), ms);
  using s2 = schema<field<"jpg;jpeg;png", std::uint8_t, variable>, field<"txt", std::uint8_t, variable>,
                    field<"cls", std::int16_t>>;
  io::wds_dataset<s2> d(dir.file("alt.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 3);
  CHECK(text(d.fields(0).bytes_of<"jpg;jpeg;png">()) == "J1");
  CHECK(text(d.fields(1).bytes_of<"jpg;jpeg;png">()) == "P2");
  CHECK(text(d.fields(2).bytes_of<"jpg;jpeg;png">()) == "J3");
  CHECK(text(d.fields(0).bytes_of<"txt">()) == " 42 ");  // a u8 variable field keeps the text
  CHECK(d.fields(2).size_of<"txt">() == 0);              // an empty member is an empty field, not a missing one
  std::int16_t v = 0;
  std::memcpy(&v, d.fields(0).bytes_of<"cls">().data(), 2);
  CHECK(v == -3);
  std::memcpy(&v, d.fields(1).bytes_of<"cls">().data(), 2);
  CHECK(v == 250);
  CHECK(d.fields(1).size_of<"cls">() == 2);
}

TEST_CASE("wds dataset: member extensions match in any case, as WebDataset lower-cases them") {
  // Camera files and some writers use upper-case extensions; webdataset's reader lower-cases a
  // member's extension (not its key), so "IMG_1.JPG" is field "jpg" of key "IMG_1".
  temp_dir dir;
  const auto tar = dir.file("upper.tar");
  write_tar(tar, {{"d/IMG_1.JPG", bytes_of("J1")},
                  {"d/IMG_1.CLS", bytes_of("5")},
                  {"d/IMG_1.Boxes.NPY", npy_f32(1, 4, 1)},
                  {"d/b.jpg", bytes_of("J2")},
                  {"d/b.Cls", bytes_of("-2")},
                  {"d/b.boxes.npy", npy_f32(2, 4, 2)}});
  for (const auto index : {io::saved_index::ignore, io::saved_index::use_and_save, io::saved_index::use_only}) {
    CAPTURE(static_cast<int>(index));
    io::wds_dataset<
        schema<field<"jpg", std::uint8_t, variable>, field<"cls", std::int64_t>, field<"boxes.npy", float, variable>>>
        d(tar, {.index = index});
    REQUIRE(d.size() == 2);
    CHECK(d.key(0) == "d/IMG_1");  // the key keeps its case
    CHECK(text(d.fields(0).bytes_of<"jpg">()) == "J1");
    CHECK(text(d.fields(1).bytes_of<"jpg">()) == "J2");
    std::int64_t v = 0;
    std::memcpy(&v, d.fields(0).bytes_of<"cls">().data(), 8);
    CHECK(v == 5);
    std::memcpy(&v, d.fields(1).bytes_of<"cls">().data(), 8);
    CHECK(v == -2);
    CHECK(d.fields(0).size_of<"boxes.npy">() == 16);  // the .NPY member's data, its header checked
    CHECK(d.fields(1).size_of<"boxes.npy">() == 32);
  }
  // A field named in upper case takes the same members; at run time too.
  using upper = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  io::wds_dataset<upper> u(tar,
                           {.index = io::saved_index::ignore, .extensions = {{"image", "PNG;JPG"}, {"label", "CLS"}}});
  REQUIRE(u.size() == 2);
  CHECK(text(u.fields(0).bytes_of<"image">()) == "J1");
  io::wds_any a(tar, {{"JPG"}, {"cls", dtype::i64, extent::fixed}}, {.index = io::saved_index::ignore});
  REQUIRE(a.size() == 2);
  CHECK(text(a.fields(1).fields[0].bytes) == "J2");
  CHECK(a.fields(1).fields[1].bytes.size() == 8);
  // The one-record reader alike, and two members of one extension in two cases are one field twice.
  io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "CLS", .index = io::saved_index::ignore});
  REQUIRE(r.size() == 2);
  CHECK(text(r.record(0)) == "J1");
  CHECK(r.label(0) == 5);
  CHECK(r.label(1) == -2);
  write_tar(dir.file("twice.tar"), {{"k.jpg", bytes_of("a")}, {"k.JPG", bytes_of("b")}, {"k.cls", bytes_of("1")}});
  CHECK_THROWS_WITH_AS((io::wds_tar_reader(dir.file("twice.tar"),
                                           {.record_field = "jpg", .index = io::saved_index::ignore})),
                       doctest::Contains("sample 'k' has two 'jpg' fields"), format_error);
  io::wds_any t(dir.file("twice.tar"), {{"jpg"}}, {.index = io::saved_index::ignore});
  CHECK_THROWS_WITH_AS((void)t.fields(0), doctest::Contains("two members for it"), format_error);
  // Two fields whose extensions differ only in case take the same members: refused, naming both.
  CHECK_THROWS_WITH_AS((io::wds_any(tar, {{"jpg"}, {"JPG"}})), doctest::Contains("both take the extension 'jpg'"),
                       usage_error);
}

TEST_CASE("wds dataset: extensions chosen at run time for a compile-time schema, with their own saved index") {
  temp_dir dir;
  std::vector<member> ms = {{"a/1.webp", bytes_of("W1")}, {"a/1.label", bytes_of("7")},  {"a/1.jpg", bytes_of("J1")},
                            {"a/2.webp", bytes_of("W2")}, {"a/2.label", bytes_of("-2")}, {"a/2.jpg", bytes_of("J2")},
                            {"a/3.jpg", bytes_of("J3")},  {"a/3.label", bytes_of("4")}};
  write_tar(dir.file("run.tar"), ms);
  using cls = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  io::wds_dataset<cls> d(dir.file("run.tar"), {.extensions = {{"image", "webp"}, {"label", "label"}}});
  REQUIRE(d.size() == 3);
  CHECK(text(d.fields(0).bytes_of<"image">()) == "W1");
  CHECK(text(d.fields(1).bytes_of<"image">()) == "W2");
  std::int64_t v = 0;
  std::memcpy(&v, d.fields(1).bytes_of<"label">().data(), 8);
  CHECK(v == -2);
  // Sample 3 has no .webp: the error names the field, the extension it was given and the member looked for.
  try {
    (void)d.fields(2);
    FAIL("no error");
  } catch (const format_error& e) {
    const std::string w = e.what();
    CAPTURE(w);
    CHECK(w.find("field 'image' (given the extensions 'webp')") != std::string::npos);
    CHECK(w.find("a/3.webp") != std::string::npos);
  }
  // The saved index written above groups by .webp; another mapping over the same shard must not reuse it.
  io::wds_dataset<cls> j(dir.file("run.tar"), {.extensions = {{"image", "jpg;jpeg"}, {"label", "label"}}});
  REQUIRE(j.size() == 3);
  CHECK(text(j.fields(2).bytes_of<"image">()) == "J3");
  CHECK(text(j.fields(0).bytes_of<"image">()) == "J1");
  // Misuse: a field outside the schema, an empty extension.
  CHECK_THROWS_AS((io::wds_dataset<cls>(dir.file("run.tar"), {.extensions = {{"img", "webp"}}})), usage_error);
  CHECK_THROWS_AS((io::wds_dataset<cls>(dir.file("run.tar"), {.extensions = {{"image", "webp;"}}})), usage_error);
  CHECK_THROWS_AS((io::wds_dataset<cls>(dir.file("run.tar"), {.extensions = {{"image", ""}}})), usage_error);
  // '/' and ':' cannot be in a member's extension (and would blur the saved index's key).
  CHECK_THROWS_AS((io::wds_dataset<cls>(dir.file("run.tar"), {.extensions = {{"image", "a/b"}}})), usage_error);
  CHECK_THROWS_AS((io::wds_dataset<cls>(dir.file("run.tar"), {.extensions = {{"image", "a:b"}}})), usage_error);
  // Two fields taking one extension: the second would never get a member.
  CHECK_THROWS_WITH_AS((io::wds_dataset<cls>(dir.file("run.tar"), {.extensions = {{"image", "jpg;label"}}})),
                       doctest::Contains("fields 'image' and 'label' both take the extension 'label'"), usage_error);
}

TEST_CASE("wds dataset: given sizes, shards open only when touched, counting opens them all") {
  temp_dir dir;
  write_shards(dir, {3, 5, 2, 4});
  const std::string pattern = dir.file("train-{0000..0003}.tar");
  io::wds_dataset<schema4> lazy(pattern, {.sizes = {3, 5, 2, 4}, .index = io::saved_index::ignore});
  CHECK(lazy.size() == 14);
  for (std::size_t s = 0; s < 4; ++s) CHECK_FALSE(lazy.is_open(s));
  check_sample(lazy, 9, 2);
  CHECK_FALSE(lazy.is_open(0));
  CHECK_FALSE(lazy.is_open(1));
  CHECK(lazy.is_open(2));
  CHECK_FALSE(lazy.is_open(3));
  CHECK_FALSE(std::filesystem::exists(dir.file("train-0000.tar.sidx")));

  io::wds_dataset<schema4> counted(pattern);
  for (std::size_t s = 0; s < 4; ++s) CHECK(counted.is_open(s));
  // Each shard's index was saved; a lazy dataset with the counts loads it instead of scanning.
  for (std::size_t s = 0; s < 4; ++s) CHECK(std::filesystem::exists(counted.shard_path(s) + ".sidx"));
  io::wds_dataset<schema4> again(pattern, {.sizes = counted.sizes(), .index = io::saved_index::use_only});
  for (std::uint64_t g = 0; g < again.size(); ++g) check_sample(again, g, again.shard_of(g));
}

TEST_CASE("wds dataset: a saved index keeps parsed numbers and the problems found, and is rebuilt for another schema") {
  temp_dir dir;
  std::vector<member> ms = {{"k/0.jpg", bytes_of("a")}, {"k/0.cls", bytes_of("17")},
                            {"k/1.jpg", bytes_of("b")},  // no .cls
                            {"k/2.jpg", bytes_of("c")}, {"k/2.cls", bytes_of("-5")}};
  write_tar(dir.file("s.tar"), ms);
  using s = schema<field<"jpg", std::uint8_t, variable>, field<"cls", std::int32_t>>;
  auto check = [&](const io::wds_dataset<s>& d) {
    REQUIRE(d.size() == 3);
    std::int32_t v = 0;
    std::memcpy(&v, d.fields(2).bytes_of<"cls">().data(), 4);
    CHECK(v == -5);
    CHECK_THROWS_AS((void)d.fields(1), format_error);
  };
  check(io::wds_dataset<s>(dir.file("s.tar")));
  REQUIRE(std::filesystem::exists(dir.file("s.tar.sidx")));
  check(io::wds_dataset<s>(dir.file("s.tar"), {.index = io::saved_index::use_only}));
  // A schema asking for other fields does not trust that index: the .cls is bytes here.
  using t = schema<field<"jpg", std::uint8_t, variable>, field<"cls", std::uint8_t, variable>>;
  io::wds_dataset<t> other(dir.file("s.tar"), {.index = io::saved_index::use_only});
  CHECK(text(other.fields(0).bytes_of<"cls">()) == "17");
  // Nor does the one-record-per-sample reader, which shares the file name <shard>.sidx.
  io::wds_tar_reader plain(dir.file("s.tar"), {.record_field = "jpg", .index = io::saved_index::use_only});
  CHECK(plain.size() == 3);
  CHECK(text(plain.record(1)) == "b");
}

TEST_CASE("wds dataset: through the loader, shuffled, per-field collate, any worker count gives the same batches") {
  temp_dir dir;
  write_shards(dir, {7, 9, 5, 11});
  io::wds_dataset<schema4> d(dir.file("train-{0000..0003}.tar"));
  REQUIRE(d.size() == 32);
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(d.size(), {.seed = 3})) | read(d)
#ifdef SLUICE_TEST_HAVE_JPEG
                | decode<"jpg">(codecs::jpeg{{.width = 8, .height = 8}})
#endif
                | collate({.batch = 5}, stack<"cls">{}, ragged<"json">{}, ragged<"boxes.npy">{.row = {4}}
#ifdef SLUICE_TEST_HAVE_JPEG
                          , stack<"jpg">{}
#endif
                          )
                | prefetch(2, {.workers = workers});
    std::vector<std::int64_t> seen;
    std::set<std::uint64_t> ids;
    for (auto& b : loader.epoch(0)) {
      auto cls = b.get<"cls">();
      auto json = b.get<"json">();
      auto jo = b.get<"json.offsets">();
      auto boxes = b.get<"boxes.npy">();
      auto bo = b.get<"boxes.npy.offsets">();
      for (std::size_t i = 0; i < b.size(); ++i) {
        const std::uint64_t g = b.ids()[i];
        ids.insert(g);
        CHECK(cls[i] == 3 * static_cast<std::int64_t>(g) - 7);
        const std::string js(reinterpret_cast<const char*>(json.data()) + jo[i], static_cast<std::size_t>(jo[i + 1] - jo[i]));
        CHECK(js == "{\"id\": " + std::to_string(g) + "}");
        CHECK(bo[i + 1] - bo[i] == static_cast<std::int64_t>(g % 3));
        if (bo[i + 1] > bo[i]) CHECK(boxes[static_cast<std::size_t>(bo[i]) * 4] == static_cast<float>(g));
#ifdef SLUICE_TEST_HAVE_JPEG
        auto img = b.get<"jpg">();
        const int want = static_cast<int>(g * 13 % 200 + 20);
        CHECK(std::abs(static_cast<int>(img[i * 8 * 8 * 3 + 27]) - want) <= 3);  // a flat grey image survives JPEG
#endif
        seen.push_back(cls[i]);
      }
    }
    CHECK(ids.size() == 32);
    return seen;
  };
  const auto one = run(1);
  CHECK(run(2) == one);
}

TEST_CASE("wds dataset: a rank's whole shards, from shard_range") {
  temp_dir dir;
  write_shards(dir, {4, 4, 4, 4});
  io::wds_dataset<schema4> d(dir.file("train-{0000..0003}.tar"), {.sizes = {4, 4, 4, 4}});
  // Rank 1 of 2 takes shards 1 and 3: its sample ids, read without opening shards 0 and 2.
  std::vector<std::uint64_t> mine;
  for (std::size_t s = 1; s < d.shard_count(); s += 2)
    for (auto [a, b] = d.shard_range(s); a < b; ++a) mine.push_back(a);
  std::size_t n = 0;
  for (auto id : mine) n += d.fields(id).size_of<"json">() > 0;
  CHECK(n == 8);
  CHECK_FALSE(d.is_open(0));
  CHECK(d.is_open(1));
  CHECK_FALSE(d.is_open(2));
  CHECK(d.is_open(3));
}

TEST_CASE("wds dataset + sample::shard_split: each rank owns whole shards, equal steps, opens only its shards") {
  temp_dir dir;
  write_shards(dir, {4, 4, 4, 3});
  const std::string pattern = dir.file("train-{0000..0003}.tar");
  const std::vector<std::size_t> sizes = {4, 4, 4, 3};
  std::set<std::uint64_t> all;
  for (std::uint64_t rank = 0; rank < 2; ++rank) {
    io::wds_dataset<schema4> d(pattern, {.sizes = sizes});
    sample::shard_split split(d, {.rank = rank, .world = 2, .seed = 5});
    CHECK(split.size(0) == 7);  // the smaller rank's 7 (shards 1 and 3); rank 0 owns 8
    CHECK(split.owned_samples() == (rank == 0 ? 8u : 7u));
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      std::set<std::uint64_t> ids;
      for (std::uint64_t p = 0; p < split.size(epoch); ++p) {
        const auto g = split.at(epoch, p);
        CHECK(d.shard_of(g) % 2 == rank);
        ids.insert(g);
        if (epoch == 0) all.insert(g);
      }
      CHECK(ids.size() == 7);
    }
    auto loader = from(split) | read(d) | collate({.batch = 3}, stack<"cls">{}) | prefetch(2, {.workers = 1});
    std::size_t n = 0;
    for (auto& b : loader.epoch(0)) n += b.size();
    CHECK(n == 7);
    for (std::size_t s = 0; s < 4; ++s) CHECK(d.is_open(s) == (s % 2 == rank));
  }
  CHECK(all.size() == 14);
  CHECK_THROWS_AS(sample::shard_split(std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 4}}, {.rank = 0, .world = 2}),
                  usage_error);
}

TEST_CASE("wds dataset: threads touching unopened shards at once open each exactly once") {
  temp_dir dir;
  write_shards(dir, {3, 3, 3, 3, 3, 3});
  io::wds_dataset<schema4> d(dir.file("train-{0000..0005}.tar"), {.sizes = {3, 3, 3, 3, 3, 3}, .index = io::saved_index::ignore});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      for (std::uint64_t k = 0; k < d.size(); ++k) {
        const std::uint64_t g = (k + static_cast<std::uint64_t>(t) * 5) % d.size();
        const auto s = d.fields(g);
        std::int64_t cls = 0;
        std::memcpy(&cls, s.bytes_of<"cls">().data(), 8);
        if (cls != 3 * static_cast<std::int64_t>(g) - 7 || s.origin != d.shard_path(d.shard_of(g))) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(wrong.load() == 0);
  for (std::size_t s = 0; s < 6; ++s) CHECK(d.is_open(s));
}
