// sluice/core/detail/batch_stages.hpp — the loader's batch stages as one set (a part of
// the loader's ring, core/detail/ring.hpp).
//
// What: each stage's per-slot state, its declared hooks checked against its members, the slot
// storage one of them may provide, and invoke_hook: the one place a hook is called and its failure
// turned into a stage_error naming the stage.
// Invariants: a hook runs only on a stage that declares it (check_hooks makes declared ==
// callable); hooks of one kind run in the stages' order; no exception leaves invoke_hook — the
// first failure comes back as an exception_ptr and the caller decides what it does to the batch.
// Threads: none of its own; each hook is called on the thread core/concepts.hpp names for it.
#pragma once

#include <sys/mman.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"

namespace sluice::detail {

// What the ring keeps per slot for a stage that declares `using slot_state = T;`
// (sluice::no_slot_state for one that does not).
template <class S>
struct slot_state_of {
  using type = no_slot_state;
};
template <class S>
  requires requires { typename S::slot_state; }
struct slot_state_of<S> {
  using type = typename S::slot_state;
};

template <class S>
concept provides_storage = requires(S& s, std::size_t n, void* p) {
  { s.allocate(n) } -> std::convertible_to<void*>;
  s.deallocate(p, n);
};

// A batch stage that acts on a slot's storage around its reuse (to_device: waits for the copy out of
// it; records an event when the batch is let go).
template <class S, class Slot>
concept holds_slot_storage =
    requires(S& st, Slot& s, typename slot_state_of<S>::type& state) { st.before_fill(s, state); } ||
    requires(S& st, Slot& s, typename slot_state_of<S>::type& state) { st.on_release(s, state); };

// A batch stage's declared hooks (S::hooks, core/concepts.hpp) against its members, on the ring's
// slot type: each hook declared must be callable as the loader calls it, and each one callable must
// be declared, so a misspelt hook or one of another signature fails to compile instead of never
// being called. A member named as a hook that cannot be called as one fails too.
template <class S, class Slot>
consteval bool check_hooks() {
  static_assert(requires { { S::hooks } -> std::convertible_to<hook>; },
                "sluice: a batch stage declares the hooks it implements: static constexpr sluice::hook hooks = "
                "sluice::hook::on_filled | ...; (sluice::hook::none for none; the hooks: core/concepts.hpp)");
  if constexpr (requires { { S::hooks } -> std::convertible_to<hook>; }) {
    using State = typename slot_state_of<S>::type;
    constexpr hook h = S::hooks;
    static_assert(has_hook(h, hook::storage) == provides_storage<S>,
                  "sluice: batch stage hook::storage: declared but no void* allocate(std::size_t) and "
                  "void deallocate(void*, std::size_t), or those members are there and hook::storage is not declared");
    static_assert(has_hook(h, hook::before_fill) == requires(S& st, Slot& sl, State& x) { st.before_fill(sl, x); },
                  "sluice: batch stage hook::before_fill: declared but not callable as "
                  "before_fill(sluice::batch_slot&, slot_state&) (misspelt? another signature?), or callable and not declared");
    static_assert(has_hook(h, hook::on_filled) == requires(S& st, Slot& sl, State& x) { st.on_filled(sl, x); },
                  "sluice: batch stage hook::on_filled: declared but not callable as "
                  "on_filled(sluice::batch_slot&, slot_state&) (misspelt? another signature?), or callable and not declared");
    static_assert(has_hook(h, hook::on_deliver) == requires(S& st, Slot& sl, State& x) { st.on_deliver(sl, x); },
                  "sluice: batch stage hook::on_deliver: declared but not callable as "
                  "on_deliver(sluice::batch_slot&, slot_state&) (misspelt? another signature?), or callable and not declared");
    static_assert(has_hook(h, hook::on_release) == requires(S& st, Slot& sl, State& x) { st.on_release(sl, x); },
                  "sluice: batch stage hook::on_release: declared but not callable as "
                  "on_release(sluice::batch_slot&, slot_state&) (misspelt? another signature?), or callable and not declared");
    static_assert(has_hook(h, hook::on_destroy) == requires(S& st, Slot& sl, State& x) { st.on_destroy(sl, x); },
                  "sluice: batch stage hook::on_destroy: declared but not callable as "
                  "on_destroy(sluice::batch_slot&, slot_state&) (misspelt? another signature?), or callable and not declared");
  }
  return true;
}

// What invoke_hook does after a stage's hook throws: stop (the later stages' hooks do not run) or
// go on (each later stage's hook still runs; the first failure is the one returned).
enum class on_hook_failure : std::uint8_t { stop, go_on };

// The batch stages of one pipeline, seen through their hooks. Holds a reference to the stages (the
// ring owns them, in its batch_chain); each slot holds its `states` tuple.
template <class... BatchStages>
class batch_stage_set {
 public:
  using states = std::tuple<typename slot_state_of<BatchStages>::type...>;
  static constexpr std::size_t size = sizeof...(BatchStages);
  // Storage the loader allocates itself (no stage provides it) is warmed by the ring.
  static constexpr bool own_storage = !(provides_storage<BatchStages> || ...);
  // A stage keeps a hold on the slot's storage after the batch is let go (a copy in flight).
  template <class Slot>
  static constexpr bool hold_storage = (holds_slot_storage<BatchStages, Slot> || ...);
  // Every stage's hooks checked against the ring's slot type (compile time).
  template <class Slot>
  static constexpr bool checked = (check_hooks<BatchStages, Slot>() && ...);

  explicit batch_stage_set(std::tuple<BatchStages...>& stages) noexcept : stages_(stages) {}

  // Hook H of every stage that declares it, in order, on slot s (whose `states` member holds the
  // stages' slot states). `around(index, call)` makes each call (`call()`), so the caller can time
  // it; `index` is the stage's position among the batch stages. A failure becomes a stage_error
  // naming the stage and sample `id`. Returns the first failure, or nullptr.
  template <hook H, class Slot, class Around>
  std::exception_ptr invoke_hook(Slot& s, std::uint64_t id, on_hook_failure mode, Around&& around) noexcept {
    std::exception_ptr first;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (one<H, I>(s, id, mode, around, first), ...);
    }(std::index_sequence_for<BatchStages...>{});
    return first;
  }
  template <hook H, class Slot>
  std::exception_ptr invoke_hook(Slot& s, std::uint64_t id, on_hook_failure mode) noexcept {
    return invoke_hook<H>(s, id, mode, [](std::size_t, auto&& call) { call(); });
  }

  // The loader's own slots of this size or more are mapped from the kernel and unmapped when
  // freed, so a slot the ring gives back (grown for kept batches, then let go) returns its memory
  // to the system: glibc would keep a freed chunk of that size in its heap (its mmap threshold
  // rises to the largest chunk freed, up to 32 MiB), and the process's RSS would stay at its peak.
  static constexpr std::size_t map_bytes = std::size_t{1} << 20;

  // Slot storage of `bytes` (a multiple of the cache line): from the first stage that provides
  // storage, else the loader's own, cache-line aligned (page aligned from map_bytes on). Throws
  // std::bad_alloc (or the stage's error).
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    if constexpr (own_storage) {
      if (bytes >= map_bytes) {
        p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        return p;
      }
      p = ::operator new(bytes, std::align_val_t{cache_line});
    } else {
      p = std::get<first_provider()>(stages_).allocate(bytes);
    }
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept {
    if constexpr (own_storage) {
      if (bytes >= map_bytes) (void)::munmap(p, bytes);
      else ::operator delete(p, std::align_val_t{cache_line});
    } else {
      std::get<first_provider()>(stages_).deallocate(p, bytes);
    }
  }

 private:
  static consteval std::size_t first_provider() {
    std::size_t i = 0;
    const bool provides[] = {provides_storage<BatchStages>..., false};
    while (!provides[i]) ++i;
    return i;
  }

  template <hook H, class S, class Slot, class State>
  static void call(S& st, Slot& s, State& state) {
    if constexpr (H == hook::before_fill) st.before_fill(s, state);
    else if constexpr (H == hook::on_filled) st.on_filled(s, state);
    else if constexpr (H == hook::on_deliver) st.on_deliver(s, state);
    else if constexpr (H == hook::on_release) st.on_release(s, state);
    else if constexpr (H == hook::on_destroy) st.on_destroy(s, state);
    else static_assert(H == hook::before_fill, "sluice: invoke_hook: hook::storage is allocate()/deallocate()");
  }

  template <hook H, std::size_t I, class Slot, class Around>
  void one(Slot& s, std::uint64_t id, on_hook_failure mode, Around& around, std::exception_ptr& first) noexcept {
    using S = std::tuple_element_t<I, std::tuple<BatchStages...>>;
    if constexpr (has_hook(S::hooks, H)) {
      if (first && mode == on_hook_failure::stop) return;
      try {
        around(I, [&] { call<H>(std::get<I>(stages_), s, std::get<I>(s.states)); });
      } catch (...) {
        if (first) return;
        try {
          throw_stage_error(S::name, id);
        } catch (...) {
          first = std::current_exception();
        }
      }
    }
  }

  std::tuple<BatchStages...>& stages_;
};

}  // namespace sluice::detail
