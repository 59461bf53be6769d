// sluice/io/regular_file.hpp — refuse a path that is not a regular file before opening it.
//
// Why: open(path, O_RDONLY) on a FIFO blocks until a writer appears — forever, for a dataset path
// that a typo or a stale pipe points at — and a directory or a character device cannot be mapped
// or read as records. Every reader in sluice::io calls this before it opens a path, so such a
// path fails at once with format_error "not a regular file" naming it, instead of hanging (an
// output path that is not a regular file: io_error). stat()
// follows symlinks, so a link to a regular file is fine.
//
//   file_(sluice::io::detail::regular_file_path(std::move(path)), opt.map)
//
// open_regular_nonblocking() is the race-free form for code that reads through a descriptor:
// O_NONBLOCK makes the open of a FIFO return at once, and fstat() then decides on the very object
// that was opened.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/core/error.hpp"

namespace sluice::io::detail {

// `doing`: what was refused, e.g. "cannot read records from" or "will not write to".
[[noreturn]] inline void throw_not_regular(const std::string& path, mode_t mode,
                                           const char* doing = "cannot read records from") {
  const char* what = S_ISFIFO(mode)  ? "a FIFO"
                     : S_ISDIR(mode) ? "a directory"
                     : S_ISCHR(mode) ? "a character device"
                     : S_ISBLK(mode) ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISLNK(mode) ? "a symbolic link"  // from lstat(), where a link is refused
                                      : "an unknown kind of file";
  const std::string why = std::string("not a regular file (") + what + "), " + doing;
  // Reading: the input is not what a dataset can be (format_error, like mapped_file's refusal).
  // Writing: the output path is unusable (io_error).
  if (std::string_view(doing).starts_with("cannot read")) throw format_error(path, {}, why);
  throw io_error(path, why);
}

// Throws format_error unless `path` names a regular file (after symlinks), io_error when it
// cannot be examined; returns the path.
inline std::string regular_file_path(std::string path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw io_error(path, "cannot open", errno);
  if (!S_ISREG(st.st_mode)) throw_not_regular(path, st.st_mode);
  return path;
}

// Opens `path` read-only without blocking and checks that the opened object is a regular file.
// Returns the descriptor (O_NONBLOCK stays set: it has no effect on reads of a regular file) and
// fills `st`. Throws io_error.
inline int open_regular_nonblocking(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw io_error(path, "cannot open", errno);
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw io_error(path, "cannot stat", e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_not_regular(path, st.st_mode);
  }
  return fd;
}

// Reads a small file whole (an MDS index.json, a loader state, a credentials file, an epoch
// log): opened without blocking and refused unless it is a regular file (a FIFO never blocks, a
// directory or /dev/zero is refused at once), and refused past `limit` bytes — checked against the
// size at open and again while reading, so a file that grows without end is never read until
// memory runs out. `what` names the file's role in the messages ("an MDS index").
// format_error for what the file is, io_error for what the system refused; both name the path.
inline std::string read_small_file(const std::string& path, std::size_t limit, const char* what) {
  struct stat st {};
  const int fd = open_regular_nonblocking(path, st);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  auto too_large = [&](std::size_t n) {
    throw format_error(path, {}, std::to_string(n) + (n > limit ? " bytes or more" : " bytes") +
                                     " is larger than the " + std::to_string(limit) + " bytes " + what +
                                     " may take: not " + what);
  };
  if (static_cast<std::uint64_t>(st.st_size) > limit) too_large(static_cast<std::size_t>(st.st_size));
  std::string out;
  out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw io_error(path, "cannot read", errno);
    }
    if (r == 0) break;
    if (out.size() + static_cast<std::size_t>(r) > limit) too_large(out.size() + static_cast<std::size_t>(r));
    out.append(buf, static_cast<std::size_t>(r));
  }
  return out;
}

}  // namespace sluice::io::detail
