// Two translation units include the whole umbrella header and are linked into one program:
// a non-inline function or variable defined in a header would fail to link here.
#include <sluice/sluice.hpp>

std::size_t odr_b_samples();

int main() {
  sluice::sample::sequential s(10);
  std::size_t n = s.size(0) + odr_b_samples();
  return n == 20 && sluice::io::crc32c({}) == 0 ? 0 : 1;
}
