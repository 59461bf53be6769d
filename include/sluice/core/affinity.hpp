// sluice/core/affinity.hpp — pinning threads to CPUs (the seed's principle 3: a decode worker
// that stays on one core keeps its caches and its TurboJPEG state warm, and does not fight the
// trainer's thread for a core).
//
// Off by default. loader_options::cpus = {2, 3} pins worker w to cpus[w % cpus.size()] when the
// worker starts; sluice::pin_current_thread(cpu) pins the calling thread (the trainer's). A CPU
// outside the process's allowed set (sched_getaffinity: taskset, cgroups, a container's quota) is
// a usage_error naming it and the allowed set, raised when the loader is built, not a silent
// no-op. With one NUMA node (this is the common case on a single socket) there is nothing to
// place; pinned host buffers are allocated by the thread that first fills them, so a pinned
// worker's slots land on its own node under Linux's first-touch policy.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice {

// The CPUs this process may run on, in increasing order.
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
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
}  // namespace detail

// Pins the calling thread to `cpu`. usage_error if the CPU is not allowed; io-like failures of
// the system call are reported as sluice::error with the errno text.
inline void pin_current_thread(int cpu) {
  detail::check_cpus({cpu}, "pin_current_thread");
  if (const int rc = detail::set_thread_cpu(cpu); rc != 0)
    throw error(std::string("sluice: pinning a thread to CPU ") + std::to_string(cpu) + ": " + std::strerror(rc));
}

}  // namespace sluice
