// sluice/stage/decode.hpp — `decode(codec)`: record view -> a sample that decodes itself in place;
// `decode<"f">(codec)`: a sample with fields -> the same sample with field "f" decoded in place.
//
// The stage does no work when it is called: it returns a deferred sample, and collate calls
// write_into with the sample's slot in the batch, so decoded pixels are written once, straight
// into the batch. The decode's time and errors are still reported as the decode stage's. A codec
// that states what it writes (geometry(): shape and layout) has it passed on to collate.
// decode<"f">(codec, followers...) also moves fields with the image's geometry: boxes<> and
// points<> (rows mapped when the stage runs, their companions losing dropped rows), mask<> (a
// PNG of class ids, codec/mask.hpp) and instance_masks<> (one mask per kept box,
// codec/instances.hpp), all by the one transform planned per sample from (seed, epoch, id), so
// batches are bit-identical for any worker count.
// Errors: a record the codec cannot decode is a format_error naming the file, the record and the
// cause (and the field); a followed field that does not fit is one too, raised when the stage
// runs, so on_error::skip skips the sample.
// Threads: the codec is held by value and must be const-callable from several threads.
// Examples and every rule: docs/decode.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/codec/jpeg_frame.hpp"
#include "sluice/codec/transform.hpp"

namespace sluice {

namespace detail {
// The codec's statement of what it writes, or nothing (ndim 0, layout none) when it makes none.
template <class Codec>
field_geometry codec_geometry(const Codec& c) {
  if constexpr (requires { { c.geometry() } -> std::convertible_to<field_geometry>; }) return c.geometry();
  else return {};
}
}  // namespace detail

template <codec Codec>
struct decoded_sample {
  std::uint64_t id = 0;
  std::int64_t label = -1;
  const Codec* codec = nullptr;
  std::span<const std::byte> encoded;
  std::string_view origin;

  [[nodiscard]] std::size_t size_bytes() const noexcept { return codec->output_bytes(); }
  // The shape and layout write_into produces (the codec's geometry(), when it has one).
  [[nodiscard]] field_geometry geometry() const { return detail::codec_geometry(*codec); }
  static constexpr std::string_view stage_name = "decode";
  void write_into(std::span<std::byte> dst, const sample_context& ctx) const {
    const detail::deferred_scope timed(stage_name, ctx);
    try {
      try {
        codec->decode(encoded, dst, ctx);
      } catch (const format_error& e) {
        throw format_error(std::string(origin), {.record = id}, e.cause());
      }
    } catch (...) {
      detail::throw_stage_error(stage_name, id);
    }
  }
};

template <codec Codec>
class decode_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "decode";

  explicit decode_stage(Codec c) : codec_(std::move(c)) {}

  decoded_sample<Codec> operator()(const record_view& r, const sample_context&) const {
    return {r.id, r.label, &codec_, r.data, r.origin};
  }
  [[nodiscard]] const Codec& codec() const noexcept { return codec_; }

 private:
  Codec codec_;
};

template <class Codec>
  requires codec<std::remove_cvref_t<Codec>>
decode_stage<std::remove_cvref_t<Codec>> decode(Codec&& c) {
  return decode_stage<std::remove_cvref_t<Codec>>(std::forward<Codec>(c));
}

// ---------------------------------------------------------------------------------------------
// decode<"f">(codec): one field of a sample with fields, decoded when a collator writes it.

namespace detail {
template <fixed_string Name>
inline constexpr auto decode_field_name = concat_v<concat_v<"decode<\"", Name>, "\">">;
}  // namespace detail

// Fields that follow a decoded image's geometry (decode<"img">(codec, boxes<...>{}, points<...>{},
// mask<...>{})). A follower says which kind it is (opt-in, so no other type matches by accident):
//   row_follower_tag       rows of coordinates mapped by the transform when the stage runs, and
//                          companion fields that lose the same rows (boxes, points, below);
//   rendered_follower_tag  a field decoded through the transform when a collator writes it, as
//                          the image is (mask<"seg.png">, codec/mask.hpp: class ids resampled
//                          nearest-neighbour). Its protocol, for a transform t planned by the stage:
//     F::field, F::carries<N> (N == field), typename F::value_type (the written element type:
//     the sample's schema gets field<F::field, value_type>, fixed size),
//     f.check(bytes, t)        throws format_error when the field cannot follow t (called when
//                              the stage runs: a header read, a size check; cheap),
//     f.output_bytes(t), f.geometry(t)   what f.render writes,
//     f.render(bytes, out, t)  writes output_bytes(t) bytes (called by the collator, timed and
//                              reported as the decode stage's work, like the image's decode).
//                          A rendered follower may draw one thing per row of a row follower (an
//                          instance's mask per box: codec/instances.hpp). It says so with
//                          F::instances_of (the row follower's coordinates field) and
//                          F::field_extent = extent::variable, and its calls take the rows:
//                          f.check(bytes, t, rows), f.output_bytes(t, kept), f.geometry(t, kept),
//                          f.render(bytes, out, t, keep) with `keep` the indices of the rows
//                          that row follower keeps — so a box and its mask go together.
struct row_follower_tag {};
struct rendered_follower_tag {};

template <class F>
concept row_follower = requires {
  typename F::follower_concept;
  requires std::same_as<typename F::follower_concept, row_follower_tag>;
};
template <class F>
concept rendered_follower = requires {
  typename F::follower_concept;
  requires std::same_as<typename F::follower_concept, rendered_follower_tag>;
};
template <class F>
concept image_follower = row_follower<F> || rendered_follower<F>;
// A rendered follower drawn per kept row of a row follower (above).
template <class F>
concept instance_follower = rendered_follower<F> && requires { F::instances_of; };

// boxes<"boxes", "classes", ...>: field "boxes" holds rows of 4 coordinates (floating point), one
// row per box; the fields named after it hold one row per box too (a class, a score, a mask id:
// any type, any row size), and lose the same rows when a box is dropped. points<...> likewise, for
// rows of 2 (x, y). The options are codecs::box_options / codecs::point_options
// (codec/transform.hpp).
template <fixed_string Field, fixed_string... With>
struct boxes {
  codecs::box_format format = codecs::box_format::xyxy;
  bool normalized = false;    // coordinates as fractions of the image's width and height
  bool drop_outside = true;   // drop a box below min_size / min_visible once clipped; else keep all, clipped
  double min_size = 1.0;      // output pixels
  double min_visible = 0.0;   // fraction of the box's area that stays in view

  using follower_concept = row_follower_tag;
  static constexpr std::size_t row = 4;
  template <fixed_string N>
  static constexpr bool carries = (N == Field) || ((N == With) || ...);
  template <fixed_string N>
  static constexpr bool is_coordinates = N == Field;
  static constexpr auto coordinates = Field;
  template <class Fn>
  static void each_companion(Fn&& fn) {
    (fn.template operator()<With>(), ...);
  }
  template <class T>
  bool map(const codecs::image_transform& t, const T* in, T* out) const noexcept {
    return codecs::transform_box(t, {format, normalized, drop_outside, min_size, min_visible}, in, out);
  }
};

template <fixed_string Field, fixed_string... With>
struct points {
  bool normalized = false;    // coordinates as fractions of the image's width and height
  bool drop_outside = false;  // drop a point that lands outside the output; else keep it, unclipped

  using follower_concept = row_follower_tag;
  static constexpr std::size_t row = 2;
  template <fixed_string N>
  static constexpr bool carries = (N == Field) || ((N == With) || ...);
  template <fixed_string N>
  static constexpr bool is_coordinates = N == Field;
  static constexpr auto coordinates = Field;
  template <class Fn>
  static void each_companion(Fn&& fn) {
    (fn.template operator()<With>(), ...);
  }
  template <class T>
  bool map(const codecs::image_transform& t, const T* in, T* out) const noexcept {
    return codecs::transform_point(t, {normalized, drop_outside}, in, out);
  }
};

namespace detail {
// The index of the follower in Fs... that carries field N, or -1.
template <fixed_string N, class... Fs>
consteval int follower_of() {
  int i = 0, found = -1;
  ((found = found < 0 && Fs::template carries<N> ? i : found, ++i), ...);
  return found;
}
template <class F, class S>
using coordinate_t = typename S::schema_type::template field_t<F::coordinates>::value_type;

// The schema after the followers: a rendered follower's field becomes a fixed field of its
// value_type (a mask's PNG bytes -> u8 ids); rows keep their type.
template <class Schema, class... Fs>
struct followed_schema {
  using type = Schema;
};
template <class Schema, class F, class... Fs>
struct followed_schema<Schema, F, Fs...> {
  using type = typename followed_schema<Schema, Fs...>::type;
};
template <class F>
consteval extent rendered_extent() {
  if constexpr (requires { F::field_extent; }) return F::field_extent;
  else return extent::fixed;
}
template <class Schema, rendered_follower F, class... Fs>
struct followed_schema<Schema, F, Fs...> {
  using type = typename followed_schema<
      replace_field_t<Schema, field<F::field, typename F::value_type, rendered_extent<F>()>>, Fs...>::type;
};
// The index of the row follower in Fs... whose coordinates are field N, or -1.
template <fixed_string N, class... Fs>
consteval int row_follower_of() {
  int i = 0, found = -1;
  (([&] {
     if constexpr (row_follower<Fs>) {
       if (found < 0 && Fs::coordinates == N) found = i;
     }
     ++i;
   }()),
   ...);
  return found;
}
template <class F, class... Fs>
consteval bool instances_have_rows() {
  if constexpr (instance_follower<F>) return row_follower_of<F::instances_of, Fs...>() >= 0;
  else return true;
}
template <fixed_string N, class... Fs>
consteval bool rendered_field() {
  constexpr int f = follower_of<N, Fs...>();
  if constexpr (f < 0) return false;
  else return rendered_follower<std::tuple_element_t<static_cast<std::size_t>(f), std::tuple<Fs...>>>;
}
}  // namespace detail

// `Inner` with field `Name` decoded by `Codec`; the field-sample protocol of core/schema.hpp.
// With followers, the image's transform is planned when the stage runs (the header is read then)
// and kept in the sample; the image is decoded with it and the followed fields are mapped by it.
template <fixed_string Name, field_sample Inner, codec Codec, class... Follow>
struct decoded_field_sample {
  using schema_type = typename detail::followed_schema<
      replace_field_t<typename Inner::schema_type, field<Name, std::uint8_t>>, Follow...>::type;
  static constexpr std::string_view stage_name = detail::decode_field_name<Name>.view();
  std::uint64_t id = 0;
  std::string_view origin;
  Inner inner;
  const Codec* codec = nullptr;
  const std::tuple<Follow...>* follow = nullptr;
  codecs::image_transform transform{};  // planned by the stage when there are followers

  template <fixed_string N>
  [[nodiscard]] std::size_t size_of() const {
    if constexpr (N == Name) {
      return codec->output_bytes();
    } else if constexpr (constexpr int f = detail::follower_of<N, Follow...>(); f >= 0) {
      const auto& fol = std::get<f>(*follow);
      if constexpr (instance_follower<std::remove_cvref_t<decltype(fol)>>) {
        return fol.output_bytes(transform, kept_rows(rows_for(fol)));
      } else if constexpr (rendered_follower<std::remove_cvref_t<decltype(fol)>>) {
        return fol.output_bytes(transform);
      } else {
        const std::size_t n = rows_of(fol), kept = kept_rows(fol);
        return n == 0 ? 0 : inner.template size_of<N>() / n * kept;
      }
    } else {
      return inner.template size_of<N>();
    }
  }
  template <fixed_string N>
  void write(std::span<std::byte> dst, const sample_context& ctx) const {
    if constexpr (N == Name) {
      const detail::deferred_scope timed(stage_name, ctx);
      try {
        try {
          if constexpr (sizeof...(Follow) > 0) codec->decode_with(encoded<Name>(ctx), dst, transform);
          else codec->decode(encoded<Name>(ctx), dst, ctx);
        } catch (const format_error& e) {
          throw format_error(std::string(origin), {.record = id}, "field '" + std::string(Name.view()) + "': " + e.cause());
        }
      } catch (...) {
        detail::throw_stage_error(stage_name, id);
      }
    } else if constexpr (constexpr int f = detail::follower_of<N, Follow...>(); f >= 0) {
      if constexpr (rendered_follower<std::tuple_element_t<static_cast<std::size_t>(f), std::tuple<Follow...>>>)
        write_rendered(std::get<f>(*follow), dst, ctx);
      else
        write_followed<N>(std::get<f>(*follow), dst);
    } else {
      inner.template write<N>(dst, ctx);
    }
  }
  // The other fields' bytes, where the input has them; never the decoded or followed fields'.
  template <fixed_string N>
    requires(!(N == Name) && detail::follower_of<N, Follow...>() < 0 &&
             requires(const Inner& s) { s.template bytes_of<N>(); })
  [[nodiscard]] std::span<const std::byte> bytes_of() const {
    return inner.template bytes_of<N>();
  }
  template <fixed_string N>
    requires((N == Name) || detail::rendered_field<N, Follow...>() ||
             (detail::follower_of<N, Follow...>() < 0 && requires(const Inner& s) { s.template geometry_of<N>(); }))
  [[nodiscard]] field_geometry geometry_of() const {
    if constexpr (N == Name) {
      return detail::codec_geometry(*codec);
    } else if constexpr (detail::rendered_field<N, Follow...>()) {
      const auto& fol = std::get<detail::follower_of<N, Follow...>()>(*follow);
      if constexpr (instance_follower<std::remove_cvref_t<decltype(fol)>>)
        return fol.geometry(transform, kept_rows(rows_for(fol)));
      else
        return fol.geometry(transform);
    } else {
      return inner.template geometry_of<N>();
    }
  }

  // Called by the stage: plans the transform and checks the followed fields' sizes, so that
  // size_of/write can trust them. Errors name the file, the record and the field.
  void prepare(const sample_context& ctx) {
    try {
      try {
        const std::span<const std::byte> image = encoded<Name>(ctx);
        check_upright_for_followers(image);
        transform = codec->plan(image, ctx);
      } catch (const format_error& e) {
        throw format_error(std::string(origin), {.record = id}, "field '" + std::string(Name.view()) + "': " + e.cause());
      }
      // Row followers first: an instance follower counts their rows, so theirs is the error to name.
      std::apply([&](const auto&... fol) {
        ([&] { if constexpr (row_follower<std::remove_cvref_t<decltype(fol)>>) check_followed(fol, ctx); }(), ...);
        ([&] { if constexpr (!row_follower<std::remove_cvref_t<decltype(fol)>>) check_followed(fol, ctx); }(), ...);
      }, *follow);
    } catch (...) {
      detail::throw_stage_error(stage_name, id);
    }
  }

 private:
  // The encoded bytes of field N (the image, or a rendered follower's): a view when the input has
  // one, else written once into a per-thread buffer of that field (an input whose field is itself
  // deferred), reused so steady state allocates nothing.
  template <fixed_string N>
  std::span<const std::byte> encoded(const sample_context& ctx) const {
    if constexpr (requires { inner.template bytes_of<N>(); }) {
      return inner.template bytes_of<N>();
    } else {
      thread_local std::vector<std::byte> buf;
      const std::size_t n = inner.template size_of<N>();
      if (buf.size() < n) buf.resize(n);
      inner.template write<N>(std::span<std::byte>(buf.data(), n), ctx);
      return {buf.data(), n};
    }
  }
  // A rendered follower's error, as the image's: a format_error naming the file, the record and
  // the field (and the image it follows).
  template <class F>
  [[noreturn]] void rethrow_followed(const format_error& e) const {
    throw format_error(std::string(origin), {.record = id},
                       "field '" + std::string(F::field.view()) + "' (following '" + std::string(Name.view()) +
                           "'): " + e.cause());
  }
  template <rendered_follower F>
  void write_rendered(const F& fol, std::span<std::byte> dst, const sample_context& ctx) const {
    const detail::deferred_scope timed(stage_name, ctx);
    try {
      try {
        if constexpr (instance_follower<F>) {
          thread_local std::vector<std::uint32_t> keep;
          kept_indices(rows_for(fol), keep);
          fol.render(encoded<F::field>(ctx), dst, transform, std::span<const std::uint32_t>(keep));
        } else {
          fol.render(encoded<F::field>(ctx), dst, transform);
        }
      } catch (const format_error& e) {
        rethrow_followed<F>(e);
      }
    } catch (...) {
      detail::throw_stage_error(stage_name, id);
    }
  }
  template <rendered_follower F>
  void check_followed(const F& fol, const sample_context& ctx) const {
    try {
      if constexpr (instance_follower<F>) fol.check(encoded<F::field>(ctx), transform, rows_of(rows_for(fol)));
      else fol.check(encoded<F::field>(ctx), transform);
    } catch (const format_error& e) {
      rethrow_followed<F>(e);
    }
  }

  template <class F>
  std::span<const std::byte> coordinate_bytes() const {
    static_assert(requires { inner.template bytes_of<F::coordinates>(); },
                  "sluice: a field that follows an image's geometry must be readable as bytes (a reader's view)");
    return inner.template bytes_of<F::coordinates>();
  }
  template <class F>
  std::size_t rows_of(const F&) const {
    return coordinate_bytes<F>().size() / (F::row * sizeof(detail::coordinate_t<F, Inner>));
  }
  // Whether row r of follower F survives the transform (the row read with memcpy: views into a
  // file need not be aligned for T).
  template <class F>
  bool keeps(const F& fol, std::size_t r, detail::coordinate_t<F, Inner>* out) const {
    using T = detail::coordinate_t<F, Inner>;
    T in[F::row];
    std::memcpy(in, coordinate_bytes<F>().data() + r * sizeof in, sizeof in);
    return fol.map(transform, in, out);
  }
  template <class F>
  std::size_t kept_rows(const F& fol) const {
    detail::coordinate_t<F, Inner> out[F::row];
    std::size_t kept = 0;
    for (std::size_t r = 0, n = rows_of(fol); r < n; ++r) kept += keeps(fol, r, out);
    return kept;
  }
  template <class F>
  void kept_indices(const F& fol, std::vector<std::uint32_t>& keep) const {
    detail::coordinate_t<F, Inner> out[F::row];
    keep.clear();
    for (std::size_t r = 0, n = rows_of(fol); r < n; ++r)
      if (keeps(fol, r, out)) keep.push_back(static_cast<std::uint32_t>(r));
  }
  // The row follower whose kept rows instance follower F draws.
  template <instance_follower F>
  const auto& rows_for(const F&) const {
    return std::get<detail::row_follower_of<F::instances_of, Follow...>()>(*follow);
  }
  template <fixed_string N, class F>
  void write_followed(const F& fol, std::span<std::byte> dst) const {
    using T = detail::coordinate_t<F, Inner>;
    const std::size_t n = rows_of(fol);
    if (n == 0) return;
    std::span<const std::byte> src;
    if constexpr (!F::template is_coordinates<N>) {
      static_assert(requires { inner.template bytes_of<N>(); },
                    "sluice: a field that follows an image's geometry must be readable as bytes (a reader's view)");
      src = inner.template bytes_of<N>();
    }
    const std::size_t row_bytes = F::template is_coordinates<N> ? F::row * sizeof(T) : src.size() / n;
    std::size_t w = 0;
    for (std::size_t r = 0; r < n; ++r) {
      T out[F::row];
      if (!keeps(fol, r, out)) continue;
      if constexpr (F::template is_coordinates<N>) std::memcpy(dst.data() + w, out, sizeof out);
      else std::memcpy(dst.data() + w, src.data() + r * row_bytes, row_bytes);
      w += row_bytes;
    }
  }
  template <row_follower F>
  void check_followed(const F&, const sample_context&) const {
    using T = detail::coordinate_t<F, Inner>;
    static_assert(std::is_floating_point_v<T>, "sluice: box and point coordinates are a floating-point field");
    const std::size_t bytes = coordinate_bytes<F>().size(), row = F::row * sizeof(T);
    if (bytes % row != 0)
      throw format_error(std::string(origin), {.record = id},
                         "field '" + std::string(F::coordinates.view()) + "': " + std::to_string(bytes) +
                             " bytes is not a whole number of rows of " + std::to_string(F::row) + " coordinates");
    // Every other field F carries must have one row per box (point): n rows of equal size.
    const std::size_t n = bytes / row;
    F::each_companion([&]<fixed_string N>() {
      const std::size_t b = inner.template size_of<N>();
      if ((n == 0 && b != 0) || (n != 0 && b % n != 0))
        throw format_error(std::string(origin), {.record = id},
                           "field '" + std::string(N.view()) + "': " + std::to_string(b) + " bytes for " +
                               std::to_string(n) + " rows of '" + std::string(F::coordinates.view()) +
                               "' (it must hold one row per row of it)");
    });
  }
};

template <fixed_string Name, codec Codec, image_follower... Follow>
class decode_field_stage {
  static_assert(((!Follow::template carries<Name>)&&...),
                "sluice: decode<Name>(codec, follower...): a follower names the decoded field itself");
  static_assert((detail::instances_have_rows<Follow, Follow...>() && ...),
                "sluice: instance_masks<Field, Boxes> follows the rows a boxes<Boxes, ...> follower keeps: "
                "give decode<Name> that boxes follower too");

 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = detail::decode_field_name<Name>.view();

  explicit decode_field_stage(Codec c, Follow... f) : codec_(std::move(c)), follow_(std::move(f)...) {}

  // A sample without field Name fails to compile, naming it (schema_has_no_field<"Name">).
  template <field_sample S>
  decoded_field_sample<Name, S, Codec, Follow...> operator()(S s, const sample_context& ctx) const {
    const std::uint64_t id = s.id;
    const std::string_view origin = s.origin;
    decoded_field_sample<Name, S, Codec, Follow...> d{id, origin, std::move(s), &codec_, &follow_};
    if constexpr (sizeof...(Follow) > 0) d.prepare(ctx);
    return d;
  }
  [[nodiscard]] const Codec& codec() const noexcept { return codec_; }

 private:
  Codec codec_;
  std::tuple<Follow...> follow_;
};

// decode<"img">(codec) decodes field "img"; decode<"img">(codec, boxes<"boxes", "classes">{},
// points<"kp">{}, mask<"seg.png">{}) also moves those fields with the image's geometry (each
// follower a row_follower or rendered_follower; the codec must have
// plan(bytes, ctx) and decode_with(bytes, out, image_transform), as the image codecs do).
template <fixed_string Name, class Codec, class... Follow>
  requires codec<std::remove_cvref_t<Codec>> && (image_follower<std::remove_cvref_t<Follow>> && ...) &&
           (sizeof...(Follow) == 0 ||
            requires(const std::remove_cvref_t<Codec>& c, std::span<const std::byte> in, std::span<std::byte> out,
                     const sample_context& ctx, const codecs::image_transform& t) {
              { c.plan(in, ctx) } -> std::same_as<codecs::image_transform>;
              c.decode_with(in, out, t);
            })
decode_field_stage<Name, std::remove_cvref_t<Codec>, std::remove_cvref_t<Follow>...> decode(Codec&& c, Follow&&... f) {
  return decode_field_stage<Name, std::remove_cvref_t<Codec>, std::remove_cvref_t<Follow>...>(
      std::forward<Codec>(c), std::forward<Follow>(f)...);
}

}  // namespace sluice
