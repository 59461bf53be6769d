// sluice/stage/pad.hpp — `pad_bytes(max_bytes)`: variable-length records (token sequences) into the
// fixed-size slots collate needs, with each record's length kept beside it.
//
// collate writes fixed-size samples (the slot layout is one size per epoch). A padded sample is
// `length_prefix_bytes` (4) bytes holding the record's length in bytes (little-endian uint32),
// then the record, then `pad` bytes up to max_bytes. So a batch of padded samples carries its
// lengths: `padded_lengths(batch)` reads them back, and `padded_max_length(batch)` is what a
// trainer trims the batch to (with length bucketing, sample/length_bucket.hpp, that is close to
// every sequence's own length — the padding saved is compute, while slot memory stays max_bytes).
// A record longer than max_bytes is an error naming the sample (or is cut, with .truncate = true).
//
//   auto loader = sluice::from(sluice::sample::length_bucketed{lengths, {.batch = 32}})
//               | sluice::read(tokens) | sluice::pad_bytes(4096) | sluice::collate({.batch = 32})
//               | sluice::prefetch(2);
//   for (auto& b : loader.epoch(e)) { auto lens = sluice::padded_lengths(b); ... }
//
// For samples with fields, `collate({...}, pad<"tokens">{...})` (stage/field_collate.hpp) sizes
// each batch to its own longest sequence and emits the lengths (and a mask) as tensors; this
// stage is the variant for plain records and the classic collate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"

namespace sluice {

inline constexpr std::size_t length_prefix_bytes = 4;

struct pad_bytes_options {
  std::size_t max_bytes = 0;  // record bytes a slot holds (the prefix comes on top)
  std::byte pad{0};
  bool truncate = false;      // cut longer records instead of failing
};

template <class In>
struct padded_sample {
  std::uint64_t id = 0;
  std::int64_t label = -1;
  In source;  // kept whole: a cached record's pin stays alive until collate has copied it
  pad_bytes_options options;

  [[nodiscard]] std::size_t size_bytes() const noexcept { return length_prefix_bytes + options.max_bytes; }
  void write_into(std::span<std::byte> dst, const sample_context&) const {
    const std::span<const std::byte> data = source.bytes();
    const std::size_t n = std::min(data.size(), options.max_bytes);
    const auto len = static_cast<std::uint32_t>(n);
    for (std::size_t i = 0; i < length_prefix_bytes; ++i) dst[i] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
    if (n > 0) std::memcpy(dst.data() + length_prefix_bytes, data.data(), n);
    std::fill(dst.begin() + static_cast<std::ptrdiff_t>(length_prefix_bytes + n), dst.end(), options.pad);
  }
};

class pad_bytes_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "pad_bytes";

  explicit pad_bytes_stage(pad_bytes_options o) : opt_(o) {
    if (opt_.max_bytes == 0) throw usage_error("sluice: pad_bytes needs max_bytes >= 1");
    if (opt_.max_bytes > 0xffffffffu) throw usage_error("sluice: pad_bytes: max_bytes must fit in 32 bits");
  }
  template <class In>
    requires bytes_sample<std::remove_cvref_t<In>>
  padded_sample<std::remove_cvref_t<In>> operator()(In&& in, const sample_context& ctx) const {
    const std::size_t n = in.bytes().size();
    if (n > opt_.max_bytes && !opt_.truncate)
      throw std::length_error("record of " + std::to_string(n) + " bytes is longer than pad_bytes's " +
                              std::to_string(opt_.max_bytes) + " (sample " + std::to_string(ctx.id) + ")");
    const std::uint64_t id = in.id;
    const std::int64_t label = in.label;
    return {id, label, std::forward<In>(in), opt_};
  }

 private:
  pad_bytes_options opt_;
};

inline pad_bytes_stage pad_bytes(std::size_t max_bytes, pad_bytes_options o = {}) {
  o.max_bytes = max_bytes;
  return pad_bytes_stage(o);
}

// The record length (bytes) stored in front of one padded sample.
inline std::uint32_t padded_length(std::span<const std::byte> sample) noexcept {
  std::uint32_t len = 0;
  for (std::size_t i = 0; i < length_prefix_bytes && i < sample.size(); ++i)
    len |= static_cast<std::uint32_t>(sample[i]) << (8 * i);
  return len;
}
// The lengths of a batch of padded samples (uint8 batches: collate's default output).
template <class Batch>
std::vector<std::uint32_t> padded_lengths(const Batch& b) {
  std::vector<std::uint32_t> out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = padded_length(b.sample(i));
  return out;
}
template <class Batch>
std::uint32_t padded_max_length(const Batch& b) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < b.size(); ++i) m = std::max(m, padded_length(b.sample(i)));
  return m;
}
// Record i of a padded batch without its prefix and padding.
template <class Batch>
std::span<const std::byte> padded_record(const Batch& b, std::size_t i) {
  auto s = b.sample(i);
  return s.subspan(length_prefix_bytes, std::min<std::size_t>(padded_length(s), s.size() - length_prefix_bytes));
}

}  // namespace sluice
