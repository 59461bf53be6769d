// What a detection or segmentation sample's annotations cost beside its image, per sample on one
// core: the JPEG decode of a 640x480 photo-like image through a random_resized_crop to 512x512
// (the image's decode + bilinear resample), against
//   - BM_json_annotations: its COCO-style JSON member (7 objects, each a bbox, category, iscrowd,
//     area, id and a 24-point polygon) read by json_fields into boxes, classes and iscrowd;
//   - BM_mask: its 640x480 palette PNG mask decoded and resampled nearest-neighbour through the
//     same transform (codecs::decode_mask, what mask<> does);
//   - BM_instance_masks/polygons: the 7 objects' polygons (COCO's, 24 points each) drawn at
//     640x480 and resampled into 7 masks of 512x512 (codecs::draw_instances, what
//     instance_masks<> does); /runs: the same 7 objects as run-length masks.
// Each is timed alone on the same bytes; the ratios are the annotation's share of the image's.
//
//   build/bench/core/sluice_bench_annotations --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "sluice/codec/instances.hpp"
#include "sluice/codec/mask.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/json_fields.hpp"
#include "../../tests/codec/png_writer.hpp"

namespace {

constexpr int W = 640, H = 480, Out = 512;

std::vector<std::byte> photo() {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(W) * H * 3);
  std::mt19937 rng(7);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c)
        px[(static_cast<std::size_t>(y) * W + x) * 3 + c] =
            static_cast<std::uint8_t>((x * (c + 1) + y * (3 - c)) / 5 % 200 + rng() % 40);
  return sluice::codecs::encode_jpeg(px, W, H, sluice::codecs::pixels::rgb, 90);
}

std::vector<std::byte> mask_png() {
  sluice_test::png_spec s;
  s.width = W, s.height = H, s.bit_depth = 8, s.color_type = PNG_COLOR_TYPE_PALETTE;
  for (int i = 0; i < 256; ++i)
    s.palette.push_back({static_cast<png_byte>(i), static_cast<png_byte>(255 - i), static_cast<png_byte>(i * 7)});
  s.samples.resize(static_cast<std::size_t>(W) * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)  // 8 regions and a background, as a scene's classes lie
      s.samples[static_cast<std::size_t>(y) * W + x] = static_cast<std::uint16_t>(((x / 160) + 4 * (y / 240)) % 9 * 3);
  return sluice_test::write_png(s);
}

std::string annotations() {
  std::string s = R"({"image_id": 139, "width": 640, "height": 480, "annotations": [)";
  for (int k = 0; k < 7; ++k) {
    s += std::string(k ? ", " : "") + "{\"id\": " + std::to_string(1000 + k) + ", \"image_id\": 139, \"category_id\": " +
         std::to_string(1 + 11 * k) + ", \"iscrowd\": 0, \"area\": " + std::to_string(1234.5 + k) + ", \"bbox\": [" +
         std::to_string(12.5 + 70 * k) + ", " + std::to_string(40.25 + 20 * k) + ", 61.75, 113.5], \"segmentation\": [[";
    for (int p = 0; p < 24; ++p) s += std::string(p ? ", " : "") + std::to_string(12.5 + 70 * k + p) + ", " + std::to_string(40.25 + p * 4.5);
    s += "]]}";
  }
  return s + "]}";
}

sluice::codecs::image_transform transform_of(const sluice::codecs::jpeg& codec, std::span<const std::byte> jpg) {
  return codec.plan(jpg, sluice::sample_context{.seed = 3, .epoch = 0, .id = 11, .position = 0});
}

const sluice::codecs::jpeg codec{{.width = Out, .height = Out, .mode = sluice::codecs::fit::random_resized_crop,
                                  .random_flip = true}};

void BM_jpeg_image(benchmark::State& st) {
  const auto jpg = photo();
  const auto t = transform_of(codec, jpg);
  std::vector<std::byte> out(codec.output_bytes());
  for (auto _ : st) {
    codec.decode_with(jpg, out, t);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["jpeg_bytes"] = static_cast<double>(jpg.size());
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_jpeg_image);

void BM_json_annotations(benchmark::State& st) {
  using member = sluice::schema<sluice::field<"json", std::uint8_t, sluice::variable>>;
  const sluice::json_fields<"json", sluice::field<"boxes", float, sluice::variable>,
                            sluice::field<"classes", std::int64_t, sluice::variable>,
                            sluice::field<"iscrowd", std::uint8_t, sluice::variable>>
      stage{{"boxes", "annotations[*].bbox", sluice::json_box::xywh},
            {"classes", "annotations[*].category_id"},
            {"iscrowd", "annotations[*].iscrowd"}};
  const std::string text = annotations();
  sluice::fields_sample<member> s;
  s.set<"json">(std::as_bytes(std::span(text.data(), text.size())));
  std::size_t boxes = 0;
  for (auto _ : st) {
    const auto out = stage(s, sluice::sample_context{});
    boxes += out.bytes_of<"boxes">().size() / 16;
    benchmark::DoNotOptimize(out.values[0].data());
  }
  if (boxes != 7 * st.iterations()) st.SkipWithError("json_fields did not read 7 boxes a sample");
  st.counters["json_bytes"] = static_cast<double>(text.size());
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_json_annotations);

void BM_mask(benchmark::State& st) {
  const auto jpg = photo();
  const auto png = mask_png();
  const auto t = transform_of(codec, jpg);
  std::vector<std::byte> out(static_cast<std::size_t>(t.out_width) * t.out_height);
  for (auto _ : st) {
    sluice::codecs::decode_mask(png, out, t, 255);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["png_bytes"] = static_cast<double>(png.size());
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_mask);

// The 7 objects of annotations() as instance records: their polygons, or (runs) the bitmaps the
// polygons cover as column-major run lengths.
std::vector<std::byte> instance_records(bool runs) {
  std::vector<std::byte> rec;
  sluice::codecs::instance_writer w(rec);
  for (int k = 0; k < 7; ++k) {
    std::vector<float> p;
    for (int q = 0; q < 24; ++q) {  // a closed outline: out along a slope, back along another
      const float x = 12.5f + 70 * k + (q < 12 ? 5.0f * q : 5.0f * (23 - q));
      const float y = 40.25f + (q < 12 ? 9.0f * q : 9.0f * (23 - q) + 40);
      p.push_back(x), p.push_back(y);
    }
    const std::vector<std::vector<float>> polys{p};
    if (!runs) {
      w.polygons(polys);
      continue;
    }
    std::vector<std::byte> one, bits(static_cast<std::size_t>(W) * H);
    sluice::codecs::instance_writer(one).polygons(polys);
    sluice::codecs::image_transform id;
    id.src_width = id.out_width = W, id.src_height = id.out_height = H, id.w = W, id.h = H;
    sluice::codecs::draw_instances(one, bits, id, std::vector<std::uint32_t>{0});
    std::vector<std::uint32_t> counts;
    std::byte cur{0};
    std::uint32_t n = 0;
    for (int x = 0; x < W; ++x)
      for (int y = 0; y < H; ++y) {
        const std::byte b = bits[static_cast<std::size_t>(y) * W + x];
        if (b != cur) counts.push_back(n), n = 0, cur = b;
        ++n;
      }
    counts.push_back(n);
    w.runs(H, W, counts);
  }
  return rec;
}

void BM_instance_masks(benchmark::State& st) {
  const auto jpg = photo();
  const auto t = transform_of(codec, jpg);
  const auto rec = instance_records(st.range(0) == 1);
  sluice::codecs::check_instances(rec, t, 7);
  const std::vector<std::uint32_t> keep{0, 1, 2, 3, 4, 5, 6};
  std::vector<std::byte> out(7 * static_cast<std::size_t>(t.out_width) * t.out_height);
  std::size_t ones = 0;
  for (auto _ : st) {
    sluice::codecs::draw_instances(rec, out, t, keep);
    benchmark::DoNotOptimize(out.data());
  }
  for (const std::byte b : out) ones += b == std::byte{1};
  if (ones == 0) st.SkipWithError("no instance pixel was drawn");
  st.counters["mask_pixels"] = static_cast<double>(ones);
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(st.range(0) == 1 ? "runs" : "polygons");
}
BENCHMARK(BM_instance_masks)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
