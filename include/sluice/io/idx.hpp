// sluice/io/idx.hpp — IDX files (the MNIST family: MNIST, Fashion-MNIST, KMNIST, EMNIST).
//
// idx_file opens one file: plain files are mapped (records are views, zero copy); gzip files
// (recognised by their magic bytes) are inflated once into memory the object owns, never more
// than the IDX header inside the stream describes. idx_reader pairs an images file with an
// optional labels file as a record_reader: record(i) is item i along the first dimension, label(i)
// its label (or -1).
// Errors: every length is checked before it is trusted; a bad file is a format_error naming the
// file, the byte offset (in the decompressed stream for .gz, and it says so) and the cause; a path
// that is not a regular file is an io_error found before any open; a gzip file without zlib linked
// is a usage_error saying to link sluice::zlib.
// Threads: read-only after construction; record() and label() are const and thread-safe.
// Every rule: docs/readers.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/regular_file.hpp"

#if defined(SLUICE_WITH_ZLIB) && SLUICE_WITH_ZLIB
#  include <zlib.h>
#endif

namespace sluice::io {

// IDX element types (the third magic byte).
enum class idx_type : std::uint8_t {
  u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E,
};

[[nodiscard]] constexpr std::size_t idx_element_bytes(idx_type t) noexcept {
  switch (t) {
    case idx_type::u8: case idx_type::i8: return 1;
    case idx_type::i16: return 2;
    case idx_type::i32: case idx_type::f32: return 4;
    case idx_type::f64: return 8;
  }
  return 0;
}

struct idx_options {
  // Largest decompressed size accepted from a gzip file (a guard against decompression bombs).
  std::uint64_t max_inflated_bytes = std::uint64_t{8} << 30;
  // Hint for the mapping of uncompressed files.
  access advice = access::normal;
};

namespace detail {

inline bool is_gzip(std::span<const std::byte> b) noexcept {
  return b.size() >= 2 && b[0] == std::byte{0x1f} && b[1] == std::byte{0x8b};
}

inline std::uint32_t read_be32(const std::byte* p) noexcept {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// The whole size of an IDX image (4 + 4 x dims header + dims product x element size) from its
// first bytes: 0 while `b` is too short to say; ~0 when the header is not IDX (parse() reports
// that) or its size overflows 64 bits.
inline constexpr std::uint64_t idx_size_unknown = 0;
inline constexpr std::uint64_t idx_size_invalid = ~std::uint64_t{0};
inline std::uint64_t idx_size_from_header(std::span<const std::byte> b) noexcept {
  if (b.size() < 4) return idx_size_unknown;
  const auto type = static_cast<idx_type>(static_cast<std::uint8_t>(b[2]));
  const std::size_t nd = static_cast<std::size_t>(b[3]);
  if (b[0] != std::byte{0} || b[1] != std::byte{0} || idx_element_bytes(type) == 0 || nd == 0)
    return idx_size_invalid;
  if (b.size() < 4 + 4 * nd) return idx_size_unknown;
  std::uint64_t data = idx_element_bytes(type);
  for (std::size_t d = 0; d < nd; ++d) {
    const std::uint64_t dim = read_be32(b.data() + 4 + 4 * d);
    if (dim != 0 && data > std::numeric_limits<std::uint64_t>::max() / dim) return idx_size_invalid;
    data *= dim;
  }
  const std::uint64_t header = 4 + 4 * nd;
  if (data > std::numeric_limits<std::uint64_t>::max() - header) return idx_size_invalid;
  return header + data;
}

inline std::string idx_dims_text(std::span<const std::byte> b) {
  const std::size_t nd = static_cast<std::size_t>(b[3]);
  std::string t;
  for (std::size_t d = 0; d < nd; ++d) t += (d ? " x " : "") + std::to_string(read_be32(b.data() + 4 + 4 * d));
  return t + " elements of " +
         std::to_string(idx_element_bytes(static_cast<idx_type>(static_cast<std::uint8_t>(b[2])))) + " bytes";
}

// Inflates a whole gzip file (all members) holding one IDX image into owned memory, growing only
// as output appears, and never past what the IDX header in the stream describes (nor past
// `max_bytes`). A stream whose first bytes are not an IDX header is inflated no further than
// that; parse() then reports the header.
inline std::vector<std::byte> inflate_gzip(const std::string& path, std::span<const std::byte> in,
                                           std::uint64_t max_bytes) {
#if defined(SLUICE_WITH_ZLIB) && SLUICE_WITH_ZLIB
  std::vector<std::byte> out;
  // ISIZE (last 4 bytes, little endian) is the size mod 2^32 of the last member. Deflate cannot
  // expand more than ~1032:1, so a hint beyond that is a lie and is ignored; a true hint saves the
  // re-allocations once the IDX header has confirmed it is not too much. Either way, the vector
  // only ever grows to hold bytes zlib has produced.
  std::uint64_t isize_hint = 0;
  if (in.size() >= 18) {
    const auto* t = in.data() + in.size() - 4;
    std::uint64_t isize = std::uint64_t(t[0]) | (std::uint64_t(t[1]) << 8) |
                          (std::uint64_t(t[2]) << 16) | (std::uint64_t(t[3]) << 24);
    if (isize <= max_bytes && isize / 1032 <= in.size()) isize_hint = isize;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw io_error(path, "zlib inflateInit2 failed");
  struct guard { z_stream* z; ~guard() { inflateEnd(z); } } g{&zs};
  std::size_t consumed = 0;
  std::size_t produced = 0;
  // What the IDX header describes, once its bytes are out (idx_size_unknown before).
  std::uint64_t expected = idx_size_unknown;
  // Output never grows past `limit` + 1 bytes: one byte more than allowed is how "more" is seen.
  std::uint64_t limit = max_bytes;
  constexpr std::size_t chunk = std::size_t{1} << 20;
  for (;;) {
    if (out.size() - produced < chunk / 4 && out.size() <= limit) {
      std::uint64_t want = std::max<std::uint64_t>(chunk, out.size());  // geometric, from what exists
      if (out.size() + want > limit + 1) want = limit + 1 - out.size();
      out.resize(out.size() + static_cast<std::size_t>(want));
    }
    std::size_t in_left = in.size() - consumed;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + consumed));
    zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, std::numeric_limits<uInt>::max()));
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - produced,
                                                           std::numeric_limits<uInt>::max()));
    const uInt avail_in0 = zs.avail_in, avail_out0 = zs.avail_out;
    int rc = inflate(&zs, Z_NO_FLUSH);
    consumed += avail_in0 - zs.avail_in;
    produced += avail_out0 - zs.avail_out;
    if (expected == idx_size_unknown) {
      expected = idx_size_from_header({out.data(), produced});
      if (expected == idx_size_invalid) break;  // not an IDX header: parse() says what is wrong
      if (expected != idx_size_unknown) {
        if (expected > max_bytes)
          throw format_error(path, {.offset = 4},
                             "the IDX header describes " + std::to_string(expected) + " bytes (" +
                                 idx_dims_text({out.data(), produced}) +
                                 ", plus the header), more than idx_options::max_inflated_bytes = " +
                                 std::to_string(max_bytes) + " (offset in the decompressed stream)");
        limit = expected;
        if (isize_hint != 0 && isize_hint <= limit) out.reserve(static_cast<std::size_t>(isize_hint));
      }
    }
    if (produced > limit) {
      if (expected != idx_size_unknown && expected != idx_size_invalid)
        throw format_error(path, {.offset = expected},
                           "the gzip stream decompresses to more than the " + std::to_string(expected) +
                               " bytes its IDX header describes (" + idx_dims_text({out.data(), produced}) +
                               ", plus the header): trailing bytes (offset in the decompressed stream)");
      throw format_error(path, {.offset = consumed},
                         "decompresses to more than " + std::to_string(max_bytes) +
                             " bytes (idx_options::max_inflated_bytes)");
    }
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (concatenated .gz files are valid gzip).
      if (consumed < in.size() && is_gzip(in.subspan(consumed))) {
        inflateReset(&zs);
        continue;
      }
      if (consumed < in.size()) {
        throw format_error(path, {.offset = consumed}, "trailing bytes after the gzip stream");
      }
      break;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && consumed == in.size()) {
      throw format_error(path, {.offset = consumed}, "gzip stream truncated");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw format_error(path, {.offset = consumed},
                         std::string("gzip stream corrupt: ") + (zs.msg ? zs.msg : "inflate failed"));
    }
  }
  // Fewer bytes than the header describes: parse() reports the truncation with the whole items.
  out.resize(produced);
  out.shrink_to_fit();
  return out;
#else
  (void)in;
  (void)max_bytes;
  throw usage_error("sluice: '" + path +
                    "' is gzip-compressed but sluice was built without zlib: link the sluice::zlib "
                    "target (or gunzip the file)");
#endif
}

}  // namespace detail

// One IDX file, parsed and validated.
class idx_file {
 public:
  idx_file() = default;
  explicit idx_file(std::string path, idx_options opt = {}) : path_(detail::regular_file_path(std::move(path))) {
    map_ = mapped_file(path_, {.advice = opt.advice});
    std::span<const std::byte> bytes = map_.bytes();
    if (detail::is_gzip(bytes)) {
      compressed_ = true;
      owned_ = detail::inflate_gzip(path_, bytes, opt.max_inflated_bytes);
      map_ = mapped_file();
      bytes = {owned_.data(), owned_.size()};
    }
    parse(bytes);
  }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] bool compressed() const noexcept { return compressed_; }
  [[nodiscard]] idx_type type() const noexcept { return type_; }
  [[nodiscard]] std::span<const std::uint32_t> dims() const noexcept { return dims_; }
  // Number of items along the first dimension.
  [[nodiscard]] std::size_t count() const noexcept { return dims_.empty() ? 0 : dims_[0]; }
  // Bytes of one item (the product of the other dimensions times the element size).
  [[nodiscard]] std::size_t item_bytes() const noexcept { return item_bytes_; }
  // Byte offset of the first element (4 + 4 * number of dimensions).
  [[nodiscard]] std::size_t header_bytes() const noexcept { return 4 + 4 * dims_.size(); }
  // All elements, big-endian as stored.
  [[nodiscard]] std::span<const std::byte> data() const noexcept { return data_; }
  [[nodiscard]] std::span<const std::byte> item(std::size_t i) const noexcept {
    return data_.subspan(i * item_bytes_, item_bytes_);
  }

 private:
  void parse(std::span<const std::byte> b) {
    const std::string where = compressed_ ? " (offset in the decompressed stream)" : "";
    if (b.size() < 4) {
      throw format_error(path_, {.offset = 0},
                         "truncated header: " + std::to_string(b.size()) + " bytes, need at least 4" + where);
    }
    if (b[0] != std::byte{0} || b[1] != std::byte{0}) {
      throw format_error(path_, {.offset = 0},
                         "wrong magic: first two bytes must be 0, this is not an IDX file" + where);
    }
    const auto t = static_cast<std::uint8_t>(b[2]);
    type_ = static_cast<idx_type>(t);
    if (idx_element_bytes(type_) == 0) {
      throw format_error(path_, {.offset = 2}, "wrong magic: unknown element type 0x" + hex(t) + where);
    }
    const auto nd = static_cast<std::size_t>(b[3]);
    if (nd == 0) throw format_error(path_, {.offset = 3}, "wrong magic: zero dimensions" + where);
    if (b.size() < 4 + 4 * nd) {
      throw format_error(path_, {.offset = b.size()},
                         "truncated header: " + std::to_string(nd) + " dimensions need " +
                             std::to_string(4 + 4 * nd) + " bytes, file has " +
                             std::to_string(b.size()) + where);
    }
    dims_.resize(nd);
    std::uint64_t item = idx_element_bytes(type_);
    for (std::size_t d = 0; d < nd; ++d) {
      dims_[d] = detail::read_be32(b.data() + 4 + 4 * d);
      if (d > 0) {
        if (dims_[d] != 0 && item > std::numeric_limits<std::uint64_t>::max() / dims_[d]) {
          throw format_error(path_, {.offset = 4 + 4 * d}, "dimensions overflow 64 bits" + where);
        }
        item *= dims_[d];
      }
    }
    const std::uint64_t header = 4 + 4 * nd;
    const std::uint64_t present = b.size() - header;
    const std::uint64_t n = dims_[0];
    // Compare n * item with present without overflowing.
    const bool fits = item == 0 ? true : n <= present / item;
    if (!fits) {
      const std::uint64_t whole = item == 0 ? 0 : present / item;
      throw format_error(path_, {.record = whole, .offset = header + whole * item},
                         "truncated: header says " + std::to_string(n) + " items of " +
                             std::to_string(item) + " bytes, the data holds " + std::to_string(present) +
                             " bytes (" + std::to_string(whole) + " whole items)" + where);
    }
    if (n * item != present) {
      throw format_error(path_, {.offset = header + n * item},
                         "dimensions mismatch: header says " + std::to_string(n * item) +
                             " bytes of data, file has " + std::to_string(present) + " (" +
                             std::to_string(present - n * item) + " trailing bytes)" + where);
    }
    item_bytes_ = static_cast<std::size_t>(item);
    data_ = b.subspan(static_cast<std::size_t>(header));
  }
  static std::string hex(std::uint8_t v) {
    const char* d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }

  std::string path_;
  mapped_file map_;
  std::vector<std::byte> owned_;
  std::span<const std::byte> data_;
  std::vector<std::uint32_t> dims_;
  std::size_t item_bytes_ = 0;
  idx_type type_ = idx_type::u8;
  bool compressed_ = false;
};

// An images file and (optionally) its labels file as a sluice::record_reader.
class idx_reader {
 public:
  using reader_concept = reader_tag;

  idx_reader() = default;
  explicit idx_reader(std::string images_path, std::string labels_path = {}, idx_options opt = {})
      : images_(std::move(images_path), opt) {
    if (images_.dims().size() < 2) {
      throw format_error(images_.path(), {.offset = 3},
                         "dimensions mismatch: an images file needs at least 2 dimensions, it has " +
                             std::to_string(images_.dims().size()));
    }
    if (!labels_path.empty()) {
      labels_ = idx_file(std::move(labels_path), opt);
      if (labels_.dims().size() != 1)
        throw format_error(labels_.path(), {.offset = 3},
                           "dimensions mismatch: a labels file must be 1-dimensional; this one has " +
                               std::to_string(labels_.dims().size()) + " dimensions");
      if (labels_.type() != idx_type::u8) {
        const auto t = labels_.type();
        throw format_error(labels_.path(), {.offset = 2},
                           std::string("labels of type ") +
                               (t == idx_type::i8 ? "int8 (0x09)" : t == idx_type::i16 ? "int16 (0x0B)"
                                : t == idx_type::i32 ? "int32 (0x0C)" : t == idx_type::f32 ? "float32 (0x0D)"
                                : "float64 (0x0E)") +
                               "; a labels file holds unsigned bytes (type 0x08), as MNIST's: write the labels as uint8");
      }
      if (labels_.count() != images_.count()) {
        throw format_error(labels_.path(), {.offset = 4},
                           "counts disagree: " + std::to_string(labels_.count()) + " labels for " +
                               std::to_string(images_.count()) + " images in '" + images_.path() + "'");
      }
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return images_.count(); }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    if (i >= size()) {
      throw format_error(images_.path(), {.record = i},
                         "record index out of range (" + std::to_string(size()) + " records)");
    }
    return images_.item(i);
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const noexcept {
    if (labels_.count() == 0 || i >= labels_.count()) return -1;
    return static_cast<std::int64_t>(static_cast<std::uint8_t>(labels_.data()[i]));
  }
  [[nodiscard]] std::string_view path() const noexcept { return images_.path(); }

  [[nodiscard]] bool has_labels() const noexcept { return labels_.count() != 0; }
  // Labels as stored (one byte per record); empty without a labels file.
  [[nodiscard]] std::span<const std::uint8_t> labels() const noexcept {
    auto d = labels_.data();
    return {reinterpret_cast<const std::uint8_t*>(d.data()), d.size()};
  }
  [[nodiscard]] std::size_t record_bytes() const noexcept { return images_.item_bytes(); }
  [[nodiscard]] std::size_t rows() const noexcept { return images_.dims()[1]; }
  [[nodiscard]] std::size_t cols() const noexcept {
    return images_.dims().size() > 2 ? images_.dims()[2] : 1;
  }
  [[nodiscard]] const idx_file& images() const noexcept { return images_; }
  [[nodiscard]] const idx_file& labels_file() const noexcept { return labels_; }

 private:
  idx_file images_;
  idx_file labels_;
};

static_assert(record_reader<idx_reader>);

}  // namespace sluice::io
