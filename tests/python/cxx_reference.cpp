// The C++ side of the Python determinism test: the pipeline sluice.loader("records", ...,
// sampler="shuffle") builds, composed here by hand, prints one FNV-1a hash per batch of epoch E
// (data bytes, then label bytes). test_loader.py compares them with the batches the module gives.
//
//   cxx_reference <records> <labels> <record_bytes> <batch> <seed> <workers> <epoch>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <sluice/sluice.hpp>

#include "sluice/io/fixed_records.hpp"
#include "sluice/sample/distributed.hpp"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: cxx_reference <records> <labels> <record_bytes> <batch> <seed> <workers> <epoch>\n");
    return 2;
  }
  const auto num = [&](int i) { return std::strtoull(argv[i], nullptr, 10); };
  sluice::io::fixed_records r(argv[1], {.record_bytes = num(3), .labels_path = argv[2]});
  const std::size_t n = r.size();
  auto loader = sluice::from(sluice::sample::distributed{sluice::sample::shuffle(n, {.seed = num(5)}), {}}) |
                sluice::read(std::move(r)) | sluice::collate({.batch = num(4)}) |
                sluice::prefetch(2, {.workers = num(6), .seed = num(5)});
  for (auto& b : loader.epoch(num(7))) {
    std::uint64_t h = 1469598103934665603ULL;
    auto mix = [&](const void* p, std::size_t k) {
      const auto* c = static_cast<const unsigned char*>(p);
      for (std::size_t i = 0; i < k; ++i) h = (h ^ c[i]) * 1099511628211ULL;
    };
    const auto d = b.field("data"), l = b.field("label");
    mix(d.data(), d.size_bytes());
    mix(l.data(), l.size_bytes());
    std::printf("%llu\n", static_cast<unsigned long long>(h));
  }
  return 0;
}
