// sluice/io/shard_pattern.hpp — brace patterns for lists of shards: "train-{000000..000127}.tar".
//
// expand_braces(pattern) -> every name the pattern stands for, in order, as WebDataset users and
// bash write them:
//   `{a,b,c}`                  a list (each item may hold groups of its own: `{a,b{0..2}}`)
//   `{0..127}`, `{000..127}`     a numeric range, zero-padded to the wider endpoint when either is
//                              written with a leading zero; `{3..0}` counts down
//   several groups             every combination, the last group varying fastest
// As in bash, a range is a group of its own: `{0..2,5}` is the two names "0..2" and "5".
// Unbalanced braces, an empty group `{}`, a one-item group that is not a range, a non-numeric or
// negative range, or more than ten million names is a usage_error quoting the pattern.
//
//   auto shards = sluice::io::expand_braces("{train,val}-{00..01}.tar");
//   // train-00.tar, train-01.tar, val-00.tar, val-01.tar
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice::io {

namespace detail {

[[noreturn]] inline void bad_pattern(std::string_view pattern, const std::string& why) {
  throw usage_error("sluice: bad shard pattern '" + std::string(pattern) + "': " + why);
}

// The index of the '}' closing the '{' at `open`, or npos.
inline std::size_t closing_brace(std::string_view s, std::size_t open) noexcept {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    else if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

inline constexpr std::size_t max_expansion = 10'000'000;

inline void expand_into(std::string_view whole, std::string_view s, std::vector<std::string>& out);

inline std::vector<std::string> expand_range(std::string_view whole, std::string_view inner) {
  const std::size_t dots = inner.find("..");
  auto number = [&](std::string_view t, std::uint64_t& v) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return !t.empty() && ec == std::errc{} && p == t.data() + t.size();
  };
  std::uint64_t a = 0, b = 0;
  if (dots == std::string_view::npos)
    bad_pattern(whole, "'{" + std::string(inner) + "}' is neither a list (a,b,...) nor a numeric range (0..9)");
  const std::string_view ta = inner.substr(0, dots), tb = inner.substr(dots + 2);
  if (!number(ta, a) || !number(tb, b))
    bad_pattern(whole, "'{" + std::string(inner) + "}' is not a range of non-negative decimal numbers (e.g. {000..127})");
  const std::uint64_t count = (a <= b ? b - a : a - b) + 1;
  if (count > max_expansion) bad_pattern(whole, "the range '{" + std::string(inner) + "}' is too long");
  const bool padded = (ta.size() > 1 && ta[0] == '0') || (tb.size() > 1 && tb[0] == '0');
  const std::size_t width = padded ? std::max(ta.size(), tb.size()) : 0;
  std::vector<std::string> out;
  out.reserve(count);
  for (std::uint64_t k = 0; k < count; ++k) {
    std::string t = std::to_string(a <= b ? a + k : a - k);
    if (t.size() < width) t.insert(0, width - t.size(), '0');
    out.push_back(std::move(t));
  }
  return out;
}

inline void expand_into(std::string_view whole, std::string_view s, std::vector<std::string>& out) {
  const std::size_t open = s.find('{');
  const std::size_t stray = s.find('}');
  if (open == std::string_view::npos) {
    if (stray != std::string_view::npos) bad_pattern(whole, "a '}' without its '{'");
    out.emplace_back(s);
    return;
  }
  if (stray < open) bad_pattern(whole, "a '}' without its '{'");
  const std::size_t close = closing_brace(s, open);
  if (close == std::string_view::npos) bad_pattern(whole, "a '{' without its '}'");
  const std::string_view prefix = s.substr(0, open), inner = s.substr(open + 1, close - open - 1),
                         suffix = s.substr(close + 1);
  if (inner.empty()) bad_pattern(whole, "an empty group '{}'");
  // Alternatives: the top-level comma-separated parts (each may hold braces), or a range.
  std::vector<std::string> alts;
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t from = 0;
  for (std::size_t i = 0; i < inner.size(); ++i) {
    if (inner[i] == '{') ++depth;
    else if (inner[i] == '}') --depth;
    else if (inner[i] == ',' && depth == 0) {
      parts.push_back(inner.substr(from, i - from));
      from = i + 1;
    }
  }
  parts.push_back(inner.substr(from));
  if (parts.size() == 1) {
    alts = expand_range(whole, inner);
  } else {
    for (auto p : parts) expand_into(whole, p, alts);
  }
  std::vector<std::string> tails;
  expand_into(whole, suffix, tails);
  if (alts.size() * tails.size() + out.size() > max_expansion) bad_pattern(whole, "it expands to too many names");
  for (const auto& a : alts)
    for (const auto& t : tails) out.push_back(std::string(prefix).append(a).append(t));
}

}  // namespace detail

// Every name a shard pattern stands for, in order: "train-{00..02}.tar" -> train-00.tar,
// train-01.tar, train-02.tar. A bad pattern is a usage_error that quotes it and says why.
inline std::vector<std::string> expand_braces(std::string_view pattern) {
  std::vector<std::string> out;
  detail::expand_into(pattern, pattern, out);
  return out;
}

}  // namespace sluice::io
