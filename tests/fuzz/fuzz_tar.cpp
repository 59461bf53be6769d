// libFuzzer target: the WebDataset tar scanner (ustar/GNU/pax headers, pax size=, zero blocks
// with and without ignore_zeros, sparse refusal, grouping, labels).
#include <cstdlib>

#include "sluice/io/wds_tar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  for (const char* label : {"cls", ""}) {
    // The label field alternates with reading through zero blocks, so both scans are fuzzed.
    sluice::io::wds_options opt{.record_field = "jpg", .label_field = label, .ignore_zeros = *label == '\0'};
    try {
      auto idx = sluice::io::detail::scan_wds_tar(in, "fuzz", opt, nullptr);
      for (const auto& e : idx) {
        if (e.offset > size || e.size > size - e.offset) std::abort();
        volatile std::byte sink{};
        if (e.size) sink = in[e.offset + e.size - 1];
        (void)sink;
      }
    } catch (const sluice::format_error&) {
    }
  }
  return 0;
}
