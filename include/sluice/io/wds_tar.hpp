// sluice/io/wds_tar.hpp — WebDataset tar shards as a record_reader (zero copy into the mapping).
//
// A WebDataset shard is a tar whose members are grouped into samples by key (the path up to the
// first dot of the basename), each member a field named by the rest, its extension, matched in
// any case as WebDataset lower-cases it ("a.JPG" is field "jpg"). wds_tar_reader hands out one
// named field as the record and, optionally, another as the label (an ASCII integer). It reads ustar, GNU and pax headers
// (checksums verified, pax path= and size= honoured), skips directories, links and devices, and
// refuses what it would otherwise misread: sparse members, a global pax header that renames
// members, a link with data, data after the end-of-archive marker (unless `.ignore_zeros`, as
// GNU tar's --ignore-zeros reads concatenated archives), a compressed archive (.tar.gz, .tar.zst:
// named as such, io/compressed.hpp). The scan is saved as `<file>.sidx`.
// Errors: a sample lacking a named field, a bad checksum, truncation or any refusal above is a
// format_error naming the file and the key or offset.
// Threads: all members are const after construction. Every rule: docs/readers.md.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/compressed.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/record_index.hpp"

namespace sluice::io {

struct wds_tar_options {
  std::string record_field = "jpg";  // extension of the member that is the record
  std::string label_field{};         // extension of the ASCII-integer label member; empty: none
  saved_index index = saved_index::use_and_save;
  map_options map{};
  // Read through all-zero blocks instead of stopping at them (GNU tar's --ignore-zeros): reads
  // archives concatenated with `cat` and ones with a stray zero block. Off: a zero block that
  // is followed by more headers is a format_error, since the samples after it would be lost.
  bool ignore_zeros = false;
};

namespace detail {

inline constexpr std::size_t tar_block = 512;

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

// What a pax extended header ('x' for the next member, 'g' for all that follow) says that the
// scan acts on. Other keys (linkpath, mtime, uname, ...) are read past and ignored.
struct pax_fields {
  bool has_path = false;
  std::string path;
  bool has_size = false;
  std::uint64_t size = 0;
  bool sparse = false;        // any GNU.sparse.* key: the member's data is a sparse map, refused
  std::string sparse_name;    // GNU.sparse.name, the member's real name in sparse format 1.0
};

// Parses a pax header body of "<len> <key>=<value>\n" records into `f` (later records win, as
// later headers do). Returns nullptr, or the reason the body is malformed. Every length is
// checked against the body; trailing NUL padding ends the records.
inline const char* parse_pax(std::span<const std::byte> body, pax_fields& f) {
  std::string_view s(reinterpret_cast<const char*>(body.data()), body.size());
  while (!s.empty() && s.front() != '\0') {
    const std::size_t sp = s.find(' ');
    if (sp == std::string_view::npos || sp == 0) return "a record has no length";
    std::size_t len = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + sp, len);
    if (ec != std::errc{} || p != s.data() + sp) return "a record length is not a decimal number";
    if (len < sp + 3 || len > s.size()) return "a record length runs past the header";
    if (s[len - 1] != '\n') return "a record does not end in a newline";
    const std::string_view kv = s.substr(sp + 1, len - sp - 2);
    const std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return "a record has no key=value";
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "path") {
      f.has_path = !value.empty();  // an empty value unsets the key
      f.path.assign(value);
    } else if (key == "size") {
      f.has_size = !value.empty();
      f.size = 0;
      if (f.has_size) {
        auto [q, e2] = std::from_chars(value.data(), value.data() + value.size(), f.size);
        if (e2 != std::errc{} || q != value.data() + value.size()) return "its size= is not a decimal number that fits in 64 bits";
      }
    } else if (key.starts_with("GNU.sparse.")) {
      f.sparse = true;
      if (key == "GNU.sparse.name") f.sparse_name.assign(value);
    }
    s.remove_prefix(len);
  }
  return nullptr;
}

// The offset of the first non-zero byte at or after `from`, or file.size() if there is none.
inline std::uint64_t first_nonzero(std::span<const std::byte> file, std::uint64_t from) noexcept {
  const std::byte* b = file.data();
  std::uint64_t i = from;
  const std::uint64_t n = file.size();
  while (i < n && b[i] == std::byte{0}) ++i;
  return i;
}

// The cause a missing member of a shard's last sample gets added when the tar lacks its
// end-of-archive marker (tar, Python's tarfile and webdataset's TarWriter end an archive with two
// zero blocks): the file was cut short at a member boundary, and the sample's other members are
// what was lost. Empty when the file ends in 1024 zero bytes (the marker, or zeros that might be).
inline std::string cut_short_hint(std::span<const std::byte> file) {
  const std::uint64_t n = file.size();
  if (n >= 2 * tar_block && first_nonzero(file, n - 2 * tar_block) == n) return {};
  return "; the tar ends without its end-of-archive marker (two zero blocks), so it was probably cut short "
         "(an interrupted write, copy or download): compare its size with the one written";
}

// Version of the scan's meaning, part of the saved index's kind: bumped whenever the same file
// scans to different samples, so an index saved by an older scan is rebuilt, not trusted.
//   1: first release (stopped silently at the first zero block; pax size= ignored).
//   2: pax size= honoured; lone and repeated zero blocks reported (or read through with
//      ignore_zeros); sparse members refused; no data read after a link/device/directory.
//   3: a sample lacking a member whose key has another group elsewhere (members apart) says so.
//   4: member extensions are lower-cased, as WebDataset's reader takes them ("a.JPG" is field
//      "jpg"; an older scan left such members out).
inline constexpr int wds_scan_version = 4;

// The `kind` the saved index is keyed by: everything that changes which samples a scan yields.
inline std::string wds_index_kind(const wds_tar_options& opt) {
  return "wds:v" + std::to_string(wds_scan_version) + ":" + opt.record_field + ":" + opt.label_field +
         (opt.ignore_zeros ? ":ignore_zeros" : "");
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

// Walks a tar image from byte `start` and calls `on_member(m)` for every regular-file member
// (m: tar_member_view, below), in file order; on_member returns false to stop the walk there.
// Everything above about headers, zero blocks, sparse members, links and truncation is enforced
// here, so every scan built on it (the one-record-per-sample scan below, the grouped scan of
// io/wds.hpp) refuses the same files with the same messages. Directories, links, devices, fifos
// and unknown types are skipped. `start` != 0 re-reads one member whose header (or first
// extended header) lies there, e.g. to recover a sample's key for an error message.
struct tar_member_view {
  std::string_view name;        // full member name (pax path, GNU long name or ustar prefix/name)
  std::uint64_t start = 0;      // offset of its first header (an extended header, if any)
  std::uint64_t header = 0;     // offset of its own ustar header
  std::uint64_t data = 0;       // offset of its data
  std::uint64_t size = 0;       // data bytes
  std::span<const std::byte> body;
  char type = '0';              // '0' a regular file; with links = true also '1' (hard link), '2' (symlink)
};

// links = true also passes hard links and symbolic links to on_member (type '1', '2'; no data),
// for an error message that names a sample's member stored as a link.
template <class OnMember>
void walk_tar(std::span<const std::byte> file, const std::string& path, bool ignore_zeros, OnMember&& on_member,
              std::uint64_t start = 0, bool links = false) {
  constexpr std::uint64_t none = file_position::npos;
  const std::uint64_t n = file.size();
  std::uint64_t pos = start;

  // What 'L', 'K' and 'x' headers said about the next member; cleared by that member.
  std::uint64_t ext_at = none;  // offset of the first of them, for messages
  bool have_long_name = false;
  std::string long_name;        // GNU 'L'
  pax_fields pax;               // pax 'x'
  std::string name_buf;         // storage for a member name that is not a view into the header

  auto fail = [&](std::uint64_t at, std::string cause) -> format_error {
    return format_error(path, {none, at}, std::move(cause));
  };
  auto no_dangling_ext = [&] {
    if (ext_at != none)
      throw fail(ext_at, "extended header (GNU long name or pax) is not followed by the member it describes");
  };

  if (n == 0) throw format_error(path, {}, "empty file (a tar archive has at least one 512-byte block)");
  while (pos < n) {
    // Zero blocks: zeros from here to the end of the file are the end-of-archive marker and the
    // record padding after it. A zero block with a header after it is either a lone zero block
    // or the end of one archive with another concatenated after it: an error, unless the user
    // asked to read through zero blocks.
    if (file[pos] == std::byte{0}) {
      const std::uint64_t nz = first_nonzero(file, pos);
      if (nz == n) {
        no_dangling_ext();
        break;
      }
      if (nz - pos >= tar_block) {
        const std::uint64_t zero_blocks = (nz - pos) / tar_block;
        const std::uint64_t next_header = pos + zero_blocks * tar_block;
        if (!ignore_zeros) {
          if (zero_blocks == 1)
            throw fail(pos, "a lone zero block in the middle of the archive (a header follows at byte offset " +
                                std::to_string(next_header) +
                                "); set wds_tar_options::ignore_zeros = true to read through zero blocks");
          throw fail(pos, "data follows the end-of-archive marker (" + std::to_string(zero_blocks) +
                              " zero blocks, then a header at byte offset " + std::to_string(next_header) +
                              "): concatenated archives? set wds_tar_options::ignore_zeros = true to read them all");
        }
        no_dangling_ext();
        pos = next_header;
        continue;
      }
      // A non-zero byte inside this block: not a zero block, read it as a header.
    }
    // A first header that does not parse may be a compressed archive (.tar.gz): say so.
    if (pos == 0 && (n < tar_block || !tar_checksum_ok(file.data()))) throw_if_compressed(file, path, "tar archives");
    if (n - pos < tar_block)
      throw fail(pos, "truncated tar header: " + std::to_string(n - pos) + " bytes left, a header needs 512");
    const std::byte* h = file.data() + pos;
    if (!tar_checksum_ok(h))
      throw fail(pos, pos == 0 ? "not a tar archive (header checksum mismatch)" : "tar header checksum mismatch");
    std::uint64_t size = 0;
    if (!tar_number(h + 124, 12, size)) throw fail(pos, "tar header has an unreadable size field");
    const char type = static_cast<char>(h[156]);
    const bool extended = type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g';
    if (!extended && pax.has_size) size = pax.size;  // pax size= overrides the ustar field

    // The member's name: pax path=, else a GNU long name, else ustar prefix + name.
    std::string_view name;  // a view: no allocation for the common short ustar name
    if (!extended) {
      if (pax.has_path) {
        name_buf = std::move(pax.path);
        name = name_buf;
      } else if (have_long_name) {
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
      if (type == 'S' || pax.sparse)
        throw fail(pos, "member '" + (pax.sparse_name.empty() ? std::string(name) : pax.sparse_name) +
                            "': sparse members are not supported");
    }

    // Which members have data blocks after the header: regular files, extended headers and
    // unknown types do; a directory never does (old tars may store its size); links and
    // devices have none by the standard, so a non-zero size there is refused, not guessed.
    const bool v7_dir = type == '\0' && !name.empty() && name.back() == '/';
    if (type == '5' || v7_dir) {
      size = 0;
    } else if (type == '1' || type == '2' || type == '3' || type == '4' || type == '6') {
      if (size != 0)
        throw fail(pos, "member '" + std::string(name) + "' is a link or device (type '" + std::string(1, type) +
                            "') with size " + std::to_string(size) +
                            "; such members have no data, so where the next header lies is ambiguous");
    }
    const std::uint64_t data = pos + tar_block;
    if (size > n - data)
      throw fail(pos, "member size " + std::to_string(size) + " runs past the end of the file (" +
                          std::to_string(n - data) + " bytes left)");
    const std::uint64_t padded = size + (tar_block - size % tar_block) % tar_block;
    const std::uint64_t next = (padded > n - data) ? n : data + padded;  // last member may lack padding
    auto body = file.subspan(data, size);

    if (extended) {
      if (type == 'g') {  // global: applies to every following member
        pax_fields g;
        if (const char* why = parse_pax(body, g)) throw fail(pos, std::string("malformed pax global header: ") + why);
        if (g.has_path || g.has_size || g.sparse)
          throw fail(pos, "a pax global header sets path=, size= or GNU.sparse.* for every following member; "
                          "not supported (members would share one name or one size)");
      } else {
        if (ext_at == none) ext_at = pos;
        if (type == 'L') {
          long_name.assign(tar_text(body.data(), body.size()));
          have_long_name = true;
        } else if (type == 'x' || type == 'X') {
          if (const char* why = parse_pax(body, pax)) throw fail(pos, std::string("malformed pax extended header: ") + why);
        }  // 'K' (GNU long link target): nothing the scan needs
      }
      pos = next;
      continue;
    }

    const std::uint64_t member_start = ext_at == none ? pos : ext_at;
    ext_at = none;
    have_long_name = false;
    long_name.clear();
    pax = pax_fields{};

    if (type == '0' || (type == '\0' && !v7_dir) || type == '7') {  // regular file
      if (!on_member(tar_member_view{name, member_start, pos, data, size, body})) return;
    } else if (links && (type == '1' || type == '2')) {
      if (!on_member(tar_member_view{name, member_start, pos, data, 0, {}, type})) return;
    }  // directory, link, device, fifo, unknown type: skipped
    pos = next;
  }
  no_dangling_ext();
}

// `s` in ASCII lower case: an extension as WebDataset matches it.
inline std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// Splits a member name into its sample key (the path up to the first dot of the basename) and
// its extension (everything after that dot, e.g. "seg.png"). False for names with no such dot
// (or a basename that starts with one): such members belong to no sample. The extension is in
// lower case, as WebDataset's reader takes it ("IMG_1.JPG" is field "jpg" of key "IMG_1"; the key
// keeps its case): a view into `name`, or into `lower` when it had an upper-case letter (no
// allocation for the common all-lower-case name).
inline bool split_key(std::string_view name, std::string_view& key, std::string_view& ext, std::string& lower) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base_at = slash == std::string_view::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base_at);
  if (dot == std::string_view::npos || dot == base_at) return false;
  key = name.substr(0, dot);
  ext = name.substr(dot + 1);
  if (std::any_of(ext.begin(), ext.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    lower = lower_ascii(ext);
    ext = lower;
  }
  return true;
}

// WebDataset groups a sample's members only when they are next to each other; a tar of a
// directory written without sorting (GNU tar's default takes the file system's order) splits them.
// The cause a format_error gives for such a sample, found as samples a and b of the shard.
inline std::string split_sample_cause(std::string_view key, std::size_t a, std::size_t b) {
  return "sample '" + std::string(key) + "' has members apart in the tar (samples " + std::to_string(std::min(a, b)) +
         " and " + std::to_string(std::max(a, b)) +
         " of the shard both have its key): WebDataset takes a sample's members only when they are next to each other; write the tar "
         "with its members sorted by name (tar --sort=name, or add each sample's files together as "
         "webdataset's TarWriter does)";
}

// The first two groups of adjacent members (the samples they would be) that have sample key `key`,
// and the second group's first header, if the key has two.
struct split_sample {
  std::size_t first = 0, later = 0;
  std::uint64_t offset = 0;
};
inline std::optional<split_sample> find_split_sample(std::span<const std::byte> file, const std::string& path,
                                                     bool ignore_zeros, std::string_view key) {
  std::string cur;
  bool have = false;
  std::size_t groups = 0;
  std::optional<std::size_t> first;
  std::optional<split_sample> out;
  std::string lower;
  walk_tar(file, path, ignore_zeros, [&](const tar_member_view& m) {
    std::string_view k, ext;
    if (!split_key(m.name, k, ext, lower) || (have && k == cur)) return true;
    cur.assign(k);
    have = true;
    const std::size_t g = groups++;
    if (k != key) return true;
    if (!first) {
      first = g;
      return true;
    }
    out = split_sample{*first, g, m.header};
    return false;
  });
  return out;
}

// A sample lacking a member may be a part of one whose members are apart: that is the cause to
// give, if so (called before raising a missing-member error; it walks the tar's headers again).
// Parts that are each whole are two samples, as WebDataset reads them.
inline void throw_if_split(std::span<const std::byte> file, const std::string& path, bool ignore_zeros,
                           std::string_view key) {
  if (const auto s = find_split_sample(file, path, ignore_zeros, key))
    throw format_error(path, {s->later, s->offset}, split_sample_cause(key, s->first, s->later));
}

// Where sample `key` lacks a member: the cause to add when the tar stores a member of that key
// with one of the extensions `exts` (as split_key gives them) as a hard or symbolic link, which
// sluice skips as webdataset does (a link has no data of its own). Empty when none is a link.
// Walks the tar's headers again.
template <class Exts>
std::string link_member_hint(std::span<const std::byte> file, const std::string& path, bool ignore_zeros,
                             std::string_view key, const Exts& exts) {
  std::string out, lower;
  walk_tar(file, path, ignore_zeros, [&](const tar_member_view& m) {
    std::string_view k, ext;
    if (m.type == '0' || !split_key(m.name, k, ext, lower) || k != key ||
        std::find(std::begin(exts), std::end(exts), ext) == std::end(exts))
      return true;
    out = "; the tar holds '" + std::string(m.name) + "' as a " +
          (m.type == '1' ? "hard link (GNU tar stores a file's second hard link so)" : "symbolic link") +
          ", and a link has no data of its own, so it is skipped as webdataset skips it: write the tar with the "
          "files themselves (" + (m.type == '1' ? "tar --hard-dereference" : "tar --dereference (-h)") + ")";
    return false;
  }, 0, true);
  return out;
}

// Where sample `key` lacks a member: the cause to add when its members' extensions end in one of
// `exts` after a dot ('img.v0.png' for key 'img.v0'): webdataset takes the key up to the first dot
// of the file name, so a key with a dot splits there. Empty when none does. Walks the headers again.
template <class Exts>
std::string dotted_key_hint(std::span<const std::byte> file, const std::string& path, bool ignore_zeros,
                            std::string_view key, const Exts& exts) {
  std::string out, lower;
  walk_tar(file, path, ignore_zeros, [&](const tar_member_view& m) {
    std::string_view k, ext;
    if (!split_key(m.name, k, ext, lower) || k != key) return true;
    for (const auto& x : exts) {
      const std::string_view want(x);
      if (ext.size() > want.size() + 1 && ext.ends_with(want) && ext[ext.size() - want.size() - 1] == '.') {
        const std::string_view rest = ext.substr(0, ext.size() - want.size() - 1);
        out = "; the tar holds '" + std::string(m.name) + "': webdataset takes a sample's key up to the first dot of "
              "the file name, so the key '" + std::string(key) + "." + std::string(rest) + "' became '" +
              std::string(key) + "' with the extension '" + std::string(ext) +
              "'; write keys without dots (e.g. '" + std::string(key) + "_" + std::string(rest) + "')";
        return false;
      }
    }
    return true;
  }, 0, true);
  return out;
}

inline std::vector<record_entry> scan_wds_tar(std::span<const std::byte> file, const std::string& path,
                                              const wds_tar_options& opt, std::vector<std::string>* keys) {
  std::vector<record_entry> out;
  tar_sample cur;
  bool have_cur = false;

  auto finish = [&](bool last) {
    if (!have_cur) return;
    const bool no_record = cur.record.offset == ~std::uint64_t{0}, no_label = !opt.label_field.empty() && !cur.has_label;
    if (no_record || no_label) throw_if_split(file, path, opt.ignore_zeros, cur.key);
    if (no_record || no_label) {
      const std::string& field = no_record ? opt.record_field : opt.label_field;
      throw format_error(path, {out.size(), cur.first_offset},
                         "sample '" + cur.key + "' has no '" + field + "' field" +
                             link_member_hint(file, path, opt.ignore_zeros, cur.key, std::array{std::string_view(field)}) +
                             dotted_key_hint(file, path, opt.ignore_zeros, cur.key, std::array{std::string_view(field)}) +
                             (last ? cut_short_hint(file) : std::string()));
    }
    out.push_back(cur.record);
    if (keys) keys->push_back(cur.key);
    have_cur = false;
  };

  std::string lower;
  walk_tar(file, path, opt.ignore_zeros, [&](const tar_member_view& m) {
    std::string_view key, ext;
    if (!split_key(m.name, key, ext, lower)) return true;
    if (!have_cur || key != cur.key) {
      finish(false);
      cur = tar_sample{};
      cur.key.assign(key);
      cur.first_offset = m.header;
      have_cur = true;
    }
    if (ext == opt.record_field) {
      if (cur.record.offset != ~std::uint64_t{0})
        throw format_error(path, {out.size(), m.header}, "sample '" + cur.key + "' has two '" + opt.record_field + "' fields");
      cur.record.offset = m.data;
      cur.record.size = m.size;
    } else if (!opt.label_field.empty() && ext == opt.label_field) {
      if (cur.has_label)
        throw format_error(path, {out.size(), m.header}, "sample '" + cur.key + "' has two '" + opt.label_field + "' fields");
      cur.record.label = parse_label(m.body, path, cur.key, m.data);
      cur.has_label = true;
    }
    return true;
  });
  finish(true);
  return out;
}

}  // namespace detail

class wds_tar_reader {
 public:
  using reader_concept = reader_tag;

  explicit wds_tar_reader(std::string path, wds_tar_options opt = {}) : file_(std::move(path), opt.map) {
    if (opt.record_field.empty()) throw usage_error("sluice: wds_tar_reader needs a record_field (e.g. \"jpg\")");
    // Extensions match in any case, as WebDataset's reader lower-cases them ("JPG" is "jpg").
    opt.record_field = detail::lower_ascii(opt.record_field);
    opt.label_field = detail::lower_ascii(opt.label_field);
    entries_ = detail::indexed(file_.path(), detail::wds_index_kind(opt), opt.index, [&] {
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
