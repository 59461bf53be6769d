// sluice/stage/convert.hpp — convert<"f", To>(): a field's elements widened to another type.
//
// Some consumers cannot take a field's stored type: PyTorch before 2.3 has no uint16 or uint32 tensors, so token ids
// stored as uint16 must reach it as int64; an embedding wants int64 or int32 indices whatever the file holds.
// convert<"f", To>() changes field "f"'s element type to To for every stage after it:
//
//   auto loader = sluice::from(sluice::sample::shuffle(w.size(), {.seed = 1})) | sluice::read(w)
//               | sluice::convert<"input", std::int64_t>() | sluice::convert<"target", std::int64_t>()
//               | sluice::collate({.batch = 8}, sluice::stack<"input">{}, sluice::stack<"target">{})
//               | sluice::prefetch(2);
//   // b.get<"input">() is int64 {8, L}
//
// The conversion runs where collate writes the field into the batch (each element read once and written once, in the
// batch's memory: no intermediate buffer for a field the input holds as a view; a deferred input field is written into
// the destination's tail and widened in place, front to back). It works with every per-field collator (stack, ragged,
// pad, pack).
// Errors: only conversions that keep every value compile: an integer type to a wider integer type that holds all its
// values (uint16 -> int32/int64/uint32, int32 -> int64, ...), an integer type to a floating type whose mantissa holds
// it (uint16 -> float, int32 -> double), float -> double. The field's shape is unchanged; its extent (fixed or
// variable) too. Token files: docs/tokens.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/schema.hpp"

namespace sluice {

namespace detail {

template <class T>
constexpr bool convertible_arithmetic = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// True when every value of From is a value of To.
template <class From, class To>
constexpr bool keeps_values() {
  if constexpr (!convertible_arithmetic<From> || !convertible_arithmetic<To>) {
    return false;
  } else if constexpr (std::is_integral_v<From> && std::is_integral_v<To>) {
    if constexpr (std::is_signed_v<From> && !std::is_signed_v<To>) return false;
    else return std::numeric_limits<To>::digits >= std::numeric_limits<From>::digits;
  } else if constexpr (std::is_integral_v<From>) {  // integer -> floating
    return std::numeric_limits<To>::digits >= std::numeric_limits<From>::digits;
  } else if constexpr (std::is_floating_point_v<From> && std::is_floating_point_v<To>) {
    return std::numeric_limits<To>::digits >= std::numeric_limits<From>::digits &&
           std::numeric_limits<To>::max_exponent >= std::numeric_limits<From>::max_exponent;
  } else {
    return false;  // floating -> integer
  }
}

// n elements of From at src (any alignment) to To at dst (any alignment).
template <class From, class To>
void widen(const std::byte* src, std::byte* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * sizeof(From), sizeof(From));
    const To w = static_cast<To>(v);
    std::memcpy(dst + i * sizeof(To), &w, sizeof(To));
  }
}

}  // namespace detail

// `Inner` with field Name's elements converted to To; the field-sample protocol of core/schema.hpp.
template <fixed_string Name, field_sample Inner, class To>
struct converted_sample {
  using inner_field = typename Inner::schema_type::template field_t<Name>;
  using from_type = typename inner_field::value_type;
  using schema_type = replace_field_t<typename Inner::schema_type, field<Name, To, inner_field::kind>>;
  std::uint64_t id = 0;
  std::string_view origin;
  Inner inner;

  // A field whose bytes are not whole elements of its type is a format_error naming the file,
  // the record and the field (what a collator would say of it without the conversion).
  template <fixed_string N>
  [[nodiscard]] std::size_t size_of() const {
    if constexpr (N == Name) {
      const std::size_t n = inner.template size_of<N>();
      if (n % sizeof(from_type) != 0)
        throw format_error(std::string(origin), {.record = id},
                           "field '" + std::string(Name.view()) + "': " + std::to_string(n) + " bytes are not a whole number of " +
                               std::string(dtype_name(dtype_of<from_type>)) + " elements (" +
                               std::to_string(sizeof(from_type)) + " bytes each)");
      return n / sizeof(from_type) * sizeof(To);
    } else {
      return inner.template size_of<N>();
    }
  }
  template <fixed_string N>
  void write(std::span<std::byte> dst, const sample_context& ctx) const {
    if constexpr (N == Name) {
      const std::size_t n = dst.size() / sizeof(To);
      if constexpr (requires { inner.template bytes_of<N>(); }) {
        detail::widen<from_type, To>(inner.template bytes_of<N>().data(), dst.data(), n);
      } else {
        // The input writes its elements into the destination's tail; element i is read before
        // output i is written, and output i only reaches input elements <= i, so front to back
        // in place is safe (sizeof(To) >= sizeof(From)).
        const std::span<std::byte> tail = dst.last(n * sizeof(from_type));
        inner.template write<N>(tail, ctx);
        detail::widen<from_type, To>(tail.data(), dst.data(), n);
      }
    } else {
      inner.template write<N>(dst, ctx);
    }
  }
  // The other fields' bytes, where the input has them; never the converted field's.
  template <fixed_string N>
    requires(!(N == Name) && requires(const Inner& s) { s.template bytes_of<N>(); })
  [[nodiscard]] std::span<const std::byte> bytes_of() const {
    return inner.template bytes_of<N>();
  }
  template <fixed_string N>
    requires requires(const Inner& s) { s.template geometry_of<N>(); }
  [[nodiscard]] field_geometry geometry_of() const {
    return inner.template geometry_of<N>();
  }
};

template <fixed_string Name, class To>
class convert_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "convert";

  // A sample without field Name fails to compile, naming it (schema_has_no_field<"Name">).
  template <field_sample S>
  converted_sample<Name, S, To> operator()(S s, const sample_context&) const {
    using From = typename S::schema_type::template field_t<Name>::value_type;
    static_assert(sizeof(To) >= sizeof(From) && detail::keeps_values<From, To>(),
                  "sluice: convert<Name, To>: To must hold every value of the field's type (a widening: "
                  "uint16 -> int32/int64, int32 -> int64, integers -> a floating type whose mantissa holds them, "
                  "float -> double)");
    const std::uint64_t id = s.id;
    const std::string_view origin = s.origin;
    return converted_sample<Name, S, To>{id, origin, std::move(s)};
  }
};

template <fixed_string Name, class To>
convert_stage<Name, To> convert() {
  return {};
}

}  // namespace sluice
