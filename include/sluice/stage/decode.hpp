// sluice/stage/decode.hpp — `decode(codec)`: record view -> a sample that decodes itself in place.
//
// The stage does no work when it is called: it returns a deferred sample (id, label,
// size_bytes() = codec.output_bytes(), write_into(dst, ctx)), and collate calls write_into with
// the sample's slot in the batch. So the decoded pixels are written exactly once, straight into
// the batch (pinned memory when a transfer follows) — no intermediate image buffer per sample.
// (In the loader's per-stage timings the decode cost therefore shows up under collate.)
//
//   auto loader = sluice::from(sluice::sample::shuffle(r.size(), {.seed = 1}))
//               | sluice::read(r)
//               | sluice::decode(sluice::codecs::jpeg{{.width = 64, .height = 64}})
//               | sluice::collate({.batch = 256})
//               | sluice::prefetch(2, {.workers = 2});
//
// Random augmentation inside the codec draws from counter_rng(ctx.seed, ctx.epoch, ctx.id), so
// the batch is bit-identical for any worker count. A record the codec cannot decode raises
// sluice::format_error naming the record's file (the reader's path), the record id and the cause.
// The codec is held by value in the stage and must be const-callable from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"

namespace sluice {

template <codec Codec>
struct decoded_sample {
  std::uint64_t id = 0;
  std::int64_t label = -1;
  const Codec* codec = nullptr;
  std::span<const std::byte> encoded;
  std::string_view origin;

  [[nodiscard]] std::size_t size_bytes() const noexcept { return codec->output_bytes(); }
  void write_into(std::span<std::byte> dst, const sample_context& ctx) const {
    try {
      codec->decode(encoded, dst, ctx);
    } catch (const format_error& e) {
      throw format_error(std::string(origin), {.record = id}, e.cause());
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

}  // namespace sluice
