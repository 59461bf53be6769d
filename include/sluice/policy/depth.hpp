// sluice/policy/depth.hpp — prefetch-depth policies beyond depth::fixed: the classic
// utilisation rule and an adaptive controller with a RAM budget.
//
// A depth policy (policy/depth_fixed.hpp: initial_depth, max_depth, update(depth_signal)) is asked
// once per delivered batch, on the consumer's thread; the ring holds at most depth + workers
// batches. depth::utilization_rule is the rule of thumb (consumer utilisation above 85 % -> depth
// 1, below 60 % -> 3, else 2), from NVML's GPU utilisation when it loads, else the consumer's busy
// fraction. depth::adaptive holds the consumer's stall under `target_stall` with the smallest
// depth: it grows only when the stall is clearly above target and the producer can fill the
// queue, shrinks when the queue stays full, never exceeds `ram_budget_bytes`, and does not
// oscillate (window ends only, hysteresis, a shrink undone doubles its patience). It gives memory
// back, where tf.data's autotuner only grows.
// Errors: utilization_source::nvml when NVML cannot be used is a usage_error with the reason.
// Every rule: docs/policies.md.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sluice/core/error.hpp"
#include "sluice/policy/depth_fixed.hpp"

namespace sluice {

namespace detail {

struct nvml_utilization {  // layout of nvmlUtilization_t
  unsigned gpu;
  unsigned memory;
};

// NVML through dlopen: no link-time dependency; a failure reads as "not available", with the
// reason kept for the caller that asked for NVML explicitly.
class nvml_probe {
 public:
  explicit nvml_probe(unsigned device_index = 0) {
    handle_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* e = ::dlerror();
      reason_ = std::string("cannot load libnvidia-ml.so.1: ") + (e != nullptr ? e : "dlopen failed");
      return;
    }
    auto init = reinterpret_cast<int (*)()>(::dlsym(handle_, "nvmlInit_v2"));
    auto get = reinterpret_cast<int (*)(unsigned, void**)>(::dlsym(handle_, "nvmlDeviceGetHandleByIndex_v2"));
    util_ = reinterpret_cast<int (*)(void*, nvml_utilization*)>(::dlsym(handle_, "nvmlDeviceGetUtilizationRates"));
    shutdown_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "nvmlShutdown"));
    if (init == nullptr || get == nullptr || util_ == nullptr) {
      reason_ = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2 or nvmlDeviceGetUtilizationRates";
      close();
      return;
    }
    if (const int rc = init(); rc != 0) {
      reason_ = "nvmlInit_v2 failed (NVML error " + std::to_string(rc) + ")";
      close();
      return;
    }
    initialised_ = true;
    if (const int rc = get(device_index, &device_); rc != 0) {
      reason_ = "NVML has no GPU at index " + std::to_string(device_index) + " (NVML error " + std::to_string(rc) + ")";
      close();
      return;
    }
    ok_ = true;
  }
  nvml_probe(const nvml_probe&) = delete;
  nvml_probe& operator=(const nvml_probe&) = delete;
  ~nvml_probe() { close(); }
  [[nodiscard]] bool available() const noexcept { return ok_; }
  // Why available() is false; empty when it is true.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  // GPU utilisation in [0, 1] over NVML's last sample period, or nullopt.
  [[nodiscard]] std::optional<double> utilization() const noexcept {
    if (!ok_) return std::nullopt;
    nvml_utilization u{};
    if (util_(device_, &u) != 0) return std::nullopt;
    return static_cast<double>(u.gpu) / 100.0;
  }

 private:
  void close() noexcept {
    if (initialised_ && shutdown_ != nullptr) shutdown_();
    if (handle_ != nullptr) ::dlclose(handle_);
    handle_ = nullptr;
    ok_ = initialised_ = false;
  }
  void* handle_ = nullptr;
  void* device_ = nullptr;
  int (*util_)(void*, nvml_utilization*) = nullptr;
  int (*shutdown_)() = nullptr;
  bool initialised_ = false, ok_ = false;
  std::string reason_;
};

// Sums over a window of batches.
struct signal_window {
  std::uint64_t batches = 0, wait_ns = 0, busy_ns = 0, empty_requests = 0, full_requests = 0;
  std::size_t min_ready = ~std::size_t{0}, max_ready = 0;
  double w2 = 0, wt = 0, t2 = 0;  // sums of wait^2, wait*total, total^2 (ms^2) for stall_error()
  void add(const depth_signal& s) noexcept {
    ++batches;
    empty_requests += s.ready == 0;
    full_requests += s.ready >= std::max<std::size_t>(1, s.depth);
    const double w = static_cast<double>(s.wait_ns) * 1e-6, t = w + static_cast<double>(s.busy_ns) * 1e-6;
    w2 += w * w;
    wt += w * t;
    t2 += t * t;
    wait_ns += s.wait_ns;
    busy_ns += s.busy_ns;
    min_ready = std::min(min_ready, s.ready);
    max_ready = std::max(max_ready, s.ready);
  }
  [[nodiscard]] double stall_fraction() const noexcept {
    const double t = static_cast<double>(wait_ns) + static_cast<double>(busy_ns);
    return t <= 0 ? 0.0 : static_cast<double>(wait_ns) / t;
  }
  // Standard error of stall_fraction() as a ratio estimator over the batches seen (batches are
  // treated as independent, which understates it a little when stalls come in bursts).
  [[nodiscard]] double stall_error() const noexcept {
    const double total = (static_cast<double>(wait_ns) + static_cast<double>(busy_ns)) * 1e-6;
    if (batches < 2 || total <= 0) return 1.0;
    const double r = stall_fraction();
    const double ss = std::max(0.0, w2 - 2 * r * wt + r * r * t2);
    return std::sqrt(ss * static_cast<double>(batches) / static_cast<double>(batches - 1)) / total;
  }
  void reset() noexcept { *this = {}; }
};

}  // namespace detail

namespace depth {

enum class utilization_source : std::uint8_t { automatic, wait_fraction, nvml };

struct utilization_rule_options {
  double high = 0.85;           // above: depth 1
  double low = 0.60;            // below: depth 3
  std::uint64_t window = 16;    // batches a decision
  utilization_source source = utilization_source::automatic;
  unsigned gpu_index = 0;
};

class utilization_rule {
 public:
  explicit utilization_rule(utilization_rule_options o = {}) : opt_(o) {
    if (opt_.source != utilization_source::wait_fraction) {
      auto p = std::make_shared<detail::nvml_probe>(opt_.gpu_index);
      if (p->available()) {
        nvml_ = std::move(p);
      } else if (opt_.source == utilization_source::nvml) {
        throw usage_error("sluice: depth::utilization_rule: utilization_source::nvml was asked for but NVML cannot be used: " +
                          p->reason() + "; use utilization_source::automatic to fall back to the wait fraction");
      } else {
        nvml_unavailable_reason_ = p->reason();
      }
    }
  }
  // The rule itself, as a pure function.
  [[nodiscard]] constexpr std::size_t depth_for(double utilization) const noexcept {
    return utilization > opt_.high ? 1 : utilization < opt_.low ? 3 : 2;
  }
  [[nodiscard]] constexpr std::size_t initial_depth() const noexcept { return 2; }
  [[nodiscard]] constexpr std::size_t max_depth() const noexcept { return 3; }
  std::size_t update(const depth_signal& s) {
    window_.add(s);
    if (window_.batches < std::max<std::uint64_t>(1, opt_.window)) return s.depth;
    std::optional<double> u;
    if (nvml_) u = nvml_->utilization();
    if (!u) u = 1.0 - window_.stall_fraction();
    last_utilization_ = *u;
    window_.reset();
    return depth_for(*u);
  }
  [[nodiscard]] bool uses_nvml() const noexcept { return nvml_ != nullptr; }
  // Why the automatic source fell back to the wait fraction; empty when it uses NVML or was not
  // asked to try it.
  [[nodiscard]] const std::string& nvml_unavailable_reason() const noexcept { return nvml_unavailable_reason_; }
  [[nodiscard]] double last_utilization() const noexcept { return last_utilization_; }

 private:
  utilization_rule_options opt_;
  std::shared_ptr<detail::nvml_probe> nvml_;
  std::string nvml_unavailable_reason_;
  detail::signal_window window_;
  double last_utilization_ = 1.0;
};

struct adaptive_options {
  std::size_t initial = 2;
  std::size_t max = 16;
  std::uint64_t ram_budget_bytes = 0;  // 0: no budget beyond max
  double target_stall = 0.04;          // the stall fraction the controller holds depth under
  std::uint64_t window = 32;           // batches between decisions (and the dwell after a change)
  double confidence_z = 1.5;           // grow only when stall - z * error > target
  std::uint64_t shrink_windows = 4;    // consecutive full-queue windows before a shrink
  std::uint64_t max_shrink_windows = 256;
};

class adaptive {
 public:
  explicit adaptive(adaptive_options o = {}) : opt_(o), patience_(std::max<std::uint64_t>(1, o.shrink_windows)) {
    opt_.max = std::max<std::size_t>(1, opt_.max);
    opt_.initial = std::clamp<std::size_t>(opt_.initial, 1, opt_.max);
  }
  [[nodiscard]] std::size_t initial_depth() const noexcept { return opt_.initial; }
  [[nodiscard]] std::size_t max_depth() const noexcept { return opt_.max; }

  std::size_t update(const depth_signal& s) {
    const std::size_t d = std::max<std::size_t>(1, s.depth);
    const std::size_t cap = budget_cap(s);
    if (d > cap) return change(d, cap);  // a batch grew or workers were added: obey the budget now
    since_change_.add(s);
    window_.add(s);
    if (window_.batches < std::max<std::uint64_t>(1, opt_.window)) return d;
    const bool queue_stayed_full = window_.min_ready >= 2;  // no request in the window waited
    window_.reset();
    // Grow: stalls clearly above target (the estimate since the last change, minus z standard
    // errors), and the producer filled the queue at least once, so depth is what is short.
    const double stall = since_change_.stall_fraction();
    const bool producer_can_fill = since_change_.max_ready >= d;
    if (stall - opt_.confidence_z * since_change_.stall_error() > opt_.target_stall && producer_can_fill &&
        d < cap) {
      if (last_change_ < 0) patience_ = std::min(opt_.max_shrink_windows, patience_ * 2);  // undoing a shrink
      return change(d, d + 1);
    }
    // Shrink: the queue stayed full for `patience_` windows in a row and the stall since the last
    // change is well under target.
    full_windows_ = queue_stayed_full ? full_windows_ + 1 : 0;
    if (full_windows_ >= patience_ && d > 1 &&
        stall + opt_.confidence_z * since_change_.stall_error() < opt_.target_stall / 2)
      return change(d, d - 1);
    return d;
  }
  // Largest depth the budget allows for this signal's batch size and workers.
  [[nodiscard]] std::size_t budget_cap(const depth_signal& s) const noexcept {
    if (opt_.ram_budget_bytes == 0 || s.batch_bytes == 0) return opt_.max;
    const std::uint64_t batches = opt_.ram_budget_bytes / s.batch_bytes;
    const std::uint64_t room = batches > s.workers ? batches - s.workers : 1;
    return std::clamp<std::size_t>(static_cast<std::size_t>(room), 1, opt_.max);
  }
  [[nodiscard]] std::uint64_t changes() const noexcept { return changes_; }
  [[nodiscard]] std::uint64_t shrink_patience_windows() const noexcept { return patience_; }

 private:
  std::size_t change(std::size_t from, std::size_t to) {
    if (to != from) {
      ++changes_;
      last_change_ = to > from ? 1 : -1;
    }
    since_change_.reset();
    window_.reset();
    full_windows_ = 0;
    return to;
  }
  adaptive_options opt_;
  detail::signal_window since_change_, window_;
  std::uint64_t patience_;
  std::uint64_t full_windows_ = 0;
  std::uint64_t changes_ = 0;
  int last_change_ = 0;
};

}  // namespace depth
}  // namespace sluice
