// codecs::image: JPEG and PNG records picked by their first bytes decode like the codec of their
// format would, in one dataset, through decode(codec) and decode<"f">(codec); anything else is a
// format_error that says what the bytes look like and names the record.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "png_writer.hpp"
#include "sluice/codec/image.hpp"
#include "sluice/stage/decode.hpp"

using namespace sluice;
using namespace sluice::codecs;

namespace {
std::vector<std::uint8_t> rgb_pixels(int w, int h) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>((i * 7) % 256);
  return p;
}
std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> b(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) b[i] = static_cast<std::byte>(s[i]);
  return b;
}
// Records alternate JPEG and PNG (even: JPEG), of varying sizes.
struct mixed_records {
  using reader_concept = reader_tag;
  std::vector<std::vector<std::byte>> enc;
  explicit mixed_records(int n) {
    for (int i = 0; i < n; ++i) {
      const int w = 30 + 3 * i, h = 20 + i;
      if (i % 2 == 0) enc.push_back(encode_jpeg(rgb_pixels(w, h), w, h, pixels::rgb, 90));
      else enc.push_back(sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB_ALPHA, 8, i % 4 == 1, w, h)));
    }
  }
  std::size_t size() const { return enc.size(); }
  std::span<const std::byte> record(std::size_t i) const { return enc[i]; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(i % 2); }
  std::string_view path() const { return "memory-mixed"; }
};
using img_schema = schema<field<"img", std::uint8_t, variable>, field<"label", std::int64_t>>;
struct mixed_fields {
  using reader_concept = reader_tag;
  mixed_records rec;
  std::vector<std::int64_t> labels;
  explicit mixed_fields(int n) : rec(n) {
    for (int i = 0; i < n; ++i) labels.push_back(i % 2);
  }
  std::size_t size() const { return rec.size(); }
  fields_sample<img_schema> fields(std::size_t i) const {
    fields_sample<img_schema> s{.id = i, .origin = path()};
    s.set<"img">(i == 5 && poison ? std::span<const std::byte>(gif) : rec.record(i));
    s.set<"label">(std::span<const std::int64_t>(&labels[i], 1));
    return s;
  }
  std::string_view path() const { return "memory-mixed-fields"; }
  bool poison = false;
  std::vector<std::byte> gif = bytes_of("GIF89a\x01\x00\x01\x00 rest of a gif");
};
std::string cause_of(std::span<const std::byte> in) {
  const image dec({.width = 4, .height = 4});
  std::vector<std::byte> out(dec.output_bytes());
  try {
    dec.decode(in, out, {});
  } catch (const format_error& e) {
    return e.cause();
  }
  return "";
}
}  // namespace

TEST_CASE("image: sniffing picks JPEG or PNG by the first bytes") {
  const mixed_records r(4);
  CHECK(sniff_image(r.record(0)) == image_format::jpeg);
  CHECK(sniff_image(r.record(1)) == image_format::png);
  CHECK(sniff_image({}) == image_format::unknown);
  CHECK(sniff_image(r.record(1).first(7)) == image_format::unknown);
  CHECK(sniff_image(r.record(0).first(2)) == image_format::unknown);
}

TEST_CASE("image: each record decodes exactly as its format's codec decodes it") {
  const mixed_records r(6);
  const geometry_options o{.width = 16, .height = 12, .crop = crop_at::random, .resize_scale = 1.2, .random_flip = true,
                        .layout = image_layout::chw};
  const image dec(o);
  const jpeg j({.width = 16, .height = 12, .crop = crop_at::random, .resize_scale = 1.2, .random_flip = true,
                .layout = image_layout::chw});
  const png p({.width = 16, .height = 12, .crop = crop_at::random, .resize_scale = 1.2, .random_flip = true,
               .layout = image_layout::chw});
  CHECK(dec.output_bytes() == j.output_bytes());
  CHECK(dec.geometry().shape == j.geometry().shape);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const sample_context ctx{.seed = 2, .epoch = 3, .id = i};
    std::vector<std::byte> got(dec.output_bytes()), want(dec.output_bytes());
    dec.decode(r.record(i), got, ctx);
    if (i % 2 == 0) j.decode(r.record(i), want, ctx);
    else p.decode(r.record(i), want, ctx);
    CHECK(got == want);
  }
}

TEST_CASE("image: neither JPEG nor PNG says what the bytes look like") {
  CHECK(cause_of({}).find("empty") != std::string::npos);
  CHECK(cause_of(bytes_of("GIF89a\x01\x00\x01\x00")).find("GIF") != std::string::npos);
  CHECK(cause_of(bytes_of(std::string_view("RIFF\x10\x00\x00\x00WEBPVP8 ", 16))).find("WebP") != std::string::npos);
  CHECK(cause_of(bytes_of("BM6\x00\x00\x00")).find("BMP") != std::string::npos);
  CHECK(cause_of(bytes_of(std::string_view("II*\x00\x08\x00\x00\x00", 8))).find("TIFF") != std::string::npos);
  CHECK(cause_of(bytes_of(std::string_view("\x00\x00\x00\x1c" "ftypavif", 12))).find("AVIF") != std::string::npos);
  CHECK(cause_of(bytes_of(std::string_view("\x00\x00\x00\x18" "ftypheic", 12))).find("HEIF") != std::string::npos);
  CHECK(cause_of(bytes_of("\x1f\x8b\x08\x00")).find("gzip") != std::string::npos);
  CHECK(cause_of(bytes_of("<!DOCTYPE html><html>")).find("HTML") != std::string::npos);
  CHECK(cause_of(bytes_of("{\"boxes\": []}")).find("JSON") != std::string::npos);
  CHECK(cause_of(bytes_of("\xff\xd8")).find("truncated JPEG") != std::string::npos);
  CHECK(cause_of(bytes_of("\x89PNG\r\n\x1a\x00....")).find("damaged PNG") != std::string::npos);
  CHECK(cause_of(bytes_of("\x01\x02\x03\xfe")).find("01 02 03 fe") != std::string::npos);
  // A JPEG or PNG signature on damaged data reaches that codec, whose error says so.
  const mixed_records r(2);
  CHECK(cause_of(r.record(0).first(40)).find("JPEG") != std::string::npos);
  CHECK(cause_of(r.record(1).first(40)).find("PNG") != std::string::npos);
}

TEST_CASE("image: a dataset mixing JPEG and PNG through decode(codec), 1 and 2 workers") {
  const mixed_records r(15);
  const image codec({.width = 10, .height = 8, .crop = crop_at::random, .random_flip = true});
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::sequential(r.size())) | read(r) | decode(codec) | collate({.batch = 4}) |
                  prefetch(2, {.workers = workers, .seed = 9});
    std::vector<std::byte> all;
    for (auto& b : loader.epoch(0)) all.insert(all.end(), b.bytes().begin(), b.bytes().end());
    return all;
  };
  const auto one = run(1);
  REQUIRE(one.size() == r.size() * codec.output_bytes());
  CHECK(run(2) == one);
}

TEST_CASE("image: decode<\"img\">(image) on mixed fields, a GIF among them is named with its record") {
  mixed_fields rd(8);
  const image codec({.width = 8, .height = 8, .layout = image_layout::chw});
  auto run = [&] {
    auto loader = from(sample::sequential(rd.size())) | read(rd) | decode<"img">(codec) |
                  collate(batch_options{.batch = 4}, stack<"img">{}, stack<"label">{}) | prefetch(2, {.workers = 2});
    std::size_t n = 0;
    for (auto& b : loader.epoch(0)) {
      auto img = b.get<"img">();
      CHECK(img.shape()[1] == 3);
      n += b.size();
    }
    return n;
  };
  CHECK(run() == 8);
  rd.poison = true;
  std::string msg;
  try {
    (void)run();
  } catch (const sluice::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("memory-mixed-fields") != std::string::npos);
  CHECK(msg.find("record 5") != std::string::npos);
  CHECK(msg.find("field 'img'") != std::string::npos);
  CHECK(msg.find("GIF") != std::string::npos);
}
