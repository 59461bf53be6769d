// feed_gpu — a pipeline that ends on the device: collate into pinned memory, copy each batch to
// the GPU on its own stream, and hand the trainer batches its stream can use without waiting.
//
// Built with sluice::cuda it uses the GPU (and says so, then exits with --no-gpu-exit's code,
// default 0, when there is none: ctest passes 77 so the run reports Skipped, not Passed); built
// without, the same code runs with host memory standing in for pinned and device memory.
//
//   ./feed_gpu [--samples N] [--batch B] [--epochs E] [--no-gpu-exit CODE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "sluice/core/pipeline.hpp"
#include "sluice/cuda/runtime.hpp"
#include "sluice/sample/shuffle.hpp"
#include "sluice/stage/collate.hpp"
#include "sluice/stage/map.hpp"
#include "sluice/stage/pin.hpp"
#include "sluice/stage/prefetch.hpp"
#include "sluice/stage/to_device.hpp"

namespace {

constexpr std::size_t image_bytes = 32 * 32 * 3;

// A synthetic image that draws itself straight into its place in the (pinned) batch.
struct synthetic_image {
  std::uint64_t id = 0;
  std::int64_t label = 0;
  [[nodiscard]] std::size_t size_bytes() const noexcept { return image_bytes; }
  void write_into(std::span<std::byte> dst, const sluice::sample_context&) const {
    for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<std::byte>((id * 31 + i) & 0xff);
  }
};

std::uint64_t arg(int argc, char** argv, const char* name, std::uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t samples = arg(argc, argv, "--samples", 20000);
  const std::uint64_t batch = arg(argc, argv, "--batch", 256);
  const std::uint64_t epochs = arg(argc, argv, "--epochs", 2);
  [[maybe_unused]] const int no_gpu_exit = static_cast<int>(arg(argc, argv, "--no-gpu-exit", 0));

#if SLUICE_HAS_CUDART()
  const auto probe = sluice::cuda::probe_device();
  if (!probe.available) {
    std::printf("feed_gpu: %s; nothing to feed (skipped)\n", probe.reason.c_str());
    return no_gpu_exit;
  }
  std::printf("feed_gpu: %s\n", probe.reason.c_str());
  sluice::cuda::stream train_stream;  // where the trainer's kernels would run
  auto transfer = sluice::to_device(train_stream.get());
#else
  std::printf("feed_gpu: built without the CUDA runtime: host memory stands in for the device\n");
  auto transfer = sluice::to_device();
#endif
  auto pinned = sluice::pin({.cap_bytes = std::size_t{1} << 30});
  auto loader = sluice::from(sluice::sample::shuffle(samples, {.seed = 7})) |
                sluice::map([](sluice::sample_id id) {
                  return synthetic_image{id.value, static_cast<std::int64_t>(id.value % 10)};
                }) |
                sluice::collate({.batch = batch}) | pinned | transfer | sluice::prefetch(2, {.workers = 2});

  for (std::uint64_t e = 0; e < epochs; ++e) {
    std::uint64_t n = 0;
    for (auto& b : loader.epoch(e)) {
      // b.device_data(): the batch on the device; work queued on train_stream after next() sees it.
      n += b.size();
    }
    std::printf("epoch %llu: %llu samples\n", static_cast<unsigned long long>(e), static_cast<unsigned long long>(n));
  }
#if SLUICE_HAS_CUDART()
  train_stream.synchronize();
#endif
  const auto p = pinned.stats();
  const auto t = transfer.stats();
  std::printf("collate wrote %llu bytes straight into pinned slots; %llu bytes copied to the device in %llu batches\n",
              static_cast<unsigned long long>(p.bytes_in_place), static_cast<unsigned long long>(t.bytes_copied),
              static_cast<unsigned long long>(t.batches));
  std::printf("pinned pool holds %zu bytes, device pool %zu bytes (%llu allocations for %llu batches)\n",
              p.pool.held_bytes, t.pool.held_bytes, static_cast<unsigned long long>(t.pool.allocations),
              static_cast<unsigned long long>(t.batches));
  return p.bytes_in_place == t.bytes_copied ? 0 : 1;
}
