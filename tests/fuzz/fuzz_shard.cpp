// libFuzzer target: the sluice shard reader (io/shard.hpp, io/shard_fields.hpp) on arbitrary bytes
// taken as a whole shard file: header, metadata (class names, the schema of a multi-field shard),
// index and every record's field table. The bytes go to a scratch file (the reader maps a file).
// Anything but a format_error, or field views outside the mapping, out of schema order, of a size
// the schema does not allow, or not 8-aligned, is a bug; ASan/UBSan catch out-of-bounds access.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sluice/io/shard.hpp"
#include "sluice/io/shard_fields.hpp"

namespace {
using s = sluice::schema<sluice::field<"a", std::uint8_t, sluice::variable>, sluice::field<"f", float, sluice::variable>,
                         sluice::field<"i", std::int64_t>>;

const std::string& scratch() {
  static const std::string p = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/sluice_fuzz_shard." + std::to_string(::getpid());
  }();
  return p;
}

void check_reader(const sluice::io::shard_reader& r) {
  const auto whole = r.file().bytes();
  for (std::size_t i = 0; i < r.size() && i < 4096; ++i) {
    (void)r.label(i);
    const auto rec = r.record(i);
    if (!rec.empty() && (rec.data() < whole.data() || rec.data() + rec.size() > whole.data() + whole.size())) std::abort();
    if (!r.has_fields()) continue;
    try {
      std::size_t next = 0;
      const std::byte* end = rec.data();
      r.for_each_field(i, [&](std::size_t k, std::span<const std::byte> v) {
        if (k != next++) std::abort();
        if (v.data() < end || v.data() + v.size() > rec.data() + rec.size()) std::abort();
        if ((v.data() - rec.data()) % 8 != 0) std::abort();
        const auto& f = r.schema()[k];
        if (v.size() % sluice::dtype_size(f.type) != 0) std::abort();
        end = v.data() + v.size();
      });
      if (next != r.schema().size() || end != rec.data() + rec.size()) std::abort();
    } catch (const sluice::format_error&) {
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(scratch().c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size != 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    sluice::io::shard_reader r(scratch());
    check_reader(r);
    (void)r.verify_all();
  } catch (const sluice::format_error&) {
  }
  try {
    sluice::io::shard_fields<s> r(scratch(), {.verify = false});
    for (std::size_t i = 0; i < r.size() && i < 4096; ++i) {
      try {
        const auto smp = r.fields(i);
        std::uint64_t want = 8;  // the fixed field "i" has exactly its shape's bytes
        for (auto d : r.shape_of<"i">()) want *= static_cast<std::uint64_t>(d);
        if (smp.size_of<"i">() != want) std::abort();
        if (smp.size_of<"f">() % 4 != 0 || smp.size_of<"i">() % 8 != 0) std::abort();
      } catch (const sluice::format_error&) {
      }
    }
  } catch (const sluice::format_error&) {
  }
  std::remove(scratch().c_str());
  return 0;
}
