// sluice/core/dtype.hpp — element types of batch tensors, known at compile and at run time.
//
// A field's element type is a C++ type in the schema (`field<"boxes", float>`) and a `dtype` value
// in the batch (so a trainer, a DLPack consumer or a Python binding can ask at run time).
// `dtype_of<T>` maps one to the other and fails to compile for a type sluice does not carry.
//
//   static_assert(sluice::dtype_of<std::int64_t> == sluice::dtype::i64);
//   sluice::dtype_size(sluice::dtype::bf16) == 2;  sluice::dtype_name(sluice::dtype::bf16) == "bf16"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "sluice/core/half.hpp"

namespace sluice {

// u8 and f32 keep their values from the first data model (one uint8 or float block a sample).
enum class dtype : std::uint8_t { u8, f32, i8, u16, i16, i32, i64, u32, u64, f16, bf16, f64, boolean };

[[nodiscard]] constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::u8: case dtype::i8: case dtype::boolean: return 1;
    case dtype::u16: case dtype::i16: case dtype::f16: case dtype::bf16: return 2;
    case dtype::f32: case dtype::i32: case dtype::u32: return 4;
    case dtype::i64: case dtype::u64: case dtype::f64: return 8;
  }
  return 1;
}

[[nodiscard]] constexpr const char* dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return "u8";
    case dtype::f32: return "f32";
    case dtype::i8: return "i8";
    case dtype::u16: return "u16";
    case dtype::i16: return "i16";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::u32: return "u32";
    case dtype::u64: return "u64";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::f64: return "f64";
    case dtype::boolean: return "bool";
  }
  return "?";
}

namespace detail {
template <class T>
struct dtype_map;
template <> struct dtype_map<std::uint8_t> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_map<std::byte> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_map<std::int8_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_map<std::uint16_t> { static constexpr dtype value = dtype::u16; };
template <> struct dtype_map<std::int16_t> { static constexpr dtype value = dtype::i16; };
template <> struct dtype_map<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_map<std::int64_t> { static constexpr dtype value = dtype::i64; };
template <> struct dtype_map<std::uint32_t> { static constexpr dtype value = dtype::u32; };
template <> struct dtype_map<std::uint64_t> { static constexpr dtype value = dtype::u64; };
template <> struct dtype_map<f16> { static constexpr dtype value = dtype::f16; };
template <> struct dtype_map<bf16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_map<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_map<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_map<bool> { static constexpr dtype value = dtype::boolean; };
}  // namespace detail

// True for the element types a field may have.
template <class T>
concept element_type = requires { detail::dtype_map<std::remove_cv_t<T>>::value; };

template <element_type T>
inline constexpr dtype dtype_of = detail::dtype_map<std::remove_cv_t<T>>::value;

// Calls f.template operator()<T>() with the element type T of `t`: a run-time dtype turned into
// the compile-time one, for code that is written once per type (run-time fields, io/wds.hpp).
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::u8: return f.template operator()<std::uint8_t>();
    case dtype::f32: return f.template operator()<float>();
    case dtype::i8: return f.template operator()<std::int8_t>();
    case dtype::u16: return f.template operator()<std::uint16_t>();
    case dtype::i16: return f.template operator()<std::int16_t>();
    case dtype::i32: return f.template operator()<std::int32_t>();
    case dtype::i64: return f.template operator()<std::int64_t>();
    case dtype::u32: return f.template operator()<std::uint32_t>();
    case dtype::u64: return f.template operator()<std::uint64_t>();
    case dtype::f16: return f.template operator()<f16>();
    case dtype::bf16: return f.template operator()<bf16>();
    case dtype::f64: return f.template operator()<double>();
    case dtype::boolean: return f.template operator()<bool>();
  }
  return f.template operator()<std::uint8_t>();
}

}  // namespace sluice
