// sluice/diag/drift.hpp — per-channel mean and variance of what the model is fed, and how they move.
//
// BatchNorm learns running statistics of its inputs; when the data side shifts (a sampler change,
// a new shard, an augmentation bug, a long-tail class arriving late), those statistics go stale.
// `drift_monitor` is the data-side view of that: for each channel it keeps the running mean and
// variance of every value in every batch (Welford, merged per batch with Chan's formula so it is
// exact and stable), and groups batches into windows of `window_batches` (or closes a window when
// you call close_window(), e.g. at each epoch's end). When a window closes it is compared with
// the previous window and with the first one (the reference):
//   mean_shift_sigma = |mean_now - mean_before| / std_before   (standardised mean shift)
//   std_ratio        = std_now / std_before
// A window whose largest standardised shift exceeds `alert_sigma` (default 0.1: a tenth of a
// standard deviation, already enough to move BatchNorm's running mean visibly) is flagged.
// Memory: O(channels) plus the last `keep_windows` window summaries. Not thread-safe: call from
// the consumer.
//
//   sluice::diag::drift_monitor drift{3, {.window_batches = 100}};
//   drift.observe_batch(std::span<const float>(x, n * 3 * h * w), n, sluice::diag::layout::nchw);
//   if (auto w = drift.last_window(); w && w->alert) ...
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

namespace sluice::diag {

enum class layout { nchw, nhwc };

// Count, mean and sum of squared deviations: mergeable running moments.
struct running_moments {
  double count = 0;
  double mean = 0;
  double m2 = 0;
  void add(double x) noexcept {
    count += 1;
    const double d = x - mean;
    mean += d / count;
    m2 += d * (x - mean);
  }
  void merge(const running_moments& o) noexcept {  // Chan, Golub & LeVeque
    if (o.count == 0) return;
    if (count == 0) { *this = o; return; }
    const double n = count + o.count, d = o.mean - mean;
    mean += d * o.count / n;
    m2 += o.m2 + d * d * count * o.count / n;
    count = n;
  }
  [[nodiscard]] double variance() const noexcept { return count > 0 ? m2 / count : 0; }
  [[nodiscard]] double stddev() const noexcept { return std::sqrt(variance()); }
};

struct drift_options {
  std::size_t window_batches = 0;  // 0: windows close only on close_window()
  double alert_sigma = 0.1;
  std::size_t keep_windows = 256;
};

struct drift_window {
  std::uint64_t index = 0;
  std::uint64_t batches = 0;
  std::vector<double> mean, stddev;              // per channel
  std::vector<double> shift_vs_previous_sigma;   // per channel; empty for the first window
  std::vector<double> std_ratio_vs_previous;
  std::vector<double> shift_vs_reference_sigma;
  double max_shift_vs_previous_sigma = 0;
  double max_shift_vs_reference_sigma = 0;
  bool alert = false;
};

class drift_monitor {
 public:
  explicit drift_monitor(std::size_t channels, drift_options opt = {})
      : channels_(channels), opt_(opt), total_(channels), window_(channels), scratch_(channels) {}

  // values: `samples` samples of `channels` channels each, every channel the same number of values.
  template <class T>
    requires std::is_arithmetic_v<T>
  void observe_batch(std::span<const T> values, std::size_t samples, layout l = layout::nchw) {
    if (samples == 0 || channels_ == 0) return;
    const std::size_t per_sample = values.size() / samples;
    const std::size_t per_channel = per_sample / channels_;
    for (auto& m : scratch_) m = {};
    for (std::size_t s = 0; s < samples; ++s) {
      const T* x = values.data() + s * per_sample;
      for (std::size_t c = 0; c < channels_; ++c) {
        // One sample's channel summed in double, then merged (Chan): one pass over the values.
        double sum = 0, sq = 0;
        if (l == layout::nchw) {
          const T* p = x + c * per_channel;
          for (std::size_t i = 0; i < per_channel; ++i) { const double v = static_cast<double>(p[i]); sum += v; sq += v * v; }
        } else {
          for (std::size_t i = 0; i < per_channel; ++i) { const double v = static_cast<double>(x[i * channels_ + c]); sum += v; sq += v * v; }
        }
        const double n = static_cast<double>(per_channel);
        if (n == 0) continue;
        running_moments blk{n, sum / n, std::max(0.0, sq - sum * sum / n)};
        scratch_[c].merge(blk);
      }
    }
    for (std::size_t c = 0; c < channels_; ++c) {
      total_[c].merge(scratch_[c]);
      window_[c].merge(scratch_[c]);
    }
    ++window_batches_;
    if (opt_.window_batches != 0 && window_batches_ >= opt_.window_batches) close_window();
  }

  // Closes the current window (no-op when it saw no batch) and compares it with the ones before.
  const drift_window* close_window() {
    if (window_batches_ == 0) return last_window();
    drift_window w;
    w.index = next_index_++;
    w.batches = window_batches_;
    for (std::size_t c = 0; c < channels_; ++c) {
      w.mean.push_back(window_[c].mean);
      w.stddev.push_back(window_[c].stddev());
    }
    const drift_window* prev = last_window();
    if (prev != nullptr) {
      for (std::size_t c = 0; c < channels_; ++c) {
        const double sd = std::max(prev->stddev[c], 1e-12);
        w.shift_vs_previous_sigma.push_back(std::abs(w.mean[c] - prev->mean[c]) / sd);
        w.std_ratio_vs_previous.push_back(w.stddev[c] / sd);
        const double rsd = std::max(reference_.stddev[c], 1e-12);
        w.shift_vs_reference_sigma.push_back(std::abs(w.mean[c] - reference_.mean[c]) / rsd);
      }
      w.max_shift_vs_previous_sigma = *std::max_element(w.shift_vs_previous_sigma.begin(), w.shift_vs_previous_sigma.end());
      w.max_shift_vs_reference_sigma = *std::max_element(w.shift_vs_reference_sigma.begin(), w.shift_vs_reference_sigma.end());
      w.alert = w.max_shift_vs_previous_sigma > opt_.alert_sigma;
    } else {
      reference_ = w;
    }
    windows_.push_back(std::move(w));
    if (windows_.size() > opt_.keep_windows) windows_.pop_front();
    for (auto& m : window_) m = {};
    window_batches_ = 0;
    return &windows_.back();
  }

  [[nodiscard]] const drift_window* last_window() const noexcept {
    return windows_.empty() ? nullptr : &windows_.back();
  }
  [[nodiscard]] const std::deque<drift_window>& windows() const noexcept { return windows_; }
  // Moments over everything observed.
  [[nodiscard]] std::span<const running_moments> overall() const noexcept { return total_; }
  [[nodiscard]] std::size_t channels() const noexcept { return channels_; }

 private:
  std::size_t channels_;
  drift_options opt_;
  std::vector<running_moments> total_, window_, scratch_;
  std::uint64_t window_batches_ = 0;
  std::uint64_t next_index_ = 0;
  drift_window reference_;
  std::deque<drift_window> windows_;
};

}  // namespace sluice::diag
