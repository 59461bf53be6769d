// sluice/io/page_warmer.hpp — a mapping's pages faulted in ahead of the first epoch, in the background.
//
// A freshly mapped file costs its first epoch page faults even when every page is already in the page cache (one per
// page, or per fault-around window or large folio, depending on the kernel and file system). MAP_POPULATE removes them
// but makes open() wait for the whole file. The warmer does the same work off the critical path: one shared thread
// takes the mappings queued by io::mapped_file (map_options::populate = populate_mode::background, the default) and
// runs madvise(MADV_POPULATE_READ) over each, 8 MiB at a time, oldest file first, while the loader already reads. A
// page the loader reaches first is simply faulted by it.
//
// Only a file of 1 MiB or more that fits in half the memory available is queued: MemAvailable, or the room left under
// the process's memory cgroup limit when that is less (a container's limit, cgroup v2 memory.max or v1
// memory.limit_in_bytes). Populating more would evict the pages it just brought in, or the trainer's.
// Errors: MADV_POPULATE_READ reports them instead of raising SIGBUS (a file truncated meanwhile stops its job with
// EFAULT); a kernel without it (before Linux 5.14: EINVAL) turns the warmer off for the process. Either way the data
// read is unaffected: warming is a hint.
// Threads: a mapping cancels its job before it unmaps (waiting at most for the chunk in progress), so the thread never
// touches an address range that is gone. page_warm_stats() says what was done. What it gains on a first epoch:
// bench/README.md (the first-epoch row, bench/core BM_first_epoch); the populate modes: docs/formats.md.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "sluice/core/affinity.hpp"

namespace sluice::io {

// What the background warmer did in this process (cumulative).
struct page_warm_stats_t {
  std::uint64_t files_queued = 0;       // mappings queued for warming
  std::uint64_t files_too_large = 0;    // not queued: larger than half the memory available
  std::uint64_t files_done = 0;         // every page populated
  std::uint64_t files_cancelled = 0;    // unmapped before the warmer finished
  std::uint64_t bytes_populated = 0;
  std::uint64_t errors = 0;             // madvise failures (a file truncated meanwhile, ...)
  bool supported = true;                // false once the kernel refused MADV_POPULATE_READ
};

namespace detail {

// MemAvailable from /proc/meminfo in bytes (0 if unknown).
inline std::uint64_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// The first number in a file ("max" or unreadable: none).
inline std::optional<std::uint64_t> read_number(const std::string& path) {
  std::ifstream f(path);
  std::string t;
  if (!(f >> t) || t.empty() || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(t);
  } catch (...) {
    return std::nullopt;
  }
}

// What the memory cgroup of this process still lets it use: limit - usage, from the cgroup the
// text of /proc/self/cgroup names under `root` (cgroup v2: "0::/path" -> root/path/memory.max and
// memory.current; v1: "N:...memory...:/path" -> root/memory/path/memory.limit_in_bytes and
// memory.usage_in_bytes). None when there is no limit ("max", or v1's huge "unlimited" value) or
// nothing can be read. A container usually sees its own cgroup as "/", which then reads root's files.
inline std::optional<std::uint64_t> cgroup_headroom(const std::string& proc_self_cgroup,
                                                    const std::string& root = "/sys/fs/cgroup") {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  std::optional<std::uint64_t> best;
  auto consider = [&](const std::string& limit_file, const std::string& usage_file) {
    const auto limit = read_number(limit_file);
    if (!limit || *limit >= (std::uint64_t{1} << 60)) return;  // v1 writes ~2^63 for "unlimited"
    const std::uint64_t used = read_number(usage_file).value_or(0);
    const std::uint64_t room = *limit > used ? *limit - used : 0;
    best = best ? std::min(*best, room) : room;
  };
  while (std::getline(lines, line)) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const std::string dir = path == "/" ? "" : path;
    if (controllers.empty()) {
      consider(root + dir + "/memory.max", root + dir + "/memory.current");
    } else {
      std::istringstream cs(controllers);
      std::string c;
      while (std::getline(cs, c, ','))
        if (c == "memory") consider(root + "/memory" + dir + "/memory.limit_in_bytes", root + "/memory" + dir + "/memory.usage_in_bytes");
    }
  }
  return best;
}

// The memory this process may still fill: MemAvailable, or less when its memory cgroup has less
// room (0 if unknown).
inline std::uint64_t memory_available() {
  std::uint64_t avail = meminfo_available();
  std::ifstream f("/proc/self/cgroup");
  std::stringstream text;
  text << f.rdbuf();
  if (const auto room = cgroup_headroom(text.str()); room) avail = avail == 0 ? *room : std::min(avail, *room);
  return avail;
}

class page_warmer {
 public:
  static constexpr std::size_t chunk_bytes = std::size_t{8} << 20;
  static constexpr std::size_t min_bytes = std::size_t{1} << 20;  // smaller files are not queued

  static page_warmer& instance() {
    // Destroyed at exit (joining the thread) by the process that started the thread; a forked
    // child's copy is left as it is (sluice::detail::thread_owner says why).
    struct holder {
      page_warmer* w = new page_warmer;
      ~holder() {
        if (!w->owner_.forked_away()) delete w;
      }
    };
    static holder h;
    return *h.w;
  }
  page_warmer(const page_warmer&) = delete;
  page_warmer& operator=(const page_warmer&) = delete;
  ~page_warmer() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_ != nullptr) {
      thread_->join();
      delete thread_;
    }
  }

  // Queues [p, p + n) (a whole read-only file mapping). Returns the job's id (0: not queued). A
  // process forked from one whose warmer ran does not warm: its copy belongs to a thread it lacks.
  std::uint64_t add(const std::byte* p, std::size_t n) {
    if (n < min_bytes || owner_.forked_away()) return 0;  // a few faults: not worth a job
    const std::uint64_t avail = memory_available();
    std::lock_guard lk(m_);
#ifdef MADV_POPULATE_READ
    if (!stats_.supported || stop_) return 0;
    if (avail == 0 || n > avail / 2) {
      ++stats_.files_too_large;
      return 0;
    }
    jobs_.push_back({++next_id_, p, n, 0, false, false});
    ++stats_.files_queued;
    if (thread_ == nullptr) {  // first use
      owner_.started();
      thread_ = new std::thread([this] { run(); });
    }
    cv_.notify_one();
    return next_id_;
#else
    (void)p;
    (void)avail;
    stats_.supported = false;
    return 0;
#endif
  }

  // Drops job `id` (queued or running): returns once the thread no longer touches its range (at
  // most the chunk in progress later).
  void cancel(std::uint64_t id) {
    if (id == 0 || owner_.forked_away()) return;  // a forked child: no thread touches its copy
    std::unique_lock lk(m_);
    auto it = find(id);
    if (it == jobs_.end()) return;  // finished or failed already
    if (!it->busy) {
      jobs_.erase(it);
      ++stats_.files_cancelled;
      return;
    }
    it->cancelled = true;  // the thread erases it after its chunk
    cv_done_.wait(lk, [&] { return find(id) == jobs_.end(); });
  }

  [[nodiscard]] page_warm_stats_t stats() const {
    std::lock_guard lk(m_);
    return stats_;
  }

 private:
  struct job {
    std::uint64_t id;
    const std::byte* p;
    std::size_t n, done;
    bool busy, cancelled;
  };
  page_warmer() = default;

  std::list<job>::iterator find(std::uint64_t id) {
    return std::find_if(jobs_.begin(), jobs_.end(), [&](const job& j) { return j.id == id; });
  }

  void run() {
    sluice::detail::unpin_current_thread();  // not the set of the thread that opened the first file
    sluice::detail::name_current_thread("sluice-pagewarm");
    std::unique_lock lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job& j = jobs_.front();
      const std::size_t len = std::min(chunk_bytes, j.n - j.done);
      const std::byte* at = j.p + j.done;
      j.busy = true;
      lk.unlock();
      int rc = 0, err = 0;
#ifdef MADV_POPULATE_READ
      rc = ::madvise(const_cast<std::byte*>(at), len, MADV_POPULATE_READ);
      err = errno;
#endif
      lk.lock();
      j.busy = false;
      if (j.cancelled) {
        jobs_.pop_front();
        ++stats_.files_cancelled;
        cv_done_.notify_all();
        continue;
      }
      if (rc == 0) {
        j.done += len;
        stats_.bytes_populated += len;
        if (j.done < j.n) continue;
        ++stats_.files_done;
      } else {
        ++stats_.errors;
        if (err == EINVAL) stats_.supported = false;  // the kernel lacks it: stop warming
      }
      jobs_.pop_front();  // done, or failed (truncated, unsupported): the reader is unaffected
      if (!stats_.supported) jobs_.clear();
    }
  }

  mutable std::mutex m_;
  std::condition_variable cv_, cv_done_;
  std::list<job> jobs_;  // stable addresses: cancel() waits on one while the thread runs it
  std::uint64_t next_id_ = 0;
  bool stop_ = false;
  page_warm_stats_t stats_;
  std::thread* thread_ = nullptr;          // started on first use
  sluice::detail::thread_owner owner_;    // the process that started it
};

}  // namespace detail

// What the background page warmer has done in this process (io::mapped_file's default).
inline page_warm_stats_t page_warm_stats() { return detail::page_warmer::instance().stats(); }

}  // namespace sluice::io
