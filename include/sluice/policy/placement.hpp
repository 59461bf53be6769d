// sluice/policy/placement.hpp — where a batch's images are decoded: on the host's workers, on the
// device, or split between them, the split steered by what each side measured.
//
// A placement policy answers, per batch, how many of its n images the device decodes, and is told
// afterwards what that cost (stage/split_decode.hpp asks and tells): host_only, device_only,
// fixed{f}, or balanced, which learns the split that makes both sides finish together, k =
// n * a / (a + b) from the measured per-image host time a and device time b (launch cost
// included), and so is never slower than the better single side, up to one image. Each side
// keeps at least one image while both are useful; a hopeless side is probed every `probe_every`
// batches. With the trainer's stall reported (observe_consumer(loader.stats())), balanced spends
// device time only while the loader is short: the project's thesis, that past the point where the
// loader stops being the bottleneck more speed buys nothing.
// Threads: every member function may be called from any thread; copies share their state, so a
// trainer keeps one copy to read and steer. The rule's derivation: docs/device.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "sluice/core/error.hpp"

namespace sluice::placement {

// One batch, as split_decode measured it (see the header comment).
struct observation {
  std::size_t batch = 0;      // images in the batch
  std::size_t on_device = 0;  // of them, decoded by the device
  std::uint64_t host_ns = 0;
  std::uint64_t device_ns = 0;
};

struct host_only {
  static constexpr std::string_view name = "host_only";
  [[nodiscard]] std::size_t device_count(std::size_t) const noexcept { return 0; }
  void observe(const observation&) const noexcept {}
};

struct device_only {
  static constexpr std::string_view name = "device_only";
  [[nodiscard]] std::size_t device_count(std::size_t n) const noexcept { return n; }
  void observe(const observation&) const noexcept {}
};

struct fixed {
  static constexpr std::string_view name = "fixed";
  double fraction = 0.5;
  [[nodiscard]] std::size_t device_count(std::size_t n) const noexcept {
    const double f = std::clamp(fraction, 0.0, 1.0);
    return std::min(n, static_cast<std::size_t>(std::llround(f * static_cast<double>(n))));
  }
  void observe(const observation&) const noexcept {}
};

struct balanced_options {
  double initial_fraction = 0.5;  // of each batch on the device before anything is measured
  double gain = 0.5;              // how far towards the measured balance each batch moves
  double smoothing = 0.3;         // weight of the newest batch in the averages of a and b
  std::size_t probe_every = 16;   // batches between probes of a hopeless side
  double target_stall = 0.05;     // consumer stall fraction the device budget aims under
  double budget_step = 0.1;
};

class balanced {
 public:
  static constexpr std::string_view name = "balanced";
  explicit balanced(balanced_options o = {}) : s_(std::make_shared<state>(o)) {
    if (!(o.initial_fraction >= 0.0 && o.initial_fraction <= 1.0) || !(o.gain > 0.0 && o.gain <= 1.0) ||
        !(o.smoothing > 0.0 && o.smoothing <= 1.0) || o.probe_every == 0 || !(o.target_stall > 0.0 && o.target_stall < 1.0) ||
        !(o.budget_step > 0.0 && o.budget_step <= 1.0))
      throw usage_error(
          "sluice: placement::balanced: initial_fraction in [0, 1], gain and smoothing in (0, 1], probe_every >= 1, "
          "target_stall in (0, 1) and budget_step in (0, 1] are required");
    s_->publish();
  }

  // Images of an n-image batch for the device.
  [[nodiscard]] std::size_t device_count(std::size_t n) const noexcept {
    if (n == 0) return 0;
    const double f = s_->share.load(std::memory_order_relaxed);
    const std::uint64_t t = s_->ticket.fetch_add(1, std::memory_order_relaxed);
    const bool probe = t % s_->opt.probe_every == 0;
    const int hopeless = s_->hopeless.load(std::memory_order_relaxed);
    if (hopeless > 0) return probe && n >= 2 ? 1 : 0;          // the device: only probes
    if (hopeless < 0) return probe && n >= 2 ? n - 1 : n;      // the host: only probes
    const double dn = static_cast<double>(n);
    auto k = static_cast<std::size_t>(std::llround(f * dn));
    if (n >= 2 && s_->budget_full()) {
      // Of the two whole counts around the balance, the one predicted to finish first.
      const double a = s_->a_pub.load(std::memory_order_relaxed), b = s_->b_pub.load(std::memory_order_relaxed);
      if (a > 0 && b > 0) {
        const auto lo = static_cast<std::size_t>(std::floor(f * dn));
        const auto cost = [&](std::size_t c) { return std::max(static_cast<double>(n - c) * a, static_cast<double>(c) * b); };
        k = lo < n && cost(lo + 1) < cost(lo) ? lo + 1 : lo;
      }
      k = std::clamp<std::size_t>(k, 1, n - 1);  // both sides stay measured
    }
    return std::min(k, n);
  }

  void observe(const observation& o) const {
    if (o.batch == 0 || o.on_device > o.batch) return;
    std::lock_guard lk(s_->m);
    s_->learn(o);
  }

  // The trainer's consumer wait and busy time, cumulative (loader.stats() has both).
  template <class Stats>
    requires requires(const Stats& st) {
      { st.consumer_wait_ns } -> std::convertible_to<std::uint64_t>;
      { st.consumer_busy_ns } -> std::convertible_to<std::uint64_t>;
    }
  void observe_consumer(const Stats& st) const {
    std::lock_guard lk(s_->m);
    s_->steer(static_cast<std::uint64_t>(st.consumer_wait_ns), static_cast<std::uint64_t>(st.consumer_busy_ns));
  }

  // The balanced share of a batch for the device (before the stall budget), and the budget.
  [[nodiscard]] double fraction() const {
    std::lock_guard lk(s_->m);
    return s_->fraction;
  }
  [[nodiscard]] double budget() const {
    std::lock_guard lk(s_->m);
    return s_->budget;
  }
  // Seconds per image each side measured (0 until measured).
  [[nodiscard]] double host_seconds_per_image() const {
    std::lock_guard lk(s_->m);
    return s_->a * 1e-9;
  }
  [[nodiscard]] double device_seconds_per_image() const {
    std::lock_guard lk(s_->m);
    return s_->b * 1e-9;
  }
  [[nodiscard]] std::uint64_t batches_observed() const {
    std::lock_guard lk(s_->m);
    return s_->batches;
  }

 private:
  struct state {
    explicit state(balanced_options o) : opt(o), fraction(o.initial_fraction) {}
    balanced_options opt;
    std::mutex m;
    double fraction;      // balanced device share
    double budget = 1.0;  // of that share, allowed by the trainer's stall
    double a = 0, b = 0;  // ns per image: host, device (0: not measured)
    std::uint64_t batches = 0;
    bool device_hopeless = false, host_hopeless = false;
    std::uint64_t last_wait = 0, last_busy = 0;
    bool have_consumer = false;
    std::atomic<double> share{0.5}, a_pub{0}, b_pub{0};
    std::atomic<int> hopeless{0};
    std::atomic<std::uint64_t> ticket{1};

    [[nodiscard]] bool budget_full() const noexcept { return budget_full_flag.load(std::memory_order_relaxed); }
    std::atomic<bool> budget_full_flag{true};

    void publish() noexcept {
      share.store(fraction * budget, std::memory_order_relaxed);
      a_pub.store(a, std::memory_order_relaxed);
      b_pub.store(b, std::memory_order_relaxed);
      hopeless.store(device_hopeless ? 1 : host_hopeless ? -1 : 0, std::memory_order_relaxed);  // +1 the device
      budget_full_flag.store(budget >= 1.0, std::memory_order_relaxed);
    }

    static void average(double& into, double x, double w) noexcept { into = into == 0 ? x : (1 - w) * into + w * x; }

    void learn(const observation& o) {
      const std::size_t n = o.batch, k = o.on_device, h = n - k;
      const double dn = static_cast<double>(n);
      const double a_now = h > 0 ? static_cast<double>(o.host_ns) / static_cast<double>(h) : 0;
      const double b_now = k > 0 ? static_cast<double>(o.device_ns) / static_cast<double>(k) : 0;
      if (a_now > 0) average(a, a_now, opt.smoothing);
      if (b_now > 0) average(b, b_now, opt.smoothing);
      ++batches;
      // A side is hopeless when one image there took longer than the whole batch on the other;
      // only a batch that gave it exactly one image says so (or says it no longer is).
      if (k == 1 && a > 0 && b_now > 0) device_hopeless = b_now > dn * a;
      if (h == 1 && b > 0 && a_now > 0) host_hopeless = a_now > dn * b;
      if (device_hopeless) fraction = 0.0;
      else if (host_hopeless) fraction = 1.0;
      else if (a > 0 && b > 0) fraction += opt.gain * (a / (a + b) - fraction);
      publish();
    }

    void steer(std::uint64_t wait, std::uint64_t busy) {
      if (!have_consumer || wait < last_wait || busy < last_busy) {  // first report, or a new loader's
        have_consumer = true;
        last_wait = wait;
        last_busy = busy;
        return;
      }
      const double dw = static_cast<double>(wait - last_wait), db = static_cast<double>(busy - last_busy);
      if (dw + db <= 0) return;
      const double stall = dw / (dw + db);
      if (stall > opt.target_stall) budget = std::min(1.0, budget + 2 * opt.budget_step);
      else if (stall < opt.target_stall / 2) budget = std::max(0.0, budget - opt.budget_step);
      last_wait = wait;
      last_busy = busy;
      publish();
    }
  };
  std::shared_ptr<state> s_;
};

// What split_decode needs of a placement policy.
template <class P>
concept placement_policy = requires(const P& p, std::size_t n, const observation& o) {
  { P::name } -> std::convertible_to<std::string_view>;
  { p.device_count(n) } -> std::convertible_to<std::size_t>;
  p.observe(o);
};

}  // namespace sluice::placement
