// detection — a detection pipeline end to end: WebDataset shards of JPEGs + boxes + classes,
// random_resized_crop + flip, boxes that follow the image, multi-field batches; and a check that
// every box the trainer receives still lands on its object.
//
//   ./detection [--samples N] [--shards S] [--workers W] [--size 224] [--dir DIR] [--keep]
//
// The program writes its own dataset first: S tar shards train-0000.tar ... under DIR (default: a
// fresh folder under /tmp, removed at the end unless --keep), sample k holding
//   <key>.jpg          a 320..480 × 240..360 picture, grey, with 1 to 4 objects: filled rectangles,
//                      object class c drawn in colour c (red, green, blue, yellow), not overlapping;
//   <key>.boxes.npy    float32 {n, 4}: x0 y0 x1 y1 of each object, in pixels;
//   <key>.classes.npy  int64 {n}: each object's class.
// Then it reads them back as the trainer would: wds_dataset over "train-{0000..S-1}.tar", shuffled,
// decode<"jpg"> with random_resized_crop to size × size and a random flip, the boxes and classes
// following the image (a box whose visible part is under 4 px is dropped with its class), and
// collate: images stacked (u8, HWC), boxes and classes ragged (values + offsets).
//
// The check: each kept box is clipped to the image, and the pixels at 25 % and 75 % of its width
// and height (its inside, away from JPEG-blurred edges) show its class's colour (boxes under 8 px
// a side, clipped slivers, are counted but not checked). It reports the
// boxes read, kept, dropped, checked and wrong, then runs the epoch again with 1 worker and checks
// the batches are the same bytes (images, boxes and classes). Exit status 0 only if nothing is
// wrong.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/jpeg.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/wds.hpp"
#include "sluice/stage/decode.hpp"

namespace fs = std::filesystem;

namespace {

using det = sluice::schema<sluice::field<"jpg", std::uint8_t, sluice::variable>,
                           sluice::field<"boxes.npy", float, sluice::variable>,
                           sluice::field<"classes.npy", std::int64_t, sluice::variable>>;

constexpr std::uint8_t palette[4][3] = {{220, 30, 30}, {30, 200, 40}, {40, 60, 220}, {230, 210, 30}};

template <class T>
void append(std::vector<std::byte>& out, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

// Sample k's members: the picture, its boxes and classes.
void add_sample(std::vector<std::byte>& tar, std::uint64_t k) {
  sluice::counter_rng rng(2024, 0, k);
  const int w = 320 + static_cast<int>(rng.below(161)), h = 240 + static_cast<int>(rng.below(121));
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3, 118);
  const int n = 1 + static_cast<int>(rng.below(4));
  std::vector<float> boxes;
  std::vector<std::int64_t> classes;
  const int band = w / n;  // object j lives in band j: no overlaps
  for (int j = 0; j < n; ++j) {
    const int bw = 24 + static_cast<int>(rng.below(static_cast<std::uint64_t>(band - 30)));
    const int bh = 24 + static_cast<int>(rng.below(static_cast<std::uint64_t>(h - 30)));
    const int x0 = j * band + static_cast<int>(rng.below(static_cast<std::uint64_t>(band - bw + 1)));
    const int y0 = static_cast<int>(rng.below(static_cast<std::uint64_t>(h - bh + 1)));
    const auto c = static_cast<std::int64_t>(rng.below(4));
    for (int y = y0; y < y0 + bh; ++y)
      for (int x = x0; x < x0 + bw; ++x) std::memcpy(&px[(static_cast<std::size_t>(y) * w + x) * 3], palette[c], 3);
    boxes.insert(boxes.end(), {float(x0), float(y0), float(x0 + bw), float(y0 + bh)});
    classes.push_back(c);
  }
  const std::string key = "scene/" + std::to_string(1000000 + k);
  sluice::io::append_tar_member(tar, key + ".jpg", sluice::codecs::encode_jpeg(px, w, h, sluice::codecs::pixels::rgb, 92));
  auto b = sluice::io::npy_header_bytes("<f4", {static_cast<std::uint64_t>(n), 4});
  append(b, boxes);
  sluice::io::append_tar_member(tar, key + ".boxes.npy", b);
  auto c = sluice::io::npy_header_bytes("<i8", {static_cast<std::uint64_t>(n)});
  append(c, classes);
  sluice::io::append_tar_member(tar, key + ".classes.npy", c);
}

std::string shard_name(std::size_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "train-%04zu.tar", s);
  return buf;
}

// The class whose colour is nearest to the pixel, or -1 when none is near (background, an edge).
int class_at(const std::uint8_t* p) {
  for (int c = 0; c < 4; ++c) {
    int d = 0;
    for (int k = 0; k < 3; ++k) d += std::abs(int(p[k]) - int(palette[c][k]));
    if (d < 90) return c;
  }
  return -1;
}

// The dataset, with the count of boxes each sample holds before the crop (for the report).
struct dataset {
  sluice::io::wds_dataset<det> wds;
  std::vector<std::uint32_t> n_boxes;
  explicit dataset(const std::string& pattern) : wds(pattern) {
    n_boxes.resize(wds.size());
    for (std::size_t i = 0; i < wds.size(); ++i) n_boxes[i] = static_cast<std::uint32_t>(wds.fields(i).size_of<"classes.npy">() / 8);
  }
  using reader_concept = sluice::reader_tag;
  [[nodiscard]] std::size_t size() const { return wds.size(); }
  [[nodiscard]] std::string_view path() const { return wds.path(); }
  [[nodiscard]] auto fields(std::size_t i) const { return wds.fields(i); }
  [[nodiscard]] std::size_t boxes_in(std::uint64_t i) const { return n_boxes[i]; }
};

struct tally {
  std::size_t samples = 0, boxes_in = 0, kept = 0, checked = 0, small = 0, wrong = 0, outside = 0;
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a of every batch's fields, in order
  void mix(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) hash = (hash ^ b[i]) * 1099511628211ULL;
  }
};

tally run_epoch(const dataset& data, std::size_t workers, int size, std::uint64_t epoch) {
  auto loader = sluice::from(sluice::sample::shuffle(data.size(), {.seed = 7}))
              | sluice::read(data)
              | sluice::decode<"jpg">(sluice::codecs::jpeg{{.width = size, .height = size,
                                                            .mode = sluice::codecs::fit::random_resized_crop,
                                                            .random_flip = true}},
                                      sluice::boxes<"boxes.npy", "classes.npy">{.min_size = 4})
              | sluice::collate({.batch = 32}, sluice::stack<"jpg">{}, sluice::ragged<"boxes.npy">{.row = {4}},
                                sluice::ragged<"classes.npy">{})
              | sluice::prefetch(2, {.workers = workers});
  tally t;
  const std::size_t image_bytes = static_cast<std::size_t>(size) * size * 3;
  for (auto& b : loader.epoch(epoch)) {
    auto img = b.get<"jpg">();               // u8 {n, size, size, 3}
    auto boxes = b.get<"boxes.npy">();       // f32 {kept, 4}
    auto offsets = b.get<"boxes.npy.offsets">();
    auto classes = b.get<"classes.npy">();   // i64 {kept}
    t.mix(img.data(), static_cast<std::size_t>(img.numel()));
    t.mix(boxes.data(), static_cast<std::size_t>(boxes.numel()) * sizeof(float));
    t.mix(classes.data(), static_cast<std::size_t>(classes.numel()) * sizeof(std::int64_t));
    t.samples += b.size();
    t.kept += static_cast<std::size_t>(classes.numel());
    for (std::size_t i = 0; i < b.size(); ++i) {
      t.boxes_in += data.boxes_in(b.ids()[i]);
      const std::uint8_t* im = img.data() + i * image_bytes;
      for (auto k = offsets[i]; k < offsets[i + 1]; ++k) {
        const float* r = boxes.data() + k * 4;
        const auto cls = classes[static_cast<std::size_t>(k)];
        if (!(r[0] >= 0 && r[1] >= 0 && r[2] <= size && r[3] <= size && r[0] < r[2] && r[1] < r[3])) {
          ++t.outside;
          continue;
        }
        if (r[2] - r[0] < 8 || r[3] - r[1] < 8) {  // too thin for a pixel clear of the blurred edge
          ++t.small;
          continue;
        }
        ++t.checked;
        bool ok = true;
        for (double fx : {0.25, 0.75})
          for (double fy : {0.25, 0.75}) {
            const int x = static_cast<int>(r[0] + fx * (r[2] - r[0])), y = static_cast<int>(r[1] + fy * (r[3] - r[1]));
            ok = ok && class_at(im + (static_cast<std::size_t>(y) * size + x) * 3) == cls;
          }
        t.wrong += !ok;
      }
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t samples = 2000, shards = 4, workers = 2;
  int size = 224;
  std::string dir;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--samples") samples = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--shards") shards = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--workers") workers = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--size") size = std::atoi(value().c_str());
    else if (a == "--dir") dir = value();
    else if (a == "--keep") keep = true;
    else {
      std::fprintf(stderr, "usage: detection [--samples N] [--shards S] [--workers W] [--size 224] [--dir DIR] [--keep]\n");
      return 2;
    }
  }
  if (samples == 0 || shards == 0 || shards > samples || workers == 0 || size < 16) {
    std::fprintf(stderr, "detection: need samples >= shards >= 1, workers >= 1, size >= 16\n");
    return 2;
  }
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/sluice-detection-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = tmpl;
  }
  fs::create_directories(dir);
  int status = 1;
  try {
    for (std::size_t s = 0, k = 0; s < shards; ++s) {
      std::vector<std::byte> tar;
      for (const std::size_t end = samples * (s + 1) / shards; k < end; ++k) add_sample(tar, k);
      tar.resize(tar.size() + 1024);  // the two zero blocks that end a tar
      std::ofstream(fs::path(dir) / shard_name(s), std::ios::binary)
          .write(reinterpret_cast<const char*>(tar.data()), static_cast<std::streamsize>(tar.size()));
    }
    char last[24];
    std::snprintf(last, sizeof last, "%04zu", shards - 1);
    const std::string pattern = (fs::path(dir) / ("train-{0000.." + std::string(last) + "}.tar")).string();
    const dataset data(pattern);
    std::printf("dataset: %zu samples in %zu shards (%s)\n", data.size(), shards, pattern.c_str());

    const auto t = run_epoch(data, workers, size, 0);
    std::printf("epoch 0, %zu workers: %zu samples, %zu boxes in the shards, %zu kept after random_resized_crop + flip, "
                "%zu dropped (left the crop)\n",
                workers, t.samples, t.boxes_in, t.kept, t.boxes_in - t.kept);
    std::printf("checked %zu boxes (%zu under 8 px not checked): %zu land on an object of another class or on none, "
                "%zu outside the image\n",
                t.checked, t.small, t.wrong, t.outside);
    const auto one = run_epoch(data, 1, size, 0);
    const bool same = one.hash == t.hash && one.kept == t.kept;
    std::printf("same batches with 1 worker and with %zu: %s\n", workers, same ? "yes" : "NO");
    status = t.samples == samples && t.checked > 0 && t.checked + t.small == t.kept && t.wrong == 0 && t.outside == 0 && same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detection: %s\n", e.what());
  }
  if (own_dir && !keep) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return status;
}
