// sluice/stage/field_collate.hpp — collate per field: stack, normalized, pad, pack, ragged.
//
// For samples with fields (core/schema.hpp), collate takes one collator per field it emits; each
// writes its field's tensors into the batch's one block of slot storage, and the batch type knows
// every tensor's name and element type. stack<"f"> stacks fixed-size fields ({n, shape...});
// normalized<"f"> turns u8 images into normalised floats in the producer's layout (or transposed);
// ragged<"f"> concatenates rows with "f.offsets"; pad<"f"> pads to the batch's longest (or a fixed
// length) with "f.lengths" and an optional "f.mask"; pack<"f"> packs 1-D sequences into rows with
// "f.doc_ids", "f.position_ids" and "f.cu_seqlens". Fields no collator names are not emitted.
// A user's collator for one field is a type with field_collate_concept = field_collate_tag.
// Errors: a field's bytes that do not fit its declared type and shape are a format_error naming
// the file, the record and the field.
// Threads: as stage/collate.hpp. What each emits exactly: docs/collate.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "sluice/core/batch.hpp"
#include "sluice/core/batch_ops.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/half.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice {

struct field_collate_tag {};

// The batch-level options of a per-field collate.
struct batch_options {
  std::size_t batch = 256;
  bool drop_last = false;
};

namespace detail {

template <fixed_string Name, class S>
using field_of_t = typename S::schema_type::template field_t<Name>;

// The name a collator's field goes by, in the batch and in errors: Name, unless the sample names
// it (a field of a run-time sample, stage/any_collate.hpp, is collated by stack<>, pad<>, ...,
// whose Name is empty, through a view that says the field's run-time name).
template <fixed_string Name, class S>
std::string_view field_label(const S& s) noexcept {
  if constexpr (requires { { s.field_label() } -> std::convertible_to<std::string_view>; }) return s.field_label();
  else return Name.view();
}
// The name of the batch tensor a collator emits for its field plus Suffix (".offsets", ...):
// compile-time for a compiled field; for a named one, the run-time name + Suffix, interned.
template <fixed_string Name, fixed_string Suffix, class S>
std::string_view output_label(std::span<const S> samples) {
  if constexpr (requires(const S& s) { { s.field_label() } -> std::convertible_to<std::string_view>; }) {
    if (!samples.empty()) {
      if constexpr (Suffix.size() == 0) return samples[0].field_label();  // interned already
      else return samples[0].suffixed_label(Suffix.view());               // interned once, up front
    }
  }
  return concat_v<Name, Suffix>.view();
}

template <fixed_string Name, class S>
[[noreturn]] void field_error(const S& s, const std::string& cause) {
  throw format_error(std::string(s.origin), {.record = s.id},
                     "field '" + std::string(field_label<Name>(s)) + "': " + cause);
}

inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string t = "{";
  for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "}";
}

inline std::int64_t product(std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// The rows of shape `row` a variable field holds; a size that is not a whole number of rows is a
// format_error naming the field.
template <fixed_string Name, class S>
std::size_t whole_rows(const S& s, std::span<const std::int64_t> row) {
  using F = field_of_t<Name, S>;
  const std::size_t rb = static_cast<std::size_t>(product(row)) * sizeof(typename F::value_type);
  const std::size_t n = s.template size_of<Name>();
  if (rb == 0 || n % rb != 0)
    field_error<Name>(s, std::to_string(n) + " bytes are not a whole number of rows of shape " + shape_text(row) + " " +
                             dtype_name(F::type) + " (" + std::to_string(rb) + " bytes each)");
  return n / rb;
}

template <fixed_string Name, class S>
field_geometry producer_geometry(const S& s) {
  if constexpr (requires { s.template geometry_of<Name>(); }) return s.template geometry_of<Name>();
  else return {};
}

// Copies the first `dst.size()` bytes of the field (all of them unless truncating). A deferred
// field is written whole into `tmp` first when only a prefix is wanted.
template <fixed_string Name, class S>
void write_prefix(const S& s, std::span<std::byte> dst, std::vector<std::byte>& tmp, const sample_context& ctx) {
  const std::size_t n = s.template size_of<Name>();
  if (dst.size() >= n) {
    s.template write<Name>(dst.first(n), ctx);
  } else if constexpr (requires { s.template bytes_of<Name>(); }) {
    std::memcpy(dst.data(), s.template bytes_of<Name>().data(), dst.size());
  } else {
    if (tmp.size() < n) tmp.resize(n);  // warm-up only
    s.template write<Name>(std::span<std::byte>(tmp.data(), n), ctx);
    std::memcpy(dst.data(), tmp.data(), dst.size());
  }
}

// A pad value given as a number, in the field's element type; a value the type cannot hold
// exactly is a usage_error (token 50256 in a u8 field would silently become 112).
template <class T>
T pad_value_as(double v, std::string_view field) {
  if constexpr (std::is_same_v<T, f16>) return to_f16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bf16>) return to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>) return v != 0;
  else {
    const bool fits = std::is_floating_point_v<T> ||
                      (v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                       v <= static_cast<double>(std::numeric_limits<T>::max()) && v == std::floor(v));
    if (!fits)
      throw usage_error("sluice: the pad value " + std::to_string(v) + " of field '" + std::string(field) +
                        "' does not fit its element type " + dtype_name(dtype_of<T>));
    return static_cast<T>(v);
  }
}

template <class T>
void fill_n(std::byte* dst, std::size_t count, T value) noexcept {
  if constexpr (sizeof(T) == 1) {
    std::memset(dst, static_cast<int>(std::bit_cast<std::uint8_t>(value)), count);
  } else {
    for (std::size_t i = 0; i < count; ++i) std::memcpy(dst + i * sizeof(T), &value, sizeof(T));
  }
}

template <class T>
std::span<T> typed_at(std::byte* base, std::size_t offset, std::size_t n) noexcept {
  return {reinterpret_cast<T*>(base + offset), n};
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// stack<"f">: fixed-size field -> {n, shape...}
template <fixed_string Name = "">
struct stack {
  using field_collate_concept = field_collate_tag;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp
  static constexpr auto field = Name;
  std::vector<std::int64_t> shape{};  // per sample; empty: the producer's, else flat

  template <class Schema>
  using outputs = std::tuple<sluice::output<Name, typename Schema::template field_t<Name>::value_type>>;
  struct scratch {
    bool known = false;
    std::size_t bytes = 0;
    field_geometry geo;
    std::size_t offset = 0;
  };

  void begin(scratch& sc) const noexcept { sc.known = false; }

  template <class S>
  void check(const S& s, scratch& sc) const {
    using F = detail::field_of_t<Name, S>;
    static_assert(F::kind == extent::fixed,
                  "sluice: stack<Name> is for fixed-shape fields; a variable field (see Name) needs pad, pack or ragged");
    const std::size_t n = s.template size_of<Name>();
    if (sc.known) {
      if (n != sc.bytes)
        detail::field_error<Name>(s, std::to_string(n) + " bytes, but the batch's samples have " + std::to_string(sc.bytes) +
                                         (sc.geo.ndim > 0 ? " (shape " + detail::shape_text({sc.geo.shape.data(), sc.geo.ndim}) + ")"
                                                          : std::string()) +
                                         "; stack needs one size: samples of different sizes collate with ragged (rows "
                                         "and offsets) or pad (a length and a mask)");
      return;
    }
    constexpr std::size_t es = sizeof(typename F::value_type);
    field_geometry g = detail::producer_geometry<Name>(s);
    if (!shape.empty()) {
      if (g.ndim != 0 && !std::equal(g.shape.begin(), g.shape.begin() + g.ndim, shape.begin(), shape.end()))
        throw usage_error("sluice: stack<\"" + std::string(detail::field_label<Name>(s)) +
                          "\">{.shape = " + detail::shape_text(shape) + "} contradicts the producer, which wrote " + detail::shape_text({g.shape.data(), g.ndim}));
      if (shape.size() > max_dims - 1) throw usage_error("sluice: stack: too many dimensions");
      g.ndim = static_cast<std::uint8_t>(shape.size());
      for (std::size_t i = 0; i < shape.size(); ++i) g.shape[i] = shape[i];
    } else if (g.ndim == 0 && n != es) {
      g.ndim = 1;
      g.shape[0] = static_cast<std::int64_t>(n / es);
    }
    const auto want = static_cast<std::size_t>(detail::product({g.shape.data(), g.ndim})) * es;
    if (n != want || n == 0)
      detail::field_error<Name>(s, std::to_string(n) + " bytes do not hold shape " +
                                       detail::shape_text({g.shape.data(), g.ndim}) + " of " +
                                       dtype_name(F::type) + " (" + std::to_string(want) + " bytes)");
    sc.known = true;
    sc.bytes = n;
    sc.geo = g;
  }

  template <class S>
  void plan(std::span<const S> samples, scratch& sc, batch_layout& layout) const {
    sc.offset = layout.add_batched(detail::output_label<Name, "">(samples), detail::field_of_t<Name, S>::type,
                                   static_cast<std::int64_t>(samples.size()), {sc.geo.shape.data(), sc.geo.ndim});
  }
  template <class S>
  void write(const S& s, std::size_t i, std::byte* base, scratch& sc, const sample_context& ctx) const {
    s.template write<Name>(std::span<std::byte>(base + sc.offset + i * sc.bytes, sc.bytes), ctx);
  }
  template <class S>
  void finish(std::span<const S>, std::byte*, scratch&, const batch_layout&) const noexcept {}
};

// ---------------------------------------------------------------------------------------------
// normalized<"f">: u8 image -> float, per channel, in the producer's layout or transposed.
template <fixed_string Name = "">
struct normalized {
  using field_collate_concept = field_collate_tag;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp
  static constexpr auto field = Name;
  std::vector<float> mean{};          // per channel (or one for all); empty: 0
  std::vector<float> std{};           // per channel (or one for all); empty: 1
  float scale = 1.0f / 255.0f;
  image_layout layout = image_layout::none;  // what the input is; none: as the producer says
  std::vector<std::int64_t> shape{};  // input shape when the producer does not say ({H, W, C} / {C, H, W})
  image_layout output = image_layout::none;  // none: keep the input's layout

  template <class Schema>
  using outputs = std::tuple<sluice::output<Name, float>>;
  struct scratch {
    bool known = false;
    std::size_t bytes = 0;
    std::size_t channels = 1;
    image_layout in = image_layout::none, out = image_layout::none;
    field_geometry geo;          // output shape per sample
    detail::channel_affine norm;  // on the scale of the stored bytes
    std::vector<std::byte> tmp;
    std::size_t offset = 0;
  };

  void begin(scratch& sc) const noexcept { sc.known = false; }

  template <class S>
  void check(const S& s, scratch& sc) const {
    using F = detail::field_of_t<Name, S>;
    static_assert(std::is_same_v<typename F::value_type, std::uint8_t>,
                  "sluice: normalized<Name> converts u8 images to float; the field (see Name) is not u8");
    static_assert(F::kind == extent::fixed, "sluice: normalized<Name> needs a fixed-shape image field");
    const std::size_t n = s.template size_of<Name>();
    if (sc.known) {
      if (n != sc.bytes)
        detail::field_error<Name>(s, std::to_string(n) + " bytes, but the batch's images have " + std::to_string(sc.bytes));
      return;
    }
    const std::string nm = "sluice: normalized<\"" + std::string(detail::field_label<Name>(s)) + "\">: ";
    field_geometry g = detail::producer_geometry<Name>(s);
    const image_layout in = detail::agreed_layout(layout, g.layout, nm + ".layout");
    if (g.ndim == 0 && !shape.empty()) {
      g.ndim = static_cast<std::uint8_t>(std::min(shape.size(), max_dims - 1));
      for (std::size_t i = 0; i < g.ndim; ++i) g.shape[i] = shape[i];
    }
    std::size_t channels = 1;
    if (g.ndim >= 3 && in != image_layout::none) {
      // Channels first (chw; a clip's {C, T, H, W}) or last (hwc; a clip's {T, H, W, C}).
      channels = static_cast<std::size_t>(in == image_layout::chw ? g.shape[0] : g.shape[g.ndim - 1]);
      if (g.ndim > 3 && output != image_layout::none && output != in)
        throw usage_error(nm + ".output transposes 3-dimensional images only; this field has " +
                          std::to_string(g.ndim) + " dimensions");
    } else if (std::max(mean.size(), std.size()) > 1 || output != image_layout::none) {
      throw usage_error(nm + "per-channel values need the image's shape and layout: give .shape = {H, W, C} and "
                        ".layout = hwc (or {C, H, W} and chw), or decode with a codec that states them");
    } else if (g.ndim == 0) {
      g.ndim = 1;
      g.shape[0] = static_cast<std::int64_t>(n);
    }
    if (static_cast<std::size_t>(detail::product({g.shape.data(), g.ndim})) != n)
      detail::field_error<Name>(s, std::to_string(n) + " bytes do not hold an image of shape " +
                                       detail::shape_text({g.shape.data(), g.ndim}));
    sc.norm = detail::channel_affine(mean, std, scale, channels, nm);
    sc.in = in;
    sc.out = output == image_layout::none ? in : output;
    if (g.ndim == 3 && sc.out != in) {  // the output shape is the transposed one
      if (in == image_layout::hwc) g.shape = {g.shape[2], g.shape[0], g.shape[1]};
      else g.shape = {g.shape[1], g.shape[2], g.shape[0]};
    }
    g.layout = sc.out;
    sc.geo = g;
    sc.channels = channels;
    sc.bytes = n;
    sc.known = true;
  }

  template <class S>
  void plan(std::span<const S> samples, scratch& sc, batch_layout& layout_out) const {
    sc.offset = layout_out.add_batched(detail::output_label<Name, "">(samples), dtype::f32,
                                       static_cast<std::int64_t>(samples.size()), {sc.geo.shape.data(), sc.geo.ndim});
  }

  template <class S>
  void write(const S& s, std::size_t i, std::byte* base, scratch& sc, const sample_context& ctx) const {
    const std::uint8_t* x = nullptr;
    if constexpr (requires { s.template bytes_of<Name>(); }) {
      x = reinterpret_cast<const std::uint8_t*>(s.template bytes_of<Name>().data());
    } else {
      if (sc.tmp.size() < sc.bytes) sc.tmp.resize(sc.bytes);  // warm-up only
      s.template write<Name>(std::span<std::byte>(sc.tmp.data(), sc.bytes), ctx);
      x = reinterpret_cast<const std::uint8_t*>(sc.tmp.data());
    }
    float* y = reinterpret_cast<float*>(base + sc.offset) + i * sc.bytes;
    convert(x, y, sc);
  }
  template <class S>
  void finish(std::span<const S>, std::byte*, scratch&, const batch_layout&) const noexcept {}

  // One pass from the input layout to the output layout (core/batch_ops.hpp's normalize_u8).
  static void convert(const std::uint8_t* x, float* y, const scratch& sc) noexcept {
    detail::normalize_u8(x, y, sc.bytes, sc.channels, sc.norm.mean.data(), sc.norm.inv_std.data(), sc.in, sc.out);
  }
};

// ---------------------------------------------------------------------------------------------
// ragged<"f">: variable rows -> values {rows, row...} + offsets {n+1}
template <fixed_string Name = "">
struct ragged {
  using field_collate_concept = field_collate_tag;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp
  static constexpr auto field = Name;
  std::vector<std::int64_t> row{};  // shape of one row, e.g. {4} for boxes; empty: scalars

  static constexpr auto offsets_name = concat_v<Name, ".offsets">;
  template <class Schema>
  using outputs = std::tuple<sluice::output<Name, typename Schema::template field_t<Name>::value_type>,
                             sluice::output<offsets_name, std::int64_t>>;
  struct scratch {
    std::vector<std::size_t> start;  // first row of each sample
    std::size_t row_bytes = 0, values = 0, offsets = 0;
  };

  void begin(scratch&) const noexcept {}

  template <class S>
  void check(const S& s, scratch&) const {
    (void)detail::whole_rows<Name>(s, row);
  }

  template <class S>
  void plan(std::span<const S> samples, scratch& sc, batch_layout& layout) const {
    using F = detail::field_of_t<Name, S>;
    sc.row_bytes = static_cast<std::size_t>(detail::product(row)) * sizeof(typename F::value_type);
    sc.start.resize(samples.size() + 1);  // grows to the batch size once
    std::size_t rows = 0;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      sc.start[i] = rows;
      rows += samples[i].template size_of<Name>() / sc.row_bytes;
    }
    sc.start[samples.size()] = rows;
    sc.values = layout.add_batched(detail::output_label<Name, "">(samples), F::type, static_cast<std::int64_t>(rows), row);
    sc.offsets = layout.add(detail::output_label<Name, ".offsets">(samples), dtype::i64,
                            {static_cast<std::int64_t>(samples.size() + 1)});
  }
  template <class S>
  void write(const S& s, std::size_t i, std::byte* base, scratch& sc, const sample_context& ctx) const {
    const std::size_t n = s.template size_of<Name>();
    if (n != 0) s.template write<Name>(std::span<std::byte>(base + sc.values + sc.start[i] * sc.row_bytes, n), ctx);
  }
  template <class S>
  void finish(std::span<const S> samples, std::byte* base, scratch& sc, const batch_layout&) const noexcept {
    auto off = detail::typed_at<std::int64_t>(base, sc.offsets, samples.size() + 1);
    for (std::size_t i = 0; i <= samples.size(); ++i) off[i] = static_cast<std::int64_t>(sc.start[i]);
  }
};

// ---------------------------------------------------------------------------------------------
// pad<"f">: variable rows -> {n, L, row...} + lengths {n} (+ mask {n, L})
template <fixed_string Name = "">
struct pad {
  using field_collate_concept = field_collate_tag;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp
  static constexpr auto field = Name;
  double value = 0;                 // the pad value, in the field's element type
  std::size_t length = 0;           // 0: the batch's longest; else every row is this long
  std::size_t multiple = 1;         // round L up to a multiple of this (8 for tensor cores)
  bool mask = false;                // also emit "f.mask" (true on real elements)
  bool truncate = false;            // with .length: cut longer sequences instead of failing
  std::vector<std::int64_t> row{};  // shape of one row; empty: scalars (tokens)

  static constexpr auto lengths_name = concat_v<Name, ".lengths">;
  static constexpr auto mask_name = concat_v<Name, ".mask">;
  template <class Schema>
  using outputs = std::tuple<sluice::output<Name, typename Schema::template field_t<Name>::value_type>,
                             sluice::output<lengths_name, std::int64_t>, sluice::output<mask_name, bool>>;
  struct scratch {
    std::size_t row_bytes = 0, L = 0, values = 0, lengths = 0, mask_at = 0;
    std::vector<std::byte> tmp;
  };

  void begin(scratch&) const noexcept {}

  template <class S>
  void check(const S& s, scratch&) const {
    const std::size_t rows = detail::whole_rows<Name>(s, row);
    if (length != 0 && !truncate && rows > length)
      detail::field_error<Name>(s, "a sequence of " + std::to_string(rows) + " is longer than pad's fixed length " +
                                       std::to_string(length) + " (set .truncate = true to cut it)");
  }

  template <class S>
  void plan(std::span<const S> samples, scratch& sc, batch_layout& layout) const {
    using F = detail::field_of_t<Name, S>;
    if (multiple == 0) throw usage_error("sluice: pad: .multiple must be at least 1");
    sc.row_bytes = static_cast<std::size_t>(detail::product(row)) * sizeof(typename F::value_type);
    std::size_t L = length;
    if (L == 0)
      for (const auto& s : samples) L = std::max(L, s.template size_of<Name>() / sc.row_bytes);
    L = (L + multiple - 1) / multiple * multiple;
    sc.L = L;
    if (row.size() + 2 > max_dims)
      throw usage_error("sluice: pad<\"" + std::string(detail::output_label<Name, "">(samples)) + "\">: .row has " +
                        std::to_string(row.size()) + " dimensions; a padded tensor has at most " + std::to_string(max_dims));
    std::array<std::int64_t, max_dims - 1> item{};  // {L, row...}
    item[0] = static_cast<std::int64_t>(L);
    std::copy(row.begin(), row.end(), item.begin() + 1);
    const auto n = static_cast<std::int64_t>(samples.size());
    sc.values = layout.add_batched(detail::output_label<Name, "">(samples), F::type, n, {item.data(), row.size() + 1});
    sc.lengths = layout.add(detail::output_label<Name, ".lengths">(samples), dtype::i64, {n});
    if (mask) sc.mask_at = layout.add(detail::output_label<Name, ".mask">(samples), dtype::boolean, {n, item[0]});
  }
  template <class S>
  void write(const S& s, std::size_t i, std::byte* base, scratch& sc, const sample_context& ctx) const {
    const std::size_t n = std::min(s.template size_of<Name>(), sc.L * sc.row_bytes);
    if (n != 0) detail::write_prefix<Name>(s, std::span<std::byte>(base + sc.values + i * sc.L * sc.row_bytes, n), sc.tmp, ctx);
  }
  template <class S>
  void finish(std::span<const S> samples, std::byte* base, scratch& sc, const batch_layout&) const {
    using T = typename detail::field_of_t<Name, S>::value_type;
    const T v = detail::pad_value_as<T>(value, detail::output_label<Name, "">(samples));
    const std::size_t per_row = sc.row_bytes / sizeof(T);
    auto lens = detail::typed_at<std::int64_t>(base, sc.lengths, samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const std::size_t len = std::min(samples[i].template size_of<Name>() / sc.row_bytes, sc.L);
      lens[i] = static_cast<std::int64_t>(len);
      std::byte* rowp = base + sc.values + i * sc.L * sc.row_bytes;
      detail::fill_n<T>(rowp + len * sc.row_bytes, (sc.L - len) * per_row, v);
      if (mask) {
        auto m = detail::typed_at<bool>(base, sc.mask_at + i * sc.L, sc.L);
        std::fill(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(len), true);
        std::fill(m.begin() + static_cast<std::ptrdiff_t>(len), m.end(), false);
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// pack<"f">: 1-D sequences -> rows of L with document ids, position ids and cu_seqlens
template <fixed_string Name = "">
struct pack {
  using field_collate_concept = field_collate_tag;
  static constexpr bool concurrent_write = true;  // core/concepts.hpp
  static constexpr auto field = Name;
  std::size_t length = 2048;  // L: tokens a row
  bool split = true;          // a sequence may continue in the next row; false: it starts a new
                              // row, and one longer than L is an error
  double value = 0;           // the pad token for the space no sequence fills

  static constexpr auto doc_ids_name = concat_v<Name, ".doc_ids">;
  static constexpr auto position_ids_name = concat_v<Name, ".position_ids">;
  static constexpr auto cu_seqlens_name = concat_v<Name, ".cu_seqlens">;
  template <class Schema>
  using outputs = std::tuple<sluice::output<Name, typename Schema::template field_t<Name>::value_type>,
                             sluice::output<doc_ids_name, std::int32_t>, sluice::output<position_ids_name, std::int32_t>,
                             sluice::output<cu_seqlens_name, std::int32_t>>;
  struct scratch {
    std::vector<std::size_t> start;  // first token of each sample in the flattened rows
    std::size_t rows = 0, segments = 0, values = 0, doc_ids = 0, position_ids = 0, cu_seqlens = 0;
  };

  void begin(scratch&) const noexcept {}

  template <class S>
  void check(const S& s, scratch&) const {
    using T = typename detail::field_of_t<Name, S>::value_type;
    const std::size_t n = s.template size_of<Name>();
    if (n % sizeof(T) != 0)
      detail::field_error<Name>(s, std::to_string(n) + " bytes are not a whole number of " + dtype_name(dtype_of<T>) + " tokens");
    if (!split && n / sizeof(T) > length)
      detail::field_error<Name>(s, "a sequence of " + std::to_string(n / sizeof(T)) + " tokens does not fit a packed row of " +
                                       std::to_string(length) + " (.split = false)");
  }

  // Pieces of [a, b) that lie in different rows.
  static std::size_t pieces(std::size_t a, std::size_t b, std::size_t L) noexcept {
    return b > a ? (b - 1) / L - a / L + 1 : 0;
  }

  template <class S>
  void plan(std::span<const S> samples, scratch& sc, batch_layout& layout) const {
    using F = detail::field_of_t<Name, S>;
    using T = typename F::value_type;
    if (length == 0) throw usage_error("sluice: pack: .length must be at least 1");
    const std::size_t L = length;
    sc.start.resize(samples.size());  // grows to the batch size once
    std::size_t pos = 0, segs = 0;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const std::size_t n = samples[i].template size_of<Name>() / sizeof(T);
      std::size_t at = pos;
      if (!split && n > 0 && at % L + n > L) at = (at + L - 1) / L * L;  // start a new row
      segs += pieces(pos, at, L) + pieces(at, at + n, L);
      sc.start[i] = at;
      pos = at + n;
    }
    sc.rows = (pos + L - 1) / L;
    segs += pieces(pos, sc.rows * L, L);
    sc.segments = segs;
    if (sc.rows * L > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      throw usage_error("sluice: pack: a batch of " + std::to_string(sc.rows * L) + " tokens overflows int32 cu_seqlens");
    const std::array<std::int64_t, 2> sh{static_cast<std::int64_t>(sc.rows), static_cast<std::int64_t>(L)};
    const std::int64_t nseg = static_cast<std::int64_t>(segs + 1);
    sc.values = layout.add(detail::output_label<Name, "">(samples), F::type, sh);
    sc.doc_ids = layout.add(detail::output_label<Name, ".doc_ids">(samples), dtype::i32, sh);
    sc.position_ids = layout.add(detail::output_label<Name, ".position_ids">(samples), dtype::i32, sh);
    sc.cu_seqlens = layout.add(detail::output_label<Name, ".cu_seqlens">(samples), dtype::i32, {nseg});
  }
  template <class S>
  void write(const S& s, std::size_t i, std::byte* base, scratch& sc, const sample_context& ctx) const {
    using T = typename detail::field_of_t<Name, S>::value_type;
    const std::size_t n = s.template size_of<Name>();
    if (n != 0) s.template write<Name>(std::span<std::byte>(base + sc.values + sc.start[i] * sizeof(T), n), ctx);
  }
  template <class S>
  void finish(std::span<const S> samples, std::byte* base, scratch& sc, const batch_layout&) const {
    using T = typename detail::field_of_t<Name, S>::value_type;
    const T v = detail::pad_value_as<T>(value, detail::output_label<Name, "">(samples));
    const std::size_t L = length, total = sc.rows * L;
    auto tokens = base + sc.values;
    auto doc = detail::typed_at<std::int32_t>(base, sc.doc_ids, total);
    auto posid = detail::typed_at<std::int32_t>(base, sc.position_ids, total);
    auto cu = detail::typed_at<std::int32_t>(base, sc.cu_seqlens, sc.segments + 1);
    std::size_t seg = 0;
    cu[0] = 0;
    // Marks [a, b) as document `d` (-1: padding), one segment per row it touches.
    auto run = [&](std::size_t a, std::size_t b, std::int32_t d) {
      while (a < b) {
        const std::size_t e = std::min(b, (a / L + 1) * L);
        for (std::size_t k = a; k < e; ++k) {  // one pass writes both (measured faster than two)
          doc[k] = d;
          posid[k] = static_cast<std::int32_t>(k - a);
        }
        if (d < 0) detail::fill_n<T>(tokens + a * sizeof(T), e - a, v);
        cu[++seg] = static_cast<std::int32_t>(e);
        a = e;
      }
    };
    std::size_t pos = 0;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const std::size_t n = samples[i].template size_of<Name>() / sizeof(T);
      run(pos, sc.start[i], -1);
      run(sc.start[i], sc.start[i] + n, static_cast<std::int32_t>(i));
      pos = sc.start[i] + n;
    }
    run(pos, total, -1);
  }
};

// ---------------------------------------------------------------------------------------------
template <class F>
concept field_collator = requires {
  typename F::field_collate_concept;
  requires std::same_as<typename F::field_collate_concept, field_collate_tag>;
  F::field;
  typename F::scratch;
};

namespace detail {
template <class... Tuples>
struct tuple_cat_types {
  using type = decltype(std::tuple_cat(std::declval<Tuples>()...));
};
template <class Tuple>
struct typed_batch_of;
template <class... Outs>
struct typed_batch_of<std::tuple<Outs...>> {
  using type = typed_batch<Outs...>;
};
}  // namespace detail

// The batch collator made of one collator per field.
template <field_collator... Fs>
class fields_collate {
 public:
  using collate_concept = collate_tag;
  static constexpr std::string_view name = "collate";
  using scratch_type = std::tuple<typename Fs::scratch...>;
  static constexpr bool concurrent_write = (writes_concurrently<Fs> && ...);  // core/concepts.hpp
  template <class S>
  using batch_type = typename detail::typed_batch_of<
      typename detail::tuple_cat_types<typename Fs::template outputs<typename S::schema_type>...>::type>::type;

  explicit fields_collate(batch_options o, Fs... fs) : opt_(o), fs_(std::move(fs)...) {
    if (opt_.batch == 0) throw usage_error("sluice: collate({.batch = 0}): a batch needs at least one sample");
  }
  [[nodiscard]] std::size_t batch_size() const noexcept { return opt_.batch; }
  [[nodiscard]] bool drop_last() const noexcept { return opt_.drop_last; }
  [[nodiscard]] const std::tuple<Fs...>& fields() const noexcept { return fs_; }

  void begin(scratch_type& sc) const {
    each(sc, [](const auto& f, auto& s) { f.begin(s); });
  }
  template <field_sample S>
  void check(const S& smp, scratch_type& sc) const {
    each(sc, [&](const auto& f, auto& s) { f.check(smp, s); });
  }
  template <field_sample S>
  void plan(std::span<const S> samples, scratch_type& sc, batch_layout& layout) const {
    each(sc, [&](const auto& f, auto& s) { f.plan(samples, s, layout); });
  }
  template <field_sample S>
  void write(const S& smp, std::size_t i, std::byte* base, scratch_type& sc, const sample_context& ctx) const {
    each(sc, [&](const auto& f, auto& s) { f.write(smp, i, base, s, ctx); });
  }
  template <field_sample S>
  void finish(std::span<const S> samples, std::byte* base, scratch_type& sc, const batch_layout& layout) const {
    each(sc, [&](const auto& f, auto& s) { f.finish(samples, base, s, layout); });
  }

 private:
  template <class Fn>
  void each(scratch_type& sc, Fn&& fn) const {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (fn(std::get<I>(fs_), std::get<I>(sc)), ...);
    }(std::index_sequence_for<Fs...>{});
  }
  batch_options opt_;
  std::tuple<Fs...> fs_;
};

// collate({.batch = 64}, stack<"image">{}, ragged<"boxes">{.row = {4}}, ...)
template <field_collator... Fs>
  requires(sizeof...(Fs) >= 1)
fields_collate<std::decay_t<Fs>...> collate(batch_options o, Fs... fs) {
  return fields_collate<std::decay_t<Fs>...>(o, std::move(fs)...);
}

namespace detail {
template <class Schema>
struct default_collate;
template <class... Fields>
struct default_collate<schema<Fields...>> {
  static_assert(((Fields::kind == extent::fixed) && ...),
                "sluice: collate({...}) stacks every field, but this schema has a variable-length field: "
                "say how to collate each field, e.g. collate({.batch = 32}, stack<\"image\">{}, "
                "pad<\"tokens\">{...}) (or pack / ragged)");
  using type = fields_collate<stack<Fields::name>...>;
};
}  // namespace detail

}  // namespace sluice
