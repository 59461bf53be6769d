// sluice/io/mapped_file.hpp — a read-only memory mapping of a whole file.
//
// Readers hand out views into this mapping (MAP_PRIVATE, PROT_READ), so nothing is copied before
// collate. Every mapping is registered with core/file_guard.hpp, which turns a truncation under a
// running loader into an error for the sample that touched it. Hints: access::sequential / random /
// willneed / automatic map to madvise; `populate` decides who pays the first touch of each page
// (background, the default: a shared thread pre-faults files that fit in half the available
// memory while the loader reads, io/page_warmer.hpp; now: MAP_POPULATE; none: page faults).
// Errors: only regular files are mapped; a FIFO, directory or device is refused without blocking
// (opened O_NONBLOCK). An empty file maps to an empty span.
// Lifetime: move-only; unmaps on destruction, after cancelling its background warming.
// Measured effects of the hints: docs/formats.md and bench/storage/README.md.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/core/error.hpp"
#include "sluice/core/file_guard.hpp"
#include "sluice/io/page_warmer.hpp"

namespace sluice::io {

// automatic: normal (the kernel reads around a fault) when the file fits in half the memory this
// process may still fill (io/page_warmer.hpp's memory_available: MemAvailable, or less under a
// memory cgroup), random otherwise. Measured (bench/storage/README.md): a cold first pass
// over a shard that fits runs 12-38x faster with normal than with random at 256 KiB-1 MiB
// records, while past the memory limit random keeps 7-24k random 4 KiB reads/s where read-around
// falls to 0.1-1.9k. The readers default to it.
enum class access { normal, sequential, random, willneed, automatic };

// What access::automatic picks for a file of `bytes` with `available` bytes of memory free to fill.
[[nodiscard]] constexpr access automatic_access(std::uint64_t bytes, std::uint64_t available) noexcept {
  return available != 0 && bytes <= available / 2 ? access::normal : access::random;
}

enum class populate_mode { none, background, now };

struct map_options {
  access advice = access::normal;
  populate_mode populate = populate_mode::background;
};

class mapped_file {
 public:
  mapped_file() = default;
  explicit mapped_file(std::string path, map_options opt = {}) : path_(std::move(path)) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; with it the open
    // returns and the S_ISREG check below refuses the FIFO. It has no effect on regular files.
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) throw io_error(path_, "cannot open", errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      throw io_error(path_, "cannot stat", e);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw format_error(path_, {}, std::string("not a regular file (") + kind_of(st.st_mode) +
                                        "): sluice reads regular files only");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      int flags = MAP_PRIVATE;
#ifdef MAP_POPULATE
      if (opt.populate == populate_mode::now) flags |= MAP_POPULATE;
#endif
      void* p = ::mmap(nullptr, size_, PROT_READ, flags, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        throw io_error(path_, "cannot mmap", e);
      }
      data_ = static_cast<const std::byte*>(p);
      advise(opt.advice);
      try {
        guard_ = sluice::detail::file_registry::instance().add(data_, size_, path_, file_identity::of(st));
      } catch (...) {
        ::munmap(p, size_);
        ::close(fd);
        throw;
      }
      if (opt.populate == populate_mode::background) warm_ = sluice::io::detail::page_warmer::instance().add(data_, size_);
    }
    ::close(fd);  // the mapping keeps the file alive
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)), guard_(std::exchange(o.guard_, nullptr)), warm_(std::exchange(o.warm_, 0)) {}
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      guard_ = std::exchange(o.guard_, nullptr);
      warm_ = std::exchange(o.warm_, 0);
    }
    return *this;
  }
  ~mapped_file() { unmap(); }

  // Changes the kernel's read-ahead policy for the whole mapping. Best effort: a refused hint is
  // not an error (the data is still correct), so the return value only reports it.
  bool advise(access a) const noexcept {
    if (data_ == nullptr) return true;
    int adv = MADV_NORMAL;
    switch (a) {
      case access::normal: adv = MADV_NORMAL; break;
      case access::sequential: adv = MADV_SEQUENTIAL; break;
      case access::random: adv = MADV_RANDOM; break;
      case access::willneed: adv = MADV_WILLNEED; break;
      case access::automatic:
        adv = automatic_access(size_, sluice::io::detail::memory_available()) == access::normal ? MADV_NORMAL : MADV_RANDOM;
        break;
    }
    return ::madvise(const_cast<std::byte*>(data_), size_, adv) == 0;
  }

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // Whether the file faulted (was truncated while mapped) or changed since it was opened
  // (core/file_guard.hpp); throw_if_changed() raises the format_error that says which.
  [[nodiscard]] bool changed() const noexcept {
    return guard_ != nullptr && guard_->changed.load(std::memory_order_relaxed) != 0;
  }
  void throw_if_changed() const { sluice::detail::file_registry::instance().check_mapping(guard_); }

 private:
  static const char* kind_of(mode_t m) noexcept {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
  }
  void unmap() noexcept {
    if (warm_ != 0) sluice::io::detail::page_warmer::instance().cancel(std::exchange(warm_, 0));
    if (guard_ != nullptr) sluice::detail::file_registry::instance().remove(std::exchange(guard_, nullptr));
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  sluice::detail::guarded_mapping* guard_ = nullptr;
  std::uint64_t warm_ = 0;  // its background warming job (io/page_warmer.hpp), 0: none
};

}  // namespace sluice::io
