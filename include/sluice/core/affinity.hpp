// sluice/core/affinity.hpp — pinning threads to CPUs (the seed's principle 3: a decode worker
// that stays on one core keeps its caches and its TurboJPEG state warm, and does not fight the
// trainer's thread for a core).
//
// Off by default. loader_options::cpus = {2, 3} pins worker w to cpus[w % cpus.size()] when the
// worker starts; sluice::pin_current_thread(cpu) pins the calling thread (the trainer's). A thread
// inherits its creator's CPU set, so every thread sluice starts (workers without `cpus`, the slot
// and page warmers, lazy opens, split decoders) takes the process's unpinned set first: a trainer
// pinned to one CPU before its first epoch would otherwise confine its whole loader to that CPU.
// The unpinned set is the calling thread's the first time sluice looks (a loader built, a CPU
// checked or pinned), which is before pin_current_thread narrows it. A CPU
// outside the process's allowed set (sched_getaffinity: taskset, cgroups, a container's quota) is
// a usage_error naming it and the allowed set, raised when the loader is built, not a silent
// no-op. With one NUMA node (this is the common case on a single socket) there is nothing to
// place; pinned host buffers are allocated by the thread that first fills them, so a pinned
// worker's slots land on its own node under Linux's first-touch policy.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice {

namespace detail {
// The CPU set of an unpinned thread of this process (see the header).
inline const cpu_set_t& unpinned_set() noexcept {
  static const cpu_set_t set = [] {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (::sched_getaffinity(0, sizeof s, &s) != 0)
      for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &s);
    return s;
  }();
  return set;
}
// Gives the calling thread (one sluice started) the unpinned set, if it inherited another.
inline void unpin_current_thread() noexcept {
  const cpu_set_t& want = unpinned_set();
  cpu_set_t now;
  CPU_ZERO(&now);
  if (::pthread_getaffinity_np(::pthread_self(), sizeof now, &now) == 0 && CPU_EQUAL(&now, &want)) return;
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof want, &want);
}
}  // namespace detail

// The CPUs this process may run on, in increasing order (the unpinned set: a thread pinned with
// pin_current_thread does not narrow it).
inline std::vector<int> allowed_cpus() {
  const cpu_set_t& set = detail::unpinned_set();
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

namespace detail {
inline std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string s = "{";
  for (std::size_t i = 0; i < cpus.size(); ++i) s += (i ? ", " : "") + std::to_string(cpus[i]);
  return s + "}";
}
// Throws usage_error unless every CPU in `cpus` is one this process may run on.
inline void check_cpus(const std::vector<int>& cpus, const char* what) {
  if (cpus.empty()) return;
  const auto allowed = allowed_cpus();
  for (int c : cpus) {
    bool ok = c >= 0 && c < CPU_SETSIZE;
    if (ok) {
      ok = false;
      for (int a : allowed) ok = ok || a == c;
    }
    if (!ok)
      throw usage_error(std::string("sluice: ") + what + ": CPU " + std::to_string(c) +
                        " is not one this process may run on; allowed: " + cpu_list_text(allowed));
  }
}
}  // namespace detail

namespace detail {
// Pins the calling thread to `cpu` (already checked); returns pthread_setaffinity_np's result.
inline int set_thread_cpu(int cpu) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}
// Names the calling thread, a thread sluice started, so that top -H, perf, gdb, py-spy and
// /proc/PID/task/TID/comm tell its threads apart ("sluice-worker0", "sluice-pagewarm", ...).
// Linux keeps the first 15 bytes.
inline void name_current_thread(const std::string& name) noexcept {
  char buf[16] = {};
  name.copy(buf, name.size() < 15 ? name.size() : 15);
  (void)::pthread_setname_np(::pthread_self(), buf);
}

// The process that started an object's threads. fork() copies the object into the child but none
// of its threads: there, joining one waits forever, and destroying a condition variable one of
// them was waiting on does too (glibc waits for every waiter it counted). An object whose threads
// another process started refuses further use and is left in memory, never joined or destroyed.
class thread_owner {
 public:
  // Called where the threads start (any number of times; the first call in a process counts).
  void started() noexcept {
    const pid_t self = ::getpid();
    if (pid_.load(std::memory_order_relaxed) != self) pid_.store(self, std::memory_order_relaxed);
  }
  // Whether threads were started, by a process other than this one (a forked child's view).
  [[nodiscard]] bool forked_away() const noexcept {
    const pid_t p = pid_.load(std::memory_order_relaxed);
    return p != 0 && p != ::getpid();
  }
  [[nodiscard]] pid_t pid() const noexcept { return pid_.load(std::memory_order_relaxed); }
  // The usage_error a forked child gets for using `what`.
  [[nodiscard]] usage_error forked_error(const std::string& what) const {
    return usage_error("sluice: " + what + " runs threads that process " + std::to_string(pid()) +
                       " started; this process (" + std::to_string(::getpid()) +
                       ", forked from it) has none of them. Build a new one after the fork (or start processes with "
                       "'spawn'); letting this one go here is safe");
  }

 private:
  std::atomic<pid_t> pid_{0};
};
}  // namespace detail

// Pins the calling thread to `cpu`. usage_error if the CPU is not allowed; io-like failures of
// the system call are reported as sluice::error with the errno text.
inline void pin_current_thread(int cpu) {
  detail::check_cpus({cpu}, "pin_current_thread");
  if (const int rc = detail::set_thread_cpu(cpu); rc != 0)
    throw error(std::string("sluice: pinning a thread to CPU ") + std::to_string(cpu) + ": " + std::strerror(rc));
}

}  // namespace sluice
