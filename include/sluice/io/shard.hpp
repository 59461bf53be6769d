// sluice/io/shard.hpp — sluice's own indexed record file: a writer and a zero-copy reader.
//
// The layout (header, 64-byte-aligned records, metadata with class names and a version-3 schema,
// an index, CRC-32C over each) is specified in docs/formats.md. shard_reader checks the header,
// index and schema against the file size and their CRCs before it trusts them, and works only from
// checked copies: a shard overwritten in place while mapped can give wrong record bytes (caught by
// `verify`, which checks record i's CRC on each access), never a read outside the mapping.
// shard_writer writes in two steps, seal() to "<path>.partial" (fsynced) and commit() (rename,
// directory fsync), so no half shard is ever left under the final name; a writer destroyed
// before commit() removes the partial file. Records with fields: set_schema + add_fields
// (read with io/shard_fields.hpp).
// Errors: a format_error naming the file, the record, the byte offset and the field.
// Threads: the reader is const after construction. Examples: docs/formats.md.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/mapped_file.hpp"

namespace sluice::io {

namespace shard_format {
inline constexpr char magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'H'};
inline constexpr std::uint32_t version = 3;         // the newest version this build reads and writes
inline constexpr std::uint32_t version_fields = 3;  // written when a shard has a schema (records with fields)
inline constexpr std::uint32_t version_meta = 2;    // written when a shard has metadata but no schema
inline constexpr std::uint32_t version_plain = 1;   // written when a shard has no metadata
inline constexpr std::size_t header_bytes = 64;
inline constexpr std::size_t entry_bytes = 24;
inline constexpr std::size_t record_alignment = 64;
inline constexpr std::uint32_t flag_checksums = 1u;
inline constexpr std::uint32_t meta_tag_class_names = 1u;
inline constexpr std::uint32_t meta_tag_schema = 2u;
inline constexpr std::size_t field_alignment = 8;      // each field of a record starts at a multiple of this
inline constexpr std::int64_t any_rows = -1;           // a variable field's leading dimension
inline constexpr std::uint32_t max_fields = 1024;
inline constexpr std::size_t max_field_dims = max_dims;  // 6
// Bytes of a record's field table (one u32 a field), padded to field_alignment.
constexpr std::size_t table_bytes(std::size_t fields) noexcept {
  return (fields * 4 + field_alignment - 1) / field_alignment * field_alignment;
}
constexpr std::uint64_t align_field(std::uint64_t at) noexcept {
  return (at + field_alignment - 1) / field_alignment * field_alignment;
}
}  // namespace shard_format

namespace detail {
template <class T>
inline T load_le(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86-64 and Arm Linux are little-endian
  return v;
}
template <class T>
inline void store_le(std::byte* p, T v) noexcept {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
inline void append_le(std::vector<std::byte>& out, T v) {
  std::byte b[sizeof v];
  store_le(b, v);
  out.insert(out.end(), b, b + sizeof v);
}
}  // namespace detail

// One field of a shard's schema, in its run-time form (what the schema section stores).
struct shard_schema_field {
  std::string name;
  dtype type = dtype::u8;
  extent kind = extent::variable;
  // The per-sample shape. A variable field's leading dimension is shard_format::any_rows (-1),
  // the rest fixed (the writer takes an empty shape as {-1}: any number of elements); a fixed
  // field's dimensions are all >= 0 (empty: one element).
  std::vector<std::int64_t> shape{};
  friend bool operator==(const shard_schema_field&, const shard_schema_field&) = default;
};

inline std::string schema_field_text(const shard_schema_field& f) {
  std::string s = std::string(dtype_name(f.type)) + (f.kind == extent::variable ? " variable" : " fixed") + " [";
  for (std::size_t d = 0; d < f.shape.size(); ++d) {
    if (d) s += ", ";
    s += f.shape[d] < 0 ? std::string("n") : std::to_string(f.shape[d]);
  }
  return s + "]";
}

namespace detail {
// Why a schema field is invalid (empty: valid). `unit` gets the bytes a fixed field has, or the
// bytes of one row of a variable field.
inline std::string schema_field_problem(const shard_schema_field& f, std::uint64_t& unit) {
  if (f.name.empty()) return "a field with an empty name";
  if (static_cast<unsigned>(f.type) > static_cast<unsigned>(dtype::boolean))
    return "dtype code " + std::to_string(static_cast<unsigned>(f.type)) + " is not a sluice dtype";
  if (f.kind != extent::fixed && f.kind != extent::variable)
    return "extent code " + std::to_string(static_cast<unsigned>(f.kind)) + " is neither fixed (0) nor variable (1)";
  if (f.shape.size() > shard_format::max_field_dims)
    return std::to_string(f.shape.size()) + " dimensions (at most " + std::to_string(shard_format::max_field_dims) + ")";
  std::uint64_t n = dtype_size(f.type);
  const std::size_t first = f.kind == extent::variable ? 1 : 0;
  if (f.kind == extent::variable && (f.shape.empty() || f.shape[0] != shard_format::any_rows))
    return "a variable field's shape must start with -1 (any number of rows)";
  for (std::size_t d = first; d < f.shape.size(); ++d) {
    const std::int64_t v = f.shape[d];
    if (v < 0 || (f.kind == extent::variable && v == 0))
      return "dimension " + std::to_string(d) + " is " + std::to_string(v) +
             (f.kind == extent::variable ? " (after the first, a variable field's dimensions are >= 1)"
                                         : " (a fixed field's dimensions are >= 0)");
    if (v != 0 && n > 0xffffffffull / static_cast<std::uint64_t>(v)) return "shape of more than 4 GiB";
    n *= static_cast<std::uint64_t>(v);
  }
  unit = n;
  return {};
}

// The run-time fields of a compile-time sluice::schema<...> (shapes left to the caller).
template <class Schema>
struct schema_fields;
template <class... F>
struct schema_fields<schema<F...>> {
  static void append(std::vector<shard_schema_field>& out) {
    (out.push_back(shard_schema_field{std::string(F::name.view()), F::type, F::kind,
                               F::kind == extent::variable ? std::vector<std::int64_t>{shard_format::any_rows}
                                                           : std::vector<std::int64_t>{}}),
     ...);
  }
};
}  // namespace detail

struct shard_options {
  bool verify = true;  // check each record's CRC-32C when it is read (if the shard has them)
  map_options map{.advice = access::automatic};
};

class shard_reader {
 public:
  using reader_concept = reader_tag;

  explicit shard_reader(std::string path, shard_options opt = {}) : file_(std::move(path), opt.map), verify_(opt.verify) {
    using namespace shard_format;
    const auto bytes = file_.bytes();
    const std::string& p = file_.path();
    if (bytes.size() < header_bytes)
      throw format_error(p, {.offset = 0}, "file is " + std::to_string(bytes.size()) +
                                               " bytes, shorter than the 64-byte shard header");
    std::byte h[header_bytes];
    std::memcpy(h, bytes.data(), header_bytes);
    if (std::memcmp(h, magic, 8) != 0) throw format_error(p, {.offset = 0}, "wrong magic: not a sluice shard");
    version_ = detail::load_le<std::uint32_t>(h + 8);
    if (version_ != version_plain && version_ != version_meta && version_ != version_fields)
      throw format_error(p, {.offset = 8}, "shard version " + std::to_string(version_) +
                                               " is not supported (this build reads 1, 2 and 3)");
    if (crc32c(std::span<const std::byte>(h, 40)) != detail::load_le<std::uint32_t>(h + 40))
      throw format_error(p, {.offset = 40}, "header checksum mismatch");
    flags_ = detail::load_le<std::uint32_t>(h + 12);
    count_ = detail::load_le<std::uint64_t>(h + 16);
    const auto index_offset = detail::load_le<std::uint64_t>(h + 24);
    const auto data_offset = detail::load_le<std::uint64_t>(h + 32);
    const std::uint64_t size = bytes.size();
    if (data_offset != header_bytes) throw format_error(p, {.offset = 32}, "data offset is not 64");
    if (index_offset < header_bytes || index_offset > size)
      throw format_error(p, {.offset = 24}, "index offset " + std::to_string(index_offset) + " lies outside the file (" +
                                                std::to_string(size) + " bytes)");
    if (count_ > (size - index_offset) / entry_bytes || index_offset + count_ * entry_bytes + 4 > size)
      throw format_error(p, {.offset = 16}, "header claims " + std::to_string(count_) +
                                                " records but the index would run past the end of the file "
                                                "(truncated file?)");
    std::uint64_t data_end = index_offset;  // records lie in [64, data_end)
    if (version_ >= version_meta) {
      if (crc32c(std::span<const std::byte>(h, 56)) != detail::load_le<std::uint32_t>(h + 56))
        throw format_error(p, {.offset = 56}, "header checksum mismatch (version-2 fields)");
      const auto meta_bytes = detail::load_le<std::uint32_t>(h + 44);
      const auto meta_offset = detail::load_le<std::uint64_t>(h + 48);
      if (meta_bytes != 0) {
        if (meta_offset < header_bytes || meta_offset > index_offset || index_offset - meta_offset < meta_bytes + 4ull)
          throw format_error(p, {.offset = 48}, "metadata block (" + std::to_string(meta_bytes) + " bytes at " +
                                                    std::to_string(meta_offset) + ") does not lie before the index");
        std::vector<std::byte> meta(bytes.begin() + static_cast<std::ptrdiff_t>(meta_offset),
                                    bytes.begin() + static_cast<std::ptrdiff_t>(meta_offset + meta_bytes + 4));
        if (crc32c(std::span<const std::byte>(meta).first(meta_bytes)) !=
            detail::load_le<std::uint32_t>(meta.data() + meta_bytes))
          throw format_error(p, {.offset = meta_offset}, "metadata checksum mismatch");
        meta.resize(meta_bytes);
        parse_metadata(meta, meta_offset);
        data_end = meta_offset;
      }
    }
    if (version_ == version_fields && schema_.empty())
      throw format_error(p, {.offset = 8}, "a version-3 shard without a schema section (its records have fields)");
    // The index is copied, then checked: what record(i) trusts is what was checked.
    std::vector<std::byte> index(bytes.begin() + static_cast<std::ptrdiff_t>(index_offset),
                                 bytes.begin() + static_cast<std::ptrdiff_t>(index_offset + count_ * entry_bytes + 4));
    if (crc32c(std::span<const std::byte>(index).first(count_ * entry_bytes)) !=
        detail::load_le<std::uint32_t>(index.data() + count_ * entry_bytes))
      throw format_error(p, {.offset = index_offset}, "index checksum mismatch");
    entries_.resize(count_);
    for (std::uint64_t i = 0; i < count_; ++i) {
      const std::byte* e = index.data() + i * entry_bytes;
      entry& x = entries_[i];
      x.offset = detail::load_le<std::uint64_t>(e);
      x.length = detail::load_le<std::uint32_t>(e + 8);
      x.crc = detail::load_le<std::uint32_t>(e + 12);
      x.label = detail::load_le<std::int64_t>(e + 16);
      if (x.offset < header_bytes || x.offset > data_end || x.length > data_end - x.offset)
        throw format_error(p, {.record = i, .offset = x.offset}, "record of " + std::to_string(x.length) +
                                                                     " bytes lies outside the data section");
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(count_); }
  [[nodiscard]] bool has_checksums() const noexcept { return (flags_ & shard_format::flag_checksums) != 0; }
  [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  [[nodiscard]] const mapped_file& file() const noexcept { return file_; }
  // The class names stored in the shard (name of class i at [i]); empty when it has none.
  [[nodiscard]] const std::vector<std::string>& class_names() const noexcept { return class_names_; }
  // The fields of each record (version 3); empty for a single-field shard (versions 1 and 2).
  [[nodiscard]] const std::vector<shard_schema_field>& schema() const noexcept { return schema_; }
  [[nodiscard]] bool has_fields() const noexcept { return !schema_.empty(); }
  // The schema index of the field named `name`, or npos.
  [[nodiscard]] std::size_t field_index(std::string_view name) const noexcept {
    for (std::size_t k = 0; k < schema_.size(); ++k)
      if (schema_[k].name == name) return k;
    return npos;
  }
  static constexpr std::size_t npos = ~std::size_t{0};

  // Checks record i's field table (and its CRC when verifying) and calls f(k, bytes) for each
  // field k in schema order; `bytes` points into the mapping. A format_error names the file, the
  // record, the byte offset and the field when the table does not fit the record or the schema.
  // No allocation. Only for shards with fields (a usage_error otherwise).
  template <class F>
  void for_each_field(std::size_t i, F&& f) const {
    if (schema_.empty())
      throw usage_error("sluice: shard '" + file_.path() + "' has no fields (a single-field shard: use record(i))");
    const entry& e = at(i);
    const auto r = checked_record(i, verify_);
    const std::size_t n = schema_.size();
    const std::uint64_t size = r.size();
    const std::uint64_t table = shard_format::table_bytes(n);
    if (size < table)
      field_fail(i, e.offset, schema_[0].name, "the record is " + std::to_string(size) + " bytes, shorter than its field table (" +
                                                    std::to_string(table) + " bytes for " + std::to_string(n) + " fields)");
    std::uint64_t pos = table;
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t len = detail::load_le<std::uint32_t>(r.data() + 4 * k);
      pos = shard_format::align_field(pos);
      const shard_schema_field& fd = schema_[k];
      if (pos > size || len > size - pos)
        field_fail(i, e.offset + 4 * k, fd.name, "its table entry says " + std::to_string(len) + " bytes at record offset " +
                                                     std::to_string(pos) + ", past the end of the record (" +
                                                     std::to_string(size) + " bytes)");
      if (fd.kind == extent::fixed && len != units_[k])
        field_fail(i, e.offset + pos, fd.name, std::to_string(len) + " bytes, but the field is " + schema_field_text(fd) +
                                                   ", which is " + std::to_string(units_[k]) + " bytes");
      if (fd.kind == extent::variable && len % units_[k] != 0)
        field_fail(i, e.offset + pos, fd.name, std::to_string(len) + " bytes, not a whole number of rows of " +
                                                   std::to_string(units_[k]) + " bytes (the field is " + schema_field_text(fd) + ")");
      f(k, r.subspan(static_cast<std::size_t>(pos), static_cast<std::size_t>(len)));
      pos += len;
    }
    if (pos != size)
      field_fail(i, e.offset + pos, schema_[n - 1].name, "the fields end at record offset " + std::to_string(pos) +
                                                             " but the record has " + std::to_string(size) +
                                                             " bytes (bytes after the last field)");
  }
  // Record i's fields as views, in schema order (out.size() must be schema().size()).
  void field_views(std::size_t i, std::span<std::span<const std::byte>> out) const {
    if (out.size() != schema_.size())
      throw usage_error("sluice: shard_reader::field_views needs one view per schema field (" +
                        std::to_string(schema_.size()) + "), got " + std::to_string(out.size()));
    for_each_field(i, [&](std::size_t k, std::span<const std::byte> b) { out[k] = b; });
  }

  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const { return checked_record(i, verify_); }
  [[nodiscard]] std::int64_t label(std::size_t i) const { return at(i).label; }
  [[nodiscard]] std::uint32_t record_bytes(std::size_t i) const { return at(i).length; }
  // All labels, in record order (for class-balanced samplers).
  [[nodiscard]] std::vector<std::int64_t> labels() const {
    std::vector<std::int64_t> v(size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = entries_[i].label;
    return v;
  }
  // Checks every record's CRC whatever `verify` says; returns the number checked and throws
  // format_error on the first mismatch.
  std::size_t verify_all() const {
    if (!has_checksums()) return 0;
    for (std::size_t i = 0; i < size(); ++i) (void)checked_record(i, true);
    return size();
  }

 private:
  struct entry {
    std::uint64_t offset;
    std::uint32_t length, crc;
    std::int64_t label;
  };

  void parse_metadata(std::span<const std::byte> m, std::uint64_t base) {
    const std::string& p = file_.path();
    auto fail = [&](std::size_t at, const std::string& why) {
      throw format_error(p, {.offset = base + at}, "metadata: " + why);
    };
    std::size_t at = 0;
    while (at < m.size()) {
      if (m.size() - at < 8) fail(at, "section header runs past the block");
      const auto tag = detail::load_le<std::uint32_t>(m.data() + at);
      const auto len = detail::load_le<std::uint32_t>(m.data() + at + 4);
      at += 8;
      if (len > m.size() - at) fail(at, "section of " + std::to_string(len) + " bytes runs past the block");
      if (tag == shard_format::meta_tag_schema) {
        if (version_ != shard_format::version_fields)
          fail(at, "a schema section in a version-" + std::to_string(version_) + " shard (only version 3 has fields)");
        if (!schema_.empty()) fail(at, "a second schema section");
        parse_schema(m.subspan(at, len), base + at);
      } else if (tag == shard_format::meta_tag_class_names) {
        const auto sec = m.subspan(at, len);
        if (sec.size() < 4) fail(at, "class-name section shorter than its count");
        const auto n = detail::load_le<std::uint32_t>(sec.data());
        if (n > (sec.size() - 4) / 4) fail(at, "class-name count " + std::to_string(n) + " exceeds the section");
        std::vector<std::string> names;
        names.reserve(n);
        std::size_t q = 4;
        for (std::uint32_t k = 0; k < n; ++k) {
          if (sec.size() - q < 4) fail(at + q, "class name " + std::to_string(k) + " runs past the section");
          const auto l = detail::load_le<std::uint32_t>(sec.data() + q);
          q += 4;
          if (l > sec.size() - q) fail(at + q, "class name " + std::to_string(k) + " runs past the section");
          names.emplace_back(reinterpret_cast<const char*>(sec.data() + q), l);
          q += l;
        }
        class_names_ = std::move(names);
      }
      at += len;
    }
  }
  // The schema section (tag 2): checked in full before any of it is kept.
  void parse_schema(std::span<const std::byte> sec, std::uint64_t base) {
    const std::string& p = file_.path();
    std::size_t q = 0;
    auto fail = [&](const std::string& field, const std::string& why) {
      throw format_error(p, {.offset = base + q},
                         field.empty() ? "schema: " + why : "schema: field '" + field + "': " + why);
    };
    if (sec.size() < 4) fail("", "section shorter than its field count");
    const auto n = detail::load_le<std::uint32_t>(sec.data());
    q = 4;
    if (n == 0 || n > shard_format::max_fields)
      fail("", "field count " + std::to_string(n) + " (1 to " + std::to_string(shard_format::max_fields) + ")");
    if (n > (sec.size() - 4) / 8) fail("", "field count " + std::to_string(n) + " exceeds the section");
    std::vector<shard_schema_field> fields;
    std::vector<std::uint64_t> units;
    for (std::uint32_t k = 0; k < n; ++k) {
      if (sec.size() - q < 4) fail("", "field " + std::to_string(k) + " runs past the section");
      const auto l = detail::load_le<std::uint32_t>(sec.data() + q);
      q += 4;
      if (l > sec.size() - q || sec.size() - q - l < 4) fail("", "field " + std::to_string(k) + " runs past the section");
      shard_schema_field f;
      f.name.assign(reinterpret_cast<const char*>(sec.data() + q), l);
      q += l;
      const auto code = static_cast<std::uint8_t>(sec[q]);
      const auto ext = static_cast<std::uint8_t>(sec[q + 1]);
      const auto ndim = static_cast<std::uint8_t>(sec[q + 2]);
      if (sec[q + 3] != std::byte{0}) fail(f.name, "reserved byte is not zero");
      f.type = static_cast<dtype>(code);
      f.kind = static_cast<extent>(ext);
      if (ndim > shard_format::max_field_dims)
        fail(f.name, std::to_string(ndim) + " dimensions (at most " + std::to_string(shard_format::max_field_dims) + ")");
      q += 4;
      if ((sec.size() - q) / 8 < ndim) fail(f.name, "shape runs past the section");
      for (std::uint8_t d = 0; d < ndim; ++d, q += 8) f.shape.push_back(detail::load_le<std::int64_t>(sec.data() + q));
      std::uint64_t unit = 0;
      if (auto why = detail::schema_field_problem(f, unit); !why.empty()) fail(f.name, why);
      for (const auto& g : fields)
        if (g.name == f.name) fail(f.name, "named twice");
      fields.push_back(std::move(f));
      units.push_back(unit);
    }
    if (q != sec.size()) fail("", std::to_string(sec.size() - q) + " bytes after the last field");
    schema_ = std::move(fields);
    units_ = std::move(units);
  }
  [[noreturn]] void field_fail(std::size_t i, std::uint64_t offset, const std::string& field, const std::string& why) const {
    throw format_error(file_.path(), {.record = i, .offset = offset}, "field '" + field + "': " + why);
  }
  std::span<const std::byte> checked_record(std::size_t i, bool verify) const {
    const entry& e = at(i);
    std::span<const std::byte> r(file_.data() + e.offset, e.length);
    if (verify && has_checksums() && crc32c(r) != e.crc)
      throw format_error(std::string(path()), {.record = i, .offset = e.offset}, "record checksum mismatch");
    return r;
  }
  const entry& at(std::size_t i) const {
    if (i >= count_)
      throw format_error(std::string(path()), {.record = i}, "record index past the last record (" +
                                                                 std::to_string(count_) + " records)");
    return entries_[i];
  }

  mapped_file file_;
  bool verify_ = true;
  std::uint32_t version_ = 0;
  std::uint32_t flags_ = 0;
  std::uint64_t count_ = 0;
  std::vector<entry> entries_;
  std::vector<std::string> class_names_;
  std::vector<shard_schema_field> schema_;
  std::vector<std::uint64_t> units_;  // per field: a fixed field's bytes, a variable field's bytes per row
};

struct shard_writer_options {
  bool checksums = true;
  // Bytes written at a time (at least 4 KiB). Written in large pieces, the file sits in the page
  // cache in large folios (2 MiB ones from 2 MiB on, Linux 6.x on ext4/xfs), which a loader that
  // maps it right after packing reads with ~1/30 of the page faults (a fault per 2 MiB instead of
  // per 64 KiB) and fewer TLB misses than small writes leave: bench/README.md, the first-epoch row.
  std::size_t buffer_bytes = std::size_t{8} << 20;
};

// Writes a shard to "<path>.partial": seal() completes and fsyncs it, commit() renames it to
// <path> and fsyncs the directory, finish() does both. Between seal() and commit() the partial
// file is a complete shard that shard_reader opens (check it there before committing).
// Destroyed before commit() (an exception, a failed check, a cancelled pack), the writer removes
// the partial file: no half shard is ever left under the final name, and none beside it.
class shard_writer {
 public:
  explicit shard_writer(std::string path, shard_writer_options opt = {})
      : path_(std::move(path)), partial_(path_ + ".partial"), opt_(opt) {
    // Our own buffer: given none, glibc ignores the size and buffers st_blksize (4 KiB).
    const std::size_t buffer = std::max<std::size_t>(opt_.buffer_bytes, 4096);
    buffer_ = std::make_unique_for_overwrite<char[]>(buffer);
    f_ = std::fopen(partial_.c_str(), "wb");
    if (f_ == nullptr) throw io_error(partial_, "cannot create", errno);
    owns_partial_ = true;
    std::setvbuf(f_, buffer_.get(), _IOFBF, buffer);
    std::byte zero[shard_format::header_bytes]{};
    try {
      put(zero, sizeof zero);
    } catch (...) {  // no destructor runs for a constructor that throws
      std::fclose(f_);
      std::remove(partial_.c_str());
      throw;
    }
    offset_ = shard_format::header_bytes;
  }
  shard_writer(const shard_writer&) = delete;
  shard_writer& operator=(const shard_writer&) = delete;
  ~shard_writer() {
    if (f_ != nullptr) std::fclose(f_);
    if (owns_partial_) std::remove(partial_.c_str());
  }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const std::string& partial_path() const noexcept { return partial_; }

  // Class names to store in the shard (class i's name at [i]); makes it a version-2 shard.
  void set_class_names(std::vector<std::string> names) {
    for (const auto& n : names)
      if (n.size() > 0xffffffffu) throw usage_error("sluice: a shard class name is limited to 4 GiB");
    class_names_ = std::move(names);
  }

  // The fields of every record; makes it a version-3 shard, written with add_fields. Call before
  // the first record. Each field's shape follows shard_schema_field's rules (a usage_error names the
  // field otherwise); a variable field's empty shape is taken as {-1}.
  void set_schema(std::vector<shard_schema_field> fields) {
    if (count_ != 0) throw usage_error("sluice: shard_writer::set_schema after the first record");
    if (fields.empty() || fields.size() > shard_format::max_fields)
      throw usage_error("sluice: a shard schema has 1 to " + std::to_string(shard_format::max_fields) + " fields");
    units_.clear();
    for (std::size_t k = 0; k < fields.size(); ++k) {
      auto& f = fields[k];
      if (f.kind == extent::variable && f.shape.empty()) f.shape = {shard_format::any_rows};
      if (f.name.size() > 0xffffu) throw usage_error("sluice: shard field name over 64 KiB");
      std::uint64_t unit = 0;
      if (auto why = detail::schema_field_problem(f, unit); !why.empty())
        throw usage_error("sluice: shard schema: field '" + f.name + "': " + why);
      for (std::size_t j = 0; j < k; ++j)
        if (fields[j].name == f.name) throw usage_error("sluice: shard schema: field '" + f.name + "' named twice");
      units_.push_back(unit);
    }
    schema_ = std::move(fields);
    learn_.assign(schema_.size(), false);
  }
  // The schema of a compile-time sluice::schema<...>, in its order. Shapes are run-time: give a
  // fixed field's shape in `shapes` ({"size", {2}}), else it is learnt from the first record
  // ({bytes / dtype size}); a variable field's shape defaults to {-1} (give {-1, 4} for rows of 4).
  template <class Schema>
  void set_schema(std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes = {}) {
    std::vector<shard_schema_field> fields;
    std::vector<bool> learn;
    detail::schema_fields<Schema>::append(fields);
    for (auto& f : fields) learn.push_back(f.kind == extent::fixed);
    for (auto& [name, shape] : shapes) {
      std::size_t k = 0;
      while (k < fields.size() && fields[k].name != name) ++k;
      if (k == fields.size()) throw usage_error("sluice: shard_writer::set_schema: shapes names '" + name + "', not a field of the schema");
      fields[k].shape = shape;
      learn[k] = false;
    }
    set_schema(std::move(fields));
    learn_ = std::move(learn);
  }
  [[nodiscard]] const std::vector<shard_schema_field>& schema() const noexcept { return schema_; }

  // One record of a shard with a schema: one byte span per field, in schema order. A fixed field
  // must have exactly its shape's bytes, a variable one whole rows: a format_error naming the
  // record and the field otherwise.
  void add_fields(std::span<const std::span<const std::byte>> fields, std::int64_t label = -1) {
    if (schema_.empty()) throw usage_error("sluice: shard_writer::add_fields needs set_schema() first");
    if (fields.size() != schema_.size())
      throw usage_error("sluice: shard_writer::add_fields: " + std::to_string(fields.size()) + " fields given, the schema has " +
                        std::to_string(schema_.size()));
    auto fail = [&](std::size_t k, const std::string& why) {
      throw format_error(path_, {.record = count_}, "field '" + schema_[k].name + "': " + why);
    };
    std::uint64_t total = shard_format::table_bytes(fields.size());
    for (std::size_t k = 0; k < fields.size(); ++k) {
      const auto& fd = schema_[k];
      const std::uint64_t len = fields[k].size();
      const std::uint64_t esz = dtype_size(fd.type);
      if (learn_[k]) {
        if (len % esz != 0) fail(k, std::to_string(len) + " bytes, not a whole number of " + dtype_name(fd.type) + " elements");
        schema_[k].shape = {static_cast<std::int64_t>(len / esz)};
        units_[k] = len;
        learn_[k] = false;
      }
      if (fd.kind == extent::fixed && len != units_[k])
        fail(k, std::to_string(len) + " bytes, but the field is " + schema_field_text(fd) + ", which is " +
                    std::to_string(units_[k]) + " bytes");
      if (fd.kind == extent::variable && len % units_[k] != 0)
        fail(k, std::to_string(len) + " bytes, not a whole number of rows of " + std::to_string(units_[k]) +
                    " bytes (the field is " + schema_field_text(fd) + ")");
      total = shard_format::align_field(total) + len;
      if (len > 0xffffffffu || total > 0xffffffffu)
        throw format_error(path_, {.record = count_}, "record of " + std::to_string(total) +
                                                          "+ bytes is over the shard format's limit of 4 GiB - 1 per record");
    }
    scratch_.assign(static_cast<std::size_t>(total), std::byte{0});
    std::uint64_t pos = shard_format::table_bytes(fields.size());
    for (std::size_t k = 0; k < fields.size(); ++k) {
      detail::store_le<std::uint32_t>(scratch_.data() + 4 * k, static_cast<std::uint32_t>(fields[k].size()));
      pos = shard_format::align_field(pos);
      if (!fields[k].empty()) std::memcpy(scratch_.data() + pos, fields[k].data(), fields[k].size());
      pos += fields[k].size();
    }
    put_record(scratch_, label);
  }
  void add_fields(std::initializer_list<std::span<const std::byte>> fields, std::int64_t label = -1) {
    add_fields(std::span<const std::span<const std::byte>>(fields.begin(), fields.size()), label);
  }
  // A fields_sample (core/schema.hpp) of the schema set with set_schema<Schema>.
  template <class Schema>
  void add_fields(const fields_sample<Schema>& s, std::int64_t label = -1) {
    if (schema_.size() != Schema::size)
      throw usage_error("sluice: shard_writer::add_fields: the sample's schema is not the shard's");
    for (std::size_t k = 0; k < Schema::size; ++k)
      if (schema_[k].name != Schema::names[k])
        throw usage_error("sluice: shard_writer::add_fields: the sample's field " + std::to_string(k) + " is '" +
                          std::string(Schema::names[k]) + "', the shard's is '" + schema_[k].name + "'");
    add_fields(std::span<const std::span<const std::byte>>(s.values), label);
  }

  // One record of a shard without a schema.
  void add(std::span<const std::byte> record, std::int64_t label = -1) {
    if (!schema_.empty()) throw usage_error("sluice: shard_writer::add on a shard with a schema (use add_fields)");
    put_record(record, label);
  }

 private:
  void put_record(std::span<const std::byte> record, std::int64_t label) {
    if (f_ == nullptr) throw usage_error("sluice: shard_writer::add after seal()");
    if (record.size() > 0xffffffffu)
      throw format_error(path_, {.record = count_}, "record of " + std::to_string(record.size()) +
                                                        " bytes is over the shard format's limit of 4 GiB - 1 per record");
    const std::uint64_t pad = (shard_format::record_alignment - offset_ % shard_format::record_alignment) %
                              shard_format::record_alignment;
    static constexpr std::byte zeros[shard_format::record_alignment]{};
    if (pad) put(zeros, pad);
    offset_ += pad;
    std::byte e[shard_format::entry_bytes];
    detail::store_le<std::uint64_t>(e, offset_);
    detail::store_le<std::uint32_t>(e + 8, static_cast<std::uint32_t>(record.size()));
    detail::store_le<std::uint32_t>(e + 12, opt_.checksums ? crc32c(record) : 0u);
    detail::store_le<std::int64_t>(e + 16, label);
    index_.insert(index_.end(), e, e + sizeof e);
    put(record.data(), record.size());
    offset_ += record.size();
    ++count_;
  }

 public:
  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }

  // Writes the metadata, index and header to the partial file, flushes, fsyncs and closes it.
  // Afterwards partial_path() is a complete shard; nothing has the final name yet.
  void seal() {
    if (f_ == nullptr) throw usage_error("sluice: shard_writer::seal called twice");
    std::vector<std::byte> meta;
    if (!class_names_.empty()) {
      std::vector<std::byte> sec;
      detail::append_le<std::uint32_t>(sec, static_cast<std::uint32_t>(class_names_.size()));
      for (const auto& n : class_names_) {
        detail::append_le<std::uint32_t>(sec, static_cast<std::uint32_t>(n.size()));
        const auto* b = reinterpret_cast<const std::byte*>(n.data());
        sec.insert(sec.end(), b, b + n.size());
      }
      if (sec.size() > 0xffffffffu - 8) throw usage_error("sluice: shard class names exceed 4 GiB");
      detail::append_le<std::uint32_t>(meta, shard_format::meta_tag_class_names);
      detail::append_le<std::uint32_t>(meta, static_cast<std::uint32_t>(sec.size()));
      meta.insert(meta.end(), sec.begin(), sec.end());
    }
    if (!schema_.empty()) {
      for (std::size_t k = 0; k < schema_.size(); ++k)
        if (learn_[k])  // no record gave it a size: a zero-length fixed field
          schema_[k].shape = {0};
      std::vector<std::byte> sec;
      detail::append_le<std::uint32_t>(sec, static_cast<std::uint32_t>(schema_.size()));
      for (const auto& f : schema_) {
        detail::append_le<std::uint32_t>(sec, static_cast<std::uint32_t>(f.name.size()));
        const auto* b = reinterpret_cast<const std::byte*>(f.name.data());
        sec.insert(sec.end(), b, b + f.name.size());
        sec.push_back(static_cast<std::byte>(f.type));
        sec.push_back(static_cast<std::byte>(f.kind));
        sec.push_back(static_cast<std::byte>(f.shape.size()));
        sec.push_back(std::byte{0});
        for (auto d : f.shape) detail::append_le<std::int64_t>(sec, d);
      }
      detail::append_le<std::uint32_t>(meta, shard_format::meta_tag_schema);
      detail::append_le<std::uint32_t>(meta, static_cast<std::uint32_t>(sec.size()));
      meta.insert(meta.end(), sec.begin(), sec.end());
    }
    const std::uint64_t meta_offset = meta.empty() ? 0 : offset_;
    if (!meta.empty()) {
      std::byte mcrc[4];
      detail::store_le<std::uint32_t>(mcrc, crc32c(meta));
      put(meta.data(), meta.size());
      put(mcrc, 4);
      offset_ += meta.size() + 4;
    }
    const std::uint64_t index_offset = offset_;
    put(index_.data(), index_.size());
    std::byte icrc[4];
    detail::store_le<std::uint32_t>(icrc, crc32c(index_));
    put(icrc, 4);
    std::byte h[shard_format::header_bytes]{};
    std::memcpy(h, shard_format::magic, 8);
    detail::store_le<std::uint32_t>(h + 8, !schema_.empty() ? shard_format::version_fields
                                           : meta.empty()   ? shard_format::version_plain
                                                            : shard_format::version_meta);
    detail::store_le<std::uint32_t>(h + 12, opt_.checksums ? shard_format::flag_checksums : 0u);
    detail::store_le<std::uint64_t>(h + 16, count_);
    detail::store_le<std::uint64_t>(h + 24, index_offset);
    detail::store_le<std::uint64_t>(h + 32, shard_format::header_bytes);
    detail::store_le<std::uint32_t>(h + 40, crc32c(std::span<const std::byte>(h, 40)));
    if (!meta.empty()) {
      detail::store_le<std::uint32_t>(h + 44, static_cast<std::uint32_t>(meta.size()));
      detail::store_le<std::uint64_t>(h + 48, meta_offset);
      detail::store_le<std::uint32_t>(h + 56, crc32c(std::span<const std::byte>(h, 56)));
    }
    if (std::fseek(f_, 0, SEEK_SET) != 0) throw io_error(partial_, "cannot seek", errno);
    put(h, sizeof h);
    if (std::fflush(f_) != 0) throw io_error(partial_, "cannot write", errno);
    if (::fsync(::fileno(f_)) != 0) throw io_error(partial_, "cannot fsync", errno);
    std::FILE* f = std::exchange(f_, nullptr);
    if (std::fclose(f) != 0) throw io_error(partial_, "cannot close", errno);
  }

  // Renames the sealed partial file to the final name and fsyncs the directory, so the name
  // survives a crash. On failure the partial file is removed (by this writer's destructor).
  void commit() {
    if (f_ != nullptr || !owns_partial_) throw usage_error("sluice: shard_writer::commit needs seal() first, once");
    std::error_code ec;
    std::filesystem::rename(partial_, path_, ec);
    if (ec) throw io_error(path_, "cannot rename the finished shard '" + partial_ + "' to", ec.value());
    owns_partial_ = false;
    sync_directory_of(path_);
  }

  // seal() then commit(): the one call for a writer that needs no check in between.
  void finish() {
    seal();
    commit();
  }

  // fsyncs the directory holding `path`, so a rename or create in it is durable.
  static void sync_directory_of(const std::string& path) {
    auto dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw io_error(dir.string(), "cannot open directory to fsync", errno);
    const int rc = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    if (rc != 0 && e != EINVAL) throw io_error(dir.string(), "cannot fsync directory", e);
  }

 private:
  void put(const void* p, std::size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f_) != n) throw io_error(partial_, "cannot write", errno);
  }
  std::string path_, partial_;
  shard_writer_options opt_;
  std::unique_ptr<char[]> buffer_;  // f_'s; closed before members are destroyed
  std::FILE* f_ = nullptr;
  bool owns_partial_ = false;  // the partial file exists and is this writer's to remove
  std::uint64_t offset_ = 0, count_ = 0;
  std::vector<std::byte> index_;
  std::vector<std::string> class_names_;
  std::vector<shard_schema_field> schema_;
  std::vector<std::uint64_t> units_;  // per field: a fixed field's bytes, a variable field's bytes per row
  std::vector<bool> learn_;           // per field: a fixed shape still to learn from the first record
  std::vector<std::byte> scratch_;    // one record with fields, assembled
};

}  // namespace sluice::io
