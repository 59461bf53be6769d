// sluice/stage/cache.hpp — `cache(tier)`: a per-sample stage that keeps samples' bytes in a cache
// tier (policy/cache.hpp), keyed by sample id, so a later epoch skips the work upstream of it.
//
// Where it sits decides what it saves:
//   * before decode, on record bytes (`read(shard) | cache(t) | decode(...)`): the input is a
//     record_view (or any sample with bytes()). On a hit the cached bytes are handed on and the
//     input view is never touched — for an mmap'd or network-backed reader, no page is faulted
//     in and nothing is read. On a miss the bytes are copied into the tier (if it admits them).
//   * after decode, on decoded samples (`decode(...) | cache(t)`): the input is a deferred sample
//     (size_bytes() + write_into()). On a hit write_into is never called — the decode is skipped.
//     On a miss that the tier admits, the sample is decoded once into a cache buffer and copied
//     from there into the batch; a sample the tier would not admit is passed through untouched
//     (decoded straight into the batch, as without the cache).
//
// Output: `cached_record` (a record_view plus a pin) for byte inputs, `cached_sample<In>` for
// deferred inputs. The pin holds a reference on the cache entry, so an entry evicted by another
// worker while this sample waits for collate stays alive: a view from the cache never dangles.
// Pass cached_record on by reference or as itself; copying it into a plain record_view drops the
// pin (the view is then only as safe as the tier: fine for minio, which never evicts).
//
// Thread-safe: the tier locks per shard; hits, misses, bytes and evictions are in tier.stats()
// (and stage.stats()).
// Allocation: none on a hit in a memory tier, none on a miss the tier's would_admit() refuses;
// a miss it accepts allocates the entry's buffer (and the tier its index nodes), and tier::disk
// allocates the buffer each hit is read into. So the pipeline's "no allocation after warm-up"
// holds with tier::minio once full, or a memory tier that holds the data (docs/guarantees.md).
//
//   auto t = sluice::tier::minio{8ull << 30};
//   auto loader = sluice::from(s) | sluice::read(shard) | sluice::cache(t) | sluice::collate({.batch = 256})
//               | sluice::prefetch(2);
//   double hit_rate = t.stats().hit_rate();
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
