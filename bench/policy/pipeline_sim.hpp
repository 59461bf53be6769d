// A discrete-event simulation of sluice's loader, for testing and benchmarking depth and worker
// policies on synthetic timings without sleeping.
//
// The model is the loader's rule (core/loader.hpp): W workers claim tickets in order; a worker
// may start a batch only while fewer than depth + W batches are alive (being filled, ready, or
// held by the consumer); the consumer takes batches in order, holds one while it steps, releases
// it, then asks for the next. Producer times per batch and consumer step times are lognormal with
// a given mean and coefficient of variation. The policy is called exactly as the loader calls it,
// with the same depth_signal fields, once per delivered batch.
// What it does not model: CPU contention between workers, the cost of the policy itself, and
// per-sample granularity inside a batch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "sluice/policy/depth_fixed.hpp"

namespace sluice_sim {

struct timing {
  double mean_ms = 10;
  double cv = 0.3;  // std / mean
};

struct scenario {
  timing consumer{10, 0.3};
  timing producer{18, 0.6};  // per batch, per worker
  std::size_t workers = 2;
  std::size_t max_workers = 16;
  std::uint64_t batches = 20000;
  std::size_t batch_bytes = 1 << 20;
  std::uint64_t seed = 1;
};

struct result {
  double mean_step_ms = 0;      // mean interval between batch deliveries (busy + wait)
  double step_jitter_ms = 0;    // std of that interval
  double utilization = 0;       // busy / (busy + wait)
  double stall_fraction = 0;    // wait / (busy + wait)
  std::size_t peak_batches_alive = 0;
  std::uint64_t peak_bytes = 0;
  double mean_depth = 0;
  std::size_t final_depth = 0;
  double mean_workers = 0;
  std::size_t final_workers = 0;
};

class lognormal {
 public:
  explicit lognormal(timing t) {
    const double s2 = std::log1p(t.cv * t.cv);
    d_ = std::lognormal_distribution<double>(std::log(t.mean_ms) - s2 / 2, std::sqrt(s2));
  }
  double operator()(std::mt19937_64& g) { return d_(g); }

 private:
  std::lognormal_distribution<double> d_;
};

template <sluice::depth_policy Policy>
result simulate(Policy& policy, const scenario& sc) {
  std::mt19937_64 gen(sc.seed);
  lognormal consumer_time(sc.consumer), producer_time(sc.producer);
  constexpr double never = std::numeric_limits<double>::infinity();
  const std::size_t max_depth = std::max<std::size_t>(1, policy.max_depth());
  std::size_t depth = std::clamp<std::size_t>(policy.initial_depth(), 1, max_depth);
  std::size_t active = std::max<std::size_t>(1, sc.workers);
  std::vector<double> worker_done(sc.max_workers, never);
  std::vector<std::uint64_t> worker_ticket(sc.max_workers, 0);
  std::vector<double> ready_at(sc.batches, never);  // when each batch became ready
  std::uint64_t next_ticket = 0, next_deliver = 0;
  std::size_t alive = 0, peak = 0;
  double t = 0, consumer_free = 0, last_busy = 0, t_request = 0;
  bool consumer_waiting = true;  // asks for batch 0 at t = 0
  double sum_busy = 0, sum_wait = 0, sum_step = 0, sum_step2 = 0, sum_depth = 0, sum_workers = 0;
  double last_delivery = 0;

  auto claim = [&] {
    for (std::size_t w = 0; w < active && next_ticket < sc.batches; ++w) {
      if (worker_done[w] != never || alive >= depth + active) continue;
      worker_ticket[w] = next_ticket++;
      worker_done[w] = t + producer_time(gen);
      ++alive;
      peak = std::max(peak, alive);
    }
  };
  auto ready_count = [&] {
    std::size_t r = 0;
    for (std::uint64_t k = next_deliver; k < next_ticket; ++k) r += ready_at[k] <= t;
    return r;
  };
  std::size_t ready_at_request = 0;
  claim();
  while (next_deliver < sc.batches) {
    // Deliver if the consumer waits and its batch is ready.
    if (consumer_waiting && ready_at[next_deliver] <= t) {
      const double wait = t - t_request;
      sluice::depth_signal sig{next_deliver, static_cast<std::uint64_t>(wait * 1e6),
                               static_cast<std::uint64_t>(last_busy * 1e6), ready_at_request, depth, active,
                               sc.batch_bytes};
      depth = std::clamp<std::size_t>(policy.update(sig), 1, max_depth);
      if constexpr (requires { policy.update_workers(sig); })
        active = std::clamp<std::size_t>(policy.update_workers(sig), 1, sc.max_workers);
      sum_depth += static_cast<double>(depth);
      sum_workers += static_cast<double>(active);
      if (next_deliver > 0) {
        const double step = t - last_delivery;
        sum_step += step;
        sum_step2 += step * step;
      }
      last_delivery = t;
      sum_wait += wait;
      last_busy = consumer_time(gen);
      sum_busy += last_busy;
      consumer_free = t + last_busy;
      consumer_waiting = false;
      ++next_deliver;
      claim();
      continue;
    }
    // Next event: a worker finishing, or the consumer finishing its step.
    double next = consumer_waiting ? never : consumer_free;
    for (std::size_t w = 0; w < worker_done.size(); ++w) next = std::min(next, worker_done[w]);
    t = next;
    for (std::size_t w = 0; w < worker_done.size(); ++w)
      if (worker_done[w] <= t) {
        ready_at[worker_ticket[w]] = worker_done[w];
        worker_done[w] = never;
      }
    if (!consumer_waiting && consumer_free <= t) {
      --alive;  // releases the batch it held
      consumer_waiting = true;
      t_request = t;
      ready_at_request = ready_count();
    }
    claim();
  }
  result r;
  const double n = static_cast<double>(sc.batches - 1);
  r.mean_step_ms = sum_step / n;
  r.step_jitter_ms = std::sqrt(std::max(0.0, sum_step2 / n - r.mean_step_ms * r.mean_step_ms));
  r.utilization = sum_busy / (sum_busy + sum_wait);
  r.stall_fraction = sum_wait / (sum_busy + sum_wait);
  r.peak_batches_alive = peak;
  r.peak_bytes = static_cast<std::uint64_t>(peak) * sc.batch_bytes;
  r.mean_depth = sum_depth / static_cast<double>(sc.batches);
  r.final_depth = depth;
  r.mean_workers = sum_workers / static_cast<double>(sc.batches);
  r.final_workers = active;
  return r;
}

}  // namespace sluice_sim
