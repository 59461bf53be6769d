// sluice/io/mds.hpp — datasets written by MosaicML Streaming's MDSWriter, read without conversion.
//
// An MDS dataset is a directory: `index.json` (the shards, their sample counts, sizes and columns)
// and shard files `shard.NNNNN.mds`. mds_dataset<Schema> is a fields_reader (stage/read.hpp) over
// it: the schema names the columns it wants, by column name, and sample i of the dataset is sample
// i of the shards in the index's order (Streaming's global sample index).
//
//   using mds = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>,   // jpeg
//                              sluice::field<"label", std::int64_t>>;                     // int
//   sluice::io::mds_dataset<mds> data{"/data/imagenet-mds/train"};     // or ".../index.json"
//   auto loader = sluice::from(sluice::sample::shard_split{data, {.rank = r, .world = w, .seed = 7}})
//               | sluice::read(data)
//               | sluice::decode<"image">(sluice::codecs::jpeg{{.width = 224, .height = 224}})
//               | sluice::collate({.batch = 256}, sluice::stack<"image">{}, sluice::stack<"label">{})
//               | sluice::prefetch(2, {.workers = 4});
// Remote datasets (http://, through the node disk tier): remote_mds in io/remote.hpp.
//
// Columns to fields. Columns the schema does not name are never read. A named column's encoding
// decides the field's element type; a mismatch is a format_error at construction naming
// index.json, the shard, the column and both types:
//   bytes, str, json, jpeg[:q], png, pil, str_int, str_float, str_decimal
//                          -> a u8 field (variable, as a rule): the column's bytes as written
//                             (text as UTF-8, images encoded: decode<"name"> decodes jpeg and png)
//   int                    -> int64;  int8 ... int64, uint8 ... uint64, float16/32/64 -> that type
//   ndarray[:dtype[:shape]]-> a field of the array's element type: its values (C order). The shape
//                             is not kept (fields_sample carries bytes); a dynamic dtype is checked
//                             against the field's type per sample.
//   pkl                    -> refused: unpickling runs code from the file.
//   anything else          -> refused, naming the encoding.
// All views point into the shard's mapping: nothing is copied until collate writes the batch.
//
// What is checked, and when:
//   - at construction: index.json (valid JSON, version 2, every shard's format "mds", columns with
//     names, encodings and sizes of one length, a sample count, a raw_data basename that stays
//     inside the directory) and the schema against every shard's columns.
//   - when a shard is first read: the file's size against index.json's raw_data.bytes, its sample
//     count against the index, and its offset table (in bounds, non-decreasing). A shard that fails
//     fails every sample read from it with the same error (it is not opened again), at the batch
//     that needed it: under on_error::skip its samples are skipped and counted.
//   - per sample, when read: the column sizes against the sample's bytes, and each ndarray's header
//     (dtype code, shape) against its values. A format_error names the shard, the sample (its record
//     number in the shard and byte offset), the column and the cause.
// Not checked: the per-shard hashes (sha1, xxh64, ...) index.json may list; sizes and offsets
// catch truncation and most corruption, the decoders the rest.
// Compressed shards (index.json's `compression`, e.g. "zstd"): sluice does not decompress MDS
// shards. A shard whose decompressed file (raw_data.basename) is in the directory — Streaming
// leaves it there in its local cache — is read from it; otherwise the constructor fails, naming
// the shard and saying to write with compression=None (or decompress the shards).
//
// Thread-safety: fields(i) may be called from several threads; a shard is opened once (under its
// own lock) and read-only after. fields(i) allocates nothing once its shard is open.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/file_guard.hpp"
#include "sluice/core/half.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/json.hpp"
#include "sluice/io/lazy_open.hpp"
#include "sluice/io/regular_file.hpp"
#include "sluice/io/mapped_file.hpp"

namespace sluice::io {

static_assert(std::endian::native == std::endian::little, "sluice: MDS shards are little-endian; this reader assumes the host is");

// One column of a shard, as index.json describes it.
struct mds_column {
  std::string name;
  std::string encoding;              // e.g. "int", "jpeg", "ndarray:float32:3"
  std::optional<std::uint64_t> size;  // bytes per sample when fixed; empty when variable
};

// One shard, as index.json describes it.
struct mds_shard_info {
  std::string basename;      // raw_data.basename: the uncompressed shard, relative to the directory
  std::uint64_t bytes = 0;   // raw_data.bytes
  std::uint64_t samples = 0;
  std::string compression;   // empty when none
  std::string zip_basename;  // zip_data.basename when compressed
  std::vector<mds_column> columns;
};

// index.json, parsed and checked (format_error naming `file` otherwise).
[[nodiscard]] inline std::vector<mds_shard_info> parse_mds_index(std::string_view text, const std::string& file) {
  const json_value doc = parse_json(text, file);
  if (!doc.is_object()) throw format_error(file, {}, "an MDS index is a JSON object with \"shards\"; this is " +
                                                         std::string(json_value::kind_name(doc.type())));
  if (const json_value* v = doc.find("version"); v && !(v->is_int() && v->as_int(file, "version") == 2))
    throw format_error(file, {}, "index version is not 2: sluice reads MDS indexes of version 2 (Streaming 0.4 and later)");
  std::vector<mds_shard_info> out;
  const auto& shards = doc.at("shards", file).as_array(file, "\"shards\"");
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const json_value& sh = shards[s];
    const std::string where = "shards[" + std::to_string(s) + "]";
    if (!sh.is_object()) throw format_error(file, {}, where + " is not a JSON object");
    const std::string& format = sh.at("format", file, where).as_string(file, where + ".format");
    if (format != "mds")
      throw format_error(file, {}, where + " is written in the '" + format +
                                       "' format: sluice reads MDS shards (MDSWriter); convert the others with Streaming");
    mds_shard_info info;
    const std::int64_t n = sh.at("samples", file, where).as_int(file, where + ".samples");
    if (n < 0 || n > 0xffffffffll) throw format_error(file, {}, where + ".samples is " + std::to_string(n) + ", not a sample count");
    info.samples = static_cast<std::uint64_t>(n);
    const json_value& raw = sh.at("raw_data", file, where);
    info.basename = raw.at("basename", file, where + ".raw_data").as_string(file, where + ".raw_data.basename");
    const std::int64_t bytes = raw.at("bytes", file, where + ".raw_data").as_int(file, where + ".raw_data.bytes");
    if (bytes < 0) throw format_error(file, {}, where + ".raw_data.bytes is negative");
    info.bytes = static_cast<std::uint64_t>(bytes);
    // A shard starts with its sample count and an offset table of samples + 1 entries (u32 each):
    // an index whose count that table could not fit in is refused here, not walked sample by
    // sample under on_error::skip.
    if (4 + 4 * (info.samples + 1) > info.bytes)
      throw format_error(file, {}, where + ".samples is " + std::to_string(info.samples) + ", but its raw_data.bytes (" +
                                       std::to_string(info.bytes) + ") cannot hold the offset table of that many samples (" +
                                       std::to_string(4 + 4 * (info.samples + 1)) + " bytes)");
    auto safe = [&](const std::string& name, const char* what) {
      // A shard name stays inside the dataset's directory: no absolute path, no "..", no empty part.
      bool ok = !name.empty() && name.front() != '/' && name.find('\0') == std::string::npos;
      for (std::size_t b = 0; ok && b <= name.size();) {
        const std::size_t e = std::min(name.find('/', b), name.size());
        const std::string_view part(name.data() + b, e - b);
        ok = !part.empty() && part != "." && part != "..";
        b = e + 1;
      }
      if (!ok) throw format_error(file, {}, where + "." + what + " '" + name + "' is not a file name inside the dataset's directory");
    };
    safe(info.basename, "raw_data.basename");
    if (const json_value* c = sh.find("compression"); c && !c->is_null()) {
      info.compression = c->as_string(file, where + ".compression");
      const json_value& zip = sh.at("zip_data", file, where);
      info.zip_basename = zip.at("basename", file, where + ".zip_data").as_string(file, where + ".zip_data.basename");
      safe(info.zip_basename, "zip_data.basename");
    }
    const auto& names = sh.at("column_names", file, where).as_array(file, where + ".column_names");
    const auto& encs = sh.at("column_encodings", file, where).as_array(file, where + ".column_encodings");
    const auto& sizes = sh.at("column_sizes", file, where).as_array(file, where + ".column_sizes");
    if (names.size() != encs.size() || names.size() != sizes.size())
      throw format_error(file, {}, where + ": " + std::to_string(names.size()) + " column names, " + std::to_string(encs.size()) +
                                       " encodings and " + std::to_string(sizes.size()) + " sizes (one each per column)");
    for (std::size_t c = 0; c < names.size(); ++c) {
      const std::string cw = where + ".column_*[" + std::to_string(c) + "]";
      mds_column col{names[c].as_string(file, cw + " name"), encs[c].as_string(file, cw + " encoding"), {}};
      if (!sizes[c].is_null()) {
        const std::int64_t sz = sizes[c].as_int(file, cw + " size");
        if (sz < 0) throw format_error(file, {}, cw + " size is negative");
        col.size = static_cast<std::uint64_t>(sz);
      }
      for (const auto& other : info.columns)
        if (other.name == col.name) throw format_error(file, {}, where + " names column '" + col.name + "' twice");
      info.columns.push_back(std::move(col));
    }
    out.push_back(std::move(info));
  }
  return out;
}

// A shard file opened for reading: its mapping, the name errors give it, and whatever must live
// while it is read (a remote shard's hold on its disk-tier file).
struct mds_shard_file {
  std::string path;
  mapped_file file;
  std::shared_ptr<const void> hold;
};
// Opens shard `s` (described by `info`); throws io_error/format_error naming it when it cannot.
using mds_opener = std::function<mds_shard_file(const mds_shard_info& info, std::size_t s)>;

struct mds_options {
  map_options map{.advice = access::automatic};
  // Field name -> column name, for a schema fixed at compile time over columns named at run time
  // (the Python module's image_field=); a field not listed takes the column of its own name.
  std::vector<std::pair<std::string, std::string>> columns{};
};

namespace detail {

// How a field takes its column.
enum class mds_take : std::uint8_t { raw, scalar, ndarray };

struct mds_encoding {
  mds_take take = mds_take::raw;
  dtype type = dtype::u8;         // scalar; ndarray with a static dtype
  bool dynamic_dtype = false;     // ndarray: a dtype byte leads each value
  bool dynamic_shape = false;     // ndarray: ndim/shape bytes lead each value
  std::uint64_t static_elems = 0; // ndarray with a static shape
};

inline std::optional<dtype> mds_dtype_named(std::string_view n) {
  constexpr std::pair<std::string_view, dtype> table[] = {
      {"uint8", dtype::u8},   {"uint16", dtype::u16}, {"uint32", dtype::u32}, {"uint64", dtype::u64},
      {"int8", dtype::i8},    {"int16", dtype::i16},  {"int32", dtype::i32},  {"int64", dtype::i64},
      {"float16", dtype::f16}, {"float32", dtype::f32}, {"float64", dtype::f64}};
  for (auto [name, t] : table)
    if (name == n) return t;
  return std::nullopt;
}

// The ndarray encoding's dtype codes (NumPy name -> one byte: bits per item, +1 signed, +2 float).
inline std::optional<dtype> mds_ndarray_code(std::uint8_t c) {
  switch (c) {
    case 8: return dtype::u8;
    case 9: return dtype::i8;
    case 16: return dtype::u16;
    case 17: return dtype::i16;
    case 18: return dtype::f16;
    case 32: return dtype::u32;
    case 33: return dtype::i32;
    case 34: return dtype::f32;
    case 64: return dtype::u64;
    case 65: return dtype::i64;
    case 66: return dtype::f64;
    default: return std::nullopt;
  }
}

// Parses an encoding string; nullopt plus `why` when sluice cannot take it.
inline std::optional<mds_encoding> parse_mds_encoding(const std::string& enc, std::string& why) {
  const std::size_t colon = enc.find(':');
  const std::string_view base = std::string_view(enc).substr(0, colon);
  const std::string_view args = colon == std::string::npos ? std::string_view{} : std::string_view(enc).substr(colon + 1);
  constexpr std::string_view raw[] = {"bytes", "str", "json", "jpeg", "png", "pil", "str_int", "str_float", "str_decimal"};
  mds_encoding e;
  if (std::find(std::begin(raw), std::end(raw), base) != std::end(raw)) return e;
  if (base == "pkl") {
    why = "it is pickled (pkl): sluice never unpickles, since unpickling runs code from the file; write the column as "
          "bytes, json or ndarray";
    return std::nullopt;
  }
  if (base == "int" && args.empty()) {
    e.take = mds_take::scalar;
    e.type = dtype::i64;
    return e;
  }
  if (auto t = mds_dtype_named(base); t && args.empty()) {
    e.take = mds_take::scalar;
    e.type = *t;
    return e;
  }
  if (base == "ndarray") {
    e.take = mds_take::ndarray;
    e.dynamic_dtype = e.dynamic_shape = true;
    if (args.empty()) return e;
    const std::size_t c2 = args.find(':');
    const std::string_view dt = args.substr(0, c2);
    auto t = mds_dtype_named(dt);
    if (!t) {
      why = "its ndarray dtype '" + std::string(dt) + "' is not one MDS writes";
      return std::nullopt;
    }
    e.type = *t;
    e.dynamic_dtype = false;
    if (c2 == std::string_view::npos) return e;
    std::string_view shape = args.substr(c2 + 1);
    std::uint64_t elems = 1;
    while (true) {
      const std::size_t comma = shape.find(',');
      const std::string_view d = shape.substr(0, comma);
      std::uint64_t v = 0;
      auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
      if (ec != std::errc{} || p != d.data() + d.size() || v == 0 || elems > (std::uint64_t{1} << 40) / v) {
        why = "its ndarray shape '" + std::string(args.substr(c2 + 1)) + "' is not a list of positive sizes";
        return std::nullopt;
      }
      elems *= v;
      if (comma == std::string_view::npos) break;
      shape.remove_prefix(comma + 1);
    }
    e.dynamic_shape = false;
    e.static_elems = elems;
    return e;
  }
  why = "sluice does not know the encoding '" + enc +
        "' (it reads bytes, str, json, jpeg, png, pil, str_int, str_float, str_decimal, int, int8..int64, "
        "uint8..uint64, float16/32/64 and ndarray)";
  return std::nullopt;
}

inline std::uint32_t load_u32(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Checks a shard file's header and offset table against its index entry; format_error naming
// `name` if they disagree. What mds_dataset does at a shard's first read, and remote_mds before a
// download is published.
inline void check_mds_shard(std::span<const std::byte> f, const mds_shard_info& info, const std::string& name) {
  if (f.size() != info.bytes)
    throw format_error(name, {}, "the file is " + std::to_string(f.size()) + " bytes but index.json says " +
                                     std::to_string(info.bytes) + " (truncated, or rewritten without its index)");
  if (f.size() < 4) throw format_error(name, {.offset = 0}, "too short for an MDS shard header (4-byte sample count)");
  const std::uint64_t n = load_u32(f.data());
  if (n != info.samples)
    throw format_error(name, {.offset = 0}, "the shard holds " + std::to_string(n) + " samples but index.json says " +
                                                std::to_string(info.samples));
  const std::uint64_t table_end = 4 + 4 * (n + 1);
  if (table_end > f.size())
    throw format_error(name, {.offset = 4}, "the offset table of " + std::to_string(n + 1) + " entries runs past the end of the file");
  std::uint64_t prev = table_end;
  for (std::uint64_t k = 0; k <= n; ++k) {
    const std::uint64_t o = load_u32(f.data() + 4 + 4 * k);
    if (o < prev || o > f.size())
      throw format_error(name, {.record = k < n ? k : file_position::npos, .offset = 4 + 4 * k},
                         "offset table entry " + std::to_string(k) + " is " + std::to_string(o) + ", outside [" +
                             std::to_string(prev) + ", " + std::to_string(f.size()) + "] (the table must be non-decreasing and inside the file)");
    prev = o;
  }
}

}  // namespace detail

template <class Schema>
class mds_dataset {
  static constexpr std::size_t F = Schema::size;
  template <std::size_t K>
  using field_k = schema_field_t<Schema, K>;

 public:
  using reader_concept = reader_tag;
  using schema_type = Schema;
  using sample_type = fields_sample<Schema>;

  // A local dataset: its directory, or its index.json.
  explicit mds_dataset(std::string dir_or_index, mds_options o = {}) : opt_(o) {
    std::string index = dir_or_index;
    if (index.ends_with(".json")) {
      const std::size_t slash = index.rfind('/');
      dir_ = slash == std::string::npos ? "." : index.substr(0, slash);
    } else {
      while (index.size() > 1 && index.back() == '/') index.pop_back();
      dir_ = index;
      index += "/index.json";
    }
    name_ = index;
    auto shards = parse_mds_index(read_text(index), index);
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const auto& i = shards[s];
      struct stat st {};
      const std::string raw = dir_ + "/" + i.basename;
      if (::stat(raw.c_str(), &st) == 0) {
        // A shard that is here is checked against its index entry now (size and sample count:
        // 4 bytes read), so an index that lies fails at construction, under skip too. A shard
        // that is not here is an io_error at the first batch that needs it.
        const std::string why = check_header(raw, i);
        if (!why.empty()) throw format_error(raw, {}, why + " (shard " + std::to_string(s) + " of " + index + ")");
      }
      if (!i.compression.empty() && ::stat(raw.c_str(), &st) != 0)
        throw format_error(dir_ + "/" + i.zip_basename, {},
                           "shard " + std::to_string(s) + " is compressed (" + i.compression + ") and its decompressed file '" +
                               i.basename + "' is not in " + dir_ +
                               ": sluice reads uncompressed MDS shards; write them with compression=None, or decompress "
                               "them beside index.json");
    }
    init(std::move(shards));
    const std::string dir = dir_;
    const map_options map = opt_.map;
    opener_ = [dir, map](const mds_shard_info& info, std::size_t) {
      std::string path = dir + "/" + info.basename;
      mapped_file f(path, map);
      return mds_shard_file{std::move(path), std::move(f), nullptr};
    };
  }
  // Shards from anywhere: `name` for messages (the index's URL), `open` maps shard s when it is
  // first read (on the worker that needs it). io/remote.hpp's remote_mds builds one.
  mds_dataset(std::vector<mds_shard_info> shards, std::string name, mds_opener open, mds_options o = {})
      : opt_(o), name_(std::move(name)), opener_(std::move(open)) {
    if (!opener_) throw usage_error("sluice: mds_dataset needs a shard opener");
    init(std::move(shards));
  }

  mds_dataset(mds_dataset&&) noexcept = default;
  mds_dataset& operator=(mds_dataset&&) noexcept = default;
  ~mds_dataset() { ahead_.stop(); }

  // Opens shard s on a background thread (for a remote dataset: fetches it into the tier) so the
  // worker that reads it later does not wait; returns at once. A failure is reported by the read
  // that needs the shard. sample::fetch_ahead calls it for the windows ahead of the loader.
  void prefetch(std::size_t s) const {
    if (s >= shards_.size() || shards_[s]->ready()) return;
    ahead_.post([this, s] { (void)open(s); });
  }

  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(table_.total()); }
  // The index's path or URL (each sample's origin is its shard).
  [[nodiscard]] std::string_view path() const noexcept { return name_; }

  [[nodiscard]] std::size_t shard_count() const noexcept { return info_.size(); }
  [[nodiscard]] const mds_shard_info& shard_info(std::size_t s) const { return info_.at(s); }
  [[nodiscard]] std::size_t shard_size(std::size_t s) const { return table_.size_of(s); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return table_.range(s); }
  [[nodiscard]] std::size_t shard_of(std::uint64_t i) const { return table_.shard_of(i, name_); }
  [[nodiscard]] std::vector<std::size_t> sizes() const { return table_.sizes(); }
  [[nodiscard]] bool is_open(std::size_t s) const { return shards_.at(s)->ready(); }

  // Closes every open shard and forgets failures (see remote_shards::release_all): only while
  // nothing reads from this dataset; sample::fetch_ahead calls it between epochs.
  void release_all() const {
    ahead_.stop();
    for (const auto& l : shards_) l->reset();
  }

  // Sample i: its fields as views into its shard's mapping; format_error for a bad sample.
  [[nodiscard]] sample_type fields(std::size_t i) const {
    const std::size_t s = shard_of(i);
    const shard_state& sh = open(s);
    if (sluice::detail::file_registry::instance().flagged() != 0) [[unlikely]] sh.file.file.throw_if_changed();
    const std::uint64_t local = i - table_.first[s];
    const auto f = sh.file.file.bytes();
    const std::uint64_t begin = detail::load_u32(f.data() + 4 + 4 * local);
    const std::uint64_t end = detail::load_u32(f.data() + 8 + 4 * local);
    const std::span<const std::byte> sample = f.subspan(begin, end - begin);
    const plan& pl = plans_[s];
    // The sample: a u32 size per variable column, then every column's bytes in column order.
    const std::uint64_t head = 4 * pl.variable;
    if (head > sample.size())
      bad(sh, local, begin, "its " + std::to_string(pl.variable) + " column sizes take " + std::to_string(head) +
                                " bytes but the sample holds " + std::to_string(sample.size()));
    std::array<std::span<const std::byte>, F> col{};
    std::uint64_t at = head, var = 0;
    for (std::size_t c = 0; c < pl.sizes.size(); ++c) {
      const std::uint64_t n = pl.sizes[c] ? *pl.sizes[c] : detail::load_u32(sample.data() + 4 * var++);
      if (n > sample.size() - at)
        bad(sh, local, begin, "column '" + info_[s].columns[c].name + "' (" + std::to_string(n) + " bytes at byte " +
                                  std::to_string(at) + " of the sample) runs past the sample's end (" +
                                  std::to_string(sample.size()) + " bytes)");
      for (std::size_t k = 0; k < F; ++k)
        if (pl.column[k] == c) col[k] = sample.subspan(at, n);
      at += n;
    }
    if (at != sample.size())
      bad(sh, local, begin, "its columns take " + std::to_string(at) + " bytes but the sample holds " + std::to_string(sample.size()));
    sample_type out{.id = i, .origin = sh.file.path};
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((out.values[K] = value<K>(sh, local, begin, col[K], pl.enc[K])), ...);
    }(std::make_index_sequence<F>{});
    return out;
  }

 private:
  struct plan {
    std::array<std::size_t, F> column{};               // the column each field takes
    std::array<detail::mds_encoding, F> enc{};
    std::vector<std::optional<std::uint64_t>> sizes;  // every column's fixed size (empty: variable)
    std::uint64_t variable = 0;                       // columns of variable size
  };
  struct shard_state {
    mds_shard_file file;
  };
  using lazy_shard = detail::lazy_open<shard_state>;

  // What is wrong with the shard file at `raw` against its index entry (size, sample count), or
  // empty. A file that is not regular is refused by the open (it never blocks).
  static std::string check_header(const std::string& raw, const mds_shard_info& info) {
    struct stat st {};
    const int fd = detail::open_regular_nonblocking(raw, st);
    std::uint32_t n = 0;
    const ssize_t got = ::pread(fd, &n, 4, 0);
    ::close(fd);
    if (static_cast<std::uint64_t>(st.st_size) != info.bytes)
      return "the file is " + std::to_string(st.st_size) + " bytes but index.json says " + std::to_string(info.bytes) +
             " (truncated, or rewritten without its index)";
    if (got != 4) return "too short for an MDS shard header (4-byte sample count)";
    if (n != info.samples)
      return "the shard holds " + std::to_string(n) + " samples but index.json says " + std::to_string(info.samples);
    return {};
  }

  // index.json: a regular file of at most 1 GiB (a FIFO, a directory or /dev/zero is refused).
  static std::string read_text(const std::string& path) {
    return detail::read_small_file(path, std::size_t{1} << 30, "an MDS index");
  }

  void init(std::vector<mds_shard_info> shards) {
    for (const auto& [f, c] : opt_.columns)
      if (std::find(Schema::names.begin(), Schema::names.end(), f) == Schema::names.end())
        throw usage_error("sluice: mds_dataset: mds_options::columns names field '" + f + "', which the schema does not have");
    info_ = std::move(shards);
    if (info_.empty()) throw format_error(name_, {}, "the index lists no shards");
    table_.first.reserve(info_.size() + 1);
    for (std::size_t s = 0; s < info_.size(); ++s) {
      plans_.push_back(make_plan(s));
      table_.add(info_[s].samples);
      shards_.push_back(std::make_unique<lazy_shard>());
    }
  }

  plan make_plan(std::size_t s) const {
    const mds_shard_info& info = info_[s];
    plan p;
    for (const auto& c : info.columns) {
      p.sizes.push_back(c.size);
      if (!c.size) ++p.variable;
    }
    auto where = [&](std::size_t k) {
      std::string w = "shard " + std::to_string(s) + " (" + info.basename + "), field '" + std::string(Schema::names[k]) + "'";
      for (const auto& [f, c] : opt_.columns)
        if (f == Schema::names[k]) w += " (column '" + c + "')";
      return w + ": ";
    };
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (([&] {
         using Fk = field_k<K>;
         using T = typename Fk::value_type;
         std::string_view want = Fk::name.view();
         for (const auto& [f, c] : opt_.columns)
           if (f == want) want = c;
         std::size_t c = 0;
         while (c < info.columns.size() && info.columns[c].name != want) ++c;
         if (c == info.columns.size()) {
           std::string have;
           for (const auto& x : info.columns) have += (have.empty() ? "" : ", ") + x.name;
           throw format_error(name_, {}, where(K) + "no column of that name (the shard has " + have + ")");
         }
         p.column[K] = c;
         const mds_column& col = info.columns[c];
         std::string why;
         auto e = detail::parse_mds_encoding(col.encoding, why);
         if (!e) throw format_error(name_, {}, where(K) + "column '" + col.name + "': " + why);
         const std::string ty = "the field's element type is " + std::string(dtype_name(dtype_of<T>));
         if (e->take == detail::mds_take::raw && !std::is_same_v<T, std::uint8_t>)
           throw format_error(name_, {}, where(K) + "column '" + col.name + "' is encoded '" + col.encoding +
                                             "' (bytes): it needs a u8 field, but " + ty);
         const bool typed = e->take == detail::mds_take::scalar || (e->take == detail::mds_take::ndarray && !e->dynamic_dtype);
         if (typed && e->type != dtype_of<T>)
           throw format_error(name_, {}, where(K) + "column '" + col.name + "' is encoded '" + col.encoding + "' (" +
                                             std::string(dtype_name(e->type)) + "), but " + ty);
         if (e->take == detail::mds_take::ndarray && e->dynamic_dtype) {
           bool any = false;
           for (int code : {8, 9, 16, 17, 18, 32, 33, 34, 64, 65, 66}) any = any || detail::mds_ndarray_code(static_cast<std::uint8_t>(code)) == dtype_of<T>;
           if (!any) throw format_error(name_, {}, where(K) + "column '" + col.name + "' is an ndarray, which never holds " + ty);
         }
         p.enc[K] = *e;
       }()),
       ...);
    }(std::make_index_sequence<F>{});
    return p;
  }

  // Opens shard s once; a shard that failed keeps failing with the same error.
  const shard_state& open(std::size_t s) const {
    return shards_[s]->get(
        [&] {
          auto st = std::make_unique<shard_state>();
          st->file = opener_(info_[s], s);
          detail::check_mds_shard(st->file.file.bytes(), info_[s], st->file.path);
          return st;
        },
        detail::on_failure::remember);
  }

  [[noreturn]] void bad(const shard_state& sh, std::uint64_t local, std::uint64_t offset, const std::string& why) const {
    throw format_error(sh.file.path, {.record = local, .offset = offset}, "sample " + std::to_string(local) + ": " + why);
  }

  template <std::size_t K>
  std::span<const std::byte> value(const shard_state& sh, std::uint64_t local, std::uint64_t offset,
                                   std::span<const std::byte> v, const detail::mds_encoding& e) const {
    using T = typename field_k<K>::value_type;
    auto fail = [&](const std::string& why) {
      bad(sh, local, offset, "column '" + std::string(Schema::names[K]) + "' (" + std::string(dtype_name(dtype_of<T>)) + "): " + why);
    };
    if (e.take == detail::mds_take::raw) return v;
    if (e.take == detail::mds_take::scalar) {
      if (v.size() != sizeof(T)) fail(std::to_string(v.size()) + " bytes, not one " + std::to_string(sizeof(T)) + "-byte value");
      return v;
    }
    std::size_t at = 0;
    if (e.dynamic_dtype) {
      if (v.empty()) fail("an ndarray with no dtype byte");
      const auto t = detail::mds_ndarray_code(static_cast<std::uint8_t>(v[0]));
      if (!t) fail("ndarray dtype code " + std::to_string(static_cast<unsigned>(v[0])) + " is not one MDS writes");
      if (*t != dtype_of<T>) fail("the ndarray holds " + std::string(dtype_name(*t)) + " values");
      at = 1;
    }
    std::uint64_t elems = e.static_elems;
    if (e.dynamic_shape) {
      if (at >= v.size()) fail("an ndarray with no shape byte");
      const auto b = static_cast<std::uint8_t>(v[at++]);
      const std::size_t ndim = b >> 2, width = std::size_t{1} << (b & 3);
      if (ndim == 0) fail("an ndarray of 0 dimensions");
      if (ndim * width > v.size() - at) fail("its shape (" + std::to_string(ndim) + " dimensions) runs past the value's end");
      elems = 1;
      for (std::size_t d = 0; d < ndim; ++d) {
        std::uint64_t x = 0;
        std::memcpy(&x, v.data() + at + d * width, width);
        if (x == 0 || elems > v.size() / x) fail("its shape does not match its " + std::to_string(v.size()) + " bytes");
        elems *= x;
      }
      at += ndim * width;
    }
    if (elems > (v.size() - at) / sizeof(T) || elems * sizeof(T) != v.size() - at)
      fail("its shape says " + std::to_string(elems) + " values, its data holds " + std::to_string(v.size() - at) + " bytes");
    return v.subspan(at);
  }

  mutable detail::opener_handle ahead_;  // first: moved (stopping the source's thread) before the rest
  mds_options opt_;
  std::string name_;
  std::string dir_;
  mds_opener opener_;
  std::vector<mds_shard_info> info_;
  std::vector<plan> plans_;
  std::vector<std::unique_ptr<lazy_shard>> shards_;
  detail::shard_table table_;
};

}  // namespace sluice::io
