// sluice/io/record_index.hpp — where each record of a scanned file lies, saved beside the file.
//
// Formats without an index of their own (TFRecord, WebDataset tar) are scanned once; the result
// (24 bytes a record) is saved as `<file>.sidx` and trusted at the next open only when it names the
// same format settings, its own CRC matches, and the file is provably the one scanned (device,
// inode, size, mtime and ctime in nanoseconds, and a CRC of its first and last 64 KiB); anything
// else is silently rebuilt. It is written under a temporary name and renamed, and a directory that
// cannot be written just means no saved index. Also here: `bad_records`, what a scanning reader
// does with a record it cannot index (fail at open, or defer the error to that record's read).
// The layout and why size + mtime is not enough: docs/formats.md.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/io/crc32c.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/regular_file.hpp"

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

// What a scanning reader does with a record it cannot index (truncated, a bad length CRC, a
// length past the end, a bad payload CRC). Supported by tfrecord_reader (tfrecord.hpp: every kind
// of bad record) and fixed_records (fixed_records.hpp: a partial last record). The other readers
// always fail at open: npy, idx and the token readers (their header or offsets say where every
// record is, and a file that disagrees is refused whole), and wds_tar.
enum class bad_records : std::uint8_t {
  fail,   // the constructor throws format_error at the first bad record (default)
  defer,  // index every record that can be found; a bad one stays an entry whose read throws
          // format_error (file, record, offset, cause), so on_error::skip drops and counts it and
          // on_error::raise reports it at that record. Framing damage (a truncated record, a bad
          // length CRC) ends the scan: everything from there to the end is that one bad entry.
};

// A record kept under bad_records::defer: record(i) throws format_error(file, {record, offset},
// cause).
struct damaged_record {
  std::uint64_t record = 0;
  std::uint64_t offset = 0;
  std::string cause;
};

namespace detail {

inline constexpr char index_magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'I', 'X'};
inline constexpr std::uint32_t index_version = 2;  // 1: size + mtime only (never trusted now)

// What identifies the file a saved index was built from (see the top of this header).
struct file_stamp {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::uint32_t content_crc = 0;  // CRC-32C of the first and last 64 KiB (whole file if smaller)
  friend bool operator==(const file_stamp&, const file_stamp&) = default;
};

inline constexpr std::uint64_t stamp_sample_bytes = 64 * 1024;

// CRC-32C of `fd`'s first and last stamp_sample_bytes (the whole file when it is at most twice
// that). nullopt when a read fails or comes up short (the file shrank under us).
inline std::optional<std::uint32_t> head_tail_crc(int fd, std::uint64_t size) {
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min(size, 2 * stamp_sample_bytes)));
  auto read_at = [&](std::byte* dst, std::size_t n, std::uint64_t at) {
    while (n > 0) {
      const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      dst += got;
      n -= static_cast<std::size_t>(got);
      at += static_cast<std::uint64_t>(got);
    }
    return true;
  };
  if (size <= 2 * stamp_sample_bytes) {
    if (!read_at(buf.data(), buf.size(), 0)) return std::nullopt;
  } else {
    const auto h = static_cast<std::size_t>(stamp_sample_bytes);
    if (!read_at(buf.data(), h, 0) || !read_at(buf.data() + h, h, size - stamp_sample_bytes))
      return std::nullopt;
  }
  return crc32c(buf);
}

// The stamp of `path` as it is now; nullopt if it cannot be read or is not a regular file (opened
// with O_NONBLOCK, so a FIFO never blocks here).
inline std::optional<file_stamp> stamp_of(const std::string& path) {
  struct stat st {};
  int fd = -1;
  try {
    fd = open_regular_nonblocking(path, st);
  } catch (const sluice::error&) {
    return std::nullopt;
  }
  auto crc = head_tail_crc(fd, static_cast<std::uint64_t>(st.st_size));
  ::close(fd);
  if (!crc) return std::nullopt;
  return file_stamp{static_cast<std::uint64_t>(st.st_dev),
                    static_cast<std::uint64_t>(st.st_ino),
                    static_cast<std::uint64_t>(st.st_size),
                    static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                        static_cast<std::int64_t>(st.st_mtim.tv_nsec),
                    static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 +
                        static_cast<std::int64_t>(st.st_ctim.tv_nsec),
                    *crc};
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
  std::string ipath = index_path_for(path);
  struct stat ist {};
  // Only a regular index file is opened (a FIFO named like one would block the open).
  if (::stat(ipath.c_str(), &ist) != 0 || !S_ISREG(ist.st_mode) || ::access(ipath.c_str(), R_OK) != 0)
    return std::nullopt;
  auto stamp = stamp_of(path);
  if (!stamp) return std::nullopt;
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
    std::uint32_t reserved = 0;
    std::uint64_t count = 0;
    if (!take(&saved.dev, 8) || !take(&saved.ino, 8) || !take(&saved.size, 8) ||
        !take(&saved.mtime_ns, 8) || !take(&saved.ctime_ns, 8) || !take(&saved.content_crc, 4) ||
        !take(&reserved, 4) || !take(&count, 8))
      return std::nullopt;
    if (saved != *stamp || reserved != 0) return std::nullopt;
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
  out.reserve(80 + kind.size() + entries.size() * sizeof(record_entry));
  out.insert(out.end(), reinterpret_cast<const std::byte*>(index_magic),
             reinterpret_cast<const std::byte*>(index_magic) + 8);
  append_pod(out, index_version);
  append_pod(out, static_cast<std::uint32_t>(kind.size()));
  out.insert(out.end(), reinterpret_cast<const std::byte*>(kind.data()),
             reinterpret_cast<const std::byte*>(kind.data()) + kind.size());
  append_pod(out, stamp->dev);
  append_pod(out, stamp->ino);
  append_pod(out, stamp->size);
  append_pod(out, stamp->mtime_ns);
  append_pod(out, stamp->ctime_ns);
  append_pod(out, stamp->content_crc);
  append_pod(out, std::uint32_t{0});
  append_pod(out, static_cast<std::uint64_t>(entries.size()));
  if (!entries.empty()) {
    auto p = reinterpret_cast<const std::byte*>(entries.data());
    out.insert(out.end(), p, p + entries.size() * sizeof(record_entry));
  }
  append_pod(out, crc32c(out));
  std::string ipath = index_path_for(path);
  static std::atomic<std::uint64_t> serial{0};  // two threads saving at once get two names
  std::string tmp = ipath + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(serial.fetch_add(1, std::memory_order_relaxed));
  // O_EXCL | O_NOFOLLOW: never write through whatever already sits at the temporary name (a
  // leftover, a symlink, a FIFO — fopen("wb") on a FIFO would block until a reader came).
  std::remove(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = true;
  for (std::size_t done = 0; ok && done < out.size();) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = (::close(fd) == 0) && ok;
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
