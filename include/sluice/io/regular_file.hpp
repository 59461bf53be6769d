// sluice/io/regular_file.hpp — refuse a path that is not a regular file before opening it.
//
// Why: open(path, O_RDONLY) on a FIFO blocks until a writer appears — forever, for a dataset path
// that a typo or a stale pipe points at — and a directory or a character device cannot be mapped
// or read as records. Every reader in sluice::io calls this before it opens a path, so such a
// path fails at once with io_error "not a regular file" naming it, instead of hanging. stat()
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
#include <string>
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
  throw io_error(path, std::string("not a regular file (") + what + "), " + doing);
}

// Throws io_error unless `path` names a regular file (after symlinks); returns the path.
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

}  // namespace sluice::io::detail
