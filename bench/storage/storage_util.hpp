// bench/storage/storage_util.hpp — what the storage benchmarks share: a memory cgroup the process
// moves itself into (the page-cache budget), dropping a file from the page cache, measuring how
// much of it is resident, fault counters, tables written as .dat (gnuplot) and .csv, and the
// gnuplot call (skipped with a message when gnuplot is absent, as in examples/demo).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace storage_bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline bool write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

inline std::string loadavg() {
  std::string s = read_text("/proc/loadavg");
  std::istringstream in(s);
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

inline std::string fs_type(const std::string& path) {
  std::string cmd = "df -T '" + path + "' 2>/dev/null | awk 'NR==2{print $2}'";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[64];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.empty() ? "?" : out;
}

// Writes `bytes` of pseudo-random data (xorshift; not compressible, not all zero).
inline void write_random_file(const std::string& path, std::uint64_t bytes, std::uint64_t seed) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  std::vector<std::uint64_t> buf((std::size_t{4} << 20) / 8);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::uint64_t done = 0; done < bytes;) {
    for (auto& w : buf) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; w = x; }
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, buf.size() * 8));
    if (::write(fd, buf.data(), n) != static_cast<ssize_t>(n)) {
      ::close(fd);
      throw std::runtime_error("cannot write " + path);
    }
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
}

// "Cold" in these benchmarks: the file's pages are written back (fdatasync) and then dropped from
// the page cache with posix_fadvise(POSIX_FADV_DONTNEED). Nothing else is dropped (not the
// inode/dentry caches, not the disk's or the hypervisor's caches).
inline void evict(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Fraction of the range's pages in the page cache (mincore over a mapping made for the purpose;
// mapping and asking touch no page).
inline double resident_fraction(const void* addr, std::size_t bytes) {
  if (bytes == 0) return 0;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t pages = (bytes + page - 1) / page;
  std::vector<unsigned char> v(pages);
  if (::mincore(const_cast<void*>(addr), bytes, v.data()) != 0) return -1;
  std::size_t r = 0;
  for (unsigned char c : v) r += c & 1;
  return static_cast<double>(r) / static_cast<double>(pages);
}

inline double resident_fraction(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  ::fstat(fd, &st);
  double f = 0;
  if (st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      f = resident_fraction(p, static_cast<std::size_t>(st.st_size));
      ::munmap(p, static_cast<std::size_t>(st.st_size));
    }
  }
  ::close(fd);
  return f;
}

struct faults {
  long major = 0, minor = 0;
  static faults now() {
    rusage u {};
    ::getrusage(RUSAGE_SELF, &u);
    return {u.ru_majflt, u.ru_minflt};
  }
};

// A child memory cgroup of the one this process is in, with a hard limit (v2 memory.max or v1
// memory.limit_in_bytes), and the process moved into it: from then on the page cache it brings
// in is charged there and reclaimed when the limit is reached. Page cache charged before the move
// stays charged to the parent, so callers evict their files after entering. Destruction moves
// the process back and removes the child (v1 reparents the child's charges).
class memory_cgroup {
 public:
  static std::optional<memory_cgroup> create(std::uint64_t limit, std::string& why) {
    const std::string self = read_text("/proc/self/cgroup");
    std::istringstream in(self);
    std::string line, v1_path, v2_path;
    bool have_v2 = false;
    while (std::getline(in, line)) {
      const auto a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (line.substr(0, a) == "0" && ctl.empty()) { have_v2 = true; v2_path = path; }
      std::istringstream cs(ctl);
      for (std::string c; std::getline(cs, c, ',');)
        if (c == "memory") v1_path = path;
    }
    memory_cgroup g;
    if (!v1_path.empty() && std::filesystem::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
      g.parent_ = "/sys/fs/cgroup/memory" + v1_path;
      g.v2_ = false;
    } else if (have_v2 && read_text("/sys/fs/cgroup/cgroup.controllers").find("memory") != std::string::npos) {
      g.parent_ = "/sys/fs/cgroup" + v2_path;
      g.v2_ = true;
    } else {
      why = "no memory controller: neither a cgroup v1 memory hierarchy nor cgroup v2 with memory";
      return std::nullopt;
    }
    while (!g.parent_.empty() && g.parent_.back() == '/') g.parent_.pop_back();
    g.dir_ = g.parent_ + "/sluice-storage-bench-" + std::to_string(::getpid());
    if (::mkdir(g.dir_.c_str(), 0755) != 0) {
      why = "cannot create " + g.dir_ + ": " + std::strerror(errno);
      return std::nullopt;
    }
    g.made_ = true;
    if (!g.set_limit(limit)) {
      why = "cannot write the memory limit in " + g.dir_ + ": " + std::strerror(errno);
      return std::nullopt;  // the destructor removes the child
    }
    if (!write_text(g.dir_ + "/cgroup.procs", std::to_string(::getpid()))) {
      why = "cannot move the process into " + g.dir_ + ": " + std::strerror(errno);
      return std::nullopt;
    }
    g.inside_ = true;
    return g;
  }
  memory_cgroup(memory_cgroup&& o) noexcept
      : parent_(std::move(o.parent_)), dir_(std::move(o.dir_)), v2_(o.v2_), made_(std::exchange(o.made_, false)),
        inside_(std::exchange(o.inside_, false)) {}
  memory_cgroup& operator=(memory_cgroup&&) = delete;
  ~memory_cgroup() {
    if (inside_) write_text(parent_ + "/cgroup.procs", std::to_string(::getpid()));
    if (made_) ::rmdir(dir_.c_str());
  }
  bool set_limit(std::uint64_t bytes) const {
    return write_text(dir_ + (v2_ ? "/memory.max" : "/memory.limit_in_bytes"), std::to_string(bytes));
  }
  [[nodiscard]] std::uint64_t usage() const {
    return std::strtoull(read_text(dir_ + (v2_ ? "/memory.current" : "/memory.usage_in_bytes")).c_str(), nullptr, 10);
  }
  // Page-cache bytes charged to the group (v1 "cache", v2 "file" in memory.stat).
  [[nodiscard]] std::uint64_t file_bytes() const {
    std::istringstream in(read_text(dir_ + "/memory.stat"));
    std::string k;
    std::uint64_t v = 0;
    while (in >> k >> v)
      if (k == (v2_ ? "file" : "cache")) return v;
    return 0;
  }
  [[nodiscard]] std::string describe() const {
    return std::string(v2_ ? "cgroup v2 memory.max" : "cgroup v1 memory.limit_in_bytes") + " in " + dir_;
  }

 private:
  memory_cgroup() = default;
  std::string parent_, dir_;
  bool v2_ = false, made_ = false, inside_ = false;
};

// A table written twice: whitespace-separated with a '#' header (gnuplot's .dat) and as .csv.
struct table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  template <class... T>
  void add(const T&... v) {
    std::vector<std::string> r;
    (r.push_back(cell(v)), ...);
    rows.push_back(std::move(r));
  }
  void write(const std::string& stem, const std::string& comment) const {
    std::ofstream d(stem + ".dat"), c(stem + ".csv");
    std::istringstream in(comment);
    for (std::string l; std::getline(in, l);) d << "# " << l << "\n";
    d << "#";
    for (std::size_t i = 0; i < columns.size(); ++i) {
      d << " " << columns[i];
      c << (i ? "," : "") << columns[i];
    }
    d << "\n";
    c << "\n";
    std::string last_group;
    for (const auto& r : rows) {
      // gnuplot indexes data blocks split by two blank lines; the first column names the block.
      if (!last_group.empty() && r[0] != last_group) d << "\n\n";
      last_group = r[0];
      for (std::size_t i = 0; i < r.size(); ++i) {
        d << (i ? " " : "") << r[i];
        c << (i ? "," : "") << r[i];
      }
      d << "\n";
      c << "\n";
    }
  }

 private:
  static std::string cell(const std::string& s) { return s; }
  static std::string cell(const char* s) { return s; }
  template <class T>
  static std::string cell(const T& v) {
    std::ostringstream o;
    o.precision(6);
    o << v;
    return o.str();
  }
};

inline void run_gnuplot(const std::string& out, const std::string& script_name, const std::string& script) {
  {
    std::ofstream g(out + "/" + script_name);
    g << script;
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("gnuplot not found: %s's PNG skipped (install gnuplot-nox; the data is in the .dat files)\n",
                script_name.c_str());
    return;
  }
  const std::string cmd = "cd '" + out + "' && gnuplot " + script_name;
  if (std::system(cmd.c_str()) != 0) std::printf("gnuplot failed on %s/%s\n", out.c_str(), script_name.c_str());
}

}  // namespace storage_bench
