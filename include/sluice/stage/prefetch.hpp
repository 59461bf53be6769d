// sluice/stage/prefetch.hpp — `prefetch(...)`: the last stage; it turns a chain into a loader.
//
// prefetch decides how far ahead of the trainer the workers may run (the depth policy) and how
// many workers run the per-sample stages. The ring it creates holds at most depth + workers
// batches: that is the memory bound, and a full ring is what stops the workers.
//
//   | sluice::prefetch(2)                                         // depth 2, 2 workers
//   | sluice::prefetch(2, {.workers = 4, .seed = 7})
//   | sluice::prefetch(sluice::depth::adaptive{...}, {.workers = 2})
#pragma once

#include <string_view>
#include <type_traits>
#include <utility>

#include "sluice/core/loader.hpp"
#include "sluice/core/pipeline.hpp"
#include "sluice/policy/depth_fixed.hpp"

namespace sluice {

template <depth_policy Depth>
struct prefetch_stage {
  static constexpr std::string_view name = "prefetch";
  Depth depth;
  loader_options options;
};

inline prefetch_stage<depth::fixed> prefetch(std::size_t depth = 2, loader_options opt = {}) {
  return {depth::fixed{depth}, opt};
}
template <depth_policy Depth>
prefetch_stage<std::decay_t<Depth>> prefetch(Depth&& d, loader_options opt = {}) {
  return {std::forward<Depth>(d), opt};
}

template <class BChain, class Depth>
  requires detail::is_batch_chain<std::decay_t<BChain>>::value
auto operator|(BChain&& b, prefetch_stage<Depth> p) {
  return loader<std::decay_t<BChain>, Depth>(std::forward<BChain>(b), std::move(p.depth), p.options);
}

// A sample chain cannot be prefetched before it is collated.
template <class Chain, class Depth>
  requires detail::is_sample_chain<std::decay_t<Chain>>::value
auto operator|(Chain&& c, prefetch_stage<Depth>) {
  (void)detail::stage_cannot_follow<"prefetch", detail::chain_label<std::decay_t<Chain>>::value,
                                    detail::chain_fault::batch_stage_before_collate>::value;
  return c;
}

}  // namespace sluice
