// sluice/core/loader.hpp — the running pipeline: the loader a chain's `| prefetch(...)` makes,
// and the range of one epoch's batches.
//
// A batch is a ticket: batch k covers positions [start + k*B, start + (k+1)*B) of the sampler's
// order, a pure function of (seed, epoch, position), so whichever worker fills it, it is the same
// batch. Workers claim tickets in order and fill free slots of a ring (C = max_depth + max_workers
// slots; a kept batch keeps its slot, and the ring grows within loader_options::hold_budget); the
// consumer takes batches in order, and a dropped batch returns its slot. workers = 0 fills in the
// calling thread through the same code.
//
// Guarantees: bit-identical batches for any worker count; memory bounded by the ring and the hold
// budget; no allocation in steady state; a stage's error reaches the consumer as a stage_error
// naming the stage and the sample (on_error::skip drops and counts it); files changed under the
// loader fail their samples instead of delivering wrong bytes (core/file_guard.hpp); destroying
// the loader mid-epoch returns within about one sample's work.
// Threads: the workers are the loader's own; the trainer takes batches on its own thread.
// Parts: the options (core/loader_options.hpp); the ring's state machine (core/detail/ring.hpp)
// over batch_fill, batch_stages, ring_slots, shared_write and epoch_history in core/detail/, each
// with its invariants. How it runs and why: docs/loader.md; the hooks: core/concepts.hpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/detail/ring.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/loader_options.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/policy/depth_fixed.hpp"

namespace sluice {

// loader_state (where an interrupted epoch stands, and a fingerprint of the pipeline it stands
// in), its checks and its stored form: core/state.hpp.

// The running pipeline. Move-only; destroying it stops the workers (promptly, mid-epoch too).
template <class BChain, depth_policy Depth = depth::fixed>
class loader {
  using ring_type = detail::ring<BChain, Depth>;

 public:
  class epoch_range;

  loader(BChain chain, Depth depth, loader_options opt)
      : ring_(new ring_type(std::move(chain), std::move(depth), opt), [](ring_type* r) {
          if (!r->forked_away()) delete r;  // a forked child's copy is left in memory (thread_owner)
        }) {}
  loader(loader&&) noexcept = default;
  loader& operator=(loader&& o) noexcept {
    if (this != &o) {
      if (ring_) ring_->shutdown();
      ring_ = std::move(o.ring_);
    }
    return *this;
  }
  ~loader() {
    if (ring_) ring_->shutdown();
  }

  // The batches of epoch `e` in order: `for (auto& b : loader.epoch(e))`.
  [[nodiscard]] epoch_range epoch(std::uint64_t e) { return epoch_range(ring_.get(), e, 0); }
  // Resumes an interrupted epoch where `state()` said it stood. A state whose fingerprint does
  // not fit this loader (another sampler, seed, dataset, batch or augmentation seed; or one made
  // by hand) is a usage_error naming each difference (core/state.hpp).
  [[nodiscard]] epoch_range resume(const loader_state& st) {
    const loader_state now = ring_->state(st.epoch, st.position);
    check_resumable(st, now.fingerprint, now.seed);
    return epoch_range(ring_.get(), st.epoch, st.position);
  }
  // Where the current epoch stands (delivered batches count as consumed), with the fingerprint
  // resume() checks; save it with sluice::save_state.
  [[nodiscard]] loader_state state() const { return ring_->state(); }
  // This loader's state at any (epoch, position): to start a run part-way into an epoch.
  [[nodiscard]] loader_state state(std::uint64_t epoch, std::uint64_t position) const {
    return ring_->state(epoch, position);
  }
  [[nodiscard]] pipeline_stats stats() const { return ring_->stats(); }
  // One epoch's figures: per-stage busy time, consumer wait and stall fraction, worker busy and
  // wait, samples, batches (core/stats.hpp). The most recent run of epoch `e` among the last
  // epoch_stats_kept (16) runs, the running one included (figures so far, complete == false);
  // nothing for an epoch older than that. bottleneck(*loader.epoch_stats(e)) names its limit.
  [[nodiscard]] std::optional<sluice::epoch_stats> epoch_stats(std::uint64_t e) const {
    return ring_->stats_of_epoch(e);
  }
  // The last epoch_stats_kept runs, oldest first (for a report).
  [[nodiscard]] std::vector<sluice::epoch_stats> recent_epochs() const { return ring_->recent_epochs(); }
  // The batches a whole epoch `e` yields (what len() of a Python loader says).
  [[nodiscard]] std::uint64_t batches_for(std::uint64_t e) const { return ring_->batches_for(e); }
  // The batches resume(st) yields: 0 for a state taken after an epoch's last batch.
  [[nodiscard]] std::uint64_t batches_from(const loader_state& st) const {
    return ring_->batches_from(st.epoch, st.position);
  }
  // While the trainer waits for a batch, `check` runs every `every`; true makes next() throw
  // sluice::interrupted (the epoch goes on: the next call waits for the same batch). The Python
  // binding checks for Ctrl-C this way. Set it before an epoch starts.
  void set_interrupt(std::function<bool()> check, std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
    ring_->set_interrupt(std::move(check), every);
  }
  void set_workers(std::size_t n) { ring_->set_workers(n); }
  [[nodiscard]] auto& sampler() noexcept { return ring_->chain().chain.sampler(); }
  [[nodiscard]] Depth& depth_policy() noexcept { return ring_->depth_policy(); }

  class epoch_range {
   public:
    class iterator {
     public:
      using value_type = typename ring_type::batch_type;
      using difference_type = std::ptrdiff_t;
      iterator() = default;
      iterator(ring_type* r, std::uint64_t run) : ring_(r), run_(run) { advance(); }
      value_type& operator*() noexcept { return current_; }
      value_type* operator->() noexcept { return &current_; }
      iterator& operator++() {
        current_.reset();  // free the slot before waiting for the next batch
        advance();
        return *this;
      }
      void operator++(int) { ++*this; }
      friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept { return !it.current_; }

     private:
      void advance() {
        // Another epoch begun on this loader (loader.epoch() or resume() again, e.g. an evaluation
        // pass on the training loader) cancelled this one: going on would end it early in silence.
        if (ring_->runs() != run_)
          throw usage_error("sluice: this epoch was cancelled by a later loader.epoch() or resume() on the same "
                            "loader, which runs one epoch at a time; iterate the newest range, or give "
                            "the other pass (evaluation) a loader of its own");
        current_ = value_type(ring_->next());
      }
      ring_type* ring_ = nullptr;
      std::uint64_t run_ = 0;
      value_type current_;
    };

    epoch_range(ring_type* r, std::uint64_t e, std::uint64_t start) : ring_(r), epoch_(e), start_(start) {}
    epoch_range(const epoch_range&) = delete;
    epoch_range& operator=(const epoch_range&) = delete;
    ~epoch_range() {
      if (started_ && ring_->runs() == run_) ring_->end_epoch();  // not a later range's run
    }
    iterator begin() {
      if (started_ && !first_pending_)
        throw usage_error("sluice: an epoch range can be iterated once; call loader.epoch(e) again");
      if (!started_) {
        ring_->begin_epoch(epoch_, start_);
        started_ = true;
        run_ = ring_->runs();
      }
      // A wait for the first batch given up (sluice::interrupted) may begin() again: it waits for
      // the same batch.
      first_pending_ = true;
      iterator it(ring_, run_);
      first_pending_ = false;
      return it;
    }
    std::default_sentinel_t end() const noexcept { return {}; }
    // Number of batches this run yields (known once begun).
    [[nodiscard]] std::uint64_t size() const { return ring_->batches_in_epoch(); }

   private:
    ring_type* ring_;
    std::uint64_t epoch_, start_, run_ = 0;
    bool started_ = false, first_pending_ = false;
  };

 private:
  std::shared_ptr<ring_type> ring_;
};

}  // namespace sluice
