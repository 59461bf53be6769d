// sluice/io/tfrecord.hpp — TFRecord files as a record_reader (zero copy into the mapping).
//
// A TFRecord file is a sequence of length | masked CRC-32C of the length | payload | masked CRC of
// the payload. Opening scans it once (or loads the saved `<file>.sidx`); a length is never
// trusted before its CRC is checked, and every payload handed out has had its CRC checked once
// (at the scan, or at its first read after a saved index; `check_payload_crc = false` turns that
// off). `.bad_records = defer` keeps a damaged file's good records and makes each bad one an entry
// whose record(i) throws (on_error::skip then counts it); `fail` (the default) throws at open.
// Labels come from an optional function of the payload. Several files read as one through a
// pattern or a list.
// Errors: a format_error naming the file, the record, the byte offset and the cause (a compressed
// file, GZIP or ZLIB as TFRecordWriter's options write it, is named as such); an io_error
// for a path that cannot be opened or is not a regular file (a FIFO is refused without blocking).
// Threads: after construction every member is safe to call concurrently. Every rule:
// docs/readers.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/compressed.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/lazy_open.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/record_index.hpp"
#include "sluice/io/regular_file.hpp"
#include "sluice/io/shard_pattern.hpp"

namespace sluice::io {

struct tfrecord_options {
  bool check_payload_crc = true;
  saved_index index = saved_index::use_and_save;
  // defer: bad records throw when read. A compressed file is refused at open under either policy:
  // it has no records to defer.
  io::bad_records bad_records = io::bad_records::fail;
  // Optional: the label of a record from its payload (e.g. parse an Example). Must be thread-safe.
  std::function<std::int64_t(std::span<const std::byte>)> label_of{};
  map_options map{};
};

namespace detail {
inline std::uint64_t load_u64le(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // x86-64 and Arm64 Linux are little-endian
}
inline std::uint32_t load_u32le(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Scans a whole TFRecord image. bad_records::fail: throws format_error at the first bad record.
// bad_records::defer: appends a bad record as an entry {header offset, size 0} and its error to
// `damaged`, and goes on when the framing allows it (a bad payload CRC) or stops (anything else).
inline std::vector<record_entry> scan_tfrecord(std::span<const std::byte> file,
                                               const std::string& path, bool check_payload,
                                               bad_records on_bad = bad_records::fail,
                                               std::vector<damaged_record>* damaged = nullptr) {
  std::vector<record_entry> out;
  const std::uint64_t n = file.size();
  std::uint64_t pos = 0;
  auto bad = [&](std::uint64_t rec, std::uint64_t at, std::string cause) {
    if (on_bad == bad_records::fail || damaged == nullptr) throw format_error(path, {rec, at}, std::move(cause));
    out.push_back({pos, 0, -1});
    damaged->push_back({rec, at, std::move(cause)});
  };
  // A first header that does not parse may be a compressed file (compression_type="GZIP"): say so.
  if (n < 12 || mask_crc32c(crc32c(file.first(8))) != load_u32le(file.data() + 8))
    throw_if_compressed(file, path, "TFRecord files (written without compression_type)");
  while (pos < n) {
    const std::uint64_t rec = out.size();
    if (n - pos < 12) {
      bad(rec, pos, "truncated record header: " + std::to_string(n - pos) + " bytes left, a header needs 12");
      break;
    }
    const std::byte* h = file.data() + pos;
    const std::uint64_t len = load_u64le(h);
    if (mask_crc32c(crc32c(file.subspan(pos, 8))) != load_u32le(h + 8)) {
      bad(rec, pos, "length CRC mismatch (not a TFRecord file, or corrupt)");
      break;
    }
    const std::uint64_t left = n - pos - 12;
    if (len > left || left - len < 4) {
      bad(rec, pos,
          "record length " + std::to_string(len) + " runs past the end of the file (" +
              std::to_string(left) + " bytes left after the header)");
      break;
    }
    auto payload = file.subspan(pos + 12, len);
    if (check_payload && mask_crc32c(crc32c(payload)) != load_u32le(h + 12 + len)) {
      bad(rec, pos + 12, "payload CRC mismatch");  // the framing is intact: go on
    } else {
      out.push_back({pos + 12, len, -1});
    }
    pos += 12 + len + 4;
  }
  return out;
}
}  // namespace detail

namespace detail {
// One TFRecord file: its mapping, its index (saved or scanned) and the records kept bad.
// Records are numbered within the file.
class tfrecord_file {
 public:
  tfrecord_file(std::string path, const tfrecord_options& opt)
      : file_(detail::regular_file_path(std::move(path)), opt.map) {
    const std::string kind = opt.check_payload_crc ? "tfrecord:crc" : "tfrecord:nocrc";
    bool loaded = false;
    if (opt.index != saved_index::ignore) {
      auto idx = detail::load_index(file_.path(), kind);
      // An index built with payload checks also serves a reader that skips them.
      if (!idx && !opt.check_payload_crc) idx = detail::load_index(file_.path(), "tfrecord:crc");
      // The index was checked against the path as it is now; the mapping was made a moment
      // before. Should the path have been replaced in between, entries that do not fit the
      // mapping mean a scan instead (never a view past its end).
      if (idx && std::all_of(idx->begin(), idx->end(), [&](const record_entry& e) {
            return e.offset <= file_.size() && e.size + 4 <= file_.size() - e.offset;
          })) {
        entries_ = std::move(*idx);
        loaded = true;
      }
    }
    if (!loaded) {
      auto stamp = detail::stamp_of(file_.path());  // before the scan: a change during it makes it stale
      entries_ = detail::scan_tfrecord(file_.bytes(), file_.path(), opt.check_payload_crc, opt.bad_records,
                                       &damaged_);
      if (opt.index == saved_index::use_and_save && stamp && damaged_.empty())
        detail::save_index(file_.path(), kind, entries_, stamp);
    }
    // The scan checked every payload it kept; records from a saved index are checked when first read.
    if (loaded && opt.check_payload_crc && !entries_.empty())
      checked_ = std::make_unique<std::atomic<std::uint64_t>[]>((entries_.size() + 63) / 64);
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    if (!damaged_.empty()) throw_if_damaged(i);
    const auto& e = entries_[i];
    auto payload = file_.bytes().subspan(e.offset, e.size);
    if (checked_) check_payload(i, payload);
    return payload;
  }
  [[nodiscard]] std::uint64_t offset(std::size_t i) const noexcept { return entries_[i].offset; }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  [[nodiscard]] const mapped_file& file() const noexcept { return file_; }
  [[nodiscard]] const std::vector<damaged_record>& damaged() const noexcept { return damaged_; }

 private:
  void throw_if_damaged(std::size_t i) const {
    auto it = std::lower_bound(damaged_.begin(), damaged_.end(), std::uint64_t{i},
                               [](const damaged_record& d, std::uint64_t r) { return d.record < r; });
    if (it != damaged_.end() && it->record == i) throw format_error(file_.path(), {it->record, it->offset}, it->cause);
  }
  void check_payload(std::size_t i, std::span<const std::byte> payload) const {
    auto& word = checked_[i / 64];
    const std::uint64_t bit = std::uint64_t{1} << (i % 64);
    if (word.load(std::memory_order_relaxed) & bit) return;
    const std::uint64_t end = entries_[i].offset + entries_[i].size;
    if (file_.size() < 4 || end > file_.size() - 4)
      throw format_error(file_.path(), {i, entries_[i].offset},
                         "the saved index puts the payload CRC past the end of the file");
    if (mask_crc32c(crc32c(payload)) != detail::load_u32le(file_.data() + end))
      throw format_error(file_.path(), {i, entries_[i].offset},
                         "payload CRC mismatch (checked on first read: the file's saved index was "
                         "built before this record's bytes changed, or the file is corrupt)");
    word.fetch_or(bit, std::memory_order_relaxed);
  }
  mapped_file file_;
  std::vector<record_entry> entries_;
  std::vector<damaged_record> damaged_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> checked_;  // null: nothing left to check
};
}  // namespace detail

// Where a record of a tfrecord_reader lies: its file, its number within that file and its
// payload's byte offset there. Errors name records this way.
struct tfrecord_place {
  std::string_view path;
  std::uint64_t record = 0;
  std::uint64_t offset = 0;
};

// The records of one TFRecord file, or of several read as one (shards such as
// "train-{00000..01023}-of-01024", or a list of paths): record i of the reader is record
// i - first of its file, files in the order given. Each file keeps its own saved index, and an
// error names the file and the record within it. shard_count()/shard_range(s) make the files
// the shards of shard_shuffle and shard_split.
class tfrecord_reader {
 public:
  using reader_concept = reader_tag;

  // A path, or a brace pattern of paths (io/shard_pattern.hpp).
  explicit tfrecord_reader(std::string path, tfrecord_options opt = {})
      : tfrecord_reader(expand_braces(path), std::move(opt), path) {}
  explicit tfrecord_reader(std::vector<std::string> paths, tfrecord_options opt = {})
      : tfrecord_reader(std::move(paths), std::move(opt), std::string{}) {}

  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(table_.total()); }
  // Record i's payload (a view into the mapping). Throws format_error for a bad record (its
  // payload CRC, or one kept under bad_records::defer).
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    const auto [f, local] = at(i);
    return f->record(local);
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const {
    if (label_of_) return label_of_(record(i));
    (void)at(i);
    return -1;
  }
  [[nodiscard]] record_view view(std::size_t i) const {
    const auto [f, local] = at(i);
    auto payload = f->record(local);
    return {i, payload, label_of_ ? label_of_(payload) : -1, f->path()};
  }
  // The file's path (one file), else the pattern, else the first path and how many more.
  [[nodiscard]] std::string_view path() const noexcept { return name_; }
  // Record i's file, number within it and payload offset.
  [[nodiscard]] tfrecord_place place(std::size_t i) const {
    const auto [f, local] = at(i);
    return {f->path(), local, f->offset(local)};
  }
  [[nodiscard]] std::uint64_t offset(std::size_t i) const { return place(i).offset; }
  [[nodiscard]] std::size_t shard_count() const noexcept { return files_.size(); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return table_.range(s); }
  [[nodiscard]] const mapped_file& file(std::size_t s = 0) const { return files_.at(s).file(); }
  // The records kept under bad_records::defer (empty otherwise), in order, numbered as the
  // reader numbers them (with one file, as the file does).
  [[nodiscard]] const std::vector<damaged_record>& damaged() const noexcept { return damaged_; }

 private:
  tfrecord_reader(std::vector<std::string> paths, tfrecord_options opt, std::string pattern)
      : label_of_(std::move(opt.label_of)) {
    if (paths.empty()) throw usage_error("sluice: tfrecord_reader needs at least one file");
    files_.reserve(paths.size());
    for (auto& p : paths) {
      files_.emplace_back(std::move(p), opt);
      const auto& f = files_.back();
      for (const auto& d : f.damaged()) damaged_.push_back({table_.total() + d.record, d.offset, d.cause});
      table_.add(f.size());
    }
    name_ = files_.size() == 1 ? std::string(files_[0].path())
            : !pattern.empty() ? std::move(pattern)
                               : std::string(files_[0].path()) + " (+" + std::to_string(files_.size() - 1) + " more files)";
  }
  [[nodiscard]] std::pair<const detail::tfrecord_file*, std::size_t> at(std::size_t i) const {
    if (files_.size() == 1) {
      if (i >= files_[0].size())
        throw usage_error("sluice: record " + std::to_string(i) + " out of range for '" + name_ + "' (" +
                          std::to_string(files_[0].size()) + " records)");
      return {&files_[0], i};
    }
    const std::size_t s = table_.shard_of(i, name_);
    return {&files_[s], static_cast<std::size_t>(i - table_.first[s])};
  }
  std::vector<detail::tfrecord_file> files_;
  detail::shard_table table_;
  std::string name_;
  std::function<std::int64_t(std::span<const std::byte>)> label_of_;
  std::vector<damaged_record> damaged_;
};

static_assert(record_reader<tfrecord_reader>);

// Appends one TFRecord-framed record to `out` (for tests, tools and benchmarks).
inline void append_tfrecord(std::vector<std::byte>& out, std::span<const std::byte> payload) {
  std::byte h[12];
  const std::uint64_t len = payload.size();
  std::memcpy(h, &len, 8);
  const std::uint32_t lcrc = mask_crc32c(crc32c(std::span<const std::byte>(h, 8)));
  std::memcpy(h + 8, &lcrc, 4);
  out.insert(out.end(), h, h + 12);
  out.insert(out.end(), payload.begin(), payload.end());
  const std::uint32_t pcrc = masked_crc32c(payload);
  auto pc = reinterpret_cast<const std::byte*>(&pcrc);
  out.insert(out.end(), pc, pc + 4);
}

}  // namespace sluice::io
