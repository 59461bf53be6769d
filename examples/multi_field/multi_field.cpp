// multi_field — a detection-style batch: image + a variable number of boxes + a class per box,
// collated per field and handed to the trainer as named tensors (and, where DLPack's header is
// installed, as DLPack tensors that keep the batch's slot alive).
//
//   ./multi_field [--samples N] [--batch B] [--workers W]
//
// The dataset is synthetic and kept in memory (a reader of samples with fields: fields(i) hands
// out views, nothing is copied before collate): image i is 3x32x32 u8 in HWC order with its
// boxes drawn as filled rectangles, so the program can check what it receives. The pipeline
// normalises the image per channel into CHW floats, keeps the boxes ragged (values + offsets)
// and pads the classes to the batch's longest list with -1 and a mask.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/sluice.hpp>

namespace {

constexpr int side = 32;
using detection = sluice::schema<sluice::field<"image", std::uint8_t>,                 // {32, 32, 3} HWC
                                 sluice::field<"boxes", float, sluice::variable>,      // {n, 4}: x0 y0 x1 y1
                                 sluice::field<"classes", std::int64_t, sluice::variable>>;  // {n}

class synthetic_detection {
 public:
  using reader_concept = sluice::reader_tag;
  explicit synthetic_detection(std::size_t n) : images_(n), boxes_(n), classes_(n) {
    for (std::size_t i = 0; i < n; ++i) {
      auto rng = sluice::counter_rng(11, 0, i);
      images_[i].assign(side * side * 3, 0);
      const std::size_t count = rng.below(5);  // 0..4 objects
      for (std::size_t b = 0; b < count; ++b) {
        const int x0 = static_cast<int>(rng.below((side - 8))), y0 = static_cast<int>(rng.below((side - 8)));
        const int w = 4 + static_cast<int>(rng.below(4)), h = 4 + static_cast<int>(rng.below(4));
        const auto cls = static_cast<std::int64_t>(rng.below(3));
        for (int y = y0; y < y0 + h; ++y)
          for (int x = x0; x < x0 + w; ++x) images_[i][(y * side + x) * 3 + cls] = 255;  // class = colour channel
        boxes_[i].insert(boxes_[i].end(), {float(x0), float(y0), float(x0 + w), float(y0 + h)});
        classes_[i].push_back(cls);
      }
    }
  }
  [[nodiscard]] std::size_t size() const { return images_.size(); }
  [[nodiscard]] std::string_view path() const { return "synthetic-detection"; }
  [[nodiscard]] sluice::fields_sample<detection> fields(std::size_t i) const {
    sluice::fields_sample<detection> s{.id = i, .origin = path()};
    s.set<"image">(images_[i]);
    s.set<"boxes">(boxes_[i]);
    s.set<"classes">(classes_[i]);
    return s;
  }

 private:
  std::vector<std::vector<std::uint8_t>> images_;
  std::vector<std::vector<float>> boxes_;
  std::vector<std::vector<std::int64_t>> classes_;
};

std::string shape_of(std::span<const std::int64_t> s) {
  std::string t = "{";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "}";
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t samples = 1000, batch = 64, workers = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    const std::size_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--samples") samples = v;
    else if (a == "--batch") batch = v;
    else if (a == "--workers") workers = v;
    else {
      std::fprintf(stderr, "usage: multi_field [--samples N] [--batch B] [--workers W]\n");
      return 2;
    }
  }
  synthetic_detection data(samples);
  auto loader = sluice::from(sluice::sample::shuffle(data.size(), {.seed = 7}))
              | sluice::read(data)
              | sluice::collate({.batch = batch},
                                sluice::normalized<"image">{.mean = {0.1f, 0.1f, 0.1f}, .std = {0.3f, 0.3f, 0.3f},
                                                            .layout = sluice::hwc, .shape = {side, side, 3},
                                                            .output = sluice::chw},
                                sluice::ragged<"boxes">{.row = {4}},
                                sluice::pad<"classes">{.value = -1, .mask = true})
              | sluice::prefetch(2, {.workers = workers});

  std::size_t seen = 0, objects = 0, wrong = 0, batches = 0;
  for (auto& b : loader.epoch(0)) {
    auto image = b.get<"image">();             // float {n, 3, 32, 32}
    auto boxes = b.get<"boxes">();             // float {objects, 4}
    auto offsets = b.get<"boxes.offsets">();   // int64 {n + 1}
    auto classes = b.get<"classes">();         // int64 {n, longest}, -1 padded
    if (batches++ == 0)
      std::printf("first batch: image %s f32, boxes %s f32, boxes.offsets %s i64, classes %s i64, classes.mask %s bool\n",
                  shape_of(image.shape()).c_str(), shape_of(boxes.shape()).c_str(), shape_of(offsets.shape()).c_str(),
                  shape_of(classes.shape()).c_str(), shape_of(b.field("classes.mask").shape()).c_str());
    const std::size_t longest = static_cast<std::size_t>(classes.shape()[1]);
    // Check what arrived: the centre pixel of each box is lit in its class's channel.
    for (std::size_t i = 0; i < b.size(); ++i) {
      for (auto k = offsets[i]; k < offsets[i + 1]; ++k) {
        const auto* bx = boxes.data() + k * 4;
        const auto cls = classes[i * longest + static_cast<std::size_t>(k - offsets[i])];
        const int cx = static_cast<int>((bx[0] + bx[2]) / 2), cy = static_cast<int>((bx[1] + bx[3]) / 2);
        const float v = image[((i * 3 + static_cast<std::size_t>(cls)) * side + cy) * side + cx];
        wrong += v < (1.0f - 0.1f) / 0.3f - 1e-3f;
        ++objects;
      }
    }
#if SLUICE_HAS_DLPACK()
    // The same tensors for a framework: torch.from_dlpack / at::fromDLPack take these without a
    // copy; the deleter is what returns the slot, so a tensor may outlive this loop iteration.
    DLManagedTensor* t = sluice::to_dlpack(b, "image");
    if (t->dl_tensor.ndim != 4 || t->dl_tensor.data != image.data()) ++wrong;
    t->deleter(t);
#endif
    seen += b.size();
  }
  std::printf("%zu samples, %zu objects in %zu batches; %zu objects whose box or class did not match the image\n",
              seen, objects, batches, wrong);
  return seen == samples && wrong == 0 ? 0 : 1;
}
