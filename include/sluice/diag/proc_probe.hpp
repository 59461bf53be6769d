// sluice/diag/proc_probe.hpp — what the process costs the machine: resident memory and page faults.
//
// A loader that leaks, or whose page cache is evicted between epochs, shows it here before it shows
// anywhere else. `read_process_memory()` takes one sample:
//   rss_bytes, pss_bytes   from /proc/self/smaps_rollup (Linux >= 4.14), else summed over
//                          /proc/self/smaps; PSS divides shared pages among their users, so worker
//                          processes sharing a mapping are not counted twice.
//   shmem_bytes            resident shared memory (RssShmem in /proc/self/status): /dev/shm
//                          segments, memfd, shared anonymous mappings.
//   minor/major_faults     getrusage(RUSAGE_SELF): a major fault went to the disk.
// Fields that cannot be read (not Linux, procfs hidden) are 0 and `from_procfs` is false.
// `epoch_memory_log` records one sample per epoch and answers "is RSS growing across epochs?" and
// "how many faults did each epoch take?".
//
//   sluice::diag::epoch_memory_log mem;
//   for (epoch...) { train(); mem.record(epoch); }
//   mem.rss_growth_bytes_per_epoch();   // least-squares slope over the epochs recorded
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::diag {

struct process_memory {
  std::uint64_t rss_bytes = 0;
  std::uint64_t pss_bytes = 0;
  std::uint64_t shmem_bytes = 0;
  std::uint64_t minor_faults = 0;
  std::uint64_t major_faults = 0;
  bool from_procfs = false;
};

namespace detail {
// Parses "Key:   1234 kB" lines; adds each wanted key's value in bytes.
inline bool sum_kb_fields(const char* path, std::string_view key, std::uint64_t& out) {
  std::ifstream f(path);
  if (!f) return false;
  std::string line;
  bool found = false;
  while (std::getline(f, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':') {
      try {
        out += std::stoull(line.substr(key.size() + 1)) * 1024;
        found = true;
      } catch (const std::exception&) {  // a line we do not understand is skipped
      }
    }
  }
  return found;
}
}  // namespace detail

inline process_memory read_process_memory() {
  process_memory m;
  std::uint64_t rss = 0, pss = 0;
  if (detail::sum_kb_fields("/proc/self/smaps_rollup", "Rss", rss) &&
      detail::sum_kb_fields("/proc/self/smaps_rollup", "Pss", pss)) {
    m.from_procfs = true;
  } else {
    rss = pss = 0;
    m.from_procfs = detail::sum_kb_fields("/proc/self/smaps", "Rss", rss) &&
                    detail::sum_kb_fields("/proc/self/smaps", "Pss", pss);
  }
  m.rss_bytes = rss;
  m.pss_bytes = pss;
  std::uint64_t shmem = 0;
  if (detail::sum_kb_fields("/proc/self/status", "RssShmem", shmem)) m.shmem_bytes = shmem;
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    m.minor_faults = static_cast<std::uint64_t>(ru.ru_minflt);
    m.major_faults = static_cast<std::uint64_t>(ru.ru_majflt);
  }
  return m;
}

// One sample per epoch, with the faults taken during that epoch.
struct epoch_memory {
  std::uint64_t epoch = 0;
  process_memory at_end;
  std::uint64_t minor_faults_in_epoch = 0;
  std::uint64_t major_faults_in_epoch = 0;
};

class epoch_memory_log {
 public:
  epoch_memory_log() : last_(read_process_memory()) {}

  // Call at the end of each epoch.
  const epoch_memory& record(std::uint64_t epoch) { return record(epoch, read_process_memory()); }
  // For tests and replays: record a given sample.
  const epoch_memory& record(std::uint64_t epoch, const process_memory& m) {
    epoch_memory e{epoch, m, m.minor_faults - std::min(m.minor_faults, last_.minor_faults),
                   m.major_faults - std::min(m.major_faults, last_.major_faults)};
    last_ = m;
    epochs_.push_back(e);
    return epochs_.back();
  }
  [[nodiscard]] const std::vector<epoch_memory>& epochs() const noexcept { return epochs_; }

  // Least-squares slope of RSS over the recorded epochs (bytes per epoch); 0 with < 2 epochs.
  [[nodiscard]] double rss_growth_bytes_per_epoch() const noexcept {
    const std::size_t n = epochs_.size();
    if (n < 2) return 0;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double x = static_cast<double>(i), y = static_cast<double>(epochs_[i].at_end.rss_bytes);
      sx += x; sy += y; sxx += x * x; sxy += x * y;
    }
    const double dn = static_cast<double>(n);
    return (dn * sxy - sx * sy) / (dn * sxx - sx * sx);
  }

 private:
  process_memory last_;
  std::vector<epoch_memory> epochs_;
};

}  // namespace sluice::diag
