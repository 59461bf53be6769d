// Image layout end to end: the JPEG codec writes HWC or CHW (the CHW output is the transpose of
// the HWC output bit for bit, whatever the resize, crop and flip); the classic collate and the
// per-field normalized<"f"> normalise each channel in the layout the codec wrote and reject a
// layout claim that contradicts it; decode<"f">(codec) decodes one field of a sample with fields.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/decode.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {

// Channels that differ everywhere (R follows x, G follows y, B a diagonal), so normalising a
// channel with another channel's mean/std shows.
std::vector<std::uint8_t> rgb_image(int w, int h) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* q = &p[(static_cast<std::size_t>(y) * w + x) * 3];
      q[0] = static_cast<std::uint8_t>(x * 255 / (w - 1));
      q[1] = static_cast<std::uint8_t>(y * 255 / (h - 1));
      q[2] = static_cast<std::uint8_t>(40 + (x + y) % 64 * 3);
    }
  return p;
}

// HWC bytes -> CHW bytes.
std::vector<std::byte> transpose_hwc(const std::vector<std::byte>& hwc, std::size_t c) {
  const std::size_t plane = hwc.size() / c;
  std::vector<std::byte> chw(hwc.size());
  for (std::size_t p = 0; p < plane; ++p)
    for (std::size_t k = 0; k < c; ++k) chw[k * plane + p] = hwc[p * c + k];
  return chw;
}

geometry_options with_layout(geometry_options g, image_layout l) {
  g.layout = l;
  return g;
}

const std::vector<float> kMean{0.485f, 0.456f, 0.406f};
const std::vector<float> kStd{0.229f, 0.224f, 0.225f};

// y = (x / 255 - mean[c]) / std[c], computed the way every normaliser computes it (one loop,
// core/batch_ops.hpp: (x - mean / scale) * (scale / std) in float, the device kernel's arithmetic),
// so the collators must match it bit for bit; `out` picks the layout of the result. Also checked
// against the same formula in double.
std::vector<float> reference(const std::vector<std::byte>& hwc, std::size_t c, image_layout out) {
  const std::size_t plane = hwc.size() / c;
  std::vector<float> y(hwc.size());
  const float scale = 1.0f / 255.0f;
  for (std::size_t p = 0; p < plane; ++p)
    for (std::size_t k = 0; k < c; ++k) {
      const float x = static_cast<float>(std::to_integer<int>(hwc[p * c + k]));
      const float v = (x - kMean[k] / scale) * (scale / kStd[k]);
      const double exact = (static_cast<double>(x) / 255.0 - kMean[k]) / kStd[k];
      REQUIRE(std::abs(v - exact) < 1e-5);
      y[out == image_layout::chw ? k * plane + p : p * c + k] = v;
    }
  return y;
}

float max_error(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return e;
}

// n JPEGs of different sizes, in memory; record i has label i % 3.
struct jpeg_records {
  using reader_concept = reader_tag;
  std::vector<std::vector<std::byte>> enc;
  explicit jpeg_records(int n) {
    for (int i = 0; i < n; ++i) {
      const int w = 40 + 5 * i, h = 30 + 3 * i;
      enc.push_back(encode_jpeg(rgb_image(w, h), w, h, pixels::rgb, 90));
    }
  }
  std::size_t size() const { return enc.size(); }
  std::span<const std::byte> record(std::size_t i) const { return enc[i]; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(i % 3); }
  std::string_view path() const { return "memory-jpegs"; }
};

// The same JPEGs as samples with fields: "jpg" (the encoded bytes) and "label".
using jpg_schema = schema<field<"jpg", std::uint8_t, variable>, field<"label", std::int64_t>>;
struct jpeg_fields {
  using reader_concept = reader_tag;
  jpeg_records rec;
  std::vector<std::int64_t> labels;
  explicit jpeg_fields(int n) : rec(n) {
    for (int i = 0; i < n; ++i) labels.push_back(rec.label(static_cast<std::size_t>(i)));
  }
  std::size_t size() const { return rec.size(); }
  fields_sample<jpg_schema> fields(std::size_t i) const {
    fields_sample<jpg_schema> s{.id = i, .origin = path()};
    s.set<"jpg">(rec.record(i));
    s.set<"label">(std::span<const std::int64_t>(&labels[i], 1));
    return s;
  }
  std::string_view path() const { return "memory-fields"; }
};

template <class S, fixed_string N>
concept has_bytes_of = requires(const S& s) { s.template bytes_of<N>(); };
template <class S, fixed_string N>
concept has_geometry_of = requires(const S& s) { s.template geometry_of<N>(); };

// The cause nested in a stage_error, as text ("" when the stage_error has none or another kind).
template <class Fn>
std::string nested_usage_error(Fn&& run) {
  try {
    run();
  } catch (const stage_error& e) {
    try {
      std::rethrow_if_nested(e);
    } catch (const usage_error& u) {
      return u.what();
    } catch (...) {
      return "";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("jpeg layout: CHW output is the transpose of HWC output, bit for bit") {
  const int w = 64, h = 48;
  const auto enc = encode_jpeg(rgb_image(w, h), w, h, pixels::rgb, 92);
  struct setup {
    geometry_options g;
    jpeg_options o;
  };
  const std::vector<setup> cases{
      {{.width = w, .height = h, .mode = fit::stretch}, {}},    // plain decode (the row-copy path)
      {{.width = 32, .height = 32, .mode = fit::stretch}, {}},  // resize
      {{.width = 24, .height = 40}, {.dct_scaling = false}},    // crop, scale 1 (copy path)
      {{.width = 20, .height = 20}, {}},                        // resize + centre crop
      {{.width = 28, .height = 28, .crop = crop_at::random, .resize_scale = 1.3, .random_flip = true}, {}},
      {{.width = 96, .height = 72, .mode = fit::stretch, .random_flip = true}, {}},  // upscale + flip
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    CAPTURE(k);
    const jpeg hwc(with_layout(cases[k].g, image_layout::hwc), cases[k].o);
    const jpeg chw(with_layout(cases[k].g, image_layout::chw), cases[k].o);
    CHECK(hwc.output_bytes() == chw.output_bytes());
    for (std::uint64_t id = 0; id < 4; ++id) {
      const sample_context ctx{.seed = 7, .epoch = 1, .id = id};
      std::vector<std::byte> a(hwc.output_bytes()), b(chw.output_bytes());
      hwc.decode(enc, a, ctx);
      chw.decode(enc, b, ctx);
      CHECK(transpose_hwc(a, 3) == b);
    }
  }
  // Grey: one channel, the same bytes in either layout.
  std::vector<std::uint8_t> g(32 * 32);
  for (int i = 0; i < 32 * 32; ++i) g[i] = static_cast<std::uint8_t>((i % 32) * 8);
  const auto genc = encode_jpeg(g, 32, 32, pixels::grey, 95);
  const jpeg gh({.width = 20, .height = 20}, {.format = pixels::grey});
  const jpeg gc({.width = 20, .height = 20, .layout = image_layout::chw}, {.format = pixels::grey});
  std::vector<std::byte> a(gh.output_bytes()), b(gc.output_bytes());
  gh.decode(genc, a, {});
  gc.decode(genc, b, {});
  CHECK(a == b);
}

TEST_CASE("jpeg layout: the codec states its geometry, a layout of none is refused") {
  const jpeg hwc({.width = 32, .height = 24});
  const jpeg chw({.width = 32, .height = 24, .layout = image_layout::chw});
  const jpeg grey({.width = 32, .height = 24, .layout = image_layout::chw}, {.format = pixels::grey});
  auto shape = [](const field_geometry& g) { return std::vector<std::int64_t>(g.shape.begin(), g.shape.begin() + g.ndim); };
  CHECK(hwc.geometry().layout == image_layout::hwc);
  CHECK(shape(hwc.geometry()) == std::vector<std::int64_t>{24, 32, 3});
  CHECK(chw.geometry().layout == image_layout::chw);
  CHECK(shape(chw.geometry()) == std::vector<std::int64_t>{3, 24, 32});
  CHECK(shape(grey.geometry()) == std::vector<std::int64_t>{1, 24, 32});
  CHECK_THROWS_AS(jpeg({.layout = image_layout::none}), usage_error);
  // decoded_sample forwards it.
  const decoded_sample<jpeg> s{0, -1, &chw, {}, {}};
  CHECK(s.geometry().layout == image_layout::chw);
}

TEST_CASE("collate layout: normalisation per channel is right for the layout the codec wrote") {
  const int n = 10, W = 24, H = 20;
  const jpeg_records r(n);
  const geometry_options base{.width = W, .height = H};
  const jpeg hwc_codec(with_layout(base, image_layout::hwc));
  // Reference: each image decoded directly (HWC), normalised in the wanted layout.
  auto want = [&](image_layout out) {
    std::vector<float> all;
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::vector<std::byte> px(hwc_codec.output_bytes());
      hwc_codec.decode(r.record(i), px, {});
      auto y = reference(px, 3, out);
      all.insert(all.end(), y.begin(), y.end());
    }
    return all;
  };
  auto run = [&](image_layout codec_layout, image_layout claim) {
    auto loader = from(sample::sequential(r.size())) | read(r) | decode(jpeg(with_layout(base, codec_layout))) |
                  collate({.batch = 4, .output = dtype::f32, .mean = kMean, .std = kStd, .channels = 3, .layout = claim}) |
                  prefetch(2, {.workers = 2});
    std::vector<float> all;
    for (auto& b : loader.epoch(0)) {
      auto v = b.field("data").as<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto chw_ref = want(image_layout::chw), hwc_ref = want(image_layout::hwc);
  REQUIRE(chw_ref.size() == static_cast<std::size_t>(n * W * H * 3));
  // The claim agrees with the codec.
  CHECK(max_error(run(image_layout::chw, image_layout::chw), chw_ref) == 0.f);
  CHECK(max_error(run(image_layout::hwc, image_layout::hwc), hwc_ref) == 0.f);
  // No claim: the codec's layout is used.
  CHECK(max_error(run(image_layout::chw, image_layout::none), chw_ref) == 0.f);
  CHECK(max_error(run(image_layout::hwc, image_layout::none), hwc_ref) == 0.f);
  // The claim contradicts the codec: an error, never a result.
  const auto msg = nested_usage_error([&] { (void)run(image_layout::hwc, image_layout::chw); });
  CHECK(msg.find("collate's .layout says CHW but the producer wrote HWC") != std::string::npos);
  CHECK(nested_usage_error([&] { (void)run(image_layout::chw, image_layout::hwc); }).find(".layout says HWC") !=
        std::string::npos);
  CHECK_THROWS_AS((void)run(image_layout::hwc, image_layout::chw), stage_error);
  // .channels that contradict the codec (3 for a grey codec) are refused the same way.
  auto grey = [&] {
    auto loader = from(sample::sequential(r.size())) | read(r) |
                  decode(jpeg({.width = W, .height = H}, {.format = pixels::grey})) |
                  collate({.batch = 4, .output = dtype::f32, .mean = kMean, .std = kStd, .channels = 3}) |
                  prefetch(2, {.workers = 1});
    for (auto& b : loader.epoch(0)) (void)b;
  };
  CHECK(nested_usage_error(grey).find("1-channel") != std::string::npos);
}

TEST_CASE("decode<\"jpg\">: the field sample protocol of the decoded sample") {
  using D = decoded_field_sample<"jpg", fields_sample<jpg_schema>, jpeg>;
  using F = D::schema_type::field_t<"jpg">;
  static_assert(std::is_same_v<F::value_type, std::uint8_t> && F::kind == extent::fixed);
  static_assert(std::is_same_v<D::schema_type::field_t<"label">, field<"label", std::int64_t>>);
  static_assert(D::schema_type::index_of<"jpg"> == 0 && D::schema_type::size == 2);
  static_assert(!has_bytes_of<D, "jpg">, "the decoded field is deferred");
  static_assert(has_bytes_of<D, "label">);
  static_assert(has_geometry_of<D, "jpg">);
  static_assert(!has_geometry_of<D, "label">);
  static_assert(field_sample<D>);

  const jpeg_fields rd(3);
  const jpeg codec({.width = 16, .height = 12, .layout = image_layout::chw});
  const auto stage = decode<"jpg">(codec);
  CHECK(decltype(stage)::name == "decode<\"jpg\">");
  const D d = stage(rd.fields(2), {});
  CHECK(d.id == 2);
  CHECK(d.origin == "memory-fields");
  CHECK(d.size_of<"jpg">() == codec.output_bytes());
  CHECK(d.size_of<"label">() == sizeof(std::int64_t));
  CHECK(d.geometry_of<"jpg">().layout == image_layout::chw);
  CHECK(d.bytes_of<"label">().data() == rd.fields(2).bytes_of<"label">().data());  // forwarded, no copy
  std::vector<std::byte> got(codec.output_bytes()), direct(codec.output_bytes());
  d.write<"jpg">(got, {});
  codec.decode(rd.rec.record(2), direct, {});
  CHECK(got == direct);
  std::int64_t label = -1;
  d.write<"label">(std::as_writable_bytes(std::span(&label, 1)), {});
  CHECK(label == 2);

  // A corrupt field: format_error naming the file, the record and the field.
  auto bad = rd.fields(1);
  auto half = rd.rec.record(1);
  bad.set<"jpg">(half.first(half.size() / 2));
  const D dbad = stage(bad, {});
  try {
    try {
      dbad.write<"jpg">(got, {});
      FAIL("no error");
    } catch (const stage_error& se) {  // the decode stage's error, the codec's nested in it
      CHECK(std::string(se.what()).find("decode<\"jpg\">") != std::string::npos);
      std::rethrow_if_nested(se);
    }
    FAIL("no nested error");
  } catch (const format_error& e) {
    CHECK(e.file() == "memory-fields");
    CHECK(e.record() == 1);
    CHECK(std::string(e.what()).find("field 'jpg'") != std::string::npos);
  }
}

TEST_CASE("decode<\"jpg\"> + normalized<\"jpg\">: float {n, 3, H, W} equal to a reference, either codec layout") {
  const int n = 10, W = 20, H = 16;
  const jpeg_fields rd(n);
  const geometry_options base{.width = W, .height = H, .crop = crop_at::random, .resize_scale = 1.2, .random_flip = true};
  const jpeg hwc_codec(with_layout(base, image_layout::hwc));
  const std::uint64_t seed = 5, epoch = 2;
  auto run = [&](image_layout codec_layout, image_layout claim) {
    auto loader = from(sample::sequential(rd.size())) | read(rd) | decode<"jpg">(jpeg(with_layout(base, codec_layout))) |
                  collate(batch_options{.batch = 4},
                          normalized<"jpg">{.mean = kMean, .std = kStd, .layout = claim, .output = image_layout::chw},
                          stack<"label">{}) |
                  prefetch(2, {.workers = 2, .seed = seed});
    std::vector<float> all;
    std::vector<std::int64_t> labels;
    for (auto& b : loader.epoch(epoch)) {
      auto img = b.get<"jpg">();
      const std::vector<std::int64_t> shape(img.shape().begin(), img.shape().end());
      CHECK(shape == std::vector<std::int64_t>{static_cast<std::int64_t>(b.size()), 3, H, W});
      all.insert(all.end(), img.values().begin(), img.values().end());
      auto lab = b.get<"label">();
      labels.insert(labels.end(), lab.values().begin(), lab.values().end());
    }
    CHECK(labels.size() == static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < labels.size(); ++i) CHECK(labels[i] == static_cast<std::int64_t>(i % 3));
    return all;
  };
  std::vector<float> ref;
  for (std::size_t i = 0; i < rd.size(); ++i) {
    std::vector<std::byte> px(hwc_codec.output_bytes());
    hwc_codec.decode(rd.rec.record(i), px, {.seed = seed, .epoch = epoch, .id = i, .position = i});
    auto y = reference(px, 3, image_layout::chw);
    ref.insert(ref.end(), y.begin(), y.end());
  }
  CHECK(max_error(run(image_layout::hwc, image_layout::none), ref) == 0.f);  // transposed by normalize
  CHECK(max_error(run(image_layout::chw, image_layout::none), ref) == 0.f);  // written CHW by the codec
  CHECK(max_error(run(image_layout::chw, image_layout::chw), ref) == 0.f);
  // A .layout that contradicts the codec.
  const auto msg = nested_usage_error([&] { (void)run(image_layout::hwc, image_layout::chw); });
  CHECK(msg.find(".layout says CHW") != std::string::npos);

  // stack<"jpg"> takes the codec's shape: u8 {n, 3, H, W} straight from the codec.
  auto loader = from(sample::sequential(rd.size())) | read(rd) |
                decode<"jpg">(jpeg(with_layout(base, image_layout::chw))) |
                collate(batch_options{.batch = 4}, stack<"jpg">{}, stack<"label">{}) | prefetch(2, {.seed = seed});
  std::size_t i = 0;
  for (auto& b : loader.epoch(epoch)) {
    auto img = b.get<"jpg">();
    CHECK(img.shape()[1] == 3);
    CHECK(img.shape()[2] == H);
    const jpeg chw(with_layout(base, image_layout::chw));
    for (std::size_t k = 0; k < b.size(); ++k, ++i) {
      std::vector<std::byte> px(chw.output_bytes());
      chw.decode(rd.rec.record(i), px, {.seed = seed, .epoch = epoch, .id = i, .position = i});
      CHECK(std::memcmp(px.data(), img.data() + k * px.size(), px.size()) == 0);
    }
  }
  CHECK(i == static_cast<std::size_t>(n));
}
