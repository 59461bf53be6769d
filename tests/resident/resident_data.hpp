// The records both resident_dataset tests use (tests/resident on Thrust's CPP backend,
// tests/cuda/device on CUDA): n records of rb pseudo-random bytes and labels in -1..8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sluice/core/random.hpp"

namespace sluice_resident_test {

struct data {
  std::size_t n, rb;
  std::vector<std::uint8_t> bytes;
  std::vector<std::int64_t> labels;
  data(std::size_t n_, std::size_t rb_) : n(n_), rb(rb_), bytes(n_ * rb_), labels(n_) {
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(sluice::splitmix64(i) >> 56);
    for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<std::int64_t>(sluice::splitmix64(i + 77) % 10) - 1;
  }
};

}  // namespace sluice_resident_test
