// sluice/sample/sequential.hpp — samplers that need no shuffling: 0, 1, ..., n-1.
//
// Every sampler in sluice maps (epoch, position) -> sample id by a pure function, so any worker
// can compute any batch by itself (determinism for any worker count) and an epoch can be resumed
// at any position in O(1). Every sampler also has fingerprint() (core/state.hpp): a stable kind
// name, its seed and a hash of its parameters, which loader.resume(state) checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/core/concepts.hpp"
#include "sluice/core/state.hpp"

namespace sluice::sample {

class sequential {
 public:
  using sampler_concept = sampler_tag;
  explicit sequential(std::uint64_t n) noexcept : n_(n) {}
  [[nodiscard]] std::size_t size(std::uint64_t /*epoch*/) const noexcept { return static_cast<std::size_t>(n_); }
  [[nodiscard]] std::uint64_t at(std::uint64_t /*epoch*/, std::uint64_t pos) const noexcept { return pos; }
  [[nodiscard]] std::uint64_t dataset_size() const noexcept { return n_; }
  [[nodiscard]] sampler_fingerprint fingerprint() const { return {"sequential", fingerprint_hash{}.add(n_).value()}; }

 private:
  std::uint64_t n_;
};

}  // namespace sluice::sample
