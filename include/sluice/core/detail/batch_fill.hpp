// sluice/core/detail/batch_fill.hpp — one batch's fill, without the ring around it (a part of
// the loader's ring, core/detail/ring.hpp).
//
// What: a fill has two phases of its own. gather() runs the per-sample stages over the batch's
// positions and lets the collator check each sample (views only, nothing written); write() plans
// the batch's tensors, asks for storage, writes every sample (through the ring: alone or shared),
// finishes the batch and checks the files it read. Between them the ring runs its before_fill hooks.
// Invariants: under on_error::skip a sample that fails in either phase is dropped and counted, the
// samples, positions, origins and ids stay aligned, and after a drop in write() the collator's
// checks run again on the samples left before the batch is re-planned; otherwise the first failure
// becomes the batch's error as a stage_error naming the stage and the sample. A fill told it is
// cancelled returns false at once, leaving nothing a batch can see.
// Threads: one fill runs on one thread (the writes it hands out may run on several).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/detail/shared_write.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/file_guard.hpp"
#include "sluice/core/loader_options.hpp"
#include "sluice/core/stats.hpp"

namespace sluice::detail {

// What a worker keeps between batches: the batch's samples (views), their positions, and the
// collator's scratch. Cleared per batch, never shrunk: no allocation once warm.
template <class Sample, class Collate>
struct worker_scratch {
  std::vector<Sample> samples;
  std::vector<std::uint64_t> positions;
  std::vector<std::string_view> origins;  // each sample's file (sample_chain::apply says which)
  detail::batch_file_check files;         // the files' identities, checked after each write
  std::string changed_why;
  typename Collate::scratch_type collate;
  typename Collate::scratch_type helping;  // a copy of another worker's plan, while helping it
  std::uint64_t join_wait_ns = 0;          // this batch's wait for its helpers
  std::uint64_t helping_ns = 0;            // time spent on other batches while filling this one
  timing_sink timing;                      // deferred stages' time while writing this batch
  bool helping_warm = false;               // `helping` has held this worker's own plan once
};

// Removes v[i], keeping the order; samples need not be assignable (a view with a const
// member, a type that counts its copies), only movable.
template <class T>
void erase_at(std::vector<T>& v, std::size_t i) {
  if constexpr (std::is_move_assignable_v<T>) {
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
  } else {
    for (; i + 1 < v.size(); ++i) {
      std::destroy_at(&v[i]);
      std::construct_at(&v[i], std::move(v[i + 1]));
    }
    v.pop_back();
  }
}

// Stores the exception being handled in `to` as a stage_error naming `stage` (or as it is, when
// a stage already named itself).
inline void store_stage_error(std::exception_ptr& to, std::string_view stage, std::uint64_t id) noexcept {
  try {
    throw_stage_error(stage, id);
  } catch (...) {
    to = std::current_exception();
  }
}

// The run a fill belongs to, and the loader's options it follows.
struct fill_run {
  std::uint64_t seed = 0, epoch = 0;
  std::uint64_t first = 0, last = 0;  // the batch's positions [first, last) in the epoch's order
  on_error errors = on_error::raise;
  bool stage_timing = true;  // sample one in stage_timing_stride samples' stage times
  bool check_files = true;   // loader_options::check_files
};

// What the ring's write of a batch reports: the lowest sample that failed (no_failure when none
// did) and its error.
struct write_outcome {
  std::size_t failed = no_failure;
  std::exception_ptr error;
};

template <class SampleChain, class Collate>
class batch_fill {
 public:
  using sample_type = typename SampleChain::output_type;
  using scratch_type = worker_scratch<sample_type, Collate>;
  static constexpr std::size_t n_stages = SampleChain::stage_count;

  // What one fill counted, for the worker's counters.
  struct tally {
    std::uint64_t stage_ns[n_stages + 1] = {};  // sampled times (+1: never empty)
    std::uint64_t skipped = 0;
  };

  batch_fill(const SampleChain& chain, const Collate& col) noexcept : chain_(chain), col_(col) {}

  // Phase 1: the samples of positions [run.first, run.last), each through the per-sample stages
  // and checked by the collator, into ws (ids[i] the i-th kept sample's id). `sample_counter`
  // counts samples across batches for the timing stride. A failure is dropped and counted
  // (on_skip() runs inside its handler) under on_error::skip, else it ends the phase as `error`.
  // Returns false when cancelled() turned true before a sample.
  template <class Cancelled, class OnSkip>
  bool gather(const fill_run& run, scratch_type& ws, std::uint64_t* ids, std::uint64_t& sample_counter, tally& t,
              std::exception_ptr& error, Cancelled&& cancelled, OnSkip&& on_skip) const {
    ws.samples.clear();
    ws.positions.clear();
    ws.origins.clear();
    try {
      col_.begin(ws.collate);
    } catch (...) {
      store_stage_error(error, Collate::name, run.first);
      return true;
    }
    const auto& sampler = chain_.sampler();
    for (std::uint64_t pos = run.first; pos < run.last; ++pos) {
      if (cancelled()) return false;
      std::uint64_t id = 0;
      try {
        const fault_watch watch;  // a page of a file truncated meanwhile, touched by this sample
        id = sampler.at(run.epoch, pos);
        sample_context ctx{run.seed, run.epoch, id, pos};
        std::string_view origin;
        if (run.stage_timing && (sample_counter++ % stage_timing_stride) == 0) {
          ws.samples.push_back(chain_.template apply<true>(id, ctx, origin, t.stage_ns));
        } else {
          ws.samples.push_back(chain_.apply(id, ctx, origin));
        }
        try {
          col_.check(ws.samples.back(), ws.collate);
        } catch (...) {
          ws.samples.pop_back();
          throw_stage_error(Collate::name, id);
        }
        if (watch.suspect()) [[unlikely]] {
          try {
            watch.check(origin);
          } catch (...) {
            ws.samples.pop_back();
            throw_stage_error("read", id);
          }
        }
        ids[ws.positions.size()] = id;
        ws.positions.push_back(pos);
        ws.origins.push_back(origin);
      } catch (...) {
        if (run.errors == on_error::skip) {
          ++t.skipped;
          on_skip();
          continue;
        }
        error = std::current_exception();
        break;
      }
    }
    return true;
  }

  // Phase 2 (after the ring's before_fill hooks): plans slot s's tensors from ws's samples,
  // storage(s, bytes) makes room, write(s, ws) writes every sample, then the collator finishes
  // and the files the batch read are checked. A sample that fails (a decoder, a file changed) is
  // dropped under on_error::skip and the batch re-planned; otherwise the failure is s.error. On
  // error s.layout is left empty. Returns false when cancelled() turned true.
  template <class Slot, class Cancelled, class Storage, class Write, class OnSkip>
  bool write(const fill_run& run, Slot& s, scratch_type& ws, tally& t, Cancelled&& cancelled, Storage&& storage,
             Write&& write_samples, OnSkip&& on_skip) const {
    std::string_view failing = Collate::name;
    bool recheck = false;
    if (ws.samples.empty()) s.layout.clear();  // every sample skipped: nothing to plan or write
    while (!s.error && !ws.samples.empty()) {
      if (cancelled()) return false;
      std::size_t failed_at = ws.samples.size();
      try {
        failing = Collate::name;
        if (recheck) {  // after a drop: what the collator learnt may have come from that sample
          recheck = false;
          col_.begin(ws.collate);
          for (std::size_t i = 0; i < ws.samples.size(); ++i) {
            failed_at = i;
            col_.check(ws.samples[i], ws.collate);
          }
          failed_at = ws.samples.size();
        }
        s.layout.clear();
        col_.plan(std::span<const sample_type>(ws.samples), ws.collate, s.layout);
        storage(s, s.layout.bytes);
        if (write_outcome r = write_samples(s, ws); r.failed != no_failure) {
          if (cancelled()) return false;
          failed_at = r.failed;
          std::rethrow_exception(r.error);
        }
        if (cancelled()) return false;
        failed_at = ws.samples.size();
        col_.finish(std::span<const sample_type>(ws.samples), s.data, ws.collate, s.layout);
        // The files the batch read, as they are now: a truncation inside a page or an overwrite
        // in place shows no fault (core/file_guard.hpp's batch_file_check).
        if (const std::size_t f = run.check_files ? ws.files.first_changed(ws.origins, ws.changed_why)
                                                  : ws.samples.size();
            f < ws.samples.size()) {
          failed_at = f;
          failing = "read";
          try {
            throw format_error(std::string(ws.origins[f]), {.record = s.ids[f]},
                               "the file changed while in use: " + ws.changed_why +
                                   "; its records can no longer be trusted (reopen the dataset)");
          } catch (...) {
            throw_stage_error("read", s.ids[f]);
          }
        }
        break;
      } catch (...) {
        const std::uint64_t id = failed_at < ws.samples.size() ? s.ids[failed_at] : run.first;
        if (run.errors == on_error::skip && failed_at < ws.samples.size()) {
          ++t.skipped;
          on_skip();
          erase_at(ws.samples, failed_at);
          ws.positions.erase(ws.positions.begin() + static_cast<std::ptrdiff_t>(failed_at));
          ws.origins.erase(ws.origins.begin() + static_cast<std::ptrdiff_t>(failed_at));
          for (std::size_t i = failed_at; i < ws.samples.size(); ++i) s.ids[i] = s.ids[i + 1];
          recheck = true;
          continue;
        }
        store_stage_error(s.error, failing, id);
      }
    }
    if (s.error) s.layout.clear();
    return true;
  }

 private:
  const SampleChain& chain_;
  const Collate& col_;
};

}  // namespace sluice::detail
