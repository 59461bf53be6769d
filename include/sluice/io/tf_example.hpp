// sluice/io/tf_example.hpp — TFRecord files of tf.train.Example messages as a fields_reader.
//
// tf_example_reader<Schema> parses the one fixed message tf.train.Example from its wire format
// (no protobuf library) straight out of the mapping, and maps features to the schema's fields by
// name: u8 fields take a bytes_list (or an int64_list, range-checked), other integers and bool an
// int64_list, float and double a float_list. A variable field takes any count; a fixed one the
// count `.counts` gives, else record 0's. fields(i) hands out views and allocates nothing; collate
// writes each field once. tf_example_any is the same with the fields chosen at run time. Several
// files read as one through a brace pattern or a list.
// Errors: each record's structure and each named feature are checked in fields(i); a violation is
// a format_error naming the file, the record, the byte offset and the feature (on_error::skip
// skips it). Protobuf's own semantics are kept where they exist (unknown fields skipped, the last
// of a repeated feature name wins).
// Threads: after construction every member is const and safe to call concurrently. Every rule:
// docs/readers.md.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
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
#include <utility>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/tfrecord.hpp"

namespace sluice::io {

static_assert(std::endian::native == std::endian::little,
              "sluice: tf.train.Example floats are little-endian on the wire; views into them need a little-endian host");

// Which list a feature holds (the Feature oneof's field number; none: not set).
enum class tf_list : std::uint8_t { none = 0, bytes = 1, floats = 2, int64s = 3 };

inline constexpr std::string_view tf_list_name(tf_list k) noexcept {
  switch (k) {
    case tf_list::bytes: return "bytes_list";
    case tf_list::floats: return "float_list";
    case tf_list::int64s: return "int64_list";
    default: return "no list";
  }
}

// One parsed feature: which list, how many elements (bytes for a bytes_list), and where they lie.
// `contiguous`: `data` is the elements themselves (one bytes value, one packed float or varint
// run). Otherwise `data` is the Feature message from the first piece of its list on, walked again
// when written.
struct tf_feature {
  tf_list kind = tf_list::none;
  bool contiguous = false;
  std::uint64_t count = 0;
  std::span<const std::byte> data{};
};

struct tf_example_options {
  tfrecord_options tfrecord{};
  // Elements per record of fixed fields, by feature name; a fixed field not listed takes record
  // 0's count. Naming a variable field or a name outside the schema is a usage_error.
  std::vector<std::pair<std::string, std::uint64_t>> counts{};
  // Field name -> the feature it reads, chosen at run time, for a schema fixed at compile time over
  // feature names known only at run time (a Python binding, a command line). A field not listed
  // reads the feature of its own name; a name outside the schema is a usage_error. Error messages
  // name the feature. `.counts` names fields, not features.
  std::vector<std::pair<std::string, std::string>> features{};
};

namespace detail::pb {

enum : std::uint32_t { wt_varint = 0, wt_i64 = 1, wt_len = 2, wt_sgroup = 3, wt_egroup = 4, wt_i32 = 5 };

// Where a parse runs, for its error messages.
struct where {
  std::string_view file;
  std::uint64_t record = 0;
  std::uint64_t base = file_position::npos;  // file offset of the record's first byte
  const std::byte* start = nullptr;          // the record's first byte
  std::string_view feature{};                // empty: not inside a feature yet

  [[noreturn]] void fail(const std::byte* at, const std::string& cause) const {
    std::string c = feature.empty() ? cause : "feature '" + std::string(feature) + "': " + cause;
    const std::uint64_t off = base == file_position::npos ? file_position::npos
                                                          : base + static_cast<std::uint64_t>(at - start);
    throw format_error(std::string(file), {.record = record, .offset = off}, c);
  }
};

// A varint; false when it runs past `end`, is longer than 10 bytes, or does not fit 64 bits.
// On failure `why` says which.
inline bool varint(const std::byte*& p, const std::byte* end, std::uint64_t& out, const char*& why) noexcept {
  std::uint64_t v = 0;
  for (unsigned i = 0; i < 10; ++i) {
    if (p == end) {
      why = "varint runs past the end of its message";
      return false;
    }
    const auto b = static_cast<std::uint8_t>(*p++);
    if (i == 9 && b > 1) {
      why = (b & 0x80) ? "varint longer than 10 bytes" : "varint overflows 64 bits";
      return false;
    }
    v |= static_cast<std::uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      out = v;
      return true;
    }
  }
  why = "varint longer than 10 bytes";  // unreachable: i == 9 returns above
  return false;
}

[[gnu::noinline]] inline std::uint64_t get_varint_slow(const std::byte*& p, const std::byte* end, const where& w) {
  const std::byte* at = p;
  std::uint64_t v = 0;
  const char* why = "";
  if (!varint(p, end, v, why)) w.fail(at, why);
  return v;
}
inline std::uint64_t get_varint(const std::byte*& p, const std::byte* end, const where& w) {
  if (p != end && static_cast<std::uint8_t>(*p) < 0x80) [[likely]]
    return static_cast<std::uint8_t>(*p++);
  return get_varint_slow(p, end, w);
}

// Counts the varints of a packed run and checks each (the same rules as varint()) without
// decoding them, one byte at a time; throws at the first bad varint.
inline std::uint64_t count_varints_bytewise(std::span<const std::byte> run, const where& w) {
  std::uint64_t n = 0;
  unsigned cont = 0;  // continuation bytes so far in the current varint
  for (std::size_t k = 0; k < run.size(); ++k) {
    const auto c = static_cast<std::uint8_t>(run[k]);
    if (c & 0x80) {
      if (++cont == 10) w.fail(run.data() + k - 9, "varint longer than 10 bytes");
    } else {
      if (cont == 9 && c > 1) w.fail(run.data() + k - 9, "varint overflows 64 bits");
      ++n;
      cont = 0;
    }
  }
  if (cont != 0) w.fail(run.data() + run.size() - cont, "varint runs past the end of its message");
  return n;
}

// The same, eight bytes at a time: a varint ends at each byte with its high bit clear, so the
// count is the number of such bytes; a varint too long or overflowing needs 9 continuation bytes in a row,
// which is tracked across words. Any doubt goes to the bytewise check for the exact error.
inline std::uint64_t count_varints(std::span<const std::byte> run, const where& w) {
  constexpr std::uint64_t high = 0x8080808080808080ull;
  std::uint64_t n = 0;
  unsigned cont = 0;  // continuation bytes at the end of what was seen
  std::size_t k = 0;
  for (; k + 8 <= run.size(); k += 8) {
    std::uint64_t word;
    std::memcpy(&word, run.data() + k, 8);  // little-endian: byte j is bits 8j..8j+7
    const std::uint64_t ends = ~word & high;
    if (ends == 0) {
      cont += 8;
      if (cont >= 9) return count_varints_bytewise(run, w);
      continue;
    }
    const unsigned before = static_cast<unsigned>(std::countr_zero(ends)) / 8;  // continuation bytes before the first end
    if (cont + before >= 9) return count_varints_bytewise(run, w);
    n += ((ends >> 7) * 0x0101010101010101ull) >> 56;  // one bit per byte: a multiply sums them (no popcnt needed)
    cont = static_cast<unsigned>(std::countl_zero(ends)) / 8;  // continuation bytes after the last end
  }
  for (; k < run.size(); ++k) {
    const auto c = static_cast<std::uint8_t>(run[k]);
    if (c & 0x80) {
      if (++cont >= 9) return count_varints_bytewise(run, w);
    } else {
      ++n;
      cont = 0;
    }
  }
  if (cont != 0) return count_varints_bytewise(run, w);
  return n;
}

// A tag: field number and wire type. Field 0, field numbers past 2^29 - 1 and wire types 3, 4, 6, 7
// are errors.
struct tag {
  std::uint32_t field;
  std::uint32_t wire;
  const std::byte* at;
};
inline tag get_tag(const std::byte*& p, const std::byte* end, const where& w) {
  const std::byte* at = p;
  const std::uint64_t t = get_varint(p, end, w);
  const auto wire = static_cast<std::uint32_t>(t & 7);
  if ((t >> 3) == 0) w.fail(at, "tag with field number 0");
  if ((t >> 3) > 0x1fffffff) w.fail(at, "tag with field number past 2^29 - 1");
  if (wire == wt_sgroup || wire == wt_egroup) w.fail(at, "group (wire type " + std::to_string(wire) + ") is not allowed");
  if (wire > wt_i32) w.fail(at, "invalid wire type " + std::to_string(wire));
  return {static_cast<std::uint32_t>(t >> 3), wire, at};
}

// The body of a length-delimited field.
inline std::span<const std::byte> get_len(const std::byte*& p, const std::byte* end, const where& w) {
  const std::byte* at = p;
  const std::uint64_t n = get_varint(p, end, w);
  if (n > static_cast<std::uint64_t>(end - p))
    w.fail(at, "length " + std::to_string(n) + " runs past the end of its message (" +
                   std::to_string(end - p) + " bytes left)");
  std::span<const std::byte> body(p, static_cast<std::size_t>(n));
  p += n;
  return body;
}

// Skips the value of an unknown field (wire types 0, 1, 2, 5; get_tag refused the others).
inline void skip(const tag& t, const std::byte*& p, const std::byte* end, const where& w) {
  switch (t.wire) {
    case wt_varint: (void)get_varint(p, end, w); break;
    case wt_len: (void)get_len(p, end, w); break;
    default: {
      const std::size_t n = t.wire == wt_i64 ? 8 : 4;
      if (static_cast<std::size_t>(end - p) < n)
        w.fail(t.at, "fixed" + std::to_string(n * 8) + " value runs past the end of its message");
      p += n;
    }
  }
}

// Range of the integers a field type holds, as int64 (uint64: the non-negative int64s).
struct int_range {
  bool check = false;
  std::int64_t lo = 0, hi = 0;
  std::string_view type{};
};

// Validates one list message of kind k, adding its elements to f; records the single piece.
inline void parse_list(tf_list k, std::span<const std::byte> body, tf_feature& f, std::size_t& pieces,
                       const int_range& range, const where& w) {
  const std::byte* p = body.data();
  const std::byte* end = p + body.size();
  while (p < end) {
    const tag t = get_tag(p, end, w);
    if (t.field != 1) {
      skip(t, p, end, w);
      continue;
    }
    auto check_int = [&](std::uint64_t u, const std::byte* at) {
      const auto v = static_cast<std::int64_t>(u);
      if (range.check && (v < range.lo || v > range.hi))
        w.fail(at, "int64_list value " + std::to_string(v) + " does not fit the field's type " + std::string(range.type));
    };
    if (k == tf_list::bytes) {
      if (t.wire != wt_len) w.fail(t.at, "bytes_list value with wire type " + std::to_string(t.wire) + " (must be 2)");
      const auto v = get_len(p, end, w);
      f.count += v.size();
      f.data = v;
      ++pieces;
    } else if (k == tf_list::floats) {
      if (t.wire == wt_len) {
        const auto v = get_len(p, end, w);
        if (v.size() % 4 != 0)
          w.fail(t.at, "packed float_list of " + std::to_string(v.size()) + " bytes, not a whole number of floats");
        f.count += v.size() / 4;
        f.data = v;
        ++pieces;
      } else if (t.wire == wt_i32) {
        if (end - p < 4) w.fail(t.at, "float value runs past the end of its message");
        f.count += 1;
        f.data = {p, 4};
        p += 4;
        ++pieces;
      } else {
        w.fail(t.at, "float_list value with wire type " + std::to_string(t.wire) + " (must be 5, or 2 packed)");
      }
    } else {
      if (t.wire == wt_len) {
        const auto v = get_len(p, end, w);
        std::uint64_t n = 0;
        if (!range.check) {
          n = count_varints(v, w);
        } else {
          const std::byte* q = v.data();
          const std::byte* qe = q + v.size();
          while (q < qe) {
            const std::byte* at = q;
            const std::uint64_t u = get_varint(q, qe, w);
            check_int(u, at);
            ++n;
          }
        }
        f.count += n;
        f.data = v;
        ++pieces;
      } else if (t.wire == wt_varint) {
        const std::byte* at = p;
        const std::uint64_t u = get_varint(p, end, w);
        check_int(u, at);
        f.count += 1;
        f.data = {at, static_cast<std::size_t>(p - at)};
        ++pieces;
      } else {
        w.fail(t.at, "int64_list value with wire type " + std::to_string(t.wire) + " (must be 0, or 2 packed)");
      }
    }
  }
}

// Parses one Feature message: the last list type set wins; pieces of that type after the switch
// are merged.
inline tf_feature parse_feature(std::span<const std::byte> msg, const int_range& range, const where& w) {
  tf_feature f;
  std::size_t pieces = 0;
  const std::byte* run = nullptr;
  const std::byte* p = msg.data();
  const std::byte* end = p + msg.size();
  while (p < end) {
    const tag t = get_tag(p, end, w);
    if (t.field < 1 || t.field > 3) {
      skip(t, p, end, w);
      continue;
    }
    const auto k = static_cast<tf_list>(t.field);
    if (t.wire != wt_len)
      w.fail(t.at, std::string(tf_list_name(k)) + " with wire type " + std::to_string(t.wire) + " (must be 2)");
    const auto body = get_len(p, end, w);
    if (k != f.kind) {
      f = {.kind = k};
      pieces = 0;
      run = t.at;
    }
    parse_list(k, body, f, pieces, range, w);
  }
  // A byte field reads one string: several would arrive joined, their boundaries lost (a second
  // encoded image dropped by the decoder, captions run together).
  if (f.kind == tf_list::bytes && pieces > 1)
    w.fail(run, "a bytes_list of " + std::to_string(pieces) +
                    " values; a byte field reads one (several would arrive joined, where each ends lost): store "
                    "one value a feature (one feature a value, e.g. 'name/0', 'name/1')");
  if (pieces == 1) {
    f.contiguous = true;  // data = that one piece
  } else if (f.kind != tf_list::none) {
    f.contiguous = pieces == 0;  // an empty list: nothing to walk
    f.data = pieces == 0 ? std::span<const std::byte>{} : std::span<const std::byte>(run, static_cast<std::size_t>(end - run));
  }
  return f;
}

// Calls piece(bytes) for each piece of f's list in order (for a feature not contiguous:
// data is already validated).
template <class Piece>
void for_each_piece(const tf_feature& f, Piece&& piece) {
  if (f.contiguous) {
    if (!f.data.empty()) piece(f.data);
    return;
  }
  const where w{};
  const std::byte* p = f.data.data();
  const std::byte* end = p + f.data.size();
  while (p < end) {
    const tag t = get_tag(p, end, w);
    if (t.field != static_cast<std::uint32_t>(f.kind)) {
      skip(t, p, end, w);
      continue;
    }
    const auto body = get_len(p, end, w);
    const std::byte* q = body.data();
    const std::byte* qe = q + body.size();
    while (q < qe) {
      const tag v = get_tag(q, qe, w);
      if (v.field != 1) {
        skip(v, q, qe, w);
        continue;
      }
      if (v.wire == wt_len) {
        piece(get_len(q, qe, w));
      } else if (v.wire == wt_i32) {
        piece(std::span<const std::byte>(q, 4));
        q += 4;
      } else {
        const std::byte* at = q;
        (void)get_varint(q, qe, w);
        piece(std::span<const std::byte>(at, static_cast<std::size_t>(q - at)));
      }
    }
  }
}

template <class T>
constexpr int_range range_of() {
  if constexpr (std::is_same_v<T, bool>) return {true, 0, 1, "bool"};
  else if constexpr (std::is_same_v<T, std::int64_t>) return {};
  else if constexpr (std::is_same_v<T, std::uint64_t>) return {true, 0, std::numeric_limits<std::int64_t>::max(), "u64"};
  else if constexpr (std::is_same_v<T, std::byte>) return {true, 0, 255, "u8"};
  else if constexpr (std::is_integral_v<T>)
    return {true, static_cast<std::int64_t>(std::numeric_limits<T>::lowest()),
            static_cast<std::int64_t>(std::numeric_limits<T>::max()), dtype_name(dtype_of<T>)};
  else return {};
}

template <class T>
inline constexpr bool byte_like = sizeof(T) == 1 && !std::is_same_v<T, bool>;
template <class T>
inline constexpr bool int_like = std::is_integral_v<T> || std::is_same_v<T, std::byte>;

// Which lists a field of element type t takes: one byte (u8, i8) a bytes_list or an int64_list,
// other integers and bool an int64_list, f32/f64 a float_list; f16 and bf16 none.
inline bool accepts(dtype t, tf_list k) noexcept {
  switch (t) {
    case dtype::u8:
    case dtype::i8: return k == tf_list::bytes || k == tf_list::int64s;
    case dtype::f32:
    case dtype::f64: return k == tf_list::floats;
    case dtype::f16:
    case dtype::bf16: return false;
    default: return k == tf_list::int64s;
  }
}
inline std::string_view takes(dtype t) noexcept {
  if (t == dtype::u8 || t == dtype::i8) return "bytes_list or int64_list";
  if (t == dtype::f32 || t == dtype::f64) return "float_list";
  if (t == dtype::f16 || t == dtype::bf16) return "no list (tf.train.Example holds bytes, int64 and float lists)";
  return "int64_list";
}
inline int_range range_of(dtype t) {
  return visit_dtype(t, []<class T>() { return range_of<T>(); });
}

inline constexpr std::uint64_t any_count = ~std::uint64_t{0};

// Parses one serialised Example for fields reading the features `names` (field k: names[k]) with
// element types `types` into out[k]; a field with expected[k] != any_count must hold that many
// values. What tf_example_reader<> and tf_example_any share; a format_error through `w` when the
// record is malformed or does not fit.
inline void parse_fields(std::span<const std::byte> rec, const where& w, std::span<const std::string_view> names,
                         std::span<const dtype> types, std::span<const std::uint64_t> expected, std::span<tf_feature> out);

// Writes f's values as T (a bytes_list's bytes, floats as float or widened, int64s narrowed: the
// range was checked at parse) to out.
template <class T>
void write_as(const tf_feature& f, std::byte* out) {
  if (f.kind == tf_list::bytes || (f.kind == tf_list::floats && std::is_same_v<T, float>)) {
    if (f.contiguous) {
      if (f.count != 0) std::memcpy(out, f.data.data(), f.data.size());
      return;
    }
    for_each_piece(f, [&](std::span<const std::byte> b) {
      if (!b.empty()) std::memcpy(out, b.data(), b.size());
      out += b.size();
    });
  } else if (f.kind == tf_list::floats) {  // double
    if constexpr (std::is_floating_point_v<T>) {
      for_each_piece(f, [&](std::span<const std::byte> b) {
        for (std::size_t k = 0; k + 4 <= b.size(); k += 4) {
          float v;
          std::memcpy(&v, b.data() + k, 4);
          const T d = static_cast<T>(v);
          std::memcpy(out, &d, sizeof(T));
          out += sizeof(T);
        }
      });
    }
  } else if (f.kind == tf_list::int64s) {
    if constexpr (int_like<T>) {
      for_each_piece(f, [&](std::span<const std::byte> b) {
        const std::byte* q = b.data();
        const std::byte* qe = q + b.size();
        std::uint64_t u = 0;
        const char* why = "";
        while (q < qe) {
          if (static_cast<std::uint8_t>(*q) < 0x80) [[likely]] u = static_cast<std::uint8_t>(*q++);
          else if (!varint(q, qe, u, why)) break;
          T v;
          if constexpr (std::is_same_v<T, std::byte>) v = static_cast<std::byte>(u);
          else v = static_cast<T>(static_cast<std::int64_t>(u));
          std::memcpy(out, &v, sizeof(T));
          out += sizeof(T);
        }
      });
    }
  }
}

}  // namespace detail::pb

// A record's fields: views into the mapping plus counts; follows the field-sample protocol
// (core/schema.hpp), writing each field into the batch at collate.
template <class Schema>
struct tf_example_sample {
  using schema_type = Schema;
  std::uint64_t id = 0;
  std::string_view origin;
  std::array<tf_feature, Schema::size> features{};

  template <fixed_string Name>
  [[nodiscard]] const tf_feature& feature() const noexcept {
    return features[Schema::template index_of<Name>];
  }
  template <fixed_string Name>
  [[nodiscard]] std::uint64_t count_of() const noexcept {
    return feature<Name>().count;
  }
  template <fixed_string Name>
  [[nodiscard]] std::size_t size_of() const noexcept {
    using T = typename Schema::template field_t<Name>::value_type;
    return static_cast<std::size_t>(feature<Name>().count) * sizeof(T);
  }
  template <fixed_string Name>
  void write(std::span<std::byte> dst, const sample_context&) const {
    detail::pb::write_as<typename Schema::template field_t<Name>::value_type>(feature<Name>(), dst.data());
  }
};

// Walks one serialised tf.train.Example with the structure checks of tf_example_reader::parse
// (a format_error through `w` on malformed bytes) and calls on_feature(name, value, entry_at) for
// each feature map entry in order: `value` is its Feature message (parse it with
// detail::pb::parse_feature), `entry_at` where the entry starts. For tools that name features at
// run time (sluice-pack --features); a name given twice is seen twice (the last one wins).
template <class OnFeature>
void for_each_tf_feature(std::span<const std::byte> rec, const detail::pb::where& w, OnFeature&& on_feature) {
  namespace pb = detail::pb;
  const std::byte* p = rec.data();
  const std::byte* end = p + rec.size();
  while (p < end) {  // Example
    const pb::tag t = pb::get_tag(p, end, w);
    if (t.field != 1) {
      pb::skip(t, p, end, w);
      continue;
    }
    if (t.wire != pb::wt_len) w.fail(t.at, "Example.features with wire type " + std::to_string(t.wire) + " (must be 2)");
    const auto feats = pb::get_len(p, end, w);
    const std::byte* q = feats.data();
    const std::byte* qe = q + feats.size();
    while (q < qe) {  // Features
      const pb::tag ft = pb::get_tag(q, qe, w);
      if (ft.field != 1) {
        pb::skip(ft, q, qe, w);
        continue;
      }
      if (ft.wire != pb::wt_len) w.fail(ft.at, "Features.feature entry with wire type " + std::to_string(ft.wire) + " (must be 2)");
      const auto entry = pb::get_len(q, qe, w);
      const std::byte* e = entry.data();
      const std::byte* ee = e + entry.size();
      std::string_view key{};
      std::span<const std::byte> value{};
      bool has_value = false;
      while (e < ee) {  // map entry
        const pb::tag et = pb::get_tag(e, ee, w);
        if (et.field == 1 || et.field == 2) {
          if (et.wire != pb::wt_len)
            w.fail(et.at, std::string(et.field == 1 ? "feature name" : "feature value") + " with wire type " +
                              std::to_string(et.wire) + " (must be 2)");
          const auto b = pb::get_len(e, ee, w);
          if (et.field == 1) {
            key = {reinterpret_cast<const char*>(b.data()), b.size()};
          } else {
            if (has_value) {
              pb::where wk = w;
              wk.feature = key;
              wk.fail(et.at, "map entry holds its value twice");
            }
            value = b;
            has_value = true;
          }
        } else {
          pb::skip(et, e, ee, w);
        }
      }
      on_feature(key, value, ft.at);
    }
  }
}

namespace detail::pb {

inline void parse_fields(std::span<const std::byte> rec, const where& w, std::span<const std::string_view> names,
                         std::span<const dtype> types, std::span<const std::uint64_t> expected, std::span<tf_feature> out) {
  constexpr std::size_t most = 64;
  std::array<const std::byte*, most> at{};  // where each field's winning entry starts
  const std::size_t n = std::min(names.size(), most);
  for_each_tf_feature(rec, w, [&](std::string_view key, std::span<const std::byte> value, const std::byte* entry_at) {
    std::size_t k = 0;
    while (k < n && names[k] != key) ++k;
    if (k == n) return;  // a feature no field reads
    where wf = w;
    wf.feature = names[k];
    out[k] = parse_feature(value, accepts(types[k], tf_list::int64s) ? range_of(types[k]) : int_range{}, wf);
    at[k] = entry_at;  // last one wins
  });
  for (std::size_t k = 0; k < n; ++k) {
    where wk = w;
    wk.feature = names[k];
    const tf_feature& f = out[k];
    if (at[k] == nullptr) wk.fail(w.start, "missing from the record (the schema names it)");
    if (f.kind == tf_list::none) wk.fail(at[k], "holds no list (the Feature sets none of bytes_list, float_list, int64_list)");
    if (!accepts(types[k], f.kind))
      wk.fail(at[k], "is a " + std::string(tf_list_name(f.kind)) + ", but its field is " + std::string(dtype_name(types[k])) +
                         ", which takes " + std::string(takes(types[k])));
    if (expected[k] != any_count && f.count != expected[k])
      wk.fail(at[k], "holds " + std::to_string(f.count) + " values, but its field is fixed at " + std::to_string(expected[k]) +
                         " (record 0's count, or .counts)");
  }
}

// A fixed field whose count comes from record 0, where its list is empty: it would hold nothing
// in every record, and a record with values would fail with a count of 0 to compare.
[[noreturn]] inline void empty_in_record_0(const where& w, std::string_view field) {
  w.fail(nullptr, "holds no values in record 0, which gives fixed field '" + std::string(field) +
                      "' its count (0: nothing in any record); a list whose length varies is a variable field "
                      "(Python: collate=sluice.ragged() or sluice.pad()), or give the count (.counts)");
}

}  // namespace detail::pb

// tf.train.Example records of a TFRecord file as samples with the fields of Schema.
template <class Schema>
class tf_example_reader {
 public:
  using reader_concept = reader_tag;
  using schema_type = Schema;
  using sample_type = tf_example_sample<Schema>;
  using counts_type = std::array<std::uint64_t, Schema::size>;  // per field; ~0: any count
  using names_type = std::array<std::string_view, Schema::size>;  // per field: the feature it reads

  explicit tf_example_reader(std::string path, tf_example_options o = {})
      : tf_example_reader(tfrecord_reader(std::move(path), std::move(o.tfrecord)), std::move(o.counts),
                          std::move(o.features)) {}
  explicit tf_example_reader(tfrecord_reader records, std::vector<std::pair<std::string, std::uint64_t>> counts = {},
                             std::vector<std::pair<std::string, std::string>> features = {})
      : records_(std::move(records)) {
    for (std::size_t k = 0; k < Schema::size; ++k) features_[k] = std::string(Schema::names[k]);
    for (auto& [f, name] : features) {
      std::size_t k = 0;
      while (k < Schema::size && Schema::names[k] != f) ++k;
      if (k == Schema::size)
        throw usage_error("sluice: tf_example_reader: .features names field '" + f + "', which is not a field of the schema");
      if (name.empty()) throw usage_error("sluice: tf_example_reader: .features gives field '" + f + "' an empty feature name");
      features_[k] = std::move(name);
    }
    for (std::size_t a = 0; a < Schema::size; ++a)
      for (std::size_t b = a + 1; b < Schema::size; ++b)
        if (features_[a] == features_[b])
          throw usage_error("sluice: tf_example_reader: fields '" + std::string(Schema::names[a]) + "' and '" +
                            std::string(Schema::names[b]) + "' both read the feature '" + features_[a] +
                            "'; a feature can go to one field only");
    expected_.fill(no_count);
    for (const auto& [name, n] : counts) {
      std::size_t k = 0;
      while (k < Schema::size && Schema::names[k] != name) ++k;
      if (k == Schema::size)
        throw usage_error("sluice: tf_example_reader: .counts names '" + name + "', which is not a field of the schema");
      if (variable_[k])
        throw usage_error("sluice: tf_example_reader: .counts names '" + name + "', a variable field (it takes any count)");
      expected_[k] = n;
    }
    bool learn = false;
    for (std::size_t k = 0; k < Schema::size; ++k) learn |= !variable_[k] && expected_[k] == no_count;
    if (learn && records_.size() > 0) {
      const sample_type s = parse(0, false);
      for (std::size_t k = 0; k < Schema::size; ++k)
        if (!variable_[k] && expected_[k] == no_count) {
          expected_[k] = s.features[k].count;
          if (expected_[k] == 0)
            detail::pb::empty_in_record_0({.file = records_.place(0).path, .feature = features_[k]}, Schema::names[k]);
        }
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return records_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return records_.path(); }
  [[nodiscard]] const tfrecord_reader& records() const noexcept { return records_; }
  [[nodiscard]] const mapped_file& file() const { return records_.file(); }
  // The files as shards (shard_shuffle, shard_split).
  [[nodiscard]] std::size_t shard_count() const noexcept { return records_.shard_count(); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return records_.shard_range(s); }
  // The feature each field reads (its own name, or as tf_example_options::features maps it).
  [[nodiscard]] names_type feature_names() const noexcept {
    names_type n;
    for (std::size_t k = 0; k < Schema::size; ++k) n[k] = features_[k];
    return n;
  }
  // The elements per record a fixed field must have (as given, or record 0's).
  template <fixed_string Name>
  [[nodiscard]] std::uint64_t expected_count() const noexcept {
    return expected_[Schema::template index_of<Name>];
  }

  // The one integer of field Name in every record (a class label), for class_balanced and
  // weighted samplers: parses each record once. A record whose field does not hold exactly one
  // value, or fails to parse, is a format_error naming it.
  template <fixed_string Name>
  [[nodiscard]] std::vector<std::int64_t> labels() const {
    using T = typename Schema::template field_t<Name>::value_type;
    static_assert(detail::pb::int_like<T> && !std::is_same_v<T, std::uint64_t>,
                  "sluice: tf_example_reader::labels<Name>: the field (see Name) must be an integer type of at most 64 "
                  "signed bits");
    std::vector<std::int64_t> out(size());
    for (std::size_t i = 0; i < size(); ++i) {
      const sample_type s = fields(i);
      if (s.template count_of<Name>() != 1) {
        const tfrecord_place at = records_.place(i);
        detail::pb::where w{.file = at.path, .record = at.record, .feature = features_[Schema::template index_of<Name>]};
        w.fail(nullptr, "holds " + std::to_string(s.template count_of<Name>()) + " values; a label needs exactly one");
      }
      T v{};
      s.template write<Name>(std::as_writable_bytes(std::span(&v, 1)), sample_context{});
      if constexpr (std::is_same_v<T, std::byte>) out[i] = static_cast<std::int64_t>(std::to_integer<std::uint8_t>(v));
      else out[i] = static_cast<std::int64_t>(v);
    }
    return out;
  }

  // Record i parsed into views; a format_error naming the file, record, offset and feature when
  // it is malformed or does not fit the schema.
  [[nodiscard]] sample_type fields(std::size_t i) const { return parse(i, true); }

 private:
  template <class S>
  struct fields_of;
  template <class... F>
  struct fields_of<schema<F...>> {
    using type = std::tuple<F...>;
  };
  template <class S>
  using fields_tuple = typename fields_of<S>::type;

  template <std::size_t K>
  using value_t = typename std::tuple_element_t<K, fields_tuple<Schema>>::value_type;

  static constexpr std::uint64_t no_count = ~std::uint64_t{0};
  static constexpr auto variable_ = [] {
    std::array<bool, Schema::size> v{};
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((v[K] = std::tuple_element_t<K, fields_tuple<Schema>>::kind == extent::variable), ...);
    }(std::make_index_sequence<Schema::size>{});
    return v;
  }();


  static constexpr std::array<dtype, Schema::size> types_ = [] {
    std::array<dtype, Schema::size> t{};
    [&]<std::size_t... K>(std::index_sequence<K...>) { ((t[K] = dtype_of<value_t<K>>), ...); }(std::make_index_sequence<Schema::size>{});
    return t;
  }();

  static void check_types() noexcept {
    static_assert(Schema::size <= 64, "sluice: tf_example_reader: at most 64 fields");
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (static_assert_type<value_t<K>>(), ...);
    }(std::make_index_sequence<Schema::size>{});
  }
  template <class T>
  static constexpr void static_assert_type() noexcept {
    static_assert(detail::pb::int_like<T> || std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "sluice: tf_example_reader: a field's type must be an integer type, bool, std::byte, float or "
                  "double (tf.train.Example holds bytes, int64 and float lists)");
  }

  sample_type parse(std::size_t i, bool check_counts) const {
    const auto rec = records_.record(i);
    const tfrecord_place at = records_.place(i);
    const names_type names = feature_names();
    sample_type s = parse(rec, at.path, at.record, at.offset, check_counts ? &expected_ : nullptr, &names);
    s.id = i;  // the reader's index; errors name the record within its file
    return s;
  }

 public:
  // Parses one serialised Example (`rec`) of `file` at record `index`, whose first byte is at file
  // offset `base` (npos: unknown); fixed fields are checked against `expected` when given (~0: any
  // count), fields reading the features `names` gives (nullptr: their own names). What fields(i)
  // does, without a file (for tools and the fuzz target).
  static sample_type parse(std::span<const std::byte> rec, std::string_view file, std::uint64_t index,
                           std::uint64_t base = file_position::npos, const counts_type* expected = nullptr,
                           const names_type* names = nullptr) {
    check_types();
    const names_type& nm = names != nullptr ? *names : Schema::names;
    counts_type want;
    for (std::size_t k = 0; k < Schema::size; ++k)
      want[k] = expected != nullptr && !variable_[k] ? (*expected)[k] : detail::pb::any_count;
    sample_type s{.id = index, .origin = file};
    detail::pb::parse_fields(rec, {.file = file, .record = index, .base = base, .start = rec.data()}, nm, types_, want,
                             s.features);
    return s;
  }

 private:
  tfrecord_reader records_;
  std::array<std::string, Schema::size> features_{};
  counts_type expected_{};
};

// One field of tf_example_any: the sample's field, the feature it reads, its element type and
// extent.
struct tf_field {
  std::string name;
  std::string feature{};            // empty: the field's name
  std::optional<dtype> type{};      // empty: record 0's list says (bytes_list u8, int64_list i64, float_list f32)
  extent kind = extent::variable;   // fixed: every record holds `count` values
  std::optional<std::uint64_t> count{};  // a fixed field's values per record; empty: record 0's count
};

// tf.train.Example records with the fields chosen at run time: fields(i) is a run-time sample
// (core/any_sample.hpp) for read(), any_decode_stage and any_collate, parsed and checked as
// tf_example_reader<> parses them (the same rules, the same errors).
//
//   sluice::io::tf_example_any r{"train.tfrecord", {{"image", "image/encoded"}, {"label", "image/class/label"},
//                                                    {"xmin", "image/object/bbox/xmin"}}};
//   // r.schema(): image (u8, variable), label (i64, variable), xmin (f32, variable), from record 0
//
// A field's type, when not given, is what record 0 holds (a field missing from record 0 must be
// given one); f16 and bf16 are refused (no list holds them). Values are views into the mapping
// where the list is one run the field takes as is (a bytes value, packed floats as f32); otherwise
// (varints, doubles, a list split in pieces) the field is written by a producer at collate, one
// indirect call a field and sample. A fixed field holds one count in every record (given, or record
// 0's) and stacks to {B} (one value) or {B, count}, as the compiled reader's does.
class tf_example_any {
 public:
  using reader_concept = reader_tag;

  tf_example_any(std::string path, std::vector<tf_field> fields, tfrecord_options o = {})
      : tf_example_any(tfrecord_reader(std::move(path), std::move(o)), std::move(fields)) {}
  tf_example_any(tfrecord_reader records, std::vector<tf_field> fields) : records_(std::move(records)) {
    std::vector<field_spec> names;
    for (auto& f : fields) {
      if (f.feature.empty()) f.feature = f.name;
      names.push_back({f.name});
    }
    (void)any_schema(names);  // names distinct, not empty, at most max_any_fields
    for (std::size_t a = 0; a < fields.size(); ++a) {
      for (std::size_t b = 0; b < a; ++b)
        if (fields[a].feature == fields[b].feature)
          throw usage_error("sluice: tf_example_any: fields '" + fields[b].name + "' and '" + fields[a].name +
                            "' both read the feature '" + fields[a].feature + "'; a feature can go to one field only");
      if (fields[a].type && (*fields[a].type == dtype::f16 || *fields[a].type == dtype::bf16))
        throw usage_error("sluice: tf_example_any: field '" + fields[a].name + "' is " + dtype_name(*fields[a].type) +
                          "; tf.train.Example holds bytes, int64 and float lists (take f32)");
      if (fields[a].count && fields[a].kind == extent::variable)
        throw usage_error("sluice: tf_example_any: field '" + fields[a].name + "' is variable (any count) and is given a count");
    }
    fields_ = std::move(fields);
    for (const auto& f : fields_) feature_.push_back(f.feature);
    types_.assign(fields_.size(), dtype::u8);
    expected_.assign(fields_.size(), detail::pb::any_count);
    learn();
    std::vector<field_spec> specs;
    for (std::size_t k = 0; k < fields_.size(); ++k) specs.push_back({fields_[k].name, types_[k], fields_[k].kind});
    schema_ = any_schema(std::move(specs));
    for (std::size_t k = 0; k < fields_.size(); ++k)
      for (std::size_t v = 0; v < 6; ++v) producers_.emplace_back(types_[k], static_cast<tf_list>(v / 2 + 1), v % 2 == 1);
  }

  // Moved, not copied: the samples point to its producers, and its feature names to its fields.
  tf_example_any(tf_example_any&&) noexcept = default;
  tf_example_any& operator=(tf_example_any&&) noexcept = default;
  tf_example_any(const tf_example_any&) = delete;
  tf_example_any& operator=(const tf_example_any&) = delete;

  [[nodiscard]] const any_schema& schema() const noexcept { return schema_; }
  [[nodiscard]] std::size_t size() const noexcept { return records_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return records_.path(); }
  [[nodiscard]] const tfrecord_reader& records() const noexcept { return records_; }
  [[nodiscard]] const mapped_file& file() const { return records_.file(); }
  // The files as shards (shard_shuffle, shard_split).
  [[nodiscard]] std::size_t shard_count() const noexcept { return records_.shard_count(); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return records_.shard_range(s); }
  // The values a fixed field holds in every record (any_count for a variable one).
  [[nodiscard]] std::uint64_t expected_count(std::size_t k) const { return expected_.at(k); }

  // Record i parsed into a run-time sample; a format_error naming the file, the record, the byte
  // offset and the feature when it is malformed or does not fit the fields.
  [[nodiscard]] any_sample fields(std::size_t i) const {
    std::array<tf_feature, max_any_fields> f{};
    const auto rec = records_.record(i);
    const tfrecord_place at = records_.place(i);
    parse(rec, at, expected_, f);
    any_sample out(i, at.path, fields_.size());
    for (std::size_t k = 0; k < out.count; ++k) {
      const tf_feature& x = f[k];
      const bool view = x.contiguous && (x.kind == tf_list::bytes || (x.kind == tf_list::floats && types_[k] == dtype::f32));
      out.fields[k] = {x.data, nullptr,
                       view ? nullptr : &producers_[6 * k + 2 * (static_cast<std::size_t>(x.kind) - 1) + (x.contiguous ? 1 : 0)]};
    }
    return out;
  }

 private:
  // Writes a list that is not one run of the field's values: its values counted and converted
  // (varints narrowed, floats widened, pieces joined) into the batch. One per field, list kind and
  // contiguity; the sample's view holds the feature's data as parse_feature left it.
  class producer final : public field_producer {
   public:
    producer(dtype t, tf_list k, bool contiguous) : type_(t), kind_(k), contiguous_(contiguous) {}
    [[nodiscard]] std::size_t size(const any_sample& s, std::size_t k) const override {
      return static_cast<std::size_t>(count(s.fields[k].bytes)) * dtype_size(type_);
    }
    void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context&) const override {
      const tf_feature f{kind_, contiguous_, count(s.fields[k].bytes), s.fields[k].bytes};
      visit_dtype(type_, [&]<class T>() { detail::pb::write_as<T>(f, dst.data()); });
    }
    [[nodiscard]] field_geometry geometry(const any_sample&, std::size_t) const override { return {}; }

   private:
    // The list's values (validated at parse: every piece is whole).
    [[nodiscard]] std::uint64_t count(std::span<const std::byte> data) const {
      auto in = [&](std::span<const std::byte> b) -> std::uint64_t {
        if (kind_ == tf_list::bytes) return b.size();
        if (kind_ == tf_list::floats) return b.size() / 4;
        return static_cast<std::uint64_t>(
            std::count_if(b.begin(), b.end(), [](std::byte c) { return static_cast<std::uint8_t>(c) < 0x80; }));
      };
      if (contiguous_) return in(data);
      std::uint64_t n = 0;
      detail::pb::for_each_piece(tf_feature{kind_, false, 0, data}, [&](std::span<const std::byte> b) { n += in(b); });
      return n;
    }
    dtype type_;
    tf_list kind_;
    bool contiguous_;
  };

  void parse(std::span<const std::byte> rec, const tfrecord_place& at, const std::vector<std::uint64_t>& expected,
             std::span<tf_feature> out) const {
    detail::pb::parse_fields(rec, {.file = at.path, .record = at.record, .base = at.offset, .start = rec.data()}, feature_,
                             types_, expected, out);
  }

  // The types not given, from record 0's lists (a field missing there must be given one), then
  // the counts of fixed fields not given, from record 0 parsed with those types.
  void learn() {
    bool open_type = false, open_count = false;
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      if (fields_[k].type) types_[k] = *fields_[k].type;
      else open_type = true;
      if (fields_[k].count) expected_[k] = *fields_[k].count;
      else open_count |= fields_[k].kind == extent::fixed;
    }
    if (records_.size() == 0) return;
    const auto rec = records_.record(0);
    const tfrecord_place at0 = records_.place(0);
    const detail::pb::where w{.file = at0.path, .record = at0.record, .base = at0.offset, .start = rec.data()};
    if (open_type) {
      std::vector<tf_list> kind(fields_.size(), tf_list::none);
      for_each_tf_feature(rec, w, [&](std::string_view key, std::span<const std::byte> value, const std::byte*) {
        for (std::size_t k = 0; k < fields_.size(); ++k)
          if (feature_[k] == key) {
            detail::pb::where wf = w;
            wf.feature = feature_[k];
            kind[k] = detail::pb::parse_feature(value, {}, wf).kind;
          }
      });
      for (std::size_t k = 0; k < fields_.size(); ++k) {
        if (fields_[k].type) continue;
        if (kind[k] == tf_list::none)
          w.fail(rec.data(), "feature '" + fields_[k].feature + "' (field '" + fields_[k].name +
                                 "') is not in record 0 or holds no list, so its type is not known: give the field's type");
        types_[k] = kind[k] == tf_list::bytes ? dtype::u8 : kind[k] == tf_list::floats ? dtype::f32 : dtype::i64;
      }
    }
    if (open_count) {
      std::array<tf_feature, max_any_fields> f{};
      parse(rec, at0, std::vector<std::uint64_t>(fields_.size(), detail::pb::any_count), f);
      for (std::size_t k = 0; k < fields_.size(); ++k)
        if (fields_[k].kind == extent::fixed && !fields_[k].count) {
          expected_[k] = f[k].count;
          if (expected_[k] == 0) detail::pb::empty_in_record_0({.file = at0.path, .feature = feature_[k]}, fields_[k].name);
        }
    }
  }

  tfrecord_reader records_;
  std::vector<tf_field> fields_;
  std::vector<std::string_view> feature_;  // into fields_ (moved in, never changed after)
  std::vector<dtype> types_;
  std::vector<std::uint64_t> expected_;
  any_schema schema_;
  std::vector<producer> producers_;  // 6 per field: list kind x contiguous
};

// Builds a tf.train.Example's wire bytes (for tests, tools, benchmarks): features in the order
// added, lists packed unless `.packed = false`.
class tf_example_builder {
 public:
  struct options {
    bool packed = true;
  };
  tf_example_builder() = default;
  explicit tf_example_builder(options o) : opt_(o) {}

  tf_example_builder& bytes(std::string_view name, std::span<const std::span<const std::byte>> values) {
    std::vector<std::byte> list;
    for (auto v : values) put_len(list, 1, v);
    return add(name, 1, list);
  }
  tf_example_builder& bytes(std::string_view name, std::span<const std::byte> value) {
    const std::span<const std::byte> one[1] = {value};
    return bytes(name, std::span<const std::span<const std::byte>>(one));
  }
  tf_example_builder& floats(std::string_view name, std::span<const float> values) {
    std::vector<std::byte> list;
    if (opt_.packed) {
      put_len(list, 1, std::as_bytes(values));
    } else {
      for (float v : values) {
        put_varint(list, (1u << 3) | detail::pb::wt_i32);
        const auto* b = reinterpret_cast<const std::byte*>(&v);
        list.insert(list.end(), b, b + 4);
      }
    }
    return add(name, 2, list);
  }
  tf_example_builder& int64s(std::string_view name, std::span<const std::int64_t> values) {
    std::vector<std::byte> list, packed;
    for (auto v : values) {
      if (!opt_.packed) put_varint(list, (1u << 3) | detail::pb::wt_varint);
      put_varint(opt_.packed ? packed : list, static_cast<std::uint64_t>(v));
    }
    if (opt_.packed) put_len(list, 1, packed);
    return add(name, 3, list);
  }
  // The Example message: Example{features = 1: Features{feature = 1: entries...}}.
  [[nodiscard]] std::vector<std::byte> build() const {
    std::vector<std::byte> out;
    put_len(out, 1, features_);
    return out;
  }

  static void put_varint(std::vector<std::byte>& out, std::uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<std::byte>(v | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<std::byte>(v));
  }
  static void put_len(std::vector<std::byte>& out, std::uint32_t field, std::span<const std::byte> body) {
    put_varint(out, (field << 3) | detail::pb::wt_len);
    put_varint(out, body.size());
    out.insert(out.end(), body.begin(), body.end());
  }

 private:
  tf_example_builder& add(std::string_view name, std::uint32_t kind, const std::vector<std::byte>& list) {
    std::vector<std::byte> feature, entry;
    put_len(feature, kind, list);
    put_len(entry, 1, std::as_bytes(std::span(name.data(), name.size())));
    put_len(entry, 2, feature);
    put_len(features_, 1, entry);
    return *this;
  }
  options opt_{};
  std::vector<std::byte> features_;
};

}  // namespace sluice::io
