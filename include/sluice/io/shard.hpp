// sluice/io/shard.hpp — sluice's own indexed record file: a writer and a zero-copy reader.
//
// Layout (all integers little-endian):
//   header, 64 bytes:  magic "SLUICESH" | u32 version (1 or 2) | u32 flags (bit 0: per-record CRC-32C)
//                      | u64 record_count | u64 index_offset | u64 data_offset (64)
//                      | u32 CRC-32C of the 40 bytes before it
//                      | version 2: u32 meta_bytes | u64 meta_offset | u32 CRC-32C of the 56 bytes
//                        before it (version 1: zero)
//                      | zero padding
//   records:           each starts on a 64-byte boundary (so collate's memcpy runs aligned)
//   metadata:          version 2 only, when meta_bytes > 0: meta_bytes bytes at meta_offset, after
//                      the last record and before the index, then u32 CRC-32C of those bytes. The
//                      bytes are sections, each u32 tag | u32 length | length bytes; tag 1 holds
//                      the class names: u32 count, then count × (u32 length | UTF-8 bytes), the
//                      name of class i i-th. Sections with other tags are skipped (room to grow).
//   index:             record_count entries of 24 bytes: u64 offset | u32 length | u32 crc | i64 label
//                      then u32 CRC-32C of the whole index
// The writer emits version 1 when a shard has no metadata (so older readers still open it) and
// version 2 when it has; this reader opens both.
// The reader checks everything against the file size before trusting it: the header's CRC, that
// the index fits in the file (count is bounded by the file size before anything is allocated),
// the index's CRC, and that every record lies between the header and the metadata (or index).
// The header, metadata and index are copied out of the mapping before they are checked, and
// record(i) uses only those checked copies: a shard overwritten in place while mapped can give
// wrong record bytes (caught by `verify`), never a read outside the mapping. With `verify` the
// reader also checks record i's CRC on each access (CRC-32C runs at ~20 GB/s with SSE4.2, far
// above what a trainer consumes). Records themselves are not copied: record(i) points into the
// mapping.
//
// Writing is two steps, so a tool can check the file before it takes the final name: seal()
// writes the index and header to "<path>.partial" and fsyncs it; commit() renames it to <path>
// and fsyncs the directory. finish() does both. A writer destroyed before commit() (an exception,
// a failed check) removes the partial file: no half shard is ever left under the final name.
//
//   { sluice::io::shard_writer w{"train.sluice"};
//     w.set_class_names({"cat", "dog"});    // optional: makes a version-2 shard
//     for (...) w.add(bytes, label);
//     w.finish(); }                          // written to "train.sluice.partial", renamed here
//   sluice::io::shard_reader r{"train.sluice"};
//   std::span<const std::byte> rec = r.record(7);  std::int64_t y = r.label(7);
//   r.class_names();                         // {"cat", "dog"}; empty when the shard has none
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/mapped_file.hpp"

namespace sluice::io {

namespace shard_format {
inline constexpr char magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'H'};
inline constexpr std::uint32_t version = 2;         // the newest version this build reads and writes
inline constexpr std::uint32_t version_plain = 1;   // written when a shard has no metadata
inline constexpr std::size_t header_bytes = 64;
inline constexpr std::size_t entry_bytes = 24;
inline constexpr std::size_t record_alignment = 64;
inline constexpr std::uint32_t flag_checksums = 1u;
inline constexpr std::uint32_t meta_tag_class_names = 1u;
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

struct shard_options {
  bool verify = true;  // check each record's CRC-32C when it is read (if the shard has them)
  map_options map{.advice = access::random};
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
    if (version_ != version_plain && version_ != shard_format::version)
      throw format_error(p, {.offset = 8}, "shard version " + std::to_string(version_) +
                                               " is not supported (this build reads 1 and 2)");
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
    if (version_ == shard_format::version) {
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
      if (tag == shard_format::meta_tag_class_names) {
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
};

struct shard_writer_options {
  bool checksums = true;
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
    f_ = std::fopen(partial_.c_str(), "wb");
    if (f_ == nullptr) throw io_error(partial_, "cannot create", errno);
    owns_partial_ = true;
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
    std::byte zero[shard_format::header_bytes]{};
    put(zero, sizeof zero);
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

  void add(std::span<const std::byte> record, std::int64_t label = -1) {
    if (f_ == nullptr) throw usage_error("sluice: shard_writer::add after seal()");
    if (record.size() > 0xffffffffu) throw usage_error("sluice: shard records are limited to 4 GiB each");
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
    detail::store_le<std::uint32_t>(h + 8, meta.empty() ? shard_format::version_plain : shard_format::version);
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
  std::FILE* f_ = nullptr;
  bool owns_partial_ = false;  // the partial file exists and is this writer's to remove
  std::uint64_t offset_ = 0, count_ = 0;
  std::vector<std::byte> index_;
  std::vector<std::string> class_names_;
};

}  // namespace sluice::io
