// sluice/stage/collate.hpp — `collate({...})`: samples -> one batch, each sample written once.
//
// The classic collate, for samples that are one block and a label (records, decoded images):
// each sample is written straight into its place in the batch slot (a decoder decodes itself
// there; a byte view is copied, or converted to float32 as y = (x * scale - mean[c]) / std[c]).
// The batch has "data" ({n, shape...}: .shape, else the decoder's shape, else {n, bytes}) and
// "label" (int64 {n}); `drop_last` drops a final partial batch. Normalisation uses the layout the
// decoder wrote; a `.layout` or `.channels` that contradicts it is a usage_error, never a silent
// reinterpretation. For samples with fields, collate({...}) stacks every field; the per-field
// collators are in stage/field_collate.hpp.
// Errors: a sample of another size than the batch's is an error naming the sample.
// Threads: one collator serves every worker; its per-batch state lives in the worker's scratch.
// Every rule: docs/collate.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/batch.hpp"
#include "sluice/core/batch_ops.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/state.hpp"
#include "sluice/stage/field_collate.hpp"

namespace sluice {

// The layout names of the first data model (collate's `.layout`); image_layout is the type.
using layout = image_layout;
inline constexpr image_layout hwc = image_layout::hwc;
inline constexpr image_layout chw = image_layout::chw;

struct collate_options {
  std::size_t batch = 256;
  bool drop_last = false;
  dtype output = dtype::u8;  // u8 (as stored) or f32 (normalised)
  // float32 output only:
  float scale = 1.0f / 255.0f;
  std::vector<float> mean{};  // per channel; empty: 0
  std::vector<float> std{};   // per channel; empty: 1
  std::size_t channels = 1;
  image_layout layout = image_layout::none;  // hwc or chw; none: the producer's (or hwc)
  // Bytes of one input sample; 0 = each batch's first sample sets it.
  std::size_t sample_bytes = 0;
  // Shape of one sample in the batch's "data" tensor (elements); empty: {elements}.
  std::vector<std::int64_t> shape{};
};

class collate_stage {
 public:
  using collate_concept = collate_tag;
  static constexpr std::string_view name = "collate";
  template <class Sample>
  using batch_type = batch;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp: write() uses sc.conv only as a buffer

  struct scratch_type {
    bool learnt = false;       // the batch's first sample has been checked
    std::size_t in_bytes = 0;  // this batch's sample size
    image_layout layout = image_layout::none;
    field_geometry geom{};        // the producer's per-sample shape, when it states one
    std::vector<std::byte> conv;  // a self-writing sample's bytes before conversion to float
    std::size_t data = 0, labels = 0;
  };

  explicit collate_stage(collate_options o) : opt_(std::move(o)) {
    if (!opt_.shape.empty()) {
      shape_elements_ = 1;
      for (auto d : opt_.shape) shape_elements_ *= static_cast<std::size_t>(d);
    }
    if (opt_.batch == 0) throw usage_error("sluice: collate({.batch = 0}): a batch needs at least one sample");
    if (opt_.output != dtype::u8 && opt_.output != dtype::f32)
      throw usage_error(std::string("sluice: collate: .output is u8 or f32, not ") + dtype_name(opt_.output) +
                        " (per-field collators write other types)");
    if (opt_.output == dtype::f32) {
      if (opt_.channels == 0) throw usage_error("sluice: collate: channels must be at least 1");
      norm_ = detail::channel_affine(opt_.mean, opt_.std, opt_.scale, opt_.channels, "sluice: collate: ");
    }
  }

  [[nodiscard]] std::size_t batch_size() const noexcept { return opt_.batch; }
  [[nodiscard]] bool drop_last() const noexcept { return opt_.drop_last; }
  [[nodiscard]] dtype output() const noexcept { return opt_.output; }
  // Hash of the options that shape the batch's bytes (output dtype, scale, mean, std, channels,
  // layout, sample size, shape): part of a loader_state's fingerprint (core/state.hpp).
  [[nodiscard]] std::uint64_t fingerprint() const noexcept {
    return fingerprint_hash{}
        .add(static_cast<std::uint64_t>(opt_.output))
        .add(static_cast<double>(opt_.scale))
        .add_all(opt_.mean)
        .add_all(opt_.std)
        .add(static_cast<std::uint64_t>(opt_.channels))
        .add(static_cast<std::uint64_t>(opt_.layout))
        .add(static_cast<std::uint64_t>(opt_.sample_bytes))
        .add_all(opt_.shape)
        .value();
  }
  // Bytes one sample takes in the batch, given its input size.
  [[nodiscard]] std::size_t output_bytes(std::size_t input_bytes) const noexcept {
    return input_bytes * dtype_size(opt_.output);
  }

  // For samples with fields, collate({...}) stacks every field (a variable field is a compile
  // error that says to choose pad, pack or ragged for it).
  template <class Sample>
    requires field_sample<Sample>
  [[nodiscard]] auto bind() const {
    if (opt_.output != dtype::u8 || !opt_.mean.empty() || !opt_.std.empty() || !opt_.shape.empty())
      throw usage_error("sluice: collate({...}) on samples with fields takes only .batch and .drop_last; "
                        "normalise or shape a field with normalized<\"name\">{...} or stack<\"name\">{.shape = ...}");
    using C = typename detail::default_collate<typename Sample::schema_type>::type;
    return std::apply([&](auto... fs) { return C(batch_options{opt_.batch, opt_.drop_last}, fs...); },
                      default_fields<C>());
  }

  template <collatable S>
  static std::size_t input_bytes(const S& s) {
    if constexpr (bytes_sample<S>) return s.bytes().size();
    else return s.size_bytes();
  }

  // --- the collator steps (core/concepts.hpp) ---
  void begin(scratch_type& sc) const noexcept {
    sc.in_bytes = opt_.sample_bytes;
    sc.layout = image_layout::none;
    sc.geom = {};
    sc.learnt = false;
  }
  template <collatable S>
  void check(const S& s, scratch_type& sc) const {
    const std::size_t n = input_bytes(s);
    if (sc.learnt) {  // every later sample of the batch: one comparison
      if (n != sc.in_bytes) throw size_mismatch(n, sc.in_bytes);
      return;
    }
    // The batch's first sample: its size, and what its producer says it wrote.
    if (n == 0) throw usage_error("sample has 0 bytes; collate needs fixed-size, non-empty samples");
    if (sc.in_bytes == 0) sc.in_bytes = n;
    if (n != sc.in_bytes) throw size_mismatch(n, sc.in_bytes);
    if (shape_elements_ != 0 && shape_elements_ != n)
      throw usage_error("sample is " + std::to_string(n) + " elements but collate's .shape says " +
                        std::to_string(shape_elements_));
    if constexpr (requires { s.geometry(); }) {  // a decoder says how it laid out the pixels
      const field_geometry g = s.geometry();
      const image_layout wrote = g.layout;
      if (opt_.output == dtype::f32 && opt_.channels > 1) (void)detail::agreed_layout(opt_.layout, wrote, "collate's .layout");
      if (opt_.output == dtype::f32 && opt_.channels > 1 && wrote != image_layout::none && g.ndim == 3) {
        const auto c = g.shape[wrote == image_layout::chw ? 0 : 2];
        if (c != static_cast<std::int64_t>(opt_.channels))
          throw usage_error("collate({.channels = " + std::to_string(opt_.channels) + "}) but the decoder wrote " +
                            std::to_string(c) + "-channel pixels: the per-channel mean/std would go to the wrong values");
      }
      sc.layout = wrote;
      // The batch takes the producer's shape ({n, 3, 224, 224} for a CHW decode), as stack<>
      // does, when it accounts for every element of the sample.
      std::int64_t elements = g.ndim > 0 ? 1 : 0;
      for (std::size_t d = 0; d < g.ndim; ++d) elements *= g.shape[d];
      if (elements == static_cast<std::int64_t>(n)) sc.geom = g;
    }
    sc.learnt = true;
  }
  template <collatable S>
  void plan(std::span<const S> samples, scratch_type& sc, batch_layout& layout) const {
    const auto n = static_cast<std::int64_t>(samples.size());
    const auto flat = static_cast<std::int64_t>(sc.in_bytes);
    if (!opt_.shape.empty()) sc.data = layout.add_batched("data", opt_.output, n, opt_.shape);
    else if (sc.geom.ndim > 0) sc.data = layout.add_batched("data", opt_.output, n, {sc.geom.shape.data(), sc.geom.ndim});
    else sc.data = layout.add_batched("data", opt_.output, n, {&flat, 1});
    sc.labels = layout.add("label", dtype::i64, {n});
  }
  template <collatable S>
  void write(const S& s, std::size_t i, std::byte* base, scratch_type& sc, const sample_context& ctx) const {
    const std::size_t n = sc.in_bytes;
    std::byte* dst = base + sc.data + i * output_bytes(n);
    if constexpr (bytes_sample<S>) {
      auto src = s.bytes();
      if (opt_.output == dtype::u8) std::memcpy(dst, src.data(), n);
      else to_float(reinterpret_cast<const std::uint8_t*>(src.data()), n, reinterpret_cast<float*>(dst), sc.layout);
    } else {
      if (opt_.output == dtype::u8) {
        s.write_into(std::span<std::byte>(dst, n), ctx);
      } else {
        if (sc.conv.size() < n) sc.conv.resize(n);  // once per worker, at warm-up
        s.write_into(std::span<std::byte>(sc.conv.data(), n), ctx);
        to_float(reinterpret_cast<const std::uint8_t*>(sc.conv.data()), n, reinterpret_cast<float*>(dst), sc.layout);
      }
    }
    const std::int64_t label = static_cast<std::int64_t>(s.label);
    std::memcpy(base + sc.labels + i * sizeof(std::int64_t), &label, sizeof label);
  }
  template <collatable S>
  void finish(std::span<const S>, std::byte*, scratch_type&, const batch_layout&) const noexcept {}

 private:
  template <class C>
  static auto default_fields() {
    return []<field_collator... Fs>(std::type_identity<fields_collate<Fs...>>) { return std::tuple<Fs...>{}; }(
        std::type_identity<C>{});
  }

  void to_float(const std::uint8_t* x, std::size_t n, float* y, image_layout producer) const noexcept {
    const image_layout lay = opt_.layout != image_layout::none ? opt_.layout : producer;
    detail::normalize_u8(x, y, n, opt_.channels, norm_.mean.data(), norm_.inv_std.data(), lay, lay);
  }

  static usage_error size_mismatch(std::size_t n, std::size_t expected) {
    return usage_error("sample is " + std::to_string(n) + " bytes but this batch's samples are " +
                       std::to_string(expected) + " bytes; resize them to one size before collate");
  }

  collate_options opt_;
  std::size_t shape_elements_ = 0;  // product of .shape (0: no shape given)
  detail::channel_affine norm_;  // f32 output: per channel, on the scale of the stored bytes
};

inline collate_stage collate(collate_options o = {}) { return collate_stage(std::move(o)); }

}  // namespace sluice
