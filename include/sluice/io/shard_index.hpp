// sluice/io/shard_index.hpp — a list of shards with what a reader should know before fetching
// them: bytes, records and the whole file's CRC-32C.
//
// With it a remote dataset opens without touching a shard (the records per shard give the global
// index; io/remote.hpp's remote_shards_from_index), and every download is checked against the
// whole-file CRC-32C and size before it is published in the disk tier.
//
// The text form, one shard a line (blank lines and lines starting with '#' are skipped):
//   <name> <bytes> <records> <crc32c as 8 hex digits>
// `name` is a path relative to the index's own location (no spaces, not absolute, no "..").
//
//   auto entries = sluice::io::index_shards({"out/train-000.sluice", "out/train-001.sluice"});
//   sluice::io::write_shard_index("out/index.txt", entries);   // names relative to out/
//   // serve out/ over HTTP; readers: remote_shards_from_index("http://host/data/index.txt", tier)
// A malformed line is a format_error naming the index and the line.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/shard.hpp"

namespace sluice::io {

struct shard_index_entry {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint64_t records = 0;
  std::uint32_t crc32c = 0;
  friend bool operator==(const shard_index_entry&, const shard_index_entry&) = default;
};

// Opens each shard (checking it whole: header, index, every record CRC) and measures it. The
// entries are named by the file name alone (the index sits beside its shards).
inline std::vector<shard_index_entry> index_shards(const std::vector<std::string>& paths) {
  std::vector<shard_index_entry> out;
  for (const auto& p : paths) {
    const shard_reader r(p, {.verify = true, .map = {.advice = access::sequential}});
    (void)r.verify_all();
    out.push_back({std::filesystem::path(p).filename().string(), r.file().bytes().size(), r.size(),
                   crc32c(r.file().bytes())});
  }
  return out;
}

inline std::string shard_index_text(const std::vector<shard_index_entry>& entries) {
  std::string s = "# sluice shard index: name bytes records crc32c\n";
  for (const auto& e : entries) {
    char crc[9];
    std::snprintf(crc, sizeof crc, "%08x", static_cast<unsigned>(e.crc32c));
    s += e.name + " " + std::to_string(e.bytes) + " " + std::to_string(e.records) + " " + crc + "\n";
  }
  return s;
}

// Writes the index to `path` through a temporary name and a rename.
inline void write_shard_index(const std::string& path, const std::vector<shard_index_entry>& entries) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << shard_index_text(entries);
    f.flush();
    if (!f) throw io_error(tmp, "cannot write the shard index");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw io_error(path, "cannot rename the shard index into place", ec.value());
}

// Parses an index's text; `origin` (its path or URL) names it in errors.
inline std::vector<shard_index_entry> parse_shard_index(std::string_view text, const std::string& origin) {
  std::vector<shard_index_entry> out;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    auto fail = [&](const std::string& why) -> void {
      throw format_error(origin, {}, "line " + std::to_string(line_no) + " ('" + std::string(line.substr(0, 120)) + "'): " + why);
    };
    std::vector<std::string_view> f;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && line[i] == ' ') ++i;
      const std::size_t j = line.find(' ', i);
      const std::size_t end = j == std::string_view::npos ? line.size() : j;
      if (end > i) f.push_back(line.substr(i, end - i));
      i = end;
    }
    if (f.size() != 4) fail("expected 4 fields (name bytes records crc32c), found " + std::to_string(f.size()));
    shard_index_entry e;
    e.name = std::string(f[0]);
    if (e.name.front() == '/' || e.name.find("..") != std::string::npos || e.name.find("://") != std::string::npos)
      fail("the name must be a path relative to the index, without '..'");
    auto number = [&](std::string_view t, auto& v, int base, const char* what) {
      auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v, base);
      if (ec != std::errc{} || p != t.data() + t.size()) fail(std::string("bad ") + what + " '" + std::string(t) + "'");
    };
    number(f[1], e.bytes, 10, "byte count");
    number(f[2], e.records, 10, "record count");
    if (f[3].size() != 8) fail("the CRC-32C must be 8 hex digits, not '" + std::string(f[3]) + "'");
    number(f[3], e.crc32c, 16, "CRC-32C");
    out.push_back(std::move(e));
  }
  if (out.empty()) throw format_error(origin, {}, "the shard index lists no shard");
  return out;
}

}  // namespace sluice::io
