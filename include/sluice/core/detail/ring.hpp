// sluice/core/detail/ring.hpp — the loader's ticket/slot state machine (core/loader.hpp's ring).
//
// What: batch k of an epoch is a ticket; workers claim tickets in order, fill a free slot each
// (detail::batch_fill), and the trainer's next() takes the batches in ticket order. Besides: the
// split of one batch's write between workers (detail::shared_write), the warming thread that
// prepares slots ahead of the first batches (detail::ring_slots), the depth policy's calls, the
// interrupt check while the trainer waits, and the figures (detail::epoch_history, pipeline_stats).
// Invariants: a ticket is filled once per run (generation_ counts runs; a fill of an older run is
// dropped); the trainer receives tickets in order, each once; live slots (filling, ready, held,
// warming) never exceed the ring's slots, and a kept batch's slot is replaced by growing the table
// within loader_options::hold_budget; a slot's storage only grows. workers = 0 runs the same fill
// in the trainer's thread inside next().
// Threads: every shared field is under m_ (generation_, stop_ and urgent_ are also read without
// it); a worker touches only its own scratch, counters and write job outside m_. The reasons for
// each rule and the measurements behind them: docs/loader.md ("How it runs").
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "sluice/core/affinity.hpp"
#include "sluice/core/batch.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/detail/batch_fill.hpp"
#include "sluice/core/detail/batch_stages.hpp"
#include "sluice/core/detail/epoch_history.hpp"
#include "sluice/core/detail/ring_slots.hpp"
#include "sluice/core/detail/shared_write.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/file_guard.hpp"
#include "sluice/core/loader_options.hpp"
#include "sluice/core/pipeline.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/policy/depth_fixed.hpp"

namespace sluice::detail {

template <class BChain, depth_policy Depth>
class ring;

template <class SampleChain, class Collate, class... BatchStages, depth_policy Depth>
class ring<batch_chain<SampleChain, Collate, BatchStages...>, Depth> final
    : public ring_base,
      public std::enable_shared_from_this<ring<batch_chain<SampleChain, Collate, BatchStages...>, Depth>> {
  using stage_set = batch_stage_set<BatchStages...>;
  using slot_type = slot<typename stage_set::states>;
  static_assert(stage_set::template checked<slot_type>);
  using sample_type = typename SampleChain::output_type;
  using scratch_type = worker_scratch<sample_type, Collate>;
  static constexpr std::size_t n_stages = SampleChain::stage_count;
  // Timed stages: the per-sample stages, collate, then the batch stages (their worker-side hooks,
  // before_fill and on_filled, timed per batch). n_last indexes the last one.
  static constexpr std::size_t n_batch = sizeof...(BatchStages);
  static constexpr std::size_t n_last = n_stages + n_batch;
  // Whether a batch's write can be shared between workers (loader_options::split_batches).
  static constexpr bool can_split = writes_concurrently<Collate> &&
                                    std::is_copy_assignable_v<typename Collate::scratch_type>;
  static constexpr std::uint64_t no_ticket = static_cast<std::uint64_t>(-1);

  using write_job = detail::write_job<slot_type, sample_type, typename Collate::scratch_type>;
  using fill_type = batch_fill<SampleChain, Collate>;

  static constexpr std::array<std::string_view, n_last + 1> all_stage_names = [] {
    std::array<std::string_view, n_last + 1> a{};
    for (std::size_t i = 0; i < n_stages; ++i) a[i] = SampleChain::stage_names[i];
    a[n_stages] = "collate";
    std::size_t j = n_stages + 1;
    ((a[j++] = BatchStages::name), ...);
    return a;
  }();

 public:
  using batch_type = typename Collate::template batch_type<sample_type>;

  ring(batch_chain<SampleChain, Collate, BatchStages...> chain, Depth depth, loader_options opt)
      : chain_(std::move(chain)), depth_policy_(std::move(depth)), opt_(opt) {
    inline_ = opt_.workers == 0;
    if (inline_ && opt_.max_workers != 0)
      throw usage_error(
          "sluice: prefetch: workers = 0 fills each batch in the trainer's own thread, so max_workers = " +
          std::to_string(opt_.max_workers) + " has no threads to tune; give workers >= 1 with it");
    (void)detail::unpinned_set();  // before the trainer pins its thread, if it does
    detail::check_cpus(opt_.cpus, "prefetch({.cpus})");
    if (opt_.max_workers < opt_.workers) opt_.max_workers = opt_.workers;
    if (inline_) opt_.warm_slots = false;  // no thread besides the trainer's
    lanes_ = std::max<std::size_t>(1, opt_.max_workers);
    max_depth_ = std::max<std::size_t>(1, depth_policy_.max_depth());
    depth_ = std::clamp<std::size_t>(depth_policy_.initial_depth(), 1, max_depth_);
    active_workers_ = opt_.workers;
    // In the calling thread nothing runs ahead: a slot for the batch being filled and one for the
    // batch the trainer still has while it asks for the next (a Python loop's variable); more
    // kept batches grow the ring as with workers.
    slots_ = slot_table<slot_type>(inline_ ? 2 : max_depth_ + opt_.max_workers);
    counters_ = std::make_unique<worker_counters<n_last>[]>(lanes_);
    // Each worker's sample lists, reserved here so no allocation waits for a thread to start.
    scratch_ = std::make_unique<scratch_type[]>(lanes_);
    split_ = can_split && opt_.split_batches && opt_.max_workers > 1;
    jobs_ = std::make_unique<write_job[]>(lanes_);
    if constexpr (warms_slots) warm_threads_.reserve(slots_.size());
    for (std::size_t w = 0; w < lanes_; ++w) {
      scratch_[w].samples.reserve(chain_.collate.batch_size());
      scratch_[w].positions.reserve(chain_.collate.batch_size());
      scratch_[w].origins.reserve(chain_.collate.batch_size());
    }
  }
  ring(const ring&) = delete;
  ring& operator=(const ring&) = delete;

  ~ring() {
    shutdown();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      auto& s = slots_[i];
      (void)stages_.template invoke_hook<hook::on_destroy>(s, 0, on_hook_failure::go_on);
      if (s.data != nullptr) stages_.deallocate(s.data, s.storage_bytes);
    }
  }

  // Whether this is a forked child's copy of a ring whose workers another process started: it
  // must be left in memory, not destroyed (loader's deleter; detail::thread_owner says why).
  [[nodiscard]] bool forked_away() const noexcept { return owner_.forked_away(); }

  // Stops and joins every worker. Idempotent; called by the loader's destructor.
  void shutdown() noexcept {
    if (owner_.forked_away()) return;  // a forked child: the threads are not here (thread_owner)
    {
      std::lock_guard lk(m_);
      stop_.store(true, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_relaxed);
    }
    cv_work_.notify_all();
    cv_ready_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    // Only workers start warming runs: with the workers joined the list is final.
    for (auto& t : warm_threads_)
      if (t.joinable()) t.join();
    warm_threads_.clear();
  }

  // Starts (or restarts) an epoch run at `start` samples into the epoch's order.
  void begin_epoch(std::uint64_t epoch, std::uint64_t start) {
    if (owner_.forked_away()) throw owner_.forked_error("this loader");
    check_all_files();  // a file replaced or written since it was opened fails its samples
    std::unique_lock lk(m_);
    generation_.fetch_add(1, std::memory_order_relaxed);  // cancels a running epoch
    active_ = false;
    cv_work_.notify_all();
    cv_idle_.wait(lk, [&] { return filling_ == 0; });  // no worker touches the sampler now
    for (std::size_t i = 0; i < slots_.size(); ++i) {  // drop what the old run prepared
      auto& s = slots_[i];
      if (s.status == slot_status::ready || s.status == slot_status::failed) {
        s.status = slot_status::free;
        s.error = nullptr;
        --live_;
      }
    }
    history_.close(snapshot_locked(), delivered_ >= num_batches_);  // the workers are idle: final counters
    if constexpr (preparing_sampler<typename SampleChain::sampler_type>) chain_.chain.sampler().prepare(epoch);
    const std::uint64_t n = chain_.chain.sampler().size(epoch);
    if (start > n)
      throw usage_error("sluice: resume position " + std::to_string(start) + " is past the end of epoch " +
                        std::to_string(epoch) + " (" + std::to_string(n) + " samples)");
    epoch_ = epoch;
    start_ = start;
    total_ = n;
    const std::uint64_t b = chain_.collate.batch_size();
    const std::uint64_t rem = n - start;
    num_batches_ = chain_.collate.drop_last() ? rem / b : (rem + b - 1) / b;
    next_ticket_ = 0;
    delivered_ = 0;
    clock_.begin_epoch(static_cast<std::size_t>(num_batches_));
    runs_.fetch_add(1, std::memory_order_relaxed);
    auto begin = snapshot_locked();
    begin.epoch = epoch;
    history_.open(begin);
    active_ = true;
    if (threads_.empty()) {
      threads_.reserve(opt_.max_workers);
      owner_.started();
      for (std::size_t w = 0; w < opt_.max_workers; ++w) threads_.emplace_back([this, w] { worker_main(w); });
    }
    cv_work_.notify_all();
  }

  // Epoch runs begun so far: the serial of the run begin_epoch just started. An epoch range keeps
  // its run's, so that one a later run superseded neither ends that run nor goes on silently.
  [[nodiscard]] std::uint64_t runs() const noexcept { return runs_.load(std::memory_order_relaxed); }

  // Cancels the running epoch (the trainer left the loop early). Batches already held stay valid.
  void end_epoch() {
    if (owner_.forked_away()) return;
    std::lock_guard lk(m_);
    if (!active_) return;
    history_.mark_end(now_ns());  // (its last batch may have ended it: the first mark stays)
    generation_.fetch_add(1, std::memory_order_relaxed);
    active_ = false;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      auto& s = slots_[i];
      if (s.status == slot_status::ready || s.status == slot_status::failed) {
        s.status = slot_status::free;
        s.error = nullptr;
        --live_;
      }
    }
    cv_work_.notify_all();
  }

  // The next batch in order, or an empty handle at the end of the epoch.
  batch next() {
    if (owner_.forked_away()) throw owner_.forked_error("this loader");
    const std::uint64_t t_request = now_ns();
    clock_.on_request(t_request);
    std::unique_lock lk(m_);
    if (release_error_) {  // a batch stage's on_release failed: the trainer hears of it here
      std::exception_ptr e = std::exchange(release_error_, nullptr);
      stop_epoch_locked();
      lk.unlock();
      std::rethrow_exception(e);
    }
    slot_type* s = nullptr;
    std::uint64_t k = 0;
    for (;;) {
      if (!active_ || delivered_ >= num_batches_) {
        history_.mark_end(now_ns());
        active_ = false;
        return {};
      }
      k = delivered_;
      s = find_ticket_locked(k);
      if (s == nullptr) {
        grow_for_kept_locked();
        if (consumer_held_ >= slots_.size()) throw_ring_full_locked(k);
        if (inline_) {  // workers = 0: this thread fills batch k, then takes it
          if (stop_.load(std::memory_order_relaxed)) return {};
          next_ticket_ = k;
          inline_next_check_ns_ = now_ns() +
                                  static_cast<std::uint64_t>(
                                      std::chrono::duration_cast<std::chrono::nanoseconds>(interrupt_every_).count());
          run_ticket(lk, 0, scratch_[0], inline_sample_counter_);
          if (std::exchange(inline_interrupted_, false)) throw interrupted();  // the same batch next time
          continue;
        }
        await_locked(k);
        const auto arrived = [&] {
          return (s = find_ticket_locked(k)) != nullptr || stop_.load(std::memory_order_relaxed) || !active_;
        };
        if (!interrupt_) {
          cv_ready_.wait(lk, arrived);
        } else {
          // The check runs without the ring's lock (a binding's check takes the GIL, and a thread
          // holding the GIL may be waiting for this lock in stats()).
          while (!cv_ready_.wait_for(lk, interrupt_every_, arrived)) {
            lk.unlock();
            const bool stop = interrupt_();
            lk.lock();
            if (stop && !arrived()) {
              await_locked(no_ticket);
              throw interrupted();
            }
          }
        }
        await_locked(no_ticket);
        if (s == nullptr) {
          if (stop_.load(std::memory_order_relaxed)) return {};
          continue;
        }
      }
      if (s->status == slot_status::ready && s->count == 0) {  // every sample skipped: not delivered
        skipped_total_ += s->skipped;
        s->status = slot_status::free;
        --live_;
        ++delivered_;
        cv_work_.notify_all();
        continue;
      }
      break;
    }
    const std::size_t ready_now = count_ready_locked();
    const std::uint64_t t_receive = now_ns();
    if (s->status == slot_status::failed) {
      std::exception_ptr e = std::exchange(s->error, nullptr);
      s->status = slot_status::free;
      --live_;
      stop_epoch_locked();
      lk.unlock();
      std::rethrow_exception(e);
    }
    s->status = slot_status::held;
    s->holders.store(1, std::memory_order_relaxed);
    ++consumer_held_;
    ++delivered_;
    // The last batch handed over ends the run: a trainer that takes len(loader) batches and never
    // asks past the end (zip, range) must not have its validation counted as the epoch's time.
    if (delivered_ >= num_batches_) history_.mark_end(t_receive);
    delivered_total_ += 1;
    samples_total_ += s->count;
    skipped_total_ += s->skipped;
    clock_.on_receive(t_request, t_receive);
    depth_signal sig{
        k, t_receive - t_request, clock_pending_busy(t_request), ready_now, depth_, active_workers_, slot_bytes_};
    std::size_t nd = std::clamp<std::size_t>(depth_policy_.update(sig), 1, max_depth_);
    if (nd != depth_) {
      depth_ = nd;
      cv_work_.notify_all();
    }
    // A policy that also tunes the worker count (policy/workers.hpp) answers update_workers.
    if constexpr (requires { depth_policy_.update_workers(sig); }) {
      if (!inline_) {
        const std::size_t nw = std::clamp<std::size_t>(depth_policy_.update_workers(sig), 1, opt_.max_workers);
        if (nw != active_workers_) {
          active_workers_ = nw;
          cv_work_.notify_all();
        }
      }
    }
    last_receive_ns_ = t_receive;
    lk.unlock();
    // A delivered batch no longer counts against depth + workers (the trainer holds it now): a
    // worker waiting for that room may go on.
    cv_work_.notify_all();
    if (std::exception_ptr e = stages_.template invoke_hook<hook::on_deliver>(*s, s->count != 0 ? s->ids[0] : 0,
                                                                              on_hook_failure::stop)) {
      // The batch is not handed out: its slot goes back to the ring and the epoch stops, as for a
      // failed batch; the trainer gets the stage's error.
      {
        std::lock_guard relock(m_);
        s->status = slot_status::free;
        --live_;
        --consumer_held_;
        delivered_total_ -= 1;
        samples_total_ -= s->count;
        stop_epoch_locked();
      }
      std::rethrow_exception(e);
    }
    return batch(this->shared_from_this(), s);
  }

  void release(slot_base& base) noexcept override {
    if (owner_.forked_away()) return;  // a forked child keeps the slot: its ring is left as it is
    auto& s = static_cast<slot_type&>(base);
    const std::exception_ptr failed = stages_.template invoke_hook<hook::on_release>(s, s.count != 0 ? s.ids[0] : 0,
                                                                                     on_hook_failure::go_on);
    std::byte* give_back = nullptr;
    std::size_t give_back_bytes = 0;
    {
      std::lock_guard lk(m_);
      s.status = slot_status::free;
      --live_;
      --consumer_held_;
      if (failed && !release_error_) release_error_ = failed;
      if (gives_back_storage && slots_.is_grown(s) && s.data != nullptr &&
          sized_slots_locked() > consumer_held_ + room_locked()) {
        give_back = s.data;  // a kept batch let go: its grown slot is not needed to run
        give_back_bytes = s.storage_bytes;
        s.data = nullptr;
        s.storage_bytes = 0;
      }
    }
    cv_work_.notify_all();
    if (give_back != nullptr) stages_.deallocate(give_back, give_back_bytes);
  }

  // Changes the number of active workers (within max_workers). Order and content of batches do
  // not change: a ticket's batch does not depend on which worker fills it.
  void set_workers(std::size_t n) {
    std::lock_guard lk(m_);
    if (inline_) return;  // no worker threads to move (workers = 0)
    active_workers_ = std::clamp<std::size_t>(n, 1, opt_.max_workers);
    cv_work_.notify_all();
  }

  [[nodiscard]] loader_state state() const {
    std::uint64_t epoch = 0, position = 0;
    {
      std::lock_guard lk(m_);
      epoch = epoch_;
      position = start_ + std::min<std::uint64_t>(delivered_ * chain_.collate.batch_size(), total_ - start_);
    }
    return state(epoch, position);
  }
  // This pipeline's state at (epoch, position), fingerprint included. Reads only what does not
  // change while an epoch runs (the sampler is prepared before the workers start).
  [[nodiscard]] loader_state state(std::uint64_t epoch, std::uint64_t position) const {
    return {opt_.seed, epoch, position, chain_fingerprint(chain_, epoch)};
  }
  [[nodiscard]] std::uint64_t batches_in_epoch() const {
    std::lock_guard lk(m_);
    return num_batches_;
  }
  // The batches a whole epoch `e` yields (from the sampler's size; nothing is started).
  [[nodiscard]] std::uint64_t batches_for(std::uint64_t e) const { return batches_from(e, 0); }
  // The batches a run of epoch `e` started at sample position `start` yields.
  [[nodiscard]] std::uint64_t batches_from(std::uint64_t e, std::uint64_t start) const {
    const std::uint64_t n = chain_.chain.sampler().size(e), b = chain_.collate.batch_size();
    const std::uint64_t rem = start < n ? n - start : 0;
    return chain_.collate.drop_last() ? rem / b : (rem + b - 1) / b;
  }
  // A check the consumer's wait for a batch runs every `every` (without the ring's lock): when it
  // returns true, next() throws sluice::interrupted and the epoch goes on. Set it before an epoch
  // starts; an empty function waits without checks (the default).
  void set_interrupt(std::function<bool()> check, std::chrono::milliseconds every) {
    std::lock_guard lk(m_);
    interrupt_ = std::move(check);
    interrupt_every_ = every;
  }

  [[nodiscard]] pipeline_stats stats() const {
    pipeline_stats s;
    std::lock_guard lk(m_);
    s.epochs = runs_.load(std::memory_order_relaxed);
    s.batches = delivered_total_;
    s.samples = samples_total_;
    s.skipped = skipped_total_;
    clock_.fill(s);
    {
      std::lock_guard sk(skip_m_);
      s.skip_causes = skip_causes_;
    }
    s.stages.resize(n_last + 1);
    for (std::size_t i = 0; i <= n_last; ++i) s.stages[i].name = all_stage_names[i];
    for (std::size_t w = 0; w < lanes_; ++w) {
      const auto& c = counters_[w];
      s.worker_busy_ns += c.busy_ns.get();
      s.worker_wait_ns += c.wait_ns.get();
      s.helped_samples += c.helped.get();
      for (std::size_t i = 0; i <= n_last; ++i) {
        s.stages[i].busy_ns += c.stage_ns[i].get();
        s.stages[i].calls += c.stage_calls[i].get();
      }
    }
    // Stages with a report hook (core/concepts.hpp) add their own counters.
    std::apply(
        [&](const auto&... st) {
          auto one = [&](const auto& stage) {
            if constexpr (reports_itself<std::decay_t<decltype(stage)>>) {
              stage_report r{.stage = std::decay_t<decltype(stage)>::name, .counters = {}};
              stage.report(r);
              s.reports.push_back(std::move(r));
            }
          };
          (one(st), ...);
        },
        chain_.chain.stages());
    s.depth = depth_;
    s.workers = active_workers_;
    s.capacity = slots_.size();
    s.slots_grown = slots_.grown();
    s.hold_budget = opt_.hold_budget;
    // Variable-length fields make batches differ in size: a filled batch counts its own bytes
    // (published to this thread by the status change under m_), a batch being filled counts the
    // largest slot so far (its size is not known, nor safe to read, until it is filled); the peak
    // is bounded by the largest slot times the peak count.
    s.batch_bytes = slot_bytes_;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const auto st = slots_[i].status;
      // A slot being filled is its worker's (its storage may be growing): counted at the largest.
      s.ring_bytes += st == slot_status::filling ? slot_bytes_ : slots_[i].storage_bytes;
      if (st == slot_status::filling) s.bytes_in_flight += slot_bytes_;
      else if (st != slot_status::free) s.bytes_in_flight += slots_[i].used_bytes;
    }
    s.peak_batches_in_flight = peak_live_;
    s.peak_bytes_in_flight = peak_live_ * slot_bytes_;
    s.ready_batches = count_ready_locked();
    s.slots_warmed = slots_warmed_;
    return s;
  }

  // The most recent run of epoch `e` among the last epoch_stats_kept runs (the running one
  // included, with its figures so far), or nothing if it is not among them.
  [[nodiscard]] std::optional<epoch_stats> stats_of_epoch(std::uint64_t e) const {
    std::lock_guard lk(m_);
    return history_.of_epoch(e, all_stage_names, [&] { return running_now_locked(); });
  }
  // The last epoch_stats_kept runs, oldest first, the running (or last) one at the end.
  [[nodiscard]] std::vector<epoch_stats> recent_epochs() const {
    std::lock_guard lk(m_);
    return history_.all(all_stage_names, [&] { return running_now_locked(); });
  }

  [[nodiscard]] batch_chain<SampleChain, Collate, BatchStages...>& chain() noexcept { return chain_; }
  [[nodiscard]] Depth& depth_policy() noexcept { return depth_policy_; }

 private:
  // The cumulative counters now (under m_). Worker counters are final when no worker fills.
  counter_snapshot<n_last> snapshot_locked() const noexcept {
    counter_snapshot<n_last> c;
    c.epoch = epoch_;
    c.t_ns = now_ns();
    c.batches = delivered_total_;
    c.samples = samples_total_;
    c.skipped = skipped_total_;
    c.consumer_wait_ns = clock_.wait_ns();
    c.consumer_busy_ns = clock_.busy_ns();
    c.warmup_wait_ns = clock_.warmup_wait_ns();
    c.steps = clock_.steps();
    c.step_sq_s2 = clock_.step_sq_s2();
    for (std::size_t w = 0; w < lanes_; ++w) {
      const auto& k = counters_[w];
      c.worker_busy_ns += k.busy_ns.get();
      c.worker_wait_ns += k.wait_ns.get();
      for (std::size_t i = 0; i <= n_last; ++i) {
        c.stage_ns[i] += k.stage_ns[i].get();
        c.stage_calls[i] += k.stage_calls[i].get();
      }
    }
    return c;
  }
  // The running (or last, not yet closed) run's counters now, and whether it is complete.
  std::pair<counter_snapshot<n_last>, bool> running_now_locked() const {
    return {snapshot_locked(), delivered_ >= num_batches_ && history_.ended()};
  }

  // Adds a batch-stage hook's time to its counter when stage timing is on (two clock reads a
  // batch), on every way out of the hook.
  class stage_clock {
   public:
    stage_clock(bool on, owned_counter& c) noexcept : c_(on ? &c : nullptr), t0_(on ? now_ns() : 0) {}
    stage_clock(const stage_clock&) = delete;
    stage_clock& operator=(const stage_clock&) = delete;
    ~stage_clock() {
      if (c_ != nullptr) c_->add(now_ns() - t0_);
    }

   private:
    owned_counter* c_;
    std::uint64_t t0_;
  };
  // invoke_hook's `around` for the worker-side hooks: each call timed as its batch stage.
  auto timed_hook(worker_counters<n_last>& ctr) noexcept {
    return [&ctr, on = opt_.stage_timing](std::size_t index, auto&& call) {
      const stage_clock timed(on, ctr.stage_ns[n_stages + 1 + index]);
      call();
    };
  }

  std::uint64_t clock_pending_busy(std::uint64_t t_request) const noexcept {
    return last_receive_ns_ != 0 && t_request > last_receive_ns_ ? t_request - last_receive_ns_ : 0;
  }

  std::size_t count_ready_locked() const noexcept {
    std::size_t r = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) r += slots_[i].status == slot_status::ready;
    return r;
  }

  void worker_main(std::size_t w) {
    // Checked at construction; a refusal now leaves the thread unpinned. Without `cpus` the
    // worker does not keep the set of the thread that started it (a pinned trainer's).
    if (!opt_.cpus.empty()) (void)detail::set_thread_cpu(opt_.cpus[w % opt_.cpus.size()]);
    else detail::unpin_current_thread();
    detail::name_current_thread("sluice-worker" + std::to_string(w));
    scratch_type& scratch = scratch_[w];
    std::uint64_t sample_counter = 0;
    std::unique_lock lk(m_);
    for (;;) {
      const bool had_work = active_ && next_ticket_ < num_batches_ && w < active_workers_;
      const std::uint64_t t_wait = now_ns();
      write_job* help = nullptr;
      cv_work_.wait(lk, [&] {
        return stop_.load(std::memory_order_relaxed) || (help = job_to_help_locked(w)) != nullptr || can_claim(w);
      });
      if (stop_.load(std::memory_order_relaxed)) return;
      if (had_work) counters_[w].wait_ns.add(now_ns() - t_wait);
      if (help != nullptr) {  // a batch being written needs hands more than a new ticket does
        ++help->helpers;
        lk.unlock();
        counters_[w].busy_ns.add(help_write(*help, w));
        lk.lock();
        if (--help->helpers == 0) cv_help_.notify_all();
        continue;
      }
      run_ticket(lk, w, scratch, sample_counter);
    }
  }

  // Claims the next ticket and fills it into a free slot (the caller saw one: can_claim, or the
  // trainer's own thread with workers = 0). Called and returns with m_ held (`lk`); fills without.
  void run_ticket(std::unique_lock<std::mutex>& lk, std::size_t w, scratch_type& scratch,
                  std::uint64_t& sample_counter) {
    const std::uint64_t k = next_ticket_++;
    const std::uint64_t gen = generation_.load(std::memory_order_relaxed);
    auto& s = *free_slot_locked();  // can_claim saw one
    s.status = slot_status::filling;
    s.index = k;
    ++live_;
    ++filling_;
    peak_live_ = std::max(peak_live_, live_ - warming_);
    const std::uint64_t epoch = epoch_, first = start_ + k * chain_.collate.batch_size();
    const std::uint64_t last = std::min<std::uint64_t>(first + chain_.collate.batch_size(), total_);
    lk.unlock();

    const std::uint64_t t0 = now_ns();
    scratch.join_wait_ns = 0;
    scratch.helping_ns = 0;
    bool ok = false;
    try {
      ok = fill(s, w, k, epoch, first, last, gen, scratch, sample_counter);
    } catch (...) {
      // Nothing in fill is expected to throw (a stage's error is stored in the slot); should it,
      // the slot goes back and the state stays whole. On a worker this ends the process as any
      // exception leaving a thread would; with workers = 0 the trainer receives it.
      lk.lock();
      --filling_;
      if (filling_ == 0) cv_idle_.notify_all();
      s.status = slot_status::free;
      s.error = nullptr;
      --live_;
      if (next_ticket_ == k + 1) next_ticket_ = k;
      cv_work_.notify_all();
      throw;
    }
    if (ok && !s.error && s.count != 0) {
      for (std::size_t i = 0; i < n_batch; ++i) counters_[w].stage_calls[n_stages + 1 + i].add(1);
      s.error = stages_.template invoke_hook<hook::on_filled>(s, s.ids[0], on_hook_failure::go_on,
                                                              timed_hook(counters_[w]));
    }
    const std::uint64_t filled_ns = now_ns() - t0;  // less the wait for helpers to leave
    counters_[w].busy_ns.add(filled_ns - std::min(filled_ns, scratch.join_wait_ns));

    lk.lock();
    --filling_;
    if (filling_ == 0) cv_idle_.notify_all();
    if (generation_.load(std::memory_order_relaxed) != gen || !ok) {  // cancelled
      s.status = slot_status::free;
      s.error = nullptr;
      --live_;
      cv_work_.notify_all();
      return;
    }
    s.status = s.error ? slot_status::failed : slot_status::ready;
    cv_ready_.notify_all();
  }

  // workers = 0, on the trainer's own thread while it fills a batch: the set_interrupt check, every
  // interrupt_every_ between samples (never on a worker thread). A true answer cancels the fill (the
  // generation moves on, so every write stops as for a cancelled epoch); next() then throws
  // sluice::interrupted and its next call fills the same batch again.
  bool inline_interrupt_due() {
    if (!inline_ || !interrupt_) [[likely]]
      return false;
    if (inline_interrupted_) return true;
    const std::uint64_t t = now_ns();
    if (t < inline_next_check_ns_) return false;
    inline_next_check_ns_ = t + static_cast<std::uint64_t>(
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(interrupt_every_).count());
    bool stop = true;  // a check that throws stops the fill too (next() then throws interrupted)
    try {
      stop = interrupt_();
    } catch (...) {
    }
    if (!stop) return false;
    inline_interrupted_ = true;
    generation_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Keeping batches (under m_): each batch the trainer keeps takes a slot from those the pipeline
  // fills. While it keeps more than the ring's slots leave room for (depth + active workers to fill;
  // one with workers = 0), the ring adds a slot per kept batch, as long as the added slots' bytes,
  // each counted at the largest batch so far, stay within hold_budget.
  void grow_for_kept_locked() {
    const std::size_t room = room_locked();
    const std::size_t per_slot = std::max<std::size_t>(slot_bytes_, 1);
    while (slots_.size() < consumer_held_ + room) {
      if (slots_.grown() + 1 > opt_.hold_budget / per_slot) return;
      slots_.grow();
      cv_work_.notify_all();  // a free slot: a worker may claim
    }
  }
  // The slots the pipeline fills besides those the trainer keeps (under m_).
  std::size_t room_locked() const noexcept { return inline_ ? 1 : depth_ + active_workers_; }
  // Slots with storage, or in use (under m_).
  std::size_t sized_slots_locked() const noexcept {
    std::size_t n = 0;
    // A free slot's storage changes only under m_; a slot in use is counted without reading it.
    for (std::size_t i = 0; i < slots_.size(); ++i)
      n += slots_[i].status != slot_status::free || slots_[i].data != nullptr;
    return n;
  }
  // The trainer holds every slot and the budget allows no more: nothing could ever be filled.
  [[noreturn]] void throw_ring_full_locked(std::uint64_t k) const {
    std::size_t held_bytes = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].status == slot_status::held) held_bytes += slots_[i].storage_bytes;
    throw usage_error(
        "sluice: the trainer keeps " + std::to_string(consumer_held_) + " batches (" + std::to_string(held_bytes) +
        " bytes), every slot of the ring, so batch " + std::to_string(k) + " can never be prepared: the ring has " +
        std::to_string(slots_.base()) + " slots of its own and grew by " + std::to_string(slots_.grown()) + " of " +
        std::to_string(std::max<std::size_t>(slot_bytes_, 1)) +
        " bytes, all that hold_budget = " + std::to_string(opt_.hold_budget) +
        " bytes allows. Raise hold_budget (C++: loader_options::hold_budget; "
        "Python: Loader(hold_budget=...)), or drop batches before asking for more (C++: let their handles go or "
        "reset() them; Python: del their tensors, or keep .clone()s of what outlives the step)");
  }

  // Batches held by the trainer do not count against depth + workers (only batches being filled
  // or waiting for it do), so a policy that lowers either never starves a trainer that holds
  // fewer batches than the ring has slots; live_ < slots_.size() means a slot is free.
  bool can_claim(std::size_t w) const noexcept {
    return active_ && w < active_workers_ && next_ticket_ < num_batches_ &&
           live_ - consumer_held_ - warming_ < depth_ + active_workers_ && live_ < slots_.size();
  }
  // A free slot, one with storage first (warmed, or used before) so that a worker does not
  // fault in a fresh slot while a warmed one waits.
  slot_type* free_slot_locked() noexcept {
    slot_type* unsized = nullptr;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      auto& s = slots_[i];
      if (s.status != slot_status::free) continue;
      if (s.data != nullptr) return &s;
      if (unsized == nullptr) unsized = &s;
    }
    return unsized;
  }
  slot_type* find_ticket_locked(std::uint64_t k) noexcept {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      auto& s = slots_[i];
      if ((s.status == slot_status::ready || s.status == slot_status::failed) && s.index == k) return &s;
    }
    return nullptr;
  }
  // Ends the running epoch after an error the trainer is about to receive.
  void stop_epoch_locked() noexcept {
    generation_.fetch_add(1, std::memory_order_relaxed);
    active_ = false;
    cv_work_.notify_all();
  }
  // Keeps the error being handled (a skipped sample's) for stats().skip_causes.
  void note_skip() noexcept {
    std::lock_guard lk(skip_m_);
    if (skip_causes_.size() >= max_skip_causes) return;
    try {
      skip_causes_.push_back(current_exception_text());
    } catch (...) {
    }
  }

  // Fills slot `s` with batch k (detail::batch_fill's two phases, the before_fill hooks between
  // them), then counts it. Returns false if the run was cancelled meanwhile.
  bool fill(slot_type& s, std::size_t w, std::uint64_t k, std::uint64_t epoch, std::uint64_t first, std::uint64_t last,
            std::uint64_t gen, scratch_type& ws, std::uint64_t& sample_counter) {
    const std::size_t b = chain_.collate.batch_size();
    s.index = k;
    s.epoch = epoch;
    s.first_position = first;
    s.epoch_index = first / b;
    s.count = 0;
    s.skipped = 0;
    s.error = nullptr;
    s.device_data = nullptr;
    s.device_id = -1;
    if (!s.id_store) {
      try {
        s.id_store = std::make_unique<std::uint64_t[]>(b);
        s.ids = s.id_store.get();
      } catch (...) {
        store_stage_error(s.error, Collate::name, first);
        s.used_bytes = 0;
        s.layout.clear();
        return true;
      }
    }
    auto& ctr = counters_[w];
    const fill_run run{.seed = opt_.seed,
                       .epoch = epoch,
                       .first = first,
                       .last = last,
                       .errors = opt_.errors,
                       .stage_timing = opt_.stage_timing,
                       .check_files = opt_.check_files};
    const fill_type f(chain_.chain, chain_.collate);
    typename fill_type::tally t;
    struct clear_on_exit {  // the samples may pin cache entries: drop them with the batch
      scratch_type& ws;
      ~clear_on_exit() { ws.samples.clear(); }
    } clear_guard{ws};
    const auto cancelled = [&] { return inline_interrupt_due() || generation_.load(std::memory_order_relaxed) != gen; };
    const auto skip = [this] { note_skip(); };
    if (!f.gather(run, ws, s.ids, sample_counter, t, s.error, cancelled, skip)) return false;
    // Batch stages act before the slot's storage is written again (to_device waits for the
    // previous copy out of it), and the storage may come from a capped pool: a failure of either
    // reaches the consumer as this batch's error instead of ending the worker thread.
    if (!s.error)
      s.error = stages_.template invoke_hook<hook::before_fill>(s, first, on_hook_failure::stop, timed_hook(ctr));
    const bool timed = opt_.stage_timing;
    const std::uint64_t t_collate = timed ? now_ns() : 0;
    ws.timing = {};  // the deferred stages' time while this batch is written by this thread
    const bool written = f.write(
        run, s, ws, t, [&] { return generation_.load(std::memory_order_relaxed) != gen; },
        [this](slot_type& sl, std::size_t bytes) { ensure_storage(sl, bytes); },
        [&](slot_type& sl, scratch_type& wsc) {
          write_outcome r;
          r.failed = write_samples(sl, w, k, epoch, gen, wsc);
          if (r.failed != no_failure) r.error = std::exchange(jobs_[w].error, nullptr);
          return r;
        },
        skip);
    if (!written) return false;
    // The whole batch, not sampled, less the time spent on other batches and waiting for helpers
    // (a helper counts its own share).
    std::uint64_t collate_ns = timed ? now_ns() - t_collate : 0;
    collate_ns -= std::min(collate_ns, ws.join_wait_ns + ws.helping_ns);
    if (timed) move_deferred_time(ctr, ws.timing, collate_ns);
    const std::uint64_t samples = ws.samples.size();
    s.count = samples;
    s.skipped = t.skipped;
    s.used_bytes = s.error ? 0 : s.layout.bytes;
    if (s.error) s.layout.clear();
    const bool has_first = s.layout.count > 0;
    s.type = has_first ? s.layout.tensors[0].type : dtype::u8;
    s.sample_bytes = has_first && samples > 0 ? s.layout.tensors[0].bytes / samples : 0;
    ctr.samples.add(samples);
    ctr.skipped.add(t.skipped);
    for (std::size_t i = 0; i < n_stages; ++i) {
      ctr.stage_ns[i].add(t.stage_ns[i] * stage_timing_stride);
      ctr.stage_calls[i].add(samples + t.skipped);
    }
    ctr.stage_ns[n_stages].add(collate_ns);
    ctr.stage_calls[n_stages].add(samples);
    return true;
  }

  // ---- Writing a batch's samples, alone or with help (loader_options::split_batches) ----------

  // Writes sample i of slot s into its place; a deferred stage's time goes to `timing` (if any).
  void write_one(slot_type& s, const sample_type& smp, std::string_view origin, std::size_t i, std::uint64_t epoch,
                 std::uint64_t pos, typename Collate::scratch_type& sc, timing_sink* timing) {
    const sample_context ctx{opt_.seed, epoch, s.ids[i], pos, timing};
    const fault_watch watch;  // a page of a file truncated meanwhile, touched by this sample
    chain_.collate.write(smp, i, s.data, sc, ctx);
    if (watch.suspect()) [[unlikely]] {
      try {
        watch.check(origin);
      } catch (...) {
        throw_stage_error("read", s.ids[i]);
      }
    }
  }

  // Writes chunks of job j with scratch sc (detail::write_job::write_chunks) until none is left,
  // the run is cancelled, or a sample fails; `between` runs before each claim; deferred stages'
  // time goes to `timing` (this thread's, or none when stage timing is off). Returns the samples
  // this caller wrote.
  template <class Between>
  std::size_t write_chunks(write_job& j, typename Collate::scratch_type& sc, timing_sink& timing, Between&& between) {
    timing_sink* const sink = opt_.stage_timing ? &timing : nullptr;
    return j.write_chunks(
        sc, [&] { return inline_interrupt_due() || generation_.load(std::memory_order_relaxed) != j.gen; },
        std::forward<Between>(between),
        [&](std::size_t i, typename Collate::scratch_type& plan) {
          write_one(*j.s, j.samples[i], j.origins[i], i, j.epoch, j.positions[i], plan, sink);
        });
  }

  // The owner's write of batch k (slot s, its samples in ws): alone, or opened to helpers when
  // batches may be split. Returns the lowest failing sample (its error in jobs_[w].error) or
  // no_failure; every helper has left when it returns.
  std::size_t write_samples(slot_type& s, std::size_t w, std::uint64_t k, std::uint64_t epoch, std::uint64_t gen,
                            scratch_type& ws) {
    write_job& j = jobs_[w];
    const std::size_t n = ws.samples.size();
    j.s = &s;
    j.samples = ws.samples.data();
    j.positions = ws.positions.data();
    j.origins = ws.origins.data();
    j.epoch = epoch;
    j.ticket = k;
    const bool share = split_ && n > 1;
    // Chunks small enough that every worker gets a few, large enough that claiming is cheap.
    j.reset(gen, share ? std::max<std::size_t>(1, n / (4 * opt_.max_workers)) : n);
    if (!share) {
      j.n.store(n, std::memory_order_relaxed);
      write_chunks(j, ws.collate, ws.timing, [] {});
      return j.failed.load(std::memory_order_relaxed);
    }
    j.plan = ws.collate;     // helpers copy it; the owner writes with its own
    if (!ws.helping_warm) {  // so that helping allocates at warm-up too, not at a first help later
      ws.helping = ws.collate;
      ws.helping_warm = true;
    }
    {
      std::lock_guard lk(m_);
      j.n.store(n, std::memory_order_relaxed);
      j.open = true;
      if (k == awaited_) urgent_.store(&j, std::memory_order_release);
    }
    cv_work_.notify_all();
    // Between its own chunks the owner helps the batch the trainer waits for, if another's.
    write_chunks(j, ws.collate, ws.timing, [&] {
      write_job* u = urgent_.load(std::memory_order_acquire);
      if (u != nullptr && u != &j && u->has_work()) ws.helping_ns += join_and_help(u, w);
    });
    std::unique_lock lk(m_);
    j.open = false;
    j.n.store(0, std::memory_order_relaxed);  // nothing left for anyone peeking
    if (urgent_.load(std::memory_order_relaxed) == &j) urgent_.store(nullptr, std::memory_order_relaxed);
    if (j.helpers != 0) {
      const std::uint64_t t0 = now_ns();
      cv_help_.wait(lk, [&] { return j.helpers == 0; });
      ws.join_wait_ns += now_ns() - t0;
    }
    return j.failed.load(std::memory_order_relaxed);
  }

  // An owner between its chunks joins job u if it is still the urgent one and open. Returns the
  // time spent.
  std::uint64_t join_and_help(write_job* u, std::size_t w) {
    {
      std::lock_guard lk(m_);
      if (urgent_.load(std::memory_order_relaxed) != u || !u->open || !u->has_work()) return 0;
      ++u->helpers;
    }
    const std::uint64_t ns = help_write(*u, w);
    {
      std::lock_guard lk(m_);
      if (--u->helpers == 0) cv_help_.notify_all();
    }
    return ns;
  }

  // Writes chunks of another worker's batch (the caller has joined it). Its time counts for
  // this worker: the deferred stage's share as that stage, the rest as collate. Returns the time.
  std::uint64_t help_write(write_job& j, std::size_t w) {
    auto& ctr = counters_[w];
    const std::uint64_t t0 = now_ns();
    timing_sink timing;  // this help's own: the owner's batch keeps its own sink
    std::size_t written = 0;
    if (j.has_work()) {
      try {
        scratch_[w].helping = j.plan;  // allocates on first use only
        written = write_chunks(j, scratch_[w].helping, timing, [] {});
      } catch (...) {  // copying the plan ran out of memory: the owner writes the batch alone
      }
    }
    const std::uint64_t ns = now_ns() - t0;
    ctr.helped.add(written);
    std::uint64_t collate_ns = ns;
    if (opt_.stage_timing) {
      move_deferred_time(ctr, timing, collate_ns);
      ctr.stage_ns[n_stages].add(collate_ns);
    }
    return ns;
  }

  // A waiting worker's choice (under m_): the batch the trainer waits for, if it is being written
  // with chunks left; else, when it cannot claim a ticket, the oldest such batch; else nothing.
  write_job* job_to_help_locked(std::size_t w) noexcept {
    if (!split_ || !active_ || w >= active_workers_) return nullptr;
    if (write_job* u = urgent_.load(std::memory_order_relaxed); u != nullptr && u->open && u->has_work()) return u;
    if (can_claim(w)) return nullptr;
    write_job* best = nullptr;
    for (std::size_t i = 0; i < opt_.max_workers; ++i) {
      write_job& j = jobs_[i];
      if (j.open && j.has_work() && (best == nullptr || j.ticket < best->ticket)) best = &j;
    }
    return best;
  }

  // The trainer waits for ticket k (no_ticket: it stopped waiting); under m_.
  void await_locked(std::uint64_t k) noexcept {
    awaited_ = k;
    write_job* u = nullptr;
    if (split_ && k != no_ticket)
      for (std::size_t i = 0; i < opt_.max_workers; ++i)
        if (jobs_[i].open && jobs_[i].ticket == k) u = &jobs_[i];
    urgent_.store(u, std::memory_order_release);
    if (u != nullptr) cv_work_.notify_all();
  }

  // A deferred stage's work (decode writing itself into the batch), timed into `deferred` while
  // this thread wrote, is that stage's time, taken out of collate's.
  void move_deferred_time(worker_counters<n_last>& ctr, const timing_sink& deferred,
                          std::uint64_t& collate_ns) noexcept {
    for (std::size_t d = 0; d < deferred.count; ++d) {
      for (std::size_t i = 0; i < n_stages; ++i) {
        if (SampleChain::stage_names[i] != deferred.stage[d]) continue;
        ctr.stage_ns[i].add(deferred.ns[d]);
        collate_ns -= std::min(collate_ns, deferred.ns[d]);
        break;
      }
    }
  }

  // The slot's storage holds at least `bytes`, grown by detail::storage_size's rule (never below
  // the largest slot so far, by a quarter at least), never shrunk.
  void ensure_storage(slot_type& s, std::size_t bytes) {
    std::size_t floor = 0;
    {
      std::lock_guard lk(m_);
      floor = slot_bytes_;
    }
    const std::size_t want = storage_size(s.data != nullptr ? s.storage_bytes : 0, bytes, floor, cache_line);
    if (want == 0) return;
    if (s.data != nullptr) {
      stages_.deallocate(s.data, s.storage_bytes);
      s.data = nullptr;
      s.storage_bytes = 0;
    }
    s.data = static_cast<std::byte*>(stages_.allocate(want));
    s.storage_bytes = want;
    bool start_warming = false;
    {
      std::lock_guard lk(m_);
      slot_bytes_ = std::max(slot_bytes_, want);
      if constexpr (warms_slots) {
        start_warming = opt_.warm_slots && !warming_running_ && !stop_.load(std::memory_order_relaxed) &&
                        warm_target_locked() != nullptr;
        warming_running_ = start_warming;
      }
    }
    if constexpr (warms_slots) {
      if (start_warming) start_warm_thread();
    }
  }

  // Starts the warming thread (outside m_: a thread's creation is a system call the other threads
  // need not wait for). One run at a time; each is kept until shutdown() joins it. A run starts
  // only when a worker allocates a slot's storage while a slot without storage is still wanted,
  // so a ring sees a few runs, not one per batch.
  void start_warm_thread() {
    std::thread t;
    try {
      t = std::thread([this] { warm_main(); });
    } catch (...) {  // no thread: each slot is faulted in by its first batch, as without warming
      std::lock_guard lk(m_);
      warming_running_ = false;
      return;
    }
    std::unique_lock lk(m_);
    try {
      warm_threads_.push_back(std::move(t));  // reserved at construction: does not allocate
      return;
    } catch (...) {
    }
    lk.unlock();
    t.join();  // no room for its handle: wait for this run instead of keeping it
  }

  // The slot the warming thread should prepare next (detail::warm_target), or nullptr: it may
  // fill as many slots at once as the run may (depth + active workers, at most the epoch's batches).
  slot_type* warm_target_locked() noexcept {
    if (!active_ || slots_.size() < 2) return nullptr;
    return warm_target(slots_, std::min<std::uint64_t>({slots_.size(), depth_ + active_workers_, num_batches_}));
  }

  // The warming thread (see the header): gives free, never-used slots the largest slot size so far,
  // each page touched, one slot at a time, while the workers run, until as many slots have storage
  // (or are in use) as the run may fill at once. It changes nothing a batch can
  // see: a warming slot is neither free nor live for the workers' allowance, and a failure here
  // (no memory) only leaves the slot to be allocated by its first batch, which reports it.
  void warm_main() {
    detail::unpin_current_thread();  // not on the CPU of the worker that started it
    detail::name_current_thread("sluice-slotwarm");
    for (;;) {
      slot_type* s = nullptr;
      std::size_t bytes = 0;
      {
        std::lock_guard lk(m_);
        bytes = slot_bytes_;  // the largest slot so far: what a worker would bring this one up to
        if (!stop_.load(std::memory_order_relaxed)) s = warm_target_locked();
        if (s == nullptr) {  // done, stopped, or the epoch is over
          warming_running_ = false;
          return;
        }
        s->status = slot_status::warming;
        ++live_;
        ++warming_;
      }
      void* p = nullptr;
      try {
        p = stages_.allocate(bytes);
        touch_pages(static_cast<std::byte*>(p), bytes, stop_);
      } catch (...) {
      }
      {
        std::lock_guard lk(m_);
        if (p != nullptr) {
          s->data = static_cast<std::byte*>(p);
          s->storage_bytes = bytes;
          ++slots_warmed_;
        }
        s->status = slot_status::free;
        --live_;
        --warming_;
        if (p == nullptr) warming_running_ = false;  // no memory: the workers allocate, and report it
      }
      cv_work_.notify_all();
      if (p == nullptr) return;
    }
  }
  // Only storage the loader allocates itself is warmed: a stage's (pin's pool) may hand out a
  // block still being read by a copy, and is page-locked or reused anyway.
  static constexpr bool warms_slots = stage_set::own_storage;
  // A grown slot gives its storage back (release()) only when no batch stage keeps a hold on it
  // (a device copy out of it still in flight, an event recorded on release): the loader's own
  // storage, no before_fill or on_release hook.
  static constexpr bool gives_back_storage = warms_slots && !stage_set::template hold_storage<slot_type>;

  batch_chain<SampleChain, Collate, BatchStages...> chain_;
  stage_set stages_{chain_.batch_stages};
  Depth depth_policy_;
  loader_options opt_;
  std::size_t max_depth_ = 1, depth_ = 1, active_workers_ = 1;
  std::size_t lanes_ = 1;  // per-worker arrays (counters, scratch, jobs): max_workers, at least 1
  bool inline_ = false;    // workers = 0: the trainer's thread fills each batch in next()
  std::uint64_t inline_sample_counter_ = 0;
  std::uint64_t inline_next_check_ns_ = 0;  // workers = 0: the trainer's thread only
  bool inline_interrupted_ = false;         // workers = 0: the trainer's thread only
  slot_table<slot_type> slots_{0};          // the ring's own slots, then (under m_) those grown for kept batches
  std::unique_ptr<worker_counters<n_last>[]> counters_;
  std::unique_ptr<scratch_type[]> scratch_;  // one per worker thread, touched only by it
  std::unique_ptr<write_job[]> jobs_;        // one per worker: the batch it writes
  bool split_ = false;                       // batches' writes may be shared
  std::atomic<write_job*> urgent_{nullptr};  // the open job the trainer waits for (set under m_)
  std::uint64_t awaited_ = no_ticket;        // under m_: the ticket the trainer waits for
  std::vector<std::thread> threads_;
  thread_owner owner_;  // the process that started threads_ (a forked child has none of them)
  std::vector<std::thread> warm_threads_;  // the warming runs, joined by shutdown() (under m_)
  bool warming_running_ = false;           // under m_
  std::size_t slots_warmed_ = 0;           // under m_

  mutable std::mutex m_;
  std::condition_variable cv_work_, cv_ready_, cv_idle_, cv_help_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint64_t> runs_{0};  // epoch runs begun (stats' epochs): which epoch_range is current
  std::function<bool()> interrupt_;  // set_interrupt: checked while the consumer waits
  std::chrono::milliseconds interrupt_every_{50};
  bool active_ = false;
  std::uint64_t epoch_ = 0, start_ = 0, total_ = 0, num_batches_ = 0, next_ticket_ = 0, delivered_ = 0;
  std::size_t live_ = 0, peak_live_ = 0, filling_ = 0, consumer_held_ = 0, warming_ = 0;
  std::size_t slot_bytes_ = 0;  // the largest slot storage so far
  std::uint64_t delivered_total_ = 0, samples_total_ = 0, skipped_total_ = 0;
  std::uint64_t last_receive_ns_ = 0;
  consumer_clock clock_;
  // Per-epoch figures (epoch_stats): the running run's start, the closed runs in a fixed ring.
  epoch_history<n_last> history_;
  std::exception_ptr release_error_;  // from an on_release hook, rethrown by the next next()
  static constexpr std::size_t max_skip_causes = 16;
  mutable std::mutex skip_m_;  // only on the skip path
  std::vector<std::string> skip_causes_;
};

}  // namespace sluice::detail
