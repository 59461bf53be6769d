// sluice/core/dlpack.hpp — a batch's tensors as DLPack tensors, zero copy (PyTorch, JAX, CuPy, ...).
//
// Any tensor of a batch exports as a `DLManagedTensor*` that points into the batch's own slot
// memory: nothing is copied. The export holds the slot like the batch handle does, so the handle
// may be dropped first: the slot goes back to the ring (and a worker may refill it) only when the
// handle and every export of it are gone. The consumer calls the export's `deleter` once, when it
// is done (at::fromDLPack and the Python capsule protocol do so when the last tensor dies); the
// deleter may run on any thread, and after the loader is destroyed (the ring's memory is
// reference-counted).
//
//   auto img = at::fromDLPack(sluice::to_dlpack(b, "image"));     // by name; usage_error if absent
//   auto box = at::fromDLPack(sluice::to_dlpack<"boxes">(b));      // typed batch: checked when compiled
//   b.reset();                                                       // the tensors keep the slot
//
// What an export describes:
//   data     the tensor's first element (byte_offset 0): the host memory of the slot, or, after a
//            to_device stage, its device copy. The 64-byte alignment of a batch's tensors is kept;
//            DLPack's old 256-byte rule is not (no framework requires it).
//   device   kDLCPU (id 0) for host memory, the host backend of to_device included; kDLCUDA with
//            the ordinal for a CUDA device copy (wait on batch::ready_event() before reading).
//   dtype    u8..u64 kDLUInt, i8..i64 kDLInt, f16/f32/f64 kDLFloat, bf16 kDLBfloat (16 bits),
//            bool kDLBool where the DLPack header has it (0.8 and later), else kDLUInt 8 bits, as
//            libtorch 1.x reads it. Lanes 1.
//   shape    the tensor's shape, batch dimension first; strides in elements, row-major (the
//            tensors of a batch are contiguous), always given.
// Each export costs one small allocation (its context: the managed tensor, shape and strides, and
// a reference to the ring); nothing else. Writing through an export writes the batch: the flags of
// a versioned export say it is writable.
//
// DLPack 1.x headers (`DLManagedTensorVersioned`) also get `to_dlpack_versioned(...)`, the same
// export with a version and flags; with 0.x headers it does not exist.
//
// Availability: the whole header needs <dlpack/dlpack.h> (Debian: libdlpack-dev; the CMake target
// sluice::dlpack adds its directory). Without it this header declares nothing and
// SLUICE_HAS_DLPACK() is 0. libtorch ships the same header as <ATen/dlpack.h>, under the same
// include guard: whichever comes first defines the types, so a translation unit may include torch
// and this header in either order (their layouts agree for every DLPack 0.x and 1.x version).
#pragma once

#include "sluice/core/config.hpp"

#if defined(__has_include)
#  if __has_include(<dlpack/dlpack.h>)
#    define SLUICE_HAS_DLPACK_IMPL 1
#  else
#    define SLUICE_HAS_DLPACK_IMPL 0
#  endif
#else
#  define SLUICE_HAS_DLPACK_IMPL 0
#endif
// 1 when this header exports batches to DLPack (function-like: a misspelt use does not compile).
#define SLUICE_HAS_DLPACK() SLUICE_HAS_DLPACK_IMPL

#if SLUICE_HAS_DLPACK()

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/core/batch.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/tensor.hpp"

// kDLBool appeared in DLPack 0.8; DLManagedTensorVersioned in 1.0 (which dropped DLPACK_VERSION).
#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
#  define SLUICE_DLPACK_VERSIONED 1
#  define SLUICE_DLPACK_KDLBOOL 1
#elif defined(DLPACK_VERSION) && DLPACK_VERSION >= 80
#  define SLUICE_DLPACK_VERSIONED 0
#  define SLUICE_DLPACK_KDLBOOL 1
#else
#  define SLUICE_DLPACK_VERSIONED 0
#  define SLUICE_DLPACK_KDLBOOL 0
#endif

namespace sluice {

namespace detail {

[[nodiscard]] inline DLDataType dlpack_dtype(dtype t) noexcept {
  auto make = [](auto code, std::size_t bits) {
    return DLDataType{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  };
  const std::size_t bits = dtype_size(t) * 8;
  switch (t) {
    case dtype::u8: case dtype::u16: case dtype::u32: case dtype::u64: return make(kDLUInt, bits);
    case dtype::i8: case dtype::i16: case dtype::i32: case dtype::i64: return make(kDLInt, bits);
    case dtype::f16: case dtype::f32: case dtype::f64: return make(kDLFloat, bits);
    case dtype::bf16: return make(kDLBfloat, 16);
    case dtype::boolean:
#if SLUICE_DLPACK_KDLBOOL
      return make(kDLBool, 8);
#else
      return make(kDLUInt, 8);
#endif
  }
  return make(kDLUInt, 8);
}

// What an export owns: one allocation holding the managed tensor (Managed: DLManagedTensor or
// DLManagedTensorVersioned), its shape and strides, and a hold on the slot and its ring.
template <class Managed>
struct dlpack_export {
  Managed managed{};
  std::shared_ptr<ring_base> ring;
  slot_base* slot = nullptr;
  std::int64_t shape[max_dims]{};
  std::int64_t strides[max_dims]{};

  static void deleter(Managed* self) noexcept {
    if (self == nullptr) return;
    auto* ctx = static_cast<dlpack_export*>(self->manager_ctx);
    // acq_rel: whoever drops the last hold sees every write of the other holders before the
    // ring hands the slot to a worker (the same rule as batch::reset()).
    if (ctx->slot->holders.fetch_sub(1, std::memory_order_acq_rel) == 1) ctx->ring->release(*ctx->slot);
    delete ctx;  // then the ring reference: the ring may be destroyed here
  }
};

template <class Managed>
[[nodiscard]] Managed* export_tensor(const batch& b, const tensor_view& v) {
  auto ctx = std::make_unique<dlpack_export<Managed>>();
  const auto st = v.strides();
  for (std::size_t i = 0; i < v.ndim(); ++i) {
    ctx->shape[i] = v.shape()[i];
    ctx->strides[i] = st[i];
  }
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = v.device_data();
  t.device = v.device_id() >= 0 ? DLDevice{kDLCUDA, v.device_id()} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(v.ndim());
  t.dtype = dlpack_dtype(v.type());
  t.shape = ctx->shape;
  t.strides = ctx->strides;
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &dlpack_export<Managed>::deleter;
  ctx->ring = b.ring();
  // Only the hold count (atomic) is written through this; a batch's constness is shallow anyway
  // (its tensor views hand out writable memory).
  ctx->slot = const_cast<slot_base*>(&b.slot());
  // The caller's handle holds the slot, so the count is at least 1 here: a relaxed increment
  // suffices (as for shared_ptr); only the decrement orders.
  ctx->slot->holders.fetch_add(1, std::memory_order_relaxed);
  return &ctx.release()->managed;
}

inline void check_exportable(const batch& b) {
  if (!b) throw usage_error("sluice: to_dlpack: the batch handle is empty (moved from, reset, or the end of an epoch)");
}

}  // namespace detail

// The tensor `name` of the batch as a DLPack tensor (see the top of this header). The consumer
// owns the result and calls its deleter once. A usage_error lists the batch's tensors when it has
// no tensor `name`, or says the handle is empty.
[[nodiscard]] inline DLManagedTensor* to_dlpack(const batch& b, std::string_view name) {
  detail::check_exportable(b);
  return detail::export_tensor<DLManagedTensor>(b, b.field(name));
}
// The i-th tensor of the batch (in the order the collator wrote them; i < b.tensor_count()).
[[nodiscard]] inline DLManagedTensor* to_dlpack(const batch& b, std::size_t i) {
  detail::check_exportable(b);
  if (i >= b.tensor_count())
    throw usage_error("sluice: to_dlpack: tensor " + std::to_string(i) + " of a batch with " +
                      std::to_string(b.tensor_count()) + " tensors");
  return detail::export_tensor<DLManagedTensor>(b, b.tensor(i));
}
// A batch whose tensors the compiler knows: a name the collator does not emit does not compile.
template <fixed_string Name, class... Outputs>
[[nodiscard]] DLManagedTensor* to_dlpack(const typed_batch<Outputs...>& b) {
  using T = typename detail::find_output<Name, Outputs...>::type;
  static_assert(element_type<T>);
  return to_dlpack(static_cast<const batch&>(b), Name.view());
}

#if SLUICE_DLPACK_VERSIONED
// The same exports for DLPack 1.x consumers: version = the header's, flags = 0 (writable, not a
// copy).
[[nodiscard]] inline DLManagedTensorVersioned* to_dlpack_versioned(const batch& b, std::string_view name) {
  detail::check_exportable(b);
  DLManagedTensorVersioned* m = detail::export_tensor<DLManagedTensorVersioned>(b, b.field(name));
  m->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m->flags = 0;
  return m;
}
template <fixed_string Name, class... Outputs>
[[nodiscard]] DLManagedTensorVersioned* to_dlpack_versioned(const typed_batch<Outputs...>& b) {
  using T = typename detail::find_output<Name, Outputs...>::type;
  static_assert(element_type<T>);
  return to_dlpack_versioned(static_cast<const batch&>(b), Name.view());
}
#endif

}  // namespace sluice

#endif  // SLUICE_HAS_DLPACK()
