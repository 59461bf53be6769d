// sluice/stage/to_device.hpp — `to_device(stream)`: each batch is copied to device memory
// asynchronously, and the trainer's stream is ordered after the copy without a host wait.
//
// With the CUDA runtime (SLUICE_HAS_CUDART(), link sluice::cuda): a worker that finished collating
// a batch queues cudaMemcpyAsync from its slot (pinned, after pin()) into a block of the stage's
// capped device pool, on the stage's copy stream, and records the slot's event; the trainer's
// stream waits on that event when it receives the batch (no host synchronisation); the block
// returns to the pool fenced on the trainer's stream when the batch is dropped, so a later copy
// never overwrites data a kernel still reads. Without the runtime, "device" memory is host memory
// and the copy a memcpy: the same pipeline builds, runs and is tested anywhere.
// Errors: a device pool cap below one batch per ring slot fails that batch with a usage_error
// naming the cap; without a GPU the CUDA stage's constructor throws cuda_error with the reason.
// Threads: the hooks run on the workers and the consumer as core/concepts.hpp lists; copies of the
// stage share the copy stream, the pool and the counters. Every rule: docs/device.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "sluice/core/batch.hpp"
#include "sluice/core/block_pool.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"

#if SLUICE_HAS_CUDART()
#include "sluice/cuda/memory.hpp"
#include "sluice/cuda/runtime.hpp"
#endif

namespace sluice {

using to_device_options = pool_options;  // core/block_pool.hpp: the device bytes the pool may hold, ...

struct to_device_stats {
  std::uint64_t batches = 0;       // copies queued
  std::uint64_t bytes_copied = 0;  // bytes queued host -> device
  std::uint64_t slot_waits = 0;    // a worker waited for a slot's previous copy to finish
  pool_stats pool;
};

namespace detail {
struct transfer_counters {
  std::atomic<std::uint64_t> batches{0}, bytes{0}, slot_waits{0}, epoch{0};
};
}  // namespace detail

inline namespace SLUICE_BACKEND_NAMESPACE {  // core/config.hpp: the backend is part of the names
#if SLUICE_HAS_CUDART()

class to_device_stage {
 public:
  using stage_concept = batch_stage_tag;
  static constexpr std::string_view name = "to_device";
  static constexpr hook hooks =
      hook::before_fill | hook::on_filled | hook::on_deliver | hook::on_release | hook::on_destroy;
  using pool_type = cuda::device_pool;

  struct slot_state {
    pool_type::lease block;        // device memory of the batch in this slot, while it lives
    cudaEvent_t copied = nullptr;  // recorded on the copy stream after this slot's last copy
    bool copy_queued = false;
  };

  explicit to_device_stage(cudaStream_t consumer = nullptr, to_device_options o = {})
      : state_(std::make_shared<state>(consumer, o)) {}

  // --- hooks called by the loader ------------------------------------------------------------
  // Worker, before collate writes the slot again: the previous copy out of it must be done.
  void before_fill(batch_slot&, slot_state& st) {
    st.block.reset();  // a batch that was never delivered (cancelled epoch) still holds one
    if (st.copy_queued) {
      if (cudaEventQuery(st.copied) == cudaErrorNotReady) state_->counters.slot_waits.fetch_add(1, std::memory_order_relaxed);
      cuda::check(cudaEventSynchronize(st.copied), "cudaEventSynchronize (slot's previous copy)");
      st.copy_queued = false;
    }
  }
  // Worker, after collate: queue the copy.
  void on_filled(batch_slot& s, slot_state& st) {
    const std::size_t bytes = s.used_bytes;
    if (bytes == 0) return;
    cuda::check(cudaSetDevice(state_->device), "cudaSetDevice");
    if (st.copied == nullptr)
      cuda::check(cudaEventCreateWithFlags(&st.copied, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    apply_epoch_rule(s.epoch);
    auto block = state_->pool.acquire(bytes);
    const cudaStream_t copy = state_->copy_stream.get();
    cuda::order_after_last_use(block, copy);
    cuda::check(cudaMemcpyAsync(block.data(), s.data, bytes, cudaMemcpyHostToDevice, copy), "cudaMemcpyAsync (batch to device)");
    cuda::check(cudaEventRecord(st.copied, copy), "cudaEventRecord");
    st.copy_queued = true;
    s.device_data = block.data();
    s.device_id = state_->device;
    s.ready_event = st.copied;
    st.block = std::move(block);
    state_->counters.batches.fetch_add(1, std::memory_order_relaxed);
    state_->counters.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  // Consumer, in next(): its stream waits for the copy on the device.
  void on_deliver(batch_slot&, slot_state& st) {
    if (st.copy_queued) cuda::check(cudaStreamWaitEvent(state_->consumer, st.copied, 0), "cudaStreamWaitEvent");
  }
  // Consumer, when the batch is dropped: the block returns once the consumer's queued work is done.
  void on_release(batch_slot& s, slot_state& st) noexcept {
    if (st.block) (void)cudaEventRecord(st.block.fence(), state_->consumer);
    st.block.reset();
    s.device_data = nullptr;
    s.device_id = -1;
    s.ready_event = nullptr;
  }
  void on_destroy(batch_slot&, slot_state& st) noexcept {
    if (st.copied != nullptr) {
      (void)cudaEventSynchronize(st.copied);  // the pinned slot memory is freed next
      (void)cudaEventDestroy(st.copied);
      st.copied = nullptr;
    }
    st.block.reset();
  }

  // --- for users and tests -------------------------------------------------------------------
  [[nodiscard]] to_device_stats stats() const {
    const auto& c = state_->counters;
    return {c.batches.load(std::memory_order_relaxed), c.bytes.load(std::memory_order_relaxed),
            c.slot_waits.load(std::memory_order_relaxed), state_->pool.stats()};
  }
  [[nodiscard]] cudaStream_t copy_stream() const noexcept { return state_->copy_stream.get(); }
  [[nodiscard]] cudaStream_t consumer_stream() const noexcept { return state_->consumer; }
  [[nodiscard]] pool_type& pool() const noexcept { return state_->pool; }

 private:
  void apply_epoch_rule(std::uint64_t epoch) {
    std::uint64_t seen = state_->counters.epoch.load(std::memory_order_relaxed);
    while (epoch > seen)
      if (state_->counters.epoch.compare_exchange_weak(seen, epoch, std::memory_order_relaxed)) {
        state_->pool.end_epoch();
        break;
      }
  }
  struct state {
    state(cudaStream_t c, const to_device_options& o)
        : consumer(c), pool({}, o.limits(), "device memory pool") {
      cuda::check(cudaGetDevice(&device), "cudaGetDevice");
    }
    ~state() {
      (void)cudaStreamSynchronize(copy_stream.get());
      (void)cudaStreamSynchronize(consumer);  // the pool frees blocks the consumer may still read
    }
    cudaStream_t consumer;
    int device = 0;
    cuda::stream copy_stream;
    detail::transfer_counters counters;
    pool_type pool;
  };
  std::shared_ptr<state> state_;
};

[[nodiscard]] inline to_device_stage to_device(cudaStream_t consumer, to_device_options o = {}) {
  return to_device_stage(consumer, o);
}

#else  // host backend: host memory stands in for the device

class to_device_stage {
 public:
  using stage_concept = batch_stage_tag;
  static constexpr std::string_view name = "to_device";
  static constexpr hook hooks = hook::before_fill | hook::on_filled | hook::on_release | hook::on_destroy;
  using pool_type = block_pool<host_block_backend>;

  struct slot_state {
    pool_type::lease block;
  };

  explicit to_device_stage(to_device_options o = {}) : state_(std::make_shared<state>(o)) {}

  void before_fill(batch_slot&, slot_state& st) { st.block.reset(); }
  void on_filled(batch_slot& s, slot_state& st) {
    const std::size_t bytes = s.used_bytes;
    if (bytes == 0) return;
    std::uint64_t seen = state_->counters.epoch.load(std::memory_order_relaxed);
    while (s.epoch > seen)
      if (state_->counters.epoch.compare_exchange_weak(seen, s.epoch, std::memory_order_relaxed)) {
        state_->pool.end_epoch();
        break;
      }
    auto block = state_->pool.acquire(bytes);
    std::memcpy(block.data(), s.data, bytes);
    s.device_data = block.data();
    s.ready_event = nullptr;
    st.block = std::move(block);
    state_->counters.batches.fetch_add(1, std::memory_order_relaxed);
    state_->counters.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  void on_release(batch_slot& s, slot_state& st) noexcept {
    st.block.reset();
    s.device_data = nullptr;
    s.device_id = -1;
  }
  void on_destroy(batch_slot&, slot_state& st) noexcept { st.block.reset(); }

  [[nodiscard]] to_device_stats stats() const {
    const auto& c = state_->counters;
    return {c.batches.load(std::memory_order_relaxed), c.bytes.load(std::memory_order_relaxed),
            c.slot_waits.load(std::memory_order_relaxed), state_->pool.stats()};
  }
  [[nodiscard]] pool_type& pool() const noexcept { return state_->pool; }

 private:
  struct state {
    explicit state(const to_device_options& o) : pool({}, o.limits(), "device memory pool (host stand-in)") {}
    detail::transfer_counters counters;
    pool_type pool;
  };
  std::shared_ptr<state> state_;
};

#endif

// The consumer stream is the legacy default stream (CUDA) when none is given.
[[nodiscard]] inline to_device_stage to_device(to_device_options o = {}) {
#if SLUICE_HAS_CUDART()
  return to_device_stage(nullptr, o);
#else
  return to_device_stage(o);
#endif
}
}  // namespace SLUICE_BACKEND_NAMESPACE

}  // namespace sluice
