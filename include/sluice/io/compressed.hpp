// sluice/io/compressed.hpp — naming a compressed file where an uncompressed format is read.
//
// sluice maps tar shards and TFRecord files and reads them in place, so it reads them
// uncompressed. A `.tar.gz` shard or a TFRecord written with compression_type="GZIP" would
// otherwise fail on its first header ("not a tar archive (header checksum mismatch)", "length CRC
// mismatch"), which names the wrong cause. A reader whose first header does not parse asks
// throw_if_compressed, which looks at the file's first bytes for the magic of gzip (1f 8b), zstd
// (28 b5 2f fd), bzip2 ("BZh" and a block size), xz (fd 37 7a 58 5a 00) or zlib (TFRecord's
// "ZLIB": 78 01, 78 5e, 78 9c or 78 da) and raises a format_error naming the file, the
// compression and how to decompress it. Only a file that already failed to parse is looked at,
// so a valid file that happens to begin with such bytes is never refused.
//
//   if (!tar_checksum_ok(h)) { detail::throw_if_compressed(file, path, "tar archives"); throw ...; }
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "sluice/core/error.hpp"

namespace sluice::io::detail {

struct compression_kind {
  std::string_view name;        // "gzip"
  std::string_view decompress;  // the command that undoes it
};

// The compression `file`'s first bytes announce, or an empty name.
inline compression_kind compression_of(std::span<const std::byte> file) noexcept {
  auto at = [&](std::size_t i) { return i < file.size() ? static_cast<std::uint8_t>(file[i]) : -1; };
  auto starts = [&](std::initializer_list<int> magic) {
    std::size_t i = 0;
    for (int m : magic)
      if (at(i++) != m) return false;
    return true;
  };
  if (starts({0x1f, 0x8b})) return {"gzip", "gzip -dc FILE > OUT"};
  if (starts({0x28, 0xb5, 0x2f, 0xfd})) return {"zstd", "zstd -d FILE -o OUT"};
  if (starts({'B', 'Z', 'h'}) && at(3) >= '1' && at(3) <= '9') return {"bzip2", "bzip2 -dc FILE > OUT"};
  if (starts({0xfd, '7', 'z', 'X', 'Z', 0x00})) return {"xz", "xz -dc FILE > OUT"};
  // zlib as zlib itself writes it (a 32 KiB window at each compression level's flag byte).
  if (at(0) == 0x78 && (at(1) == 0x01 || at(1) == 0x5e || at(1) == 0x9c || at(1) == 0xda))
    return {"zlib", "python3 -c 'import sys, zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))' "
                    "< FILE > OUT"};
  return {};
}

// Raises a format_error naming `path` when `file` is compressed; `reads` is what sluice reads
// there ("tar archives", "TFRecord files"). Returns when the file is not compressed.
inline void throw_if_compressed(std::span<const std::byte> file, const std::string& path, std::string_view reads) {
  const compression_kind c = compression_of(file);
  if (c.name.empty()) return;
  throw format_error(path, {},
                     "the file is " + std::string(c.name) + "-compressed (it starts with " + std::string(c.name) +
                         "'s magic bytes); sluice reads uncompressed " + std::string(reads) +
                         ", mapped in place: decompress it first, e.g. `" + std::string(c.decompress) +
                         "`, and read OUT");
}

}  // namespace sluice::io::detail
