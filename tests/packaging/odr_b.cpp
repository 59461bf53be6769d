#include <sluice/sluice.hpp>

std::size_t odr_b_samples() { return sluice::sample::shuffle(10, {.seed = 1}).size(0); }
