// Self-test for sluice-pack (run by ctest): builds a tiny ImageFolder tree of real JPEGs, a pair of
// WebDataset tar shards and a .npy with labels, packs each, and checks the shards record by record:
// bytes, labels (ImageFolder: sorted class order), the class names stored in the shard; then that
// a corrupt JPEG fails the pack with exit 1 and leaves no file under the output name, and that
// --help works and lists the exit codes. Signals, bad inputs and full disks:
// tests/faults/pack_test.cpp.
//
//   sluice_pack_selftest /path/to/sluice-pack
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/wds_tar.hpp"

namespace fs = std::filesystem;

namespace {
int failures = 0;
#define EXPECT(cond)                                                              \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "pack selftest: FAILED %s (line %d)\n", #cond, __LINE__); \
      ++failures;                                                                 \
    }                                                                             \
  } while (0)

void write(const fs::path& p, std::span<const std::byte> b) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
int run(const std::string& cmd) {
  int st = std::system((cmd + " 2>/dev/null").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
std::vector<std::byte> tiny_jpeg(int seed) {
  std::vector<std::uint8_t> px(12 * 10 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 3 + seed * 41);
  return sluice::codecs::encode_jpeg(px, 12, 10, sluice::codecs::pixels::rgb, 80);
}
bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: sluice_pack_selftest SLUICE_PACK\n"); return 2; }
  const std::string pack = argv[1];
  std::string tmpl = (fs::temp_directory_path() / "sluice-pack-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return 2;
  const fs::path dir = tmpl;

  EXPECT(run(pack + " --help >/dev/null") == 0);
  EXPECT(run(pack + " --help | grep -q '128+N'") == 0);  // the exit codes are documented
  EXPECT(run(pack + " imagefolder") == 2);

  // ImageFolder: classes "cat" < "dog" < "zebra" (index 0, 1, 2); created out of order on purpose.
  const std::vector<std::pair<std::string, int>> tree = {{"zebra", 2}, {"cat", 3}, {"dog", 4}};
  std::vector<std::pair<std::vector<std::byte>, std::int64_t>> expected;  // in sorted order
  int seed = 0;
  for (const char* cls : {"cat", "dog", "zebra"}) {
    int n = 0;
    for (auto& [c, k] : tree) if (c == cls) n = k;
    for (int i = n - 1; i >= 0; --i) write(dir / "tree" / cls / ("img" + std::to_string(i) + ".JPG"), tiny_jpeg(seed + i));
    for (int i = 0; i < n; ++i)
      expected.emplace_back(tiny_jpeg(seed + i), cls == std::string("cat") ? 0 : cls == std::string("dog") ? 1 : 2);
    seed += n;
  }
  write(dir / "tree" / "cat" / "notes.txt", std::vector<std::byte>(3));  // skipped
  const auto out = (dir / "tree.sluice").string();
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out) == 0);
  {
    sluice::io::shard_reader r(out);
    EXPECT(r.size() == expected.size());
    for (std::size_t i = 0; i < r.size() && i < expected.size(); ++i) {
      EXPECT(same(r.record(i), expected[i].first));
      EXPECT(r.label(i) == expected[i].second);
    }
    EXPECT(r.version() == 2);  // the class names make it a version-2 shard
    EXPECT((r.class_names() == std::vector<std::string>{"cat", "dog", "zebra"}));
  }
  EXPECT(!fs::exists(out + ".partial"));
  EXPECT(!fs::exists(out + ".classes"));  // the names are inside the shard, not beside it
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out + " --verify full") == 0);

  // An empty class folder would take index 1 and shift "dog" and "zebra": refused by name, as
  // torchvision's ImageFolder refuses it; --allow-empty-classes keeps it, with no samples.
  fs::create_directories(dir / "tree" / "cow");
  const auto out_empty = (dir / "empty.sluice").string();
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out_empty + " 2>&1 | grep -q \"" +
             (dir / "tree" / "cow").string() + "'.*has no JPEG\"") == 0);
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out_empty) == 1);
  EXPECT(!fs::exists(out_empty));
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out_empty + " --allow-empty-classes") == 0);
  {
    sluice::io::shard_reader r(out_empty);
    EXPECT(r.size() == expected.size());
    EXPECT((r.class_names() == std::vector<std::string>{"cat", "cow", "dog", "zebra"}));
    for (std::size_t i = 0; i < r.size() && i < expected.size(); ++i)
      EXPECT(r.label(i) == (expected[i].second == 0 ? 0 : expected[i].second + 1));
  }
  fs::remove(dir / "tree" / "cow");

  // A PNG among the JPEGs (torchvision's ImageFolder would read it): refused by name, never left
  // out with only a count; --skip-non-jpeg packs the JPEGs alone. A macOS ._ file is no image.
  write(dir / "tree" / "dog" / "extra.PNG", std::vector<std::byte>(8));
  write(dir / "tree" / "dog" / "._img0.png", std::vector<std::byte>(8));
  const auto out_png = (dir / "png.sluice").string();
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out_png + " -q 2>&1 | grep -q \"" +
             (dir / "tree" / "dog" / "extra.PNG").string() + "'.*imagefolder packs JPEG files only.*--skip-non-jpeg\"") == 0);
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out_png) == 1);
  EXPECT(!fs::exists(out_png));
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out_png + " --skip-non-jpeg 2>&1 | grep "  // all read: no SIGPIPE
             "\"1 of them images\" > /dev/null") == 0);
  {
    sluice::io::shard_reader r(out_png);
    EXPECT(r.size() == expected.size());
  }
  fs::remove(dir / "tree" / "dog" / "extra.PNG");
  fs::remove(dir / "tree" / "dog" / "._img0.png");

  // A corrupt JPEG: the pack fails, and neither the output nor the partial file remains.
  auto bad = tiny_jpeg(99);
  bad[0] = std::byte{0};
  write(dir / "tree" / "dog" / "bad.jpg", bad);
  const auto out2 = (dir / "bad.sluice").string();
  EXPECT(run(pack + " imagefolder " + (dir / "tree").string() + " -o " + out2) == 1);
  EXPECT(!fs::exists(out2));
  EXPECT(!fs::exists(out2 + ".partial"));

  // WebDataset: two shards, jpg + cls.
  std::vector<std::vector<std::byte>> recs;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::byte> t;
    for (int i = 0; i < 3; ++i) {
      recs.push_back(tiny_jpeg(100 + s * 3 + i));
      const std::string key = "s" + std::to_string(s) + "/k" + std::to_string(i);
      sluice::io::append_tar_member(t, key + ".jpg", recs.back());
      const std::string cls = std::to_string(s * 3 + i);
      sluice::io::append_tar_member(t, key + ".cls", std::span(reinterpret_cast<const std::byte*>(cls.data()), cls.size()));
    }
    t.resize(t.size() + 1024);
    write(dir / ("shard-" + std::to_string(s) + ".tar"), t);
  }
  const auto out3 = (dir / "wds.sluice").string();
  EXPECT(run(pack + " wds " + (dir / "shard-0.tar").string() + " " + (dir / "shard-1.tar").string() + " -o " + out3) == 0);
  {
    sluice::io::shard_reader r(out3);
    EXPECT(r.size() == 6);
    for (std::size_t i = 0; i < r.size() && i < recs.size(); ++i) {
      EXPECT(same(r.record(i), recs[i]));
      EXPECT(r.label(i) == static_cast<std::int64_t>(i));
    }
  }

  // .npy with labels.
  auto x = sluice::io::npy_header_bytes("|u1", {5, 4});
  for (int i = 0; i < 20; ++i) x.push_back(static_cast<std::byte>(i));
  write(dir / "x.npy", x);
  auto y = sluice::io::npy_header_bytes("<i8", {5});
  for (std::int64_t i = 0; i < 5; ++i) {
    std::int64_t v = 10 - i;
    auto p = reinterpret_cast<const std::byte*>(&v);
    y.insert(y.end(), p, p + 8);
  }
  write(dir / "y.npy", y);
  const auto out4 = (dir / "npy.sluice").string();
  EXPECT(run(pack + " npy " + (dir / "x.npy").string() + " --labels " + (dir / "y.npy").string() + " -o " + out4) == 0);
  {
    sluice::io::shard_reader r(out4);
    EXPECT(r.size() == 5);
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT(r.record(i).size() == 4);
      EXPECT(std::to_integer<int>(r.record(i)[3]) == static_cast<int>(i * 4 + 3));
      EXPECT(r.label(i) == static_cast<std::int64_t>(10 - i));
    }
  }

  std::error_code ec;
  fs::remove_all(dir, ec);
  if (failures) std::fprintf(stderr, "pack selftest: %d failure(s)\n", failures);
  else std::fprintf(stderr, "pack selftest: all checks passed\n");
  return failures ? 1 : 0;
}
