// sluice/io/tfrecord.hpp — TFRecord files as a record_reader (zero copy into the mapping).
//
// A TFRecord file is a sequence of
//     u64 length | u32 masked_crc32c(length bytes) | payload[length] | u32 masked_crc32c(payload)
// (little-endian). Opening scans the file once and keeps an index of payload offsets; the index
// is saved beside the file as `<file>.sidx` (see record_index.hpp), so the next open skips the
// scan. The length CRC is always checked: a length is never trusted before it is. The payload
// CRC is checked during the scan unless `check_payload_crc = false` (≈20 GB/s with SSE4.2, so the
// scan is bound by memory bandwidth either way; turning it off saves touching every page).
// An index built without payload checks is not reused by a reader that asks for them.
//
// Labels: TFRecord payloads are opaque (usually a tf.train.Example protobuf), so a label comes
// from an optional user function of the payload, called by label(i); without one, -1.
//
//   sluice::io::tfrecord_reader r{"train.tfrecord"};
//   for (std::size_t i = 0; i < r.size(); ++i) use(r.record(i));
//
// Thread-safety: after construction every member is const and safe to call concurrently.
// Errors: format_error naming the file, the record index, the byte offset and the cause
// (truncated header, length CRC mismatch, length past the end of the file, payload CRC mismatch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/record_index.hpp"

namespace sluice::io {

struct tfrecord_options {
  bool check_payload_crc = true;
  saved_index index = saved_index::use_and_save;
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

// Scans a whole TFRecord image; throws format_error at the first bad record.
inline std::vector<record_entry> scan_tfrecord(std::span<const std::byte> file,
                                               const std::string& path, bool check_payload) {
  std::vector<record_entry> out;
  const std::uint64_t n = file.size();
  std::uint64_t pos = 0;
  while (pos < n) {
    const std::uint64_t rec = out.size();
    if (n - pos < 12)
      throw format_error(path, {rec, pos},
                         "truncated record header: " + std::to_string(n - pos) +
                             " bytes left, a header needs 12");
    const std::byte* h = file.data() + pos;
    const std::uint64_t len = load_u64le(h);
    if (mask_crc32c(crc32c(file.subspan(pos, 8))) != load_u32le(h + 8))
      throw format_error(path, {rec, pos}, "length CRC mismatch (not a TFRecord file, or corrupt)");
    const std::uint64_t left = n - pos - 12;
    if (len > left || left - len < 4)
      throw format_error(path, {rec, pos},
                         "record length " + std::to_string(len) + " runs past the end of the file (" +
                             std::to_string(left) + " bytes left after the header)");
    auto payload = file.subspan(pos + 12, len);
    if (check_payload && mask_crc32c(crc32c(payload)) != load_u32le(h + 12 + len))
      throw format_error(path, {rec, pos + 12}, "payload CRC mismatch");
    out.push_back({pos + 12, len, -1});
    pos += 12 + len + 4;
  }
  return out;
}
}  // namespace detail

class tfrecord_reader {
 public:
  using reader_concept = reader_tag;

  explicit tfrecord_reader(std::string path, tfrecord_options opt = {})
      : file_(std::move(path), opt.map), label_of_(std::move(opt.label_of)) {
    const std::string kind = opt.check_payload_crc ? "tfrecord:crc" : "tfrecord:nocrc";
    // A saved index built with payload checks also serves a reader that skips them.
    if (!opt.check_payload_crc && opt.index != saved_index::ignore)
      if (auto idx = detail::load_index(file_.path(), "tfrecord:crc")) {
        entries_ = std::move(*idx);
        return;
      }
    entries_ = detail::indexed(file_.path(), kind, opt.index, [&] {
      return detail::scan_tfrecord(file_.bytes(), file_.path(), opt.check_payload_crc);
    });
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    check_index(i);
    return file_.bytes().subspan(entries_[i].offset, entries_[i].size);
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const {
    return label_of_ ? label_of_(record(i)) : -1;
  }
  [[nodiscard]] record_view view(std::size_t i) const {
    return {i, record(i), label(i), file_.path()};
  }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  [[nodiscard]] std::uint64_t offset(std::size_t i) const { check_index(i); return entries_[i].offset; }
  [[nodiscard]] const mapped_file& file() const noexcept { return file_; }

 private:
  void check_index(std::size_t i) const {
    if (i >= entries_.size())
      throw usage_error("sluice: record " + std::to_string(i) + " out of range for '" + file_.path() +
                        "' (" + std::to_string(entries_.size()) + " records)");
  }
  mapped_file file_;
  std::function<std::int64_t(std::span<const std::byte>)> label_of_;
  std::vector<record_entry> entries_;
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
