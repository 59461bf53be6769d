// sluice/stage/any_decode.hpp — decode one field of a run-time sample, in place.
//
// decode_field(schema, "jpg", codec) is decode<"jpg">(codec) (stage/decode.hpp) for run-time
// samples (core/any_sample.hpp): the field's encoded bytes stay a view, and the codec writes the
// decoded image straight into the batch when collate asks (one indirect call a sample). The stage
// hands on the schema with the field made a fixed u8 field (schema()), which is what collate is
// built with; the field's geometry is the codec's (shape and layout), so normalized<> normalises
// each channel in the layout the codec wrote.
//
//   sluice::io::wds_any data{"train-{0..3}.tar", {{"jpg;png"}, {"cls", sluice::dtype::i64}}};
//   auto dec = sluice::decode_field(data.schema(), "jpg;png", sluice::codecs::jpeg{{.width = 224, .height = 224}});
//   auto loader = sluice::from(sampler) | sluice::read(data) | dec
//               | sluice::collate({.batch = 64}, dec.schema(), {{"jpg;png", sluice::stack<>{}}, {"cls", sluice::stack<>{}}})
//               | sluice::prefetch(2);
//
// Several fields, each with its codec: any_decode_stage(schema).add("jpg", a).add("depth.png", b).
// A field the samples do not have, one that is not u8 (encoded bytes), or one decoded twice is a
// usage_error at construction naming it. A record the codec cannot decode is a format_error naming the file,
// the record and the field, raised (as the compiled stage does) as the decode stage's error when
// the field is written.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/stage/decode.hpp"

namespace sluice {

namespace detail {
// Writes field k of a sample by decoding its bytes with Codec.
template <codec Codec>
struct codec_producer final : field_producer {
  codec_producer(Codec c, std::string n) : codec(std::move(c)), field(std::move(n)) {}
  Codec codec;
  std::string field;
  [[nodiscard]] std::size_t size(const any_sample&, std::size_t) const override { return codec.output_bytes(); }
  void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const override {
    constexpr std::string_view stage = "decode";
    const deferred_scope timed(stage);
    try {
      try {
        codec.decode(s.fields[k].bytes, dst, ctx);
      } catch (const format_error& e) {
        throw format_error(std::string(s.origin), {.record = s.id}, "field '" + field + "': " + e.cause());
      }
    } catch (...) {
      throw_stage_error(stage, s.id);
    }
  }
  [[nodiscard]] field_geometry geometry(const any_sample&, std::size_t) const override { return codec_geometry(codec); }
};
}  // namespace detail

// Decodes any number of fields of run-time samples, each with its codec (added with add()).
class any_decode_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "decode";

  explicit any_decode_stage(const any_schema& in) : out_(in) {}

  // Field `field` is decoded with `c` from now on; a usage_error if the samples have no such
  // field, if it is not a u8 field (encoded bytes), or if it is decoded already.
  template <class Codec>
    requires codec<std::remove_cvref_t<Codec>>
  any_decode_stage& add(std::string_view field, Codec&& c) {
    const std::size_t k = out_.at(field, "decode_field");
    for (const auto& [j, p] : producers_)
      if (j == k) throw usage_error("sluice: decode_field: field '" + out_[k].name + "' is decoded twice");
    if (out_[k].type != dtype::u8)
      throw usage_error("sluice: decode_field: field '" + out_[k].name + "' holds " + dtype_name(out_[k].type) +
                        " elements; a codec decodes encoded bytes (a u8 field)");
    out_ = out_.with(k, {out_[k].name, dtype::u8, extent::fixed});
    producers_.emplace_back(k, std::make_shared<const detail::codec_producer<std::remove_cvref_t<Codec>>>(
                                   std::forward<Codec>(c), out_[k].name));
    return *this;
  }

  // The schema of the samples this stage hands on.
  [[nodiscard]] const any_schema& schema() const noexcept { return out_; }

  // A field the reader writes itself (a tf.train.Example list in pieces, numbers) is not one
  // encoded value: a format_error naming it, never its raw bytes decoded.
  any_sample operator()(const any_sample& in, const sample_context&) const {
    any_sample s = in;
    for (const auto& [k, p] : producers_) {
      if (s.fields[k].producer != nullptr) [[unlikely]]
        throw format_error(std::string(s.origin), {.record = s.id},
                           "field '" + out_[k].name + "': not one encoded value as stored (" + std::to_string(s.size_of(k)) +
                               " bytes in pieces); a codec decodes one encoded image");
      s.fields[k].producer = p.get();
    }
    return s;
  }

 private:
  any_schema out_;
  std::vector<std::pair<std::size_t, std::shared_ptr<const field_producer>>> producers_;
};

// One field decoded: any_decode_stage(in).add(field, c).
template <class Codec>
  requires codec<std::remove_cvref_t<Codec>>
any_decode_stage decode_field(const any_schema& in, std::string_view field, Codec&& c) {
  any_decode_stage s(in);
  s.add(field, std::forward<Codec>(c));
  return s;
}

}  // namespace sluice
