// sluice/io/mds.hpp — datasets written by MosaicML Streaming's MDSWriter, read without conversion.
//
// mds_dataset<Schema> is a fields_reader over an MDS directory (`index.json` and its shard files):
// the schema names the columns it wants, and sample i is Streaming's global sample i. A column's
// encoding decides the field's type (bytes, str, json, jpeg, png: u8; int: int64; the sized ints
// and floats; ndarray: its element type); pkl is refused (unpickling runs code). Views point into
// the shard's mapping. mds_any is the same with fields chosen at run time; remote_mds
// (io/remote.hpp) reads one over http through the node disk tier.
// Errors: index.json and the schema are checked at construction; a shard's size, count and
// offsets when it is first read (a bad shard fails every sample read from it); each sample's
// sizes and ndarray headers when it is read: format_errors naming the shard, the sample, the
// column and the cause. Compressed shards are read only from their decompressed file in the
// directory, else refused at construction, saying so.
// Threads: fields(i) may be called from several threads; it allocates nothing once its shard is
// open. Every rule: docs/readers.md.
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

#include "sluice/core/any_sample.hpp"
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
  std::vector<std::int64_t> static_shape{};  // its sizes
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
      e.static_shape.push_back(static_cast<std::int64_t>(v));
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

// One field an MDS reader takes: its name in the sample, the column it reads, and its element
// type (nullopt: the column's own, for readers whose fields are known at run time).
struct mds_field {
  std::string name;
  std::string column;
  std::optional<dtype> type{};
};

// The index.json of a dataset given as its directory or its index.
inline std::string mds_index_path(std::string dir_or_index) {
  if (dir_or_index.ends_with(".json")) return dir_or_index;
  while (dir_or_index.size() > 1 && dir_or_index.back() == '/') dir_or_index.pop_back();
  return dir_or_index + "/index.json";
}

// index.json, read: a regular file of at most 1 GiB (a FIFO, a directory or /dev/zero is refused).
inline std::string read_mds_index(const std::string& index) {
  return read_small_file(index, std::size_t{1} << 30, "an MDS index");
}

// An MDS dataset with its fields given at run time: what mds_dataset<Schema> and mds_any share
// (one index parse, one set of checks, one set of errors).
class mds_core {
 public:
  mds_core(const std::string& dir_or_index, std::vector<mds_field> fields, map_options map)
      : name_(mds_index_path(dir_or_index)), fields_(std::move(fields)) {
    const std::size_t slash = name_.rfind('/');
    dir_ = slash == std::string::npos ? "." : name_.substr(0, slash);
    auto shards = parse_mds_index(read_mds_index(name_), name_);
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const auto& i = shards[s];
      struct stat st {};
      const std::string raw = dir_ + "/" + i.basename;
      if (::stat(raw.c_str(), &st) == 0) {
        // A shard that is here is checked against its index entry now (size and sample count:
        // 4 bytes read), so an index that lies fails at construction, under skip too. A shard
        // that is not here is an io_error at the first batch that needs it.
        const std::string why = check_header(raw, i);
        if (!why.empty()) throw format_error(raw, {}, why + " (shard " + std::to_string(s) + " of " + name_ + ")");
      }
      if (!i.compression.empty() && ::stat(raw.c_str(), &st) != 0)
        throw format_error(dir_ + "/" + i.zip_basename, {},
                           "shard " + std::to_string(s) + " is compressed (" + i.compression + ") and its decompressed file '" +
                               i.basename + "' is not in " + dir_ +
                               ": sluice reads uncompressed MDS shards; write them with compression=None, or decompress "
                               "them beside index.json");
    }
    const std::string dir = dir_;
    opener_ = [dir, map](const mds_shard_info& info, std::size_t) {
      std::string path = dir + "/" + info.basename;
      mapped_file f(path, map);
      return mds_shard_file{std::move(path), std::move(f), nullptr};
    };
    init(std::move(shards));
  }
  mds_core(std::vector<mds_shard_info> shards, std::string name, mds_opener open, std::vector<mds_field> fields)
      : name_(std::move(name)), fields_(std::move(fields)), opener_(std::move(open)) {
    if (!opener_) throw usage_error("sluice: mds_dataset needs a shard opener");
    init(std::move(shards));
  }

  mds_core(mds_core&&) noexcept = default;
  mds_core& operator=(mds_core&&) noexcept = default;
  ~mds_core() { ahead_.stop(); }

  void prefetch(std::size_t s) const {
    if (s >= shards_.size() || shards_[s]->ready()) return;
    ahead_.post([this, s] { (void)open(s); });
  }
  void release_all() const {
    ahead_.stop();
    for (const auto& l : shards_) l->reset();
  }

  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(table_.total()); }
  [[nodiscard]] std::string_view path() const noexcept { return name_; }
  [[nodiscard]] std::size_t shard_count() const noexcept { return info_.size(); }
  [[nodiscard]] const mds_shard_info& shard_info(std::size_t s) const { return info_.at(s); }
  [[nodiscard]] std::size_t shard_size(std::size_t s) const { return table_.size_of(s); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return table_.range(s); }
  [[nodiscard]] std::size_t shard_of(std::uint64_t i) const { return table_.shard_of(i, name_); }
  [[nodiscard]] std::vector<std::size_t> sizes() const { return table_.sizes(); }
  [[nodiscard]] bool is_open(std::size_t s) const { return shards_.at(s)->ready(); }

  [[nodiscard]] const std::vector<mds_field>& fields() const noexcept { return fields_; }
  // Field k's element type (given, or its column's) and, for a fixed-size column (a scalar, an
  // ndarray of static shape), its per-sample shape as the first shard's index gives it.
  [[nodiscard]] dtype type_of(std::size_t k) const noexcept { return types_[k]; }
  [[nodiscard]] const std::optional<std::vector<std::int64_t>>& shape_of(std::size_t k) const noexcept { return shapes_[k]; }
  // Field k's column's encoding in the first shard ("jpeg", "pil", "ndarray:float32:3").
  [[nodiscard]] const std::string& encoding_of(std::size_t k) const noexcept { return encodings_[k]; }

  // Sample i's fields, out[k] for field k, as views into its shard's mapping; returns its shard's
  // path. A format_error for a bad sample.
  std::string_view sample(std::size_t i, std::span<std::span<const std::byte>> out) const {
    const std::size_t s = shard_of(i);
    const shard_state& sh = open(s);
    if (sluice::detail::file_registry::instance().flagged() != 0) [[unlikely]] sh.file.file.throw_if_changed();
    const std::uint64_t local = i - table_.first[s];
    const auto f = sh.file.file.bytes();
    const std::uint64_t begin = load_u32(f.data() + 4 + 4 * local);
    const std::uint64_t end = load_u32(f.data() + 8 + 4 * local);
    const std::span<const std::byte> sample = f.subspan(begin, end - begin);
    const plan& pl = plans_[s];
    // The sample: a u32 size per variable column, then every column's bytes in column order.
    const std::uint64_t head = 4 * pl.variable;
    if (head > sample.size())
      bad(sh, local, begin, "its " + std::to_string(pl.variable) + " column sizes take " + std::to_string(head) +
                                " bytes but the sample holds " + std::to_string(sample.size()));
    std::uint64_t at = head, var = 0;
    for (std::size_t c = 0; c < pl.sizes.size(); ++c) {
      const std::uint64_t n = pl.sizes[c] ? *pl.sizes[c] : load_u32(sample.data() + 4 * var++);
      if (n > sample.size() - at)
        bad(sh, local, begin, "column '" + info_[s].columns[c].name + "' (" + std::to_string(n) + " bytes at byte " +
                                  std::to_string(at) + " of the sample) runs past the sample's end (" +
                                  std::to_string(sample.size()) + " bytes)");
      for (std::size_t k = 0; k < fields_.size(); ++k)
        if (pl.column[k] == c) out[k] = sample.subspan(at, n);
      at += n;
    }
    if (at != sample.size())
      bad(sh, local, begin, "its columns take " + std::to_string(at) + " bytes but the sample holds " + std::to_string(sample.size()));
    for (std::size_t k = 0; k < fields_.size(); ++k) out[k] = value(sh, local, begin, k, out[k], pl.enc[k]);
    return sh.file.path;
  }

 private:
  struct plan {
    std::vector<std::size_t> column;                  // the column each field takes
    std::vector<mds_encoding> enc;                    // its encoding
    std::vector<std::optional<std::uint64_t>> sizes;  // every column's fixed size (empty: variable)
    std::uint64_t variable = 0;                       // columns of variable size
  };
  struct shard_state {
    mds_shard_file file;
  };
  using lazy_shard = lazy_open<shard_state>;

  // What is wrong with the shard file at `raw` against its index entry (size, sample count), or
  // empty. A file that is not regular is refused by the open (it never blocks).
  static std::string check_header(const std::string& raw, const mds_shard_info& info) {
    struct stat st {};
    const int fd = open_regular_nonblocking(raw, st);
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

  void init(std::vector<mds_shard_info> shards) {
    info_ = std::move(shards);
    if (info_.empty()) throw format_error(name_, {}, "the index lists no shards");
    types_.resize(fields_.size());
    shapes_.resize(fields_.size());
    encodings_.resize(fields_.size());
    table_.first.reserve(info_.size() + 1);
    for (std::size_t s = 0; s < info_.size(); ++s) {
      table_.add(info_[s].samples);
      shards_.push_back(std::make_unique<lazy_shard>());
    }
    for (std::size_t s = 0; s < info_.size(); ++s) plans_.push_back(make_plan(s));
  }

  [[nodiscard]] std::string where(std::size_t s, std::size_t k) const {
    const mds_field& f = fields_[k];
    return "shard " + std::to_string(s) + " (" + info_[s].basename + "), field '" + f.name + "'" +
           (f.column != f.name ? " (column '" + f.column + "')" : std::string{}) + ": ";
  }

  // How shard s's columns give the fields: a format_error naming the index, the shard, the field
  // and both types for a column that is missing or does not fit. The first shard's plan also
  // settles each field's element type (resolve).
  plan make_plan(std::size_t s) {
    const mds_shard_info& info = info_[s];
    plan p;
    for (const auto& c : info.columns) {
      p.sizes.push_back(c.size);
      if (!c.size) ++p.variable;
    }
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      const std::string& want = fields_[k].column;
      std::size_t c = 0;
      while (c < info.columns.size() && info.columns[c].name != want) ++c;
      if (c == info.columns.size()) {
        std::string have;
        for (const auto& x : info.columns) have += (have.empty() ? "" : ", ") + x.name;
        throw format_error(name_, {}, where(s, k) + "no column of that name (the shard has " + have + ")");
      }
      p.column.push_back(c);
      const mds_column& col = info.columns[c];
      std::string why;
      auto e = parse_mds_encoding(col.encoding, why);
      if (!e) throw format_error(name_, {}, where(s, k) + "column '" + col.name + "': " + why);
      if (s == 0) {
        resolve(k, *e, p);
        encodings_[k] = col.encoding;
      }
      const dtype t = types_[k];
      const std::string ty = "the field's element type is " + std::string(dtype_name(t));
      if (e->take == mds_take::raw && t != dtype::u8)
        throw format_error(name_, {}, where(s, k) + "column '" + col.name + "' is encoded '" + col.encoding +
                                          "' (bytes): it needs a u8 field, but " + ty);
      const bool typed = e->take == mds_take::scalar || (e->take == mds_take::ndarray && !e->dynamic_dtype);
      if (typed && e->type != t)
        throw format_error(name_, {}, where(s, k) + "column '" + col.name + "' is encoded '" + col.encoding + "' (" +
                                          std::string(dtype_name(e->type)) + "), but " + ty);
      if (e->take == mds_take::ndarray && e->dynamic_dtype && !ndarray_holds(t))
        throw format_error(name_, {}, where(s, k) + "column '" + col.name + "' is an ndarray, which never holds " + ty);
      p.enc.push_back(std::move(*e));
    }
    return p;
  }

  static bool ndarray_holds(dtype t) {
    for (int code : {8, 9, 16, 17, 18, 32, 33, 34, 64, 65, 66})
      if (mds_ndarray_code(static_cast<std::uint8_t>(code)) == t) return true;
    return false;
  }

  // Field k's element type and shape from the first shard's column: the type given, else the
  // encoding's; an ndarray that stores its dtype per sample is asked its first sample's. `p` is
  // the first shard's plan as far as field k.
  void resolve(std::size_t k, const mds_encoding& e, const plan& p) {
    if (e.take == mds_take::scalar) shapes_[k] = std::vector<std::int64_t>{};
    if (e.take == mds_take::ndarray && !e.dynamic_shape) shapes_[k] = e.static_shape;
    if (fields_[k].type) {
      types_[k] = *fields_[k].type;
    } else if (e.take == mds_take::raw) {
      types_[k] = dtype::u8;
    } else if (e.take == mds_take::scalar || !e.dynamic_dtype) {
      types_[k] = e.type;
    } else {
      types_[k] = first_ndarray_type(k, p.column.back());
    }
  }

  // The dtype of the ndarray in column c of the dataset's first sample (its dtype byte).
  dtype first_ndarray_type(std::size_t k, std::size_t c) const {
    std::size_t s = 0;
    while (s < info_.size() && info_[s].samples == 0) ++s;
    if (s == info_.size() || info_[s].columns.size() <= c || info_[s].columns[c].name != fields_[k].column)
      throw usage_error("sluice: " + name_ + ": field '" + fields_[k].name + "' reads an ndarray column that stores its "
                        "dtype per sample, and " + (s == info_.size() ? "the dataset has no sample" : "its first sample is not in the first shard") +
                        " to ask; give the field's dtype");
    const shard_state& sh = open(s);
    const auto f = sh.file.file.bytes();
    const std::uint64_t begin = load_u32(f.data() + 4), end = load_u32(f.data() + 8);
    const std::span<const std::byte> sample = f.subspan(begin, end - begin);
    std::uint64_t variable = 0;
    for (const auto& col : info_[s].columns) variable += col.size ? 0 : 1;
    std::uint64_t at = 4 * variable, var = 0;
    if (at <= sample.size())
      for (std::size_t x = 0; x < c && at <= sample.size(); ++x) {
        const auto& col = info_[s].columns[x];
        at += col.size ? *col.size : load_u32(sample.data() + 4 * var++);
      }
    if (at < sample.size())
      if (const auto t = mds_ndarray_code(static_cast<std::uint8_t>(sample[at]))) return *t;
    throw format_error(sh.file.path, {.record = 0, .offset = begin},
                       "sample 0: column '" + fields_[k].column + "': no ndarray dtype code MDS writes, to take the field's "
                       "dtype from (give it)");
  }

  // Opens shard s once; a shard that failed keeps failing with the same error.
  const shard_state& open(std::size_t s) const {
    return shards_[s]->get(
        [&] {
          auto st = std::make_unique<shard_state>();
          st->file = opener_(info_[s], s);
          check_mds_shard(st->file.file.bytes(), info_[s], st->file.path);
          return st;
        },
        on_failure::remember);
  }

  [[noreturn]] static void bad(const shard_state& sh, std::uint64_t local, std::uint64_t offset, const std::string& why) {
    throw format_error(sh.file.path, {.record = local, .offset = offset}, "sample " + std::to_string(local) + ": " + why);
  }

  // Field k's value in its column's bytes `v`: checked against the encoding and the field's type.
  std::span<const std::byte> value(const shard_state& sh, std::uint64_t local, std::uint64_t offset, std::size_t k,
                                   std::span<const std::byte> v, const mds_encoding& e) const {
    if (e.take == mds_take::raw) return v;
    const dtype t = types_[k];
    const std::size_t es = dtype_size(t);
    auto fail = [&](const std::string& why) {
      bad(sh, local, offset, "column '" + fields_[k].column + "' (" + std::string(dtype_name(t)) + "): " + why);
    };
    if (e.take == mds_take::scalar) {
      if (v.size() != es) fail(std::to_string(v.size()) + " bytes, not one " + std::to_string(es) + "-byte value");
      return v;
    }
    std::size_t at = 0;
    if (e.dynamic_dtype) {
      if (v.empty()) fail("an ndarray with no dtype byte");
      const auto c = mds_ndarray_code(static_cast<std::uint8_t>(v[0]));
      if (!c) fail("ndarray dtype code " + std::to_string(static_cast<unsigned>(v[0])) + " is not one MDS writes");
      if (*c != t) fail("the ndarray holds " + std::string(dtype_name(*c)) + " values");
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
    if (elems > (v.size() - at) / es || elems * es != v.size() - at)
      fail("its shape says " + std::to_string(elems) + " values, its data holds " + std::to_string(v.size() - at) + " bytes");
    return v.subspan(at);
  }

  mutable opener_handle ahead_;  // first: moved (stopping the source's thread) before the rest
  std::string name_;
  std::string dir_;
  std::vector<mds_field> fields_;
  mds_opener opener_;
  std::vector<mds_shard_info> info_;
  std::vector<plan> plans_;
  std::vector<dtype> types_;
  std::vector<std::optional<std::vector<std::int64_t>>> shapes_;
  std::vector<std::string> encodings_;
  std::vector<std::unique_ptr<lazy_shard>> shards_;
  shard_table table_;
};

// What both readers say of the dataset's shards (mds_dataset<>, mds_any).
class mds_shards {
 public:
  // Opens shard s on a background thread (for a remote dataset: fetches it into the tier) so the
  // worker that reads it later does not wait; returns at once. A failure is reported by the read
  // that needs the shard. sample::fetch_ahead calls it for the windows ahead of the loader.
  void prefetch(std::size_t s) const { core_.prefetch(s); }

  [[nodiscard]] std::size_t size() const noexcept { return core_.size(); }
  // The index's path or URL (each sample's origin is its shard).
  [[nodiscard]] std::string_view path() const noexcept { return core_.path(); }

  [[nodiscard]] std::size_t shard_count() const noexcept { return core_.shard_count(); }
  [[nodiscard]] const mds_shard_info& shard_info(std::size_t s) const { return core_.shard_info(s); }
  [[nodiscard]] std::size_t shard_size(std::size_t s) const { return core_.shard_size(s); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return core_.shard_range(s); }
  [[nodiscard]] std::size_t shard_of(std::uint64_t i) const { return core_.shard_of(i); }
  [[nodiscard]] std::vector<std::size_t> sizes() const { return core_.sizes(); }
  [[nodiscard]] bool is_open(std::size_t s) const { return core_.is_open(s); }
  // Field k's column's encoding, as index.json gives it ("jpeg", "pil", "int", "ndarray:uint8").
  [[nodiscard]] const std::string& encoding_of(std::size_t k) const { return core_.encoding_of(k); }

  // For a field an image decoder reads (JPEG or PNG bytes): a usage_error naming the column and
  // its encoding when the column holds no encoded image. MDSWriter's `pil` encoding is raw
  // pixels behind a width/height/mode header (streaming's PIL encoding), which no image decoder
  // reads: every sample would fail, so the pipeline is refused when it is built instead.
  void check_image_column(std::size_t k) const {
    const auto& f = core_.fields().at(k);
    if (core_.encoding_of(k) != "pil") return;
    const std::string example = "MDSWriter(columns={'" + f.column + "': 'jpeg', ...})";
    throw usage_error("sluice: the MDS column '" + f.column + "' of " + std::string(core_.path()) +
                      " is encoded 'pil': raw pixels behind a size and mode header, not an encoded image, so it "
                      "cannot be decoded as a JPEG or PNG. Write the column with the 'jpeg' or 'png' encoding (" +
                      example + "), or read its bytes undecoded");
  }

  // Closes every open shard and forgets failures (see remote_shards::release_all): only while
  // nothing reads from this dataset; sample::fetch_ahead calls it between epochs.
  void release_all() const { core_.release_all(); }

 protected:
  explicit mds_shards(mds_core c) : core_(std::move(c)) {}
  mds_core core_;
};

}  // namespace detail

// The dataset's columns as the fields of a compiled schema.
template <class Schema>
class mds_dataset : public detail::mds_shards {
  static constexpr std::size_t F = Schema::size;

 public:
  using reader_concept = reader_tag;
  using schema_type = Schema;
  using sample_type = fields_sample<Schema>;

  // A local dataset: its directory, or its index.json.
  explicit mds_dataset(const std::string& dir_or_index, const mds_options& o = {})
      : mds_shards(detail::mds_core(dir_or_index, fields_of(o), o.map)) {}
  // Shards from anywhere: `name` for messages (the index's URL), `open` maps shard s when it is
  // first read (on the worker that needs it). io/remote.hpp's remote_mds builds one.
  mds_dataset(std::vector<mds_shard_info> shards, std::string name, mds_opener open, const mds_options& o = {})
      : mds_shards(detail::mds_core(std::move(shards), std::move(name), std::move(open), fields_of(o))) {}

  // Sample i: its fields as views into its shard's mapping; format_error for a bad sample.
  [[nodiscard]] sample_type fields(std::size_t i) const {
    sample_type out{.id = i, .origin = {}};
    out.origin = core_.sample(i, out.values);
    return out;
  }

 private:
  static std::vector<detail::mds_field> fields_of(const mds_options& o) {
    for (const auto& named : o.columns)
      if (std::find(Schema::names.begin(), Schema::names.end(), named.first) == Schema::names.end())
        throw usage_error("sluice: mds_dataset: mds_options::columns names field '" + named.first +
                          "', which the schema does not have");
    constexpr auto types = []<std::size_t... K>(std::index_sequence<K...>) {
      return std::array<dtype, F>{dtype_of<typename schema_field_t<Schema, K>::value_type>...};
    }(std::make_index_sequence<F>{});
    std::vector<detail::mds_field> out;
    for (std::size_t k = 0; k < F; ++k) {
      std::string column(Schema::names[k]);
      for (const auto& named : o.columns)
        if (named.first == Schema::names[k]) column = named.second;
      out.push_back({std::string(Schema::names[k]), std::move(column), types[k]});
    }
    return out;
  }
};

// An MDS dataset read with the fields chosen at run time: fields(i) is a run-time sample
// (core/any_sample.hpp) for read(), any_decode_stage and any_collate.
//
//   sluice::io::mds_any data{"/data/train", {{"image", "jpg"}, {"label", "cls"}}};
//   sluice::any_decode_stage dec(data.schema());
//   dec.add("image", sluice::codecs::jpeg{{.width = 224, .height = 224}});
//   auto loader = sluice::from(sluice::sample::shuffle(data.size(), {.seed = 1})) | sluice::read(data) | std::move(dec)
//               | sluice::collate({.batch = 256}, dec.schema(), {{"image", sluice::normalized<>{}}, {"label", sluice::stack<>{}}})
//               | sluice::prefetch(2);
//
// `columns` picks the columns and names the fields ({{"image", "jpg"}}: field "image" reads
// column "jpg"), in that order; empty: every column sluice reads (all but pkl), under its own
// name. Each field's element type is its column's unless `types` gives one: an ndarray that
// stores its dtype per sample takes the dataset's first sample's, and every sample is checked
// against it. A scalar column or an ndarray of static shape is a fixed field that carries its
// shape as geometry, so stack<> gives {B} or {B, shape...} untold; the other columns are
// variable (ragged<>, pad<>, pack<>; an image column decoded). Columns that do not exist or do
// not fit the type are refused at construction, as mds_dataset<> refuses them.
class mds_any : public detail::mds_shards {
 public:
  using reader_concept = reader_tag;
  using names_type = std::vector<std::pair<std::string, std::string>>;  // field -> column
  using types_type = std::vector<std::pair<std::string, dtype>>;        // field -> element type

  explicit mds_any(const std::string& dir_or_index, const names_type& columns = {}, const types_type& types = {},
                   map_options map = {.advice = access::automatic})
      : mds_shards(detail::mds_core(dir_or_index, picked(dir_or_index, columns, types), map)) {
    describe();
  }
  mds_any(std::vector<mds_shard_info> shards, std::string name, mds_opener open, const names_type& columns,
          const types_type& types = {})
      : mds_shards(detail::mds_core(std::move(shards), std::move(name), std::move(open), with_types(columns, types))) {
    describe();
  }

  [[nodiscard]] const any_schema& schema() const noexcept { return schema_; }

  [[nodiscard]] any_sample fields(std::size_t i) const {
    std::array<std::span<const std::byte>, max_any_fields> v{};
    any_sample out(i, {}, schema_.size());
    out.origin = core_.sample(i, std::span(v.data(), out.count));
    for (std::size_t k = 0; k < out.count; ++k) out.fields[k] = {v[k], geometry_[k] ? &*geometry_[k] : nullptr, nullptr};
    return out;
  }

 private:
  // The columns named, or every column of the index's first shard that sluice reads.
  static std::vector<detail::mds_field> picked(const std::string& dir_or_index, const names_type& columns,
                                               const types_type& types) {
    if (!columns.empty()) return with_types(columns, types);
    const std::string index = detail::mds_index_path(dir_or_index);
    const auto shards = parse_mds_index(detail::read_mds_index(index), index);
    names_type all;
    if (!shards.empty())
      for (const auto& c : shards.front().columns) {
        std::string why;
        if (detail::parse_mds_encoding(c.encoding, why)) all.emplace_back(c.name, c.name);
      }
    return with_types(all, types);
  }
  static std::vector<detail::mds_field> with_types(const names_type& columns, const types_type& types) {
    if (columns.size() > max_any_fields)
      throw usage_error("sluice: mds_any: " + std::to_string(columns.size()) + " fields; a run-time sample holds at most " +
                        std::to_string(max_any_fields) + " (pick the columns to read)");
    std::vector<detail::mds_field> out;
    std::vector<field_spec> names;
    for (const auto& [name, column] : columns) {
      if (column.empty()) throw usage_error("sluice: mds_any: field '" + name + "' names an empty column");
      out.push_back({name, column, std::nullopt});
      names.push_back({name});
    }
    (void)any_schema(std::move(names));  // names distinct and not empty, before any shard is opened
    for (const auto& given : types) {  // (not a structured binding: clang 14 cannot capture one)
      auto at = std::find_if(out.begin(), out.end(), [&](const detail::mds_field& f) { return f.name == given.first; });
      if (at == out.end()) throw usage_error("sluice: mds_any: types names field '" + given.first + "', which is not read");
      at->type = given.second;
    }
    return out;
  }

  void describe() {
    std::vector<field_spec> specs;
    for (std::size_t k = 0; k < core_.fields().size(); ++k) {
      const auto& shape = core_.shape_of(k);
      specs.push_back({core_.fields()[k].name, core_.type_of(k), shape ? extent::fixed : extent::variable});
      std::optional<field_geometry> g;
      if (shape && shape->size() <= max_dims - 1) {
        g.emplace();
        g->ndim = static_cast<std::uint8_t>(shape->size());
        std::copy(shape->begin(), shape->end(), g->shape.begin());
      }
      geometry_.push_back(g);
    }
    schema_ = any_schema(std::move(specs));
  }

  any_schema schema_;
  std::vector<std::optional<field_geometry>> geometry_;
};

}  // namespace sluice::io
