// sluice/core/batch.hpp — the batch a trainer receives, and the slot it lives in.
//
// A batch is a handle to one slot of the pipeline's ring: contiguous sample data (uint8 or
// float32), the labels and sample ids, and where it sits in the epoch. It is move-only; when it is
// destroyed its slot goes back to the ring (the pool) and a worker may fill it again. Nothing is
// allocated per batch: slots are allocated once, on first use, and reused.
//
//   for (auto& b : loader.epoch(e)) {
//     auto pixels = b.data<std::uint8_t>();   // b.size() samples of b.sample_elements() each
//     auto labels = b.labels();
//   }                                          // each batch returns to the ring as the loop advances
//
// A batch may outlive the loop and even the loader (the ring's memory is reference-counted), but
// while it is held its slot cannot be refilled: a trainer that keeps more batches than the ring
// has slots gets a usage_error from the loader rather than a deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/core/error.hpp"

namespace sluice {

enum class dtype : std::uint8_t { u8, f32 };

[[nodiscard]] constexpr std::size_t dtype_size(dtype t) noexcept { return t == dtype::f32 ? 4 : 1; }
[[nodiscard]] constexpr const char* dtype_name(dtype t) noexcept { return t == dtype::f32 ? "f32" : "u8"; }

namespace detail {

// What every slot has, whatever the pipeline's type. The typed ring derives from ring_base and
// owns the slots; the batch talks to it through one virtual call per batch (never per sample).
struct slot_base {
  std::byte* data = nullptr;        // host storage: capacity_samples * sample_bytes
  std::size_t storage_bytes = 0;
  std::int64_t* labels = nullptr;   // capacity_samples entries
  std::uint64_t* ids = nullptr;     // capacity_samples entries
  std::size_t count = 0;            // samples in this batch
  std::size_t skipped = 0;          // samples dropped by the skip policy
  std::size_t sample_bytes = 0;     // bytes of one collated sample
  dtype type = dtype::u8;
  std::uint64_t index = 0;          // batch index within the epoch run
  std::uint64_t epoch = 0;
  std::uint64_t first_position = 0;  // position in the epoch order of this batch's first sample
  void* device_data = nullptr;      // set by a to_device stage; equals data on the host backend
  void* ready_event = nullptr;      // set by a to_device stage (a cudaEvent_t), else null
  void* stage_state = nullptr;      // the typed per-slot state of the batch stages
};

class ring_base {
 public:
  virtual void release(slot_base& s) noexcept = 0;

 protected:
  ~ring_base() = default;
};

}  // namespace detail

class batch {
 public:
  batch() = default;
  batch(std::shared_ptr<detail::ring_base> ring, detail::slot_base* slot) noexcept
      : ring_(std::move(ring)), slot_(slot) {}
  batch(const batch&) = delete;
  batch& operator=(const batch&) = delete;
  batch(batch&& o) noexcept : ring_(std::move(o.ring_)), slot_(std::exchange(o.slot_, nullptr)) {}
  batch& operator=(batch&& o) noexcept {
    if (this != &o) {
      reset();
      ring_ = std::move(o.ring_);
      slot_ = std::exchange(o.slot_, nullptr);
    }
    return *this;
  }
  ~batch() { reset(); }

  // Returns the slot to the ring now (the destructor does the same).
  void reset() noexcept {
    if (slot_ != nullptr) {
      ring_->release(*slot_);
      slot_ = nullptr;
    }
    ring_.reset();
  }

  [[nodiscard]] explicit operator bool() const noexcept { return slot_ != nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return slot_->count; }
  [[nodiscard]] bool empty() const noexcept { return slot_->count == 0; }
  [[nodiscard]] std::size_t skipped() const noexcept { return slot_->skipped; }
  [[nodiscard]] std::size_t sample_bytes() const noexcept { return slot_->sample_bytes; }
  [[nodiscard]] std::size_t sample_elements() const noexcept {
    return slot_->sample_bytes / dtype_size(slot_->type);
  }
  [[nodiscard]] dtype type() const noexcept { return slot_->type; }
  [[nodiscard]] std::uint64_t index() const noexcept { return slot_->index; }
  [[nodiscard]] std::uint64_t epoch() const noexcept { return slot_->epoch; }
  [[nodiscard]] std::uint64_t first_position() const noexcept { return slot_->first_position; }

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {slot_->data, slot_->count * slot_->sample_bytes};
  }
  [[nodiscard]] std::span<std::byte> mutable_bytes() noexcept {
    return {slot_->data, slot_->count * slot_->sample_bytes};
  }
  // Typed view of the data; T must match type() (uint8_t for u8, float for f32).
  template <class T>
  [[nodiscard]] std::span<const T> data() const {
    check_type<T>();
    return {reinterpret_cast<const T*>(slot_->data), slot_->count * sample_elements()};
  }
  template <class T>
  [[nodiscard]] std::span<T> mutable_data() {
    check_type<T>();
    return {reinterpret_cast<T*>(slot_->data), slot_->count * sample_elements()};
  }
  // One sample's bytes.
  [[nodiscard]] std::span<const std::byte> sample(std::size_t i) const noexcept {
    return {slot_->data + i * slot_->sample_bytes, slot_->sample_bytes};
  }
  [[nodiscard]] std::span<const std::int64_t> labels() const noexcept { return {slot_->labels, slot_->count}; }
  [[nodiscard]] std::span<const std::uint64_t> ids() const noexcept { return {slot_->ids, slot_->count}; }

  // Where a to_device stage put the batch (host data when there is no device), and the event
  // that marks the copy complete (null on the host backend).
  [[nodiscard]] void* device_data() const noexcept {
    return slot_->device_data != nullptr ? slot_->device_data : static_cast<void*>(slot_->data);
  }
  [[nodiscard]] void* ready_event() const noexcept { return slot_->ready_event; }

  // For batch stages: the slot this batch holds.
  [[nodiscard]] detail::slot_base& slot() noexcept { return *slot_; }
  [[nodiscard]] const detail::slot_base& slot() const noexcept { return *slot_; }

 private:
  template <class T>
  void check_type() const {
    constexpr bool is_u8 = sizeof(T) == 1;
    constexpr bool is_f32 = std::is_same_v<std::remove_cv_t<T>, float>;
    static_assert(is_u8 || is_f32, "sluice::batch::data<T>: T is std::uint8_t/std::byte (u8) or float (f32)");
    if ((is_u8 && slot_->type != dtype::u8) || (is_f32 && slot_->type != dtype::f32))
      throw usage_error(std::string("sluice: batch holds ") + dtype_name(slot_->type) +
                        " data; ask for data<" + (slot_->type == dtype::f32 ? "float" : "std::uint8_t") + ">()");
  }
  std::shared_ptr<detail::ring_base> ring_;
  detail::slot_base* slot_ = nullptr;
};

}  // namespace sluice
