// The smallest program a user writes: the umbrella header, one reader, a shuffle, collate and
// prefetch, one epoch. What bench/compile/compile_time.sh times.
#include <sluice/sluice.hpp>

int main(int argc, char** argv) {
  sluice::io::fixed_records r(argc > 1 ? argv[1] : "data.bin", {.record_bytes = 16});
  auto loader = sluice::from(sluice::sample::shuffle(r.size(), {.seed = 1})) | sluice::read(r) |
                sluice::collate({.batch = 4}) | sluice::prefetch(2);
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  return n == 0;
}
