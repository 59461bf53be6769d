// Builds WebDataset shards for the wds tests: sample g (global index) of a dataset has
//   <key>.jpg        a 16x16 JPEG of one grey level (random bytes when TurboJPEG is not built)
//   <key>.json       {"id": g}
//   <key>.cls        the ASCII integer 3g - 7
//   <key>.boxes.npy  float32 {g % 3, 4}: g + 0.25 k
//   <key>.extra      bytes no field names (ignored)
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sluice/io/npy.hpp"
#include "sluice/io/wds.hpp"
#include "test_util.hpp"
#ifdef SLUICE_TEST_HAVE_JPEG
#include "sluice/codec/jpeg.hpp"
#endif

namespace wds_test {

using schema4 = sluice::schema<sluice::field<"jpg", std::uint8_t, sluice::variable>,
                               sluice::field<"json", std::uint8_t, sluice::variable>,
                               sluice::field<"cls", std::int64_t>,
                               sluice::field<"boxes.npy", float, sluice::variable>>;

struct member {
  std::string name;
  std::vector<std::byte> data;
};

inline std::vector<std::byte> bytes_of(std::string_view s) {
  auto b = sluice_test::as_bytes(s);
  return {b.begin(), b.end()};
}

inline std::vector<std::byte> npy_f32(std::uint64_t rows, std::uint64_t cols, float first) {
  auto out = sluice::io::npy_header_bytes("<f4", {rows, cols});
  for (std::uint64_t k = 0; k < rows * cols; ++k) {
    const float v = first + 0.25f * static_cast<float>(k);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + 4);
  }
  return out;
}

inline std::vector<std::byte> image_of(std::uint64_t g) {
#ifdef SLUICE_TEST_HAVE_JPEG
  std::vector<std::uint8_t> px(16 * 16 * 3, static_cast<std::uint8_t>(g * 13 % 200 + 20));
  return sluice::codecs::encode_jpeg(px, 16, 16, sluice::codecs::pixels::rgb, 95);
#else
  return sluice_test::random_bytes(100 + g % 50, g);
#endif
}

inline std::string key_of(std::size_t shard, std::uint64_t g) { return "part" + std::to_string(shard) + "/" + std::to_string(100000 + g); }

inline std::vector<member> sample_members(std::size_t shard, std::uint64_t g) {
  const std::string k = key_of(shard, g);
  return {{k + ".jpg", image_of(g)},
          {k + ".json", bytes_of("{\"id\": " + std::to_string(g) + "}")},
          {k + ".cls", bytes_of(std::to_string(3 * static_cast<std::int64_t>(g) - 7) + "\n")},
          {k + ".boxes.npy", npy_f32(g % 3, 4, static_cast<float>(g))},
          {k + ".extra", bytes_of("ignored")}};
}

inline void write_tar(const std::string& path, const std::vector<member>& members) {
  std::vector<std::byte> img;
  for (const auto& m : members) sluice::io::append_tar_member(img, m.name, m.data);
  img.resize(img.size() + 1024);
  sluice_test::write_file(path, img);
}

// Shards <dir>/train-0000.tar ... with counts[s] samples each; returns their paths.
inline std::vector<std::string> write_shards(const sluice_test::temp_dir& dir, const std::vector<std::size_t>& counts,
                                             const std::string& stem = "train-") {
  std::vector<std::string> paths;
  std::uint64_t g = 0;
  for (std::size_t s = 0; s < counts.size(); ++s) {
    std::vector<member> ms;
    for (std::size_t j = 0; j < counts[s]; ++j, ++g)
      for (auto& m : sample_members(s, g)) ms.push_back(std::move(m));
    char name[32];
    std::snprintf(name, sizeof name, "%04zu.tar", s);
    paths.push_back(dir.file(stem + name));
    write_tar(paths.back(), ms);
  }
  return paths;
}

inline std::string text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace wds_test
