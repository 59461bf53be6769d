// libFuzzer target: the TFRecord scanner on arbitrary bytes. Any outcome but a format_error or a
// clean index whose entries lie inside the input is a bug; under bad_records::defer, any outcome but
// such an index (with its damaged records listed), or a format_error for a file that starts with a
// compressor's magic, is a bug (ASan/UBSan catch out-of-bounds reads).
#include <cstdlib>

#include "sluice/io/tfrecord.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  for (bool check : {true, false}) {
    try {
      auto idx = sluice::io::detail::scan_tfrecord(in, "fuzz", check);
      for (const auto& e : idx) {
        if (e.offset > size || e.size > size - e.offset) std::abort();
        if (check && sluice::io::masked_crc32c(in.subspan(e.offset, e.size)) == 0xdeadbeefu) return 1;  // touch it
      }
    } catch (const sluice::format_error&) {
    }
    // bad_records::defer throws only for a compressed file (refused at open: it has no records to
    // defer); otherwise every entry lies inside the input, and each damaged record names an entry
    // that exists, in increasing record order.
    std::vector<sluice::io::damaged_record> damaged;
    std::vector<sluice::io::record_entry> idx;
    try {
      idx = sluice::io::detail::scan_tfrecord(in, "fuzz", check, sluice::io::bad_records::defer, &damaged);
    } catch (const sluice::format_error&) {
      if (sluice::io::detail::compression_of(in).name.empty()) std::abort();
      continue;
    }
    for (const auto& e : idx)
      if (e.offset > size || e.size > size - e.offset) std::abort();
    for (std::size_t k = 0; k < damaged.size(); ++k)
      if (damaged[k].record >= idx.size() || (k > 0 && damaged[k].record <= damaged[k - 1].record)) std::abort();
  }
  return 0;
}
