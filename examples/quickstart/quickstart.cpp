// quickstart — the smallest complete sluice program.
//
// Writes a shard of synthetic 3x64x64 images with labels (a stand-in dataset), then trains a
// pretend model on it: a shuffled, class-labelled pipeline with two workers and a prefetch depth
// of two, and a "train step" that burns a little CPU. At the end it prints what the pipeline
// measured about itself — the numbers that say whether the loader is the bottleneck.
//
//   quickstart [--dir DIR] [--records N] [--epochs E] [--workers W] [--step-us US]
#include <sluice/sluice.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {
struct args {
  std::string dir = (std::filesystem::temp_directory_path() / "sluice-quickstart").string();
  std::size_t records = 20000, epochs = 2, workers = 2, step_us = 300;
};

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "quickstart: %s needs a value\n", k.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (k == "--dir") a.dir = next();
    else if (k == "--records") a.records = std::stoul(next());
    else if (k == "--epochs") a.epochs = std::stoul(next());
    else if (k == "--workers") a.workers = std::stoul(next());
    else if (k == "--step-us") a.step_us = std::stoul(next());
    else if (k == "--help" || k == "-h") {
      std::puts("usage: quickstart [--dir DIR] [--records N] [--epochs E] [--workers W] [--step-us US]\n"
                "Writes a synthetic shard of 3x64x64 images into DIR and iterates it with sluice.");
      std::exit(0);
    } else {
      std::fprintf(stderr, "quickstart: unknown option %s (try --help)\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// A deterministic synthetic image: class c is a brightness ramp plus noise.
void make_dataset(const std::string& path, std::size_t n) {
  sluice::io::shard_writer w(path);
  std::vector<std::byte> img(3 * 64 * 64);
  for (std::size_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int64_t>(sluice::splitmix64(i) % 10);
    sluice::counter_rng g(i);
    for (std::size_t p = 0; p < img.size(); ++p)
      img[p] = static_cast<std::byte>((label * 25 + p % 64 + g.below(16)) & 0xff);
    w.add(img, label);
  }
  w.finish();
}
}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  std::filesystem::create_directories(a.dir);
  const std::string path = a.dir + "/train.sluice";
  std::printf("writing %zu synthetic 3x64x64 images to %s\n", a.records, path.c_str());
  make_dataset(path, a.records);

  // The pipeline: shuffle each epoch, read records straight from the mapping, collate into
  // float batches normalised per channel, two workers, two batches prepared ahead.
  sluice::io::shard_reader shard(path);
  auto loader = sluice::from(sluice::sample::shuffle(shard.size(), {.seed = 7}))
              | sluice::read(shard)
              | sluice::collate({.batch = 256, .output = sluice::dtype::f32, .mean = {0.5f, 0.5f, 0.5f},
                                 .std = {0.25f, 0.25f, 0.25f}, .channels = 3, .layout = sluice::layout::chw})
              | sluice::prefetch(2, {.workers = a.workers, .seed = 7});

  double checksum = 0;
  for (std::size_t e = 0; e < a.epochs; ++e) {
    std::size_t samples = 0;
    for (auto& batch : loader.epoch(e)) {
      auto x = batch.data<float>();
      checksum += x[0] + x[x.size() - 1];  // "use" the batch
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(a.step_us);
      while (std::chrono::steady_clock::now() < until) {}  // the train step
      samples += batch.size();
    }
    std::printf("epoch %zu: %zu samples\n", e, samples);
  }
  const auto s = loader.stats();
  std::printf("\nwhat the pipeline measured:\n");
  std::printf("  batches %llu, samples %llu, %.0f samples/s\n", (unsigned long long)s.batches,
              (unsigned long long)s.samples, s.samples_per_second());
  std::printf("  stall fraction %.1f %% of step time (%s)\n", 100 * s.stall_fraction,
              s.stall_fraction < 0.15 ? "below 15 %: a faster loader would not speed training up"
                                      : "the loader is a bottleneck: add workers or depth");
  std::printf("  step %.0f us mean, %.0f us std; batch wait p50 %.0f us, p95 %.0f us, max %.0f us\n",
              s.step_mean_ns / 1e3, s.step_std_ns / 1e3, s.wait_p50_ns / 1e3, s.wait_p95_ns / 1e3,
              s.wait_max_ns / 1e3);
  for (const auto& st : s.stages)
    std::printf("  stage %-8s %8.1f ms busy over %llu samples\n", std::string(st.name).c_str(), st.busy_ns / 1e6,
                (unsigned long long)st.calls);
  std::printf("  peak %zu batches (%.1f MiB) in flight; ring of %zu slots\n", s.peak_batches_in_flight,
              s.peak_bytes_in_flight / 1048576.0, s.capacity);
  std::printf("(checksum %.3f)\n", checksum);
  std::filesystem::remove(path);
  return 0;
}
