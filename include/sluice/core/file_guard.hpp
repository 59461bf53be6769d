// sluice/core/file_guard.hpp — files that change under a running loader are errors, not crashes.
//
// Readers hand out views into mappings of their files; a file truncated by another process would
// raise SIGBUS in the trainer. Every mapping is registered here, and a process-wide SIGBUS handler
// (chained to the previous one) maps zero pages over the rest of a faulted mapping and marks it, so
// the sample that touched it fails with a format_error naming the file ("the file changed while in
// use") and no later sample is served from it. At each epoch's start every mapped file's identity
// (device, inode, size, times) is compared with its identity at open; after each batch is written,
// the files its samples came from are stat()ed, which catches what no fault shows (a truncation
// inside a page, an overwrite in place). Under on_error::skip such samples are dropped and counted.
// Caveat: a SIGBUS handler installed after sluice's replaces it.
// Threads: the handler does only lock-free atomics and one mmap(); the registry is safe from any
// thread. Every rule: docs/guarantees.md.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice {

// What identifies a file's content cheaply: a replacement, truncation or write changes one of these.
struct file_identity {
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  friend bool operator==(const file_identity&, const file_identity&) = default;

  static file_identity of(const struct stat& st) noexcept {
    return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
            static_cast<std::uint64_t>(st.st_size), static_cast<std::int64_t>(st.st_mtim.tv_sec),
            static_cast<std::int64_t>(st.st_mtim.tv_nsec), static_cast<std::int64_t>(st.st_ctim.tv_sec),
            static_cast<std::int64_t>(st.st_ctim.tv_nsec)};
  }
  // Words for what differs between `then` (at open) and `now`.
  static std::string describe_change(const file_identity& then, const file_identity& now) {
    if (then.dev != now.dev || then.ino != now.ino) return "it was replaced by another file";
    if (now.size < then.size)
      return "it was truncated from " + std::to_string(then.size) + " to " + std::to_string(now.size) + " bytes";
    if (now.size > then.size)
      return "it grew from " + std::to_string(then.size) + " to " + std::to_string(now.size) + " bytes";
    return "it was written to (its modification or change time moved)";
  }
};

namespace detail {

// One registered mapping. `begin`/`end` are published last (release) and cleared first, so the
// signal handler sees either a whole entry or none.
struct guarded_mapping {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<std::uint64_t> faulted_at{0};  // the fault counter's value at its first fault; 0: none
  std::atomic<std::uint32_t> changed{0};     // 1: faulted (truncated), 2: changed since open
  // Written under the registry's mutex only, never read by the handler.
  std::string path;
  file_identity identity;
  std::string why;  // what changed, once known
};

class file_registry {
 public:
  static constexpr std::size_t chunk_entries = 256;
  struct chunk {
    guarded_mapping entries[chunk_entries];
    std::atomic<chunk*> next{nullptr};
  };

  static file_registry& instance() noexcept {
    static file_registry r;  // never destroyed: the handler may run during static destruction
    return r;
  }

  // Registers [p, p + n) of `path` and installs the handler (once). Returns the entry.
  guarded_mapping* add(const void* p, std::size_t n, const std::string& path, const file_identity& id) {
    install_handler();
    std::lock_guard lk(m_);
    for (chunk* c = &first_;; c = c->next.load(std::memory_order_acquire)) {
      for (auto& e : c->entries) {
        if (e.end.load(std::memory_order_relaxed) != 0) continue;
        e.path = path;
        e.identity = id;
        e.why.clear();
        e.changed.store(0, std::memory_order_relaxed);
        e.faulted_at.store(0, std::memory_order_relaxed);
        e.begin.store(reinterpret_cast<std::uintptr_t>(p), std::memory_order_relaxed);
        e.end.store(reinterpret_cast<std::uintptr_t>(p) + n, std::memory_order_release);
        ++live_;
        registrations_.fetch_add(1, std::memory_order_release);
        return &e;
      }
      if (c->next.load(std::memory_order_relaxed) == nullptr) c->next.store(new chunk, std::memory_order_release);
    }
  }
  void remove(guarded_mapping* e) noexcept {
    std::lock_guard lk(m_);
    if (e->changed.load(std::memory_order_relaxed) != 0) flagged_.fetch_sub(1, std::memory_order_relaxed);
    if (const std::uint64_t at = e->faulted_at.load(std::memory_order_relaxed); at != 0) {
      // A watch that began before the fault still reports it after the mapping is gone.
      try {
        if (retired_.size() == max_retired) retired_.erase(retired_.begin());
        retired_.emplace_back(at, std::move(e->path));
      } catch (...) {
      }
    }
    e->end.store(0, std::memory_order_relaxed);
    e->begin.store(0, std::memory_order_relaxed);
    e->changed.store(0, std::memory_order_relaxed);
    e->path.clear();
    e->path.shrink_to_fit();
    --live_;
  }

  // Faults taken in any registered mapping since the process started (relaxed: a watch compares
  // two values of it on one thread, and the fault happened on the thread that reads it or the
  // sample's bytes were not affected).
  [[nodiscard]] std::uint64_t faults() const noexcept { return faults_.load(std::memory_order_acquire); }
  // Registered files currently marked faulted or changed. Zero in a healthy run: the read stage's
  // per-sample check is this one relaxed load.
  [[nodiscard]] std::size_t flagged() const noexcept { return flagged_.load(std::memory_order_relaxed); }

  // Marks every registered file whose identity differs from its identity at open. Called by the
  // loader at the start of each epoch; returns the number of files newly marked.
  std::size_t check_all() {
    std::lock_guard lk(m_);
    std::size_t n = 0;
    for_each_locked([&](guarded_mapping& e) {
      if (e.changed.load(std::memory_order_relaxed) != 0) return;
      struct stat st {};
      std::string why;
      if (::stat(e.path.c_str(), &st) != 0) why = "it was removed or renamed";
      else if (auto now = file_identity::of(st); !(now == e.identity)) why = file_identity::describe_change(e.identity, now);
      else return;
      e.why = std::move(why);
      mark_locked(e, 2);
      ++n;
    });
    return n;
  }

  // Throws format_error if `e` (one mapping) is marked faulted or changed.
  void check_mapping(const guarded_mapping* e) {
    if (e == nullptr || e->changed.load(std::memory_order_relaxed) == 0) return;
    std::string err_path, why;
    {
      std::lock_guard lk(m_);
      err_path = e->path;
      why = reason_locked(*e);
    }
    throw format_error(err_path, {}, why);
  }

  // Throws format_error if the file at `path` is marked faulted or changed: every mapping of that
  // path is marked (a mapping opened after the change is a fresh view: it passes). For readers
  // that do not say which mapping a sample comes from. Fast path: flagged() == 0.
  void check_source(std::string_view path) {
    if (flagged() == 0) return;
    std::string err_path, why;
    bool fresh = false;
    {
      std::lock_guard lk(m_);
      for_each_locked([&](guarded_mapping& e) {
        if (e.path != path) return;
        if (e.changed.load(std::memory_order_relaxed) == 0) {
          fresh = true;
        } else if (err_path.empty()) {
          err_path = e.path;
          why = reason_locked(e);
        }
      });
    }
    if (!fresh && !err_path.empty()) throw format_error(err_path, {}, why);
  }

  // Registrations so far: a path unknown to the registry may be mapped later (a lazily opened
  // file), so a cache of "not mapped" answers is valid while this count stands still.
  [[nodiscard]] std::uint64_t registrations() const noexcept { return registrations_.load(std::memory_order_acquire); }

  // What the registry knows of `path` for a batch check that meets it first: `live` (the identity
  // a live, unmarked mapping of it had at open, in `out`), `marked` (every live mapping of it is
  // marked: its samples cannot be trusted; the reason in `why`), or `unknown` (not mapped).
  enum class lookup { unknown, live, marked };
  lookup opened_identity(std::string_view path, file_identity& out, std::string& why) {
    std::lock_guard lk(m_);
    lookup found = lookup::unknown;
    const guarded_mapping* marked = nullptr;
    for_each_locked([&](guarded_mapping& e) {
      if (found == lookup::live || e.path != path) return;
      if (e.changed.load(std::memory_order_relaxed) == 0) {
        out = e.identity;
        found = lookup::live;
      } else if (found == lookup::unknown) {
        marked = &e;
        found = lookup::marked;
      }
    });
    if (found == lookup::marked) why = reason_locked(*marked);
    return found;
  }

  // `now`: the identity of the file at `path`, read after a batch's bytes were copied. Marks
  // (sticky) every mapping of that same file (device and inode) whose size or times differ from
  // `now`, and returns what changed ("it was truncated from ... to ... bytes"), or an empty string
  // when no mapping of the file differs (a mapping opened after the change is a fresh view). A
  // path that now names another file is not this check's business: the mapping still holds the
  // old file, whole, and the next epoch's check_all refuses it.
  std::string mark_if_changed(std::string_view path, const file_identity& now) {
    std::lock_guard lk(m_);
    std::string why;
    for_each_locked([&](guarded_mapping& e) {
      if (e.path != path || e.identity.dev != now.dev || e.identity.ino != now.ino) return;
      if (e.changed.load(std::memory_order_relaxed) == 0) {
        if (e.identity == now) return;
        e.why = file_identity::describe_change(e.identity, now);
        mark_locked(e, 2);
      }
      if (why.empty()) why = e.why.empty() ? std::string("it changed") : e.why;
    });
    return why;
  }

  // Throws format_error naming a file that faulted: `origin` if it did (the sample's file), or,
  // when the sample's file is unknown (empty origin), any file that faulted after the counter
  // read `since` (the sample may hold that file's zero pages).
  void check_faults_since(std::uint64_t since, std::string_view origin) {
    std::string err_path, why;
    {
      std::lock_guard lk(m_);
      for_each_locked([&](guarded_mapping& e) {
        const std::uint64_t at = e.faulted_at.load(std::memory_order_relaxed);
        if (!err_path.empty() || at == 0) return;
        if (origin.empty() ? at > since : e.path == origin) {
          err_path = e.path;
          why = reason_locked(e);
        }
      });
      for (const auto& [at, path] : retired_) {
        if (!err_path.empty()) break;
        if (at > since && (origin.empty() || path == origin)) {
          err_path = path;
          why = fault_reason;
        }
      }
    }
    if (!err_path.empty()) throw format_error(err_path, {}, why);
  }

 private:
  file_registry() = default;

  template <class F>
  void for_each_locked(F&& f) {
    for (chunk* c = &first_; c != nullptr; c = c->next.load(std::memory_order_acquire))
      for (auto& e : c->entries)
        if (e.end.load(std::memory_order_relaxed) != 0) f(e);
  }
  void mark_locked(guarded_mapping& e, std::uint32_t how) {
    std::uint32_t expected = 0;
    if (e.changed.compare_exchange_strong(expected, how, std::memory_order_relaxed))
      flagged_.fetch_add(1, std::memory_order_relaxed);
  }
  static constexpr const char* fault_reason =
      "the file changed while in use: a read past its end (it was truncated while it was mapped, "
      "or the device failed); its records can no longer be trusted";
  static std::string reason_locked(const guarded_mapping& e) {
    if (e.faulted_at.load(std::memory_order_relaxed) != 0) return fault_reason;
    return "the file changed since it was opened: " + e.why + "; its records can no longer be trusted "
           "(reopen the dataset)";
  }

  // ---- the signal handler: async-signal-safe parts only ----
  static void on_sigbus(int sig, siginfo_t* info, void* uctx) {
    auto& r = instance();
    const auto addr = reinterpret_cast<std::uintptr_t>(info != nullptr ? info->si_addr : nullptr);
    for (chunk* c = &r.first_; c != nullptr; c = c->next.load(std::memory_order_acquire)) {
      for (auto& e : c->entries) {
        const std::uintptr_t b = e.begin.load(std::memory_order_acquire);
        const std::uintptr_t end = e.end.load(std::memory_order_acquire);
        if (end == 0 || addr < b || addr >= end) continue;
        // Zero pages over the rest of the mapping: every page after a page past the end of a
        // truncated file is past it too, so one fault per file is the common case.
        // Marked before the zero pages exist: a thread that reads them afterwards (a sample of
        // the same file, on another worker) finds the mark when its sample is checked.
        const std::uint64_t n = r.faults_.fetch_add(1, std::memory_order_seq_cst) + 1;
        std::uint64_t zero = 0;
        e.faulted_at.compare_exchange_strong(zero, n, std::memory_order_seq_cst);
        std::uint32_t expected = 0;
        if (e.changed.compare_exchange_strong(expected, 1, std::memory_order_seq_cst))
          r.flagged_.fetch_add(1, std::memory_order_seq_cst);
        const std::uintptr_t page = r.page_size_.load(std::memory_order_relaxed);
        const std::uintptr_t from = addr & ~(page - 1);
        const std::uintptr_t to = (end + page - 1) & ~(page - 1);
        void* z = ::mmap(reinterpret_cast<void*>(from), to - from, PROT_READ,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (z == MAP_FAILED) break;  // cannot repair: fall through to the previous handler
        return;
      }
    }
    // Not ours: the previous handler, or the default action (re-raised by returning into the fault).
    const struct sigaction& prev = r.previous_;
    if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, uctx);
    } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
      prev.sa_handler(sig);
    } else {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      ::sigaction(SIGBUS, &dfl, nullptr);  // returning re-executes the access: default action
    }
  }

  void install_handler() {
    std::call_once(installed_, [this] {
      page_size_.store(static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE)), std::memory_order_relaxed);
      struct sigaction sa {};
      sa.sa_sigaction = &file_registry::on_sigbus;
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGBUS, &sa, &previous_);
    });
  }

  std::mutex m_;
  std::once_flag installed_;
  struct sigaction previous_ {};
  chunk first_;
  std::size_t live_ = 0;
  static constexpr std::size_t max_retired = 64;
  std::vector<std::pair<std::uint64_t, std::string>> retired_;  // faulted mappings since unmapped
  std::atomic<std::uintptr_t> page_size_{4096};
  std::atomic<std::uint64_t> faults_{0};
  std::atomic<std::size_t> flagged_{0};
  std::atomic<std::uint64_t> registrations_{0};
};

// The loader's check after a batch's bytes are written (one per worker): each file the batch's
// samples came from is stat'ed once, and a file whose size or times moved since it was opened is
// marked changed. The page fault check cannot see two changes: a truncation to a size inside a
// page (the rest of that page reads as zeros, no SIGBUS) and an overwrite in place (new bytes, no
// fault at all). The kernel updates the size before it drops a truncated file's pages and the
// modification time before a write's bytes land, so a stat after the copy that shows the file as
// it was opened proves the copy read the file as it was opened (up to the filesystem's clock
// granularity for writes landing within one tick of the file's previous modification).
// Cost: one stat (~1.5 us) per distinct file a batch; a hash lookup per change of file between
// consecutive samples. Not thread-safe: one per worker.
class batch_file_check {
 public:
  // Returns the index of the first of `origins` whose file changed (its reason in `why`), or
  // origins.size(). Empty origins (a sample that names no file) are not checked.
  std::size_t first_changed(std::span<const std::string_view> origins, std::string& why) {
    ++stamp_;
    auto& reg = file_registry::instance();
    std::string_view last;
    for (std::size_t i = 0; i < origins.size(); ++i) {
      const std::string_view o = origins[i];
      if (o.empty() || (o.data() == last.data() && o.size() == last.size())) continue;
      last = o;
      auto [it, fresh] = files_.try_emplace(o);
      known& k = it->second;
      if (k.stamp == stamp_) continue;
      k.stamp = stamp_;
      if (!k.guarded) {
        const std::uint64_t regs = reg.registrations();
        if (!fresh && k.registrations == regs) continue;  // not mapped, and nothing mapped since
        k.registrations = regs;
        // A worker whose first batch from this file comes after another worker marked it: the
        // samples were read from the marked mapping (a fresh one would be live), so they fail
        // here; before, the file counted as unmapped and the batch went out unchecked.
        switch (reg.opened_identity(o, k.opened, why)) {
          case file_registry::lookup::unknown: continue;
          case file_registry::lookup::marked:
            k.registrations = 0;  // looked up again next time: a fresh mapping may come
            return first_of(origins, o, i);
          case file_registry::lookup::live: k.guarded = true; break;
        }
      }
      path_.assign(o);
      struct stat st {};
      if (::stat(path_.c_str(), &st) != 0) continue;  // removed: the mapping still holds it whole
      const file_identity now = file_identity::of(st);
      if (now == k.opened || now.dev != k.opened.dev || now.ino != k.opened.ino) continue;
      why = reg.mark_if_changed(o, now);
      if (why.empty()) {  // every live mapping matches `now`: reopened since (lazy_open)
        k.opened = now;
        continue;
      }
      return first_of(origins, o, i);
    }
    return origins.size();
  }

 private:
  static std::size_t first_of(std::span<const std::string_view> origins, std::string_view o, std::size_t i) {
    std::size_t j = 0;
    while (j < i && origins[j] != o) ++j;
    return j;
  }
  struct known {
    file_identity opened;
    bool guarded = false;
    std::uint64_t registrations = 0;
    std::uint64_t stamp = 0;
  };
  std::unordered_map<std::string_view, known> files_;  // keys view the readers' paths
  std::uint64_t stamp_ = 0;
  std::string path_;
};

}  // namespace detail

// Brackets the reading of one sample. `suspect()` (two relaxed loads) says whether the sample
// may hold zero pages: a guarded mapping faulted since the watch began, or some file is marked
// (the sample's may be one whose pages another thread's fault replaced). `check(origin)` then
// throws the format_error for the sample's file if it was hit.
class fault_watch {
 public:
  fault_watch() noexcept : start_(detail::file_registry::instance().faults()) {}
  [[nodiscard]] bool suspect() const noexcept {
    const auto& r = detail::file_registry::instance();
    return r.faults() != start_ || r.flagged() != 0;
  }
  // `origin`: the sample's file (empty when unknown: any fault in the window then counts).
  void check(std::string_view origin = {}) const {
    auto& r = detail::file_registry::instance();
    if (r.faults() != start_) r.check_faults_since(start_, origin);
    if (!origin.empty()) r.check_source(origin);
  }

 private:
  std::uint64_t start_;
};

// Marks every mapped file whose identity changed since it was opened; the loader calls it at the
// start of each epoch. Returns the number of files newly marked.
inline std::size_t check_all_files() { return detail::file_registry::instance().check_all(); }

}  // namespace sluice
