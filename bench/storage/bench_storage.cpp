// bench/storage/bench_storage.cpp — how the storage layout decides what a training epoch costs.
//
//   sluice_bench_storage [files|chunks|knee|all] [--quick] [--out DIR] [--dir DIR] [--xfs auto|off]
//                        [--no-plot]
//
// Three measurements, each writing NAME.dat / NAME.csv and NAME.png (gnuplot, pngcairo) into
// --out, and its temporary data under --dir (removed at the end of each part):
//
//  files   many small files vs one sluice shard. The same records (sample sizes 4 KiB .. 1 MiB)
//          as one file each (open, fstat, read, close a sample) and as one shard (io::shard_reader,
//          mmap, a memcpy of each record's view), read once each in a shuffled order
//          (sample::shuffle), with the page cache warm and cold. "Cold" means: every file and the
//          shard written back and dropped from the page cache with posix_fadvise(DONTNEED) just
//          before the pass (the dentry/inode caches and the disk's own caches are not dropped).
//          Also the cost of writing them: files created (+ one syncfs) vs shard_writer (fsync).
//          On ext4 under --dir, and on XFS when --xfs auto can make one (mkfs.xfs on a file-backed
//          loop device with direct I/O, so the backing file adds no page cache of its own).
//  chunks  chunk size vs page-cache hit rate and throughput under a memory limit. One file of
//          16 KiB records; a record is read from the cache when all its pages are resident
//          (mincore, checked before the read: a hit), otherwise its whole chunk is read with one
//          pread (the unit of I/O; POSIX_FADV_RANDOM, so the kernel adds no read-ahead). The
//          process runs in a memory cgroup smaller than the file, so the kernel's own reclaim
//          decides what stays. Two orders: uniform random (sample::shuffle) and chunk-local
//          (sample::block_shuffle with blocks of one chunk).
//  knee    random access through an io::mapped_file whose size sweeps past the cgroup's memory
//          limit: 4 KiB reads (and 64 KiB with MADV_RANDOM) at random offsets, per hint: MADV_NORMAL,
//          MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MAP_POPULATE, sluice's default background
//          warming, MADV_HUGEPAGE. Two phases: the first seconds from cold (right after open), and
//          the steady state after one sequential read() of the file has filled the page cache.
//
// Nothing here is a test: the figures depend on the machine, its load and its disk.
// Measured figures, plots and what they mean: bench/storage/README.md; raw output in
// bench/results/storage/.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "sluice/io/mapped_file.hpp"
#include "sluice/io/page_warmer.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/sample/shuffle.hpp"
#include "storage_util.hpp"

namespace fs = std::filesystem;
using namespace storage_bench;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;

struct options {
  std::string what = "all";
  std::string out = "storage-out";
  std::string dir = "/tmp/sluice-storage-bench";
  std::string xfs = "auto";
  bool quick = false;
  bool plot = true;
};

[[noreturn]] void usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: sluice_bench_storage [files|chunks|knee|all] [--quick] [--out DIR] [--dir DIR]\n"
               "                            [--xfs auto|off] [--no-plot]\n"
               "  files   many small files vs one sluice shard, warm and cold page cache (ext4, XFS)\n"
               "  chunks  chunk size vs page-cache hit rate and throughput in a memory cgroup\n"
               "  knee    random mmap access as the mapping grows past the cgroup's memory limit\n"
               "  --quick small sizes and short runs (a few minutes in all)\n"
               "  --out   where the .dat/.csv/.png go (default storage-out)\n"
               "  --dir   where the temporary data goes (default /tmp/sluice-storage-bench; removed)\n"
               "  --xfs   auto: also run 'files' on XFS on a loop device when root and mkfs.xfs allow\n");
  std::exit(rc);
}

std::string human(std::uint64_t b) {
  char s[32];
  if (b >= MiB && b % MiB == 0) std::snprintf(s, sizeof s, "%" PRIu64 "MiB", b / MiB);
  else if (b >= KiB && b % KiB == 0) std::snprintf(s, sizeof s, "%" PRIu64 "KiB", b / KiB);
  else std::snprintf(s, sizeof s, "%" PRIu64 "B", b);
  return s;
}

std::uint64_t xorshift(std::uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

volatile std::uint64_t g_sink = 0;  // keeps the reads from being optimised away

// ---------------------------------------------------------------------------------------------
// files: many small files vs one shard

// An XFS file system on a file-backed loop device (direct I/O to the backing file), mounted for
// the lifetime of this object. Needs root, losetup and mkfs.xfs.
class xfs_mount {
 public:
  static std::unique_ptr<xfs_mount> make(const std::string& base, std::uint64_t bytes, std::string& why) {
    if (::geteuid() != 0) { why = "not root: cannot set up a loop device"; return nullptr; }
    if (std::system("command -v mkfs.xfs >/dev/null 2>&1 && command -v losetup >/dev/null 2>&1") != 0) {
      why = "mkfs.xfs or losetup not found (apt-get install xfsprogs)";
      return nullptr;
    }
    auto m = std::unique_ptr<xfs_mount>(new xfs_mount);
    m->image_ = base + "/xfs.img";
    m->mnt_ = base + "/xfs-mnt";
    fs::create_directories(m->mnt_);
    // A sparse image: only what XFS writes takes disk space.
    const int fd = ::open(m->image_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const bool sized = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    if (fd >= 0) ::close(fd);
    if (!sized) { why = "cannot create " + m->image_; return nullptr; }
    if (std::system(("mkfs.xfs -q -f '" + m->image_ + "' >/dev/null 2>&1").c_str()) != 0) { why = "mkfs.xfs failed"; return nullptr; }
    FILE* p = ::popen(("losetup --direct-io=on -f --show '" + m->image_ + "' 2>&1").c_str(), "r");
    char buf[256] = {};
    if (p) { if (!std::fgets(buf, sizeof buf, p)) buf[0] = 0; ::pclose(p); }
    std::string dev = buf;
    while (!dev.empty() && (dev.back() == '\n' || dev.back() == ' ')) dev.pop_back();
    if (dev.rfind("/dev/loop", 0) != 0) { why = "losetup refused (loop devices not allowed here?): " + dev; return nullptr; }
    m->dev_ = dev;
    if (std::system(("mount -t xfs '" + dev + "' '" + m->mnt_ + "' 2>/dev/null").c_str()) != 0) {
      why = "mount of " + dev + " failed";
      return nullptr;
    }
    m->mounted_ = true;
    return m;
  }
  ~xfs_mount() {
    if (mounted_) { if (std::system(("umount '" + mnt_ + "'").c_str()) != 0) std::fprintf(stderr, "umount %s failed\n", mnt_.c_str()); }
    if (!dev_.empty()) { if (std::system(("losetup -d '" + dev_ + "'").c_str()) != 0) std::fprintf(stderr, "losetup -d %s failed\n", dev_.c_str()); }
    std::error_code ec;
    fs::remove(image_, ec);
    fs::remove(mnt_, ec);
  }
  [[nodiscard]] const std::string& dir() const { return mnt_; }
  [[nodiscard]] const std::string& device() const { return dev_; }

 private:
  xfs_mount() = default;
  std::string image_, mnt_, dev_;
  bool mounted_ = false;
};

struct files_config {
  std::vector<std::uint64_t> sizes;
  std::uint64_t total;       // bytes of samples per size, before the file-count clamp
  std::uint64_t max_files, min_files;
};

double pass_files(const std::vector<std::string>& paths, const sluice::sample::shuffle& order, std::uint64_t epoch,
                  std::vector<std::byte>& buf) {
  const double t0 = now_s();
  std::uint64_t sum = 0;
  for (std::uint64_t pos = 0; pos < paths.size(); ++pos) {
    const auto& p = paths[order.at(epoch, pos)];
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + p);
    struct stat st {};
    ::fstat(fd, &st);
    std::size_t got = 0;
    const auto want = static_cast<std::size_t>(st.st_size);
    while (got < want) {
      const ssize_t n = ::read(fd, buf.data() + got, want - got);
      if (n <= 0) throw std::runtime_error("short read " + p);
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    sum += static_cast<std::uint64_t>(buf[0]) + static_cast<std::uint64_t>(buf[want - 1]);
  }
  g_sink = g_sink + sum;
  return now_s() - t0;
}

double pass_shard(const std::string& path, sluice::io::shard_options opt, const sluice::sample::shuffle& order,
                  std::uint64_t epoch, std::vector<std::byte>& buf) {
  const double t0 = now_s();  // the reader's open (header + index) is part of the pass
  sluice::io::shard_reader r(path, opt);
  std::uint64_t sum = 0;
  for (std::uint64_t pos = 0; pos < r.size(); ++pos) {
    const auto rec = r.record(order.at(epoch, pos));
    std::memcpy(buf.data(), rec.data(), rec.size());  // what collate does with the view
    sum += static_cast<std::uint64_t>(buf[0]) + static_cast<std::uint64_t>(buf[rec.size() - 1]);
  }
  g_sink = g_sink + sum;
  return now_s() - t0;
}

void run_files_on(const std::string& fs_name, const std::string& base, const files_config& cfg, table& t) {
  for (const std::uint64_t size : cfg.sizes) {
    const std::uint64_t n = std::clamp(cfg.total / size, cfg.min_files, cfg.max_files);
    const std::string dir = base + "/files-" + human(size);
    const std::string shard = base + "/samples.sluice";
    fs::create_directories(dir);
    std::vector<std::string> paths(n);
    std::vector<std::byte> sample(size), buf(size);
    std::uint64_t x = 0x1234 + size;
    // Files: create + write + close each (the metadata cost), then one syncfs for their data.
    const double c0 = now_s();
    for (std::uint64_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < size; k += 8) { const std::uint64_t w = xorshift(x); std::memcpy(sample.data() + k, &w, 8); }
      char name[32];
      std::snprintf(name, sizeof name, "/%06" PRIu64 ".bin", i);
      paths[i] = dir + name;
      int fd = ::open(paths[i].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::write(fd, sample.data(), size) != static_cast<ssize_t>(size)) throw std::runtime_error("cannot write " + paths[i]);
      ::close(fd);
    }
    const double c1 = now_s();
    { int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); ::syncfs(dfd); ::close(dfd); }
    const double c2 = now_s();
    // The same bytes as one shard (checksums on, as shard_writer's default; finish() fsyncs).
    x = 0x1234 + size;
    const double s0 = now_s();
    {
      sluice::io::shard_writer w(shard);
      for (std::uint64_t i = 0; i < n; ++i) {
        for (std::size_t k = 0; k < size; k += 8) { const std::uint64_t v = xorshift(x); std::memcpy(sample.data() + k, &v, 8); }
        w.add(sample, static_cast<std::int64_t>(i % 10));
      }
      w.finish();
    }
    const double s1 = now_s();
    const sluice::sample::shuffle order(n, {.seed = 7});
    const sluice::io::shard_options plain{.verify = false, .map = {.advice = sluice::io::access::random, .populate = sluice::io::populate_mode::none}};
    const sluice::io::shard_options normal{.verify = false, .map = {.advice = sluice::io::access::normal, .populate = sluice::io::populate_mode::none}};
    const sluice::io::shard_options defaults{.verify = false};  // access::automatic + background warming
    // Warm: one untimed pass each, then the timed pass in another order.
    pass_files(paths, order, 0, buf);
    const double fw = pass_files(paths, order, 1, buf);
    pass_shard(shard, plain, order, 0, buf);
    const double sw = pass_shard(shard, plain, order, 1, buf);
    // Cold: drop everything, then one pass.
    auto drop_all = [&] {
      for (const auto& p : paths) evict(p);
      evict(shard);
      double r = resident_fraction(shard);
      for (std::size_t i = 0; i < paths.size(); i += std::max<std::size_t>(1, paths.size() / 16)) r = std::max(r, resident_fraction(paths[i]));
      return r;
    };
    double left = drop_all();
    const double fc = pass_files(paths, order, 2, buf);
    left = std::max(left, drop_all());
    const double sc = pass_shard(shard, plain, order, 3, buf);
    left = std::max(left, drop_all());
    const double sn = pass_shard(shard, normal, order, 4, buf);
    left = std::max(left, drop_all());
    const double sd = pass_shard(shard, defaults, order, 5, buf);
    const double us = 1e6 / static_cast<double>(n);
    t.add(fs_name, size, n, (c1 - c0) * us, (c2 - c0) * us, (s1 - s0) * us, fw * us, sw * us, fc * us, sc * us, sn * us, sd * us, left);
    std::printf("  %s %8s x %6" PRIu64 ": create %.1f us/file (+sync %.1f), shard write %.1f us/rec | warm: files %.1f, shard %.1f us | "
                "cold: files %.1f, shard(random) %.1f, shard(normal) %.1f, shard(defaults) %.1f us | resident before cold <= %.3f\n",
                fs_name.c_str(), human(size).c_str(), n, (c1 - c0) * us, (c2 - c0) * us, (s1 - s0) * us, fw * us, sw * us, fc * us,
                sc * us, sn * us, sd * us, left);
    std::fflush(stdout);
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::remove(shard, ec);
  }
}

void bench_files(const options& o) {
  files_config cfg;
  if (o.quick) cfg = {{4 * KiB, 64 * KiB, 1 * MiB}, 64 * MiB, 4096, 64};
  else cfg = {{4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB}, 512 * MiB, 16384, 256};
  table t;
  t.columns = {"fs", "sample_bytes", "samples", "create_us", "create_sync_us", "shard_write_us", "files_warm_us", "shard_warm_us",
               "files_cold_us", "shard_random_cold_us", "shard_normal_cold_us", "shard_defaults_cold_us", "resident_before_cold"};
  std::printf("files: many small files vs one shard, %s of samples per size (at most %" PRIu64 " files), load %s\n",
              human(cfg.total).c_str(), cfg.max_files, loadavg().c_str());
  std::string notes;
  const std::string ext = o.dir + "/ext";
  fs::create_directories(ext);
  const std::string ext_type = fs_type(ext);
  run_files_on(ext_type, ext, cfg, t);
  fs::remove_all(ext);
  if (o.xfs != "off") {
    std::string why;
    auto x = xfs_mount::make(o.dir, 2 * cfg.total + 512 * MiB, why);
    if (x) {
      std::printf("  XFS on %s (file-backed loop device, direct I/O), mounted at %s\n", x->device().c_str(), x->dir().c_str());
      run_files_on("xfs", x->dir(), cfg, t);
      notes = "xfs: mkfs.xfs on a file-backed loop device (losetup --direct-io=on) over " + ext_type + "\n";
    } else {
      std::printf("  XFS skipped: %s\n", why.c_str());
      notes = "xfs skipped: " + why + "\n";
    }
  }
  t.write(o.out + "/files",
          "many small files vs one sluice shard; per-sample microseconds (wall), one pass in a shuffled order\n"
          "cold = posix_fadvise(DONTNEED) on every file and the shard before the pass; load " + loadavg() + "\n" + notes);
  if (!o.plot) return;
  const bool has_xfs = std::any_of(t.rows.begin(), t.rows.end(), [](const auto& r) { return r[0] == "xfs"; });
  std::ostringstream g;
  g << "set terminal pngcairo size 1500,640 font ',10'\nset output 'files.png'\n"
       "set multiplot layout 1,2 title 'Many small files vs one sluice shard (" << ext_type << (has_xfs ? " solid, XFS dashed" : "")
    << "), one shuffled pass; cold = fadvise(DONTNEED) first'\n"
       "set logscale xy\nset grid\nset xlabel 'sample size (KiB)'\nset key below font ',9' maxrows 4\n"
       "set title 'read throughput'\nset ylabel 'MB/s of samples'\n";
  auto series = [&](int block, const char* dash) {
    std::ostringstream s;
    s << "'files.dat' index " << block << " using ($2/1024):($2/$7) with linespoints lw 2 lc rgb '#1f77b4' " << dash << " title 'files, warm" << (block ? " (XFS)" : "") << "', "
      << "'' index " << block << " using ($2/1024):($2/$8) with linespoints lw 2 lc rgb '#ff7f0e' " << dash << " title 'shard, warm" << (block ? " (XFS)" : "") << "', "
      << "'' index " << block << " using ($2/1024):($2/$9) with linespoints lw 2 lc rgb '#2ca02c' " << dash << " title 'files, cold" << (block ? " (XFS)" : "") << "', "
      << "'' index " << block << " using ($2/1024):($2/$10) with linespoints lw 2 lc rgb '#d62728' " << dash << " title 'shard MADV\\_RANDOM, cold" << (block ? " (XFS)" : "") << "', "
      << "'' index " << block << " using ($2/1024):($2/$11) with linespoints lw 2 lc rgb '#9467bd' " << dash << " title 'shard MADV\\_NORMAL, cold" << (block ? " (XFS)" : "") << "', "
      << "'' index " << block << " using ($2/1024):($2/$12) with linespoints lw 2 lc rgb '#8c564b' " << dash << " title 'shard reader defaults, cold" << (block ? " (XFS)" : "") << "'";
    return s.str();
  };
  g << "plot " << series(0, "dt 1") << (has_xfs ? ", " + series(1, "dt 2") : "") << "\n";
  g << "set title 'writing the samples'\nset ylabel 'microseconds per sample'\n"
       "plot 'files.dat' index 0 using ($2/1024):4 with linespoints lw 2 lc rgb '#1f77b4' title 'files: create+write+close', "
       "'' index 0 using ($2/1024):5 with linespoints lw 2 lc rgb '#17becf' title 'files + syncfs', "
       "'' index 0 using ($2/1024):6 with linespoints lw 2 lc rgb '#ff7f0e' title 'shard\\_writer (+fsync)'";
  if (has_xfs)
    g << ", 'files.dat' index 1 using ($2/1024):4 with linespoints lw 2 dt 2 lc rgb '#1f77b4' title 'files (XFS)', "
         "'' index 1 using ($2/1024):5 with linespoints lw 2 dt 2 lc rgb '#17becf' title 'files + syncfs (XFS)', "
         "'' index 1 using ($2/1024):6 with linespoints lw 2 dt 2 lc rgb '#ff7f0e' title 'shard (XFS)'";
  g << "\nunset multiplot\n";
  run_gnuplot(o.out, "files.gp", g.str());
}

// ---------------------------------------------------------------------------------------------
// chunks: chunk size vs hit rate under a memory limit

struct chunk_result {
  std::uint64_t samples = 0, hits = 0, bytes_read = 0;
  double seconds = 0;
};

template <class Sampler>
chunk_result run_chunks(int fd, const std::byte* probe, std::uint64_t n, std::uint64_t rec, std::uint64_t chunk_recs,
                        const Sampler& order, std::uint64_t& pos, double seconds, std::uint64_t stop_bytes,
                        std::vector<std::byte>& chunk_buf, std::vector<std::byte>& rec_buf) {
  chunk_result r;
  const double t0 = now_s();
  std::uint64_t sum = 0;
  for (;; ++pos) {
    if ((r.samples & 63) == 0) {
      const double t = now_s() - t0;
      if (t >= seconds || (stop_bytes && r.bytes_read >= stop_bytes)) { r.seconds = t; break; }
    }
    const std::uint64_t id = order.at(pos / n, pos % n);
    const std::uint64_t off = id * rec;
    ++r.samples;
    if (resident_fraction(probe + off, rec) >= 1.0) {
      ++r.hits;
      if (::pread(fd, rec_buf.data(), rec, static_cast<off_t>(off)) != static_cast<ssize_t>(rec)) throw std::runtime_error("pread");
      sum += static_cast<std::uint64_t>(rec_buf[0]);
    } else {
      const std::uint64_t c = id / chunk_recs;
      const std::uint64_t first = c * chunk_recs, len = (std::min(n, first + chunk_recs) - first) * rec;
      if (::pread(fd, chunk_buf.data(), len, static_cast<off_t>(first * rec)) != static_cast<ssize_t>(len)) throw std::runtime_error("pread");
      r.bytes_read += len;
      sum += static_cast<std::uint64_t>(chunk_buf[off - first * rec]);
    }
  }
  g_sink = g_sink + sum;
  return r;
}

void bench_chunks(const options& o) {
  const std::uint64_t rec = 16 * KiB;
  const std::uint64_t data = o.quick ? 256 * MiB : 1024 * MiB;
  const std::uint64_t limit = o.quick ? 128 * MiB : 512 * MiB;
  const std::vector<std::uint64_t> chunks = o.quick ? std::vector<std::uint64_t>{16 * KiB, 256 * KiB, 4 * MiB, 16 * MiB}
                                                    : std::vector<std::uint64_t>{16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 8 * MiB, 12 * MiB, 16 * MiB};
  const double measure_s = o.quick ? 2.0 : 6.0, warm_cap_s = o.quick ? 8.0 : 30.0;
  const std::uint64_t n = data / rec;
  const std::string path = o.dir + "/chunks.bin";
  std::printf("chunks: %" PRIu64 " records of %s (%s) under a %s memory limit, load %s\n", n, human(rec).c_str(), human(data).c_str(),
              human(limit).c_str(), loadavg().c_str());
  write_random_file(path, data, 3);
  std::string why;
  auto cg = memory_cgroup::create(limit, why);
  if (!cg) {
    std::printf("  chunks skipped: %s\n", why.c_str());
    fs::remove(path);
    return;
  }
  std::printf("  limit: %s\n", cg->describe().c_str());
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  auto* probe = static_cast<const std::byte*>(::mmap(nullptr, data, PROT_READ, MAP_SHARED, fd, 0));
  std::vector<std::byte> chunk_buf(chunks.back()), rec_buf(rec);
  table t;
  t.columns = {"order", "chunk_bytes", "records_per_chunk", "samples", "hit_rate", "samples_per_s", "useful_MBps", "read_MBps",
               "read_per_sample_KiB", "resident_end", "cgroup_file_MiB"};
  for (const char* order_name : {"uniform", "chunk_local"}) {
    for (const std::uint64_t chunk : chunks) {
      const std::uint64_t cr = chunk / rec;
      evict(path);
      std::uint64_t pos = 0;
      chunk_result warm, r;
      // Warm-up until the cache has been filled about twice over (or a time cap), then measure.
      if (std::string(order_name) == "uniform") {
        const sluice::sample::shuffle s(n, {.seed = 11});
        warm = run_chunks(fd, probe, n, rec, cr, s, pos, warm_cap_s, 2 * limit, chunk_buf, rec_buf);
        r = run_chunks(fd, probe, n, rec, cr, s, pos, measure_s, 0, chunk_buf, rec_buf);
      } else {
        const sluice::sample::block_shuffle s(n, {.seed = 11, .block = cr});
        warm = run_chunks(fd, probe, n, rec, cr, s, pos, warm_cap_s, 2 * limit, chunk_buf, rec_buf);
        r = run_chunks(fd, probe, n, rec, cr, s, pos, measure_s, 0, chunk_buf, rec_buf);
      }
      const double hit = static_cast<double>(r.hits) / static_cast<double>(r.samples);
      const double res = resident_fraction(probe, data);
      const double file_mib = static_cast<double>(cg->file_bytes()) / MiB;
      t.add(order_name, chunk, cr, r.samples, hit, r.samples / r.seconds, r.samples * rec / r.seconds / 1e6, r.bytes_read / r.seconds / 1e6,
            static_cast<double>(r.bytes_read) / r.samples / KiB, res, file_mib);
      std::printf("  %-11s chunk %6s (%4" PRIu64 " records): hit %.1f %%, %.0f samples/s, %.0f MB/s useful, %.0f MB/s read, "
                  "%.0f KiB read a sample, %" PRIu64 " samples (warm-up %.1f s), resident %.2f, cgroup page cache %.0f MiB\n",
                  order_name, human(chunk).c_str(), cr, 100 * hit, r.samples / r.seconds, r.samples * rec / r.seconds / 1e6,
                  r.bytes_read / r.seconds / 1e6, static_cast<double>(r.bytes_read) / r.samples / KiB, r.samples, warm.seconds, res, file_mib);
      std::fflush(stdout);
    }
  }
  ::munmap(const_cast<std::byte*>(probe), data);
  ::close(fd);
  evict(path);
  fs::remove(path);
  const std::string setup = std::to_string(n) + " records of 16 KiB (" + human(data) + ") in one file, " + cg->describe() + " = " + human(limit) +
                            "\nhit = the record's pages all resident (mincore) before the read; a miss reads its whole chunk with one pread\n"
                            "load " + loadavg();
  t.write(o.out + "/chunks", setup);
  if (!o.plot) return;
  std::ostringstream g;
  g << "set terminal pngcairo size 1500,520 font ',10'\nset output 'chunks.png'\n"
       "set multiplot layout 1,2 title 'Chunk size vs page-cache hit rate: " << human(data) << " of 16 KiB records, memory cgroup limit "
    << human(limit) << ", a miss reads its whole chunk'\n"
       "set logscale x 2\nset grid\nset xlabel 'chunk size (KiB)'\nset key bottom left\n"
       "set title 'hit rate (record resident before the read)'\nset ylabel 'hit rate (%)'\nset yrange [0:105]\n"
       "plot 'chunks.dat' index 0 using ($2/1024):($5*100) with linespoints lw 2 title 'uniform random order', "
       "'' index 1 using ($2/1024):($5*100) with linespoints lw 2 title 'chunk-local order (block\\_shuffle, block = chunk)'\n"
       "set title 'throughput'\nset ylabel 'samples/s'\nset logscale y\nset autoscale y\nset key bottom left\n"
       "plot 'chunks.dat' index 0 using ($2/1024):6 with linespoints lw 2 title 'uniform random order', "
       "'' index 1 using ($2/1024):6 with linespoints lw 2 title 'chunk-local order'\n"
       "unset multiplot\n";
  run_gnuplot(o.out, "chunks.gp", g.str());
}

// ---------------------------------------------------------------------------------------------
// knee: random mmap access as the mapping passes the memory limit

struct knee_mode {
  const char* name;
  sluice::io::map_options map;
  bool hugepage;
  std::uint64_t read_bytes;
};

struct access_result {
  std::uint64_t accesses = 0;
  double seconds = 0;
  faults f;
  std::uint64_t disk_bytes = 0;  // read_bytes of /proc/self/io: what the reads cost the block layer
};

std::uint64_t disk_read_bytes() {
  std::istringstream in(read_text("/proc/self/io"));
  std::string k;
  std::uint64_t v = 0;
  while (in >> k >> v)
    if (k == "read_bytes:") return v;
  return 0;
}

access_result random_reads(const std::byte* base, std::uint64_t size, std::uint64_t read_bytes, double seconds, std::uint64_t seed,
                           std::vector<std::byte>& buf) {
  access_result r;
  const faults f0 = faults::now();
  const std::uint64_t d0 = disk_read_bytes();
  const double t0 = now_s();
  const std::uint64_t slots = size / read_bytes;
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1, sum = 0;
  for (;;) {
    if ((r.accesses & 255) == 0) {
      const double t = now_s() - t0;
      if (t >= seconds) { r.seconds = t; break; }
    }
    const std::uint64_t off = (xorshift(x) % slots) * read_bytes;
    std::memcpy(buf.data(), base + off, read_bytes);
    sum += static_cast<std::uint64_t>(buf[0]);
    ++r.accesses;
  }
  const faults f1 = faults::now();
  r.f = {f1.major - f0.major, f1.minor - f0.minor};
  r.disk_bytes = disk_read_bytes() - d0;
  g_sink = g_sink + sum;
  return r;
}

// FilePmdMapped of the mapping at `addr` in /proc/self/smaps (kB): file pages mapped as huge pages.
long file_pmd_kb(const void* addr) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && line.rfind("FilePmdMapped:", 0) == 0) return std::strtol(line.c_str() + 14, nullptr, 10);
  }
  return -1;
}

void bench_knee(const options& o) {
  using sluice::io::access;
  using sluice::io::populate_mode;
  const std::uint64_t limit = o.quick ? 256 * MiB : 512 * MiB;
  const std::vector<double> fractions = o.quick ? std::vector<double>{2.0, 1.25, 0.9, 0.5}
                                                : std::vector<double>{3.0, 2.0, 1.5, 1.25, 1.0, 0.9, 0.75, 0.5, 0.25};
  const double cold_s = o.quick ? 1.0 : 2.0, steady_s = o.quick ? 1.0 : 2.0;
  const std::vector<knee_mode> modes = {
      {"normal", {access::normal, populate_mode::none}, false, 4 * KiB},
      {"random", {access::random, populate_mode::none}, false, 4 * KiB},
      {"sequential", {access::sequential, populate_mode::none}, false, 4 * KiB},
      {"willneed", {access::willneed, populate_mode::none}, false, 4 * KiB},
      {"populate", {access::normal, populate_mode::now}, false, 4 * KiB},
      {"background", {access::normal, populate_mode::background}, false, 4 * KiB},
      {"hugepage", {access::normal, populate_mode::none}, true, 4 * KiB},
      {"random-64k", {access::random, populate_mode::none}, false, 64 * KiB},
  };
  const std::string path = o.dir + "/knee.bin";
  const auto max_size = static_cast<std::uint64_t>(fractions.front() * static_cast<double>(limit)) / MiB * MiB;
  std::printf("knee: random reads through io::mapped_file, %s memory limit, mapping %s .. %s, load %s\n", human(limit).c_str(),
              human(static_cast<std::uint64_t>(fractions.back() * limit) / MiB * MiB).c_str(), human(max_size).c_str(), loadavg().c_str());
  write_random_file(path, max_size, 5);
  std::string why;
  auto cg = memory_cgroup::create(limit, why);
  if (!cg) {
    std::printf("  knee skipped: %s\n", why.c_str());
    fs::remove(path);
    return;
  }
  std::printf("  limit: %s\n", cg->describe().c_str());
  table t;
  t.columns = {"mode", "size_over_limit", "size_MiB", "open_s", "cold_acc_per_s", "cold_majflt_per_acc", "steady_acc_per_s",
               "steady_majflt_per_acc", "steady_minflt_per_acc", "steady_MBps", "cold_disk_KiB_per_acc", "steady_disk_KiB_per_acc", "resident_end", "file_pmd_kB", "cgroup_file_MiB"};
  std::vector<std::byte> buf(64 * KiB), rb(4 * MiB);
  std::vector<std::vector<std::string>> rows;
  for (const double frac : fractions) {
    const auto size = static_cast<std::uint64_t>(frac * static_cast<double>(limit)) / MiB * MiB;
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) throw std::runtime_error("truncate " + path);
    for (const auto& m : modes) {
      evict(path);
      const double t0 = now_s();
      sluice::io::mapped_file f(path, m.map);
      bool huge_ok = true;
      if (m.hugepage) huge_ok = ::madvise(const_cast<std::byte*>(f.data()), f.size(), MADV_HUGEPAGE) == 0;
      const double open_s = now_s() - t0;
      const access_result cold = random_reads(f.data(), f.size(), m.read_bytes, cold_s, 1, buf);
      // Steady state: one sequential read() pass fills the page cache (to the limit), then measure.
      {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        while (::read(fd, rb.data(), rb.size()) > 0) {}
        ::close(fd);
      }
      random_reads(f.data(), f.size(), m.read_bytes, 0.3, 2, buf);  // page tables for resident pages
      const access_result st = random_reads(f.data(), f.size(), m.read_bytes, steady_s, 3, buf);
      const double res = resident_fraction(f.data(), f.size());
      const long pmd = file_pmd_kb(f.data());
      const double file_mib = static_cast<double>(cg->file_bytes()) / MiB;
      const double ca = static_cast<double>(cold.accesses), sa = static_cast<double>(st.accesses);
      rows.push_back({m.name, std::to_string(frac), std::to_string(size / MiB), std::to_string(open_s), std::to_string(ca / cold.seconds),
                      std::to_string(cold.f.major / ca), std::to_string(sa / st.seconds), std::to_string(st.f.major / sa),
                      std::to_string(st.f.minor / sa), std::to_string(sa * m.read_bytes / st.seconds / 1e6),
                      std::to_string(cold.disk_bytes / ca / KiB), std::to_string(st.disk_bytes / sa / KiB), std::to_string(res),
                      std::to_string(pmd), std::to_string(file_mib)});
      std::printf("  %4.2fx (%5" PRIu64 " MiB) %-10s open %.2f s | cold %9.0f acc/s, %.3f majflt/acc | steady %9.0f acc/s, %.3f majflt/acc, "
                  "%.3f minflt/acc, %.1f KiB from disk/acc (cold %.1f) | resident %.2f, FilePmdMapped %ld kB%s, cgroup page cache %.0f MiB\n",
                  frac, size / MiB, m.name, open_s, ca / cold.seconds, cold.f.major / ca, sa / st.seconds, st.f.major / sa, st.f.minor / sa,
                  st.disk_bytes / sa / KiB, cold.disk_bytes / ca / KiB, res,
                  pmd, huge_ok ? "" : " (MADV_HUGEPAGE refused)", file_mib);
      std::fflush(stdout);
    }
  }
  evict(path);
  fs::remove(path);
  // One gnuplot block per mode, sizes ascending.
  for (const auto& m : modes) {
    std::vector<std::vector<std::string>> mine;
    for (const auto& r : rows)
      if (r[0] == m.name) mine.push_back(r);
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return std::stod(a[1]) < std::stod(b[1]); });
    for (auto& r : mine) t.rows.push_back(r);
  }
  const auto w = sluice::io::page_warm_stats();
  const std::string setup = "random reads through io::mapped_file (4 KiB, random-64k: 64 KiB) at uniform offsets; " + cg->describe() + " = " +
                            human(limit) + "\ncold: the first " + std::to_string(cold_s) + " s after open from an evicted file; steady: after one sequential "
                            "read() of the file, " + std::to_string(steady_s) + " s\nbackground warmer: " + std::to_string(w.files_queued) + " files queued, " +
                            std::to_string(w.files_too_large) + " too large, " + std::to_string(w.bytes_populated / MiB) + " MiB populated\nload " + loadavg();
  t.write(o.out + "/knee", setup);
  std::printf("  background warmer: %" PRIu64 " files queued, %" PRIu64 " too large (over half of MemAvailable), %" PRIu64 " MiB populated\n",
              w.files_queued, w.files_too_large, w.bytes_populated / MiB);
  if (!o.plot) return;
  std::ostringstream g;
  g << "set terminal pngcairo size 1600,520 font ',10'\nset output 'knee.png'\n"
       "set multiplot layout 1,3 title 'Random reads through a mapping as it grows past the memory cgroup limit (" << human(limit) << ")'\n"
       "set logscale y\nset grid\nset xlabel 'mapping size / memory limit'\nset key bottom left font ',8'\nset arrow from 1, graph 0 to 1, graph 1 nohead dt 3\n";
  auto plot = [&](int col) {
    std::ostringstream s;
    s << "plot ";
    for (std::size_t i = 0; i < modes.size(); ++i)
      s << (i ? ", " : "") << "'knee.dat' index " << i << " using 2:" << col << " with linespoints lw 2 title '" << modes[i].name << "'";
    s << "\n";
    return s.str();
  };
  g << "set title 'steady state (page cache filled first)'\nset ylabel 'reads/s (4 KiB; random-64k: 64 KiB)'\n" << plot(7);
  g << "set title 'read from disk per read, steady state (/proc/self/io)'\nset ylabel 'KiB read from disk / read'\n" << plot(12);
  g << "set title 'first " << cold_s << " s after open, from cold'\nset ylabel 'reads/s'\n" << plot(5);
  g << "unset multiplot\n";
  run_gnuplot(o.out, "knee.gp", g.str());
}

}  // namespace

int main(int argc, char** argv) try {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "files" || a == "chunks" || a == "knee" || a == "all") o.what = a;
    else if (a == "--quick") o.quick = true;
    else if (a == "--out") o.out = next();
    else if (a == "--dir") o.dir = next();
    else if (a == "--xfs") o.xfs = next();
    else if (a == "--no-plot") o.plot = false;
    else if (a == "-h" || a == "--help") usage(0);
    else usage(2);
  }
  fs::create_directories(o.out);
  o.out = fs::absolute(o.out).string();
  fs::create_directories(o.dir);
  std::printf("sluice_bench_storage %s%s: data under %s (%s), results in %s; %ld CPUs, load %s\n", o.what.c_str(), o.quick ? " --quick" : "",
              o.dir.c_str(), fs_type(o.dir).c_str(), o.out.c_str(), ::sysconf(_SC_NPROCESSORS_ONLN), loadavg().c_str());
  struct cleanup {
    std::string dir;
    ~cleanup() { std::error_code ec; fs::remove_all(dir, ec); }
  } c{o.dir};
  if (o.what == "all" || o.what == "files") bench_files(o);
  if (o.what == "all" || o.what == "chunks") bench_chunks(o);
  if (o.what == "all" || o.what == "knee") bench_knee(o);
  std::printf("done, load %s\n", loadavg().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "sluice_bench_storage: %s\n", e.what());
  return 1;
}
