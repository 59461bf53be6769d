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
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace sluice::io::detail
