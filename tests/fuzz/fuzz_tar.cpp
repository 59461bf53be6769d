// libFuzzer target: the WebDataset tar scanner (ustar/GNU/pax headers, pax size=, zero blocks
// with and without ignore_zeros, sparse refusal, grouping, labels) and the grouped scan of
// io/wds.hpp (every member of a key: ASCII numbers, .npy headers, missing and duplicate members),
// read back through fields(i) and key(i) for every sample.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sluice/io/wds.hpp"
#include "sluice/io/wds_tar.hpp"

namespace {
using grouped = sluice::schema<sluice::field<"jpg;png", std::uint8_t, sluice::variable>,
                               sluice::field<"cls", std::int16_t>,
                               sluice::field<"npy", float, sluice::variable>>;

// The grouped scan runs on a file (it maps its shards): one per process, rewritten each input.
void fuzz_grouped(const std::uint8_t* data, std::size_t size, bool ignore_zeros) {
  static const std::string path = "/tmp/sluice-fuzz-tar-" + std::to_string(::getpid()) + ".tar";
  if (size == 0) return;  // an empty file cannot be mapped; the scanner's empty-file path is fuzzed above
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    sluice::io::wds_dataset<grouped> d(path, {.index = sluice::io::saved_index::ignore, .ignore_zeros = ignore_zeros});
    for (std::size_t i = 0; i < d.size(); ++i) {
      (void)d.key(i);
      try {
        auto s = d.fields(i);
        for (auto v : s.values) {
          if (v.empty()) continue;
          volatile std::byte sink = v.back();
          (void)sink;
        }
        if (s.size_of<"cls">() != 2) std::abort();
      } catch (const sluice::format_error&) {
      }
    }
  } catch (const sluice::format_error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  for (const char* label : {"cls", ""}) {
    // The label field alternates with reading through zero blocks, so both scans are fuzzed.
    sluice::io::wds_tar_options opt{.record_field = "jpg", .label_field = label, .ignore_zeros = *label == '\0'};
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
    fuzz_grouped(data, size, *label == '\0');
  }
  return 0;
}
