// A pipeline composed at run time (core/any_sample.hpp: io::wds_any, any_decode_stage,
// any_collate, as the Python module's sluice.wds(fields=...) builds it) against the same pipeline
// compiled (io::wds_dataset<Schema>, decode<"jpg">, fields_collate), side by side in one binary,
// over the same WebDataset shards (in the page cache), the same shuffled order and batches.
//
// Raw records: 12,000 samples of a 3x64x64 u8 image stored raw (".img"), an ASCII label (".cls")
// and 0-8 f32 boxes (".boxes.npy"): stack, stack, ragged{.row = {4}}. The run-time pipeline keeps
// its decode stage with no field to decode, as the Python module does.
// JPEG: 3,000 samples of a 128x128 JPEG (quality 90) decoded with RandomResizedCrop + flip to
// 64x64 CHW and normalised (mean/std per channel), and the label: decode<"jpg"> + normalized<"jpg">
// against any_decode_stage.add("jpg") + normalized<>.
// TFRecord raw records: the same 12,000 raw images as tf.train.Example (bytes_list "img", int64_list
// "cls", float_list "boxes" of 0-32 floats) in one file: io::tf_example_reader<Schema> against
// io::tf_example_any (the label a varint, so written by the any reader's producer).
// Detection: 3,000 samples of the same 128x128 JPEGs with 0-8 boxes (".boxes.npy", f32 pixels)
// and a class each (".classes.npy", i64), decoded with RandomResizedCrop + flip to 64x64 and the
// boxes following the crop (dropped with their classes below 1 pixel): decode<"jpg">(codec,
// boxes<...>) against any_decode_stage.add("jpg", codec, {any_boxes(...)}) (what
// sluice.wds(fields=..., follow=sluice.boxes_of(...)) builds).
// Each benchmark runs whole epochs (a new order each) through prefetch(2, {.workers = W}); the
// counter is samples/s. Report run-time / compiled per row (the target: >= 0.9).
//
// Run: build/bench/core/sluice_bench_any --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <sluice/sluice.hpp>
#include <sluice/codec/jpeg.hpp>
#include <sluice/io/tf_example.hpp>
#include <sluice/stage/any_collate.hpp>
#include <sluice/stage/any_decode.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace sluice;

const fs::path& dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("sluice-bench-any-" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

struct cleanup {
  ~cleanup() {
    std::error_code ec;
    fs::remove_all(dir(), ec);
  }
} cleanup_at_exit;

std::span<const std::byte> text(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

void write_file(const fs::path& p, const std::vector<std::byte>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

constexpr std::size_t raw_n = 12000, jpeg_n = 3000, shards = 4;

// "raw-{0..3}.tar", "jpeg-{0..3}.tar"
std::string make_shards(bool jpeg) {
  const std::size_t n = jpeg ? jpeg_n : raw_n;
  std::mt19937_64 rng(7);
  std::vector<std::uint8_t> px(jpeg ? 128 * 128 * 3 : 3 * 64 * 64);
  for (std::size_t s = 0; s < shards; ++s) {
    std::vector<std::byte> img;
    for (std::size_t i = s * n / shards; i < (s + 1) * n / shards; ++i) {
      for (auto& p : px) p = static_cast<std::uint8_t>(rng());
      char key[32];
      std::snprintf(key, sizeof key, "s%07zu", i);
      if (jpeg) {
        // Smooth content (random bytes compress badly and are not what photographs are).
        for (std::size_t y = 0; y < 128; ++y)
          for (std::size_t x = 0; x < 128; ++x)
            for (std::size_t c = 0; c < 3; ++c) px[(y * 128 + x) * 3 + c] = static_cast<std::uint8_t>((x * (c + 1) + y * 2 + i) & 255);
        io::append_tar_member(img, std::string(key) + ".jpg", codecs::encode_jpeg(px, 128, 128, codecs::pixels::rgb, 90));
      } else {
        io::append_tar_member(img, std::string(key) + ".img", std::as_bytes(std::span(px)));
        const std::size_t nb = rng() % 9;
        auto npy = io::npy_header_bytes("<f4", {nb, 4});
        for (std::size_t k = 0; k < nb * 4; ++k) {
          const float v = static_cast<float>(k) + 0.5f;
          const auto* p = reinterpret_cast<const std::byte*>(&v);
          npy.insert(npy.end(), p, p + 4);
        }
        io::append_tar_member(img, std::string(key) + ".boxes.npy", npy);
      }
      io::append_tar_member(img, std::string(key) + ".cls", text(std::to_string(i % 1000)));
    }
    img.resize(img.size() + 1024);
    write_file(dir() / ((jpeg ? "jpeg-" : "raw-") + std::to_string(s) + ".tar"), img);
  }
  return (dir() / (jpeg ? "jpeg-{0..3}.tar" : "raw-{0..3}.tar")).string();
}

// "det-{0..3}.tar": JPEGs as above, 0-8 boxes inside 128x128 and their classes.
const std::string& det_pattern() {
  static const std::string p = [] {
    std::mt19937_64 rng(11);
    std::vector<std::uint8_t> px(128 * 128 * 3);
    for (std::size_t s = 0; s < shards; ++s) {
      std::vector<std::byte> img;
      for (std::size_t i = s * jpeg_n / shards; i < (s + 1) * jpeg_n / shards; ++i) {
        char key[32];
        std::snprintf(key, sizeof key, "s%07zu", i);
        for (std::size_t y = 0; y < 128; ++y)
          for (std::size_t x = 0; x < 128; ++x)
            for (std::size_t c = 0; c < 3; ++c) px[(y * 128 + x) * 3 + c] = static_cast<std::uint8_t>((x * (c + 1) + y * 2 + i) & 255);
        io::append_tar_member(img, std::string(key) + ".jpg", codecs::encode_jpeg(px, 128, 128, codecs::pixels::rgb, 90));
        const std::size_t nb = rng() % 9;
        std::vector<float> boxes;
        std::vector<std::int64_t> classes;
        for (std::size_t k = 0; k < nb; ++k) {
          const float x0 = static_cast<float>(rng() % 100), y0 = static_cast<float>(rng() % 100);
          const float b[4] = {x0, y0, x0 + 4.0f + static_cast<float>(rng() % 24), y0 + 4.0f + static_cast<float>(rng() % 24)};
          boxes.insert(boxes.end(), b, b + 4);
          classes.push_back(static_cast<std::int64_t>(rng() % 80));
        }
        auto bx = io::npy_header_bytes("<f4", {nb, 4});
        const auto* pb = reinterpret_cast<const std::byte*>(boxes.data());
        bx.insert(bx.end(), pb, pb + boxes.size() * 4);
        auto cl = io::npy_header_bytes("<i8", {nb});
        const auto* pc = reinterpret_cast<const std::byte*>(classes.data());
        cl.insert(cl.end(), pc, pc + classes.size() * 8);
        io::append_tar_member(img, std::string(key) + ".boxes.npy", bx);
        io::append_tar_member(img, std::string(key) + ".classes.npy", cl);
      }
      img.resize(img.size() + 1024);
      write_file(dir() / ("det-" + std::to_string(s) + ".tar"), img);
    }
    return (dir() / "det-{0..3}.tar").string();
  }();
  return p;
}

const std::string& raw_pattern() {
  static const std::string p = make_shards(false);
  return p;
}
const std::string& jpeg_pattern() {
  static const std::string p = make_shards(true);
  return p;
}

// One TFRecord file of tf.train.Example records holding what the raw shards hold.
const std::string& tfrecord_path() {
  static const std::string p = [] {
    std::mt19937_64 rng(7);
    std::vector<std::uint8_t> px(3 * 64 * 64);
    std::vector<std::byte> file;
    for (std::size_t i = 0; i < raw_n; ++i) {
      for (auto& v : px) v = static_cast<std::uint8_t>(rng());
      std::vector<float> boxes(4 * (rng() % 9));
      for (std::size_t k = 0; k < boxes.size(); ++k) boxes[k] = static_cast<float>(k) + 0.5f;
      const std::int64_t cls[] = {static_cast<std::int64_t>(i % 1000)};
      io::append_tfrecord(file, io::tf_example_builder{}
                                    .bytes("img", std::as_bytes(std::span(px)))
                                    .int64s("cls", cls)
                                    .floats("boxes", boxes)
                                    .build());
    }
    const fs::path path = dir() / "raw.tfrecord";
    write_file(path, file);
    return path.string();
  }();
  return p;
}

using tf_schema = schema<field<"img", std::uint8_t>, field<"cls", std::int64_t>, field<"boxes", float, variable>>;

using raw_schema = schema<field<"img", std::uint8_t>, field<"cls", std::int64_t>, field<"boxes.npy", float, variable>>;
using jpeg_schema = schema<field<"jpg", std::uint8_t, variable>, field<"cls", std::int64_t>>;

std::vector<field_spec> raw_specs() {
  return {{"img", dtype::u8, extent::fixed}, {"cls", dtype::i64, extent::fixed}, {"boxes.npy", dtype::f32, extent::variable}};
}
std::vector<field_spec> jpeg_specs() { return {{"jpg", dtype::u8, extent::variable}, {"cls", dtype::i64, extent::fixed}}; }

codecs::jpeg rrc() {
  return codecs::jpeg{{.width = 64, .height = 64, .mode = codecs::fit::random_resized_crop, .random_flip = true,
                       .layout = image_layout::chw}};
}
const std::vector<float> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};

template <class Loader>
void epochs(benchmark::State& state, Loader& loader, std::size_t n) {
  std::uint64_t e = 0, samples = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(e)) {
      samples += b.size();
      benchmark::DoNotOptimize(b.tensor(0).bytes().data());
    }
    ++e;
  }
  if (samples != e * n) state.SkipWithError("an epoch lost samples");
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
}

void BM_raw_compiled(benchmark::State& state) {
  io::wds_dataset<raw_schema> d(raw_pattern());
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) |
                collate({.batch = 256}, stack<"img">{}, stack<"cls">{}, ragged<"boxes.npy">{.row = {4}}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

void BM_raw_runtime(benchmark::State& state) {
  io::wds_any d(raw_pattern(), raw_specs());
  any_decode_stage dec(d.schema());  // nothing to decode: the stage the Python module always has
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) | dec |
                collate({.batch = 256}, dec.schema(),
                        {{"img", stack<>{}}, {"cls", stack<>{}}, {"boxes.npy", ragged<>{.row = {4}}}}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

void BM_jpeg_compiled(benchmark::State& state) {
  io::wds_dataset<jpeg_schema> d(jpeg_pattern());
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) | decode<"jpg">(rrc()) |
                collate({.batch = 128}, normalized<"jpg">{.mean = mean, .std = stdv}, stack<"cls">{}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

void BM_jpeg_runtime(benchmark::State& state) {
  io::wds_any d(jpeg_pattern(), jpeg_specs());
  auto dec = decode_field(d.schema(), "jpg", rrc());
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) | dec |
                collate({.batch = 128}, dec.schema(), {{"jpg", normalized<>{.mean = mean, .std = stdv}}, {"cls", stack<>{}}}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

using det_schema = schema<field<"jpg", std::uint8_t, variable>, field<"boxes.npy", float, variable>,
                          field<"classes.npy", std::int64_t, variable>>;

void BM_detection_compiled(benchmark::State& state) {
  io::wds_dataset<det_schema> d(det_pattern());
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) |
                decode<"jpg">(rrc(), boxes<"boxes.npy", "classes.npy">{}) |
                collate({.batch = 128}, normalized<"jpg">{.mean = mean, .std = stdv}, ragged<"boxes.npy">{.row = {4}},
                        ragged<"classes.npy">{}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

void BM_detection_runtime(benchmark::State& state) {
  io::wds_any d(det_pattern(), {{"jpg"}, {"boxes.npy", dtype::f32}, {"classes.npy", dtype::i64}});
  any_decode_stage dec(d.schema());
  dec.add("jpg", rrc(), {any_boxes({"boxes.npy"}, {"classes.npy"})});
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) | dec |
                collate({.batch = 128}, dec.schema(),
                        {{"jpg", normalized<>{.mean = mean, .std = stdv}}, {"boxes.npy", ragged<>{.row = {4}}}, {"classes.npy", ragged<>{}}}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

void BM_tfrecord_compiled(benchmark::State& state) {
  io::tf_example_reader<tf_schema> d(tfrecord_path());
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) |
                collate({.batch = 256}, stack<"img">{}, stack<"cls">{}, ragged<"boxes">{.row = {4}}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

void BM_tfrecord_runtime(benchmark::State& state) {
  io::tf_example_any d(tfrecord_path(), {{"img", "img", std::nullopt, extent::fixed},
                                         {"cls", "cls", std::nullopt, extent::fixed},
                                         {"boxes", "boxes"}});
  any_decode_stage dec(d.schema());  // nothing to decode: the stage the Python module always has
  auto loader = from(sample::shuffle(d.size(), {.seed = 1})) | read(d) | dec |
                collate({.batch = 256}, dec.schema(), {{"img", stack<>{}}, {"cls", stack<>{}}, {"boxes", ragged<>{.row = {4}}}}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  epochs(state, loader, d.size());
}

}  // namespace

// Interleaved, so drift on a shared machine touches both sides alike.
BENCHMARK(BM_raw_compiled)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_raw_runtime)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_jpeg_compiled)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_jpeg_runtime)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_detection_compiled)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_detection_runtime)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_tfrecord_compiled)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_tfrecord_runtime)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);

BENCHMARK_MAIN();
