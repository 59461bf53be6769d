// sluice/sample/loss_aware.hpp — sampling that follows the training signal: the trainer feeds back
// each sample's loss, and from the next epoch on samples are drawn in proportion to a blend of
// uniform and their recent loss, so the examples the model still gets wrong are seen more often.
//
// feedback(ids, losses) folds each loss into the sample's exponential moving average; prepare(e),
// called by the loader before its workers start, freezes an alias table with
// P(i) = uniform_share / N + (1 - uniform_share) * l_i^power / sum l^power (a sample never fed back
// counts as the mean); at(e, pos) draws from it with counter_rng(seed, e, pos).
// Guarantees: feedback during epoch e applies from e + 1; the same seed, options and feedback
// sequence give the same draws; save/load resume exactly (the fingerprint covers the frozen
// weights); copies share one state, so the trainer keeps one to call feedback().
// Errors: ids outside the population, NaN, infinite or negative losses, or spans of different
// lengths are a usage_error naming the first few, and change nothing.
// Threads: feedback() is safe with at() and with itself (one feeding thread keeps runs
// bit-identical); prepare, save and load run with the workers idle. Every rule: docs/samplers.md.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <memory>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/core/state.hpp"
#include "sluice/sample/alias.hpp"

namespace sluice::sample {

struct loss_aware_options {
  std::uint64_t seed = 0;
  std::uint64_t samples_per_epoch = 0;  // 0: the population's size
  double uniform_share = 0.5;           // in [0, 1]: the floor; 1 is uniform sampling
  double alpha = 0.5;                   // in (0, 1]: weight of a new loss in a sample's average
  double power = 1.0;                   // >= 0: losses are raised to it before normalising
};

class loss_aware {
  static constexpr std::uint32_t absent = ~std::uint32_t{0};

  struct state {
    std::vector<std::uint64_t> population;  // slot -> sample id
    std::vector<std::uint32_t> slot_of;     // sample id -> slot (absent: not drawn)
    loss_aware_options options;
    std::uint64_t params = 0;
    mutable std::mutex m;                  // guards loss and seen
    std::vector<double> loss;              // moving average per slot
    std::vector<std::uint32_t> seen;       // feedback count per slot (saturating)
    std::uint64_t feedback_calls = 0;
    // Frozen at prepare(); read without a lock by at().
    std::vector<double> weights;           // per slot, sum 1
    alias_table table;
    std::uint64_t table_epoch = 0;
    std::uint64_t weights_hash = 0;
  };

 public:
  using sampler_concept = sampler_tag;

  // Every id in [0, dataset_size) may be drawn.
  explicit loss_aware(std::uint64_t dataset_size, loss_aware_options options = {})
      : loss_aware(dataset_size, iota(dataset_size), options) {}
  // Only the ids in `population` (each < dataset_size, no repeats) are drawn and may be fed back.
  loss_aware(std::uint64_t dataset_size, std::span<const std::uint64_t> population, loss_aware_options options = {})
      : s_(std::make_shared<state>()) {
    auto& s = *s_;
    if (population.empty()) throw usage_error("sluice: loss_aware needs at least one sample to draw");
    if (population.size() >= absent) throw usage_error("sluice: loss_aware draws from at most 2^32 - 2 samples");
    if (!(options.uniform_share >= 0 && options.uniform_share <= 1))
      throw usage_error("sluice: loss_aware uniform_share " + std::to_string(options.uniform_share) + " is not in [0, 1]");
    if (!(options.alpha > 0 && options.alpha <= 1))
      throw usage_error("sluice: loss_aware alpha " + std::to_string(options.alpha) + " is not in (0, 1]");
    if (!(options.power >= 0 && std::isfinite(options.power)))
      throw usage_error("sluice: loss_aware power " + std::to_string(options.power) + " is not a finite number >= 0");
    s.population.assign(population.begin(), population.end());
    s.slot_of.assign(static_cast<std::size_t>(dataset_size), absent);
    for (std::size_t k = 0; k < s.population.size(); ++k) {
      const auto id = s.population[k];
      if (id >= dataset_size)
        throw usage_error("sluice: loss_aware population id " + std::to_string(id) + " is outside the dataset of " +
                          std::to_string(dataset_size) + " samples");
      if (s.slot_of[static_cast<std::size_t>(id)] != absent)
        throw usage_error("sluice: loss_aware population lists id " + std::to_string(id) + " twice");
      s.slot_of[static_cast<std::size_t>(id)] = static_cast<std::uint32_t>(k);
    }
    if (options.samples_per_epoch == 0) options.samples_per_epoch = s.population.size();
    s.options = options;
    s.loss.assign(s.population.size(), 0.0);
    s.seen.assign(s.population.size(), 0);
    s.params = fingerprint_hash{}
                   .add(dataset_size)
                   .add_all(s.population)
                   .add(options.seed)
                   .add(options.samples_per_epoch)
                   .add(options.uniform_share)
                   .add(options.alpha)
                   .add(options.power)
                   .value();
    build(0);
  }

  // Kind "loss_aware"; the hash covers the population, the options and the weights frozen for the
  // prepared epoch (so a resume with weights other than the interrupted run's is refused).
  [[nodiscard]] sampler_fingerprint fingerprint() const {
    return {"loss_aware", mix_keys(s_->params, s_->weights_hash), s_->options.seed, true};
  }
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return s_->options.samples_per_epoch; }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const {
    const auto& s = *s_;
    if (epoch != s.table_epoch)
      throw usage_error("sluice: loss_aware asked for epoch " + std::to_string(epoch) + " while epoch " +
                        std::to_string(s.table_epoch) + " is prepared (call prepare(" + std::to_string(epoch) + ") first)");
    counter_rng rng(s.options.seed, epoch, pos);
    return s.population[static_cast<std::size_t>(s.table.draw(rng))];
  }
  // Freezes the weights for `epoch` from the feedback so far (a no-op for the prepared epoch).
  void prepare(std::uint64_t epoch) {
    if (epoch != s_->table_epoch) build(epoch);
  }

  // Folds one loss per id into the samples' moving averages; applies from the next prepare().
  void feedback(std::span<const std::uint64_t> ids, std::span<const double> losses) { feed(ids, losses); }
  void feedback(std::span<const std::uint64_t> ids, std::span<const float> losses) { feed(ids, losses); }

  // The epoch whose weights are frozen, and P(draw == population()[k]) in it (sums to 1).
  [[nodiscard]] std::uint64_t prepared_epoch() const noexcept { return s_->table_epoch; }
  [[nodiscard]] const std::vector<double>& probabilities() const noexcept { return s_->weights; }
  [[nodiscard]] const std::vector<std::uint64_t>& population() const noexcept { return s_->population; }
  // A copy of the moving averages (0 where no loss was fed back) and of the feedback counts.
  [[nodiscard]] std::vector<double> average_losses() const {
    std::lock_guard lk(s_->m);
    return s_->loss;
  }
  [[nodiscard]] std::uint64_t samples_seen() const {
    std::lock_guard lk(s_->m);
    std::uint64_t n = 0;
    for (auto c : s_->seen) n += c != 0;
    return n;
  }

  // Binary state: averages, counts, frozen weights, prepared epoch. load() needs a sampler built
  // with the same population and options (usage_error otherwise, or on a truncated stream).
  void save(std::ostream& os) const {
    const auto& s = *s_;
    std::lock_guard lk(s.m);
    put(os, magic);
    put(os, s.params);
    put(os, static_cast<std::uint64_t>(s.population.size()));
    put(os, s.table_epoch);
    put(os, s.feedback_calls);
    os.write(reinterpret_cast<const char*>(s.loss.data()), static_cast<std::streamsize>(s.loss.size() * sizeof(double)));
    os.write(reinterpret_cast<const char*>(s.seen.data()), static_cast<std::streamsize>(s.seen.size() * sizeof(std::uint32_t)));
    os.write(reinterpret_cast<const char*>(s.weights.data()), static_cast<std::streamsize>(s.weights.size() * sizeof(double)));
    if (!os) throw error("sluice: loss_aware save: the stream failed");
  }
  void load(std::istream& is) {
    auto& s = *s_;
    std::uint64_t m = 0, params = 0, n = 0, epoch = 0, calls = 0;
    get(is, m);
    get(is, params);
    get(is, n);
    get(is, epoch);
    get(is, calls);
    if (!is || m != magic) throw usage_error("sluice: loss_aware load: not a loss_aware state");
    if (params != s.params || n != s.population.size())
      throw usage_error("sluice: loss_aware load: the state was saved by a sampler with another population or options");
    std::vector<double> loss(n), weights(n);
    std::vector<std::uint32_t> seen(n);
    is.read(reinterpret_cast<char*>(loss.data()), static_cast<std::streamsize>(n * sizeof(double)));
    is.read(reinterpret_cast<char*>(seen.data()), static_cast<std::streamsize>(n * sizeof(std::uint32_t)));
    is.read(reinterpret_cast<char*>(weights.data()), static_cast<std::streamsize>(n * sizeof(double)));
    if (!is) throw usage_error("sluice: loss_aware load: the state is truncated");
    std::lock_guard lk(s.m);
    s.loss = std::move(loss);
    s.seen = std::move(seen);
    s.feedback_calls = calls;
    freeze(std::move(weights), epoch);
  }

 private:
  static constexpr std::uint64_t magic = 0x57415353'4f4c534cull;  // "LSLOSSAW", little-endian

  static std::vector<std::uint64_t> iota(std::uint64_t n) {
    std::vector<std::uint64_t> v(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
    return v;
  }
  static void put(std::ostream& os, std::uint64_t v) { os.write(reinterpret_cast<const char*>(&v), sizeof v); }
  static void get(std::istream& is, std::uint64_t& v) { is.read(reinterpret_cast<char*>(&v), sizeof v); }

  template <class Loss>
  void feed(std::span<const std::uint64_t> ids, std::span<const Loss> losses) {
    auto& s = *s_;
    if (ids.size() != losses.size())
      throw usage_error("sluice: loss_aware feedback got " + std::to_string(ids.size()) + " ids and " +
                        std::to_string(losses.size()) + " losses; one loss per id");
    // Checked before anything is folded in: a bad call changes nothing.
    std::string bad_ids, bad_losses;
    std::size_t n_bad_ids = 0, n_bad_losses = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const auto id = ids[k];
      if (id >= s.slot_of.size() || s.slot_of[static_cast<std::size_t>(id)] == absent) {
        if (n_bad_ids++ < 5) bad_ids += (bad_ids.empty() ? "" : ", ") + std::to_string(id);
      } else if (const double l = static_cast<double>(losses[k]); !std::isfinite(l) || l < 0) {
        if (n_bad_losses++ < 5) bad_losses += (bad_losses.empty() ? "" : ", ") + std::to_string(id) + " (" + std::to_string(l) + ")";
      }
    }
    if (n_bad_ids)
      throw usage_error("sluice: loss_aware feedback for " + std::to_string(n_bad_ids) + " id(s) outside the " +
                        std::to_string(s.population.size()) + "-sample population of a " + std::to_string(s.slot_of.size()) +
                        "-sample dataset: " + bad_ids + (n_bad_ids > 5 ? ", ..." : ""));
    if (n_bad_losses)
      throw usage_error("sluice: loss_aware feedback has " + std::to_string(n_bad_losses) +
                        " NaN, infinite or negative loss(es), for id(s) " + bad_losses + (n_bad_losses > 5 ? ", ..." : ""));
    const double a = s.options.alpha;
    std::lock_guard lk(s.m);
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const auto slot = s.slot_of[static_cast<std::size_t>(ids[k])];
      const double l = static_cast<double>(losses[k]);
      s.loss[slot] = s.seen[slot] == 0 ? l : a * l + (1 - a) * s.loss[slot];
      if (s.seen[slot] != ~std::uint32_t{0}) ++s.seen[slot];
    }
    ++s.feedback_calls;
  }

  void build(std::uint64_t epoch) {
    auto& s = *s_;
    const std::size_t n = s.population.size();
    std::vector<double> score(n, 0.0);
    {
      std::lock_guard lk(s.m);
      double seen_sum = 0;
      std::size_t seen_n = 0;
      for (std::size_t k = 0; k < n; ++k)
        if (s.seen[k]) {
          seen_sum += s.loss[k];
          ++seen_n;
        }
      const double unseen = seen_n ? seen_sum / static_cast<double>(seen_n) : 0.0;
      for (std::size_t k = 0; k < n; ++k) score[k] = s.seen[k] ? s.loss[k] : unseen;
    }
    double total = 0;
    for (auto& x : score) {
      x = s.options.power == 1.0 ? x : std::pow(x, s.options.power);
      total += x;
    }
    const double u = s.options.uniform_share, dn = static_cast<double>(n);
    std::vector<double> w(n);
    for (std::size_t k = 0; k < n; ++k)  // no (usable) loss yet: uniform
      w[k] = total > 0 && std::isfinite(total) ? u / dn + (1 - u) * score[k] / total : 1.0 / dn;
    freeze(std::move(w), epoch);
  }
  void freeze(std::vector<double> w, std::uint64_t epoch) {
    auto& s = *s_;
    s.table.build(w);
    s.weights_hash = fingerprint_hash{}.add_all(w).value();
    s.weights = std::move(w);
    s.table_epoch = epoch;
  }

  std::shared_ptr<state> s_;
};

}  // namespace sluice::sample
