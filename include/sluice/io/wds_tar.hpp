// sluice/io/wds_tar.hpp — WebDataset tar shards as a record_reader (zero copy into the mapping).
//
// A WebDataset shard is a plain tar file whose members are grouped into samples by key: the
// member path up to the first dot of its basename ("train/000123.jpg" and "train/000123.cls" are
// the fields "jpg" and "cls" of sample "train/000123"). Members of a sample are consecutive. The
// user names the field that is the record (e.g. "jpg") and, optionally, the field holding the label
// as an ASCII integer (e.g. "cls"); other fields are ignored. A sample lacking a named field is a
// format_error naming its key.
//
// Headers understood: POSIX ustar (with its 155-byte prefix), GNU ("ustar  " magic, 'L' long
// names, base-256 sizes) and pax ('x' extended headers; `path=` is used, other keys ignored; 'g'
// global headers skipped). Each header's checksum is verified. Directories, links and other
// special members are skipped. The archive ends at the first all-zero block or at end of file.
//
// The scan's result is saved as `<file>.sidx` (see record_index.hpp) for an instant next open.
//
//   sluice::io::wds_tar_reader r{"shard-000.tar", {.record_field = "jpg", .label_field = "cls"}};
//   auto jpeg = r.record(0); auto cls = r.label(0);
//
// Thread-safety: all members are const after construction.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/record_index.hpp"

namespace sluice::io {

struct wds_options {
  std::string record_field = "jpg";  // extension of the member that is the record
  std::string label_field{};         // extension of the ASCII-integer label member; empty: none
  saved_index index = saved_index::use_and_save;
  map_options map{};
};

namespace detail {

inline constexpr std::size_t tar_block = 512;

inline bool all_zero(std::span<const std::byte> b) noexcept {
  for (auto x : b)
    if (x != std::byte{0}) return false;
  return true;
}

// A NUL-terminated (or full-width) text field.
inline std::string_view tar_text(const std::byte* p, std::size_t width) noexcept {
  auto c = reinterpret_cast<const char*>(p);
  std::size_t n = 0;
  while (n < width && c[n] != '\0') ++n;
  return {c, n};
}

// Octal number (spaces/NULs around it allowed) or GNU base-256 (high bit of the first byte set).
inline bool tar_number(const std::byte* p, std::size_t width, std::uint64_t& out) noexcept {
  auto u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] & 0x80u) {
    if (u[0] != 0x80u) return false;  // negative or absurd
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < width; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | u[i];
    }
    out = v;
    return true;
  }
  std::size_t i = 0;
  while (i < width && (u[i] == ' ' || u[i] == '\0')) ++i;
  std::uint64_t v = 0;
  bool any = false;
  for (; i < width && u[i] >= '0' && u[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (u[i] - '0');
    any = true;
  }
  for (; i < width; ++i)
    if (u[i] != ' ' && u[i] != '\0') return false;
  out = any ? v : 0;
  return true;
}

inline bool tar_checksum_ok(const std::byte* h) noexcept {
  std::uint64_t stored = 0;
  if (!tar_number(h + 148, 8, stored)) return false;
  // Unsigned sum first (what every modern tar writes): a plain loop the compiler vectorises,
  // with the checksum field counted as eight spaces.
  std::uint32_t usum = 0;
  auto u = reinterpret_cast<const unsigned char*>(h);
  for (std::size_t i = 0; i < tar_block; ++i) usum += u[i];
  for (std::size_t i = 148; i < 156; ++i) usum -= u[i];
  usum += 8 * ' ';
  if (stored == usum) return true;
  // Some old tars summed signed chars.
  std::int64_t ssum = 8 * ' ';
  for (std::size_t i = 0; i < tar_block; ++i)
    if (i < 148 || i >= 156) ssum += static_cast<signed char>(u[i]);
  return static_cast<std::int64_t>(stored) == ssum;
}

// Finds `path=` in a pax extended header body ("<len> <key>=<value>\n" records).
inline bool pax_path(std::span<const std::byte> body, std::string& path) {
  std::string_view s(reinterpret_cast<const char*>(body.data()), body.size());
  while (!s.empty()) {
    std::size_t sp = s.find(' ');
    if (sp == std::string_view::npos) return false;
    std::size_t len = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + sp, len);
    if (ec != std::errc{} || p != s.data() + sp || len <= sp + 1 || len > s.size() || s[len - 1] != '\n')
      return false;
    std::string_view kv = s.substr(sp + 1, len - sp - 2);
    std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos) return false;
    if (kv.substr(0, eq) == "path") {
      path.assign(kv.substr(eq + 1));
    }
    s.remove_prefix(len);
  }
  return true;  // a pax header without path= is fine: it carries other keys
}

struct tar_sample {
  std::string key;
  std::uint64_t first_offset = 0;  // header offset of its first member, for messages
  record_entry record{~std::uint64_t{0}, 0, -1};
  bool has_label = false;
};

inline std::int64_t parse_label(std::span<const std::byte> b, const std::string& path,
                                const std::string& key, std::uint64_t offset) {
  std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r' || s.back() == '\0')) s.remove_suffix(1);
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size())
    throw format_error(path, {file_position::npos, offset},
                       "label of sample '" + key + "' is not an ASCII integer");
  return v;
}

inline std::vector<record_entry> scan_wds_tar(std::span<const std::byte> file, const std::string& path,
                                              const wds_options& opt, std::vector<std::string>* keys) {
  std::vector<record_entry> out;
  const std::uint64_t n = file.size();
  std::uint64_t pos = 0;
  std::string long_name;  // from a GNU 'L' or pax 'x' header, applies to the next member
  std::string name_buf;   // storage for a member name that is not a view into the header
  bool have_long_name = false;
  tar_sample cur;
  bool have_cur = false;

  auto finish = [&] {
    if (!have_cur) return;
    if (cur.record.offset == ~std::uint64_t{0})
      throw format_error(path, {out.size(), cur.first_offset},
                         "sample '" + cur.key + "' has no '" + opt.record_field + "' field");
    if (!opt.label_field.empty() && !cur.has_label)
      throw format_error(path, {out.size(), cur.first_offset},
                         "sample '" + cur.key + "' has no '" + opt.label_field + "' field");
    out.push_back(cur.record);
    if (keys) keys->push_back(cur.key);
    have_cur = false;
  };

  if (n == 0) throw format_error(path, {}, "empty file (a tar archive has at least one 512-byte block)");
  while (pos < n) {
    if (n - pos < tar_block)
      throw format_error(path, {file_position::npos, pos},
                         "truncated tar header: " + std::to_string(n - pos) + " bytes left, a header needs 512");
    const std::byte* h = file.data() + pos;
    if (h[0] == std::byte{0} && all_zero(file.subspan(pos, tar_block))) break;  // end-of-archive marker
    if (!tar_checksum_ok(h))
      throw format_error(path, {file_position::npos, pos},
                         pos == 0 ? "not a tar archive (header checksum mismatch)" : "tar header checksum mismatch");
    std::uint64_t size = 0;
    if (!tar_number(h + 124, 12, size))
      throw format_error(path, {file_position::npos, pos}, "tar header has an unreadable size field");
    const std::uint64_t data = pos + tar_block;
    if (size > n - data)
      throw format_error(path, {file_position::npos, pos},
                         "member size " + std::to_string(size) + " runs past the end of the file (" +
                             std::to_string(n - data) + " bytes left)");
    const std::uint64_t padded = size + (tar_block - size % tar_block) % tar_block;
    const std::uint64_t next = (padded > n - data) ? n : data + padded;  // last member may lack padding
    const char type = static_cast<char>(h[156]);
    auto body = file.subspan(data, size);

    if (type == 'L') {  // GNU long name for the next member
      long_name.assign(tar_text(body.data(), body.size()));
      have_long_name = true;
    } else if (type == 'x') {  // pax extended header for the next member
      std::string p;
      if (!pax_path(body, p)) throw format_error(path, {file_position::npos, pos}, "malformed pax extended header");
      if (!p.empty()) {
        long_name = std::move(p);
        have_long_name = true;
      }
    } else if (type == '0' || type == '\0' || type == '7') {  // regular file
      std::string_view name;  // a view: no allocation for the common short ustar name
      if (have_long_name) {
        name_buf = std::move(long_name);
        name = name_buf;
      } else {
        std::string_view base = tar_text(h, 100);
        const bool ustar = std::memcmp(h + 257, "ustar\0", 6) == 0;
        std::string_view prefix = ustar ? tar_text(h + 345, 155) : std::string_view{};
        if (prefix.empty()) {
          name = base;
        } else {
          name_buf.assign(prefix).append("/").append(base);
          name = name_buf;
        }
      }
      have_long_name = false;
      long_name.clear();
      const std::size_t slash = name.rfind('/');
      const std::size_t base_at = slash == std::string_view::npos ? 0 : slash + 1;
      const std::size_t dot = name.find('.', base_at);
      if (dot != std::string_view::npos && dot > base_at) {
        std::string_view key(name.data(), dot);
        std::string_view ext(name.data() + dot + 1, name.size() - dot - 1);
        if (!have_cur || key != cur.key) {
          finish();
          cur = tar_sample{};
          cur.key.assign(key);
          cur.first_offset = pos;
          have_cur = true;
        }
        if (ext == opt.record_field) {
          if (cur.record.offset != ~std::uint64_t{0})
            throw format_error(path, {out.size(), pos}, "sample '" + cur.key + "' has two '" + opt.record_field + "' fields");
          cur.record.offset = data;
          cur.record.size = size;
        } else if (!opt.label_field.empty() && ext == opt.label_field) {
          if (cur.has_label)
            throw format_error(path, {out.size(), pos}, "sample '" + cur.key + "' has two '" + opt.label_field + "' fields");
          cur.record.label = parse_label(body, path, cur.key, data);
          cur.has_label = true;
        }
      }
    } else {  // directory, link, global pax, device...: skipped
      have_long_name = false;
      long_name.clear();
    }
    pos = next;
  }
  finish();
  return out;
}

}  // namespace detail

class wds_tar_reader {
 public:
  using reader_concept = reader_tag;

  explicit wds_tar_reader(std::string path, wds_options opt = {}) : file_(std::move(path), opt.map) {
    if (opt.record_field.empty()) throw usage_error("sluice: wds_tar_reader needs a record_field (e.g. \"jpg\")");
    const std::string kind = "wds:" + opt.record_field + ":" + opt.label_field;
    entries_ = detail::indexed(file_.path(), kind, opt.index, [&] {
      return detail::scan_wds_tar(file_.bytes(), file_.path(), opt, nullptr);
    });
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    check_index(i);
    return file_.bytes().subspan(entries_[i].offset, entries_[i].size);
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const {
    check_index(i);
    return entries_[i].label;
  }
  [[nodiscard]] record_view view(std::size_t i) const { return {i, record(i), label(i), file_.path()}; }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  [[nodiscard]] const mapped_file& file() const noexcept { return file_; }
  [[nodiscard]] std::uint64_t offset(std::size_t i) const { check_index(i); return entries_[i].offset; }

 private:
  void check_index(std::size_t i) const {
    if (i >= entries_.size())
      throw usage_error("sluice: record " + std::to_string(i) + " out of range for '" + file_.path() +
                        "' (" + std::to_string(entries_.size()) + " samples)");
  }
  mapped_file file_;
  std::vector<record_entry> entries_;
};

static_assert(record_reader<wds_tar_reader>);

// Appends one ustar member (regular file) to a tar image, for tests, tools and benchmarks.
// Names longer than 100 bytes get a GNU 'L' header first. Finish the archive with
// `out.resize(out.size() + 1024)` (two zero blocks).
inline void append_tar_member(std::vector<std::byte>& out, std::string_view name,
                              std::span<const std::byte> data) {
  auto header = [&](std::string_view nm, std::uint64_t size, char type) {
    std::byte h[detail::tar_block] = {};
    std::memcpy(h, nm.data(), std::min<std::size_t>(nm.size(), 100));
    std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644u);
    std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0u);
    std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0u);
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0u);
    h[156] = static_cast<std::byte>(type);
    std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (auto b : h) sum += static_cast<unsigned char>(b);
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    out.insert(out.end(), h, h + detail::tar_block);
  };
  auto body = [&](std::span<const std::byte> d) {
    out.insert(out.end(), d.begin(), d.end());
    out.resize(out.size() + (detail::tar_block - d.size() % detail::tar_block) % detail::tar_block);
  };
  if (name.size() > 100) {
    std::string n(name);
    n.push_back('\0');
    header("././@LongLink", n.size(), 'L');
    body(std::span(reinterpret_cast<const std::byte*>(n.data()), n.size()));
  }
  header(name, data.size(), '0');
  body(data);
}

}  // namespace sluice::io
