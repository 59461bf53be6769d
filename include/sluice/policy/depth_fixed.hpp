// sluice/policy/depth_fixed.hpp — the simplest prefetch-depth policy: `depth::fixed{n}` never
// changes. The interface (depth_signal, the depth_policy concept) is in core/concepts.hpp with the
// other extension points; adaptive policies live in sluice/policy/depth.hpp.
#pragma once

#include <cstddef>

#include "sluice/core/concepts.hpp"

namespace sluice {

namespace depth {

struct fixed {
  std::size_t n = 2;
  [[nodiscard]] constexpr std::size_t initial_depth() const noexcept { return n < 1 ? 1 : n; }
  [[nodiscard]] constexpr std::size_t max_depth() const noexcept { return initial_depth(); }
  constexpr std::size_t update(const depth_signal&) const noexcept { return initial_depth(); }
};

}  // namespace depth
}  // namespace sluice
