// Writes the small seed corpora in tests/data/fuzz/<target>/ (run once; the outputs are committed):
//   g++ -std=c++20 -Iinclude tests/fuzz/make_seeds.cpp -o /tmp/make_seeds -lturbojpeg -lpng16 && /tmp/make_seeds tests/data/fuzz
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../codec/png_writer.hpp"
#include "sluice/codec/jpeg.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/io/tfrecord.hpp"
#include "sluice/io/wds_tar.hpp"

namespace {
void put(const std::filesystem::path& p, const std::vector<std::byte>& b) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
std::span<const std::byte> text(std::string_view s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }
}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = argc > 1 ? argv[1] : "tests/data/fuzz";
  using namespace sluice;
  {  // tfrecord: two records, and an empty record
    std::vector<std::byte> t;
    io::append_tfrecord(t, text("hello"));
    io::append_tfrecord(t, text(""));
    io::append_tfrecord(t, text("a longer third record payload"));
    put(dir / "tfrecord" / "three.tfrecord", t);
  }
  {  // tf_example: one Example payload per seed (the fuzz target parses the payload, not the framing)
    const char* blob[] = {"\x89PNG", "xy"};
    const std::span<const std::byte> two[] = {text(blob[0]), text(blob[1])};
    const float f[] = {0.5f, -1.f};
    const std::int64_t i[] = {7};
    const std::int64_t n[] = {-3, 300, 1ll << 40};
    const std::int64_t b[] = {1, 0};
    for (bool packed : {true, false}) {
      const auto ex = io::tf_example_builder({.packed = packed})
                          .bytes("a", two).floats("f", f).int64s("i", i).int64s("n", n).floats("d", f).int64s("b", b)
                          .bytes("other", text("not in the schema")).build();
      put(dir / "tf_example" / (packed ? "packed.pb" : "unpacked.pb"), ex);
    }
    put(dir / "tf_example" / "empty.pb", {});
  }
  {  // shard: one with fields (the fuzz target's schema a, f, i plus an extra field), one plain
    std::filesystem::create_directories(dir / "shard");
    {
      io::shard_writer w((dir / "shard" / "fields.sluice").string());
      w.set_schema({{"a", dtype::u8, extent::variable}, {"f", dtype::f32, extent::variable, {-1, 2}},
                    {"i", dtype::i64, extent::fixed, {2}}, {"x", dtype::u16, extent::fixed, {}}});
      w.set_class_names({"zero", "one"});
      const float f[] = {0.5f, -1.f, 2.f, 3.f};
      const std::int64_t i[] = {7, -8};
      const std::uint16_t x = 9;
      w.add_fields({text("abc"), std::as_bytes(std::span(f)), std::as_bytes(std::span(i)), std::as_bytes(std::span(&x, 1))}, 1);
      w.add_fields({text(""), std::as_bytes(std::span(f).first(2)), std::as_bytes(std::span(i)), std::as_bytes(std::span(&x, 1))}, 0);
      w.finish();
    }
    io::shard_writer w((dir / "shard" / "plain.sluice").string());
    w.add(text("record"), 3);
    w.finish();
  }
  {  // tar: two samples with jpg + cls, one long name
    std::vector<std::byte> t;
    io::append_tar_member(t, "a/0001.jpg", text("JPEGDATA"));
    io::append_tar_member(t, "a/0001.cls", text("3"));
    io::append_tar_member(t, std::string(110, 'n') + "/0002.jpg", text("J2"));
    io::append_tar_member(t, std::string(110, 'n') + "/0002.cls", text("1\n"));
    t.resize(t.size() + 1024);
    put(dir / "tar" / "two.tar", t);
  }
  {  // tar, grouped (io/wds.hpp): png + cls + npy members, one sample without cls, one with two jpg
    std::vector<std::byte> t;
    auto npy = io::npy_header_bytes("<f4", {1, 4});
    npy.resize(npy.size() + 16);
    io::append_tar_member(t, "g/0.png", text("PNGDATA"));
    io::append_tar_member(t, "g/0.cls", text("12"));
    io::append_tar_member(t, "g/0.npy", npy);
    io::append_tar_member(t, "g/1.jpg", text("J"));
    io::append_tar_member(t, "g/1.npy", npy);
    io::append_tar_member(t, "g/2.jpg", text("J"));
    io::append_tar_member(t, "g/2.jpg", text("J again"));
    io::append_tar_member(t, "g/2.cls", text("x"));
    t.resize(t.size() + 1024);
    put(dir / "tar" / "groups.tar", t);
  }
  {  // npy: 3x2 uint8 and a 2x2 float32
    auto a = io::npy_header_bytes("|u1", {3, 2});
    for (int i = 0; i < 6; ++i) a.push_back(std::byte(i));
    put(dir / "npy" / "u1.npy", a);
    auto b = io::npy_header_bytes("<f4", {2, 2});
    b.resize(b.size() + 16);
    put(dir / "npy" / "f4.npy", b);
  }
  {  // jpeg: a tiny RGB 4:2:0 and a grey image
    std::vector<std::uint8_t> px(16 * 12 * 3);
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 13);
    put(dir / "jpeg" / "rgb420.jpg", codecs::encode_jpeg(px, 16, 12, codecs::pixels::rgb, 75));
    put(dir / "jpeg" / "rgb444.jpg", codecs::encode_jpeg(px, 12, 16, codecs::pixels::rgb, 90, TJSAMP_444));
    put(dir / "jpeg" / "grey.jpg", codecs::encode_jpeg(std::span(px).first(64), 8, 8, codecs::pixels::grey, 60));
    // CMYK: TurboJPEG writes YCCK with the Adobe marker (the codec's CMYK conversion path).
    tjhandle c = tjInitCompress();
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    if (tjCompress2(c, px.data(), 8, 0, 8, TJPF_CMYK, &buf, &size, TJSAMP_420, 70, 0) == 0)
      put(dir / "jpeg" / "cmyk.jpg", std::vector<std::byte>(reinterpret_cast<std::byte*>(buf),
                                                          reinterpret_cast<std::byte*>(buf) + size));
    tjFree(buf);
    tjDestroy(c);
  }
  {  // png: small images of each colour type, some 16-bit, some interlaced, a palette with tRNS
    auto pal = sluice_test::make_png_spec(PNG_COLOR_TYPE_PALETTE, 4, false, 9, 5);
    pal.palette_alpha = {0, 100, 200};
    put(dir / "png" / "palette4_trns.png", sluice_test::write_png(pal));
    put(dir / "png" / "grey1.png", sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_GRAY, 1, false, 11, 3)));
    put(dir / "png" / "grey16_adam7.png", sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_GRAY, 16, true, 10, 9)));
    put(dir / "png" / "ga8.png", sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, 6, 6)));
    put(dir / "png" / "rgb16_adam7.png", sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB, 16, true, 12, 10)));
    put(dir / "png" / "rgba8.png", sluice_test::write_png(sluice_test::make_png_spec(PNG_COLOR_TYPE_RGB_ALPHA, 8, false, 8, 7)));
  }
}
