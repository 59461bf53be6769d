// sluice/io/lazy_open.hpp — what the sharded readers share: a shard's state made once on first use
// by whichever worker needs it, and the table of where each shard's samples start.
//
// The sharded readers (wds_dataset, mds_dataset, remote_shards) open a shard when its first sample
// is read, on the worker preparing that batch, and never again: later reads are one acquire load.
// `get(make, policy)` runs `make()` (returning std::unique_ptr<State>) under the shard's lock if no
// state is there yet. When `make` throws, on_failure::retry lets the next read try again (a local
// file that may appear), on_failure::remember keeps the exception and rethrows it to every later
// read (a download that failed its retries is not fetched once per sample).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/core/affinity.hpp"
#include "sluice/core/error.hpp"

namespace sluice::io::detail {

enum class on_failure { retry, remember };

template <class State>
class lazy_open {
 public:
  [[nodiscard]] bool ready() const noexcept { return ready_.load(std::memory_order_acquire) != nullptr; }

  template <class Make>
  const State& get(Make&& make, on_failure policy) {
    if (const State* r = ready_.load(std::memory_order_acquire)) [[likely]] return *r;
    std::lock_guard lk(m_);
    if (const State* r = ready_.load(std::memory_order_acquire)) return *r;
    if (failed_) std::rethrow_exception(failed_);
    try {
      owned_ = make();
    } catch (...) {
      if (policy == on_failure::remember) failed_ = std::current_exception();
      throw;
    }
    ready_.store(owned_.get(), std::memory_order_release);
    return *owned_;
  }

  // Drops the state (and a remembered failure): the next get() makes it again. Only while no
  // thread uses the state or calls get() (a reader's release_all(), between epochs).
  void reset() {
    std::lock_guard lk(m_);
    ready_.store(nullptr, std::memory_order_release);
    owned_.reset();
    failed_ = nullptr;
  }

 private:
  std::mutex m_;
  std::unique_ptr<State> owned_;
  std::exception_ptr failed_;
  std::atomic<const State*> ready_{nullptr};
};

// Where each shard's samples start in a sharded reader's global index: first[s], then the total.
struct shard_table {
  std::vector<std::uint64_t> first{0};

  void add(std::uint64_t samples) { first.push_back(first.back() + samples); }
  [[nodiscard]] std::uint64_t total() const noexcept { return first.back(); }
  [[nodiscard]] std::size_t size_of(std::size_t s) const { return static_cast<std::size_t>(first.at(s + 1) - first.at(s)); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> range(std::size_t s) const { return {first.at(s), first.at(s + 1)}; }
  // The shard holding sample i; usage_error naming the dataset when i is past the end.
  [[nodiscard]] std::size_t shard_of(std::uint64_t i, const std::string& name) const {
    if (i >= total())
      throw usage_error("sluice: sample " + std::to_string(i) + " out of range for '" + name + "' (" +
                        std::to_string(total()) + " samples)");
    return static_cast<std::size_t>(std::upper_bound(first.begin() + 1, first.end(), i) - first.begin() - 1);
  }
  [[nodiscard]] std::vector<std::size_t> sizes() const {
    std::vector<std::size_t> out(first.size() - 1);
    for (std::size_t s = 0; s < out.size(); ++s) out[s] = size_of(s);
    return out;
  }
};

// One thread opening shards ahead of the workers, for a sharded reader's prefetch(s). Jobs run in
// the order posted; a job's exception is dropped (the shard's lazy_open remembers a failure and the
// read that needs the shard reports it). The thread starts with the first job. stop() drops the
// jobs not started and waits for the one running (a download finishes or fails by its timeouts).
// A reader holds it as its first member and stops it in its destructor and when it is moved from
// (opener_handle), so no job outlives the members it uses.
class background_opener {
 public:
  background_opener() = default;
  background_opener(const background_opener&) = delete;
  background_opener& operator=(const background_opener&) = delete;
  ~background_opener() { stop(); }

  void post(std::function<void()> job) {
    std::lock_guard lk(m_);
    if (stopping_) return;
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) {
      owner_.started();
      thread_ = std::thread([this] { run(); });
    }
    cv_.notify_one();
  }
  // Whether the thread was started by the process this one was forked from (then this object is
  // left in memory: sluice::detail::thread_owner).
  [[nodiscard]] bool forked_away() const noexcept { return owner_.forked_away(); }
  void stop() noexcept {
    {
      std::lock_guard lk(m_);
      stopping_ = true;
      jobs_.clear();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    sluice::detail::unpin_current_thread();  // not the set of the thread that posted first
    sluice::detail::name_current_thread("sluice-open");
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      try {
        job();
      } catch (...) {  // remembered by the shard's lazy_open, reported by the read that needs it
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  sluice::detail::thread_owner owner_;
  std::thread thread_;
};

// A reader's background_opener, made on first use; moving a reader stops the source's thread.
// post() and stop() may be called from several threads (prefetch(s) is a const reader method).
class opener_handle {
 public:
  opener_handle() = default;
  opener_handle(opener_handle&& o) noexcept { o.stop(); }
  opener_handle& operator=(opener_handle&& o) noexcept {
    stop();
    o.stop();
    return *this;
  }
  ~opener_handle() = default;
  void post(std::function<void()> job) {
    std::lock_guard lk(m_);
    if (p_ && p_->forked_away()) (void)p_.release();  // a forked child starts its own opener
    if (!p_) p_ = std::make_unique<background_opener>();
    p_->post(std::move(job));
  }
  void stop() noexcept {
    std::lock_guard lk(m_);
    if (p_ && p_->forked_away()) (void)p_.release();  // left in memory: its thread is not here
    if (p_) p_->stop();
    p_.reset();
  }

 private:
  std::mutex m_;  // not moved: each handle has its own
  std::unique_ptr<background_opener> p_;
};

}  // namespace sluice::io::detail
