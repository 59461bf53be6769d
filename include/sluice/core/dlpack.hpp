// sluice/core/dlpack.hpp — a batch's tensors as DLPack tensors, zero copy (PyTorch, JAX, CuPy, ...).
//
// to_dlpack(b, "image") (or to_dlpack<"boxes">(b) on a typed batch) exports a tensor as a
// DLManagedTensor* pointing into the batch's slot memory, host or device: nothing is copied. The
// export holds the slot like the batch handle does, so the slot returns to the ring only when the
// handle and every export are gone; the consumer's deleter may run on any thread, even after the
// loader is destroyed. dtype, shape and row-major strides are always given; with DLPack 1.x
// headers to_dlpack_versioned adds the version and flags. Each export costs one small allocation.
// Errors: a tensor name the batch does not have is a usage_error.
// Availability: needs <dlpack/dlpack.h> (sluice::dlpack); without it this header declares nothing
// and SLUICE_HAS_DLPACK() is 0. libtorch's <ATen/dlpack.h> and this header may be included in
// either order. Every rule: docs/device.md.
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
// DLManagedTensorVersioned), its shape and strides, and a hold on the slot (core/batch.hpp).
template <class Managed>
struct dlpack_export {
  Managed managed{};
  slot_hold hold;
  std::int64_t shape[max_dims]{};
  std::int64_t strides[max_dims]{};

  static void deleter(Managed* self) noexcept {
    if (self == nullptr) return;
    delete static_cast<dlpack_export*>(self->manager_ctx);  // drops the hold: the ring may go here
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
  ctx->hold = b.hold();
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
