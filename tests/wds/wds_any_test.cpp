// Run-time fields (core/any_sample.hpp, io/wds.hpp's wds_any, stage/any_collate.hpp,
// stage/any_decode.hpp): a WebDataset whose fields and collators are chosen at run time gives
// the batches the compiled pipeline gives, byte for byte and under the same names; and what does
// not fit is refused at construction, naming the field.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "sluice/stage/any_collate.hpp"
#include "sluice/stage/any_decode.hpp"
#include "wds_util.hpp"
#ifdef SLUICE_TEST_HAVE_JPEG
#include "sluice/codec/jpeg.hpp"
#endif

using namespace sluice;
using namespace wds_test;
using sluice_test::temp_dir;

namespace {

// name -> bytes, shape and dtype of every tensor of every batch, in order.
struct tensor_copy {
  dtype type;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
  bool operator==(const tensor_copy&) const = default;
};
using batch_copy = std::map<std::string, tensor_copy>;

batch_copy copy_of(const batch& b) {
  batch_copy c;
  for (std::size_t t = 0; t < b.tensor_count(); ++t) {
    const auto v = b.tensor(t);
    const auto s = v.shape();
    const auto bytes = v.bytes();
    c[std::string(v.name())] = {v.type(), {s.begin(), s.end()}, {bytes.begin(), bytes.end()}};
  }
  return c;
}

template <class Loader>
std::vector<batch_copy> drain(Loader& loader, std::uint64_t epoch) {
  std::vector<batch_copy> out;
  for (auto& b : loader.epoch(epoch)) out.push_back(copy_of(b));
  return out;
}

std::vector<field_spec> specs4() {
  return {{"jpg", dtype::u8, extent::variable},
          {"json", dtype::u8, extent::variable},
          {"cls", dtype::i64, extent::fixed},
          {"boxes.npy", dtype::f32, extent::variable}};
}

}  // namespace

TEST_CASE("run-time fields: wds_any + any_collate give the compiled pipeline's batches, for any worker count") {
  temp_dir dir;
  write_shards(dir, {7, 9, 5, 11});
  const std::string pattern = dir.file("train-{0000..0003}.tar");
  io::wds_dataset<schema4> typed(pattern);
  io::wds_any any(pattern, specs4());
  REQUIRE(any.size() == typed.size());
  CHECK(any.schema().describe() == "jpg (u8, variable), json (u8, variable), cls (i64, fixed), boxes.npy (f32, variable)");

  auto compiled = from(sample::shuffle(typed.size(), {.seed = 3})) | read(typed) |
                  collate({.batch = 5}, stack<"cls">{}, ragged<"json">{}, pad<"boxes.npy">{.value = -1, .mask = true, .row = {4}},
                          ragged<"jpg">{}) |
                  prefetch(2, {.workers = 2});
  const auto want = drain(compiled, 1);
  REQUIRE(want.size() == 7);
  CHECK(want[0].count("boxes.npy.mask") == 1);
  for (std::size_t workers : {1, 2}) {
    auto run_time = from(sample::shuffle(any.size(), {.seed = 3})) | read(any) |
                    collate({.batch = 5}, any.schema(),
                            {{"cls", stack<>{}},
                             {"json", ragged<>{}},
                             {"boxes.npy", pad<>{.value = -1, .mask = true, .row = {4}}},
                             {"jpg", ragged<>{}}}) |
                    prefetch(2, {.workers = workers});
    CHECK(drain(run_time, 1) == want);
  }
}

TEST_CASE("run-time fields: pack<> is pack<\"f\">, tokens in rows with doc ids, positions and cu_seqlens") {
  temp_dir dir;
  std::vector<member> ms;
  for (std::uint64_t g = 0; g < 23; ++g) {
    std::vector<std::int32_t> t(g % 7 + 1);
    for (std::size_t k = 0; k < t.size(); ++k) t[k] = static_cast<std::int32_t>(g * 100 + k);
    auto npy = io::npy_header_bytes("<i4", {t.size()});
    const auto* p = reinterpret_cast<const std::byte*>(t.data());
    npy.insert(npy.end(), p, p + t.size() * 4);
    ms.push_back({"d/" + std::to_string(1000 + g) + ".tok.npy", npy});
  }
  write_tar(dir.file("tok.tar"), ms);
  using tok = schema<field<"tok.npy", std::int32_t, variable>>;
  io::wds_dataset<tok> typed(dir.file("tok.tar"));
  io::wds_any any(dir.file("tok.tar"), {{"tok.npy", dtype::i32, extent::variable}});
  auto compiled = from(sample::sequential(typed.size())) | read(typed) |
                  collate({.batch = 6}, pack<"tok.npy">{.length = 8, .split = false, .value = -5}) | prefetch(2);
  auto run_time = from(sample::sequential(any.size())) | read(any) |
                  collate({.batch = 6}, any.schema(), {{"tok.npy", pack<>{.length = 8, .split = false, .value = -5}}}) |
                  prefetch(2);
  const auto want = drain(compiled, 0);
  REQUIRE(want.size() == 4);
  CHECK(want[0].count("tok.npy.cu_seqlens") == 1);
  CHECK(drain(run_time, 0) == want);
}

TEST_CASE("run-time fields: a batch outlives its loader and still names its tensors") {
  temp_dir dir;
  write_shards(dir, {4});
  io::wds_any any(dir.file("train-0000.tar"), specs4());
  batch kept;
  {
    // A name built at run time, gone once the loader is: the batch's names must not refer to it.
    std::vector<field_spec> f = specs4();
    f[2].name = std::string("c") + "ls";
    io::wds_any d(dir.file("train-0000.tar"), f);
    auto loader = from(sample::sequential(d.size())) | read(d) |
                  collate({.batch = 4}, d.schema(), {{std::string("c") + "ls", stack<>{}}}) | prefetch(1);
    for (auto& b : loader.epoch(0)) kept = std::move(b);
  }
  REQUIRE(kept);
  CHECK(kept.tensor_count() == 1);
  CHECK(kept.tensor(0).name() == "cls");
  CHECK(kept.field("cls").as<std::int64_t>()[3] == 3 * 3 - 7);
}

TEST_CASE("run-time fields: what does not fit is refused at construction, naming the field") {
  temp_dir dir;
  write_shards(dir, {3});
  io::wds_any any(dir.file("train-0000.tar"), specs4());
  auto refused = [&](std::vector<field_collate_spec> f) -> std::string {
    try {
      (void)collate({.batch = 2}, any.schema(), std::move(f));
    } catch (const usage_error& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(refused({{"label", stack<>{}}}).find("names field 'label', which the samples do not have (they have: jpg (u8, "
                                             "variable), json") != std::string::npos);
  CHECK(refused({{"boxes.npy", normalized<>{}}}).find("normalized<> of field 'boxes.npy' (f32)") != std::string::npos);
  CHECK(refused({{"boxes.npy", pack<>{}}}).find("pack<> packs integer tokens; this field is f32") != std::string::npos);
  CHECK(refused({{"json", pad<>{.value = 300}}}).find("the pad value 300") != std::string::npos);
  CHECK(refused({{"cls", stack<>{}}, {"cls", ragged<>{}}}).find("field 'cls' has two collators") != std::string::npos);
  CHECK(refused({}).find("no field to collate") != std::string::npos);
  // The reader: a text member for a numeric field, two fields for one extension.
  CHECK_THROWS_WITH_AS(io::wds_any(dir.file("train-0000.tar"), {{"json", dtype::f32, extent::variable}}),
                       doctest::Contains("field 'json' holds f32 elements, but it takes '.json' members"), usage_error);
  CHECK_THROWS_WITH_AS(io::wds_any(dir.file("train-0000.tar"), {{"jpg", dtype::u8}, {"jpg;png", dtype::u8}}),
                       doctest::Contains("both take the extension 'jpg'"), usage_error);
  CHECK_THROWS_WITH_AS(io::wds_any(dir.file("train-0000.tar"), {{"jpg", dtype::u8}, {"jpg", dtype::u8}}),
                       doctest::Contains("names field 'jpg' twice"), usage_error);
#ifdef SLUICE_TEST_HAVE_JPEG
  CHECK_THROWS_WITH_AS(decode_field(any.schema(), "cls", codecs::jpeg{{.width = 4, .height = 4}}),
                       doctest::Contains("field 'cls' holds i64 elements; a codec decodes encoded bytes"), usage_error);
  CHECK_THROWS_WITH_AS(decode_field(any.schema(), "jpg", codecs::jpeg{{.width = 4, .height = 4}})
                           .add("jpg", codecs::jpeg{{.width = 8, .height = 8}}),
                       doctest::Contains("field 'jpg' is decoded twice"), usage_error);
  CHECK_THROWS_WITH_AS(decode_field(any.schema(), "png", codecs::jpeg{{.width = 4, .height = 4}}),
                       doctest::Contains("decode_field names field 'png', which the samples do not have"), usage_error);
#endif
}

TEST_CASE("run-time fields: bytes that do not fit are a format_error naming the file, the record and the run-time field") {
  temp_dir dir;
  write_shards(dir, {6});
  io::wds_any any(dir.file("train-0000.tar"), specs4());
  // boxes.npy holds rows of 4 floats; rows of 3 do not divide them (sample 1 has 4 floats).
  auto loader = from(sample::sequential(any.size())) | read(any) |
                collate({.batch = 3}, any.schema(), {{"boxes.npy", ragged<>{.row = {3}}}}) | prefetch(1);
  try {
    for (auto& b : loader.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const std::exception& e) {  // collate's stage_error, the format_error nested (and in its text)
    const std::string what = e.what();
    CHECK(what.find("train-0000.tar', record 1: field 'boxes.npy': 16 bytes are not a whole number of rows of shape {3}") !=
          std::string::npos);
  }
}

#ifdef SLUICE_TEST_HAVE_JPEG
TEST_CASE("run-time fields: decode_field + normalized<> give decode<\"jpg\"> + normalized<\"jpg\">'s floats") {
  temp_dir dir;
  write_shards(dir, {5, 6});
  const std::string pattern = dir.file("train-{0000..0001}.tar");
  io::wds_dataset<schema4> typed(pattern);
  io::wds_any any(pattern, specs4());
  const codecs::jpeg codec{{.width = 8, .height = 8, .mode = codecs::fit::random_resized_crop, .random_flip = true,
                            .layout = image_layout::chw}};
  const normalized<> norm{.mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f}};
  auto compiled = from(sample::shuffle(typed.size(), {.seed = 9})) | read(typed) | decode<"jpg">(codec) |
                  collate({.batch = 4}, normalized<"jpg">{.mean = norm.mean, .std = norm.std}, stack<"cls">{}) |
                  prefetch(2, {.workers = 2, .seed = 4});
  auto dec = decode_field(any.schema(), "jpg", codec);
  CHECK(dec.schema()[0].kind == extent::fixed);
  auto run_time = from(sample::shuffle(any.size(), {.seed = 9})) | read(any) | dec |
                  collate({.batch = 4}, dec.schema(), {{"jpg", norm}, {"cls", stack<>{}}}) |
                  prefetch(2, {.workers = 2, .seed = 4});
  const auto want = drain(compiled, 2);
  REQUIRE(want.size() == 3);
  CHECK(want[0].at("jpg").shape == std::vector<std::int64_t>{4, 3, 8, 8});
  CHECK(drain(run_time, 2) == want);
}

namespace {
// 7 samples over 2 shards: a 16x16 JPEG, g % 4 boxes inside it (rows of 4 as boxes.npy, and as
// the columns x0..y1.npy), one int64 class a box; sample 3 of `bad` has a class too many and
// sample 6's y1 column a value too few.
template <class T>
std::vector<std::byte> npy_of(std::string_view descr, const std::vector<T>& v, std::vector<std::uint64_t> shape) {
  auto out = io::npy_header_bytes(descr, shape);
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
  return out;
}
std::string write_box_shards(const temp_dir& dir, bool bad = false) {
  std::uint64_t g = 0;
  for (std::size_t s = 0; s < 2; ++s) {
    std::vector<member> ms;
    for (std::size_t j = 0; j < (s == 0 ? 3u : 4u); ++j, ++g) {
      const std::string k = key_of(s, g);
      std::vector<float> rows, col[4];
      std::vector<std::int64_t> cls;
      for (std::uint64_t b = 0; b < g % 4; ++b) {
        const float x0 = static_cast<float>((g * 5 + b * 3) % 11), y0 = static_cast<float>((g * 3 + b * 7) % 10);
        const float r[4] = {x0, y0, x0 + 2.0f + static_cast<float>(b), y0 + 3.0f + static_cast<float>(g % 3)};
        for (int c = 0; c < 4; ++c) rows.push_back(r[c]), col[c].push_back(r[c]);
        cls.push_back(static_cast<std::int64_t>(10 * g + b));
      }
      if (bad && g == 3) cls.push_back(99);
      if (bad && g == 6) col[3].pop_back();
      ms.push_back({k + ".jpg", image_of(g)});
      ms.push_back({k + ".boxes.npy", npy_of("<f4", rows, {g % 4, 4})});
      ms.push_back({k + ".classes.npy", npy_of("<i8", cls, {cls.size()})});
      const char* names[4] = {".x0.npy", ".y0.npy", ".x1.npy", ".y1.npy"};
      for (int c = 0; c < 4; ++c) ms.push_back({k + names[c], npy_of("<f4", col[c], {col[c].size()})});
    }
    write_tar(dir.file("boxes-" + std::to_string(s) + ".tar"), ms);
  }
  return dir.file("boxes-{0..1}.tar");
}
}  // namespace

TEST_CASE("run-time fields: boxes that follow a decoded image are the compiled boxes<>'s, as rows or as columns") {
  temp_dir dir;
  const std::string pattern = write_box_shards(dir);
  const codecs::jpeg codec{{.width = 12, .height = 10, .mode = codecs::fit::random_resized_crop, .random_flip = true}};
  const codecs::box_options bo{.min_size = 0.5};
  using det = schema<field<"jpg", std::uint8_t, variable>, field<"boxes", float, variable>, field<"classes", std::int64_t, variable>>;
  io::wds_dataset<det> typed(pattern, {.extensions = {{"boxes", "boxes.npy"}, {"classes", "classes.npy"}}});
  auto compiled = from(sample::shuffle(typed.size(), {.seed = 3})) | read(typed) |
                  decode<"jpg">(codec, boxes<"boxes", "classes">{.min_size = bo.min_size}) |
                  collate({.batch = 3}, stack<"jpg">{}, ragged<"boxes">{.row = {4}}, ragged<"classes">{}) |
                  prefetch(2, {.workers = 2, .seed = 4});
  const auto want = drain(compiled, 1);
  REQUIRE(want.size() == 3);
  std::size_t kept = 0;
  for (const auto& b : want) kept += b.at("classes").bytes.size() / 8;
  CHECK(kept > 0);
  CHECK(kept < 9);  // 0+1+2+3+0+1+2 boxes went in: the crops drop some

  // Rows of 4, the classes losing the dropped rows with them: the compiled batches, byte for byte.
  io::wds_any rows(pattern, {{"jpg"}, {"boxes", dtype::f32}, {"classes", dtype::i64}},
                   {.extensions = {{"boxes", "boxes.npy"}, {"classes", "classes.npy"}}});
  any_decode_stage dec(rows.schema());
  dec.add("jpg", codec, {any_boxes({"boxes"}, {"classes"}, bo)});
  CHECK(dec.schema().describe() == "jpg (u8, fixed), boxes (f32, variable), classes (i64, variable)");
  for (const std::size_t workers : {0u, 1u, 2u}) {
    auto run_time = from(sample::shuffle(rows.size(), {.seed = 3})) | read(rows) | dec |
                    collate({.batch = 3}, dec.schema(), {{"jpg", stack<>{}}, {"boxes", ragged<>{.row = {4}}}, {"classes", ragged<>{}}}) |
                    prefetch(2, {.workers = workers, .seed = 4});
    CHECK(drain(run_time, 1) == want);
  }

  // Four columns (the TF Object Detection API's xmin, ymin, xmax, ymax): each mapped in place.
  io::wds_any cols(pattern, {{"jpg"}, {"x0", dtype::f32}, {"y0", dtype::f32}, {"x1", dtype::f32}, {"y1", dtype::f32}, {"classes", dtype::i64}},
                   {.extensions = {{"x0", "x0.npy"}, {"y0", "y0.npy"}, {"x1", "x1.npy"}, {"y1", "y1.npy"}, {"classes", "classes.npy"}}});
  any_decode_stage cdec(cols.schema());
  cdec.add("jpg", codec, {any_boxes({"x0", "y0", "x1", "y1"}, {"classes"}, bo)});
  auto by_columns = from(sample::shuffle(cols.size(), {.seed = 3})) | read(cols) | cdec |
                    collate({.batch = 3}, cdec.schema(), {{"jpg", stack<>{}}, {"x0", ragged<>{}}, {"y0", ragged<>{}}, {"x1", ragged<>{}},
                                                          {"y1", ragged<>{}}, {"classes", ragged<>{}}}) |
                    prefetch(2, {.workers = 2, .seed = 4});
  const auto got = drain(by_columns, 1);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].at("jpg") == want[i].at("jpg"));
    CHECK(got[i].at("classes") == want[i].at("classes"));
    CHECK(got[i].at("x0.offsets") == want[i].at("boxes.offsets"));
    const auto& b = want[i].at("boxes").bytes;
    const char* names[4] = {"x0", "y0", "x1", "y1"};
    for (std::size_t c = 0; c < 4; ++c) {
      const auto& col = got[i].at(names[c]).bytes;
      REQUIRE(col.size() * 4 == b.size());
      for (std::size_t r = 0; r < col.size() / 4; ++r) CHECK(std::memcmp(col.data() + r * 4, b.data() + (r * 4 + c) * 4, 4) == 0);
    }
  }
}

TEST_CASE("run-time fields: followers that do not fit are refused at construction, bad rows name the file, record and field") {
  temp_dir dir;
  const std::string pattern = write_box_shards(dir, true);
  io::wds_any any(pattern, {{"jpg"}, {"boxes", dtype::f32}, {"classes", dtype::i64}, {"x0", dtype::f32}, {"y0", dtype::f32},
                            {"x1", dtype::f32}, {"y1", dtype::f32}},
                  {.extensions = {{"boxes", "boxes.npy"}, {"classes", "classes.npy"}, {"x0", "x0.npy"}, {"y0", "y0.npy"},
                                  {"x1", "x1.npy"}, {"y1", "y1.npy"}}});
  const codecs::jpeg codec{{.width = 8, .height = 8}};
  auto refused = [&](std::vector<any_follower> f, bool second = false) {
    try {
      any_decode_stage d(second ? any_schema({{"jpg"}, {"png"}, {"boxes", dtype::f32}, {"x0", dtype::f32}, {"y0", dtype::f32}})
                                : any.schema());
      d.add("jpg", codec, std::move(f));
      if (second) d.add("png", codec, {any_points({"x0", "y0"})});
      return std::string();
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
  };
  CHECK(refused({any_boxes({"boxes"}, {"classes"})}).empty());
  CHECK(refused({any_boxes({"classes"})}).find("field 'classes' of i64; they must be f32 or f64") != std::string::npos);
  CHECK(refused({any_boxes({"x0", "y0"})}).find("name 2 coordinate fields; name one (rows of 4) or 4") != std::string::npos);
  CHECK(refused({any_boxes({"boxes"}, {"classes"}), any_points({"x0", "y0"}, {"classes"})}).find("field 'classes' is named twice") !=
        std::string::npos);
  CHECK(refused({any_boxes({"jpg"})}).find("field 'jpg' is named twice") != std::string::npos);
  CHECK(refused({any_boxes({"nope"})}).find("names field 'nope', which the samples do not have") != std::string::npos);
  CHECK(refused({any_boxes({"boxes"})}, true).find("a sample keeps one image's plan") != std::string::npos);

  auto first_error = [&](std::vector<any_follower> f, std::vector<field_collate_spec> c) {
    any_decode_stage d(any.schema());
    d.add("jpg", codec, std::move(f));
    auto loader = from(sample::sequential(any.size())) | read(any) | d | collate({.batch = 7}, d.schema(), std::move(c)) | prefetch(1);
    try {
      for (auto& b : loader.epoch(0)) (void)b;
    } catch (const std::exception& e) {
      return sluice_test::nested_text(e);
    }
    return std::string();
  };
  const auto extra = first_error({any_boxes({"boxes"}, {"classes"})}, {{"boxes", ragged<>{.row = {4}}}, {"classes", ragged<>{}}});
  CHECK(extra.find("boxes-1.tar") != std::string::npos);
  CHECK(extra.find("record 3") != std::string::npos);
  CHECK(extra.find("field 'classes': 32 bytes for 3 rows of 'boxes' (it must hold one row per row of it)") != std::string::npos);
  const auto shortcol = first_error({any_boxes({"x0", "y0", "x1", "y1"})}, {{"x0", ragged<>{}}});
  CHECK(shortcol.find("record 6") != std::string::npos);
  CHECK(shortcol.find("field 'y1': 1 values beside 2 of 'x0' (the coordinate columns of a box must be equally long)") != std::string::npos);
}

TEST_CASE("run-time fields: an image that does not decode fails its sample, naming the file, the record and the field") {
  temp_dir dir;
  write_tar(dir.file("bad.tar"), {{"a/0.jpg", image_of(0)}, {"a/0.cls", bytes_of("1")},
                                  {"a/1.jpg", bytes_of("not a jpeg at all")}, {"a/1.cls", bytes_of("2")}});
  io::wds_any any(dir.file("bad.tar"), {{"jpg", dtype::u8}, {"cls", dtype::i64, extent::fixed}});
  auto dec = decode_field(any.schema(), "jpg", codecs::jpeg{{.width = 8, .height = 8}});
  auto loader = from(sample::sequential(any.size())) | read(any) | dec |
                collate({.batch = 2}, dec.schema(), {{"jpg", stack<>{}}, {"cls", stack<>{}}}) |
                prefetch(1, {.errors = on_error::skip});
  std::size_t delivered = 0, skipped = 0;
  for (auto& b : loader.epoch(0)) {
    delivered += b.size();
    skipped += b.skipped();
    CHECK(b.field("cls").as<std::int64_t>()[0] == 1);
  }
  CHECK(delivered == 1);
  CHECK(skipped == 1);
  auto raising = from(sample::sequential(any.size())) | read(any) | dec |
                 collate({.batch = 2}, dec.schema(), {{"jpg", stack<>{}}}) | prefetch(1);
  try {
    for (auto& b : raising.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    CHECK(what.find("bad.tar") != std::string::npos);
    CHECK(what.find("record 1") != std::string::npos);
    CHECK(what.find("field 'jpg'") != std::string::npos);
  }
}
#endif

TEST_CASE("run-time fields: a fixed u8 field of text members holds the number, not its characters' codes") {
  temp_dir dir;
  write_tar(dir.file("u8.tar"), {{"a/0.jpg", bytes_of("x")}, {"a/0.cls", bytes_of("7\n")},
                                 {"a/1.jpg", bytes_of("y")}, {"a/1.cls", bytes_of("42")},
                                 {"a/2.jpg", bytes_of("z")}, {"a/2.cls", bytes_of("300")}});
  using u8cls = schema<field<"cls", std::uint8_t>>;
  for (int pass = 0; pass < 2; ++pass) {  // the scan, then its saved index
    io::wds_dataset<u8cls> typed(dir.file("u8.tar"));
    io::wds_any any(dir.file("u8.tar"), {{"cls", dtype::u8, extent::fixed}});
    CHECK(std::to_integer<int>(typed.fields(0).bytes_of<"cls">()[0]) == 7);
    CHECK(std::to_integer<int>(any.fields(1).fields[0].bytes[0]) == 42);
    CHECK(any.fields(1).fields[0].bytes.size() == 1);
    CHECK_THROWS_WITH_AS((void)any.fields(2), doctest::Contains("'300' is not a u8 value: it does not fit"), format_error);
  }
}

TEST_CASE(
    "run-time fields: a fixed .npy field stacks to {B, member shape...}, and a member of another shape names both") {
  temp_dir dir;
  auto npy_i16 = [](std::vector<std::uint64_t> shape, std::int16_t first) {
    auto out = io::npy_header_bytes("<i2", shape);
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    for (std::uint64_t k = 0; k < n; ++k) {
      const auto v = static_cast<std::int16_t>(first + static_cast<std::int16_t>(k));
      const auto* b = reinterpret_cast<const std::byte*>(&v);
      out.insert(out.end(), b, b + 2);
    }
    return out;
  };
  // Two shards: the field's shape is the first member's, and a member in the second shard is
  // checked against it too (a batch can span shards).
  write_tar(dir.file("e-0.tar"), {{"k0.emb.npy", npy_i16({2, 3}, 0)},
                                  {"k0.s.npy", npy_i16({}, 7)},
                                  {"k1.emb.npy", npy_i16({2, 3}, 10)},
                                  {"k1.s.npy", npy_i16({}, 8)}});
  write_tar(dir.file("e-1.tar"), {{"k2.emb.npy", npy_i16({2, 3}, 20)},
                                  {"k2.s.npy", npy_i16({}, 9)},
                                  {"k3.emb.npy", npy_i16({3, 2}, 30)},
                                  {"k3.s.npy", npy_i16({}, 10)},
                                  {"k4.emb.npy", npy_i16({6}, 40)},
                                  {"k4.s.npy", npy_i16({}, 11)}});
  for (int pass = 0; pass < 2; ++pass) {  // the scan, then its saved index
    CAPTURE(pass);
    io::wds_any any(dir.file("e-{0..1}.tar"),
                    {{"emb.npy", dtype::i16, extent::fixed}, {"s.npy", dtype::i16, extent::fixed}});
    REQUIRE(any.size() == 5);
    auto loader = from(sample::sequential(3)) | read(any) |
                  collate({.batch = 3}, any.schema(), {{"emb.npy", stack<>{}}, {"s.npy", stack<>{}}}) | prefetch(2);
    const auto got = drain(loader, 0);
    REQUIRE(got.size() == 1);
    CHECK(got[0].at("emb.npy").shape == std::vector<std::int64_t>{3, 2, 3});
    CHECK(got[0].at("s.npy").shape == std::vector<std::int64_t>{3});  // 0-d members: one value each
    std::vector<std::int16_t> v(18);
    std::memcpy(v.data(), got[0].at("emb.npy").bytes.data(), 36);
    CHECK(v[0] == 0);
    CHECK(v[6] == 10);
    CHECK(v[17] == 25);
    // (3, 2) holds as many bytes as (2, 3): without the check it would stack silently as (2, 3).
    const auto e = sluice_test::expect_format_error([&] { (void)any.fields(3); });
    CHECK(e.file() == dir.file("e-1.tar"));
    CHECK(e.record() == 1);
    CHECK(e.cause().find("sample 'k3', field 'emb.npy': its .npy member has shape (3, 2), but the field's members "
                         "have shape (2, 3) (the first one's, sample 'k0' of " +
                         dir.file("e-0.tar") + ")") != std::string::npos);
    CHECK(sluice_test::expect_format_error([&] { (void)any.fields(4); }).cause().find("has shape (6,)") !=
          std::string::npos);
    // The compiled reader checks the same; a variable field takes members of any shape, as bytes.
    io::wds_dataset<schema<field<"emb.npy", std::int16_t>>> typed(dir.file("e-{0..1}.tar"));
    CHECK_THROWS_WITH_AS((void)typed.fields(3), doctest::Contains("has shape (3, 2)"), format_error);
    io::wds_any var(dir.file("e-{0..1}.tar"), {{"emb.npy", dtype::i16, extent::variable}});
    CHECK(var.fields(3).fields[0].bytes.size() == 12);
    CHECK(var.fields(3).fields[0].geometry == nullptr);
  }
}

TEST_CASE("run-time fields: a state resumes the same fields exactly, and a pipeline of other fields refuses it") {
  temp_dir dir;
  write_shards(dir, {13});
  io::wds_any any(dir.file("train-0000.tar"), specs4());
  auto make = [&](std::vector<field_collate_spec> f) {
    return from(sample::shuffle(any.size(), {.seed = 5})) | read(any) | collate({.batch = 3}, any.schema(), std::move(f)) |
           prefetch(2, {.workers = 2});
  };
  const std::vector<field_collate_spec> cls_json{{"cls", stack<>{}}, {"json", ragged<>{}}};
  auto whole = make(cls_json);
  const auto want = drain(whole, 1);
  REQUIRE(want.size() == 5);
  auto first = make(cls_json);
  loader_state saved;
  std::vector<batch_copy> got;
  for (auto& b : first.epoch(1)) {
    got.push_back(copy_of(b));
    if (got.size() == 2) {
      saved = first.state();
      break;
    }
  }
  auto second = make(cls_json);
  for (auto& b : second.resume(saved)) {
    got.push_back(copy_of(b));
  }
  CHECK(got == want);
  auto other = make({{"cls", stack<>{}}, {"json", pad<>{}}});
  CHECK_THROWS_AS((void)other.resume(saved), usage_error);
}
