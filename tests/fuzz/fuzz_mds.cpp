// libFuzzer target: an MDS index.json and one shard (io/mds.hpp), from one input: two bytes give
// the index's length (little-endian), the index's text follows, the rest is the shard. Every shard
// the index lists is that one file (its index size set to the file's, so the offset table and the
// samples are reached). Any outcome but samples whose views lie inside the shard, a format_error or
// an io_error is a bug (ASan/UBSan catch out-of-bounds reads).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "sluice/io/mds.hpp"

namespace {
using fuzz_schema = sluice::schema<sluice::field<"arr", std::int32_t, sluice::variable>, sluice::field<"label", std::int64_t>,
                                   sluice::field<"name", std::uint8_t, sluice::variable>, sluice::field<"vec", float>>;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t len = std::min<std::size_t>(data[0] | (std::size_t{data[1]} << 8), size - 2);
  const std::string_view index(reinterpret_cast<const char*>(data + 2), len);
  const std::uint8_t* shard = data + 2 + len;
  const std::size_t shard_size = size - 2 - len;
  try {
    auto shards = sluice::io::parse_mds_index(index, "fuzz/index.json");
    if (shards.size() > 64) return 0;
    const int fd = ::memfd_create("mds", MFD_CLOEXEC);
    if (fd < 0) std::abort();
    if (shard_size > 0 && ::write(fd, shard, shard_size) != static_cast<ssize_t>(shard_size)) std::abort();
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    for (auto& s : shards) s.bytes = shard_size;
    try {
      std::span<const std::byte> mapped;  // the shard's mapping (every open maps the same file)
      sluice::io::mds_dataset<fuzz_schema> d(std::move(shards), "fuzz/index.json",
                                             [&](const sluice::io::mds_shard_info&, std::size_t) {
                                               sluice::io::mapped_file f(path, {.populate = sluice::io::populate_mode::none});
                                               mapped = f.bytes();
                                               return sluice::io::mds_shard_file{"fuzz/shard", std::move(f), nullptr};
                                             });
      std::vector<std::span<const std::byte>> maps;
      for (std::size_t i = 0; i < d.size() && i < 4096; ++i) {
        try {
          const auto s = d.fields(i);
          if (maps.empty() || maps.back().data() != mapped.data()) maps.push_back(mapped);
          for (const auto& v : s.values) {
            if (v.empty()) continue;
            bool inside = false;
            for (const auto& m : maps)
              inside = inside || (v.data() >= m.data() && v.data() + v.size() <= m.data() + m.size());
            if (!inside) std::abort();
          }
          if (s.bytes_of<"label">().size() != 8 || s.bytes_of<"vec">().size() % 4 != 0 || s.bytes_of<"arr">().size() % 4 != 0)
            std::abort();
        } catch (const sluice::format_error&) {
        }
      }
    } catch (const sluice::error&) {
    }
    ::close(fd);
  } catch (const sluice::format_error&) {
  }
  return 0;
}
