// sluice/stage/split_decode.hpp — `split_decode<"f">(codec, device, policy)`: a per-field
// collator that decodes a batch's images partly on the host workers and partly on a device
// decoder, in parallel, the split chosen per batch by a placement policy (policy/placement.hpp).
//
// The field is the encoded one; the output is what decode<"f">(codec) + stack<"f"> would write.
// Per batch the policy says k: the last k images go to the device in one job while the workers
// decode the rest; a worker that reaches a device image waits for the job and copies it in. The
// device writes into the job's own buffer, so a batch abandoned mid-way leaves it nothing to
// corrupt, and an abandoned job is cancelled and waited for. A device decoder is a type with a
// const `submit(std::shared_ptr<device_job>)`.
// Errors: an image the device cannot decode is decoded on the host instead (counted:
// stats().fallbacks), so a corrupt image fails with the host codec's format_error, as on the host
// path; a submit that throws leaves the job to the host (stats().device_errors).
// Determinism: the device must produce the host codec's bytes for the batch not to depend on the
// split (the test double does; a real nvJPEG decoder agrees within a tolerance). Every rule:
// docs/device.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "sluice/core/affinity.hpp"
#include "sluice/core/batch.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/stage/decode.hpp"
#include "sluice/stage/field_collate.hpp"
#include "sluice/policy/placement.hpp"

namespace sluice {

// One batch's images for the device. Built by split_decoded, completed by the device decoder.
class device_job {
 public:
  struct item {
    std::span<const std::byte> encoded;
    sample_context ctx;
  };

  device_job(std::vector<item> items, std::size_t output_bytes)
      : items_(std::move(items)), bytes_(output_bytes), out_(new std::byte[items_.size() * output_bytes]), ok_(items_.size()) {}

  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] const item& at(std::size_t i) const noexcept { return items_[i]; }
  [[nodiscard]] std::size_t output_bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::span<std::byte> output(std::size_t i) noexcept { return {out_.get() + i * bytes_, bytes_}; }
  [[nodiscard]] std::span<const std::byte> output(std::size_t i) const noexcept { return {out_.get() + i * bytes_, bytes_}; }

  // The decoder's side.
  void finish_item(std::size_t i, bool ok) noexcept { ok_[i].store(ok ? 1 : 2, std::memory_order_relaxed); }
  void complete() noexcept {
    {
      std::lock_guard lk(m_);
      completed_ns_ = detail::now_ns();
      done_ = true;
    }
    cv_.notify_all();
  }
  [[nodiscard]] bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

  // split_decoded's side.
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  void wait() const {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return done_; });
  }
  [[nodiscard]] bool decoded(std::size_t i) const noexcept { return ok_[i].load(std::memory_order_relaxed) == 1; }
  [[nodiscard]] std::uint64_t completed_ns() const {
    std::lock_guard lk(m_);
    return completed_ns_;
  }

  // Bookkeeping of the batch the job belongs to (split_decoded).
  void stamp(std::uint64_t seed, std::uint64_t epoch) noexcept {
    for (auto& it : items_) {
      it.ctx.seed = seed;
      it.ctx.epoch = epoch;
    }
  }
  std::uint64_t submitted_ns = 0;
  std::atomic<bool> submitted{false};
  std::atomic<std::size_t> host_left{0};    // host images not yet written
  std::atomic<std::size_t> writes_left{0};  // images of the batch not yet written
  std::atomic<std::uint64_t> host_done_ns{0};

 private:
  std::vector<item> items_;
  std::size_t bytes_;
  std::unique_ptr<std::byte[]> out_;  // not zeroed: every image is written before it is read
  std::vector<std::atomic<std::uint8_t>> ok_;  // 0 pending, 1 decoded, 2 left to the host
  std::atomic<bool> cancelled_{false};
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::uint64_t completed_ns_ = 0;
};

template <class D>
concept device_decoder = requires(const D& d, std::shared_ptr<device_job> j) { d.submit(std::move(j)); };

// One thread that runs a device decoder's jobs in submission order (one device serves every
// worker). `run` decodes a job and calls its complete(); if it throws, the job's unfinished images
// are left to the host and the job completed. Jobs still queued when the thread is destroyed are
// completed undecoded: the workers decode them on the host.
class device_job_thread {
 public:
  explicit device_job_thread(std::function<void(device_job&)> run)
      : run_(std::move(run)), thread_([this] { loop(); }) {}
  device_job_thread(const device_job_thread&) = delete;
  device_job_thread& operator=(const device_job_thread&) = delete;
  ~device_job_thread() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(std::shared_ptr<device_job> job) {
    {
      std::lock_guard lk(m_);
      queue_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    detail::name_current_thread("sluice-device");
    std::unique_lock lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto job = std::move(queue_.front());
      queue_.pop_front();
      if (stop_) {  // shutting down: nothing decoded here
        job->complete();
        continue;
      }
      lk.unlock();
      try {
        run_(*job);
      } catch (...) {  // (bad_alloc, mostly): what it did not finish goes to the host, never terminate()
        for (std::size_t i = 0; i < job->size(); ++i)
          if (!job->decoded(i)) job->finish_item(i, false);
        job->complete();
      }
      lk.lock();
    }
  }
  std::function<void(device_job&)> run_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<device_job>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything it reads exists
};

// What split_decoded did, over its life (all copies of one collator share it).
struct split_stats {
  std::uint64_t batches = 0;         // batches whose device part was submitted
  std::uint64_t host_images = 0;     // decoded on the host by choice
  std::uint64_t device_images = 0;   // decoded by the device
  std::uint64_t fallbacks = 0;       // given to the device, decoded on the host (it could not)
  std::uint64_t host_wait_ns = 0;    // workers' time waiting for the device's images
  std::uint64_t device_errors = 0;   // jobs whose submit threw (their images went to the host)
};

namespace detail {
struct split_counters {
  std::atomic<std::uint64_t> batches{0}, host_images{0}, device_images{0}, fallbacks{0}, host_wait_ns{0}, device_errors{0};
  std::mutex m;
  std::string last_error;
};
}  // namespace detail

template <fixed_string Name, codec Codec, device_decoder Device, placement::placement_policy Policy>
class split_decoded {
 public:
  using field_collate_concept = field_collate_tag;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp: write touches only slot i
  static constexpr auto field = Name;
  static constexpr std::string_view stage_name = detail::decode_field_name<Name>.view();

  split_decoded(Codec c, Device d, Policy p)
      : codec_(std::move(c)), device_(std::move(d)), policy_(std::move(p)),
        counters_(std::make_shared<detail::split_counters>()) {}

  template <class Schema>
  using outputs = std::tuple<sluice::output<Name, std::uint8_t>>;

  // The batch's job, as the workers hold it. When the last holder lets go (the next batch, a
  // re-plan, the loader's destruction) a submitted job is cancelled and waited for: the device
  // then no longer reads the batch's encoded bytes, which may belong to a reader about to go.
  struct job_owner {
    std::shared_ptr<device_job> job;
    explicit job_owner(std::shared_ptr<device_job> j) : job(std::move(j)) {}
    job_owner(const job_owner&) = delete;
    job_owner& operator=(const job_owner&) = delete;
    ~job_owner() {
      if (!job->submitted.load(std::memory_order_acquire)) return;  // the device never saw it
      job->cancel();
      job->wait();
    }
  };

  struct scratch {
    std::shared_ptr<job_owner> owner;
    device_job* job = nullptr;
    const void* samples = nullptr;  // the batch's samples, as plan() saw them
    std::size_t n = 0, k = 0, offset = 0;
  };

  [[nodiscard]] split_stats stats() const noexcept {
    const auto& c = *counters_;
    return {c.batches.load(), c.host_images.load(), c.device_images.load(), c.fallbacks.load(), c.host_wait_ns.load(),
            c.device_errors.load()};
  }
  // The text of the last exception a submit threw ("" if none).
  [[nodiscard]] std::string last_device_error() const {
    std::lock_guard lk(counters_->m);
    return counters_->last_error;
  }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }

  void begin(scratch& sc) const noexcept { drop(sc); }

  template <class S>
  void check(const S&, scratch&) const {
    using F = detail::field_of_t<Name, S>;
    static_assert(sizeof(typename F::value_type) == 1, "sluice: split_decoded<Name>: the field must hold encoded bytes");
    static_assert(requires(const S& s) { s.template bytes_of<Name>(); },
                  "sluice: split_decoded<Name> decodes the encoded field itself: do not decode<Name> it first");
  }

  template <class S>
  void plan(std::span<const S> samples, scratch& sc, batch_layout& layout) const {
    drop(sc);
    const field_geometry g = detail::codec_geometry(codec_);
    std::vector<std::int64_t> shape;
    if (g.ndim != 0) shape.assign(g.shape.begin(), g.shape.begin() + g.ndim);
    else shape.push_back(static_cast<std::int64_t>(codec_.output_bytes()));
    sc.offset = layout.add_batched(Name.view(), dtype::u8, static_cast<std::int64_t>(samples.size()), shape);
    sc.samples = samples.data();
    sc.n = samples.size();
    sc.k = std::min(sc.n, static_cast<std::size_t>(policy_.device_count(sc.n)));
    // A job even for k = 0: it times the host's part, so the policy learns from every batch.
    std::vector<device_job::item> items;
    items.reserve(sc.k);
    for (std::size_t i = sc.n - sc.k; i < sc.n; ++i)
      items.push_back({samples[i].template bytes_of<Name>(), sample_context{.id = samples[i].id}});
    sc.owner = std::make_shared<job_owner>(std::make_shared<device_job>(std::move(items), codec_.output_bytes()));
    sc.job = sc.owner->job.get();
    sc.job->host_left.store(sc.n - sc.k, std::memory_order_relaxed);
    sc.job->writes_left.store(sc.n, std::memory_order_relaxed);
  }

  template <class S>
  void write(const S& s, std::size_t i, std::byte* base, scratch& sc, const sample_context& ctx) const {
    const std::span<std::byte> dst(base + sc.offset + i * codec_.output_bytes(), codec_.output_bytes());
    device_job* job = sc.job;
    if (!job->submitted.exchange(true, std::memory_order_acq_rel)) submit(sc, ctx);
    if (i < sc.n - sc.k) {
      decode_on_host(s, dst, ctx);
      counters_->host_images.fetch_add(1, std::memory_order_relaxed);
      if (job->host_left.fetch_sub(1, std::memory_order_acq_rel) == 1)
        job->host_done_ns.store(detail::now_ns(), std::memory_order_release);
    } else {
      const std::size_t j = i - (sc.n - sc.k);
      const std::uint64_t t0 = detail::now_ns();
      job->wait();
      counters_->host_wait_ns.fetch_add(detail::now_ns() - t0, std::memory_order_relaxed);
      if (job->decoded(j)) {
        std::memcpy(dst.data(), job->output(j).data(), dst.size());
        counters_->device_images.fetch_add(1, std::memory_order_relaxed);
      } else {
        counters_->fallbacks.fetch_add(1, std::memory_order_relaxed);
        decode_on_host(s, dst, ctx);
      }
    }
    if (job->writes_left.fetch_sub(1, std::memory_order_acq_rel) == 1) report(*job, sc);
  }

  template <class S>
  void finish(std::span<const S>, std::byte*, scratch&, const batch_layout&) const noexcept {}

 private:
  static void drop(scratch& sc) noexcept {
    sc.owner.reset();  // the last holder cancels a submitted job and waits for the device to let go
    sc.job = nullptr;
    sc.n = sc.k = 0;
  }

  void submit(scratch& sc, const sample_context& ctx) const {
    device_job& job = *sc.job;
    job.submitted_ns = detail::now_ns();
    if (job.size() == 0) {  // nothing for the device: it never sees the job, so it is complete now
      job.complete();
      return;
    }
    job.stamp(ctx.seed, ctx.epoch);  // plan() had the ids only
    counters_->batches.fetch_add(1, std::memory_order_relaxed);
    try {
      device_.submit(sc.owner->job);
    } catch (const std::exception& e) {
      device_failed(job, e.what());
    } catch (...) {
      device_failed(job, "a non-standard exception");
    }
  }

  void device_failed(device_job& job, const char* what) const noexcept {
    counters_->device_errors.fetch_add(1, std::memory_order_relaxed);
    try {
      std::lock_guard lk(counters_->m);
      counters_->last_error = what;
    } catch (...) {  // the count stays
    }
    for (std::size_t j = 0; j < job.size(); ++j) job.finish_item(j, false);
    job.complete();
  }

  void report(const device_job& job, const scratch& sc) const {
    const std::uint64_t host_done = sc.k < sc.n ? job.host_done_ns.load(std::memory_order_acquire) : job.submitted_ns;
    const std::uint64_t dev_done = sc.k > 0 ? job.completed_ns() : 0;
    policy_.observe({.batch = sc.n,
                     .on_device = sc.k,
                     .host_ns = host_done > job.submitted_ns ? host_done - job.submitted_ns : 0,
                     .device_ns = dev_done > job.submitted_ns ? dev_done - job.submitted_ns : 0});
  }

  template <class S>
  void decode_on_host(const S& s, std::span<std::byte> dst, const sample_context& ctx) const {
    try {
      try {
        codec_.decode(s.template bytes_of<Name>(), dst, ctx);
      } catch (const format_error& e) {
        throw format_error(std::string(s.origin), {.record = s.id}, "field '" + std::string(Name.view()) + "': " + e.cause());
      }
    } catch (...) {
      detail::throw_stage_error(stage_name, s.id);
    }
  }

  Codec codec_;
  Device device_;
  Policy policy_;
  std::shared_ptr<detail::split_counters> counters_;
};

// split_decode<"jpg">(codec, device, policy): the collator above, for field "jpg".
template <fixed_string Name, class Codec, class Device, class Policy>
  requires codec<std::remove_cvref_t<Codec>> && device_decoder<std::remove_cvref_t<Device>> &&
           placement::placement_policy<std::remove_cvref_t<Policy>>
auto split_decode(Codec&& c, Device&& d, Policy&& p) {
  return split_decoded<Name, std::remove_cvref_t<Codec>, std::remove_cvref_t<Device>, std::remove_cvref_t<Policy>>(
      std::forward<Codec>(c), std::forward<Device>(d), std::forward<Policy>(p));
}

}  // namespace sluice
