// sluice/stage/cache.hpp — `cache(tier)`: a per-sample stage that keeps samples' bytes in a cache
// tier (policy/cache.hpp), keyed by sample id, so a later epoch skips the work upstream of it.
//
// Before decode (on record bytes) a hit hands on the cached bytes and never touches the input
// view (no page faulted in, nothing read); after decode (on a deferred sample) a hit skips the
// decode, and an admitted miss decodes once into the cache and copies into the batch. The output
// holds a pin on the cache entry, so an entry evicted while its sample waits for collate stays
// alive: a view from the cache never dangles.
// Threads: the tier locks per shard; hits, misses, bytes and evictions are in tier.stats().
// Allocation: none on a memory tier's hit or a refused miss; an admitted miss allocates its entry,
// tier::disk a buffer per hit. Every rule: docs/policies.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/policy/cache.hpp"

namespace sluice {

// A record whose bytes may live in a cache entry; `pin` keeps that entry alive.
struct cached_record : record_view {
  std::shared_ptr<const void> pin;
  bool from_cache = false;
};

// A decoded sample that either writes cached bytes or defers to the original sample.
template <class In>
struct cached_sample {
  std::uint64_t id = 0;
  std::int64_t label = -1;
  std::span<const std::byte> cached;
  std::shared_ptr<const void> pin;
  std::optional<In> source;  // set when the bytes are not cached
  bool from_cache = false;

  [[nodiscard]] std::size_t size_bytes() const {
    return source ? static_cast<std::size_t>(source->size_bytes()) : cached.size();
  }
  void write_into(std::span<std::byte> dst, const sample_context& ctx) const {
    if (source) {
      source->write_into(dst, ctx);
      return;
    }
    if (!cached.empty()) std::memcpy(dst.data(), cached.data(), std::min(dst.size(), cached.size()));
  }
};

template <cache_tier Tier>
class cache_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "cache";

  explicit cache_stage(Tier tier) : tier_(std::move(tier)) {}

  template <class In>
    requires bytes_sample<std::remove_cvref_t<In>> || deferred_sample<std::remove_cvref_t<In>>
  auto operator()(In&& in, const sample_context& ctx) const {
    using T = std::remove_cvref_t<In>;
    if constexpr (bytes_sample<T>) {
      cached_record out;
      out.id = in.id;
      out.label = in.label;
      if constexpr (requires { in.origin; }) out.origin = in.origin;
      if (auto hit = tier_.lookup(ctx.id); hit.hit) {
        out.data = hit.bytes;
        out.pin = std::move(hit.pin);
        out.from_cache = true;
        return out;
      }
      const std::span<const std::byte> bytes = in.bytes();
      if constexpr (requires { in.pin; }) out.pin = in.pin;  // e.g. from an upstream cache
      out.data = bytes;
      if (tier_.would_admit(ctx.id, bytes.size())) {
        if (auto ins = cache_insert_copy(tier_, ctx.id, bytes); ins.hit) {
          out.data = ins.bytes;
          out.pin = std::move(ins.pin);
        }
      }
      return out;
    } else {
      cached_sample<T> out;
      out.id = in.id;
      out.label = in.label;
      if (auto hit = tier_.lookup(ctx.id); hit.hit) {
        out.cached = hit.bytes;
        out.pin = std::move(hit.pin);
        out.from_cache = true;
        return out;
      }
      const auto size = static_cast<std::size_t>(in.size_bytes());
      if (tier_.would_admit(ctx.id, size)) {
        auto buf = std::make_shared_for_overwrite<std::byte[]>(size == 0 ? 1 : size);
        in.write_into(std::span<std::byte>(buf.get(), size), ctx);
        cache_buffer shared = buf;
        if (auto ins = tier_.insert(ctx.id, shared, size); ins.hit) {
          out.cached = ins.bytes;
          out.pin = std::move(ins.pin);
        } else {  // lost the race for the last bytes: keep our decoded copy
          out.cached = std::span<const std::byte>(shared.get(), size);
          out.pin = shared;
        }
        return out;
      }
      out.source.emplace(std::forward<In>(in));
      return out;
    }
  }

  [[nodiscard]] cache_stats stats() const { return tier_.stats(); }
  // The tier's counters in loader.stats().reports (the report hook, core/concepts.hpp).
  void report(stage_report& r) const {
    const cache_stats c = tier_.stats();
    r.add("hits", c.hits).add("misses", c.misses).add("inserts", c.inserts).add("rejected", c.rejected);
    r.add("evictions", c.evictions).add("bytes", c.bytes).add("entries", c.entries);
    r.add("capacity_bytes", c.capacity_bytes);
  }
  [[nodiscard]] const Tier& tier() const noexcept { return tier_; }

 private:
  // Tiers are handles onto shared, internally locked state: lookups through a const stage are
  // thread-safe, hence mutable.
  mutable Tier tier_;
};

template <cache_tier Tier>
cache_stage<Tier> cache(Tier tier) {
  return cache_stage<Tier>(std::move(tier));
}

}  // namespace sluice
