// WebDataset datasets with bad samples and bad shards: each error names the shard, the sample's
// key and the field; bad samples fail when read (so on_error::skip skips and counts them).
#include <doctest/doctest.h>

#include <algorithm>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "wds_util.hpp"

using namespace sluice;
using namespace wds_test;
using sluice_test::temp_dir;

namespace {

using cls_schema = schema<field<"jpg", std::uint8_t, variable>, field<"cls", std::int64_t>>;

// The format_error fields(i) raises; fails the test if there is none.
template <class D>
format_error error_of(const D& d, std::size_t i) {
  try {
    (void)d.fields(i);
  } catch (const format_error& e) {
    return e;
  }
  FAIL("no format_error for sample " << i);
  return format_error("", {}, "");
}

void names(const format_error& e, const std::string& shard, const std::string& key, const std::string& field,
           const std::string& says) {
  CAPTURE(e.what());
  CHECK(e.file() == shard);
  CHECK(e.cause().find("sample '" + key + "'") != std::string::npos);
  CHECK(e.cause().find("field '" + field + "'") != std::string::npos);
  CHECK(e.cause().find(says) != std::string::npos);
}

}  // namespace

TEST_CASE("wds bad input: a missing member fails that sample only, naming shard, key and field") {
  temp_dir dir;
  write_tar(dir.file("a.tar"), {{"x/0.jpg", bytes_of("a")}, {"x/0.cls", bytes_of("1")},
                                {"x/1.jpg", bytes_of("b")},
                                {"x/2.jpg", bytes_of("c")}, {"x/2.cls", bytes_of("3")}});
  io::wds_dataset<cls_schema> d(dir.file("a.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 3);
  CHECK_NOTHROW((void)d.fields(0));
  const auto e = error_of(d, 1);
  names(e, dir.file("a.tar"), "x/1", "cls", "no member for it (looked for x/1.cls)");
  CHECK(e.record() == 1);
  CHECK(e.cause().find("split across shards") == std::string::npos);  // not at a shard's edge
  CHECK_NOTHROW((void)d.fields(2));
  CHECK(d.key(1) == "x/1");
}

TEST_CASE("wds bad input: wrong types — non-integer or out-of-range .cls, .npy of another dtype or a bad header") {
  temp_dir dir;
  write_tar(dir.file("t.tar"),
            {{"k/0.cls", bytes_of("seven")}, {"k/0.npy", npy_f32(1, 4, 0)},
             {"k/1.cls", bytes_of("300")}, {"k/1.npy", npy_f32(1, 4, 0)},
             {"k/2.cls", bytes_of("5")}, {"k/2.npy", [] { auto b = io::npy_header_bytes("<f8", {1, 4}); b.resize(b.size() + 32); return b; }()},
             {"k/3.cls", bytes_of("5")}, {"k/3.npy", bytes_of("not an npy at all")},
             {"k/4.cls", bytes_of("5")}, {"k/4.npy", [] { auto b = npy_f32(2, 4, 0); b.resize(b.size() - 4); return b; }()},
             {"k/5.cls", bytes_of("-128")}, {"k/5.npy", npy_f32(3, 4, 1)}});
  using s = schema<field<"cls", std::int8_t>, field<"npy", float, variable>>;
  io::wds_dataset<s> d(dir.file("t.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 6);
  const std::string shard = dir.file("t.tar");
  names(error_of(d, 0), shard, "k/0", "cls", "'seven' is not a i8 value: it is not an ASCII integer");
  names(error_of(d, 1), shard, "k/1", "cls", "'300' is not a i8 value: it does not fit");
  names(error_of(d, 2), shard, "k/2", "npy", "dtype '<f8' but the field's element type is f32");
  names(error_of(d, 3), shard, "k/3", "npy", "not an .npy file");
  names(error_of(d, 4), shard, "k/4", "npy", "the .npy shape says 32 data bytes but the member holds 28");
  const auto ok = d.fields(5);
  CHECK(static_cast<std::int8_t>(ok.bytes_of<"cls">()[0]) == -128);
  CHECK(ok.size_of<"npy">() == 48);
}

TEST_CASE("wds bad input: two members for one field (a repeated extension, or two alternatives)") {
  temp_dir dir;
  write_tar(dir.file("d.tar"), {{"k/0.jpg", bytes_of("a")}, {"k/0.cls", bytes_of("1")}, {"k/0.jpg", bytes_of("again")},
                                {"k/1.png", bytes_of("b")}, {"k/1.jpg", bytes_of("c")}, {"k/1.cls", bytes_of("2")},
                                {"k/2.jpg", bytes_of("d")}, {"k/2.cls", bytes_of("3")}});
  using s = schema<field<"jpg;png", std::uint8_t, variable>, field<"cls", std::int64_t>>;
  io::wds_dataset<s> d(dir.file("d.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 3);
  names(error_of(d, 0), dir.file("d.tar"), "k/0", "jpg;png", "two members for it (k/0.jpg, k/0.png)");
  names(error_of(d, 1), dir.file("d.tar"), "k/1", "jpg;png", "two members for it");
  CHECK_NOTHROW((void)d.fields(2));
}

TEST_CASE("wds bad input: a sample split across two shards is reported in both, with the hint") {
  temp_dir dir;
  write_tar(dir.file("s-0.tar"), {{"k/0.jpg", bytes_of("a")}, {"k/0.cls", bytes_of("1")}, {"k/1.jpg", bytes_of("b")}});
  write_tar(dir.file("s-1.tar"), {{"k/1.cls", bytes_of("2")}, {"k/2.jpg", bytes_of("c")}, {"k/2.cls", bytes_of("3")}});
  io::wds_dataset<cls_schema> d(dir.file("s-{0..1}.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 4);
  const auto last = error_of(d, 1);
  names(last, dir.file("s-0.tar"), "k/1", "cls", "last sample of the shard");
  CHECK(last.cause().find("split across shards") != std::string::npos);
  const auto first = error_of(d, 2);
  names(first, dir.file("s-1.tar"), "k/1", "jpg", "first sample of the shard");
  CHECK(first.cause().find("previous shard") != std::string::npos);
  CHECK(last.cause().find("cut short") == std::string::npos);  // s-0.tar ends with its end-of-archive marker
}

TEST_CASE("wds bad input: a tar cut short at a member boundary says so where its last sample lacks a member") {
  temp_dir dir;
  // k/1's .cls member and the end-of-archive marker are what an interrupted copy lost.
  std::vector<std::byte> img;
  for (const auto& [name, text] : {std::pair{"k/0.jpg", "a"}, {"k/0.cls", "1"}, {"k/1.jpg", "b"}})
    io::append_tar_member(img, name, bytes_of(text));
  sluice_test::write_file(dir.file("cut.tar"), img);
  io::wds_dataset<cls_schema> d(dir.file("cut.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 2);
  CHECK_NOTHROW((void)d.fields(0));
  const auto e = error_of(d, 1);
  names(e, dir.file("cut.tar"), "k/1", "cls", "no member for it");
  CHECK(e.cause().find("ends without its end-of-archive marker") != std::string::npos);
  CHECK(e.cause().find("cut short") != std::string::npos);
  // The one-member-per-sample reader refuses the file at open with the same cause.
  try {
    io::wds_tar_reader r(dir.file("cut.tar"), {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::ignore});
    FAIL("no error");
  } catch (const format_error& x) {
    CAPTURE(x.what());
    CHECK(x.file() == dir.file("cut.tar"));
    CHECK(x.cause().find("sample 'k/1' has no 'cls' field") != std::string::npos);
    CHECK(x.cause().find("cut short") != std::string::npos);
  }
  // With the marker, the same archive's missing member is only that.
  img.resize(img.size() + 1024);
  sluice_test::write_file(dir.file("whole.tar"), img);
  io::wds_dataset<cls_schema> w(dir.file("whole.tar"), {.index = io::saved_index::ignore});
  CHECK(error_of(w, 1).cause().find("cut short") == std::string::npos);
}

TEST_CASE("wds bad input: a sample whose members are apart in the tar (a directory tarred unsorted) is named with the fix") {
  // GNU tar without --sort=name writes a directory in the file system's order, so a sample's
  // members need not be next to each other; WebDataset would read each part as a sample.
  temp_dir dir;
  write_tar(dir.file("u.tar"), {{"k/0.jpg", bytes_of("a")}, {"k/1.jpg", bytes_of("b")}, {"k/0.cls", bytes_of("1")},
                                {"k/2.jpg", bytes_of("c")}, {"k/2.cls", bytes_of("3")}, {"k/1.cls", bytes_of("2")}});
  io::wds_dataset<cls_schema> d(dir.file("u.tar"), {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 5);  // k/0, k/1, k/0, k/2, k/1: each part of a split sample fails
  for (std::size_t i : {0, 1, 2, 4}) {
    const auto e = error_of(d, i);
    CAPTURE(e.what());
    CHECK(e.file() == dir.file("u.tar"));
    CHECK(e.record() == i);
    CHECK(e.cause().find("has members apart in the tar") != std::string::npos);
    CHECK(e.cause().find("tar --sort=name") != std::string::npos);
  }
  CHECK(error_of(d, 0).cause().find("sample 'k/0'") != std::string::npos);
  CHECK(error_of(d, 2).cause().find("samples 0 and 2 of the shard") != std::string::npos);
  CHECK(error_of(d, 4).cause().find("samples 1 and 4 of the shard") != std::string::npos);
  CHECK_NOTHROW((void)d.fields(3));  // k/2 is whole
  // A key in two places with whole samples in both is two samples, as WebDataset reads them
  // (archives joined with --ignore-zeros that number their samples alike).
  write_tar(dir.file("w.tar"), {{"w/0.jpg", bytes_of("a")}, {"w/0.cls", bytes_of("1")}, {"w/1.jpg", bytes_of("b")},
                                {"w/1.cls", bytes_of("2")}, {"w/0.jpg", bytes_of("c")}, {"w/0.cls", bytes_of("3")}});
  io::wds_dataset<cls_schema> whole(dir.file("w.tar"), {.index = io::saved_index::ignore});
  REQUIRE(whole.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK_NOTHROW((void)whole.fields(i));
  io::wds_tar_reader whole_reader(dir.file("w.tar"), {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::ignore});
  CHECK(whole_reader.size() == 3);
  // The single-field reader refuses the shard when it scans it, with or without a label field
  // (with one, the first part already lacks a member: the split is still the cause it gives).
  write_tar(dir.file("c.tar"), {{"k/0.cls", bytes_of("1")}, {"k/1.cls", bytes_of("2")}, {"k/0.jpg", bytes_of("a")},
                                {"k/1.jpg", bytes_of("b")}});
  for (const auto& shard : {std::pair{"u.tar", ""}, std::pair{"u.tar", "cls"}, std::pair{"c.tar", "cls"}}) {
    const std::string tar = shard.first, label = shard.second;  // named (clang 14 cannot capture bindings)
    CAPTURE(tar);
    CAPTURE(label);
    try {
      io::wds_tar_reader r(dir.file(tar), {.record_field = "jpg", .label_field = label, .index = io::saved_index::ignore});
      FAIL("no format_error");
    } catch (const format_error& e) {
      CHECK(e.file() == dir.file(tar));
      CHECK(std::string(e.what()).find("sample 'k/0' has members apart in the tar (samples 0 and 2") != std::string::npos);
    }
  }
}

TEST_CASE("wds bad input: under the loader, skip drops and counts bad samples, raise reports the first") {
  temp_dir dir;
  std::vector<member> ms;
  for (int i = 0; i < 20; ++i) {
    const std::string k = "k/" + std::to_string(i);
    ms.push_back({k + ".jpg", bytes_of("img")});
    if (i != 6 && i != 13) ms.push_back({k + ".cls", bytes_of(i == 17 ? "x" : std::to_string(i))});
  }
  write_tar(dir.file("b.tar"), ms);
  io::wds_dataset<cls_schema> d(dir.file("b.tar"));
  auto make = [&](on_error policy) {
    return from(sample::sequential(d.size())) | read(d) | collate({.batch = 4}, stack<"cls">{}) |
           prefetch(2, {.workers = 2, .errors = policy});
  };
  auto skip = make(on_error::skip);
  std::size_t seen = 0;
  for (auto& b : skip.epoch(0)) {
    auto cls = b.get<"cls">();
    for (std::size_t i = 0; i < b.size(); ++i) {
      CHECK(cls[i] == static_cast<std::int64_t>(b.ids()[i]));
      ++seen;
    }
  }
  const auto st = skip.stats();
  CHECK(seen == 17);
  CHECK(st.skipped == 3);
  // Workers fill batches in any order, so the causes are in the order the batches were prepared.
  REQUIRE(st.skip_causes.size() == 3);
  for (const char* want : {"sample 'k/6', field 'cls'", "sample 'k/13', field 'cls'", "sample 'k/17', field 'cls'"})
    CHECK(std::any_of(st.skip_causes.begin(), st.skip_causes.end(),
                      [&](const std::string& c) { return c.find(want) != std::string::npos; }));

  auto raise = make(on_error::raise);
  try {
    for (auto& b : raise.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const stage_error& e) {
    CHECK(e.sample_id() == 6);
    CHECK(std::string(e.what()).find(dir.file("b.tar")) != std::string::npos);
    CHECK(std::string(e.what()).find("sample 'k/6', field 'cls'") != std::string::npos);
  }
}

TEST_CASE("wds bad input: a shard missing from a brace list is an io_error naming it") {
  temp_dir dir;
  write_shards(dir, {2, 2, 2});
  std::filesystem::remove(dir.file("train-0001.tar"));
  const std::string pattern = dir.file("train-{0000..0002}.tar");
  // Counting at open: the constructor fails.
  try {
    io::wds_dataset<schema4> d(pattern);
    FAIL("no error");
  } catch (const io_error& e) {
    CHECK(e.path() == dir.file("train-0001.tar"));
  }
  // Lazy: the shard's samples fail when read, the others are served.
  io::wds_dataset<schema4> lazy(pattern, {.sizes = {2, 2, 2}});
  CHECK_NOTHROW((void)lazy.fields(0));
  CHECK_NOTHROW((void)lazy.fields(5));
  try {
    (void)lazy.fields(2);
    FAIL("no error");
  } catch (const io_error& e) {
    CHECK(e.path() == dir.file("train-0001.tar"));
  }
  // A shard holding another count than given: format_error naming it.
  io::wds_dataset<schema4> wrong(pattern, {.sizes = {3, 2, 1}});
  try {
    (void)wrong.fields(0);
    FAIL("no error");
  } catch (const format_error& e) {
    CHECK(e.file() == dir.file("train-0000.tar"));
    CHECK(e.cause().find("holds 2 samples, but wds_dataset_options::sizes says 3") != std::string::npos);
  }
  CHECK_THROWS_AS(io::wds_dataset<schema4>(pattern, {.sizes = {1, 2}}), usage_error);
  CHECK_THROWS_AS(io::wds_dataset<schema4>(dir.file("train-{0000..0002.tar")), usage_error);
}

TEST_CASE("wds bad input: a shard that is not a tar, or is truncated, fails naming it") {
  temp_dir dir;
  write_shards(dir, {2, 2});
  sluice_test::write_file(dir.file("train-0001.tar"), std::string(600, 'z'));
  try {
    io::wds_dataset<schema4> d(dir.file("train-{0000..0001}.tar"));
    FAIL("no error");
  } catch (const format_error& e) {
    CHECK(e.file() == dir.file("train-0001.tar"));
    CHECK(e.cause().find("not a tar archive") != std::string::npos);
  }
  const auto p = dir.file("train-0000.tar");
  std::filesystem::resize_file(p, 700);
  try {
    io::wds_dataset<schema4> d(p, {.index = io::saved_index::ignore});
    FAIL("no error");
  } catch (const format_error& e) {
    CHECK(e.file() == p);
  }
}

TEST_CASE("wds dataset: shards written by GNU tar (gnu and pax formats, names over 100 bytes), errors name the long key") {
  if (std::system("tar --version 2>/dev/null | grep -q 'GNU tar'") != 0) sluice_test::skip("GNU tar not found");
  temp_dir dir;
  const std::string deep = "d/" + std::string(60, 'a') + "/" + std::string(60, 'b');  // keys longer than 100 bytes
  std::filesystem::create_directories(dir.path() / "root" / deep);
  std::string list;
  for (int i = 0; i < 4; ++i) {
    const std::string key = deep + "/sample" + std::to_string(i);
    sluice_test::write_file(dir.file("root/" + key + ".jpg"), "J" + std::to_string(i));
    list += key + ".jpg\n";
    if (i != 2) {
      sluice_test::write_file(dir.file("root/" + key + ".cls"), std::to_string(10 + i));
      list += key + ".cls\n";
    }
  }
  sluice_test::write_file(dir.file("list"), list);
  for (const char* format : {"gnu", "pax"}) {
    CAPTURE(format);
    const std::string shard = dir.file(std::string("shard-") + format + ".tar");
    const std::string cmd = "tar --format=" + std::string(format) + " --no-recursion -cf '" + shard + "' -C '" +
                            dir.file("root") + "' -T '" + dir.file("list") + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
    io::wds_dataset<cls_schema> d(shard, {.index = io::saved_index::ignore});
    REQUIRE(d.size() == 4);
    for (std::size_t i : {0u, 1u, 3u}) {
      const auto s = d.fields(i);
      CHECK(text(s.bytes_of<"jpg">()) == "J" + std::to_string(i));
      std::int64_t v = 0;
      std::memcpy(&v, s.bytes_of<"cls">().data(), 8);
      CHECK(v == 10 + static_cast<std::int64_t>(i));
      CHECK(d.key(i) == deep + "/sample" + std::to_string(i));
    }
    names(error_of(d, 2), shard, deep + "/sample2", "cls", "no member for it");
  }
}

TEST_CASE("wds bad input: a member stored as a symbolic or hard link is named as such, with the tar option that stores the file") {
  if (std::system("tar --version 2>/dev/null | grep -q 'GNU tar'") != 0) sluice_test::skip("GNU tar not found");
  temp_dir dir;
  std::filesystem::create_directories(dir.path() / "root");
  sluice_test::write_file(dir.file("root/0.jpg"), "J0");
  sluice_test::write_file(dir.file("root/0.cls"), "1");
  sluice_test::write_file(dir.file("root/1.jpg"), "J1");
  std::filesystem::create_symlink("0.cls", dir.path() / "root" / "1.cls");  // 1.cls -> 0.cls
  sluice_test::write_file(dir.file("root/2.jpg"), "J2");
  std::filesystem::create_hard_link(dir.path() / "root" / "0.cls", dir.path() / "root" / "2.cls");
  sluice_test::write_file(dir.file("list"), "0.cls\n0.jpg\n1.cls\n1.jpg\n2.cls\n2.jpg\n");
  const std::string shard = dir.file("links.tar");
  const std::string cmd = "tar --no-recursion -cf '" + shard + "' -C '" + dir.file("root") + "' -T '" + dir.file("list") + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  io::wds_dataset<cls_schema> d(shard, {.index = io::saved_index::ignore});
  REQUIRE(d.size() == 3);
  CHECK_NOTHROW((void)d.fields(0));
  const auto sym = error_of(d, 1);
  names(sym, shard, "1", "cls", "no member for it");
  CHECK(sym.cause().find("holds '1.cls' as a symbolic link") != std::string::npos);
  CHECK(sym.cause().find("tar --dereference (-h)") != std::string::npos);
  const auto hard = error_of(d, 2);  // GNU tar stores the second name of a hard-linked file as a link
  names(hard, shard, "2", "cls", "no member for it");
  CHECK(hard.cause().find("holds '2.cls' as a hard link") != std::string::npos);
  CHECK(hard.cause().find("tar --hard-dereference") != std::string::npos);
  CHECK(hard.cause().find("cut short") == std::string::npos);  // GNU tar wrote its end-of-archive marker
  try {
    io::wds_tar_reader r(shard, {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::ignore});
    FAIL("no error");
  } catch (const format_error& x) {
    CAPTURE(x.what());
    CHECK(x.cause().find("sample '1' has no 'cls' field; the tar holds '1.cls' as a symbolic link") != std::string::npos);
  }
  // Stored with the files themselves, every sample reads.
  const std::string deref = dir.file("deref.tar");
  REQUIRE(std::system(("tar --no-recursion --dereference --hard-dereference -cf '" + deref + "' -C '" + dir.file("root") +
                       "' -T '" + dir.file("list") + "'").c_str()) == 0);
  io::wds_dataset<cls_schema> ok(deref, {.index = io::saved_index::ignore});
  REQUIRE(ok.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(text(ok.fields(i).bytes_of<"jpg">()) == "J" + std::to_string(i));
}

TEST_CASE("wds bad input: a key with a dot, split by webdataset's rule, is named with the key it was meant to be") {
  // webdataset.TarWriter writes key 'img.v0' as 'img.v0.jpg': the key is cut at the first dot.
  temp_dir dir;
  write_tar(dir.file("dotted.tar"), {{"img.v0.jpg", bytes_of("a")}, {"img.v0.cls", bytes_of("1")},
                                     {"img.v1.jpg", bytes_of("b")}, {"img.v1.cls", bytes_of("2")}});
  io::wds_dataset<cls_schema> d(dir.file("dotted.tar"), {.index = io::saved_index::ignore});
  const auto e = error_of(d, 0);
  names(e, dir.file("dotted.tar"), "img", "jpg", "no member for it");
  CHECK(e.cause().find("the tar holds 'img.v0.jpg': webdataset takes a sample's key up to the first dot of the file "
                       "name, so the key 'img.v0' became 'img' with the extension 'v0.jpg'; write keys without dots "
                       "(e.g. 'img_v0')") != std::string::npos);
  CHECK(e.cause().find("split across shards") == std::string::npos);
  try {
    io::wds_tar_reader r(dir.file("dotted.tar"), {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::ignore});
    FAIL("no error");
  } catch (const format_error& x) {
    CHECK(x.cause().find("sample 'img' has no 'jpg' field; the tar holds 'img.v0.jpg': webdataset takes") != std::string::npos);
  }
}

TEST_CASE("wds bad input: a text member declared as a numeric field is refused at construction, naming both") {
  // 16 bytes of JSON read as f32 would be four garbage coordinates: no error anywhere else.
  temp_dir d;
  const auto shard = d.file("s.tar");
  write_tar(shard, {{"a.jpg", image_of(0)}, {"a.json", bytes_of("[[1, 2, 3, 4]]\n ")}});
  using boxes_as_json = schema<field<"jpg", std::uint8_t, variable>, field<"json", float, variable>>;
  try {
    io::wds_dataset<boxes_as_json> w(shard);
    FAIL("a .json member was taken as f32 elements");
  } catch (const usage_error& e) {
    const std::string what = e.what();
    CHECK(what.find("field 'json' holds f32 elements") != std::string::npos);
    CHECK(what.find("'.json' members, which hold text") != std::string::npos);
  }
  // Also through the extensions option, and for a compound extension.
  using boxes = schema<field<"jpg", std::uint8_t, variable>, field<"boxes", float, variable>>;
  CHECK_THROWS_AS(io::wds_dataset<boxes>(shard, {.extensions = {{"boxes", "boxes.json"}}}), usage_error);
  // Text as text, and binary numbers, are fine.
  using as_text = schema<field<"jpg", std::uint8_t, variable>, field<"json", std::uint8_t, variable>>;
  io::wds_dataset<as_text> ok(shard);
  CHECK(ok.size() == 1);
  CHECK(text(ok.fields(0).bytes_of<"json">()).starts_with("[[1, 2"));
}
