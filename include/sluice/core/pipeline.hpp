// sluice/core/pipeline.hpp — composing stages with `|`, checked at compile time.
//
//   auto loader = sluice::from(sampler)          // sample ids in epoch order
//               | sluice::read(reader)           // id -> record view (zero copy)
//               | sluice::map(fn)                // any per-sample function
//               | sluice::collate({.batch = 256})// samples -> one contiguous batch
//               | sluice::pin()                  // (optional) batch stages
//               | sluice::prefetch(2);           // runs it: workers, ring, stats
//
// The pipeline's type is the chain of its stages: `sample_chain<Sampler, Stages...>` until
// collate, then `batch_chain<SampleChain, Collate, BatchStages...>`, then `loader<...>`
// (core/loader.hpp). The core knows collate only as a concept (core/concepts.hpp: any type that
// models collator_for<C, Sample>); the classic and per-field collators live in stage/.
// The per-sample stages are applied by one inlined function per sample (`sample_chain::apply`):
// no virtual call, no type erasure, nothing allocated.
//
// A chain that does not fit fails to compile where the user wrote it, in words: the static
// assertion says what is wrong and how to fix it, and the instantiation it fires in,
// `stage_cannot_follow<"next", "previous">`, names both stages.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/stats.hpp"

namespace sluice {

namespace detail {

template <class>
inline constexpr bool always_false = false;

enum class chain_fault { batch_stage_before_collate, sample_stage_after_collate, input_mismatch,
                         collate_needs_samples, collate_twice };

// Instantiated only to report a misplaced stage; the template arguments name both stages.
template <fixed_string Next, fixed_string Previous, chain_fault Fault, class T = void>
struct stage_cannot_follow {
  static_assert(Fault != chain_fault::batch_stage_before_collate || always_false<T>,
                "sluice: a per-batch stage (pin, to_device, prefetch) cannot follow a per-sample "
                "stage (from, read, cache, decode, map): put collate({.batch = N}) between them");
  static_assert(Fault != chain_fault::sample_stage_after_collate || always_false<T>,
                "sluice: a per-sample stage (read, cache, decode, map) cannot follow collate or a "
                "per-batch stage: move it before collate(...)");
  static_assert(Fault != chain_fault::input_mismatch || always_false<T>,
                "sluice: this stage cannot take what the stage before it hands out (decode and "
                "cache need records: put read(reader) right after from(sampler))");
  static_assert(Fault != chain_fault::collate_needs_samples || always_false<T>,
                "sluice: collate needs samples with bytes or fields (records from read(reader), "
                "decoded samples, fields_sample), but the stage before it hands out something else "
                "(from(sampler) hands out sample ids: put read(reader) between them; a per-field "
                "collate needs samples with fields)");
  static_assert(Fault != chain_fault::collate_twice || always_false<T>,
                "sluice: a pipeline collates once: remove the second collate(...)");
  static constexpr bool value = false;
};


}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Per-sample part: the sampler and the stages applied to each sample.
template <sampler Sampler, class... Stages>
class sample_chain;

namespace detail {
template <class In, class... Stages>
struct chain_output {
  using type = In;
};
template <class In, class First, class... Rest>
struct chain_output<In, First, Rest...> {
  using type = typename chain_output<std::invoke_result_t<const First&, In, const sample_context&>, Rest...>::type;
};

template <class T>
struct is_sample_chain : std::false_type {};
template <class S, class... St>
struct is_sample_chain<sample_chain<S, St...>> : std::true_type {};
}  // namespace detail

template <sampler Sampler, class... Stages>
class sample_chain {
 public:
  using sampler_type = Sampler;
  using output_type = typename detail::chain_output<sample_id, Stages...>::type;
  static constexpr std::size_t stage_count = sizeof...(Stages);
  static constexpr std::array<std::string_view, sizeof...(Stages)> stage_names{Stages::name...};
  // Name of the last stage (the one a new stage would follow).
  static constexpr std::string_view last_name = [] {
    if constexpr (sizeof...(Stages) == 0) return std::string_view("from(sampler)");
    else return std::get<sizeof...(Stages) - 1>(std::tuple{Stages::name...});
  }();

  sample_chain(Sampler s, std::tuple<Stages...> st) : sampler_(std::move(s)), stages_(std::move(st)) {}

  [[nodiscard]] Sampler& sampler() & noexcept { return sampler_; }
  [[nodiscard]] const Sampler& sampler() const& noexcept { return sampler_; }
  [[nodiscard]] Sampler&& sampler() && noexcept { return std::move(sampler_); }
  [[nodiscard]] std::tuple<Stages...>& stages() & noexcept { return stages_; }
  [[nodiscard]] const std::tuple<Stages...>& stages() const& noexcept { return stages_; }
  [[nodiscard]] std::tuple<Stages...>&& stages() && noexcept { return std::move(stages_); }

  // Runs every stage on sample `id`. With Timed, adds each stage's duration to stage_ns[i]:
  // one clock read before the first stage and one after each (stages + 1 reads, not 2 a stage).
  // An exception from stage i is rethrown as stage_error naming stage i and the sample.
  // `origin` receives the file the sample came from: the first stage output that names one (the
  // read stage's record view or field sample), so whatever wraps the sample afterwards (pad_bytes,
  // map, decode, convert, cache) the loader still knows which file's bytes it carries.
  template <bool Timed = false>
  SLUICE_ALWAYS_INLINE output_type apply(std::uint64_t id, const sample_context& ctx, std::string_view& origin,
                                         std::uint64_t* stage_ns = nullptr) const {
    std::uint64_t t = 0;
    if constexpr (Timed) t = detail::now_ns();
    origin = {};
    return apply_from<0, Timed>(sample_id{id}, ctx, stage_ns, t, origin);
  }
  template <bool Timed = false>
  SLUICE_ALWAYS_INLINE output_type apply(std::uint64_t id, const sample_context& ctx,
                                         std::uint64_t* stage_ns = nullptr) const {
    std::string_view origin;
    return apply<Timed>(id, ctx, origin, stage_ns);
  }

 private:
  Sampler sampler_;
  std::tuple<Stages...> stages_;

  template <std::size_t I, bool Timed, class In>
  SLUICE_ALWAYS_INLINE auto apply_from(In&& in, const sample_context& ctx, std::uint64_t* stage_ns,
                                       std::uint64_t& t, std::string_view& origin) const {
    if constexpr (I == sizeof...(Stages)) {
      return std::forward<In>(in);
    } else {
      const auto& st = std::get<I>(stages_);
      using Stage = std::tuple_element_t<I, std::tuple<Stages...>>;
      auto out = [&]() -> decltype(st(std::forward<In>(in), ctx)) {
        try {
          return st(std::forward<In>(in), ctx);
        } catch (...) {
          detail::throw_stage_error(Stage::name, ctx.id);
        }
      }();
      if constexpr (Timed) {
        const std::uint64_t t1 = detail::now_ns();
        stage_ns[I] += t1 - t;
        t = t1;
      }
      if (origin.empty()) origin = origin_of(out);
      return apply_from<I + 1, Timed>(std::move(out), ctx, stage_ns, t, origin);
    }
  }
};

template <class Sampler>
  requires sampler<std::decay_t<Sampler>>
sample_chain<std::decay_t<Sampler>> from(Sampler&& s) {
  return sample_chain<std::decay_t<Sampler>>(std::forward<Sampler>(s), {});
}

// ---------------------------------------------------------------------------------------------
// Per-batch part: the collated chain and the batch stages after it.
template <class SampleChain, class Collate, class... BatchStages>
class batch_chain {
 public:
  using sample_chain_type = SampleChain;
  using collate_type = Collate;
  static constexpr std::string_view last_name = [] {
    if constexpr (sizeof...(BatchStages) == 0) return std::string_view(Collate::name);
    else return std::get<sizeof...(BatchStages) - 1>(std::tuple{BatchStages::name...});
  }();
  batch_chain(SampleChain c, Collate col, std::tuple<BatchStages...> b)
      : chain(std::move(c)), collate(std::move(col)), batch_stages(std::move(b)) {}
  SampleChain chain;
  Collate collate;
  std::tuple<BatchStages...> batch_stages;
};

namespace detail {
template <class T>
struct is_batch_chain : std::false_type {};
template <class C, class Col, class... B>
struct is_batch_chain<batch_chain<C, Col, B...>> : std::true_type {};

// The collator a chain with samples of type Sample uses: c.bind<Sample>() where defined.
template <class Col, class Sample>
auto bind_collator(Col&& c) {
  using C = std::decay_t<Col>;
  if constexpr (requires { c.template bind<Sample>(); }) return c.template bind<Sample>();
  else return C(std::forward<Col>(c));
}

// Turns a stage's `name` (a string_view over a literal) into a fixed_string type argument.
template <class Stage>
struct stage_label {
  static constexpr std::size_t size = Stage::name.size() + 1;
  static constexpr fixed_string<size> value = [] {
    char buf[size]{};
    for (std::size_t i = 0; i + 1 < size; ++i) buf[i] = Stage::name[i];
    return fixed_string<size>(buf);
  }();
};
template <class Chain>
struct chain_label {
  static constexpr std::size_t size = Chain::last_name.size() + 1;
  static constexpr fixed_string<size> value = [] {
    char buf[size]{};
    for (std::size_t i = 0; i + 1 < size; ++i) buf[i] = Chain::last_name[i];
    return fixed_string<size>(buf);
  }();
};
}  // namespace detail

// sample_chain | per-sample stage
template <class Chain, class Stage>
  requires detail::is_sample_chain<std::decay_t<Chain>>::value && sample_stage<std::decay_t<Stage>>
auto operator|(Chain&& c, Stage&& st) {
  using C = std::decay_t<Chain>;
  using S = std::decay_t<Stage>;
  using In = typename C::output_type;
  if constexpr (!std::is_invocable_v<const S&, In, const sample_context&>) {
    (void)detail::stage_cannot_follow<detail::stage_label<S>::value, detail::chain_label<C>::value,
                                      detail::chain_fault::input_mismatch>::value;
    return c;
  } else {
    static_assert(report_hook_well_formed<S>,
                  "sluice: a stage's report hook is `void report(sluice::stage_report&) const` (core/concepts.hpp)");
    return std::apply(
        [&](auto&&... prev) {
          return sample_chain<typename C::sampler_type, std::decay_t<decltype(prev)>..., S>(
              std::forward<Chain>(c).sampler(), std::tuple{std::move(prev)..., std::forward<Stage>(st)});
        },
        std::forward<Chain>(c).stages());
  }
}

// sample_chain | collate (any collator)
template <class Chain, class Col>
  requires detail::is_sample_chain<std::decay_t<Chain>>::value && collator<std::decay_t<Col>>
auto operator|(Chain&& c, Col&& col) {
  using C = std::decay_t<Chain>;
  using Sample = typename C::output_type;
  using Bound = decltype(detail::bind_collator<Col, Sample>(std::forward<Col>(col)));
  if constexpr (!collator_for<Bound, Sample>) {
    (void)detail::stage_cannot_follow<"collate", detail::chain_label<C>::value,
                                      detail::chain_fault::collate_needs_samples>::value;
    return c;
  } else {
    return batch_chain<C, Bound>(std::forward<Chain>(c), detail::bind_collator<Col, Sample>(std::forward<Col>(col)), {});
  }
}

// sample_chain | batch stage  -> error: collate missing
template <class Chain, class Stage>
  requires detail::is_sample_chain<std::decay_t<Chain>>::value && batch_stage<std::decay_t<Stage>>
auto operator|(Chain&& c, Stage&&) {
  (void)detail::stage_cannot_follow<detail::stage_label<std::decay_t<Stage>>::value,
                                    detail::chain_label<std::decay_t<Chain>>::value,
                                    detail::chain_fault::batch_stage_before_collate>::value;
  return c;
}

// batch_chain | batch stage
template <class BChain, class Stage>
  requires detail::is_batch_chain<std::decay_t<BChain>>::value && batch_stage<std::decay_t<Stage>>
auto operator|(BChain&& b, Stage&& st) {
  using B = std::decay_t<BChain>;
  return std::apply(
      [&](auto&&... prev) {
        return batch_chain<typename B::sample_chain_type, typename B::collate_type, std::decay_t<decltype(prev)>...,
                           std::decay_t<Stage>>(
            std::forward<BChain>(b).chain, std::forward<BChain>(b).collate,
            std::tuple{std::move(prev)..., std::forward<Stage>(st)});
      },
      std::forward<BChain>(b).batch_stages);
}

// batch_chain | per-sample stage -> error
template <class BChain, class Stage>
  requires detail::is_batch_chain<std::decay_t<BChain>>::value && sample_stage<std::decay_t<Stage>>
auto operator|(BChain&& b, Stage&&) {
  (void)detail::stage_cannot_follow<detail::stage_label<std::decay_t<Stage>>::value,
                                    detail::chain_label<std::decay_t<BChain>>::value,
                                    detail::chain_fault::sample_stage_after_collate>::value;
  return b;
}

// batch_chain | collate -> error
template <class BChain, class Col>
  requires detail::is_batch_chain<std::decay_t<BChain>>::value && collator<std::decay_t<Col>>
auto operator|(BChain&& b, Col&&) {
  (void)detail::stage_cannot_follow<"collate", detail::chain_label<std::decay_t<BChain>>::value,
                                    detail::chain_fault::collate_twice>::value;
  return b;
}

}  // namespace sluice
