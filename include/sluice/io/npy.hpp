// sluice/io/npy.hpp — NumPy .npy arrays as a record_reader: record i is row i of the first axis.
//
// npy_reader maps a .npy file (format 1.0, 2.0 or 3.0) and hands out row i as a view, zero copy,
// with optional labels from a second one-dimensional integer .npy of the same length; shape() and
// dtype() say what the rows are. npy_any serves several arrays of one length as the fields of a
// run-time sample, each typed as its array's dtype and shaped as its row.
// Errors: what cannot be served as rows is refused at open, a format_error naming the file:
// Fortran order, structured, object or big-endian multi-byte dtypes, 0-d arrays, rows of no
// elements (shape (N, 0)), trailing header bytes, a data size other than the shape's, arrays of different lengths (both named), a uint64
// label past INT64_MAX (never wrapped). Threads: const after construction.
// Every rule: docs/readers.md.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/compressed.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::io {

struct npy_dtype {
  char byte_order = '<';  // '<' little, '|' not applicable (1-byte types); '=' is folded into '<'
  char kind = 'u';        // b bool, i signed, u unsigned, f float, c complex, S/U/V bytes/str/void
  std::size_t item_bytes = 1;
  std::string descr;      // as written in the header, e.g. "<f4"
};

struct npy_header {
  int major = 1, minor = 0;
  npy_dtype dtype;
  std::vector<std::uint64_t> shape;
  std::size_t data_offset = 0;
};

struct npy_options {
  std::string labels_path{};  // optional 1-D integer .npy with one label per row
  map_options map{};
};

namespace detail {

class npy_dict_parser {
 public:
  npy_dict_parser(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  npy_header parse() {
    npy_header h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') { ++i_; break; }
      std::string key = string_literal();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') fail("structured dtypes (a list descr) are not supported");
        h.dtype.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (word("True")) fail("fortran_order is True: rows are not contiguous; save the array in C order (np.ascontiguousarray)");
        if (!word("False")) fail("fortran_order must be True or False");
        have_order = true;
      } else if (key == "shape") {
        expect('(');
        while (true) {
          skip_ws();
          if (peek() == ')') { ++i_; break; }
          h.shape.push_back(integer());
          skip_ws();
          if (peek() == ',') ++i_;
          else if (peek() != ')') fail("malformed shape tuple");
        }
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "' in the header dict");
      }
      skip_ws();
      if (peek() == ',') ++i_;
      else if (peek() != '}') fail("expected ',' or '}' in the header dict");
    }
    if (!have_descr || !have_order || !have_shape)
      fail("header dict lacks one of 'descr', 'fortran_order', 'shape'");
    // After the '}': only the padding NumPy writes (spaces) and the final newline.
    for (std::size_t k = i_; k < s_.size(); ++k)
      if (s_[k] != ' ' && !(s_[k] == '\n' && k + 1 == s_.size()))
        fail("unexpected text after the header dict's closing '}' (only spaces and a final newline may follow)");
    parse_descr(h.dtype);
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw format_error(path_, {}, "npy header: " + why); }
  char peek() const { if (i_ >= s_.size()) fail("header ends early"); return s_[i_]; }
  void skip_ws() { while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_; }
  void expect(char c) { skip_ws(); if (peek() != c) fail(std::string("expected '") + c + "'"); ++i_; }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::string string_literal() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  std::uint64_t integer() {
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
    if (ec != std::errc{}) fail("bad dimension in shape (not a non-negative integer that fits 64 bits)");
    i_ = static_cast<std::size_t>(p - s_.data());
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix
    return v;
  }
  void parse_descr(npy_dtype& d) const {
    const std::string& s = d.descr;
    if (s.size() < 2) fail("dtype '" + s + "' not understood");
    std::size_t at = 0;
    d.byte_order = '<';
    if (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=') { d.byte_order = s[0] == '=' ? '<' : s[0]; at = 1; }
    if (at >= s.size()) fail("dtype '" + s + "' not understood");
    d.kind = s[at++];
    if (std::string_view("biufcSUV").find(d.kind) == std::string_view::npos)
      fail("dtype '" + s + "' is not supported (object and datetime arrays cannot be served as bytes)");
    std::size_t n = 0;
    auto [p, ec] = std::from_chars(s.data() + at, s.data() + s.size(), n);
    if (ec != std::errc{} || p != s.data() + s.size() || n == 0 || n > (1u << 20))
      fail("dtype '" + s + "' has no valid item size");
    if (d.kind == 'U') n *= 4;  // UCS-4 code units
    d.item_bytes = n;
    if (d.byte_order == '>' && n > 1 && d.kind != 'S' && d.kind != 'V')
      fail("big-endian dtype '" + s + "' is not supported; convert it with arr.astype(arr.dtype.newbyteorder('<'))");
  }
  std::string_view s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

inline npy_header parse_npy_header(std::span<const std::byte> file, const std::string& path) {
  if (file.empty()) throw format_error(path, {file_position::npos, 0}, "empty file; an .npy file starts with \\x93NUMPY");
  if (file.size() < 10 || std::memcmp(file.data(), "\x93NUMPY", 6) != 0) {
    // What people hand an .npy reader instead, named: an .npz or a torch.save file (both zip
    // archives), a pickle, a compressed .npy.
    detail::throw_if_compressed(file, path, ".npy files");
    if (file.size() >= 4 && std::memcmp(file.data(), "PK\x03\x04", 4) == 0)
      throw format_error(path, {file_position::npos, 0},
                         "a zip archive, not an .npy file (numpy.savez and numpy.savez_compressed write .npz zip "
                         "archives, torch.save writes one too): sluice reads one array saved with numpy.save; for "
                         "an .npz, numpy.save('x.npy', numpy.load(FILE)['name'])");
    if (file.size() >= 2 && static_cast<std::uint8_t>(file[0]) == 0x80 && static_cast<std::uint8_t>(file[1]) <= 5)
      throw format_error(path, {file_position::npos, 0},
                         "a Python pickle, not an .npy file (pickle.dump, or torch.save with "
                         "_use_new_zipfile_serialization=False): sluice reads one array saved with numpy.save");
    throw format_error(path, {file_position::npos, 0}, file.size() < 10 ? "too short for an .npy header" : "wrong magic: not an .npy file");
  }
  npy_header h;
  h.major = static_cast<int>(file[6]);
  h.minor = static_cast<int>(file[7]);
  std::size_t hlen = 0, start = 0;
  if (h.major == 1) {
    hlen = static_cast<std::size_t>(file[8]) | (static_cast<std::size_t>(file[9]) << 8);
    start = 10;
  } else if (h.major == 2 || h.major == 3) {
    if (file.size() < 12) throw format_error(path, {file_position::npos, 8}, "truncated .npy header length");
    std::uint32_t v;
    std::memcpy(&v, file.data() + 8, 4);
    hlen = v;
    start = 12;
  } else {
    throw format_error(path, {file_position::npos, 6}, "unsupported .npy format version " + std::to_string(h.major) + "." + std::to_string(h.minor));
  }
  if (hlen > file.size() - start)
    throw format_error(path, {file_position::npos, 8}, "header length " + std::to_string(hlen) + " runs past the end of the file");
  std::string_view text(reinterpret_cast<const char*>(file.data() + start), hlen);
  npy_header parsed = npy_dict_parser(text, path).parse();
  parsed.major = h.major;
  parsed.minor = h.minor;
  parsed.data_offset = start + hlen;
  return parsed;
}

inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& path) {
  if (a != 0 && b > ~std::uint64_t{0} / a) throw format_error(path, {}, "npy shape overflows 64 bits");
  return a * b;
}

struct npy_layout {
  npy_header header;
  std::uint64_t row_bytes = 0;
  std::uint64_t rows = 0;
};

// Parses the header and checks that the data the shape implies is exactly what the file holds.
inline npy_layout describe_npy(std::span<const std::byte> file, const std::string& path) {
  npy_layout l;
  l.header = parse_npy_header(file, path);
  if (l.header.shape.empty()) throw format_error(path, {}, "0-d array (shape ()) has no rows to serve as records");
  l.row_bytes = l.header.dtype.item_bytes;
  for (std::size_t d = 1; d < l.header.shape.size(); ++d) l.row_bytes = checked_mul(l.row_bytes, l.header.shape[d], path);
  l.rows = l.header.shape[0];
  const std::uint64_t want = checked_mul(l.rows, l.row_bytes, path);
  const std::uint64_t have = file.size() - l.header.data_offset;
  if (want != have)
    throw format_error(path, {file_position::npos, l.header.data_offset},
                       "shape says " + std::to_string(want) + " data bytes but the file holds " + std::to_string(have) +
                           (want > have ? " (truncated)" : " (trailing bytes)"));
  return l;
}

// The header of a file numpy.save wrote (its magic and header parse), or nothing: for the readers
// of flat files (raw records, tokens), which would take the header's bytes as values.
inline std::optional<npy_header> npy_header_of(const mapped_file& f) {
  const auto bytes = std::span<const std::byte>(f.data(), f.size());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return std::nullopt;
  try {
    return parse_npy_header(bytes, f.path());
  } catch (const format_error&) {
    return std::nullopt;  // not a whole .npy header: left to the reader's own checks
  }
}

// "(2, 3)", "(3,)", "()": an .npy shape as NumPy prints it.
inline std::string npy_shape_text(const std::vector<std::uint64_t>& shape) {
  std::string t = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) t += (d ? ", " : "") + std::to_string(shape[d]);
  return t + (shape.size() == 1 ? ",)" : ")");
}

// Why such a file cannot be read as `holds` ("raw records"): its shape and the header that would
// be read as values. The reader adds what to do instead.
inline std::string npy_misread(const npy_header& h, const std::string& holds) {
  return "an .npy file (numpy.save; shape " + npy_shape_text(h.shape) + "), not " + holds + ": its " +
         std::to_string(h.data_offset) + "-byte header would be read as values";
}

}  // namespace detail

class npy_reader {
 public:
  using reader_concept = reader_tag;

  explicit npy_reader(std::string path, npy_options opt = {})
      : file_(detail::regular_file_path(std::move(path)), opt.map) {
    auto l = detail::describe_npy(file_.bytes(), file_.path());
    header_ = std::move(l.header);
    row_bytes_ = l.row_bytes;
    rows_ = l.rows;
    if (row_bytes_ == 0) {  // an axis of length 0 after the first: no sample has anything in it
      std::string dims;
      for (auto d : header_.shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      throw format_error(file_.path(), {},
                         "shape (" + dims +
                             "): its rows hold no elements (an axis after the first has length 0), "
                             "so there is no data to serve as a sample; save an array whose rows are not empty");
    }
    if (!opt.labels_path.empty()) load_labels(opt.labels_path, opt.map);
  }

  [[nodiscard]] std::size_t size() const noexcept { return rows_; }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    check_index(i);
    return file_.bytes().subspan(header_.data_offset + i * row_bytes_, row_bytes_);
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const {
    check_index(i);
    return labels_.empty() ? -1 : labels_[i];
  }
  [[nodiscard]] record_view view(std::size_t i) const { return {i, record(i), label(i), file_.path()}; }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  [[nodiscard]] const npy_header& header() const noexcept { return header_; }
  [[nodiscard]] const npy_dtype& dtype() const noexcept { return header_.dtype; }
  [[nodiscard]] const std::vector<std::uint64_t>& shape() const noexcept { return header_.shape; }
  [[nodiscard]] std::size_t row_bytes() const noexcept { return row_bytes_; }
  [[nodiscard]] const std::vector<std::int64_t>& labels() const noexcept { return labels_; }

 private:
  void check_index(std::size_t i) const {
    if (i >= rows_)
      throw usage_error("sluice: row " + std::to_string(i) + " out of range for '" + file_.path() + "' (" +
                        std::to_string(rows_) + " rows)");
  }
  void load_labels(const std::string& lpath, map_options m) {
    npy_reader l(lpath, {.map = m});
    const auto& d = l.dtype();
    if (l.shape().size() != 1) throw format_error(lpath, {}, "labels must be a 1-D array");
    if ((d.kind != 'i' && d.kind != 'u' && d.kind != 'b') || d.item_bytes > 8)
      throw format_error(lpath, {}, "labels must have an integer dtype, not '" + d.descr + "'");
    if (l.size() != rows_)
      throw format_error(lpath, {}, std::to_string(l.size()) + " labels for " + std::to_string(rows_) + " rows in '" + file_.path() + "'");
    labels_.resize(rows_);
    for (std::size_t i = 0; i < rows_; ++i) {
      auto r = l.record(i);
      std::uint64_t u = 0;
      std::memcpy(&u, r.data(), r.size());
      if (d.kind == 'i' && r.size() < 8 && (u >> (r.size() * 8 - 1)) & 1u) u |= ~std::uint64_t{0} << (r.size() * 8);
      // A uint64 label above INT64_MAX has no int64 value: refuse it rather than turn it negative.
      if (d.kind == 'u' && u > static_cast<std::uint64_t>(INT64_MAX))
        throw format_error(lpath, {.record = i, .offset = l.header().data_offset + i * r.size()},
                           "label " + std::to_string(u) + " (dtype '" + d.descr +
                               "') does not fit a signed 64-bit label (largest is 9223372036854775807)");
      labels_[i] = static_cast<std::int64_t>(u);
    }
  }
  mapped_file file_;
  npy_header header_;
  std::size_t row_bytes_ = 0;
  std::uint64_t rows_ = 0;
  std::vector<std::int64_t> labels_;
};

static_assert(record_reader<npy_reader>);

// The tensor element type of an .npy dtype; a dtype no tensor holds (complex, bytes, strings,
// void) is a format_error naming the file.
inline dtype npy_element_type(const npy_dtype& d, const std::string& path) {
  const auto n = d.item_bytes;
  switch (d.kind) {
    case 'u':
      if (n == 1 || n == 2 || n == 4 || n == 8) return n == 1 ? dtype::u8 : n == 2 ? dtype::u16 : n == 4 ? dtype::u32 : dtype::u64;
      break;
    case 'i':
      if (n == 1 || n == 2 || n == 4 || n == 8) return n == 1 ? dtype::i8 : n == 2 ? dtype::i16 : n == 4 ? dtype::i32 : dtype::i64;
      break;
    case 'f':
      if (n == 2 || n == 4 || n == 8) return n == 2 ? dtype::f16 : n == 4 ? dtype::f32 : dtype::f64;
      break;
    case 'b':
      if (n == 1) return dtype::boolean;
      break;
    default:
      break;
  }
  throw format_error(path, {}, "holds dtype '" + d.descr + "', which has no tensor element type (numbers and bool only)");
}

// Arrays of one length as a run-time sample's fields: see the top of this file.
class npy_any {
 public:
  using reader_concept = reader_tag;
  using names_type = std::vector<std::pair<std::string, std::string>>;  // (field, .npy path)

  explicit npy_any(const names_type& fields, map_options m = {}) {
    if (fields.empty()) throw usage_error("sluice: npy_any needs at least one field (a name and an .npy path)");
    std::vector<field_spec> specs;
    for (const auto& [name, path] : fields) {
      arrays_.emplace_back(path, npy_options{.map = m});
      const npy_reader& a = arrays_.back();
      if (a.size() != arrays_.front().size())
        throw format_error(std::string(a.path()), {},
                           std::to_string(a.size()) + " rows beside " + std::to_string(arrays_.front().size()) + " in '" +
                               std::string(arrays_.front().path()) + "' (field '" + fields.front().first +
                               "'); every array of the sample's fields must have one row per sample");
      const auto& shape = a.shape();
      if (shape.size() - 1 > max_dims)
        throw format_error(std::string(a.path()), {}, "rows of " + std::to_string(shape.size() - 1) + " dimensions; at most " +
                                                          std::to_string(max_dims));
      field_geometry g{.ndim = static_cast<std::uint8_t>(shape.size() - 1)};
      for (std::size_t d = 1; d < shape.size(); ++d) g.shape[d - 1] = static_cast<std::int64_t>(shape[d]);
      geometry_.push_back(g);
      specs.push_back({name, npy_element_type(a.dtype(), std::string(a.path())), extent::fixed});
    }
    schema_ = any_schema(std::move(specs));
  }

  // Moved, not copied: the samples point to its geometries.
  npy_any(npy_any&&) noexcept = default;
  npy_any& operator=(npy_any&&) noexcept = default;
  npy_any(const npy_any&) = delete;
  npy_any& operator=(const npy_any&) = delete;

  [[nodiscard]] const any_schema& schema() const noexcept { return schema_; }
  [[nodiscard]] std::size_t size() const noexcept { return arrays_.front().size(); }
  [[nodiscard]] std::string_view path() const noexcept { return arrays_.front().path(); }
  [[nodiscard]] const npy_reader& array(std::size_t k) const { return arrays_.at(k); }

  [[nodiscard]] any_sample fields(std::size_t i) const {
    any_sample s(i, arrays_.front().path(), arrays_.size());
    for (std::size_t k = 0; k < arrays_.size(); ++k) s.fields[k] = {arrays_[k].record(i), &geometry_[k], nullptr};
    return s;
  }

 private:
  std::vector<npy_reader> arrays_;
  std::vector<field_geometry> geometry_;
  any_schema schema_;
};

// Writes an .npy v1.0 header for a C-order array of `descr` and `shape` (tests, tools).
inline std::vector<std::byte> npy_header_bytes(std::string_view descr, const std::vector<std::uint64_t>& shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (auto d : shape) dict += std::to_string(d) + ", ";
  if (shape.size() > 1) dict.resize(dict.size() - 1);
  if (shape.size() > 1) dict.back() = ')';
  else dict += ")";
  dict += ", }";
  std::size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::vector<std::byte> out(10);
  std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
  out[8] = static_cast<std::byte>(dict.size() & 0xff);
  out[9] = static_cast<std::byte>(dict.size() >> 8);
  for (char c : dict) out.push_back(static_cast<std::byte>(c));
  return out;
}

}  // namespace sluice::io
