// sluice/io/node_tier.hpp — a node-local disk tier: whole files in one directory, within a byte
// budget, shared by every process of the node.
//
// acquire(name, fill, check) returns file `name` of the tier, calling `fill` to produce it when
// it is absent: one fill per file per node (flock-coordinated; a process killed mid-fill never
// wedges the others), nothing partial ever published (written to a partial file, fsynced,
// checked, then renamed), LRU eviction within the budget of files no process holds (a held file is
// never evicted; the tier runs over budget rather than fail). The returned tier_file keeps its
// file from eviction while it lives. stats() counts hits, misses, bytes fetched and evicted.
// Errors: a full file system first evicts what is not in use and retries; then an io_error names
// the tier directory, the file and the budget. A failed fill or check removes the partial file.
// Threads: acquire() and stats() may be called from any thread; threads coordinate through the
// same locks as processes. Every rule: docs/remote.md.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice::io {

struct node_tier_options {
  std::uint64_t budget_bytes = std::uint64_t{64} << 30;  // the sum of the sizes of the tier's files
};

struct node_tier_stats {
  std::uint64_t hits = 0, misses = 0;
  std::uint64_t bytes_fetched = 0;   // bytes written by fills (failed checks included)
  std::uint64_t files_evicted = 0, bytes_evicted = 0;
  std::uint64_t over_budget = 0;     // fills after which everything evictable was in use
  [[nodiscard]] double hit_rate() const noexcept {
    const auto n = hits + misses;
    return n == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(n);
  }
};

namespace detail {
// A file descriptor closed on destruction (closing it drops its flock).
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~unique_fd() { reset(); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

inline void flock_or_throw(int fd, int op, const std::string& path) {
  while (::flock(fd, op) != 0) {
    if (errno == EINTR) continue;
    throw io_error(path, "cannot lock", errno);
  }
}
}  // namespace detail

// A file of the tier, held: while this object lives the file is not evicted (its lock is held
// shared). Move-only.
class tier_file {
 public:
  tier_file() = default;
  tier_file(std::string path, std::uint64_t size, detail::unique_fd lock, bool hit)
      : path_(std::move(path)), size_(size), lock_(std::move(lock)), hit_(hit) {}
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  // Whether the file was in the tier already (false: this acquire filled it).
  [[nodiscard]] bool was_hit() const noexcept { return hit_; }
  [[nodiscard]] bool held() const noexcept { return lock_.get() >= 0; }

 private:
  std::string path_;
  std::uint64_t size_ = 0;
  detail::unique_fd lock_;
  bool hit_ = false;
};

class node_tier {
 public:
  // fill(fd, temp_path): write the whole file into fd (opened O_RDWR, empty, in the tier
  // directory); throw on failure. check(temp_path): throw if the complete file must not be used.
  using fill_fn = std::function<void(int fd, const std::string& temp_path)>;
  using check_fn = std::function<void(const std::string& temp_path)>;

  explicit node_tier(std::string dir, node_tier_options o = {}) : dir_(std::move(dir)), opt_(o) {
    std::error_code ec;
    std::filesystem::create_directories(dir_ + "/.locks", ec);
    if (ec) throw io_error(dir_, "cannot create the disk tier directory", ec.value());
  }
  node_tier(const node_tier&) = delete;
  node_tier& operator=(const node_tier&) = delete;

  [[nodiscard]] const std::string& dir() const noexcept { return dir_; }
  [[nodiscard]] const node_tier_options& options() const noexcept { return opt_; }
  [[nodiscard]] std::string path_of(std::string_view name) const { return dir_ + "/" + std::string(name); }

  // The file `name` (a plain file name: no '/', not starting with '.'), filled when absent.
  // `expected_bytes` (0: unknown) lets room be made before the fill.
  tier_file acquire(std::string_view name, const fill_fn& fill, const check_fn& check = {},
                    std::uint64_t expected_bytes = 0) {
    check_name(name);
    const std::string path = path_of(name);
    const std::string lock_path = dir_ + "/.locks/" + std::string(name) + ".lock";
    // The use lock, shared from here until the tier_file is dropped: while it is held no process
    // evicts the file (eviction takes it exclusively, without waiting, and skips what it cannot).
    detail::unique_fd lk(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lk.get() < 0) throw io_error(lock_path, "cannot open the disk tier's lock file", errno);
    detail::flock_or_throw(lk.get(), LOCK_SH, lock_path);
    if (auto sz = size_of(path)) {
      touch(lk.get());
      hits_.fetch_add(1, std::memory_order_relaxed);
      return tier_file(path, *sz, std::move(lk), true);
    }
    // Absent: fill it under the fill lock, a second lock file held exclusively only while a file
    // is being filled. (Not the use lock taken exclusively: a process waiting for that would wait
    // for as long as any reader keeps the file, and readers keep their shards for a whole run.)
    const std::string fill_path = dir_ + "/.locks/" + std::string(name) + ".fill";
    detail::unique_fd fl(::open(fill_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (fl.get() < 0) throw io_error(fill_path, "cannot open the disk tier's lock file", errno);
    detail::flock_or_throw(fl.get(), LOCK_EX, fill_path);  // another process may be filling it: wait
    if (auto sz = size_of(path)) {  // it did: a hit
      touch(lk.get());
      hits_.fetch_add(1, std::memory_order_relaxed);
      return tier_file(path, *sz, std::move(lk), true);
    }
    remove_partials(name);  // a dead filler's leftovers (a live one would hold the fill lock)
    const std::uint64_t n = fill_locked(name, path, fill, check, expected_bytes);
    misses_.fetch_add(1, std::memory_order_relaxed);
    touch(lk.get());
    return tier_file(path, n, std::move(lk), false);
  }

  [[nodiscard]] node_tier_stats stats() const noexcept {
    return {hits_.load(std::memory_order_relaxed), misses_.load(std::memory_order_relaxed),
            fetched_.load(std::memory_order_relaxed), evicted_files_.load(std::memory_order_relaxed),
            evicted_bytes_.load(std::memory_order_relaxed), over_budget_.load(std::memory_order_relaxed)};
  }

  // The bytes the tier's published files take now (a directory scan).
  [[nodiscard]] std::uint64_t bytes_on_disk() const {
    std::uint64_t total = 0;
    for (const auto& f : list_files()) total += f.size;
    return total;
  }
  // Whether the file `name` is in the tier now.
  [[nodiscard]] bool contains(std::string_view name) const { return size_of(path_of(name)).has_value(); }

 private:
  struct file_info {
    std::string name;
    std::uint64_t size = 0;
    std::int64_t used_s = 0, used_ns = 0;
  };

  static void check_name(std::string_view name) {
    if (name.empty() || name.front() == '.' || name.find('/') != std::string_view::npos ||
        name.find(".partial.") != std::string_view::npos)
      throw usage_error("sluice: node_tier: '" + std::string(name) +
                        "' is not a plain file name (no '/', no leading '.', no '.partial.')");
  }

  static std::optional<std::uint64_t> size_of(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    return static_cast<std::uint64_t>(st.st_size);
  }
  // Marks a file used now: its lock file's mtime is the LRU stamp.
  static void touch(int lock_fd) noexcept { (void)::futimens(lock_fd, nullptr); }

  std::vector<file_info> list_files() const {
    std::vector<file_info> out;
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
      const std::string_view n = e->d_name;
      if (n.empty() || n.front() == '.' || n.find(".partial.") != std::string_view::npos) continue;
      struct stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
      file_info f{std::string(n), static_cast<std::uint64_t>(st.st_size), 0, 0};
      struct stat ls {};
      const std::string lp = dir_ + "/.locks/" + f.name + ".lock";
      if (::stat(lp.c_str(), &ls) == 0) {
        f.used_s = ls.st_mtim.tv_sec;
        f.used_ns = ls.st_mtim.tv_nsec;
      }
      out.push_back(std::move(f));
    }
    ::closedir(d);
    return out;
  }

  void remove_partials(std::string_view name) const {
    const std::string prefix = std::string(name) + ".partial.";
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) return;
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d))
      if (std::string_view(e->d_name).starts_with(prefix)) stale.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& s : stale) ::unlink((dir_ + "/" + s).c_str());
  }

  // Evicts least recently used files (never `keep`, never one held) until the files plus
  // `incoming` fit the budget, or everything evictable is gone when `all`. Returns bytes freed.
  std::uint64_t evict(std::string_view keep, std::uint64_t incoming, bool all) {
    const std::string tier_lock = dir_ + "/.locks/.tier.lock";
    detail::unique_fd g(::open(tier_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (g.get() < 0) throw io_error(tier_lock, "cannot open the disk tier's lock file", errno);
    detail::flock_or_throw(g.get(), LOCK_EX, tier_lock);
    auto files = list_files();
    std::uint64_t total = 0;
    for (const auto& f : files) total += f.size;
    if (!all && total + incoming <= opt_.budget_bytes) return 0;
    std::sort(files.begin(), files.end(), [](const file_info& a, const file_info& b) {
      return a.used_s != b.used_s ? a.used_s < b.used_s : a.used_ns < b.used_ns;
    });
    std::uint64_t freed = 0;
    for (const auto& f : files) {
      if (!all && total + incoming <= opt_.budget_bytes) break;
      if (f.name == keep) continue;
      const std::string lp = dir_ + "/.locks/" + f.name + ".lock";
      detail::unique_fd l(::open(lp.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
      if (l.get() < 0 || ::flock(l.get(), LOCK_EX | LOCK_NB) != 0) continue;  // in use
      auto sz = size_of(path_of(f.name));  // re-read under its lock
      if (!sz || ::unlink(path_of(f.name).c_str()) != 0) continue;
      total -= std::min(total, *sz);
      freed += *sz;
      evicted_files_.fetch_add(1, std::memory_order_relaxed);
      evicted_bytes_.fetch_add(*sz, std::memory_order_relaxed);
    }
    if (!all && total + incoming > opt_.budget_bytes) over_budget_.fetch_add(1, std::memory_order_relaxed);
    return freed;
  }

  // Holding `name`'s fill lock (and its use lock shared): fill a partial file, check it, publish it. Returns its size.
  std::uint64_t fill_locked(std::string_view name, const std::string& path, const fill_fn& fill,
                            const check_fn& check, std::uint64_t expected) {
    if (expected > 0) evict(name, expected, false);
    for (int attempt = 0;; ++attempt) {
      const std::string tmp = path + ".partial." + std::to_string(::getpid()) + "." +
                              std::to_string(seq_.fetch_add(1, std::memory_order_relaxed));
      std::uint64_t written = 0;
      try {
        detail::unique_fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        if (fd.get() < 0) throw io_error(tmp, "cannot create a file in the disk tier", errno);
        try {
          fill(fd.get(), tmp);
        } catch (...) {
          written = file_size(fd.get());
          throw;
        }
        written = file_size(fd.get());
        if (::fsync(fd.get()) != 0) throw io_error(tmp, "cannot fsync", errno);
        fetched_.fetch_add(written, std::memory_order_relaxed);
        fd.reset();
        if (check) check(tmp);
        if (::rename(tmp.c_str(), path.c_str()) != 0) throw io_error(path, "cannot rename into place", errno);
      } catch (const io_error& e) {
        ::unlink(tmp.c_str());
        if (e.error_number() == ENOSPC && attempt == 0) {
          evict(name, 0, true);  // a full file system: make room, once
          continue;
        }
        if (e.error_number() == ENOSPC)
          throw io_error(dir_, "the disk tier's file system is full (ENOSPC) while writing '" + std::string(name) +
                                   "' (" + std::to_string(written) + " bytes written; budget " +
                                   std::to_string(opt_.budget_bytes) +
                                   " bytes; every file not in use was evicted first) in",
                         ENOSPC);
        throw;
      } catch (...) {
        ::unlink(tmp.c_str());
        throw;
      }
      sync_dir();
      evict(name, 0, false);
      return *size_of(path);
    }
  }

  static std::uint64_t file_size(int fd) noexcept {
    struct stat st {};
    return ::fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  }
  void sync_dir() const {
    detail::unique_fd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d.get() >= 0) (void)::fsync(d.get());
  }

  std::string dir_;
  node_tier_options opt_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, fetched_{0}, evicted_files_{0}, evicted_bytes_{0},
      over_budget_{0}, seq_{0};
};

}  // namespace sluice::io
