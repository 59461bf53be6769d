// libFuzzer target: the .npy header parser and the shape/size check.
#include <cstdlib>

#include "sluice/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto l = sluice::io::detail::describe_npy(in, "fuzz");
    if (l.header.data_offset > size) std::abort();
    if (l.rows && l.row_bytes) {
      // the last row must lie inside the input
      const std::uint64_t end = l.header.data_offset + l.rows * l.row_bytes;
      if (end != size) std::abort();
      volatile std::byte sink = in[end - 1];
      (void)sink;
    }
  } catch (const sluice::format_error&) {
  }
  return 0;
}
