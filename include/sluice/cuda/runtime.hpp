// sluice/cuda/runtime.hpp — checked calls into the CUDA runtime, device detection, RAII streams
// and events.
//
// Host-only: it includes <cuda_runtime_api.h> and nothing that needs nvcc, so g++ compiles it
// (link sluice::cuda). Without the CUDA runtime (SLUICE_HAS_CUDART() is 0) the header is empty
// apart from `device_probe`, which then always reports "no device" with the reason.
//
// Guarantees:
//   - Every runtime call sluice makes goes through check(), which throws sluice::cuda_error naming
//     the call and the runtime's own text. Destructors never throw: they ignore the (already
//     reported or unreportable) status of cudaFree/cudaEventDestroy.
//   - probe_device() never throws and never fails a process without a GPU: on a machine without a
//     driver cudaGetDeviceCount returns an *error* (e.g. cudaErrorInsufficientDriver), not 0
//     devices; any error counts as "no device" and its text is kept as the reason.
//
//   auto probe = sluice::cuda::probe_device();
//   if (!probe.available) { std::printf("SKIPPED: %s\n", probe.reason.c_str()); return 77; }
//   sluice::cuda::stream s;                       // non-blocking stream, destroyed with s
//   sluice::cuda::check(cudaMemsetAsync(p, 0, n, s.get()), "cudaMemsetAsync");
#pragma once

#include <string>

#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"

#if SLUICE_HAS_CUDART()
#include <cuda_runtime_api.h>
#endif

namespace sluice::cuda {
inline namespace SLUICE_BACKEND_NAMESPACE {  // core/config.hpp: the backend is part of the names

// What probe_device() found. `reason` says why there is no device (or names the device found).
struct device_probe {
  bool available = false;
  int count = 0;
  std::string reason;
};

#if SLUICE_HAS_CUDART()

class cuda_error : public sluice::error {
 public:
  cuda_error(const char* call, cudaError_t code)
      : error(std::string("sluice: CUDA call ") + call + " failed: " + cudaGetErrorName(code) + " (" +
              cudaGetErrorString(code) + ")"),
        code_(code) {}
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

inline void check(cudaError_t code, const char* call) {
  if (SLUICE_UNLIKELY(code != cudaSuccess)) throw cuda_error(call, code);
}

// Detects a usable device without throwing. Clears the sticky "last error" a failed query leaves.
inline device_probe probe_device() noexcept {
  device_probe p;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    p.reason = std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(e) + " (" +
               cudaGetErrorString(e) + ")";
    (void)cudaGetLastError();
    return p;
  }
  if (n <= 0) {
    p.reason = "no CUDA device: cudaGetDeviceCount reported 0 devices";
    return p;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    p.reason = "no CUDA device: cudaGetDeviceProperties(0) failed";
    return p;
  }
  p.available = true;
  p.count = n;
  p.reason = std::string(prop.name) + " (compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + ")";
  return p;
}

// A non-blocking stream: it does not synchronise with the legacy default stream, so work sluice
// queues on it never waits for, or stalls, unrelated work the trainer put on stream 0.
class stream {
 public:
  stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = o.s_;
      o.s_ = nullptr;
    }
    return *this;
  }
  ~stream() { reset(); }
  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }
  void synchronize() const { check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

 private:
  void reset() noexcept {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

// An event. Timing is off by default: events that only order work are cheaper without it.
class event {
 public:
  explicit event(bool timing = false) {
    check(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = o.e_;
      o.e_ = nullptr;
    }
    return *this;
  }
  ~event() { reset(); }
  [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }
  void record(cudaStream_t s) const { check(cudaEventRecord(e_, s), "cudaEventRecord"); }
  void synchronize() const { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
  // True when all work captured by the last record() has finished (or it was never recorded).
  [[nodiscard]] bool ready() const {
    const cudaError_t r = cudaEventQuery(e_);
    if (r == cudaErrorNotReady) return false;
    check(r, "cudaEventQuery");
    return true;
  }
  // Milliseconds between two timing events, both complete.
  [[nodiscard]] static float elapsed_ms(const event& from, const event& to) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, from.e_, to.e_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  void reset() noexcept {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

#else  // no CUDA runtime in this build

inline device_probe probe_device() noexcept {
  return {false, 0, "no CUDA device: sluice was built without the CUDA runtime (link sluice::cuda)"};
}

#endif

}  // namespace SLUICE_BACKEND_NAMESPACE
}  // namespace sluice::cuda
