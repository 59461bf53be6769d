// sluice/core/loader_options.hpp — how a loader runs: workers, seed, errors, timing, pinning,
// the budget for kept batches and the file checks. Every field has a default; a pipeline passes
// them to its last stage: `| sluice::prefetch(2, {.workers = 4, .seed = 7})`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

// What a failing sample does: raise ends the batch with a stage_error naming the stage and the
// sample; skip drops the sample, counts it (pipeline_stats::skipped, skip_causes) and goes on.
enum class on_error : std::uint8_t { raise, skip };

struct loader_options {
  // Worker threads at the start. 0: no worker thread; the trainer's own call for a batch fills it
  // (as DataLoader's num_workers=0: nothing runs ahead; "In the calling thread" in docs/loader.md).
  std::size_t workers = 2;
  // Threads spawned (0: = workers); set_workers() moves within it.
  std::size_t max_workers = 0;
  // For augmentation: sample_context.seed.
  std::uint64_t seed = 0;
  on_error errors = on_error::raise;
  // Sampled per-stage busy time (core/stats.hpp); off only to measure what it costs.
  bool stage_timing = true;
  // Idle workers help write another worker's batch (docs/loader.md).
  bool split_batches = true;
  // Once the first batch's size is known, a short-lived thread allocates and touches the ring's
  // other slots (docs/loader.md).
  bool warm_slots = true;
  // Pin worker w to cpus[w % size] (core/affinity.hpp); empty: no pinning (the default).
  std::vector<int> cpus{};
  // Bytes of batches the trainer may keep beyond what the ring's own slots leave to the
  // pipeline: the ring grows by whole slots while the extra slots' bytes (counted at the largest
  // batch so far) stay within it ("Keeping batches" in docs/loader.md; stats().slots_grown).
  // 0: the ring never grows, and holding every slot is a usage_error. Default 1 GiB.
  std::size_t hold_budget = std::size_t{1} << 30;
  // After each batch is written, stat every file it read and fail its samples from a file that
  // changed (core/file_guard.hpp: batch_file_check; one stat per distinct file a batch, ~1.3 us).
  // false: only page faults and the start of each epoch are checked, for data on storage nothing
  // can write to while the loader runs (a sample may then carry a concurrent rewrite's bytes).
  bool check_files = true;
};

}  // namespace sluice
