// The demo's data: Fashion-MNIST through sluice::io::idx_reader, a deterministic split of its
// training set into a balanced validation set and a long-tailed training subset that does not
// overlap it, and a generated stand-in when the dataset is not installed.
#pragma once

#include <sluice/core/error.hpp>
#include <sluice/core/random.hpp>
#include <sluice/io/idx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace demo {

inline constexpr std::size_t classes = 10;
inline constexpr std::array<const char*, classes> class_names = {
    "T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot"};

struct dataset_files {
  std::string train_images, train_labels, test_images, test_labels;
  bool stand_in = false;
};

// Finds the four files in `dir` (gzip or plain, MNIST naming).
inline bool find_files(const std::string& dir, dataset_files& out) {
  auto pick = [&](const std::string& stem, std::string& into) {
    for (const char* ext : {".gz", ""}) {
      std::string p = dir + "/" + stem + ext;
      if (std::filesystem::exists(p)) { into = p; return true; }
    }
    return false;
  };
  return pick("train-images-idx3-ubyte", out.train_images) && pick("train-labels-idx1-ubyte", out.train_labels) &&
         pick("t10k-images-idx3-ubyte", out.test_images) && pick("t10k-labels-idx1-ubyte", out.test_labels);
}

namespace detail {
inline void write_idx(const std::string& path, const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const char magic[4] = {0, 0, 0x08, static_cast<char>(dims.size())};
  f.write(magic, 4);
  for (auto d : dims) {
    const char be[4] = {static_cast<char>(d >> 24), static_cast<char>(d >> 16), static_cast<char>(d >> 8), static_cast<char>(d)};
    f.write(be, 4);
  }
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!f) throw sluice::io_error(path, "cannot write", errno);
}
}  // namespace detail

// A stand-in with the same shapes (28 x 28, 10 classes, 60,000 + 10,000): each class is a fixed
// random blob pattern; each image is its class's pattern, shifted by up to 2 pixels, scaled and
// noised. Learnable, not trivially: a linear model gets most of it.
inline dataset_files make_stand_in(const std::string& dir, std::uint64_t seed) {
  std::filesystem::create_directories(dir);
  std::array<std::array<float, 784>, classes> proto{};
  for (std::size_t c = 0; c < classes; ++c) {
    sluice::counter_rng r(seed, 1000, c);
    for (int blob = 0; blob < 4; ++blob) {
      const double cy = 6 + r.uniform() * 16, cx = 6 + r.uniform() * 16, s = 2 + r.uniform() * 4;
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x)
          proto[c][static_cast<std::size_t>(y * 28 + x)] += static_cast<float>(std::exp(-((y - cy) * (y - cy) + (x - cx) * (x - cx)) / (2 * s * s)));
    }
  }
  auto make = [&](std::uint32_t n, std::uint64_t stream, const std::string& img, const std::string& lbl) {
    std::vector<std::uint8_t> pixels(std::size_t{n} * 784), labels(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      sluice::counter_rng r(seed, stream, i);
      const auto c = static_cast<std::size_t>(i % classes);
      labels[i] = static_cast<std::uint8_t>(c);
      const int dy = static_cast<int>(r.below(5)) - 2, dx = static_cast<int>(r.below(5)) - 2;
      const double gain = 120 + r.uniform() * 100;
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          const int sy = y - dy, sx = x - dx;
          double v = (sy >= 0 && sy < 28 && sx >= 0 && sx < 28) ? proto[c][static_cast<std::size_t>(sy * 28 + sx)] * gain : 0;
          v += (r.uniform() - 0.5) * 120;
          pixels[std::size_t{i} * 784 + static_cast<std::size_t>(y * 28 + x)] = static_cast<std::uint8_t>(std::clamp(v, 0.0, 255.0));
        }
    }
    detail::write_idx(img, {n, 28, 28}, pixels);
    detail::write_idx(lbl, {n}, labels);
  };
  dataset_files f{dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte",
                  dir + "/t10k-images-idx3-ubyte", dir + "/t10k-labels-idx1-ubyte", true};
  make(60000, 1, f.train_images, f.train_labels);
  make(10000, 2, f.test_images, f.test_labels);
  return f;
}

// Images kept per class in the long-tailed set: round(n_max * imbalance^(-c / (K - 1))).
inline std::array<std::size_t, classes> long_tail_counts(std::size_t n_max, double imbalance) {
  std::array<std::size_t, classes> k{};
  for (std::size_t c = 0; c < classes; ++c)
    k[c] = static_cast<std::size_t>(std::llround(static_cast<double>(n_max) * std::pow(imbalance, -static_cast<double>(c) / (classes - 1))));
  return k;
}

// The demo's split of the training set, all from one seeded permutation of its images:
//   validation  the first `validation_per_class` images of each class in the permutation: a
//               balanced held-out set for model selection (the test set is not used for it);
//   train       the long-tailed subset, drawn from the images left after the validation set is
//               reserved: class c keeps the next round(n_max * imbalance^(-c / (K - 1))) images of
//               its class, where n_max is the smallest class's count once validation is removed.
// The validation images are reserved first because the long tail's head class would otherwise
// keep every image of its class (6,000 of 6,000 in Fashion-MNIST) and leave none to validate on.
struct split {
  std::vector<std::int64_t> train_labels;       // one per training image; -1 outside the long-tailed subset
  std::vector<std::uint64_t> validation_ids;    // training-image ids, in permutation order
  std::array<std::size_t, classes> train_per_class{}, validation_per_class{}, available{};
};

inline split make_split(const sluice::io::idx_reader& train, double imbalance, std::size_t validation_per_class,
                        std::uint64_t seed, bool full = false) {
  split s;
  for (std::size_t i = 0; i < train.size(); ++i) ++s.available[static_cast<std::size_t>(train.label(i))];
  std::size_t smallest = *std::min_element(s.available.begin(), s.available.end());
  if (smallest <= validation_per_class)
    throw sluice::usage_error("sluice-demo: a class has " + std::to_string(smallest) + " training images, not enough for " +
                              std::to_string(validation_per_class) + " validation images and a training set");
  std::array<std::size_t, classes> want{};
  if (full) {
    for (std::size_t c = 0; c < classes; ++c) want[c] = s.available[c] - validation_per_class;
  } else {
    want = long_tail_counts(smallest - validation_per_class, imbalance);
  }
  s.train_labels.assign(train.size(), -1);
  sluice::feistel_permutation perm(train.size(), sluice::mix_keys(seed, 0x10e9));
  for (std::size_t p = 0; p < train.size(); ++p) {
    const auto i = static_cast<std::size_t>(perm(p));
    const auto c = static_cast<std::size_t>(train.label(i));
    if (s.validation_per_class[c] < validation_per_class) {
      s.validation_ids.push_back(i);
      ++s.validation_per_class[c];
    } else if (s.train_per_class[c] < want[c]) {
      s.train_labels[i] = static_cast<std::int64_t>(c);
      ++s.train_per_class[c];
    }
  }
  return s;
}

}  // namespace demo
