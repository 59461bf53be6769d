// sluice/policy/cache.hpp — cache tiers: where a per-sample cache keeps bytes, and what it admits
// and evicts. The `cache(tier)` stage (stage/cache.hpp) puts one in a pipeline.
//
// tier::none caches nothing; tier::lru evicts least-recently-used (and thrashes under a fresh
// permutation each epoch); tier::minio fills once and never evicts (hit rate = capacity / data
// from the second epoch); tier::weighted admits by expected hits per byte under weighted sampling;
// tier::disk is a chunked cache file (policy/cache_disk.hpp); tiered<A, B> looks in A, then B.
// Every tier keeps the cache_tier concept (lookup, insert, would_admit, stats) and is a handle:
// copies share one cache.
// Threads and lifetime: keys are spread over independently locked shards; an entry's bytes are
// reference-counted and a lookup pins them, so an entry evicted while a worker reads it stays
// alive until that sample is dropped: no view ever dangles. Every rule: docs/policies.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"

namespace sluice {

using cache_buffer = std::shared_ptr<const std::byte[]>;

// What a lookup or an insert returns. `pin` keeps the bytes alive (null for tiers that never
// evict). hit is false on a miss or a rejected insert.
struct cache_ref {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> pin;
  bool hit = false;
};

struct cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t inserts = 0;
  std::uint64_t rejected = 0;   // inserts not admitted (too big, cache full, lower priority)
  std::uint64_t evictions = 0;
  std::uint64_t bytes = 0;      // bytes resident
  std::uint64_t entries = 0;
  std::uint64_t capacity_bytes = 0;
  [[nodiscard]] double hit_rate() const noexcept {
    const auto n = hits + misses;
    return n == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(n);
  }
  cache_stats& operator+=(const cache_stats& o) noexcept {
    hits += o.hits; misses += o.misses; inserts += o.inserts; rejected += o.rejected;
    evictions += o.evictions; bytes += o.bytes; entries += o.entries; capacity_bytes += o.capacity_bytes;
    return *this;
  }
};

template <class T>
concept cache_tier = std::copy_constructible<T> &&
    requires(T& t, const T& ct, std::uint64_t key, cache_buffer data, std::size_t size) {
      { t.lookup(key) } -> std::same_as<cache_ref>;
      { t.insert(key, data, size) } -> std::same_as<cache_ref>;
      { ct.would_admit(key, size) } -> std::convertible_to<bool>;
      { ct.stats() } -> std::same_as<cache_stats>;
    };

// Copies bytes into a fresh buffer (the convenience path for inserting a view).
inline cache_buffer make_cache_buffer(std::span<const std::byte> bytes) {
  auto buf = std::make_shared_for_overwrite<std::byte[]>(bytes.size() == 0 ? 1 : bytes.size());
  if (!bytes.empty()) std::memcpy(buf.get(), bytes.data(), bytes.size());
  return buf;
}
template <cache_tier T>
cache_ref cache_insert_copy(T& tier, std::uint64_t key, std::span<const std::byte> bytes) {
  return tier.insert(key, make_cache_buffer(bytes), bytes.size());
}

namespace detail {
inline std::size_t shard_of(std::uint64_t key, std::size_t shards) noexcept {
  return static_cast<std::size_t>(splitmix64(key) % shards);
}
inline std::size_t checked_shards(std::size_t s) {
  if (s == 0) throw usage_error("sluice: a cache needs at least one shard");
  return s;
}
struct alignas(cache_line) padded_mutex {
  std::mutex m;
};
// What every sharded tier shares: a shard is {mutex, index (key -> entry), counters}.
// Looks `key` up under the shard's lock, counts the hit or miss, and on a hit returns on_hit(it).
template <class Shard, class OnHit>
cache_ref counted_lookup(Shard& sh, std::uint64_t key, OnHit&& on_hit) {
  std::lock_guard lock(sh.mutex.m);
  auto it = sh.index.find(key);
  if (it == sh.index.end()) {
    ++sh.counters.misses;
    return {};
  }
  ++sh.counters.hits;
  return on_hit(it);
}
// Sums the shards' counters (each under its lock) and the resident entries.
template <class Shards>
cache_stats sum_shards(const Shards& shards, std::uint64_t capacity) {
  cache_stats total;
  for (auto& sh : shards) {
    std::lock_guard lock(sh.mutex.m);
    total += sh.counters;
    total.entries += sh.index.size();
  }
  total.capacity_bytes = capacity;
  return total;
}
}  // namespace detail

namespace tier {

struct none {
  cache_ref lookup(std::uint64_t) noexcept { return {}; }
  cache_ref insert(std::uint64_t, const cache_buffer&, std::size_t) noexcept { return {}; }
  [[nodiscard]] bool would_admit(std::uint64_t, std::size_t) const noexcept { return false; }
  [[nodiscard]] cache_stats stats() const noexcept { return {}; }
};

// ---------------------------------------------------------------- lru
class lru {
 public:
  explicit lru(std::uint64_t bytes, std::size_t shards = 16)
      : s_(std::make_shared<state>(bytes, detail::checked_shards(shards))) {}

  cache_ref lookup(std::uint64_t key) {
    auto& sh = s_->shard(key);
    return detail::counted_lookup(sh, key, [&](auto it) {
      sh.order.splice(sh.order.begin(), sh.order, it->second);
      return ref(*it->second);
    });
  }
  cache_ref insert(std::uint64_t key, cache_buffer data, std::size_t size) {
    auto& sh = s_->shard(key);
    std::lock_guard lock(sh.mutex.m);
    if (auto it = sh.index.find(key); it != sh.index.end()) return ref(*it->second);  // raced
    if (size > s_->shard_capacity) {
      ++sh.counters.rejected;
      return {};
    }
    while (sh.counters.bytes + size > s_->shard_capacity) {
      const entry& victim = sh.order.back();
      sh.counters.bytes -= victim.size;
      ++sh.counters.evictions;
      sh.index.erase(victim.key);
      sh.order.pop_back();  // readers holding a pin keep the buffer alive
    }
    sh.order.push_front(entry{key, std::move(data), size});
    sh.index.emplace(key, sh.order.begin());
    sh.counters.bytes += size;
    ++sh.counters.inserts;
    return ref(sh.order.front());
  }
  [[nodiscard]] bool would_admit(std::uint64_t, std::size_t size) const noexcept {
    return size <= s_->shard_capacity;
  }
  [[nodiscard]] cache_stats stats() const { return detail::sum_shards(s_->shards, s_->capacity); }

 private:
  struct entry {
    std::uint64_t key;
    cache_buffer data;
    std::size_t size;
  };
  static cache_ref ref(const entry& e) {
    return cache_ref{{e.data.get(), e.size}, e.data, true};
  }
  struct shard_t {
    mutable detail::padded_mutex mutex;
    std::list<entry> order;  // front = most recently used
    std::unordered_map<std::uint64_t, std::list<entry>::iterator> index;
    cache_stats counters;
  };
  struct state {
    state(std::uint64_t bytes, std::size_t n) : capacity(bytes), shard_capacity(bytes / n), shards(n) {}
    shard_t& shard(std::uint64_t key) { return shards[detail::shard_of(key, shards.size())]; }
    std::uint64_t capacity, shard_capacity;
    std::vector<shard_t> shards;
  };
  std::shared_ptr<state> s_;
};

// ---------------------------------------------------------------- minio
class minio {
 public:
  explicit minio(std::uint64_t bytes, std::size_t shards = 16)
      : s_(std::make_shared<state>(bytes, detail::checked_shards(shards))) {}

  cache_ref lookup(std::uint64_t key) {
    return detail::counted_lookup(s_->shard(key), key, [&](auto it) {
      return cache_ref{{it->second.data.get(), it->second.size}, nullptr, true};
    });
  }
  cache_ref insert(std::uint64_t key, cache_buffer data, std::size_t size) {
    auto& sh = s_->shard(key);
    std::lock_guard lock(sh.mutex.m);
    if (auto it = sh.index.find(key); it != sh.index.end())
      return cache_ref{{it->second.data.get(), it->second.size}, nullptr, true};
    // Reserve from the global budget: first come, first kept, never evicted.
    std::uint64_t used = s_->used.load(std::memory_order_relaxed);
    do {
      if (used + size > s_->capacity) {
        ++sh.counters.rejected;
        return {};
      }
    } while (!s_->used.compare_exchange_weak(used, used + size, std::memory_order_relaxed));
    auto [it, _] = sh.index.emplace(key, entry{std::move(data), size});
    sh.counters.bytes += size;
    ++sh.counters.inserts;
    return cache_ref{{it->second.data.get(), size}, nullptr, true};
  }
  [[nodiscard]] bool would_admit(std::uint64_t, std::size_t size) const noexcept {
    return s_->used.load(std::memory_order_relaxed) + size <= s_->capacity;
  }
  [[nodiscard]] cache_stats stats() const { return detail::sum_shards(s_->shards, s_->capacity); }

 private:
  struct entry {
    cache_buffer data;
    std::size_t size;
  };
  struct shard_t {
    mutable detail::padded_mutex mutex;
    std::unordered_map<std::uint64_t, entry> index;
    cache_stats counters;
  };
  struct state {
    state(std::uint64_t bytes, std::size_t n) : capacity(bytes), shards(n) {}
    shard_t& shard(std::uint64_t key) { return shards[detail::shard_of(key, shards.size())]; }
    std::uint64_t capacity;
    std::atomic<std::uint64_t> used{0};
    std::vector<shard_t> shards;
  };
  std::shared_ptr<state> s_;
};

// ---------------------------------------------------------------- weighted
class weighted {
 public:
  // probabilities[id]: the chance a draw returns id (any nonnegative scale works; ids past the
  // end count as 0). Samplers give it: weighted::sample_probabilities(),
  // class_balanced::sample_probabilities().
  weighted(std::uint64_t bytes, std::vector<double> probabilities, std::size_t shards = 16)
      : s_(std::make_shared<state>(bytes, detail::checked_shards(shards), std::move(probabilities))) {}

  cache_ref lookup(std::uint64_t key) {
    return detail::counted_lookup(s_->shard(key), key, [&](auto it) {
      return cache_ref{{it->second.data.get(), it->second.size}, it->second.data, true};
    });
  }
  cache_ref insert(std::uint64_t key, cache_buffer data, std::size_t size) {
    auto& sh = s_->shard(key);
    std::shared_lock plock(s_->probabilities_mutex);  // lock order: probabilities, then shard
    std::lock_guard lock(sh.mutex.m);
    if (auto it = sh.index.find(key); it != sh.index.end())
      return cache_ref{{it->second.data.get(), it->second.size}, it->second.data, true};
    const double prio = priority_locked(key, size);
    if (size > s_->shard_capacity || !(prio > 0)) {
      ++sh.counters.rejected;
      return {};
    }
    // Can enough bytes be freed from residents of strictly lower priority? Check before evicting.
    std::uint64_t freeable = s_->shard_capacity - sh.counters.bytes;
    auto stop = sh.by_priority.begin();
    while (freeable < size && stop != sh.by_priority.end() && stop->first < prio) {
      freeable += sh.index.find(stop->second)->second.size;
      ++stop;
    }
    if (freeable < size) {
      ++sh.counters.rejected;
      return {};
    }
    for (auto v = sh.by_priority.begin(); v != stop;) {
      auto victim = sh.index.find(v->second);
      sh.counters.bytes -= victim->second.size;
      ++sh.counters.evictions;
      sh.index.erase(victim);
      v = sh.by_priority.erase(v);
    }
    auto [it, _] = sh.index.emplace(key, entry{std::move(data), size});
    sh.by_priority.emplace(prio, key);
    sh.counters.bytes += size;
    ++sh.counters.inserts;
    return cache_ref{{it->second.data.get(), size}, it->second.data, true};
  }
  [[nodiscard]] bool would_admit(std::uint64_t key, std::size_t size) const noexcept {
    std::shared_lock lock(s_->probabilities_mutex);
    return size <= s_->shard_capacity && priority_locked(key, size) > 0;
  }
  // New sampling probabilities (a sampler whose weights move with the epoch, e.g. a q schedule):
  // residents are re-ranked; nothing is evicted until a better item asks for the room. Call it
  // between epochs or at any time — it takes every shard's lock.
  void set_probabilities(std::vector<double> probabilities) {
    std::unique_lock plock(s_->probabilities_mutex);
    s_->probabilities = std::move(probabilities);
    for (auto& sh : s_->shards) {
      std::lock_guard lock(sh.mutex.m);
      sh.by_priority.clear();
      for (const auto& [key, e] : sh.index) sh.by_priority.emplace(priority_locked(key, e.size), key);
    }
  }
  [[nodiscard]] cache_stats stats() const { return detail::sum_shards(s_->shards, s_->capacity); }

 private:
  [[nodiscard]] double priority_locked(std::uint64_t key, std::size_t size) const noexcept {
    const double p = key < s_->probabilities.size() ? s_->probabilities[key] : 0.0;
    return p / static_cast<double>(size == 0 ? 1 : size);  // expected hits per byte
  }
  struct entry {
    cache_buffer data;
    std::size_t size;
  };
  struct shard_t {
    mutable detail::padded_mutex mutex;
    std::unordered_map<std::uint64_t, entry> index;
    std::set<std::pair<double, std::uint64_t>> by_priority;  // lowest first
    cache_stats counters;
  };
  struct state {
    state(std::uint64_t bytes, std::size_t n, std::vector<double> p)
        : capacity(bytes), shard_capacity(bytes / n), probabilities(std::move(p)), shards(n) {}
    shard_t& shard(std::uint64_t key) { return shards[detail::shard_of(key, shards.size())]; }
    std::uint64_t capacity, shard_capacity;
    mutable std::shared_mutex probabilities_mutex;  // readers: every insert; writer: set_probabilities
    std::vector<double> probabilities;
    std::vector<shard_t> shards;
  };
  std::shared_ptr<state> s_;
};

}  // namespace tier

// ---------------------------------------------------------------- tiered
// Look in A, then B, then the source. A hit in B is promoted into A; a miss goes into both.
template <cache_tier A, cache_tier B>
class tiered {
 public:
  tiered(A first, B second) : a_(std::move(first)), b_(std::move(second)) {}
  cache_ref lookup(std::uint64_t key) {
    if (auto r = a_.lookup(key); r.hit) return r;
    auto r = b_.lookup(key);
    if (!r.hit) return r;
    // Promote. The buffer is shared when B hands out an owning pin over a whole buffer; otherwise
    // (disk reads, minio views) copy.
    auto promoted = cache_insert_copy(a_, key, r.bytes);
    return promoted.hit ? promoted : r;
  }
  cache_ref insert(std::uint64_t key, const cache_buffer& data, std::size_t size) {
    auto rb = b_.insert(key, data, size);
    auto ra = a_.insert(key, data, size);
    return ra.hit ? ra : rb;
  }
  [[nodiscard]] bool would_admit(std::uint64_t key, std::size_t size) const {
    return a_.would_admit(key, size) || b_.would_admit(key, size);
  }
  // Hits in either tier are hits; a miss is a lookup that missed both.
  [[nodiscard]] cache_stats stats() const {
    auto sa = a_.stats(), sb = b_.stats();
    cache_stats t = sa;
    t += sb;
    t.misses = sb.misses;
    return t;
  }
  [[nodiscard]] const A& first() const noexcept { return a_; }
  [[nodiscard]] const B& second() const noexcept { return b_; }

 private:
  A a_;
  B b_;
};

}  // namespace sluice
