// sluice/diag/class_balance.hpp — what the sampler actually fed the model, class by class.
//
// `class_balance_monitor` sees each batch's labels (in batch order) and keeps, for the current epoch:
//   - per-class count in every batch: mean and std across batches (Welford, no per-batch history: memory O(classes));
//   - class_std: the std over classes of the mean per-batch count, in samples per batch: 0 for a perfectly balanced
//     feed, about 8 for Fashion-MNIST with a 100:1 long tail and batch 64; the advisor compares it with 1.5;
//   - mean_within_batch_std: the std over classes of one batch's counts, averaged over batches (includes the
//     multinomial noise of small batches: ~sqrt(B/K) even when balanced);
//   - epoch shares: each class's share of the epoch and their std (percentage points);
//   - runs: the longest run of consecutive samples with one label. An i.i.d. order with class probabilities p_c has a
//     longest run of about max_c log_{1/p_c}(n p_c (1 - p_c)) (Schilling, 1990) with spread ~1.28 / ln(1/p); a run
//     beyond that plus four spreads is flagged as non-i.i.d. order (e.g. a dataset stored sorted by class, read
//     sequentially).
// Labels outside [0, classes) are counted in `unknown_labels`, otherwise ignored. Not thread-safe: call from the
// consumer, one batch at a time. The advisor's rule: docs/advisor.md.
//
//   sluice::diag::class_balance_monitor mon{10};
//   for (auto& b : loader.epoch(e)) mon.observe_batch(b.labels());
//   auto s = mon.summary();   // s.class_std, s.non_iid_order, ...
//   mon.reset();              // next epoch
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace sluice::diag {

struct class_balance_summary {
  std::size_t classes = 0;
  std::uint64_t batches = 0;
  std::uint64_t samples = 0;
  std::uint64_t unknown_labels = 0;
  std::vector<double> mean_count_per_batch;      // per class
  std::vector<double> count_std_across_batches;  // per class
  std::vector<std::uint64_t> epoch_counts;       // per class
  double class_std = 0;              // std over classes of mean_count_per_batch (samples/batch)
  double mean_within_batch_std = 0;  // mean over batches of the std over classes of its counts
  double epoch_share_std_pct = 0;    // std over classes of the epoch share, percentage points
  std::size_t classes_unseen = 0;
  std::uint64_t longest_run = 0;
  std::int64_t longest_run_label = -1;
  double expected_longest_run_iid = 0;
  bool non_iid_order = false;
};

class class_balance_monitor {
 public:
  explicit class_balance_monitor(std::size_t classes)
      : classes_(classes), batch_counts_(classes), mean_(classes), m2_(classes), epoch_(classes) {}

  template <class Label>
    requires std::is_integral_v<Label>
  void observe_batch(std::span<const Label> labels) {
    std::fill(batch_counts_.begin(), batch_counts_.end(), 0);
    for (Label l : labels) {
      const auto v = static_cast<std::int64_t>(l);
      if (v == run_label_) {
        ++run_;
      } else {
        run_label_ = v;
        run_ = 1;
      }
      if (run_ > longest_run_) { longest_run_ = run_; longest_label_ = v; }
      if (v < 0 || static_cast<std::uint64_t>(v) >= classes_) { ++unknown_; continue; }
      ++batch_counts_[static_cast<std::size_t>(v)];
    }
    ++batches_;
    samples_ += labels.size();
    double within_mean = 0;
    for (std::size_t c = 0; c < classes_; ++c) within_mean += batch_counts_[c];
    within_mean /= static_cast<double>(classes_ ? classes_ : 1);
    double within_var = 0;
    const double nb = static_cast<double>(batches_);
    for (std::size_t c = 0; c < classes_; ++c) {
      const double x = batch_counts_[c];
      epoch_[c] += batch_counts_[c];
      const double d = x - mean_[c];
      mean_[c] += d / nb;
      m2_[c] += d * (x - mean_[c]);
      within_var += (x - within_mean) * (x - within_mean);
    }
    within_std_sum_ += std::sqrt(within_var / static_cast<double>(classes_ ? classes_ : 1));
  }
  template <class Range>
  void observe_batch(const Range& labels) {
    observe_batch(std::span(std::data(labels), std::size(labels)));
  }

  // Counts of the batch seen last.
  [[nodiscard]] std::span<const std::uint64_t> last_batch_counts() const noexcept { return batch_counts_; }

  [[nodiscard]] class_balance_summary summary() const {
    class_balance_summary s;
    s.classes = classes_;
    s.batches = batches_;
    s.samples = samples_;
    s.unknown_labels = unknown_;
    s.mean_count_per_batch = mean_;
    s.epoch_counts = epoch_;
    s.count_std_across_batches.resize(classes_);
    for (std::size_t c = 0; c < classes_; ++c) {
      s.count_std_across_batches[c] = batches_ > 1 ? std::sqrt(m2_[c] / static_cast<double>(batches_ - 1)) : 0;
    }
    s.class_std = population_std(mean_);
    s.mean_within_batch_std = batches_ ? within_std_sum_ / static_cast<double>(batches_) : 0;
    const std::uint64_t known = samples_ - unknown_;
    std::vector<double> share(classes_);
    for (std::size_t c = 0; c < classes_; ++c) {
      share[c] = known ? 100.0 * static_cast<double>(epoch_[c]) / static_cast<double>(known) : 0;
      if (epoch_[c] == 0) ++s.classes_unseen;
    }
    s.epoch_share_std_pct = population_std(share);
    s.longest_run = longest_run_;
    s.longest_run_label = longest_label_;
    // Expected longest run under i.i.d. sampling with the observed class frequencies.
    double expected = 1, spread = 0;
    for (std::size_t c = 0; c < classes_ && known > 0; ++c) {
      const double p = static_cast<double>(epoch_[c]) / static_cast<double>(known);
      if (p <= 0 || p >= 1) continue;
      const double n = static_cast<double>(known);
      const double l = std::log(n * p * (1 - p)) / std::log(1 / p);
      if (l > expected) { expected = l; spread = 1.28 / std::log(1 / p); }
    }
    s.expected_longest_run_iid = expected;
    s.non_iid_order = known > 0 && static_cast<double>(longest_run_) > expected + 4 * spread + 2;
    return s;
  }

  // Starts a new epoch.
  void reset() {
    std::fill(mean_.begin(), mean_.end(), 0);
    std::fill(m2_.begin(), m2_.end(), 0);
    std::fill(epoch_.begin(), epoch_.end(), 0);
    batches_ = samples_ = unknown_ = 0;
    within_std_sum_ = 0;
    run_ = longest_run_ = 0;
    run_label_ = longest_label_ = -1;
  }

  [[nodiscard]] std::size_t classes() const noexcept { return classes_; }

 private:
  static double population_std(const std::vector<double>& v) {
    if (v.empty()) return 0;
    double m = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size()));
  }

  std::size_t classes_;
  std::vector<std::uint64_t> batch_counts_;
  std::vector<double> mean_, m2_;
  std::vector<std::uint64_t> epoch_;
  std::uint64_t batches_ = 0, samples_ = 0, unknown_ = 0;
  double within_std_sum_ = 0;
  std::uint64_t run_ = 0, longest_run_ = 0;
  std::int64_t run_label_ = -1, longest_label_ = -1;
};

}  // namespace sluice::diag
