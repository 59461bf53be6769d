// sluice/core/batch.hpp — the batch a trainer receives, and the slot it lives in.
//
// A batch is a handle to one slot of the pipeline's ring: a set of named tensors (batch dimension
// first, core/tensor.hpp) in one block of slot storage, the sample ids, and where it sits in the
// epoch. It is move-only; when it is destroyed its slot goes back to the ring (the pool) and a
// worker may fill it again. Nothing is allocated per batch: a slot's storage grows to the largest
// batch it has held (variable-length fields) and is then reused.
//
//   for (auto& b : loader.epoch(e)) {
//     auto img = b.get<"image">();            // typed: float, shape {n, 3, 224, 224}; a misspelt
//     auto boxes = b.field("boxes");          //   name does not compile; by name at run time
//     auto labels = b.labels();               // the "label" tensor (classification)
//   }                                          // each batch returns to the ring as the loop advances
//
// The classic collate (one block a sample plus a label) yields the tensors "data" and "label";
// `data<T>()`, `bytes()`, `sample(i)` and `sample_bytes()` are views of the first tensor.
//
// A batch may outlive the loop and even the loader (the ring's memory is reference-counted), but
// while it is held its slot cannot be refilled: a trainer that keeps more batches than the ring
// has slots gets a usage_error from the loader rather than a deadlock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice {

namespace detail {

// What every slot has, whatever the pipeline's type. The typed ring derives from ring_base and
// owns the slots; the batch talks to it through one virtual call per batch (never per sample).
struct slot_base {
  std::byte* data = nullptr;        // host storage: every tensor of the batch (layout.bytes used)
  std::size_t storage_bytes = 0;    // allocated; grows to the largest batch, then reused
  std::size_t used_bytes = 0;       // = layout.bytes: what a transfer stage copies
  batch_layout layout;              // the batch's tensors, as offsets into data
  std::uint64_t* ids = nullptr;     // capacity_samples entries
  std::size_t count = 0;            // samples in this batch
  std::size_t skipped = 0;          // samples dropped by the skip policy
  std::size_t sample_bytes = 0;     // bytes of one sample of the first tensor
  dtype type = dtype::u8;           // dtype of the first tensor
  std::uint64_t index = 0;          // the ring's ticket: batch index within this run of the epoch
  std::uint64_t epoch_index = 0;    // first_position / batch size: the batch's index in the epoch
  std::uint64_t epoch = 0;
  std::uint64_t first_position = 0;  // position in the epoch order of this batch's first sample
  void* device_data = nullptr;      // set by a to_device stage; equals data on the host backend
  int device_id = -1;               // CUDA device of device_data; -1: host memory
  void* ready_event = nullptr;      // set by a to_device stage (a cudaEvent_t), else null
  void* stage_state = nullptr;      // the typed per-slot state of the batch stages
  // Holders of the slot: the batch handle and each DLPack export. The last one returns it.
  std::atomic<std::uint32_t> holders{0};
};

class ring_base {
 public:
  virtual void release(slot_base& s) noexcept = 0;

 protected:
  ~ring_base() = default;
};

// One hold on a batch slot, and the one place the hold count is kept: the batch handle has one
// (the ring gave it, holders == 1), each DLPack export and so each Python tensor another (a copy).
// The last hold dropped returns the slot to its ring; the ring reference goes after it, so the
// ring outlives every slot it lent. acq_rel on the drop: whoever drops the last hold sees every
// write of the other holders before the ring hands the slot to a worker; a copy is made while a
// hold is alive, so its relaxed increment suffices (as for shared_ptr).
class slot_hold {
 public:
  slot_hold() = default;
  // Adopts the hold the ring counted when it handed the slot out.
  slot_hold(std::shared_ptr<ring_base> ring, slot_base* slot) noexcept : ring_(std::move(ring)), slot_(slot) {}
  slot_hold(const slot_hold& o) noexcept : ring_(o.ring_), slot_(o.slot_) {
    if (slot_ != nullptr) slot_->holders.fetch_add(1, std::memory_order_relaxed);
  }
  slot_hold(slot_hold&& o) noexcept : ring_(std::move(o.ring_)), slot_(std::exchange(o.slot_, nullptr)) {}
  slot_hold& operator=(slot_hold o) noexcept {
    reset();
    ring_ = std::move(o.ring_);
    slot_ = std::exchange(o.slot_, nullptr);
    return *this;
  }
  ~slot_hold() { reset(); }
  void reset() noexcept {
    if (slot_ != nullptr && slot_->holders.fetch_sub(1, std::memory_order_acq_rel) == 1) ring_->release(*slot_);
    slot_ = nullptr;
    ring_.reset();
  }
  [[nodiscard]] slot_base* get() const noexcept { return slot_; }
  [[nodiscard]] slot_base* operator->() const noexcept { return slot_; }
  [[nodiscard]] explicit operator bool() const noexcept { return nullptr != slot_; }

 private:
  std::shared_ptr<ring_base> ring_;
  slot_base* slot_ = nullptr;
};

}  // namespace detail

class batch {
 public:
  batch() = default;
  batch(std::shared_ptr<detail::ring_base> ring, detail::slot_base* slot) noexcept : slot_(std::move(ring), slot) {}
  batch(const batch&) = delete;
  batch& operator=(const batch&) = delete;
  batch(batch&&) noexcept = default;
  batch& operator=(batch&& o) noexcept {
    if (this != &o) slot_ = std::move(o.slot_);
    return *this;
  }
  ~batch() = default;

  // Gives up this handle's hold on the slot (the destructor does the same). The slot returns to
  // the ring when no DLPack export of it is alive either.
  void reset() noexcept { slot_.reset(); }

  [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(slot_); }
  [[nodiscard]] std::size_t size() const noexcept { return slot_->count; }
  [[nodiscard]] bool empty() const noexcept { return slot_->count == 0; }
  [[nodiscard]] std::size_t skipped() const noexcept { return slot_->skipped; }
  [[nodiscard]] std::size_t sample_bytes() const noexcept { return slot_->sample_bytes; }
  [[nodiscard]] std::size_t sample_elements() const noexcept {
    return slot_->sample_bytes / dtype_size(slot_->type);
  }
  [[nodiscard]] dtype type() const noexcept { return slot_->type; }
  // The batch's index in the epoch: first_position() / the batch size, so a resumed epoch counts
  // on from where the interrupted one stood (a state saved after batch 9 resumes with batch 10),
  // as checkpoint-every-k logic expects. run_index() counts from 0 in each run of an epoch
  // (epoch(e) or resume(state)): the same numbers when the epoch started at its beginning.
  [[nodiscard]] std::uint64_t index() const noexcept { return slot_->epoch_index; }
  [[nodiscard]] std::uint64_t run_index() const noexcept { return slot_->index; }
  [[nodiscard]] std::uint64_t epoch() const noexcept { return slot_->epoch; }
  [[nodiscard]] std::uint64_t first_position() const noexcept { return slot_->first_position; }

  // The tensors of the batch, in the order the collator wrote them.
  [[nodiscard]] std::size_t tensor_count() const noexcept { return slot_->layout.count; }
  [[nodiscard]] tensor_view tensor(std::size_t i) const noexcept {
    const tensor_desc& d = slot_->layout.tensors[i];
    return {&d, slot_->data + d.offset,
            slot_->device_data != nullptr ? static_cast<std::byte*>(slot_->device_data) + d.offset : nullptr,
            slot_->device_id};
  }
  [[nodiscard]] bool has_field(std::string_view name) const noexcept { return slot_->layout.find(name) != nullptr; }
  // A tensor by name; a usage_error lists the names the batch has.
  [[nodiscard]] tensor_view field(std::string_view name) const {
    if (const tensor_desc* d = slot_->layout.find(name)) return tensor(static_cast<std::size_t>(d - slot_->layout.tensors.data()));
    std::string have;
    for (std::size_t i = 0; i < slot_->layout.count; ++i)
      have += (i ? ", " : "") + std::string(slot_->layout.tensors[i].name);
    throw usage_error("sluice: the batch has no tensor '" + std::string(name) + "' (it has: " + have + ")");
  }

  // Sample i's rows of a ragged field: ragged<"f"> writes "f" {rows, row...} and "f.offsets"
  // int64 {n + 1} (sample i is rows [offsets[i], offsets[i + 1])); this is that part of "f" as T,
  // row after row. A usage_error names the field when the batch has no "f.offsets", T is not its
  // dtype, i is not a sample of the batch, or the offsets do not fit "f".
  template <element_type T>
  [[nodiscard]] std::span<const T> rows_of(std::string_view name, std::size_t i) const {
    const tensor_view v = field(name);
    const std::string off_name = std::string(name) + ".offsets";
    if (!has_field(off_name))
      throw usage_error("sluice: rows_of(\"" + std::string(name) + "\"): the batch has no '" + off_name +
                        "' (rows_of reads a field collated by ragged<>)");
    const std::span<const T> all = v.as<T>();
    const std::span<const std::int64_t> off = field(off_name).as<std::int64_t>();
    if (i + 1 >= off.size())
      throw usage_error("sluice: rows_of(\"" + std::string(name) + "\", " + std::to_string(i) + "): the batch has " +
                        std::to_string(off.empty() ? 0 : off.size() - 1) + " samples");
    const std::int64_t rows = v.ndim() == 0 ? 0 : v.shape()[0];
    const std::size_t per_row = rows == 0 ? 0 : static_cast<std::size_t>(v.numel() / rows);
    if (off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > rows)
      throw usage_error("sluice: rows_of(\"" + std::string(name) + "\", " + std::to_string(i) + "): offsets " +
                        std::to_string(off[i]) + ".." + std::to_string(off[i + 1]) + " do not fit its " +
                        std::to_string(rows) + " rows");
    return all.subspan(static_cast<std::size_t>(off[i]) * per_row, static_cast<std::size_t>(off[i + 1] - off[i]) * per_row);
  }

  // The first tensor (the classic collate's "data"): all of it, typed, or one sample's bytes.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {first_data(), slot_->count * slot_->sample_bytes};
  }
  [[nodiscard]] std::span<std::byte> mutable_bytes() noexcept {
    return {first_data(), slot_->count * slot_->sample_bytes};
  }
  // T must match type(): std::uint8_t or std::byte for u8, float for f32, and so on.
  template <element_type T>
  [[nodiscard]] std::span<const T> data() const {
    check_type<T>();
    return {reinterpret_cast<const T*>(first_data()), slot_->count * sample_elements()};
  }
  template <element_type T>
  [[nodiscard]] std::span<T> mutable_data() {
    check_type<T>();
    return {reinterpret_cast<T*>(first_data()), slot_->count * sample_elements()};
  }
  [[nodiscard]] std::span<const std::byte> sample(std::size_t i) const noexcept {
    return {first_data() + i * slot_->sample_bytes, slot_->sample_bytes};
  }
  // The "label" tensor when the batch has one of int64 (classification), else empty.
  [[nodiscard]] std::span<const std::int64_t> labels() const noexcept {
    const tensor_desc* d = slot_->layout.find("label");
    if (d == nullptr || d->type != dtype::i64) return {};
    return {reinterpret_cast<const std::int64_t*>(slot_->data + d->offset), static_cast<std::size_t>(d->numel())};
  }
  [[nodiscard]] std::span<const std::uint64_t> ids() const noexcept { return {slot_->ids, slot_->count}; }

  // Where a to_device stage put the batch (host data when there is no device), and the event
  // that marks the copy complete (null on the host backend).
  [[nodiscard]] void* device_data() const noexcept {
    return slot_->device_data != nullptr ? slot_->device_data : static_cast<void*>(slot_->data);
  }
  [[nodiscard]] void* ready_event() const noexcept { return slot_->ready_event; }

  // For batch stages: the slot this batch holds.
  [[nodiscard]] detail::slot_base& slot() noexcept { return *slot_.get(); }
  [[nodiscard]] const detail::slot_base& slot() const noexcept { return *slot_.get(); }
  // For holders that outlive this handle (a DLPack export, core/dlpack.hpp): another hold on the
  // slot (an empty one from an empty handle).
  [[nodiscard]] detail::slot_hold hold() const noexcept { return slot_; }

 private:
  template <class T>
  void check_type() const {
    if (dtype_of<T> != slot_->type)
      throw usage_error(std::string("sluice: batch holds ") + dtype_name(slot_->type) + " data, not " +
                        dtype_name(dtype_of<T>) + (slot_->type == dtype::f32 ? "; ask for data<float>()" :
                                                   slot_->type == dtype::u8 ? "; ask for data<std::uint8_t>()" : ""));
  }
  [[nodiscard]] std::byte* first_data() const noexcept {
    return slot_->data + (slot_->layout.count ? slot_->layout.tensors[0].offset : 0);
  }
  detail::slot_hold slot_;
};

// One tensor a collator emits, as the compiler knows it: its name and element type.
template <fixed_string Name, element_type T>
struct output {
  static constexpr auto name = Name;
  using value_type = T;
};

namespace detail {
template <fixed_string Name, class T = void>
struct no_such_field {
  static_assert(always_false_v<T>,
                "sluice: the batch has no field of this name (see no_such_field<\"...\"> in this error for the "
                "name you asked for); check its spelling against the collate(...) of the pipeline");
  using type = std::uint8_t;
};
template <fixed_string Name, class... Outs>
struct find_output {
  using type = typename no_such_field<Name>::type;
};
template <fixed_string Name, class First, class... Rest>
  requires(!(First::name == Name))
struct find_output<Name, First, Rest...> {
  using type = typename find_output<Name, Rest...>::type;
};
template <fixed_string Name, class First, class... Rest>
  requires(First::name == Name)
struct find_output<Name, First, Rest...> {
  using type = typename First::value_type;
};
}  // namespace detail

// A batch whose tensors the compiler knows: `get<"name">()` is checked at compile time (a name
// the collator does not emit is an error naming it) and typed with the field's element type.
template <class... Outputs>
class typed_batch : public batch {
 public:
  typed_batch() = default;
  explicit typed_batch(batch&& b) noexcept : batch(std::move(b)) {}
  template <fixed_string Name>
  [[nodiscard]] auto get() const {
    using T = typename detail::find_output<Name, Outputs...>::type;
    return typed_tensor<T>(field(Name.view()));
  }
  // Sample i's rows of ragged field Name, typed: b.rows_of<"boxes">(i) (see batch::rows_of).
  using batch::rows_of;
  template <fixed_string Name>
  [[nodiscard]] auto rows_of(std::size_t i) const {
    using T = typename detail::find_output<Name, Outputs...>::type;
    return batch::rows_of<T>(Name.view(), i);
  }
};

// The slot a batch-stage hook is given (core/concepts.hpp lists the hooks): the batch's storage,
// layout, ids and count, and where a device copy goes.
using batch_slot = detail::slot_base;

}  // namespace sluice
