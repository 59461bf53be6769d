// A tiny video model trained on clips: which way does the square move?
//
// The example encodes its own videos with the ffmpeg tool (H.264 MP4, 64x64, 48 frames at 25 fps):
// a bright square on a noisy background moving left (label 0) or right (label 1) from a random
// place at a random speed. Every clip of 8 frames at stride 2 goes through sluice — read, decode
// with one random crop a clip (no flip: a mirrored clip moves the other way) to 32x32 RGB,
// normalise, collate — and a logistic regression on the frame-to-frame changes of the clip's
// column profile (how bright each column is) learns the direction: no single frame says which way
// the square moves, the changes between frames do.
//
//   video [--videos N] [--epochs E] [--dir D]
// prints each epoch's train loss and held-out accuracy (videos the model never saw), and the
// loader's stall. Exit 1 when the held-out accuracy ends below 0.9.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/video.hpp"
#include "sluice/io/video_clips.hpp"
#include "sluice/stage/decode.hpp"

namespace {

constexpr int size = 64, frames = 48, out = 32, T = 8;

// Video v: the square's start, speed and direction from v alone.
int encode(const std::string& path, int v) {
  std::mt19937 rng(static_cast<unsigned>(v) * 7919u + 1u);
  const int dir = v % 2 == 0 ? -1 : 1;
  const double speed = 0.5 + std::uniform_real_distribution<double>(0, 0.5)(rng);
  const double x0 = dir > 0 ? 4 + rng() % 8 : size - 16 - rng() % 8;
  const int y0 = 16 + static_cast<int>(rng() % 24), side = 12;
  const std::string raw = path + ".rgb";
  std::FILE* f = std::fopen(raw.c_str(), "wb");
  if (f == nullptr) return 1;
  std::vector<unsigned char> px(static_cast<std::size_t>(size) * size * 3);
  for (int t = 0; t < frames; ++t) {
    const int x = static_cast<int>(x0 + dir * speed * t);
    for (int y = 0; y < size; ++y)
      for (int c = 0; c < size; ++c) {
        const bool in = c >= x && c < x + side && y >= y0 && y < y0 + side;
        const auto value = static_cast<unsigned char>(in ? 230 : 40 + rng() % 30);
        for (int k = 0; k < 3; ++k) px[(static_cast<std::size_t>(y) * size + c) * 3 + k] = value;
      }
    std::fwrite(px.data(), 1, px.size(), f);
  }
  std::fclose(f);
  const std::string cmd = "ffmpeg -y -hide_banner -loglevel error -f rawvideo -pix_fmt rgb24 -s 64x64 -r 25 -i " + raw +
                          " -c:v libx264 -crf 18 -g 16 -bf 2 -pix_fmt yuv420p " + path;
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove(raw);
  return rc;
}

// Features of one clip (T x out x out x 3 floats): for each pair of neighbouring frames, the
// change of each column's mean brightness.
void features(const float* clip, std::vector<float>& f) {
  f.assign(static_cast<std::size_t>(T - 1) * out, 0.0f);
  std::vector<float> prev(out), cur(out);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < out; ++c) {
      float s = 0;
      for (int y = 0; y < out; ++y) s += clip[((static_cast<std::size_t>(t) * out + y) * out + c) * 3];
      cur[static_cast<std::size_t>(c)] = s / out;
    }
    if (t > 0)
      for (int c = 0; c < out; ++c)
        f[static_cast<std::size_t>(t - 1) * out + c] = cur[static_cast<std::size_t>(c)] - prev[static_cast<std::size_t>(c)];
    prev.swap(cur);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n_videos = 48, epochs = 6;
  std::string dir = (std::filesystem::temp_directory_path() / "sluice-video-example").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--videos") n_videos = std::atoi(argv[i + 1]);
    else if (a == "--epochs") epochs = std::atoi(argv[i + 1]);
    else if (a == "--dir") dir = argv[i + 1];
  }
  if (std::system("ffmpeg -hide_banner -version > /dev/null 2>&1") != 0) {
    std::fprintf(stderr, "video: needs the ffmpeg tool to encode its videos (Debian: ffmpeg)\n");
    return 77;
  }
  std::filesystem::create_directories(dir);
  std::vector<sluice::io::video_file> train, test;
  for (int v = 0; v < n_videos; ++v) {
    const std::string path = dir + "/v" + std::to_string(v) + ".mp4";
    if (!std::filesystem::exists(path) && encode(path, v) != 0) {
      std::fprintf(stderr, "video: ffmpeg could not encode %s\n", path.c_str());
      return 1;
    }
    (v % 6 >= 4 ? test : train).push_back({path, v % 2});  // a third held out, both directions
  }

  // The pipeline: every clip of 8 frames at stride 2 (a clip every 4 frames), one random crop a
  // clip (no flip: it would reverse the motion), normalised.
  const sluice::codecs::clip_options clip{.frames = T, .stride = 2};
  const sluice::codecs::geometry_options crop{.width = out, .height = out, .mode = sluice::codecs::fit::crop,
                                              .crop = sluice::codecs::crop_at::random, .resize_scale = 1.15};
  sluice::io::video_files train_files(train), test_files(test);
  auto train_clips = sluice::io::clips<"video">(train_files, clip, sluice::io::every_clip{.step = 4});
  auto test_clips = sluice::io::clips<"video">(test_files, clip, sluice::io::every_clip{.step = 4});
  auto make = [&](auto& clips, std::uint64_t seed) {
    return sluice::from(sluice::sample::shuffle{clips.size(), {.seed = seed}}) | sluice::read(clips)
         | sluice::decode<"video">(clips.codec(crop))
         | sluice::collate({.batch = 16}, sluice::normalized<"video">{.mean = {0.5f}, .std = {0.25f}},
                           sluice::stack<"label">{})
         | sluice::prefetch(2, {.workers = 2, .seed = seed});
  };
  auto train_loader = make(train_clips, 1);
  auto test_loader = make(test_clips, 2);
  std::printf("video: %zu train clips from %zu videos, %zu held-out clips from %zu videos\n", train_clips.size(),
              train.size(), test_clips.size(), test.size());

  // Logistic regression on the column-profile changes.
  const std::size_t n_feat = static_cast<std::size_t>(T - 1) * out;
  std::vector<float> w(n_feat, 0.0f), f;
  float bias = 0.0f;
  const float lr = 0.5f;
  const std::size_t clip_floats = static_cast<std::size_t>(T) * out * out * 3;
  double accuracy = 0;
  for (int e = 0; e < epochs; ++e) {
    double loss = 0;
    std::size_t seen = 0;
    for (auto& b : train_loader.epoch(static_cast<std::uint64_t>(e))) {
      const auto x = b.get<"video">();
      const auto y = b.get<"label">();
      for (std::size_t i = 0; i < b.size(); ++i) {
        features(x.data() + i * clip_floats, f);
        double z = bias;
        for (std::size_t k = 0; k < n_feat; ++k) z += w[k] * f[k];
        const double p = 1.0 / (1.0 + std::exp(-z));
        const double g = p - static_cast<double>(y[i]);
        for (std::size_t k = 0; k < n_feat; ++k) w[k] -= static_cast<float>(lr * g * f[k]);
        bias -= static_cast<float>(lr * g);
        loss += -std::log(std::max(1e-9, y[i] != 0 ? p : 1 - p));
        ++seen;
      }
    }
    std::size_t right = 0, total = 0;
    for (auto& b : test_loader.epoch(0)) {
      const auto x = b.get<"video">();
      const auto y = b.get<"label">();
      for (std::size_t i = 0; i < b.size(); ++i, ++total) {
        features(x.data() + i * clip_floats, f);
        double z = bias;
        for (std::size_t k = 0; k < n_feat; ++k) z += w[k] * f[k];
        right += (z > 0) == (y[i] != 0) ? 1 : 0;
      }
    }
    accuracy = static_cast<double>(right) / static_cast<double>(total);
    const auto st = train_loader.epoch_stats(static_cast<std::uint64_t>(e));
    std::printf("epoch %d: train loss %.4f, held-out accuracy %.3f (%zu clips), loader stall %.1f %%\n", e,
                loss / static_cast<double>(seen), accuracy, total, st ? 100.0 * st->stall_fraction : 0.0);
  }
  return accuracy >= 0.9 ? 0 : 1;
}
