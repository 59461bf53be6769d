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
// A field the samples do not have, or one that is not u8 (encoded bytes), is a usage_error at
// construction naming it. A record the codec cannot decode is a format_error naming the file,
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

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/stage/decode.hpp"

namespace sluice {

template <codec Codec>
class any_decode_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "decode";

  any_decode_stage(const any_schema& in, std::string_view field, Codec c) : k_(in.at(field, "decode_field")) {
    if (in[k_].type != dtype::u8)
      throw usage_error("sluice: decode_field: field '" + in[k_].name + "' holds " + dtype_name(in[k_].type) +
                        " elements; a codec decodes encoded bytes (a u8 field)");
    out_ = in.with(k_, {in[k_].name, dtype::u8, extent::fixed});
    producer_ = std::make_shared<const producer>(std::move(c), in[k_].name);
  }

  // The schema of the samples this stage hands on.
  [[nodiscard]] const any_schema& schema() const noexcept { return out_; }
  [[nodiscard]] const Codec& codec() const noexcept { return producer_->codec; }

  any_sample operator()(const any_sample& in, const sample_context&) const {
    any_sample s = in;
    s.fields[k_].producer = producer_.get();
    return s;
  }

 private:
  struct producer final : field_producer {
    producer(Codec c, std::string n) : codec(std::move(c)), field(std::move(n)) {}
    Codec codec;
    std::string field;
    [[nodiscard]] std::size_t size(const any_sample&, std::size_t) const override { return codec.output_bytes(); }
    void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const override {
      const detail::deferred_scope timed(name);
      try {
        try {
          codec.decode(s.fields[k].bytes, dst, ctx);
        } catch (const format_error& e) {
          throw format_error(std::string(s.origin), {.record = s.id}, "field '" + field + "': " + e.cause());
        }
      } catch (...) {
        detail::throw_stage_error(name, s.id);
      }
    }
    [[nodiscard]] field_geometry geometry(const any_sample&, std::size_t) const override {
      return detail::codec_geometry(codec);
    }
  };

  std::size_t k_;
  any_schema out_;
  std::shared_ptr<const producer> producer_;
};

template <class Codec>
  requires codec<std::remove_cvref_t<Codec>>
any_decode_stage<std::remove_cvref_t<Codec>> decode_field(const any_schema& in, std::string_view field, Codec&& c) {
  return any_decode_stage<std::remove_cvref_t<Codec>>(in, field, std::forward<Codec>(c));
}

}  // namespace sluice
