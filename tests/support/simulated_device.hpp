// simulated_device.hpp — a test double for split_decode (stage/split_decode.hpp), kept out of the
// installed headers: tests/codec/split_decode_test.cpp and bench/policy/placement_bench.cpp use it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "sluice/stage/split_decode.hpp"

namespace sluice_test {

using sluice::codec;
using sluice::device_job;

// simulated_device: a device decoder that models a GPU on the host, for tests, benchmarks and
// trying a placement policy without one. One thread stands for the device: jobs run one at a time
// in submission order (one device serves every worker); a job of k images occupies it for
// launch + k * per_image (sleeping out whatever the real work did not use), and its pixels are
// produced by `Codec` on that thread — the host codec gives bit-identical output; a cheaper codec
// that writes the same bytes keeps the host's cores free in benchmarks. Images for which
// `.unsupported(id)` is true are left to the host (the fallback path). Copies share the device;
// the last copy's destruction cancels what is queued and joins the thread.
struct simulated_device_options {
  std::chrono::nanoseconds launch{std::chrono::microseconds(200)};
  std::chrono::nanoseconds per_image{std::chrono::microseconds(100)};
  std::function<bool(std::uint64_t id)> unsupported{};
};

template <codec Codec>
class simulated_device {
 public:
  explicit simulated_device(Codec c, simulated_device_options o = {}) : impl_(std::make_shared<impl>(std::move(c), std::move(o))) {}

  void submit(std::shared_ptr<device_job> job) const { impl_->jobs.submit(std::move(job)); }
  // Jobs and images the device has run (cancelled jobs not counted).
  [[nodiscard]] std::uint64_t jobs_run() const noexcept { return impl_->jobs_run.load(std::memory_order_relaxed); }
  // Time the modelled device was busy.
  [[nodiscard]] std::uint64_t busy_ns() const noexcept { return impl_->busy.load(std::memory_order_relaxed); }

 private:
  struct impl {
    impl(Codec c, simulated_device_options o) : codec(std::move(c)), opt(std::move(o)) {}
    void execute(device_job& job) {
      using clock = std::chrono::steady_clock;
      const auto t0 = clock::now();
      std::size_t done = 0;
      for (std::size_t i = 0; i < job.size(); ++i) {
        if (job.cancelled()) break;
        const auto& it = job.at(i);
        bool ok = !(opt.unsupported && opt.unsupported(it.ctx.id));
        if (ok) {
          try {
            codec.decode(it.encoded, job.output(i), it.ctx);
          } catch (...) {
            ok = false;  // the host decodes it again and reports the error as its own
          }
        }
        job.finish_item(i, ok);
        ++done;
      }
      if (done > 0) {
        const auto modelled = opt.launch + opt.per_image * static_cast<std::int64_t>(done);
        std::this_thread::sleep_until(t0 + modelled);
        jobs_run.fetch_add(1, std::memory_order_relaxed);
        busy.fetch_add(static_cast<std::uint64_t>(
                           std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count()),
                       std::memory_order_relaxed);
      }
      job.complete();
    }
    Codec codec;
    simulated_device_options opt;
    std::atomic<std::uint64_t> jobs_run{0}, busy{0};
    sluice::device_job_thread jobs{[this](device_job& j) { execute(j); }};  // last: its thread runs execute
  };
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice_test
