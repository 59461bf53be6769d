// sluice/core/schema.hpp — samples with named fields: the schema type and the field sample.
//
// A sample of a detection, segmentation or language-model trainer is more than one block and a label. A schema names
// its fields and their element types at compile time; shapes stay run-time values (an image size from the command
// line), and a field may be variable in its first dimension (boxes [n, 4], tokens [n]):
//
//   using det = sluice::schema<sluice::field<"image", std::uint8_t>,
//                              sluice::field<"boxes", float, sluice::variable>,
//                              sluice::field<"classes", std::int64_t, sluice::variable>>;
//   sluice::fields_sample<det> s{.id = i, .origin = path};
//   s.set<"image">(pixels);   s.set<"boxes">(std::span<const float>(b));   // views, no copy
//
// Errors: a misspelt name (`s.set<"imgae">`) or a span of the wrong element type does not compile, and the error names
// the field. Classification is the two-field schema {image, label}.
// The field-sample protocol (what collate's per-field collators call): typename S::schema_type; s.id; s.origin;
// s.template size_of<N>() (bytes the field takes once written); s.template write<N>(dst, ctx) (writes exactly
// size_of<N>() bytes); optionally s.template bytes_of<N>() (the bytes as a view, when no work is deferred) and
// s.template geometry_of<N>() (the shape and layout its producer wrote). A stage may wrap a sample and override one
// field, as decode<"jpg"> does, handing on replace_field_t (below; stage/decode.hpp). More: docs/cpp.md,
// docs/collate.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "sluice/core/concepts.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice {

enum class extent : std::uint8_t { fixed, variable };
inline constexpr extent variable = extent::variable;

template <fixed_string Name, element_type T, extent E = extent::fixed>
struct field {
  static constexpr auto name = Name;
  using value_type = T;
  static constexpr extent kind = E;
  static constexpr dtype type = dtype_of<T>;
};

namespace detail {
// Instantiated only when a name is not in a schema: the template argument shows the name.
template <fixed_string Name, class T = void>
struct schema_has_no_field {
  static_assert(always_false_v<T>,
                "sluice: no field of this name in the sample's schema (the name is the argument of "
                "schema_has_no_field<\"...\"> in this error); check its spelling against the schema");
  static constexpr std::size_t value = 0;
};
template <class T>
struct is_field : std::false_type {};
template <fixed_string N, class T, extent E>
struct is_field<field<N, T, E>> : std::true_type {};
}  // namespace detail

template <class... Fields>
struct schema {
  static_assert((detail::is_field<Fields>::value && ...), "sluice::schema takes sluice::field<...> types");
  static constexpr std::size_t size = sizeof...(Fields);
  static constexpr std::array<std::string_view, sizeof...(Fields)> names{Fields::name.view()...};

  template <fixed_string Name>
  static constexpr bool has = ((Fields::name == Name) || ...);

  template <fixed_string Name>
  static constexpr std::size_t index_of = [] {
    if constexpr (!has<Name>) {
      return detail::schema_has_no_field<Name>::value;
    } else {
      std::size_t i = 0, found = 0;
      ((Fields::name == Name ? (found = i, ++i) : ++i), ...);
      return found;
    }
  }();

  template <fixed_string Name>
  using field_t = std::tuple_element_t<index_of<Name>, std::tuple<Fields...>>;
};

namespace detail {
template <class Schema, class NewField>
struct replace_field;
template <class... Fields, class NewField>
struct replace_field<schema<Fields...>, NewField> {
  static_assert(detail::is_field<NewField>::value, "sluice::replace_field_t takes a sluice::field<...>");
  // A name the schema lacks fails here with schema_has_no_field<"name">.
  static_assert(schema<Fields...>::template index_of<NewField::name> < sizeof...(Fields));
  using type = schema<std::conditional_t<Fields::name == NewField::name, NewField, Fields>...>;
};
}  // namespace detail

// The schema with the field named like NewField replaced by NewField (same place): what a stage
// that turns a field into another type hands on, e.g. decode<"jpg"> (encoded bytes -> u8 pixels).
template <class Schema, class NewField>
using replace_field_t = typename detail::replace_field<Schema, NewField>::type;

namespace detail {
template <class S>
struct schema_tuple;
template <class... Fs>
struct schema_tuple<schema<Fs...>> {
  using type = std::tuple<Fs...>;
};
}  // namespace detail

// The K-th field type of a schema (readers that walk a schema's fields by position).
template <class Schema, std::size_t K>
using schema_field_t = std::tuple_element_t<K, typename detail::schema_tuple<Schema>::type>;

// The shape (per sample, without the batch dimension) and layout a producer wrote, when it knows
// them (an image codec does). Collators use it for the batch's shape and to check claims.
struct field_geometry {
  std::uint8_t ndim = 0;
  std::array<std::int64_t, max_dims> shape{};
  image_layout layout = image_layout::none;
};

template <class S>
concept field_sample = requires(const S& s) {
  typename S::schema_type;
  { s.id } -> std::convertible_to<std::uint64_t>;
  { s.origin } -> std::convertible_to<std::string_view>;
};

// A sample whose fields are views (into a mapping, a reader's buffer): nothing is copied until
// collate writes each field into the batch.
template <class Schema>
struct fields_sample {
  using schema_type = Schema;
  std::uint64_t id = 0;
  std::string_view origin;  // the file (for error messages)
  std::array<std::span<const std::byte>, Schema::size> values{};

  // Sets a field from a typed span (the element type must be the field's) or from raw bytes.
  template <fixed_string Name, class T>
  fields_sample& set(std::span<const T> v) noexcept {
    using F = typename Schema::template field_t<Name>;
    if constexpr (std::is_same_v<std::remove_cv_t<T>, std::byte>) {
      values[Schema::template index_of<Name>] = v;
    } else {
      static_assert(std::is_same_v<std::remove_cv_t<T>, typename F::value_type>,
                    "sluice: fields_sample::set<Name>: the span's element type is not the field's (see Name)");
      values[Schema::template index_of<Name>] = std::as_bytes(v);
    }
    return *this;
  }
  template <fixed_string Name, class T>
  fields_sample& set(std::span<T> v) noexcept {
    return set<Name>(std::span<const T>(v));
  }
  template <fixed_string Name, class C>
    requires requires(const C& c) { std::span(c); }
  fields_sample& set(const C& c) noexcept {
    return set<Name>(std::span<const typename decltype(std::span(c))::element_type>(std::span(c)));
  }

  template <fixed_string Name>
  [[nodiscard]] std::span<const std::byte> bytes_of() const noexcept {
    return values[Schema::template index_of<Name>];
  }
  template <fixed_string Name>
  [[nodiscard]] std::size_t size_of() const noexcept {
    return values[Schema::template index_of<Name>].size();
  }
  template <fixed_string Name>
  void write(std::span<std::byte> dst, const sample_context&) const noexcept {
    const auto v = values[Schema::template index_of<Name>];
    if (!v.empty()) std::memcpy(dst.data(), v.data(), v.size());
  }
};

}  // namespace sluice
