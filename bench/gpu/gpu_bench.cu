// GPU benchmarks of the transfer path, each reported as a ratio measured side by side in one run:
//   h2d        pinned vs pageable host-to-device bandwidth (cudaMemcpyAsync, 256 MiB)
//   to_device  the to_device stage's copy throughput vs raw back-to-back cudaMemcpyAsync from the
//              same pinned buffers (goal >= 0.9); and the whole pipeline (collate + pin +
//              to_device, CPU workers) against the same raw rate, for context
//   overlap    copies through the stage while the consumer stream runs a compute kernel per batch:
//              max(copy alone, compute alone) / (both together) (goal >= 0.9)
//   normalize  uint8 -> float/fp16/bf16 bytes moved per second vs a device-to-device cudaMemcpy
//              (read + write bytes) measured in the same run; a thrust::transform version beside
//   resident   one shuffled epoch of Fashion-MNIST-sized data (60,000 x 784 B, batches of 256) from
//              cuda::resident_dataset (order and gathers on the device; bytes + labels, and
//              normalised floats) vs the host loader on the same data in memory (shuffle -> collate
//              -> pin -> to_device, 8 workers): epoch times and host/resident
// A plain executable (no benchmark library): `sluice_gpu_bench [out.json]`. Without a device it
// prints SKIPPED and exits 77.
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/core/pipeline.hpp"
#include "sluice/cuda/batch_ops.cuh"
#include "sluice/cuda/resident.hpp"
#include "sluice/cuda/runtime.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/sample/shuffle.hpp"
#include "sluice/stage/collate.hpp"
#include "sluice/stage/map.hpp"
#include "sluice/stage/pin.hpp"
#include "sluice/stage/prefetch.hpp"
#include "sluice/stage/to_device.hpp"

using sluice::cuda::check;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string json;
void put(const char* key, double v, bool last = false) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "\"%s\": %.6g%s", key, v, last ? "" : ", ");
  json += buf;
}

// Milliseconds of `reps` runs of f() on stream s, best of them, measured with events.
template <class F>
double best_ms(cudaStream_t s, int reps, F&& f) {
  sluice::cuda::event a(true), b(true);
  f();  // warm-up
  check(cudaStreamSynchronize(s), "sync");
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    a.record(s);
    f();
    b.record(s);
    b.synchronize();
    best = std::min<double>(best, sluice::cuda::event::elapsed_ms(a, b));
  }
  return best;
}

__global__ void spin_kernel(float* out, int iters) {
  float a = static_cast<float>(threadIdx.x) * 1e-3f;
  for (int i = 0; i < iters; ++i) a = fmaf(a, 1.0001f, 1e-7f);
  if (a == 12345.678f) out[blockIdx.x] = a;  // keeps the loop; never true in practice
}

struct thrust_normalize {
  const std::uint8_t* in;
  float mean[3];
  float inv[3];
  __host__ __device__ float operator()(std::size_t i) const {
    const int c = static_cast<int>(i % 3);
    return (static_cast<float>(in[i]) - mean[c]) * inv[c];
  }
};

int sm_count() {
  int d = 0, n = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d), "attr");
  return n;
}

// Drives the to_device stage's hooks the way the loader does, over `slots` pinned buffers:
// before_fill, on_filled (copy queued), on_deliver (consumer waits), optional compute on the
// consumer stream, on_release. Returns wall seconds until both streams are idle.
double run_stage(std::size_t bytes, int batches, const std::vector<std::byte*>& pinned, cudaStream_t consumer,
                 int spin_iters, float* spin_out) {
  // Device pool capped at 8 batches: when the consumer lags, the copy reuses a block its kernel may
  // still read, ordered after it on the device (the pending path), instead of allocating.
  auto stage = sluice::to_device(consumer, {.cap_bytes = 8 * ((bytes + 65535) / 65536 * 65536)});
  const std::size_t slots = pinned.size();
  std::vector<sluice::detail::slot_base> slot(slots);
  std::vector<sluice::to_device_stage::slot_state> st(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    slot[i].data = pinned[i];
    slot[i].storage_bytes = bytes;
    slot[i].sample_bytes = bytes;
  }
  const unsigned grid = static_cast<unsigned>(sm_count() * 4);
  // Warm-up: the pool allocates its blocks.
  for (std::size_t i = 0; i < slots; ++i) {
    stage.before_fill(slot[i], st[i]);
    slot[i].count = 1;
    stage.on_filled(slot[i], st[i]);
    stage.on_deliver(slot[i], st[i]);
    stage.on_release(slot[i], st[i]);
  }
  check(cudaDeviceSynchronize(), "sync");
  const double t0 = now_s();
  for (int k = 0; k < batches; ++k) {
    const std::size_t i = static_cast<std::size_t>(k) % slots;
    stage.before_fill(slot[i], st[i]);
    slot[i].count = 1;
    stage.on_filled(slot[i], st[i]);
    stage.on_deliver(slot[i], st[i]);
    if (spin_iters > 0) spin_kernel<<<grid, 256, 0, consumer>>>(spin_out, spin_iters);
    stage.on_release(slot[i], st[i]);
  }
  check(cudaStreamSynchronize(consumer), "sync");
  check(cudaStreamSynchronize(stage.copy_stream()), "sync");
  const double t = now_s() - t0;
  for (std::size_t i = 0; i < slots; ++i) stage.on_destroy(slot[i], st[i]);
  return t;
}

double run_raw(std::size_t bytes, int batches, const std::vector<std::byte*>& pinned, const std::vector<void*>& dev,
               cudaStream_t s) {
  check(cudaDeviceSynchronize(), "sync");
  const double t0 = now_s();
  for (int k = 0; k < batches; ++k) {
    const std::size_t i = static_cast<std::size_t>(k) % pinned.size();
    check(cudaMemcpyAsync(dev[i], pinned[i], bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  }
  check(cudaStreamSynchronize(s), "sync");
  return now_s() - t0;
}

double run_spin(int batches, int iters, float* out, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(sm_count() * 4);
  check(cudaDeviceSynchronize(), "sync");
  const double t0 = now_s();
  for (int k = 0; k < batches; ++k) spin_kernel<<<grid, 256, 0, s>>>(out, iters);
  check(cudaStreamSynchronize(s), "sync");
  return now_s() - t0;
}

// Fashion-MNIST-sized epochs: the device-resident dataset against the host loader, same data, same
// order. Appends the "resident" object to the JSON.
void bench_resident(cudaStream_t s, cudaStream_t consumer) {
  constexpr std::size_t rb = 784, n = 60000, batch = 256;
  std::vector<std::uint8_t> bytes(n * rb);
  std::vector<std::int64_t> labels(n);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(sluice::splitmix64(i) >> 56);
  for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const sluice::sample::shuffle order(n, {.seed = 1});
  sluice::normalize_params p{1};
  p.set(0, 72.9f, 90.0f);

  const double t_load = now_s();
  sluice::cuda::resident_dataset ds(bytes, rb, labels, {.batch = batch, .stream = s});
  check(cudaStreamSynchronize(s), "sync");
  const double load_s = now_s() - t_load;
  sluice::cuda::resident_dataset dsf(bytes, rb, labels, {.batch = batch, .bytes = false, .normalize = p, .stream = s});
  auto epoch_ms = [&](sluice::cuda::resident_dataset& d) {
    double best = 1e30;
    for (std::uint64_t e = 0; e < 4; ++e) {  // epoch 0 warms up
      const double t0 = now_s();
      std::size_t got = 0;
      for (const auto& b : d.epoch(e, order)) got += b.size;
      check(cudaStreamSynchronize(s), "sync");
      if (got != n) std::printf("resident epoch delivered %zu of %zu samples\n", got, n);
      if (e > 0) best = std::min(best, (now_s() - t0) * 1e3);
    }
    return best;
  };
  const double res_ms = epoch_ms(ds), resf_ms = epoch_ms(dsf);

  auto to_dev = sluice::to_device(consumer);
  auto loader = sluice::from(order) |
                sluice::map([&](sluice::sample_id id) {
                  return sluice::record_view{id.value, std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()) + id.value * rb, rb),
                                             labels[id.value], "memory"};
                }) |
                sluice::collate({.batch = batch}) | sluice::pin() | to_dev | sluice::prefetch(4, {.workers = 8});
  double host_ms = 1e30;
  for (std::uint64_t e = 0; e < 4; ++e) {
    const double t0 = now_s();
    std::size_t got = 0;
    for (auto& b : loader.epoch(e)) got += b.size();
    check(cudaStreamSynchronize(consumer), "sync");
    if (got != n) std::printf("host epoch delivered %zu of %zu samples\n", got, n);
    if (e > 0) host_ms = std::min(host_ms, (now_s() - t0) * 1e3);
  }
  std::printf("resident 60000x784 B epoch: %.2f ms (%.0f samples/s), normalised f32 %.2f ms; host loader (8 workers, "
              "pin + to_device) %.2f ms; host/resident %.1fx; load to device %.1f ms\n",
              res_ms, n / res_ms * 1e3, resf_ms, host_ms, host_ms / res_ms, load_s * 1e3);
  json += "\"resident\": {";
  put("records", static_cast<double>(n));
  put("record_bytes", static_cast<double>(rb));
  put("batch", static_cast<double>(batch));
  put("load_ms", load_s * 1e3);
  put("epoch_ms", res_ms);
  put("samples_per_s", n / res_ms * 1e3);
  put("normalized_epoch_ms", resf_ms);
  put("host_loader_epoch_ms", host_ms);
  put("host_over_resident", host_ms / res_ms, true);
  json += "}, ";
}

}  // namespace

int main(int argc, char** argv) {
  const auto probe = sluice::cuda::probe_device();
  const char* out_path = argc > 1 ? argv[1] : nullptr;
  if (!probe.available) {
    std::printf("SKIPPED: %s\n", probe.reason.c_str());
    if (out_path != nullptr) {
      if (FILE* f = std::fopen(out_path, "w")) {
        std::fprintf(f, "{\"skipped\": \"%s\"}\n", probe.reason.c_str());
        std::fclose(f);
      }
    }
    return 77;
  }
  std::printf("device: %s\n", probe.reason.c_str());
  sluice::cuda::stream s, consumer;
  json = "{\"device\": \"" + probe.reason + "\", ";

  // ---- h2d: pinned vs pageable -------------------------------------------------------------
  const std::size_t h2d_bytes = std::size_t{256} << 20;
  void* dev_big = nullptr;
  check(cudaMalloc(&dev_big, h2d_bytes), "cudaMalloc");
  void* pinned_big = nullptr;
  check(cudaHostAlloc(&pinned_big, h2d_bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(pinned_big, 1, h2d_bytes);
  std::vector<unsigned char> pageable(h2d_bytes, 1);
  const double pinned_ms = best_ms(s.get(), 5, [&] {
    check(cudaMemcpyAsync(dev_big, pinned_big, h2d_bytes, cudaMemcpyHostToDevice, s.get()), "H2D pinned");
  });
  const double pageable_ms = best_ms(s.get(), 5, [&] {
    check(cudaMemcpyAsync(dev_big, pageable.data(), h2d_bytes, cudaMemcpyHostToDevice, s.get()), "H2D pageable");
  });
  const double pinned_gbs = h2d_bytes / pinned_ms / 1e6, pageable_gbs = h2d_bytes / pageable_ms / 1e6;
  std::printf("h2d 256 MiB: pinned %.1f GB/s, pageable %.1f GB/s, pinned/pageable %.2f\n", pinned_gbs, pageable_gbs,
              pinned_gbs / pageable_gbs);
  json += "\"h2d\": {";
  put("pinned_GBps", pinned_gbs);
  put("pageable_GBps", pageable_gbs);
  put("pinned_over_pageable", pinned_gbs / pageable_gbs, true);
  json += "}, ";
  check(cudaFreeHost(pinned_big), "cudaFreeHost");
  pageable = {};

  // ---- to_device stage vs raw cudaMemcpyAsync ------------------------------------------------
  const std::size_t batch_bytes = std::size_t{256} * 224 * 224 * 3;  // 256 RGB 224x224 images
  const int slots = 4, batches = 60;
  std::vector<std::byte*> pinned(slots);
  std::vector<void*> dev(slots);
  for (int i = 0; i < slots; ++i) {
    check(cudaHostAlloc(reinterpret_cast<void**>(&pinned[i]), batch_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(pinned[i], i, batch_bytes);
    check(cudaMalloc(&dev[i], batch_bytes), "cudaMalloc");
  }
  float* spin_out = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&spin_out), 1 << 16), "cudaMalloc");
  double raw_s = 1e30, stage_s = 1e30;
  for (int r = 0; r < 3; ++r) {  // interleaved, best of 3 each
    raw_s = std::min(raw_s, run_raw(batch_bytes, batches, pinned, dev, s.get()));
    stage_s = std::min(stage_s, run_stage(batch_bytes, batches, pinned, consumer.get(), 0, spin_out));
  }
  const double moved = static_cast<double>(batch_bytes) * batches;
  const double raw_gbs = moved / raw_s / 1e9, stage_gbs = moved / stage_s / 1e9;
  std::printf("to_device stage: %.1f GB/s vs raw cudaMemcpyAsync %.1f GB/s: ratio %.3f (goal >= 0.9)\n", stage_gbs,
              raw_gbs, stage_gbs / raw_gbs);

  // The whole pipeline: CPU workers collate 150528-byte samples into pinned slots, to_device copies.
  const std::size_t sample = 224 * 224 * 3, distinct = 1024;
  std::vector<std::byte> source(sample * distinct);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 2654435761u >> 24);
  const std::uint64_t n_samples = 256 * 40;
  auto to_dev = sluice::to_device(consumer.get());
  auto loader = sluice::from(sluice::sample::sequential(n_samples)) |
                sluice::map([&](sluice::sample_id id) {
                  return sluice::record_view{id.value, std::span<const std::byte>(source.data() + (id.value % distinct) * sample, sample),
                                             static_cast<std::int64_t>(id.value % 10), "memory"};
                }) |
                sluice::collate({.batch = 256}) | sluice::pin() | to_dev | sluice::prefetch(4, {.workers = 12});
  double pipe_s = 1e30;
  for (std::uint64_t e = 0; e < 3; ++e) {
    const double t0 = now_s();
    std::uint64_t got = 0;
    for (auto& b : loader.epoch(e)) got += b.size();
    check(cudaStreamSynchronize(consumer.get()), "sync");
    if (got != n_samples) std::printf("pipeline delivered %llu of %llu samples\n", static_cast<unsigned long long>(got),
                                      static_cast<unsigned long long>(n_samples));
    pipe_s = std::min(pipe_s, now_s() - t0);
  }
  const double pipe_gbs = static_cast<double>(n_samples * sample) / pipe_s / 1e9;
  std::printf("pipeline (12 workers collate + pin + to_device): %.1f GB/s, %.0f samples/s, over raw %.3f\n", pipe_gbs,
              n_samples / pipe_s, pipe_gbs / raw_gbs);
  json += "\"to_device\": {";
  put("batch_bytes", static_cast<double>(batch_bytes));
  put("raw_GBps", raw_gbs);
  put("stage_GBps", stage_gbs);
  put("stage_over_raw", stage_gbs / raw_gbs);
  put("pipeline_GBps", pipe_gbs);
  put("pipeline_samples_per_s", n_samples / pipe_s);
  put("pipeline_over_raw", pipe_gbs / raw_gbs, true);
  json += "}, ";

  // ---- overlap of copy with compute ----------------------------------------------------------
  // Calibrate the kernel so one launch takes about as long as one batch's copy.
  const double copy_per_batch_s = raw_s / batches;
  const int probe_iters = 1 << 16;
  const double probe_s = run_spin(5, probe_iters, spin_out, consumer.get()) / 5;
  const int iters = static_cast<int>(std::clamp(probe_iters * copy_per_batch_s / probe_s, 1.0, 1e9));
  double copy_s = 1e30, compute_s = 1e30, both_s = 1e30;
  for (int r = 0; r < 3; ++r) {
    copy_s = std::min(copy_s, run_stage(batch_bytes, batches, pinned, consumer.get(), 0, spin_out));
    compute_s = std::min(compute_s, run_spin(batches, iters, spin_out, consumer.get()));
    both_s = std::min(both_s, run_stage(batch_bytes, batches, pinned, consumer.get(), iters, spin_out));
  }
  const double overlap = std::max(copy_s, compute_s) / both_s;
  std::printf("overlap: copy %.1f ms, compute %.1f ms, both %.1f ms: max/both %.3f (goal >= 0.9)\n", copy_s * 1e3,
              compute_s * 1e3, both_s * 1e3, overlap);
  json += "\"overlap\": {";
  put("copy_ms", copy_s * 1e3);
  put("compute_ms", compute_s * 1e3);
  put("both_ms", both_s * 1e3);
  put("efficiency", overlap, true);
  json += "}, ";
  for (int i = 0; i < slots; ++i) {
    check(cudaFreeHost(pinned[i]), "cudaFreeHost");
    check(cudaFree(dev[i]), "cudaFree");
  }

  bench_resident(s.get(), consumer.get());

  // ---- normalize vs device-to-device copy bandwidth -----------------------------------------
  const std::size_t n = std::size_t{256} << 20;  // 256 Mi pixels
  std::uint8_t* d_in = nullptr;
  float* d_out = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d_in), n), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&d_out), n * 4), "cudaMalloc");
  check(cudaMemsetAsync(d_in, 7, n, s.get()), "memset");
  const double d2d_ms = best_ms(s.get(), 5, [&] {
    // 512 MiB from the upper half of d_out to its lower half (no overlap).
    check(cudaMemcpyAsync(d_out, reinterpret_cast<char*>(d_out) + 2 * n, 2 * n, cudaMemcpyDeviceToDevice, s.get()), "D2D");
  });
  const double d2d_gbs = 2.0 * n * 2 / d2d_ms / 1e6;  // read + write
  sluice::normalize_params p{3};
  p.set(0, 123.7f, 58.4f).set(1, 116.3f, 57.1f).set(2, 103.5f, 57.4f);
  const double f32_ms = best_ms(s.get(), 5, [&] { sluice::cuda::normalize(d_in, d_out, n, p, s.get()); });
  const double f16_ms = best_ms(s.get(), 5, [&] {
    sluice::cuda::normalize(d_in, reinterpret_cast<sluice::f16*>(d_out), n, p, s.get());
  });
  const double bf16_ms = best_ms(s.get(), 5, [&] {
    sluice::cuda::normalize(d_in, reinterpret_cast<sluice::bf16*>(d_out), n, p, s.get());
  });
  thrust_normalize fn{d_in, {p.mean[0], p.mean[1], p.mean[2]}, {p.inv_std[0], p.inv_std[1], p.inv_std[2]}};
  const double thrust_ms = best_ms(s.get(), 5, [&] {
    thrust::transform(thrust::cuda::par.on(s.get()), thrust::counting_iterator<std::size_t>(0),
                      thrust::counting_iterator<std::size_t>(n), thrust::device_pointer_cast(d_out), fn);
  });
  const double f32_gbs = 5.0 * n / f32_ms / 1e6, f16_gbs = 3.0 * n / f16_ms / 1e6, bf16_gbs = 3.0 * n / bf16_ms / 1e6;
  const double thrust_gbs = 5.0 * n / thrust_ms / 1e6;
  std::printf("normalize 256 Mi px: d2d copy %.0f GB/s; f32 %.0f GB/s (%.2f), f16 %.0f (%.2f), bf16 %.0f (%.2f), "
              "thrust::transform f32 %.0f (%.2f)\n",
              d2d_gbs, f32_gbs, f32_gbs / d2d_gbs, f16_gbs, f16_gbs / d2d_gbs, bf16_gbs, bf16_gbs / d2d_gbs, thrust_gbs,
              thrust_gbs / d2d_gbs);
  json += "\"normalize\": {";
  put("d2d_GBps", d2d_gbs);
  put("f32_GBps", f32_gbs);
  put("f32_over_d2d", f32_gbs / d2d_gbs);
  put("f16_GBps", f16_gbs);
  put("f16_over_d2d", f16_gbs / d2d_gbs);
  put("bf16_GBps", bf16_gbs);
  put("bf16_over_d2d", bf16_gbs / d2d_gbs);
  put("thrust_f32_GBps", thrust_gbs);
  put("thrust_f32_over_d2d", thrust_gbs / d2d_gbs, true);
  json += "}, \"goals\": {";
  put("to_device_stage_over_raw_ge_0_9", stage_gbs / raw_gbs >= 0.9 ? 1 : 0);
  put("overlap_efficiency_ge_0_9", overlap >= 0.9 ? 1 : 0, true);
  json += "}}\n";
  check(cudaFree(d_in), "cudaFree");
  check(cudaFree(d_out), "cudaFree");
  check(cudaFree(spin_out), "cudaFree");
  check(cudaFree(dev_big), "cudaFree");

  std::fputs(json.c_str(), stdout);
  if (out_path != nullptr) {
    FILE* f = std::fopen(out_path, "w");
    if (f == nullptr) {
      std::perror(out_path);
      return 1;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return 0;
}
