// sluice/stage/map.hpp — `map(fn)`: a user function on each sample, fused into the worker loop.
//
// `fn(sample, const sample_context&)` (or `fn(sample)`) runs on the worker threads, so it must be
// safe to call concurrently; it is inlined into the per-sample loop (no virtual call, no
// std::function). Random choices inside it must draw from counter_rng(ctx.seed, ctx.epoch,
// ctx.id) to keep batches identical for any worker count.
//
//   | sluice::map([](sluice::record_view r, const sluice::sample_context&) { return r; })
#pragma once

#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"

namespace sluice {

template <class Fn>
class map_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "map";

  explicit map_stage(Fn fn) : fn_(std::move(fn)) {}

  template <class In>
    requires std::invocable<const Fn&, In, const sample_context&> || std::invocable<const Fn&, In>
  decltype(auto) operator()(In&& in, const sample_context& ctx) const {
    if constexpr (std::invocable<const Fn&, In, const sample_context&>)
      return std::invoke(fn_, std::forward<In>(in), ctx);
    else
      return std::invoke(fn_, std::forward<In>(in));
  }

 private:
  Fn fn_;
};

template <class Fn>
map_stage<std::decay_t<Fn>> map(Fn&& fn) {
  return map_stage<std::decay_t<Fn>>(std::forward<Fn>(fn));
}

}  // namespace sluice
