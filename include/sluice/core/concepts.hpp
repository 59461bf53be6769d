// sluice/core/concepts.hpp — what a sampler, a record reader, a codec and a stage are.
//
// Concepts are opt-in by tag: a type is a sampler because it declares
// `using sampler_concept = sluice::sampler_tag;`, not because it happens to have a member called
// `at`. That keeps unrelated types from matching by accident and lets the pipe operator report a
// misplaced stage in words instead of a page of substitution failures.
//
//   sampler        size(epoch) samples this epoch; at(epoch, position) -> sample id, a pure
//                  function (thread-safe, O(1) or O(log n)); optional prepare(epoch), called once
//                  on one thread before an epoch starts (for samplers that must materialise).
//   record_reader  size(); record(i) -> byte view valid while the reader lives (zero copy into
//                  the mapping where the format allows); label(i) -> class label or -1;
//                  path() for error messages. record(i) may throw sluice::format_error.
//   codec          output_bytes() the fixed size of a decoded sample; decode(in, out, ctx)
//                  writes exactly output_bytes() bytes into caller-given memory.
//   collatable     what the classic collate accepts: an id and a label, and either bytes()
//                  (copied once) or size_bytes() + write_into(dst, ctx) (written in place, e.g.
//                  decoded straight into the batch slot). Samples with fields: core/schema.hpp.
//   collator_for   what turns a batch's samples into its tensors (below). stage/collate.hpp
//                  has the classic one, stage/field_collate.hpp the per-field ones (stack,
//                  normalized, pad, pack, ragged); the core knows only this concept, so a user
//                  may write their own.
//
// batch_stage    a per-batch stage (pin, to_device, a user's): `name`, and the hooks it
//                  implements, declared: `static constexpr sluice::hook hooks = sluice::hook::on_filled
//                  | sluice::hook::on_release;` (sluice::hook::none for none). The loader checks the
//                  declaration against the members at compile time: a hook declared but misspelt or
//                  of another signature, or implemented but not declared, fails to compile naming
//                  the hook. The hooks (T: the stage's `using slot_state = T;`, default-constructed
//                  with the ring per slot; sluice::no_slot_state when it has none):
//   hook::storage      void* allocate(std::size_t bytes);  void deallocate(void* p, std::size_t bytes);
//                      slot storage (e.g. pinned); the first stage that provides it owns every
//                      slot's host memory
//   hook::before_fill  void before_fill(sluice::batch_slot&, T&);  worker thread, before the slot's
//                      storage is (re)allocated and written (e.g. wait for the previous async copy
//                      out of it); may throw -> the batch fails, as does a throwing allocate()
//   hook::on_filled    void on_filled(sluice::batch_slot&, T&);  worker thread, after collate filled
//                      the slot (e.g. issue the async copy); may throw -> the batch fails like a
//                      stage error
//   hook::on_deliver   void on_deliver(sluice::batch_slot&, T&);  consumer thread, before the batch
//                      is handed out
//   hook::on_release   void on_release(sluice::batch_slot&, T&);  the thread dropping the batch,
//                      before the slot is reused (e.g. record an event)
//   hook::on_destroy   void on_destroy(sluice::batch_slot&, T&);  when the ring is destroyed (free
//                      device memory)
// sluice::batch_slot (core/batch.hpp) is the slot: its storage, the batch's layout, ids and count,
// and device_data / ready_event for a device copy (batch::device_data() and batch::ready_event()
// expose them to the trainer).
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "sluice/core/tensor.hpp"

namespace sluice {

struct sampler_tag {};
struct reader_tag {};
struct codec_tag {};
struct sample_stage_tag {};  // per-sample stage: read, cache, decode, map
struct batch_stage_tag {};   // per-batch stage: pin, to_device
struct collate_tag {};       // samples -> a batch's tensors

// Where work a sample does for its stage inside collate is timed (decode writes itself into the
// batch when collate asks): the stage adds its time under its own name (core/stats.hpp's
// deferred_scope), and the loader moves it from collate's busy time to that stage's after each
// batch. Each stage keeps its own entry, so two deferred stages of one pipeline (decode<"jpg"> and
// decode<"depth.png">) are each credited their own time; a stage past the first max_stages stays
// in collate's. One per writing thread (the loader's), so no sharing.
struct timing_sink {
  static constexpr std::size_t max_stages = 8;
  std::array<std::string_view, max_stages> stage{};
  std::array<std::uint64_t, max_stages> ns{};
  std::size_t count = 0;
  void add(std::string_view s, std::uint64_t t) noexcept {
    for (std::size_t i = 0; i < count; ++i)
      if (stage[i] == s) {
        ns[i] += t;
        return;
      }
    if (count < max_stages) {
      stage[count] = s;
      ns[count++] = t;
    }
  }
};

// Everything a stage may need to know about the sample it is processing. Random augmentation
// must draw only from counter_rng(seed, epoch, id) so output does not depend on the worker.
struct sample_context {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::uint64_t id = 0;        // sample id (index in the dataset)
  std::uint64_t position = 0;  // position in this epoch's order
  timing_sink* timing = nullptr;  // while collate writes: where deferred work is timed (or nowhere)
};

// The sampler's output type: a sample id, distinct from a plain integer so that a stage which
// needs records cannot be handed ids by mistake.
struct sample_id {
  std::uint64_t value = 0;
  friend constexpr bool operator==(sample_id, sample_id) = default;
};

// A record as a reader hands it out: a view into the reader's memory, its label, and where it
// came from (for error messages). Valid while the reader lives.
struct record_view {
  std::uint64_t id = 0;
  std::span<const std::byte> data;
  std::int64_t label = -1;
  std::string_view origin;  // the reader's path
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return data; }
};

template <class S>
concept sampler = requires(const S& s, std::uint64_t epoch, std::uint64_t pos) {
  typename S::sampler_concept;
  requires std::same_as<typename S::sampler_concept, sampler_tag>;
  { s.size(epoch) } -> std::convertible_to<std::size_t>;
  { s.at(epoch, pos) } -> std::convertible_to<std::uint64_t>;
};

template <class S>
concept preparing_sampler = sampler<S> && requires(S& s, std::uint64_t epoch) { s.prepare(epoch); };

template <class R>
concept record_reader = requires(const R& r, std::size_t i) {
  typename R::reader_concept;
  requires std::same_as<typename R::reader_concept, reader_tag>;
  { r.size() } -> std::convertible_to<std::size_t>;
  { r.record(i) } -> std::convertible_to<std::span<const std::byte>>;
  { r.label(i) } -> std::convertible_to<std::int64_t>;
  { r.path() } -> std::convertible_to<std::string_view>;
};

template <class C>
concept codec = requires(const C& c, std::span<const std::byte> in, std::span<std::byte> out,
                         const sample_context& ctx) {
  typename C::codec_concept;
  requires std::same_as<typename C::codec_concept, codec_tag>;
  { c.output_bytes() } -> std::convertible_to<std::size_t>;
  c.decode(in, out, ctx);
};

template <class S>
concept bytes_sample = requires(const S& s) {
  { s.id } -> std::convertible_to<std::uint64_t>;
  { s.label } -> std::convertible_to<std::int64_t>;
  { s.bytes() } -> std::convertible_to<std::span<const std::byte>>;
};

template <class S>
concept deferred_sample = requires(const S& s, std::span<std::byte> dst, const sample_context& ctx) {
  { s.id } -> std::convertible_to<std::uint64_t>;
  { s.label } -> std::convertible_to<std::int64_t>;
  { s.size_bytes() } -> std::convertible_to<std::size_t>;
  s.write_into(dst, ctx);
};

// What collate accepts.
template <class S>
concept collatable = bytes_sample<S> || deferred_sample<S>;

// A per-sample stage: declares its tag and a name, and is callable on its input with a context.
// Optional: `void report(sluice::stage_report& r) const`, called by loader.stats() on the thread
// that asks, adds the stage's own counters (r.add("hits", n)) to pipeline_stats::reports; it must be
// thread-safe against the stage's calls. A member named `report` of another signature fails to
// compile where the stage is composed.
template <class T>
concept sample_stage = requires {
  typename T::stage_concept;
  requires std::same_as<typename T::stage_concept, sample_stage_tag>;
  { T::name } -> std::convertible_to<std::string_view>;
};

struct stage_report;  // core/stats.hpp
template <class T>
concept reports_itself = requires(const T& t, stage_report& r) { t.report(r); };
// Whether T's `report` member, if any, is the hook above.
template <class T>
inline constexpr bool report_hook_well_formed = reports_itself<T> || !requires { &T::report; };

template <class T>
concept batch_stage = requires {
  typename T::stage_concept;
  requires std::same_as<typename T::stage_concept, batch_stage_tag>;
  { T::name } -> std::convertible_to<std::string_view>;
};

// The hooks of a batch stage (above), as a set: hook::on_filled | hook::on_release.
enum class hook : std::uint8_t {
  none = 0,
  storage = 1,
  before_fill = 2,
  on_filled = 4,
  on_deliver = 8,
  on_release = 16,
  on_destroy = 32,
};
constexpr hook operator|(hook a, hook b) noexcept {
  return static_cast<hook>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
// Whether set `s` holds hook `h`.
constexpr bool has_hook(hook s, hook h) noexcept {
  return (static_cast<std::uint8_t>(s) & static_cast<std::uint8_t>(h)) != 0;
}
// The slot state a batch stage's hooks receive when it declares no `using slot_state = T;`.
struct no_slot_state {};

// A prefetch-depth policy decides how many batches the pipeline may prepare ahead of the
// consumer. The loader calls it on the consumer's thread, once per delivered batch, with what it
// measured (depth_signal):
//   std::size_t initial_depth() const;           depth at the start
//   std::size_t max_depth() const;               upper bound: ring slots are max_depth + workers
//   std::size_t update(const depth_signal& s);   new depth (clamped to [1, max_depth])
//   std::size_t update_workers(const depth_signal& s);  optional: the active worker count too
//                                                (clamped to [1, max_workers]; policy/workers.hpp)
// The ring holds at most depth + workers batches, so the depth is also the memory bound.
// policy/depth_fixed.hpp and policy/depth.hpp have the policies sluice ships.
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

// A collator writes the samples of one batch into the tensors of one block of slot storage. The
// loader calls it on a worker thread, per batch, in this order:
//   begin(scratch)                     a new batch (scratch: per-worker state, reused: no
//                                      allocation once warm)
//   check(sample, scratch)             each sample as it arrives; may throw: the sample then
//                                      fails (its error reaches the trainer, or on_error::skip
//                                      drops it) before anything is written
//   plan(samples, scratch, layout)     the batch's tensors (names, dtypes, shapes, offsets);
//                                      layout.bytes is what the slot must hold
//   write(sample, i, base, scratch, ctx)  sample i into its place; may throw (a decoder): the
//                                      sample fails and, under skip, the batch is planned again
//   finish(samples, base, scratch, layout) what depends on the whole batch (offsets, lengths,
//                                      masks, padding)
// plus batch_size(), drop_last(), a `name` for errors and stats, and `batch_type<Sample>`: the
// handle the trainer receives (a typed_batch when the tensors are known at compile time).
// A collator may also define `bind<Sample>()`, returning the collator to use for that sample
// type (the classic collate turns into a per-field one for samples with fields).
// A collator (or a per-field collator) whose write() may run for different samples of one batch
// on several threads at once, each with its own copy of the scratch as plan() left it, declares
// `static constexpr bool concurrent_write = true;`: its write() touches only sample i's place in
// the batch and keeps nothing in the scratch that finish() reads (temporary buffers are fine).
// The loader then lets idle workers write part of a batch (loader_options::split_batches). Every
// collator sluice ships declares it; a collator that does not is always written by one thread.
template <class C>
inline constexpr bool writes_concurrently = requires {
  requires C::concurrent_write;
};

template <class C>
concept collator = requires(const C& c) {
  typename C::collate_concept;
  requires std::same_as<typename C::collate_concept, collate_tag>;
  { C::name } -> std::convertible_to<std::string_view>;
  { c.batch_size() } -> std::convertible_to<std::size_t>;
  { c.drop_last() } -> std::convertible_to<bool>;
};

template <class C, class Sample>
concept collator_for =
    collator<C> && requires(const C& c, const Sample& s, std::span<const Sample> all,
                            typename C::scratch_type& sc, batch_layout& layout, std::byte* base,
                            std::size_t i, const sample_context& ctx) {
      typename C::template batch_type<Sample>;
      c.begin(sc);
      c.check(s, sc);
      c.plan(all, sc, layout);
      c.write(s, i, base, sc, ctx);
      c.finish(all, base, sc, layout);
    };

// The file a sample came from, when it says (record views and field samples carry `origin`).
// The pipeline takes it from the first stage output that names one (sample_chain::apply), so a
// wrapper stage need not forward it.
template <class S>
std::string_view origin_of(const S& s) noexcept {
  if constexpr (requires { { s.origin } -> std::convertible_to<std::string_view>; }) return s.origin;
  else if constexpr (requires { { s.origin() } -> std::convertible_to<std::string_view>; }) return s.origin();
  else return {};
}

}  // namespace sluice
