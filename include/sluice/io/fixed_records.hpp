// sluice/io/fixed_records.hpp — raw arrays as they are: records back to back, labels beside.
//
// Many datasets already sit on disk as one flat array (a NumPy tofile(), a memory dump): record i
// is bytes [header + i*record_bytes, header + (i+1)*record_bytes). This reader maps such a file
// and hands out views, with labels from a second flat file (int64, int32 or uint8 each), so no
// conversion step is needed.
//
//   sluice::io::fixed_records r{"images.u8", {.record_bytes = 3 * 64 * 64,
//                                             .labels_path = "labels.i64"}};
//
// Checked at open: the data size (after the header) is a whole number of records, and the labels
// file holds exactly one label per record. With `.bad_records = bad_records::defer`
// (record_index.hpp) a data file cut short inside its last record opens anyway: the partial
// record is the last entry and its record(i) throws format_error (file, record, offset, how many
// bytes it has), so on_error::skip keeps every whole record; the labels file may then hold a
// label for every entry or for the whole records only (the partial one's label is then -1).
// Both paths must be regular files: a FIFO, directory or device is an io_error "not a regular
// file", refused before any open, so it cannot block.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/record_index.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::io {

enum class label_type : std::uint8_t { i64, i32, u8 };

struct fixed_records_options {
  std::size_t record_bytes = 0;
  std::string labels_path{};            // empty: no labels (label(i) == -1)
  io::label_type label_type = label_type::i64;
  std::size_t header_bytes = 0;         // bytes to skip at the start of the data file
  map_options map{.advice = access::automatic};
  io::bad_records bad_records = io::bad_records::fail;  // defer: a partial last record throws when read
};

class fixed_records {
 public:
  using reader_concept = reader_tag;

  fixed_records(std::string data_path, fixed_records_options o)
      : data_(detail::regular_file_path(std::move(data_path)), o.map), record_bytes_(o.record_bytes), header_(o.header_bytes), ltype_(o.label_type) {
    const std::string& p = data_.path();
    if (record_bytes_ == 0) throw usage_error("sluice: fixed_records: record_bytes must be set");
    if (header_ == 0)
      if (const auto h = detail::npy_header_of(data_))  // its header would be the first record's bytes
        throw format_error(p, {.offset = 0},
                           detail::npy_misread(*h, "raw records") +
                               "; read it with io::npy_reader (sluice.npy from Python), which takes the dtype and "
                               "shape from it, or skip the header with header_bytes = " + std::to_string(h->data_offset));
    if (data_.size() < header_)
      throw format_error(p, {.offset = 0}, "file is " + std::to_string(data_.size()) + " bytes, shorter than its " +
                                               std::to_string(header_) + "-byte header");
    const std::size_t body = data_.size() - header_;
    count_ = body / record_bytes_;
    if (body % record_bytes_ != 0) {
      const std::string cause = "file size is not a whole number of " + std::to_string(record_bytes_) +
                                "-byte records (last record truncated: " + std::to_string(body % record_bytes_) +
                                " bytes)";
      if (o.bad_records == bad_records::fail)
        throw format_error(p, {.record = count_, .offset = header_ + count_ * record_bytes_}, cause);
      partial_ = cause;
      ++count_;
    }
    label_count_ = count_;
    if (!o.labels_path.empty()) {
      labels_ = mapped_file(detail::regular_file_path(o.labels_path), {.advice = access::willneed});
      const std::size_t lb = label_bytes();
      const bool fits = labels_.size() == count_ * lb || (partial_ && labels_.size() == (count_ - 1) * lb);
      if (!fits) {
        const char* type = ltype_ == label_type::i64 ? "int64" : ltype_ == label_type::i32 ? "int32" : "uint8";
        if (const auto h = detail::npy_header_of(labels_))
          throw format_error(labels_.path(), {.offset = 0},
                             detail::npy_misread(*h, "raw labels") + "; write the labels alone (numpy.load(FILE).astype(numpy." +
                                 type + ").tofile(OUT)), or read the data with io::npy_reader (sluice.npy), which "
                                 "takes .npy labels");
        std::string cause = "labels file holds " + std::to_string(labels_.size() / lb) + " labels (" +
                            std::to_string(labels_.size()) + " bytes) for " + std::to_string(count_) + " records in '" + p + "'";
        // The labels' own type is a likelier cause than a count off when the sizes match another one.
        for (const std::size_t other : {std::size_t{8}, std::size_t{4}, std::size_t{2}, std::size_t{1}})
          if (other != lb && labels_.size() == count_ * other) {
            cause += ": labels are raw little-endian " + std::string(type) + ", " + std::to_string(lb) +
                     " bytes each, and this file has " + std::to_string(other) + " a record (write them with "
                     "labels.astype(numpy." + type + ").tofile(path))";
            break;
          }
        throw format_error(labels_.path(), {.offset = 0}, cause);
      }
      label_count_ = labels_.size() / lb;
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::string_view path() const noexcept { return data_.path(); }
  [[nodiscard]] std::size_t record_bytes() const noexcept { return record_bytes_; }
  [[nodiscard]] const mapped_file& file() const noexcept { return data_; }

  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    if (i >= count_) throw format_error(data_.path(), {.record = i}, "record index past the last record");
    if (partial_ && i + 1 == count_) [[unlikely]]
      throw format_error(data_.path(), {.record = i, .offset = header_ + i * record_bytes_}, *partial_);
    return {data_.data() + header_ + i * record_bytes_, record_bytes_};
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const noexcept {
    if (labels_.empty() || i >= label_count_) return -1;
    const std::byte* p = labels_.data() + i * label_bytes();
    switch (ltype_) {
      case label_type::i64: { std::int64_t v; std::memcpy(&v, p, 8); return v; }
      case label_type::i32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
      case label_type::u8: return static_cast<std::int64_t>(static_cast<std::uint8_t>(*p));
    }
    return -1;
  }
  [[nodiscard]] std::vector<std::int64_t> labels() const {
    std::vector<std::int64_t> v(count_);
    for (std::size_t i = 0; i < count_; ++i) v[i] = label(i);
    return v;
  }

 private:
  [[nodiscard]] std::size_t label_bytes() const noexcept {
    return ltype_ == label_type::i64 ? 8 : ltype_ == label_type::i32 ? 4 : 1;
  }
  mapped_file data_;
  mapped_file labels_;
  std::size_t record_bytes_, header_;
  io::label_type ltype_;
  std::size_t count_ = 0;        // entries, the partial last record included
  std::size_t label_count_ = 0;  // labels in the labels file
  std::optional<std::string> partial_;  // why the last entry is bad (bad_records::defer)
};

}  // namespace sluice::io
