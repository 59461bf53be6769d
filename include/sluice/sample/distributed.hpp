// sluice/sample/distributed.hpp — one rank's share of a global order.
//
// `distributed{inner, {.rank, .world, .tail}}` wraps any sampler: the global order of an epoch is
// the inner sampler's, and rank r takes global positions  start + r, start + r + world, ...
// Every rank gets the same number of samples, so every rank runs the same number of steps
// (collective ops in the trainer never wait for a rank that ran out):
//   tail::pad       — the global order is padded to a multiple of `world` by repeating its first
//                     positions (each padded sample is seen twice in that epoch; documented and
//                     counted by padded_samples());
//   tail::drop      — the last (n - start) % world positions are dropped.
// The state shared by all ranks is the global position `start`: checkpoint
// `start + world * (samples this rank consumed)` and resume with any world size — the remaining
// positions are split again, so no sample is lost or repeated across a change of world size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/error.hpp"

namespace sluice::sample {

enum class tail { pad, drop };

struct distributed_options {
  std::uint64_t rank = 0;
  std::uint64_t world = 1;
  sample::tail tail = tail::pad;
  std::uint64_t start = 0;  // global position this run starts at (resume)
};

template <sampler Inner>
class distributed {
 public:
  using sampler_concept = sampler_tag;
  distributed(Inner inner, distributed_options o) : inner_(std::move(inner)), o_(o) {
    if (o_.world == 0) throw usage_error("sluice: distributed: world must be at least 1");
    if (o_.rank >= o_.world)
      throw usage_error("sluice: distributed: rank " + std::to_string(o_.rank) + " is not below world " +
                        std::to_string(o_.world));
  }
  void prepare(std::uint64_t epoch)
    requires preparing_sampler<Inner>
  {
    inner_.prepare(epoch);
  }
  [[nodiscard]] std::size_t size(std::uint64_t epoch) const {
    const std::uint64_t n = inner_.size(epoch);
    if (o_.start >= n) return 0;
    const std::uint64_t rem = n - o_.start;
    return static_cast<std::size_t>(o_.tail == tail::pad ? (rem + o_.world - 1) / o_.world : rem / o_.world);
  }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    const std::uint64_t n = inner_.size(epoch);
    std::uint64_t g = o_.start + o_.rank + pos * o_.world;
    if (g >= n) g = o_.start + (g - n) % (n - o_.start);  // padding wraps to the run's first positions
    return inner_.at(epoch, g);
  }
  // Global position after this rank consumed `consumed` samples (all ranks in step).
  [[nodiscard]] std::uint64_t global_position(std::uint64_t consumed) const noexcept {
    return o_.start + consumed * o_.world;
  }
  [[nodiscard]] std::uint64_t padded_samples(std::uint64_t epoch) const {
    const std::uint64_t n = inner_.size(epoch);
    if (o_.tail != tail::pad || o_.start >= n) return 0;
    return size(epoch) * o_.world - (n - o_.start);
  }
  [[nodiscard]] const distributed_options& options() const noexcept { return o_; }
  [[nodiscard]] const Inner& inner() const noexcept { return inner_; }
  // The inner sampler's (its size at epoch 0 where it has no fingerprint()), with rank, world,
  // tail and start: a rank's state resumes only that rank's share.
  [[nodiscard]] sampler_fingerprint fingerprint() const {
    sampler_fingerprint f = fingerprint_of(inner_, 0);
    f.kind = "distributed(" + f.kind + ")";
    f.params = fingerprint_hash{}
                   .add(f.params)
                   .add(o_.rank)
                   .add(o_.world)
                   .add(static_cast<std::uint64_t>(o_.tail))
                   .add(o_.start)
                   .value();
    return f;
  }

 private:
  Inner inner_;
  distributed_options o_;
};

}  // namespace sluice::sample
