// sluice/stage/decode.hpp — `decode(codec)`: record view -> a sample that decodes itself in place;
// `decode<"f">(codec)`: a sample with fields -> the same sample with field "f" decoded in place.
//
// The stage does no work when it is called: it returns a deferred sample (id, label,
// size_bytes() = codec.output_bytes(), write_into(dst, ctx)), and collate calls write_into with
// the sample's slot in the batch. So the decoded pixels are written exactly once, straight into
// the batch (pinned memory when a transfer follows) — no intermediate image buffer per sample.
// The loader still reports the decode's time and errors as the decode stage's: the deferred
// sample times itself (core/stats.hpp, deferred_scope) and raises stage_error("decode", id) with
// the codec's error nested, which collate passes on unchanged.
//
//   auto loader = sluice::from(sluice::sample::shuffle(r.size(), {.seed = 1}))
//               | sluice::read(r)
//               | sluice::decode(sluice::codecs::jpeg{{.width = 64, .height = 64}})
//               | sluice::collate({.batch = 256})
//               | sluice::prefetch(2, {.workers = 2});
//
// The image codecs are codecs::jpeg, codecs::png and codecs::image (either, by the first bytes:
// for datasets that mix them), in include/sluice/codec/.
// A codec that states what it writes (`geometry()`: shape and image_layout, as those codecs do)
// has it passed on: the decoded sample's geometry() forwards to it, so collate normalises each
// channel in the layout the codec wrote, and a `.layout` that contradicts it is an error (a
// stage_error whose nested cause is a usage_error), never a silent reinterpretation. A codec
// without geometry() works as before (geometry() then says nothing: layout none, no shape).
//
// For samples with fields (core/schema.hpp), decode<"jpg">(codec) decodes one field: the sample
// it hands on has the schema of its input with "jpg" replaced by a fixed u8 field of
// codec.output_bytes() bytes, written by the codec straight into the batch when a collator asks
// (write<"jpg">), with geometry_of<"jpg">() = the codec's geometry(); every other field is the
// input's, untouched. The decoded field has no bytes_of (nothing exists to view until it is
// written), which tells collators the work is deferred.
//
//   auto loader = sluice::from(sampler) | sluice::read(wds)          // fields "jpg", "label"
//               | sluice::decode<"jpg">(sluice::codecs::jpeg{{.width = 224, .height = 224,
//                                                             .layout = sluice::image_layout::chw}})
//               | sluice::collate({.batch = 64},
//                                 sluice::normalized<"jpg">{.mean = {0.485f, 0.456f, 0.406f},
//                                                          .std = {0.229f, 0.224f, 0.225f}},
//                                 sluice::stack<"label">{})
//               | sluice::prefetch(2);          // b.get<"jpg">(): float {64, 3, 224, 224}
//
// Random augmentation inside the codec draws from counter_rng(ctx.seed, ctx.epoch, ctx.id), so
// the batch is bit-identical for any worker count. A record the codec cannot decode raises
// sluice::format_error naming the record's file (the reader's path), the record id and the cause
// (and, for decode<"f">, the field). The codec is held by value in the stage and must be
// const-callable from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
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
    const detail::deferred_scope timed(stage_name);
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

// `Inner` with field `Name` decoded by `Codec`; the field-sample protocol of core/schema.hpp.
template <fixed_string Name, field_sample Inner, codec Codec>
struct decoded_field_sample {
  using schema_type = replace_field_t<typename Inner::schema_type, field<Name, std::uint8_t>>;
  static constexpr std::string_view stage_name = detail::decode_field_name<Name>.view();
  std::uint64_t id = 0;
  std::string_view origin;
  Inner inner;
  const Codec* codec = nullptr;

  template <fixed_string N>
  [[nodiscard]] std::size_t size_of() const {
    if constexpr (N == Name) return codec->output_bytes();
    else return inner.template size_of<N>();
  }
  template <fixed_string N>
  void write(std::span<std::byte> dst, const sample_context& ctx) const {
    if constexpr (N == Name) {
      const detail::deferred_scope timed(stage_name);
      try {
        try {
          codec->decode(encoded(ctx), dst, ctx);
        } catch (const format_error& e) {
          throw format_error(std::string(origin), {.record = id}, "field '" + std::string(Name.view()) + "': " + e.cause());
        }
      } catch (...) {
        detail::throw_stage_error(stage_name, id);
      }
    } else {
      inner.template write<N>(dst, ctx);
    }
  }
  // The other fields' bytes, where the input has them; never the decoded field's.
  template <fixed_string N>
    requires(!(N == Name) && requires(const Inner& s) { s.template bytes_of<N>(); })
  [[nodiscard]] std::span<const std::byte> bytes_of() const {
    return inner.template bytes_of<N>();
  }
  template <fixed_string N>
    requires((N == Name) || requires(const Inner& s) { s.template geometry_of<N>(); })
  [[nodiscard]] field_geometry geometry_of() const {
    if constexpr (N == Name) return detail::codec_geometry(*codec);
    else return inner.template geometry_of<N>();
  }

 private:
  // The encoded bytes: a view when the input has one, else written once into a per-thread buffer
  // (an input whose field is itself deferred), reused so steady state allocates nothing.
  std::span<const std::byte> encoded(const sample_context& ctx) const {
    if constexpr (requires { inner.template bytes_of<Name>(); }) {
      return inner.template bytes_of<Name>();
    } else {
      thread_local std::vector<std::byte> buf;
      const std::size_t n = inner.template size_of<Name>();
      if (buf.size() < n) buf.resize(n);
      inner.template write<Name>(std::span<std::byte>(buf.data(), n), ctx);
      return {buf.data(), n};
    }
  }
};

template <fixed_string Name, codec Codec>
class decode_field_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = detail::decode_field_name<Name>.view();

  explicit decode_field_stage(Codec c) : codec_(std::move(c)) {}

  // A sample without field Name fails to compile, naming it (schema_has_no_field<"Name">).
  template <field_sample S>
  decoded_field_sample<Name, S, Codec> operator()(S s, const sample_context&) const {
    const std::uint64_t id = s.id;
    const std::string_view origin = s.origin;
    return {id, origin, std::move(s), &codec_};
  }
  [[nodiscard]] const Codec& codec() const noexcept { return codec_; }

 private:
  Codec codec_;
};

template <fixed_string Name, class Codec>
  requires codec<std::remove_cvref_t<Codec>>
decode_field_stage<Name, std::remove_cvref_t<Codec>> decode(Codec&& c) {
  return decode_field_stage<Name, std::remove_cvref_t<Codec>>(std::forward<Codec>(c));
}

}  // namespace sluice
