// sluice/policy/depth_fixed.hpp — the prefetch-depth policy interface and its simplest member.
//
// A depth policy decides how many batches the pipeline may prepare ahead of the consumer. The
// loader calls it on the consumer's thread, once per delivered batch, with what it measured:
//
//   std::size_t initial_depth() const;           depth at the start
//   std::size_t max_depth() const;               upper bound: ring slots are max_depth + workers
//   std::size_t update(const depth_signal& s);   new depth (clamped to [1, max_depth])
//
// The ring holds at most depth + workers batches, so the depth is also the memory bound.
// `depth::fixed{n}` never changes; adaptive policies live in sluice/policy/depth.hpp.
#pragma once

#include <cstddef>
#include <concepts>
#include <cstdint>

namespace sluice {

// What the consumer measured for one batch, handed to a depth policy.
struct depth_signal {
  std::uint64_t batch_index = 0;
  std::uint64_t wait_ns = 0;      // the consumer's wait for this batch
  std::uint64_t busy_ns = 0;      // the consumer's work since the previous batch
  std::size_t ready = 0;          // batches ready and waiting when the consumer asked
  std::size_t depth = 0;          // current depth
  std::size_t workers = 0;        // active workers
  std::size_t batch_bytes = 0;    // bytes of one batch slot
};

template <class P>
concept depth_policy = requires(P& p, const P& cp, const depth_signal& s) {
  { cp.initial_depth() } -> std::convertible_to<std::size_t>;
  { cp.max_depth() } -> std::convertible_to<std::size_t>;
  { p.update(s) } -> std::convertible_to<std::size_t>;
};

namespace depth {

struct fixed {
  std::size_t n = 2;
  [[nodiscard]] constexpr std::size_t initial_depth() const noexcept { return n < 1 ? 1 : n; }
  [[nodiscard]] constexpr std::size_t max_depth() const noexcept { return initial_depth(); }
  constexpr std::size_t update(const depth_signal&) const noexcept { return initial_depth(); }
};

}  // namespace depth
}  // namespace sluice
