// sluice/core/tensor.hpp — the tensors of a batch: name, dtype, shape (batch first), where.
//
// A collated batch is a set of named, contiguous, row-major tensors that live in one block of the
// batch's slot storage (so one host-to-device copy moves them all). The slot keeps a
// `batch_layout`: per tensor its name, dtype, shape and byte offset in the block. A
// `tensor_view` is what the trainer sees: the same description plus the host pointer and, after
// a to_device stage, the device pointer. Views are valid while the batch (or a DLPack export of
// it) is held.
//
//   auto img = b.field("image");           // run time: dtype and shape checked by the caller
//   auto px  = img.as<std::uint8_t>();     // span over all elements; usage_error if not u8
//   img.shape()[0] == b.size();            // batch dimension first
//
// A batch has at most `max_tensors` tensors of at most `max_dims` dimensions; both are fixed so
// the layout lives inside the slot and costs no allocation per batch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"

namespace sluice {

inline constexpr std::size_t max_dims = 6;

// How an image's pixels are ordered: rows of interleaved channels (HWC, what decoders produce
// natively) or one plane per channel (CHW, what convolution layers take). `none`: not an image,
// or the producer does not say.
enum class image_layout : std::uint8_t { none, hwc, chw };
inline constexpr std::size_t max_tensors = 16;

// A name chosen at run time (a run-time collate's field, stage/any_collate.hpp), as storage that
// outlives every batch: each distinct name is kept once for the life of the process (a pipeline
// has a handful), so a batch that outlives its loader still names its tensors.
inline std::string_view intern_name(std::string_view name) {
  static std::mutex m;
  static std::set<std::string, std::less<>> names;
  const std::lock_guard lk(m);
  auto it = names.find(name);
  if (it == names.end()) it = names.emplace(name).first;
  return *it;
}

// One tensor of a batch, as the slot records it. `name` refers to storage that outlives every
// batch (a collator's compile-time name, a string literal or an interned name).
struct tensor_desc {
  std::string_view name;
  dtype type = dtype::u8;
  std::uint8_t ndim = 0;
  std::array<std::int64_t, max_dims> shape{};
  std::size_t offset = 0;  // bytes from the start of the slot's storage
  std::size_t bytes = 0;

  [[nodiscard]] std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

// The tensors of one batch. Offsets are aligned to `alignment` bytes.
struct batch_layout {
  static constexpr std::size_t alignment = 64;
  std::array<tensor_desc, max_tensors> tensors{};
  std::size_t count = 0;
  std::size_t bytes = 0;  // end of the last tensor: what the slot must hold

  void clear() noexcept {
    count = 0;
    bytes = 0;
  }
  // Appends a tensor of `type` and `shape` after the previous one; returns its byte offset.
  std::size_t add(std::string_view name, dtype type, std::span<const std::int64_t> shape) {
    if (count == max_tensors)
      throw usage_error("sluice: a batch holds at most " + std::to_string(max_tensors) + " tensors; '" +
                        std::string(name) + "' is one too many");
    for (std::size_t i = 0; i < count; ++i)
      if (tensors[i].name == name)
        throw usage_error("sluice: two collators emit a tensor named '" + std::string(name) + "'");
    if (shape.size() > max_dims)
      throw usage_error("sluice: tensor '" + std::string(name) + "' has " + std::to_string(shape.size()) +
                        " dimensions; at most " + std::to_string(max_dims));
    auto& t = tensors[count];
    t.name = name;
    t.type = type;
    t.ndim = static_cast<std::uint8_t>(shape.size());
    t.shape = {};
    for (std::size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
    t.offset = (bytes + alignment - 1) / alignment * alignment;
    t.bytes = static_cast<std::size_t>(t.numel()) * dtype_size(type);
    bytes = t.offset + t.bytes;
    ++count;
    return t.offset;
  }
  std::size_t add(std::string_view name, dtype type, std::initializer_list<std::int64_t> shape) {
    return add(name, type, std::span<const std::int64_t>(shape.begin(), shape.size()));
  }
  // A tensor of shape {n, item...}: n samples (or rows) of shape `item`; returns its byte offset.
  std::size_t add_batched(std::string_view name, dtype type, std::int64_t n, std::span<const std::int64_t> item) {
    if (item.size() >= max_dims)
      throw usage_error("sluice: tensor '" + std::string(name) + "' has " + std::to_string(item.size() + 1) +
                        " dimensions; at most " + std::to_string(max_dims));
    std::array<std::int64_t, max_dims> shape{};
    shape[0] = n;
    for (std::size_t i = 0; i < item.size(); ++i) shape[i + 1] = item[i];
    return add(name, type, std::span<const std::int64_t>(shape.data(), item.size() + 1));
  }
  [[nodiscard]] const tensor_desc* find(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < count; ++i)
      if (tensors[i].name == name) return &tensors[i];
    return nullptr;
  }
};

// What the trainer sees of one tensor.
class tensor_view {
 public:
  tensor_view() = default;
  tensor_view(const tensor_desc* d, std::byte* host, void* device, int device_id) noexcept
      : d_(d), host_(host), device_(device), device_id_(device_id) {}

  [[nodiscard]] explicit operator bool() const noexcept { return d_ != nullptr; }
  [[nodiscard]] std::string_view name() const noexcept { return d_->name; }
  [[nodiscard]] dtype type() const noexcept { return d_->type; }
  [[nodiscard]] std::size_t ndim() const noexcept { return d_->ndim; }
  [[nodiscard]] std::span<const std::int64_t> shape() const noexcept { return {d_->shape.data(), d_->ndim}; }
  // Row-major strides in elements (the tensors of a batch are contiguous).
  [[nodiscard]] std::array<std::int64_t, max_dims> strides() const noexcept {
    std::array<std::int64_t, max_dims> s{};
    std::int64_t acc = 1;
    for (std::size_t i = d_->ndim; i-- > 0;) {
      s[i] = acc;
      acc *= d_->shape[i];
    }
    return s;
  }
  [[nodiscard]] std::int64_t numel() const noexcept { return d_->numel(); }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return d_->bytes; }
  // Host memory (pinned when pin() is in the chain).
  [[nodiscard]] std::byte* data() const noexcept { return host_; }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {host_, d_->bytes}; }
  // Where a to_device stage put it (the host data when there is none), and which device:
  // -1 for host memory (also the host backend of to_device), else the CUDA device ordinal.
  [[nodiscard]] void* device_data() const noexcept { return device_ != nullptr ? device_ : host_; }
  [[nodiscard]] int device_id() const noexcept { return device_ != nullptr ? device_id_ : -1; }

  // The elements as T; a usage_error names the tensor when T is not its dtype.
  template <element_type T>
  [[nodiscard]] std::span<const T> as() const {
    check<T>();
    return {reinterpret_cast<const T*>(host_), static_cast<std::size_t>(numel())};
  }
  template <element_type T>
  [[nodiscard]] std::span<T> as_mutable() const {
    check<T>();
    return {reinterpret_cast<T*>(host_), static_cast<std::size_t>(numel())};
  }

 private:
  template <class T>
  void check() const {
    if (dtype_of<T> != d_->type)
      throw usage_error("sluice: tensor '" + std::string(d_->name) + "' holds " + dtype_name(d_->type) +
                        " elements, not " + dtype_name(dtype_of<T>));
  }
  const tensor_desc* d_ = nullptr;
  std::byte* host_ = nullptr;
  void* device_ = nullptr;
  int device_id_ = -1;
};

// A tensor whose element type the compiler knows (from `b.get<"name">()`).
template <element_type T>
class typed_tensor {
 public:
  using value_type = T;
  explicit typed_tensor(tensor_view v) noexcept : v_(v) {}
  [[nodiscard]] std::span<const T> values() const noexcept {
    return {reinterpret_cast<const T*>(v_.data()), static_cast<std::size_t>(v_.numel())};
  }
  [[nodiscard]] const T* data() const noexcept { return reinterpret_cast<const T*>(v_.data()); }
  [[nodiscard]] T* mutable_data() const noexcept { return reinterpret_cast<T*>(v_.data()); }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  [[nodiscard]] std::span<const std::int64_t> shape() const noexcept { return v_.shape(); }
  [[nodiscard]] std::int64_t numel() const noexcept { return v_.numel(); }
  [[nodiscard]] T* device_data() const noexcept { return static_cast<T*>(v_.device_data()); }
  [[nodiscard]] const tensor_view& view() const noexcept { return v_; }

 private:
  tensor_view v_;
};

}  // namespace sluice
