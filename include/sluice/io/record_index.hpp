// sluice/io/record_index.hpp — where each record of a scanned file lies, saved beside the file.
//
// Formats without an index of their own (TFRecord, WebDataset tar) must be scanned once to learn
// where record i starts. A scan reads the whole file; the result is small (24 bytes a record), so
// it is saved as `<file>.sidx` and the next open only reads that. A saved index is trusted only
// when it names the same format settings (a `kind` string, e.g. "tfrecord:crc" or "wds:jpg:cls"),
// the same file size and modification time (ns) as the file now, and its own CRC-32C matches;
// otherwise it is ignored and rebuilt. It is written to a temporary name and renamed, so a reader
// never sees half an index; a directory we cannot write to just means no saved index (not an
// error).
//
//   auto idx = sluice::io::detail::load_index(path, "tfrecord:crc", file_size);
//   if (!idx) { idx = scan(...); sluice::io::detail::save_index(path, "tfrecord:crc", *idx); }
//
// Layout (little-endian): "SLUICEIX" | u32 version=1 | u32 kind_len | kind bytes | u64 file_size
// | i64 mtime_ns | u64 count | count × {u64 offset, u64 size, i64 label} | u32 crc32c(all before).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/io/crc32c.hpp"
#include "sluice/io/mapped_file.hpp"

namespace sluice::io {

// One record's place in its file: payload bytes [offset, offset + size), and its label (-1 none).
struct record_entry {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::int64_t label = -1;
};

// Whether a reader may use and write `<file>.sidx`.
enum class saved_index {
  use_and_save,  // load a valid one; otherwise scan and save (default)
  use_only,      // load a valid one; otherwise scan, never write
  ignore,        // always scan, never write
};

namespace detail {

inline constexpr char index_magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'I', 'X'};
inline constexpr std::uint32_t index_version = 1;

struct file_stamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

inline std::optional<file_stamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return file_stamp{static_cast<std::uint64_t>(st.st_size),
                    static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                        static_cast<std::int64_t>(st.st_mtim.tv_nsec)};
}

inline std::string index_path_for(const std::string& path) { return path + ".sidx"; }

template <class T>
void append_pod(std::vector<std::byte>& out, const T& v) {
  auto p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// Loads `<path>.sidx` if it is valid for `path` as it is now and for `kind`; nullopt otherwise.
// Every entry is checked to lie inside the file, so a corrupt index cannot cause an
// out-of-bounds view.
inline std::optional<std::vector<record_entry>> load_index(const std::string& path,
                                                           std::string_view kind) {
  auto stamp = stamp_of(path);
  std::string ipath = index_path_for(path);
  if (!stamp || ::access(ipath.c_str(), R_OK) != 0) return std::nullopt;
  try {
    mapped_file f(ipath);
    auto b = f.bytes();
    std::size_t pos = 0;
    auto take = [&](void* dst, std::size_t n) {
      if (b.size() - pos < n) return false;
      std::memcpy(dst, b.data() + pos, n);
      pos += n;
      return true;
    };
    char magic[8];
    std::uint32_t version = 0, kind_len = 0;
    if (!take(magic, 8) || std::memcmp(magic, index_magic, 8) != 0) return std::nullopt;
    if (!take(&version, 4) || version != index_version) return std::nullopt;
    if (!take(&kind_len, 4) || kind_len != kind.size() || b.size() - pos < kind_len) return std::nullopt;
    if (std::memcmp(b.data() + pos, kind.data(), kind_len) != 0) return std::nullopt;
    pos += kind_len;
    file_stamp saved;
    std::uint64_t count = 0;
    if (!take(&saved.size, 8) || !take(&saved.mtime_ns, 8) || !take(&count, 8)) return std::nullopt;
    if (saved.size != stamp->size || saved.mtime_ns != stamp->mtime_ns) return std::nullopt;
    if (count > (b.size() - pos) / sizeof(record_entry)) return std::nullopt;
    if (b.size() - pos != count * sizeof(record_entry) + 4) return std::nullopt;
    std::uint32_t want = crc32c(b.first(b.size() - 4)), got = 0;
    std::memcpy(&got, b.data() + b.size() - 4, 4);
    if (want != got) return std::nullopt;
    std::vector<record_entry> entries(count);
    if (count) std::memcpy(entries.data(), b.data() + pos, count * sizeof(record_entry));
    for (const auto& e : entries)
      if (e.offset > stamp->size || e.size > stamp->size - e.offset) return std::nullopt;
    return entries;
  } catch (const sluice::error&) {
    return std::nullopt;
  }
}

// Saves the index beside `path` (temp file + rename). Returns false if it could not be written;
// that is never an error for the reader.
inline bool save_index(const std::string& path, std::string_view kind,
                       const std::vector<record_entry>& entries,
                       std::optional<file_stamp> stamp = std::nullopt) {
  if (!stamp) stamp = stamp_of(path);
  if (!stamp) return false;
  std::vector<std::byte> out;
  out.reserve(48 + kind.size() + entries.size() * sizeof(record_entry));
  out.insert(out.end(), reinterpret_cast<const std::byte*>(index_magic),
             reinterpret_cast<const std::byte*>(index_magic) + 8);
  append_pod(out, index_version);
  append_pod(out, static_cast<std::uint32_t>(kind.size()));
  out.insert(out.end(), reinterpret_cast<const std::byte*>(kind.data()),
             reinterpret_cast<const std::byte*>(kind.data()) + kind.size());
  append_pod(out, stamp->size);
  append_pod(out, stamp->mtime_ns);
  append_pod(out, static_cast<std::uint64_t>(entries.size()));
  if (!entries.empty()) {
    auto p = reinterpret_cast<const std::byte*>(entries.data());
    out.insert(out.end(), p, p + entries.size() * sizeof(record_entry));
  }
  append_pod(out, crc32c(out));
  std::string ipath = index_path_for(path);
  std::string tmp = ipath + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), ipath.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

// The load-or-scan-and-save policy every scanning reader shares.
template <class Scan>
std::vector<record_entry> indexed(const std::string& path, std::string_view kind, saved_index mode,
                                  Scan&& scan) {
  if (mode != saved_index::ignore)
    if (auto idx = load_index(path, kind)) return std::move(*idx);
  auto stamp = stamp_of(path);  // before the scan: a file changed during it gets a stale stamp
  std::vector<record_entry> entries = scan();
  if (mode == saved_index::use_and_save && stamp) save_index(path, kind, entries, stamp);
  return entries;
}

}  // namespace detail
}  // namespace sluice::io
