// sluice/policy/cache_disk.hpp — tier::disk: a cache file on local disk, for sources that are
// slow (network file systems) or expensive to decode (compressed records).
//
// The file is a ring of fixed-size chunks (`chunk` bytes each, `bytes / chunk` of them, at least
// two). Entries are appended to the current chunk; when it is full the writer moves to the next
// chunk and evicts everything that chunk held — whole-chunk FIFO eviction, so writes are large
// and sequential and eviction costs no per-entry bookkeeping on disk. An entry larger than one
// chunk is not admitted. The index lives in memory: the file is scratch space for one process,
// created (truncated) when the tier is made and removed when the last copy of the tier goes away
// (unless keep_file).
//
// Thread-safety: lookups hold a shared lock while they pread, so a chunk cannot be overwritten
// under a reader; inserts hold the exclusive lock while they pwrite. A lookup returns its own
// buffer (read from the file), so the bytes it hands out never dangle.
// Errors: open/pread/pwrite failures throw io_error naming the cache file.
//
//   auto t = sluice::tier::disk{{.path = "/local/scratch/train.cache", .bytes = 64ull << 30}};
//   auto loader = ... | sluice::cache(sluice::tiered{sluice::tier::lru{4ull << 30}, t}) | ...;
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/policy/cache.hpp"

namespace sluice::tier {

struct disk_options {
  std::string path;
  std::uint64_t bytes = 1ull << 30;
  std::uint64_t chunk = 64ull << 20;
  bool keep_file = false;
};

class disk {
 public:
  explicit disk(disk_options o) : s_(std::make_shared<state>(std::move(o))) {}

  cache_ref lookup(std::uint64_t key) {
    std::shared_lock lock(s_->mutex);
    auto it = s_->index.find(key);
    if (it == s_->index.end()) {
      s_->misses.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    const location loc = it->second;
    auto buf = std::make_shared_for_overwrite<std::byte[]>(loc.size == 0 ? 1 : loc.size);
    s_->read_at(buf.get(), loc.size, loc.chunk * s_->opt.chunk + loc.offset);
    s_->hits.fetch_add(1, std::memory_order_relaxed);
    return cache_ref{{buf.get(), loc.size}, std::shared_ptr<const void>(buf), true};
  }
  cache_ref insert(std::uint64_t key, const cache_buffer& data, std::size_t size) {
    std::unique_lock lock(s_->mutex);
    if (s_->index.contains(key) || size > s_->opt.chunk) {
      if (!s_->index.contains(key)) ++s_->rejected;
      return {};  // the caller keeps its own bytes; a disk tier never hands out its input
    }
    if (s_->offset + size > s_->opt.chunk) {
      s_->current = (s_->current + 1) % s_->chunk_keys.size();
      s_->offset = 0;
      for (auto k : s_->chunk_keys[s_->current]) {
        auto victim = s_->index.find(k);
        s_->bytes -= victim->second.size;
        s_->index.erase(victim);
        ++s_->evictions;
      }
      s_->chunk_keys[s_->current].clear();
    }
    s_->write_at(data.get(), size, s_->current * s_->opt.chunk + s_->offset);
    s_->index.emplace(key, location{s_->current, s_->offset, size});
    s_->chunk_keys[s_->current].push_back(key);
    s_->offset += size;
    s_->bytes += size;
    ++s_->inserts;
    return cache_ref{{data.get(), size}, std::shared_ptr<const void>(data), true};
  }
  [[nodiscard]] bool would_admit(std::uint64_t, std::size_t size) const noexcept {
    return size <= s_->opt.chunk;
  }
  [[nodiscard]] cache_stats stats() const {
    std::shared_lock lock(s_->mutex);
    cache_stats t;
    t.hits = s_->hits.load();
    t.misses = s_->misses.load();
    t.inserts = s_->inserts;
    t.rejected = s_->rejected;
    t.evictions = s_->evictions;
    t.bytes = s_->bytes;
    t.entries = s_->index.size();
    t.capacity_bytes = s_->chunk_keys.size() * s_->opt.chunk;
    return t;
  }
  [[nodiscard]] const std::string& path() const noexcept { return s_->opt.path; }

 private:
  struct location {
    std::uint64_t chunk, offset, size;
  };
  struct state {
    explicit state(disk_options o) : opt(std::move(o)) {
      if (opt.chunk == 0) throw usage_error("sluice: tier::disk needs chunk > 0");
      const std::uint64_t chunks = opt.bytes / opt.chunk;
      if (chunks < 2)
        throw usage_error("sluice: tier::disk needs bytes >= 2 * chunk (got bytes " +
                          std::to_string(opt.bytes) + ", chunk " + std::to_string(opt.chunk) + ")");
      chunk_keys.resize(chunks);
      fd = ::open(opt.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) throw io_error(opt.path, "cannot create cache file", errno);
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      ::close(fd);
      if (!opt.keep_file) ::unlink(opt.path.c_str());
    }
    void write_at(const std::byte* p, std::size_t n, std::uint64_t at) {
      while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) throw io_error(opt.path, "cannot write cache file", w < 0 ? errno : EIO);
        p += w;
        n -= static_cast<std::size_t>(w);
        at += static_cast<std::uint64_t>(w);
      }
    }
    void read_at(std::byte* p, std::size_t n, std::uint64_t at) const {
      while (n > 0) {
        const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(at));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw io_error(opt.path, "cannot read cache file", r < 0 ? errno : EIO);
        p += r;
        n -= static_cast<std::size_t>(r);
        at += static_cast<std::uint64_t>(r);
      }
    }
    disk_options opt;
    int fd = -1;
    mutable std::shared_mutex mutex;
    std::unordered_map<std::uint64_t, location> index;
    std::vector<std::vector<std::uint64_t>> chunk_keys;
    std::uint64_t current = 0, offset = 0, bytes = 0, inserts = 0, rejected = 0, evictions = 0;
    std::atomic<std::uint64_t> hits{0}, misses{0};
  };
  std::shared_ptr<state> s_;
};

}  // namespace sluice::tier
