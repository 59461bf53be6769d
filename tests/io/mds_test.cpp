// MosaicML Streaming (MDS) datasets through io/mds.hpp: files written by Streaming's own MDSWriter
// (tests/data/mds, made by make_fixtures.py there) read column by column and through a loader;
// shards written here from the documented format for every kind of bad index, shard and sample;
// and the JSON reader the index goes through (io/json.hpp).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sluice/io/json.hpp"
#include "sluice/io/mds.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;
using sluice_test::temp_dir;

namespace {

const std::string fixtures = std::string(SLUICE_TEST_DATA_DIR) + "/mds";

using all_columns = schema<field<"label", std::int64_t>, field<"name", std::uint8_t, variable>,
                           field<"u16", std::uint16_t>, field<"f32", float>, field<"image", std::uint8_t, variable>,
                           field<"mask", std::uint8_t, variable>, field<"arr", std::int32_t, variable>,
                           field<"vec", float>, field<"meta", std::uint8_t, variable>,
                           field<"blob", std::uint8_t, variable>>;

template <class T>
T scalar(std::span<const std::byte> b) {
  REQUIRE(b.size() == sizeof(T));
  T v;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}
template <class T>
std::vector<T> values(std::span<const std::byte> b) {
  REQUIRE(b.size() % sizeof(T) == 0);
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
std::string text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// ---- an MDS writer from the documented format (Streaming's MDSWriter, version 2) ----

struct column {
  std::string name, encoding;
  std::optional<std::uint32_t> size;  // fixed bytes per sample
};
using sample_bytes = std::vector<std::string>;  // one value per column, encoded

void put_u32(std::string& s, std::uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }

std::string encode_sample(const std::vector<column>& cols, const sample_bytes& v) {
  std::string head, body;
  for (std::size_t c = 0; c < cols.size(); ++c) {
    if (!cols[c].size) put_u32(head, static_cast<std::uint32_t>(v[c].size()));
    body += v[c];
  }
  return head + body;
}

std::string encode_shard(const std::vector<column>& cols, const std::vector<sample_bytes>& samples) {
  std::vector<std::string> enc;
  for (const auto& s : samples) enc.push_back(encode_sample(cols, s));
  const std::string config = R"({"format": "mds", "version": 2})";  // the writer's settings, skipped by readers
  std::string out;
  put_u32(out, static_cast<std::uint32_t>(samples.size()));
  std::uint32_t at = static_cast<std::uint32_t>(4 + 4 * (samples.size() + 1) + config.size());
  put_u32(out, at);
  for (const auto& e : enc) put_u32(out, at += static_cast<std::uint32_t>(e.size()));
  out += config;
  for (const auto& e : enc) out += e;
  return out;
}

std::string index_entry(const std::vector<column>& cols, const std::string& basename, std::size_t samples,
                        std::size_t bytes) {
  std::string names, encs, sizes;
  for (const auto& c : cols) {
    names += (names.empty() ? "" : ", ") + ("\"" + c.name + "\"");
    encs += (encs.empty() ? "" : ", ") + ("\"" + c.encoding + "\"");
    sizes += (sizes.empty() ? "" : ", ") + (c.size ? std::to_string(*c.size) : std::string("null"));
  }
  return R"({"column_encodings": [)" + encs + R"(], "column_names": [)" + names + R"(], "column_sizes": [)" + sizes +
         R"(], "compression": null, "format": "mds", "hashes": [], "raw_data": {"basename": ")" + basename +
         R"(", "bytes": )" + std::to_string(bytes) + R"(, "hashes": {}}, "samples": )" + std::to_string(samples) +
         R"(, "size_limit": 67108864, "version": 2, "zip_data": null})";
}

// Writes shards of `per_shard` samples each into `dir` with its index.json; returns the shards' bytes.
std::vector<std::string> write_mds(const std::string& dir, const std::vector<column>& cols,
                                   const std::vector<sample_bytes>& samples, std::size_t per_shard) {
  std::vector<std::string> shards;
  std::string entries;
  for (std::size_t b = 0, s = 0; b < samples.size(); b += per_shard, ++s) {
    const std::vector<sample_bytes> part(samples.begin() + static_cast<std::ptrdiff_t>(b),
                                         samples.begin() + static_cast<std::ptrdiff_t>(std::min(samples.size(), b + per_shard)));
    const std::string name = "shard." + std::to_string(100000 + s).substr(1) + ".mds";
    shards.push_back(encode_shard(cols, part));
    sluice_test::write_file(dir + "/" + name, shards.back());
    entries += (entries.empty() ? "" : ", ") + index_entry(cols, name, part.size(), shards.back().size());
  }
  sluice_test::write_file(dir + "/index.json", R"({"shards": [)" + entries + R"(], "version": 2})");
  return shards;
}

template <class T>
std::string raw(const T& v) {
  return {reinterpret_cast<const char*>(&v), sizeof v};
}
// An ndarray value with a dynamic dtype and shape: [dtype code] [ndim << 2 | u8 shape] [shape] [values].
std::string ndarray_i32(const std::vector<std::int32_t>& v, std::uint8_t code = 33) {
  std::string s;
  s += static_cast<char>(code);
  s += static_cast<char>((1 << 2) | 0);
  s += static_cast<char>(v.size());
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return s;
}

const std::vector<column> small_cols = {{"ids", "ndarray", {}}, {"label", "int", 8}, {"text", "str", {}}};
using small = schema<field<"ids", std::int32_t, variable>, field<"label", std::int64_t>, field<"text", std::uint8_t, variable>>;

std::vector<sample_bytes> small_samples(std::size_t n) {
  std::vector<sample_bytes> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::int32_t> ids;
    for (std::size_t k = 0; k <= i % 4; ++k) ids.push_back(static_cast<std::int32_t>(i * 10 + k));
    out.push_back({ndarray_i32(ids), raw(static_cast<std::int64_t>(i)), "text " + std::to_string(i)});
  }
  return out;
}

std::string read_text(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("mds: files written by Streaming's MDSWriter read column by column, every encoding sluice takes") {
  io::mds_dataset<all_columns> d(fixtures + "/plain");
  REQUIRE(d.size() == 10);
  CHECK(d.shard_count() == 5);
  std::ifstream expected(fixtures + "/expected.txt");
  for (std::size_t i = 0; i < d.size(); ++i) {
    CAPTURE(i);
    std::size_t n = 0, jpg_size = 0, png_size = 0;
    const bool line = static_cast<bool>(expected >> n >> jpg_size >> png_size);
    REQUIRE(line);
    REQUIRE(n == i);
    const auto s = d.fields(i);
    CHECK(s.id == i);
    CHECK(std::string(s.origin).ends_with("/plain/shard.0000" + std::to_string(i / 2) + ".mds"));
    CHECK(scalar<std::int64_t>(s.bytes_of<"label">()) == static_cast<std::int64_t>(i * 7 % 10));
    CHECK(text(s.bytes_of<"name">()) == "sample-" + std::to_string(i));
    CHECK(scalar<std::uint16_t>(s.bytes_of<"u16">()) == 1000 + i);
    CHECK(scalar<float>(s.bytes_of<"f32">()) == static_cast<float>(i) / 4);
    const auto jpg = s.bytes_of<"image">();
    REQUIRE(jpg.size() == jpg_size);
    CHECK(static_cast<unsigned>(jpg[0]) == 0xff);
    CHECK(static_cast<unsigned>(jpg[1]) == 0xd8);
    CHECK(static_cast<unsigned>(jpg[jpg.size() - 1]) == 0xd9);
    const auto png = s.bytes_of<"mask">();
    REQUIRE(png.size() == png_size);
    CHECK(text(png.first(4)) == "\x89PNG");
    std::vector<std::int32_t> arr;
    for (std::size_t k = 0; k < (1 + i % 3) * 2; ++k) arr.push_back(static_cast<std::int32_t>(i * 100 + k));
    CHECK(values<std::int32_t>(s.bytes_of<"arr">()) == arr);
    CHECK(values<float>(s.bytes_of<"vec">()) ==
          std::vector<float>{static_cast<float>(i), static_cast<float>(i) + 0.5f, -static_cast<float>(i)});
    CHECK(text(s.bytes_of<"meta">()) == R"({"i": )" + std::to_string(i) + R"(, "tags": ["a", "b"]})");
    CHECK(text(s.bytes_of<"blob">()) == std::string(i + 1, static_cast<char>(i)));
  }
  CHECK(d.shard_range(2) == std::pair<std::uint64_t, std::uint64_t>{4, 6});
  CHECK(d.shard_of(5) == 2);
  CHECK(d.sizes() == std::vector<std::size_t>(5, 2));
  // The index file path works as well as its directory.
  io::mds_dataset<schema<field<"label", std::int64_t>>> by_index(fixtures + "/plain/index.json");
  CHECK(scalar<std::int64_t>(by_index.fields(9).bytes_of<"label">()) == 3);
}

TEST_CASE("mds: two ranks of shard_split read disjoint whole shards of the MDSWriter's dataset, equal counts") {
  io::mds_dataset<schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>> d(fixtures + "/plain");
  std::multiset<std::uint64_t> seen;
  for (std::size_t rank = 0; rank < 2; ++rank) {
    auto loader = from(sample::shard_split{d, {.rank = rank, .world = 2, .seed = 3}}) | read(d)
                | collate({.batch = 2, .drop_last = false}, ragged<"image">{}, stack<"label">{})
                | prefetch(2, {.workers = 2});
    std::set<std::size_t> shards;
    for (auto& b : loader.epoch(0)) {
      const auto label = b.get<"label">();
      for (std::size_t k = 0; k < b.size(); ++k) {
        const std::uint64_t i = b.ids()[k];
        seen.insert(i);
        shards.insert(d.shard_of(i));
        CHECK(label[k] == static_cast<std::int64_t>(i * 7 % 10));
        CHECK(b.rows_of<"image">(k).size() == d.fields(i).bytes_of<"image">().size());
      }
    }
    for (std::size_t sh : shards) CHECK(sh % 2 == rank);  // shard s belongs to rank s % world
  }
  // 5 shards of 2: rank 0 owns 3, rank 1 owns 2, and each runs 4 samples an epoch (the smaller share).
  CHECK(seen.size() == 8);
  CHECK(std::set<std::uint64_t>(seen.begin(), seen.end()).size() == 8);
}

TEST_CASE("mds: a schema that does not fit the columns fails at construction, naming the shard, column and types") {
  auto error_of = [](auto make) { return sluice_test::expect_format_error(make); };
  const std::string idx = fixtures + "/plain/index.json";
  auto e = error_of([&] { io::mds_dataset<schema<field<"label", std::int32_t>>> d(fixtures + "/plain"); });
  CHECK(e.file() == idx);
  CHECK(e.cause().find("shard 0 (shard.00000.mds), field 'label'") != std::string::npos);
  CHECK(e.cause().find("'int' (i64)") != std::string::npos);
  CHECK(e.cause().find("i32") != std::string::npos);
  e = error_of([&] { io::mds_dataset<schema<field<"name", float, variable>>> d(fixtures + "/plain"); });
  CHECK(e.cause().find("needs a u8 field") != std::string::npos);
  e = error_of([&] { io::mds_dataset<schema<field<"obj", std::uint8_t, variable>>> d(fixtures + "/plain"); });
  CHECK(e.cause().find("pickled (pkl)") != std::string::npos);
  e = error_of([&] { io::mds_dataset<schema<field<"lable", std::int64_t>>> d(fixtures + "/plain"); });
  CHECK(e.cause().find("no column of that name (the shard has arr, blob, f32, image, label") != std::string::npos);
}

TEST_CASE("mds: an ndarray of another dtype than the field's fails when its sample is read") {
  io::mds_dataset<schema<field<"arr", float, variable>>> d(fixtures + "/plain");
  const auto e = sluice_test::expect_format_error([&] { (void)d.fields(3); });
  CHECK(e.file().ends_with("shard.00001.mds"));
  CHECK(e.record() == 1);
  CHECK(e.cause().find("column 'arr' (f32): the ndarray holds i32 values") != std::string::npos);
}

TEST_CASE("mds: compressed shards are refused by name unless their decompressed file is beside the index") {
  const auto e = sluice_test::expect_format_error([&] { io::mds_dataset<schema<field<"label", std::int64_t>>> d(fixtures + "/zstd"); });
  CHECK(e.file().ends_with("zstd/shard.00000.mds.zstd"));
  CHECK(e.cause().find("compressed (zstd)") != std::string::npos);
  CHECK(e.cause().find("compression=None") != std::string::npos);

  // Streaming's local cache keeps the decompressed shard next to the index: read from it.
  temp_dir t;
  const auto shards = write_mds(t.path().string(), small_cols, small_samples(5), 5);
  std::string index = read_text(t.path().string() + "/index.json");
  const std::string from = R"("compression": null)", to = R"("compression": "zstd")";
  index.replace(index.find(from), from.size(), to);
  const std::string zfrom = R"("zip_data": null)", zto = R"("zip_data": {"basename": "shard.00000.mds.zstd", "bytes": 10, "hashes": {}})";
  index.replace(index.find(zfrom), zfrom.size(), zto);
  sluice_test::write_file(t.path().string() + "/index.json", index);
  io::mds_dataset<small> d(t.path().string());
  CHECK(scalar<std::int64_t>(d.fields(4).bytes_of<"label">()) == 4);
}

TEST_CASE("mds: a dataset written from the documented format round-trips through the loader at 1 and 3 workers") {
  temp_dir t;
  (void)write_mds(t.path().string(), small_cols, small_samples(23), 4);
  io::mds_dataset<small> d(t.path().string());
  REQUIRE(d.size() == 23);
  CHECK(d.shard_count() == 6);
  CHECK_FALSE(d.is_open(5));
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(d.size(), {.seed = 5})) | read(d)
                | collate({.batch = 5, .drop_last = false}, ragged<"ids">{}, stack<"label">{}, ragged<"text">{})
                | prefetch(2, {.workers = workers});
    std::vector<std::uint64_t> order;
    for (auto& b : loader.epoch(1)) {
      const auto label = b.get<"label">();
      for (std::size_t k = 0; k < b.size(); ++k) {
        const std::uint64_t i = b.ids()[k];
        order.push_back(i);
        CHECK(label[k] == static_cast<std::int64_t>(i));
        const auto ids = b.rows_of<"ids">(k);
        REQUIRE(ids.size() == i % 4 + 1);
        CHECK(ids[0] == static_cast<std::int32_t>(i * 10));
      }
    }
    CHECK(order.size() == 23);
    return order;
  };
  const auto one = run(1);
  CHECK(run(3) == one);
  CHECK(std::set<std::uint64_t>(one.begin(), one.end()).size() == 23);
  CHECK(d.is_open(5));
  // prefetch from several threads at once (a const method): every shard opens once, reads agree.
  d.release_all();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (std::size_t s = 0; s < d.shard_count(); ++s) d.prefetch(s);
    });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < d.size(); ++i) CHECK(scalar<std::int64_t>(d.fields(i).bytes_of<"label">()) == static_cast<std::int64_t>(i));
  // release_all (between epochs): every shard closed; reading opens it again.
  d.prefetch(2);
  d.release_all();
  for (std::size_t s = 0; s < d.shard_count(); ++s) CHECK_FALSE(d.is_open(s));
  CHECK(scalar<std::int64_t>(d.fields(22).bytes_of<"label">()) == 22);
  CHECK(d.is_open(5));
}

TEST_CASE("mds: bad index files name the file and the problem") {
  temp_dir t;
  (void)write_mds(t.path().string(), small_cols, small_samples(4), 4);
  const std::string good = read_text(t.path().string() + "/index.json");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    REQUIRE(s.find(from) != std::string::npos);
    s.replace(s.find(from), from.size(), to);
    sluice_test::write_file(t.path().string() + "/index.json", s);
    return sluice_test::expect_format_error([&] { io::mds_dataset<small> d(t.path().string()); });
  };
  CHECK(with(R"("version": 2})", R"("version": 1})").cause().find("version is not 2") != std::string::npos);
  CHECK(with(R"("format": "mds")", R"("format": "json")").cause().find("'json' format") != std::string::npos);
  CHECK(with(R"("basename": "shard.00000.mds")", R"("basename": "../shard.00000.mds")").cause().find("inside the dataset") !=
        std::string::npos);
  CHECK(with(R"("basename": "shard.00000.mds")", R"("basename": "/etc/passwd")").cause().find("inside the dataset") !=
        std::string::npos);
  CHECK(with(R"("samples": 4)", R"("samples": "4")").cause().find("shards[0].samples is a string, not an integer") !=
        std::string::npos);
  CHECK(with(R"("column_sizes": [null, 8, null])", R"("column_sizes": [null, 8])").cause().find("3 column names, 3 encodings and 2 sizes") !=
        std::string::npos);
  CHECK(with(R"("column_encodings": ["ndarray", "int", "str"])", R"("column_encodings": ["ndarray:float128", "int", "str"])")
            .cause()
            .find("dtype 'float128'") != std::string::npos);
  CHECK(with(R"("column_encodings": ["ndarray", "int", "str"])", R"("column_encodings": ["ndarray", "int", "wav"])")
            .cause()
            .find("does not know the encoding 'wav'") != std::string::npos);
  const auto cut = with(R"("version": 2})", R"("version": 2)");
  CHECK(cut.offset() == good.size() - 1);
  CHECK(cut.cause().find("not valid JSON") != std::string::npos);
  CHECK(with(R"({"shards": [)", R"({"shards": {)").cause().find("not valid JSON") != std::string::npos);
  std::remove((t.path().string() + "/index.json").c_str());
  CHECK_THROWS_AS(io::mds_dataset<small>(t.path().string()), io_error);
}

TEST_CASE("mds: bad shards fail the samples read from them, naming the shard, and skip drops and counts them") {
  temp_dir t;
  const auto shards = write_mds(t.path().string(), small_cols, small_samples(12), 4);
  const std::string s1 = t.path().string() + "/shard.00001.mds";
  SUBCASE("truncated: the size differs from the index") {
    // Here at construction: refused at once, naming the shard (skip never walks its samples).
    sluice_test::write_file(s1, shards[1].substr(0, shards[1].size() - 3));
    const auto at_open = sluice_test::expect_format_error([&] { io::mds_dataset<small> d(t.path().string()); });
    CHECK(at_open.file() == s1);
    CHECK(at_open.cause().find("index.json says " + std::to_string(shards[1].size())) != std::string::npos);
    // Truncated after construction: the samples read from it fail, and skip drops and counts them.
    sluice_test::write_file(s1, shards[1]);
    io::mds_dataset<small> d(t.path().string());
    sluice_test::write_file(s1, shards[1].substr(0, shards[1].size() - 3));
    CHECK(scalar<std::int64_t>(d.fields(3).bytes_of<"label">()) == 3);
    const auto e = sluice_test::expect_format_error([&] { (void)d.fields(5); });
    CHECK(e.file() == s1);
    CHECK(e.cause().find("index.json says " + std::to_string(shards[1].size())) != std::string::npos);
    // The same error again, without reopening.
    CHECK(sluice_test::expect_format_error([&] { (void)d.fields(4); }).cause() == e.cause());
    auto loader = from(sample::sequential(d.size())) | read(d) | collate({.batch = 4, .drop_last = false}, stack<"label">{})
                | prefetch(2, {.workers = 2, .errors = on_error::skip});
    std::vector<std::int64_t> got;
    for (auto& b : loader.epoch(0))
      for (std::size_t k = 0; k < b.size(); ++k) got.push_back(b.get<"label">()[k]);
    CHECK(got == std::vector<std::int64_t>{0, 1, 2, 3, 8, 9, 10, 11});
    CHECK(loader.stats().skipped == 4);
  }
  SUBCASE("a sample count other than the index's") {
    std::string b = shards[1];
    b[0] = 5;
    sluice_test::write_file(s1, b);
    const auto e = sluice_test::expect_format_error([&] { io::mds_dataset<small> d(t.path().string()); });
    CHECK(e.file() == s1);
    CHECK(e.cause().find("holds 5 samples but index.json says 4") != std::string::npos);
  }
  SUBCASE("an index that claims more samples than its shard's bytes can hold is refused at construction") {
    const std::string index = t.path().string() + "/index.json";
    std::string text = read_text(index);
    const std::string from = R"("samples": 4)";
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), R"("samples": 4000000000)");
    sluice_test::write_file(index, text);
    const auto e = sluice_test::expect_format_error([&] { io::mds_dataset<small> d(t.path().string()); });
    CHECK(e.file() == index);
    CHECK(e.cause().find("cannot hold the offset table of that many samples") != std::string::npos);
  }
  SUBCASE("index.json that is a FIFO, a directory or /dev/zero is refused at once, naming it") {
    const std::string index = t.path().string() + "/index.json";
    std::remove(index.c_str());
    REQUIRE(::mkfifo(index.c_str(), 0600) == 0);
    auto opened = std::async(std::launch::async, [&] {
      try {
        io::mds_dataset<small> d(t.path().string());
        return std::string("opened");
      } catch (const format_error& e) {
        return std::string(e.what());
      }
    });
    REQUIRE_MESSAGE(opened.wait_for(std::chrono::seconds(10)) == std::future_status::ready, "blocked on a FIFO");
    auto what = opened.get();
    CHECK(what.find("not a regular file") != std::string::npos);
    CHECK(what.find(index) != std::string::npos);
    std::remove(index.c_str());
    REQUIRE(::symlink("/dev/zero", index.c_str()) == 0);
    what = sluice_test::expect_format_error([&] { io::mds_dataset<small> d(t.path().string()); }).what();
    CHECK(what.find("not a regular file") != std::string::npos);
    std::remove(index.c_str());
    std::filesystem::create_directory(index);
    what = sluice_test::expect_format_error([&] { io::mds_dataset<small> d(t.path().string()); }).what();
    CHECK(what.find("not a regular file (a directory)") != std::string::npos);
    CHECK(what.find(index) != std::string::npos);
  }
  SUBCASE("an offset table that goes backwards or leaves the file") {
    for (const std::uint32_t v : {3u, 0xffffu}) {
      std::string b = shards[1];
      std::memcpy(b.data() + 4 + 4 * 2, &v, 4);
      sluice_test::write_file(s1, b);
      io::mds_dataset<small> d(t.path().string());
      const auto e = sluice_test::expect_format_error([&] { (void)d.fields(4); });
      CHECK(e.offset() == 12);
      CHECK(e.cause().find("offset table entry 2") != std::string::npos);
    }
  }
  SUBCASE("a column size that runs past the sample, and columns that do not fill it") {
    std::string b = shards[1];
    std::uint32_t first = 0;
    std::memcpy(&first, b.data() + 4 + 4 * 1, 4);  // sample 1 of the shard (global 5)
    const std::uint32_t huge = 1000;
    std::string b2 = b;
    std::memcpy(b2.data() + first, &huge, 4);  // its ids column size
    sluice_test::write_file(s1, b2);
    {
      io::mds_dataset<small> d(t.path().string());
      const auto e = sluice_test::expect_format_error([&] { (void)d.fields(5); });
      CHECK(e.file() == s1);
      CHECK(e.record() == 1);
      CHECK(e.offset() == first);
      CHECK(e.cause().find("column 'ids' (1000 bytes") != std::string::npos);
      CHECK(scalar<std::int64_t>(d.fields(6).bytes_of<"label">()) == 6);  // the others are fine
    }
    std::uint32_t ids_size = 0;
    std::memcpy(&ids_size, b.data() + first, 4);
    --ids_size;
    std::memcpy(b.data() + first, &ids_size, 4);
    sluice_test::write_file(s1, b);
    io::mds_dataset<small> d(t.path().string());
    CHECK(sluice_test::expect_format_error([&] { (void)d.fields(5); }).cause().find("but the sample holds") != std::string::npos);
  }
  SUBCASE("ndarray headers: an unknown dtype code, a shape that does not match the values, no dimensions") {
    auto samples = small_samples(12);
    samples[5][0] = ndarray_i32({1, 2}, 200);
    samples[6][0] = ndarray_i32({1, 2}).substr(0, 3 + 4);  // shape says 2 values, 1 is there
    samples[7][0] = std::string("\x21\x00", 2) + raw(std::int32_t{1});
    (void)write_mds(t.path().string(), small_cols, samples, 4);
    io::mds_dataset<small> d(t.path().string());
    CHECK(sluice_test::expect_format_error([&] { (void)d.fields(5); }).cause().find("dtype code 200") != std::string::npos);
    CHECK(sluice_test::expect_format_error([&] { (void)d.fields(6); }).cause().find("shape says 2 values") != std::string::npos);
    CHECK(sluice_test::expect_format_error([&] { (void)d.fields(7); }).cause().find("0 dimensions") != std::string::npos);
    CHECK(scalar<std::int64_t>(d.fields(4).bytes_of<"label">()) == 4);
  }
  SUBCASE("a missing shard is an io_error naming it, at the batch that needs it") {
    std::remove(s1.c_str());
    io::mds_dataset<small> d(t.path().string());
    CHECK(scalar<std::int64_t>(d.fields(0).bytes_of<"label">()) == 0);
    try {
      (void)d.fields(4);
      FAIL("no error");
    } catch (const io_error& e) {
      CHECK(std::string(e.what()).find(s1) != std::string::npos);
    }
  }
}

TEST_CASE("json: values, escapes, numbers, and errors with their byte offset") {
  const auto v = io::parse_json(R"( {"a": [1, -2, 3.5, 1e3, 9223372036854775807, 18446744073709551616],
      "s": "x\"\\\/\b\f\n\r\t\u00e9\u20ac\ud83d\ude00", "t": true, "f": false, "n": null, "o": {}, "e": []} )", "x.json");
  const auto& a = v.at("a", "x.json").items();
  REQUIRE(a.size() == 6);
  CHECK(a[0].as_int("x", "") == 1);
  CHECK(a[1].as_int("x", "") == -2);
  CHECK_FALSE(a[2].is_int());
  CHECK(a[2].as_double("x", "") == 3.5);
  CHECK(a[3].as_double("x", "") == 1000.0);
  CHECK(a[4].as_int("x", "") == 9223372036854775807LL);
  CHECK_FALSE(a[5].is_int());  // past int64: a double
  CHECK(v.at("s", "x").as_string("x", "") == "x\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  CHECK(v.at("t", "x").as_bool("x", ""));
  CHECK(v.at("n", "x").is_null());
  CHECK(v.at("o", "x").is_object());
  CHECK(v.find("missing") == nullptr);
  CHECK(sluice_test::expect_format_error([&] { (void)v.at("s", "x.json").as_int("x.json", "s"); }).cause() ==
        "s is a string, not an integer");

  struct bad {
    const char* text;
    std::uint64_t offset;
    const char* why;
  };
  for (const bad& b : {bad{"", 0, "unexpected end"}, bad{"[1,]", 3, "unexpected character ']'"}, bad{"{\"a\" 1}", 5, "expected ':'"},
                       bad{"[1 2]", 3, "expected ','"}, bad{"01", 0, "leading zero"}, bad{"1.", 2, "after '.'"},
                       bad{"\"abc", 4, "not closed"}, bad{"\"\\x\"", 2, "unknown escape"}, bad{"\"\\ud800\"", 7, "high surrogate"},
                       bad{"\"\\udc00\"", 7, "lone low surrogate"}, bad{"\"a\nb\"", 2, "control character"},
                       bad{"true false", 5, "trailing bytes"}, bad{"{1: 2}", 1, "string key"}, bad{"nul", 0, "unexpected character 'n'"},
                       bad{"1e999", 0, "out of the range"}, bad{"-", 1, "digit expected"}}) {
    const std::string txt = b.text;
    CAPTURE(txt);
    const auto e = sluice_test::expect_format_error([&] { (void)io::parse_json(b.text, "x.json"); });
    CHECK(e.file() == "x.json");
    CHECK(e.offset() == b.offset);
    CHECK(e.cause().find(b.why) != std::string::npos);
  }
  const std::string deep(65, '[');
  CHECK(sluice_test::expect_format_error([&] { (void)io::parse_json(deep + std::string(65, ']'), "d.json"); }).cause().find("deeper than 64") !=
        std::string::npos);
  CHECK(io::parse_json(std::string(64, '[') + std::string(64, ']'), "d.json").is_array());
}

TEST_CASE("mds: columns named at run time through mds_options::columns") {
  using fixed = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  io::mds_dataset<fixed> d(fixtures + "/plain", {.columns = {{"image", "mask"}, {"label", "label"}}});
  CHECK(text(d.fields(2).bytes_of<"image">().first(4)) == "\x89PNG");  // the png column
  const auto e = sluice_test::expect_format_error(
      [&] { io::mds_dataset<fixed> bad(fixtures + "/plain", {.columns = {{"image", "picture"}}}); });
  CHECK(e.cause().find("field 'image' (column 'picture'): no column of that name") != std::string::npos);
  CHECK_THROWS_AS(io::mds_dataset<fixed>(fixtures + "/plain", {.columns = {{"imgae", "image"}}}), usage_error);
}

TEST_CASE("mds: a 'pil' column (raw pixels) reads as bytes, and is refused where an image decoder would read it") {
  // MDSWriter's pil encoding: u32 width, height and mode length, the mode, then Image.tobytes().
  sluice_test::temp_dir t;
  auto pil = [](std::uint32_t w, std::uint32_t h) {
    std::string v = raw(w) + raw(h) + raw(std::uint32_t{3}) + "RGB";
    return v + std::string(w * h * 3, '\x07');
  };
  const std::vector<column> cols = {{"image", "pil", {}}, {"photo", "jpeg", {}}, {"label", "int", 8}};
  (void)write_mds(t.path().string(), cols,
                  {{pil(2, 2), "J", raw(std::int64_t{4})}, {pil(1, 3), "J", raw(std::int64_t{5})}}, 2);
  using fixed = schema<field<"image", std::uint8_t, variable>, field<"label", std::int64_t>>;
  io::mds_dataset<fixed> d(t.path().string());
  CHECK(d.encoding_of(0) == "pil");
  CHECK(d.fields(0).size_of<"image">() == 12 + 3 + 12);  // the bytes as written
  const std::string says = "the MDS column 'image' of " + t.path().string() + "/index.json is encoded 'pil'";
  CHECK_THROWS_WITH_AS(d.check_image_column(0), doctest::Contains(says.c_str()), usage_error);
  CHECK_THROWS_WITH_AS(d.check_image_column(0), doctest::Contains("'jpeg' or 'png'"), usage_error);
  CHECK_NOTHROW(d.check_image_column(1));  // the int column is no image either, but not raw pixels: its own errors
  io::mds_any a(t.path().string(), {{"img", "photo"}, {"raw", "image"}});
  CHECK(a.encoding_of(0) == "jpeg");
  CHECK_NOTHROW(a.check_image_column(0));
  CHECK_THROWS_WITH_AS(a.check_image_column(1), doctest::Contains("column 'image'"), usage_error);
}

TEST_CASE("mds_any: columns at run time with their own types give the compiled reader's batches") {
  // Every column sluice reads, under its own name, typed as index.json (and the first ndarray) say.
  io::mds_any all(fixtures + "/plain");
  CHECK(all.schema().describe() ==
        "arr (i32, variable), blob (u8, variable), f32 (f32, fixed), image (u8, variable), label (i64, fixed), "
        "mask (u8, variable), meta (u8, variable), name (u8, variable), u16 (u16, fixed), vec (f32, fixed)");
  const auto s3 = all.fields(3);
  CHECK(std::string(s3.origin).ends_with("/plain/shard.00001.mds"));
  CHECK(values<std::int32_t>(s3.fields[0].bytes) == std::vector<std::int32_t>{300, 301});
  CHECK(s3.geometry_of(4).ndim == 0);  // a scalar: stack<> gives {B}
  CHECK(s3.geometry_of(9).ndim == 1);  // ndarray:float32:3
  CHECK(s3.geometry_of(9).shape[0] == 3);
  CHECK(s3.fields[0].geometry == nullptr);  // a dynamic shape: none known

  // Picked, renamed, in the given order; the batches are the compiled reader's, byte for byte.
  io::mds_any some(fixtures + "/plain", {{"y", "label"}, {"x", "arr"}, {"v", "vec"}, {"s", "name"}});
  using compiled_schema = schema<field<"arr", std::int32_t, variable>, field<"label", std::int64_t>, field<"vec", float>,
                                 field<"name", std::uint8_t, variable>>;
  io::mds_dataset<compiled_schema> typed_reader(fixtures + "/plain");
  for (std::size_t workers : {1, 2}) {
    CAPTURE(workers);
    auto compiled = from(sample::shuffle(typed_reader.size(), {.seed = 4})) | read(typed_reader) |
                    collate({.batch = 3, .drop_last = false}, stack<"label">{}, pad<"arr">{.value = -1, .row = {2}},
                            stack<"vec">{}, ragged<"name">{}) |
                    prefetch(2, {.workers = workers});
    auto run_time = from(sample::shuffle(some.size(), {.seed = 4})) | read(some) |
                    collate({.batch = 3, .drop_last = false}, some.schema(),
                            {{"y", stack<>{}}, {"x", pad<>{.value = -1, .row = {2}}}, {"v", stack<>{}}, {"s", ragged<>{}}}) |
                    prefetch(2, {.workers = workers});
    std::vector<std::vector<std::byte>> want, got;
    std::vector<std::vector<std::int64_t>> want_shape, got_shape;
    for (auto& b : compiled.epoch(1))
      for (std::size_t t = 0; t < b.tensor_count(); ++t) {
        want.emplace_back(b.tensor(t).bytes().begin(), b.tensor(t).bytes().end());
        want_shape.emplace_back(b.tensor(t).shape().begin(), b.tensor(t).shape().end());
      }
    std::vector<std::string> names;
    for (auto& b : run_time.epoch(1))
      for (std::size_t t = 0; t < b.tensor_count(); ++t) {
        got.emplace_back(b.tensor(t).bytes().begin(), b.tensor(t).bytes().end());
        got_shape.emplace_back(b.tensor(t).shape().begin(), b.tensor(t).shape().end());
        if (names.size() < b.tensor_count()) names.emplace_back(b.tensor(t).name());
      }
    REQUIRE(want.size() == 4 * 6);  // 4 batches x (label, arr, arr.lengths, vec, name, name.offsets)
    CHECK(got == want);
    CHECK(got_shape == want_shape);
    CHECK(got_shape[0] == std::vector<std::int64_t>{3});     // the int column: {B}
    CHECK(got_shape[3] == std::vector<std::int64_t>{3, 3});  // ndarray:float32:3: {B, 3}
    CHECK(names == std::vector<std::string>{"y", "x", "x.lengths", "v", "s", "s.offsets"});
  }

  // A dtype given is checked against the column, as the compiled reader checks it.
  auto e = sluice_test::expect_format_error([&] { io::mds_any bad(fixtures + "/plain", {{"l", "label"}}, {{"l", dtype::i32}}); });
  CHECK(e.cause().find("field 'l' (column 'label'): column 'label' is encoded 'int' (i64)") != std::string::npos);
  // An ndarray given another type than its samples hold: the sample read names it.
  io::mds_any as_float(fixtures + "/plain", {{"arr", "arr"}}, {{"arr", dtype::f32}});
  e = sluice_test::expect_format_error([&] { (void)as_float.fields(3); });
  CHECK(e.cause().find("column 'arr' (f32): the ndarray holds i32 values") != std::string::npos);
  e = sluice_test::expect_format_error([&] { io::mds_any bad(fixtures + "/plain", {{"x", "nope"}}); });
  CHECK(e.cause().find("field 'x' (column 'nope'): no column of that name (the shard has arr, blob") != std::string::npos);
  e = sluice_test::expect_format_error([&] { io::mds_any bad(fixtures + "/plain", {{"obj", "obj"}}); });
  CHECK(e.cause().find("pickled (pkl)") != std::string::npos);
  CHECK_THROWS_WITH_AS(io::mds_any(fixtures + "/plain", {{"a", "label"}, {"a", "arr"}}), doctest::Contains("names field 'a' twice"),
                       usage_error);
  CHECK_THROWS_WITH_AS(io::mds_any(fixtures + "/plain", {{"a", "label"}}, {{"b", dtype::i64}}),
                       doctest::Contains("types names field 'b', which is not read"), usage_error);
}

TEST_CASE("mds_any: an ndarray column that stores its dtype per sample takes the first sample's, and a sample of another fails") {
  temp_dir t;
  auto samples = small_samples(9);
  samples[6][0] = ndarray_i32({1, 2}, 34);  // sample 6 claims float32
  (void)write_mds(t.path().string(), small_cols, samples, 4);
  io::mds_any d(t.path().string(), {{"ids", "ids"}, {"text", "text"}});
  CHECK(d.schema().describe() == "ids (i32, variable), text (u8, variable)");
  CHECK(values<std::int32_t>(d.fields(2).fields[0].bytes) == std::vector<std::int32_t>{20, 21, 22});
  const auto e = sluice_test::expect_format_error([&] { (void)d.fields(6); });
  CHECK(e.file().ends_with("shard.00001.mds"));
  CHECK(e.record() == 2);
  CHECK(e.cause().find("column 'ids' (i32): the ndarray holds f32 values") != std::string::npos);
  // Under the loader with skip: the one bad sample dropped and counted, the rest delivered.
  auto loader = from(sample::sequential(d.size())) | read(d) |
                collate({.batch = 4, .drop_last = false}, d.schema(), {{"ids", ragged<>{}}, {"text", ragged<>{}}}) |
                prefetch(2, {.workers = 2, .errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(n == 8);
  CHECK(loader.stats().skipped == 1);
}
