// sluice/io/wds.hpp — WebDataset as users have it: many tar shards, every member of a key.
//
// wds_dataset<Schema> is a fields_reader over a list of shards or a brace pattern
// ("train-{000000..000127}.tar"): a sample is every tar member sharing a key, its fields named by
// extension ("jpg;jpeg;png", "json", "cls"; matched in any case, as WebDataset lower-cases a
// member's extension: "a.JPG" is a "jpg"), and sample i of the dataset is sample i of the shards
// concatenated in order. `.npy` members are checked against the field's dtype and read zero-copy
// (a fixed field's members against its shape too: the first member's, which wds_any hands on as
// the field's geometry, so stack<> gives {B, shape...}); a fixed non-u8 field (or a fixed u8
// field of a text member) takes an ASCII number parsed once; everything else is the member's
// bytes, a view into the mapping. wds_any is the same with its fields chosen at run time. Shards
// open when first touched (or all at once to count them, unless `.sizes` gives the counts);
// shard_of / shard_range / shard_size let a sampler give whole shards to ranks.
// Errors: a bad sample (a missing or doubled member, a number that does not parse or fit, an .npy
// of another dtype, or of another shape in a fixed field) is a format_error naming the shard, the
// key and the field, raised when it is read, so on_error::skip skips and counts it; a shard that
// cannot be opened fails its samples.
// Threads: fields(i) may be called from several threads; it allocates nothing once its shard is
// open. Every rule, the saved index and the patterns: docs/readers.md.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/file_guard.hpp"
#include "sluice/core/half.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/lazy_open.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/record_index.hpp"
#include "sluice/io/shard_pattern.hpp"
#include "sluice/io/wds_tar.hpp"

namespace sluice::io {

// ---------------------------------------------------------------------------------------------

struct wds_dataset_options {
  // Samples per shard, one entry per shard; empty: every shard is opened at construction to
  // count it (see the header comment for the trade-off).
  std::vector<std::size_t> sizes{};
  saved_index index = saved_index::use_and_save;
  map_options map{};
  bool ignore_zeros = false;  // as wds_tar_options::ignore_zeros: read through concatenated archives
  // Field name -> the extensions it takes, chosen at run time ("a;b;c", as a field's name spells
  // them), for a schema fixed at compile time over keys known only at run time (a Python binding,
  // a command line). A field not listed takes its own name's extensions; a name outside the
  // schema, or an empty extension, is a usage_error.
  std::vector<std::pair<std::string, std::string>> extensions{};
};

namespace detail {

// 2: a fixed u8 field of text members holds a parsed number (an index of version 1 held its bytes).
// 3: the parts of a sample whose members are apart (a key in two groups, one lacking a member)
//    are flagged split, each naming the other.
// 4: an .npy member's entry keeps where its header starts (in its label), for its shape.
// (The tar scan's own version, wds_scan_version, is part of the kind too: its 4 lower-cased
// member extensions.)
inline constexpr int wds_group_scan_version = 4;

// How a field takes its member.
enum class wds_take : std::uint8_t { bytes, number, npy };

// What is wrong with a sample, found at the scan and raised when it is read. Stored in the
// label of the sample's first index entry as (problem << 16) | field.
enum class wds_problem : std::uint8_t { none = 0, missing = 1, duplicate = 2, bad_number = 3, bad_npy = 4, split = 5 };


// The npy (kind, item size) an element type matches.
template <class T>
constexpr char npy_kind_of() {
  if constexpr (std::is_same_v<T, bool>) return 'b';
  else if constexpr (std::is_same_v<T, f16> || std::is_floating_point_v<T>) return 'f';
  else if constexpr (std::is_same_v<T, bf16>) return '?';  // NumPy has no bfloat16
  else if constexpr (std::is_signed_v<T>) return 'i';
  else return 'u';
}

// An .npy member's data, checked against element type T; format_error (cause only matters) if not.
template <class T>
std::span<const std::byte> npy_member_data(std::span<const std::byte> body, const std::string& path) {
  const npy_header h = parse_npy_header(body, path);
  constexpr char kind = npy_kind_of<T>();
  if (h.dtype.kind != kind || h.dtype.item_bytes != sizeof(T))
    throw format_error(path, {}, "the .npy holds dtype '" + h.dtype.descr + "' but the field's element type is " +
                                     dtype_name(dtype_of<T>));
  std::uint64_t elems = 1;
  for (auto d : h.shape) elems = checked_mul(elems, d, path);
  const std::uint64_t want = checked_mul(elems, sizeof(T), path), have = body.size() - h.data_offset;
  if (want != have)
    throw format_error(path, {}, "the .npy shape says " + std::to_string(want) + " data bytes but the member holds " +
                                     std::to_string(have));
  return body.subspan(h.data_offset);
}

// Parses an ASCII number into T; nullptr or the reason it is not one.
template <class T>
const char* parse_number(std::span<const std::byte> b, std::int64_t& slot) {
  std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  if (s.empty()) return "it is empty";
  T v{};
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    float f = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), f);
    if (ec != std::errc{} || p != s.data() + s.size()) return "it is not a decimal number";
    if constexpr (std::is_same_v<T, f16>) v = to_f16(f);
    else v = to_bf16(f);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (s == "0") v = false;
    else if (s == "1") v = true;
    else return "it is not 0 or 1 (the field is bool)";
  } else {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) return "it does not fit the field's element type";
    if (ec != std::errc{} || p != s.data() + s.size())
      return std::is_integral_v<T> ? "it is not an ASCII integer" : "it is not a decimal number";
  }
  slot = 0;
  std::memcpy(&slot, &v, sizeof(T));
  return nullptr;
}

// One field's matching rule, from its name "a;b;c".
struct wds_field_rule {
  std::vector<std::string> exts;
  wds_take take = wds_take::bytes;
  [[nodiscard]] bool matches(std::string_view ext) const noexcept {
    for (const auto& e : exts)
      if (e == ext) return true;
    return false;
  }
};


inline bool is_npy_ext(std::string_view ext) noexcept { return ext == "npy" || ext.ends_with(".npy"); }

// Extensions whose members hold text (the last part: "boxes.json" is JSON).
inline bool is_text_ext(std::string_view ext) noexcept {
  if (const auto dot = ext.rfind('.'); dot != std::string_view::npos) ext.remove_prefix(dot + 1);
  for (std::string_view t : {"json", "jsonl", "txt", "text", "cls", "cap", "caption", "xml", "csv", "tsv", "yaml",
                             "yml", "html", "md"})
    if (ext == t) return true;
  return false;
}


// The dataset over a list of shards with fields known at run time (a field spec each: the
// extensions it takes as its name, its element type, fixed or variable). wds_dataset<Schema> and
// wds_any are this with the fields from a compiled schema or from the caller.
class wds_core {
  // The sample entry's label: bits 0-15 the field a problem is about, 16-23 the problem
  // (wds_problem), 24-63 which fields came from an .npy member (bit 24 + k).
  static constexpr std::int64_t problem_mask = 0xffffff;

 public:
  struct shard_state {
    std::string path;
    mapped_file file;
    std::vector<record_entry> entries;
  };

  wds_core(std::vector<std::string> shards, wds_dataset_options o, std::string pattern, std::vector<field_spec> fields,
           std::string_view who = "wds_dataset")
      : opt_(std::move(o)), fields_(std::move(fields)), stride_(fields_.size() + 1), who_(who) {
    if (shards.empty()) throw usage_error("sluice: " + who_ + " needs at least one shard");
    if (fields_.empty() || fields_.size() > 39) throw usage_error("sluice: " + who_ + ": a schema of 1 to 39 fields");
    if (!opt_.sizes.empty() && opt_.sizes.size() != shards.size())
      throw usage_error("sluice: " + who_ + ": .sizes has " + std::to_string(opt_.sizes.size()) + " entries for " +
                        std::to_string(shards.size()) + " shards (one per shard, or none)");
    init_rules();
    npy_fixed_.assign(fields_.size(), false);
    for (std::size_t k = 0; k < fields_.size(); ++k)
      if (fields_[k].kind == extent::fixed)
        for (const auto& e : rules_[k].exts) npy_fixed_[k] = npy_fixed_[k] || is_npy_ext(e);
    any_npy_fixed_ = std::find(npy_fixed_.begin(), npy_fixed_.end(), true) != npy_fixed_.end();
    for (auto& p : shards) {
      auto l = std::make_unique<lazy_shard>();
      l->path = std::move(p);
      shards_.push_back(std::move(l));
    }
    name_ = !pattern.empty()      ? std::move(pattern)
            : shards_.size() == 1 ? shards_[0]->path
                                  : shards_[0]->path + " (+" + std::to_string(shards_.size() - 1) + " more shards)";
    kind_ = "wdsg:v" + std::to_string(wds_group_scan_version) + ".t" + std::to_string(wds_scan_version);
    // The extensions matched (in lower case), not the field names: a saved index is the grouping
    // they make.
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      std::string exts;
      for (const auto& e : rules_[k].exts) exts += (exts.empty() ? "" : ";") + e;
      kind_ += ":" + exts + "/" + dtype_name(fields_[k].type) + (fields_[k].kind == extent::variable ? "/v" : "/f");
    }
    if (opt_.ignore_zeros) kind_ += ":ignore_zeros";
    table_.first.reserve(shards_.size() + 1);
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      const std::size_t n = opt_.sizes.empty() ? open(s).entries.size() / stride_ : opt_.sizes[s];
      table_.add(n);
    }
  }

  static std::vector<std::string> expand_all(std::initializer_list<std::string> patterns) {
    std::vector<std::string> out;
    for (const auto& p : patterns)
      for (auto& x : expand_braces(p)) out.push_back(std::move(x));
    return out;
  }

  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(table_.total()); }
  [[nodiscard]] std::string_view path() const noexcept { return name_; }
  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }
  [[nodiscard]] const std::string& shard_path(std::size_t s) const { return shards_.at(s)->path; }
  [[nodiscard]] std::size_t shard_size(std::size_t s) const { return table_.size_of(s); }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return table_.range(s); }
  [[nodiscard]] std::size_t shard_of(std::uint64_t i) const { return table_.shard_of(i, name_); }
  [[nodiscard]] std::vector<std::size_t> sizes() const { return table_.sizes(); }
  [[nodiscard]] bool is_open(std::size_t s) const { return shards_.at(s)->state.ready(); }
  [[nodiscard]] std::size_t field_count() const noexcept { return fields_.size(); }
  [[nodiscard]] const field_spec& field(std::size_t k) const noexcept { return fields_[k]; }

  // Sample i: calls set(k, bytes, geometry) for each field (views into the shard's mapping, or
  // parsed numbers in the index; the shape of a fixed field's .npy member, else null) and returns
  // its shard's path. A sample the scan found a problem in, or whose .npy member in a fixed field
  // has another shape than the field's, raises its format_error here.
  template <class Set>
  std::string_view sample(std::size_t i, Set&& set) const {
    const std::size_t s = shard_of(i);
    const shard_state& sh = open(s);
    if (sluice::detail::file_registry::instance().flagged() != 0) [[unlikely]] sh.file.throw_if_changed();
    const std::size_t local = static_cast<std::size_t>(i - table_.first[s]);
    const record_entry* e = sh.entries.data() + local * stride_;
    if ((e[0].label & problem_mask) != 0) [[unlikely]] raise(sh, local);
    const npy_reference* ref = any_npy_fixed_ && (e[0].label >> 24) != 0 ? &check_npy_shapes(sh, local, e) : nullptr;
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      const bool npy = ref != nullptr && npy_fixed_[k] && ((e[0].label >> (24 + k)) & 1) != 0;
      set(k, field_view(k, sh, e[1 + k], e[0].label), npy ? &ref->geometry[k] : nullptr);
    }
    return sh.path;
  }
  [[nodiscard]] std::string key(std::size_t i) const {
    const std::size_t s = shard_of(i);
    const shard_state& sh = open(s);
    return key_at(sh, sh.entries[static_cast<std::size_t>(i - table_.first[s]) * stride_].offset);
  }

 private:
  struct lazy_shard {
    std::string path;
    lazy_open<shard_state> state;
  };

  // The shape of each fixed field that takes .npy members: the first good member's in shard order
  // (every other member is checked against it when read), as its header's bytes (most members'
  // headers are byte for byte the same: one compare) and as the field's geometry, so stack<>
  // gives {B, shape...}.
  struct npy_reference {
    std::vector<std::string> header;
    std::vector<std::vector<std::uint64_t>> shape;
    std::vector<field_geometry> geometry;
    std::vector<std::string> where;  // "sample 'k' of <shard>", for messages
  };

  [[nodiscard]] bool takes_number(std::size_t k) const noexcept { return rules_[k].take == wds_take::number; }

  void init_rules() {
    for (const auto& entry : opt_.extensions) {
      const std::string& f = entry.first;
      const std::string& e = entry.second;
      if (std::none_of(fields_.begin(), fields_.end(), [&](const field_spec& x) { return x.name == f; }))
        throw usage_error("sluice: " + who_ + ": wds_dataset_options::extensions names field '" + f +
                          "', which the schema does not have");
      if (e.empty() || e.front() == ';' || e.back() == ';' || e.find(";;") != std::string::npos ||
          e.find_first_of("/:") != std::string::npos)
        throw usage_error("sluice: " + who_ + ": wds_dataset_options::extensions gives field '" + f +
                          "' the extensions '" + e + "'; use one or more non-empty extensions separated by ';', "
                          "without '/' or ':'");
    }
    rules_.resize(fields_.size());
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      std::string_view n = extensions_of(k);
      if (n.empty() || n.front() == ';' || n.back() == ';' || n.find(";;") != std::string_view::npos ||
          n.find_first_of("/:") != std::string_view::npos)
        throw usage_error("sluice: " + who_ + ": field '" + fields_[k].name + "' takes the extensions '" +
                          std::string(n) + "'; use one or more non-empty extensions separated by ';', without "
                          "'/' or ':'");
      while (true) {
        const std::size_t semi = n.find(';');
        rules_[k].exts.push_back(lower_ascii(n.substr(0, semi)));  // matched in any case, as the scan lower-cases
        if (semi == std::string_view::npos) break;
        n.remove_prefix(semi + 1);
      }
      // A fixed field takes a number unless it is u8 bytes; a fixed u8 field whose member is text
      // (.cls) takes a number too: its bytes would be character codes ("7" as 55).
      bool text = false;
      for (const auto& e : rules_[k].exts) text = text || (is_text_ext(e) && !is_npy_ext(e));
      const bool number = fields_[k].kind == extent::fixed && (fields_[k].type != dtype::u8 || text);
      rules_[k].take = number ? wds_take::number : wds_take::bytes;
    }
    // A member goes to the first field that takes its extension: two fields sharing one would
    // leave the second always missing. Refused here, naming both.
    for (std::size_t a = 0; a < fields_.size(); ++a)
      for (std::size_t b = a + 1; b < fields_.size(); ++b)
        for (const auto& e : rules_[a].exts)
          if (rules_[b].matches(e))
            throw usage_error("sluice: " + who_ + ": fields '" + fields_[a].name + "' and '" + fields_[b].name +
                              "' both take the extension '" + e + "'; a member can go to one field only");
    // A member named as text (.json, .txt, ...) holds characters, not a numeric field's binary
    // elements: taken as they are, its bytes would be read as numbers (garbage that can pass
    // every size check). Refused here, naming the field, its type and the extension.
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      if (rules_[k].take != wds_take::bytes || fields_[k].type == dtype::u8) continue;
      for (const auto& e : rules_[k].exts)
        if (!is_npy_ext(e) && is_text_ext(e))
          throw usage_error("sluice: " + who_ + ": field '" + fields_[k].name + "' holds " +
                            dtype_name(fields_[k].type) + " elements, but it takes '." + e +
                            "' members, which hold text: their bytes would be read as " +
                            dtype_name(fields_[k].type) +
                            " values. Take the member as text (a u8 field) and parse it, or store the numbers as "
                            "an .npy member (its dtype is checked) or a raw binary one (e.g. '.boxes.f32')");
    }
  }
  // The extensions field k takes: as opt_.extensions maps it (the last entry wins), else its name.
  [[nodiscard]] std::string_view extensions_of(std::size_t k) const noexcept {
    std::string_view e = fields_[k].name;
    for (const auto& [f, x] : opt_.extensions)
      if (f == fields_[k].name) e = x;
    return e;
  }

  // Opens shard s once (maps it, loads its saved index or scans it); later calls are one load.
  const shard_state& open(std::size_t s) const {
    lazy_shard& l = *shards_[s];
    return l.state.get(
        [&] {
          auto st = std::make_unique<shard_state>();
          st->path = l.path;
          st->file = mapped_file(l.path, opt_.map);  // io_error naming the shard if it is missing
          st->entries = indexed(st->path, kind_, opt_.index, [&] { return scan(st->file.bytes(), st->path); });
          if (st->entries.size() % stride_ != 0)
            throw format_error(st->path, {}, "its saved index (" + index_path_for(st->path) +
                                                 ") does not hold whole samples; delete it to rescan");
          const std::size_t n = st->entries.size() / stride_;
          if (!opt_.sizes.empty() && n != opt_.sizes[s])
            throw format_error(st->path, {}, "the shard holds " + std::to_string(n) +
                                                 " samples, but wds_dataset_options::sizes says " +
                                                 std::to_string(opt_.sizes[s]) + " (shard " + std::to_string(s) + ")");
          return st;
        },
        on_failure::retry);
  }

  // The grouped scan: per sample, one entry {first header offset, 0, problem} and one per field
  // ({data offset, size, parsed number}; a missing field: {sample offset, 0, -1}).
  std::vector<record_entry> scan(std::span<const std::byte> file, const std::string& path) const {
    const std::size_t F = fields_.size();
    std::vector<record_entry> out;
    std::string cur_key;
    bool have = false;
    std::size_t base = 0;
    std::vector<bool> seen(F);
    std::unordered_map<std::string, std::size_t> first_group;  // each key's first group
    std::string lower;                                         // an upper-case extension, lower-cased
    auto flag = [&](wds_problem p, std::size_t k) {
      if ((out[base].label & problem_mask) == 0)
        out[base].label |= (static_cast<std::int64_t>(p) << 16) | static_cast<std::int64_t>(k);
    };
    // A key with another group earlier in the shard, one of them lacking a member: a sample whose
    // members are apart. Both groups say so, each naming the other (in its entry's size, 1 + the
    // other group's sample number). Two whole groups are two samples, as WebDataset reads them.
    std::optional<std::size_t> earlier;  // the current group's key's first group
    auto problem_at = [&](std::size_t b) { return static_cast<wds_problem>((out[b].label >> 16) & 0xff); };
    auto flag_split = [&](std::size_t group_base, std::size_t other_base) {
      out[group_base].label = (out[group_base].label & ~problem_mask) | (static_cast<std::int64_t>(wds_problem::split) << 16);
      out[group_base].size = 1 + other_base / stride_;
    };
    auto finish = [&] {
      if (!have) return;
      for (std::size_t k = 0; k < F; ++k)
        if (!seen[k]) flag(wds_problem::missing, k);
      if (earlier) {
        const auto a = problem_at(*earlier), b = problem_at(base);
        if (a == wds_problem::missing || a == wds_problem::split || b == wds_problem::missing) {
          flag_split(*earlier, base);
          flag_split(base, *earlier);
        }
      }
      have = false;
    };
    walk_tar(file, path, opt_.ignore_zeros, [&](const tar_member_view& m) {
      std::string_view key, ext;
      if (!split_key(m.name, key, ext, lower)) return true;
      if (!have || key != cur_key) {
        finish();
        cur_key.assign(key);
        have = true;
        seen.assign(F, false);
        base = out.size();
        out.resize(out.size() + stride_, record_entry{m.start, 0, -1});
        out[base].label = 0;
        const auto [it, fresh] = first_group.try_emplace(std::string(key), base);
        earlier = fresh ? std::nullopt : std::optional<std::size_t>(it->second);
      }
      for (std::size_t k = 0; k < F; ++k) {
        if (!rules_[k].matches(ext)) continue;
        if (seen[k]) {
          flag(wds_problem::duplicate, k);
          break;
        }
        seen[k] = true;
        out[base + 1 + k] = record_entry{m.data, m.size, -1};
        if (is_npy_ext(ext)) out[base].label |= std::int64_t{1} << (24 + k);
        take_member(k, ext, m.body, path, out[base + 1 + k], [&](wds_problem p) { flag(p, k); });
        break;
      }
      return true;
    });
    finish();
    return out;
  }

  // Sets a field's entry from its member; reports a problem through `bad`.
  template <class Bad>
  void take_member(std::size_t k, std::string_view ext, std::span<const std::byte> body, const std::string& path,
                   record_entry& e, Bad&& bad) const {
    visit_dtype(fields_[k].type, [&]<class T>() {
      if (is_npy_ext(ext)) {
        try {
          auto d = npy_member_data<T>(body, path);
          e.label = static_cast<std::int64_t>(e.offset);  // where its header starts, for its shape
          e.offset += static_cast<std::uint64_t>(d.data() - body.data());
          e.size = d.size();
        } catch (const format_error&) {
          bad(wds_problem::bad_npy);
        }
      } else if (takes_number(k)) {
        if (parse_number<T>(body, e.label) != nullptr) bad(wds_problem::bad_number);
      }
    });
  }

  // A number field's entry holds a parsed number (in its label) unless the member was an .npy.
  [[nodiscard]] std::span<const std::byte> field_view(std::size_t k, const shard_state& sh, const record_entry& e,
                                                      std::int64_t sample) const noexcept {
    if (takes_number(k) && ((sample >> (24 + k)) & 1) == 0)
      return {reinterpret_cast<const std::byte*>(&e.label), dtype_size(fields_[k].type)};
    return sh.file.bytes().subspan(e.offset, e.size);
  }

  // The .npy member's header bytes of a field entry (its label holds where the header starts).
  static std::span<const std::byte> npy_header_of(const shard_state& sh, const record_entry& f) noexcept {
    const auto at = static_cast<std::uint64_t>(f.label);
    return at <= f.offset ? sh.file.bytes().subspan(at, f.offset - at) : std::span<const std::byte>{};
  }

  // The fixed .npy fields' shapes (npy_reference), found once: the shards are opened in order
  // until each such field has a member in a sample without problems (usually in the first).
  // A shard that cannot be opened is passed over: its own samples report it.
  const npy_reference& reference() const {
    return reference_->get(
        [&] {
          auto r = std::make_unique<npy_reference>();
          const std::size_t F = fields_.size();
          r->header.resize(F);
          r->shape.resize(F);
          r->geometry.resize(F);
          r->where.resize(F);
          std::vector<bool> want = npy_fixed_;
          for (std::size_t s = 0; s < shards_.size() && std::find(want.begin(), want.end(), true) != want.end(); ++s) {
            const shard_state* sh = nullptr;
            try {
              sh = &open(s);
            } catch (const error&) {
              continue;
            }
            const std::size_t n = sh->entries.size() / stride_;
            for (std::size_t local = 0; local < n; ++local) {
              const record_entry* e = sh->entries.data() + local * stride_;
              if ((e[0].label & problem_mask) != 0) continue;  // never read: its error is raised instead
              for (std::size_t k = 0; k < F; ++k) {
                if (!want[k] || ((e[0].label >> (24 + k)) & 1) == 0) continue;
                const auto hdr = npy_header_of(*sh, e[1 + k]);
                const npy_header h = parse_npy_header(hdr, sh->path);
                r->header[k].assign(reinterpret_cast<const char*>(hdr.data()), hdr.size());
                r->shape[k] = h.shape;
                if (h.shape.size() <= max_dims - 1) {
                  r->geometry[k].ndim = static_cast<std::uint8_t>(h.shape.size());
                  for (std::size_t d = 0; d < h.shape.size(); ++d)
                    r->geometry[k].shape[d] = static_cast<std::int64_t>(h.shape[d]);
                }
                r->where[k] = "sample '" + key_at(*sh, e[0].offset) + "' of " + sh->path;
                want[k] = false;
              }
            }
          }
          return r;
        },
        on_failure::retry);
  }

  // Checks the .npy members of sample `local`'s fixed fields against the fields' shapes: a
  // format_error naming the shard, the key, the field and both shapes for one of another shape.
  const npy_reference& check_npy_shapes(const shard_state& sh, std::size_t local, const record_entry* e) const {
    const npy_reference& ref = reference();
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      if (!npy_fixed_[k] || ((e[0].label >> (24 + k)) & 1) == 0) continue;
      const auto hdr = npy_header_of(sh, e[1 + k]);
      const std::string& want = ref.header[k];
      const bool same = hdr.size() == want.size() && std::memcmp(hdr.data(), want.data(), want.size()) == 0;
      if (same && ref.shape[k].size() <= max_dims - 1) continue;
      std::vector<std::uint64_t> shape;
      if (!same) {  // another header: the same shape written otherwise (another writer), or another shape
        shape = parse_npy_header(hdr, sh.path).shape;
        if (shape == ref.shape[k] && shape.size() <= max_dims - 1) continue;
      } else {
        shape = ref.shape[k];
      }
      std::string cause = "sample '" + key_at(sh, e[0].offset) + "', field '" + fields_[k].name + "': ";
      if (shape != ref.shape[k])
        cause += "its .npy member has shape " + npy_shape_text(shape) + ", but the field's members have shape " +
                 npy_shape_text(ref.shape[k]) + " (the first one's, " + ref.where[k] +
                 "): a fixed field stacks members of one shape; take members of any shape with a variable field "
                 "(ragged<>, pad<>: each member flattened)";
      else
        cause += "its .npy member has shape " + npy_shape_text(shape) + ", " + std::to_string(shape.size()) +
                 " dimensions: a fixed field stacks members of at most " + std::to_string(max_dims - 1);
      throw format_error(sh.path, {.record = local, .offset = e[0].offset}, cause);
    }
    return ref;
  }

  std::string key_at(const shard_state& sh, std::uint64_t start) const {
    std::string key = "?", lower;
    try {
      walk_tar(sh.file.bytes(), sh.path, opt_.ignore_zeros, [&](const tar_member_view& m) {
        std::string_view k, ext;
        if (split_key(m.name, k, ext, lower)) key.assign(k);
        return false;
      }, start);
    } catch (const format_error&) {
    }
    return key;
  }

  // Raises the format_error for a sample the scan found a problem in, with the whole story.
  [[noreturn]] void raise(const shard_state& sh, std::size_t local) const {
    const record_entry* e = sh.entries.data() + local * stride_;
    const auto problem = static_cast<wds_problem>((e[0].label >> 16) & 0xff);
    const std::size_t k = static_cast<std::size_t>(e[0].label & 0xffff);
    if (k >= fields_.size()) throw format_error(sh.path, {.record = local}, "its saved index is corrupt; delete it to rescan");
    const std::string key = key_at(sh, e[0].offset);
    std::string exts;
    for (const auto& x : rules_[k].exts) exts += (exts.empty() ? "" : ", ") + key + "." + x;
    std::string cause = "sample '" + key + "', field '" + fields_[k].name + "'";
    if (extensions_of(k) != fields_[k].name) cause += " (given the extensions '" + std::string(extensions_of(k)) + "')";
    cause += ": ";
    const auto body = sh.file.bytes().subspan(e[1 + k].offset, e[1 + k].size);
    switch (problem) {
      case wds_problem::missing: {
        cause += "no member for it (looked for " + exts + ")";
        cause += link_member_hint(sh.file.bytes(), sh.path, opt_.ignore_zeros, key, rules_[k].exts);
        const std::string dotted = dotted_key_hint(sh.file.bytes(), sh.path, opt_.ignore_zeros, key, rules_[k].exts);
        cause += dotted;
        const std::size_t n = sh.entries.size() / stride_;
        if (dotted.empty() && (local == 0 || local + 1 == n))
          cause += std::string("; this is the ") + (local == 0 ? "first" : "last") +
                   " sample of the shard: if its other members are in the " + (local == 0 ? "previous" : "next") +
                   " shard, the sample was split across shards (each shard must hold whole samples)";
        if (dotted.empty() && local + 1 == n) cause += cut_short_hint(sh.file.bytes());
        break;
      }
      case wds_problem::duplicate:
        cause += "the sample has two members for it (" + exts + "); a field takes one member";
        break;
      case wds_problem::split: {
        const std::size_t other = e[0].size != 0 ? static_cast<std::size_t>(e[0].size - 1) : local;
        throw format_error(sh.path, {.record = local, .offset = e[0].offset}, split_sample_cause(key, local, other));
      }
      case wds_problem::bad_number: {
        std::int64_t slot = 0;
        const char* why = visit_dtype(fields_[k].type, [&]<class T>() { return parse_number<T>(body, slot); });
        std::string text(reinterpret_cast<const char*>(body.data()), std::min<std::size_t>(body.size(), 40));
        cause += "'" + text + (body.size() > 40 ? "...'" : "'") + " is not a " + dtype_name(fields_[k].type) +
                 " value: " + (why ? why : "?");
        break;
      }
      case wds_problem::bad_npy: {
        std::string why = "the .npy member is malformed";
        visit_dtype(fields_[k].type, [&]<class T>() {
          try {
            (void)npy_member_data<T>(body, sh.path);
          } catch (const format_error& x) {
            why = x.cause();
          }
        });
        cause += why;
        break;
      }
      default:
        cause += "its saved index is corrupt; delete it to rescan";
    }
    throw format_error(sh.path, {.record = local, .offset = e[0].offset}, cause);
  }

  wds_dataset_options opt_;
  std::vector<field_spec> fields_;
  std::size_t stride_;  // index entries per sample: the sample, then each field
  std::string who_;
  std::string name_;
  std::string kind_;
  std::vector<std::unique_ptr<lazy_shard>> shards_;
  shard_table table_;
  std::vector<wds_field_rule> rules_;
  std::vector<bool> npy_fixed_;  // fixed fields that take an .npy extension: their members' shape is checked
  bool any_npy_fixed_ = false;
  std::unique_ptr<lazy_open<npy_reference>> reference_ = std::make_unique<lazy_open<npy_reference>>();
};

template <class Schema>
std::vector<field_spec> specs_of() {
  std::vector<field_spec> f;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (f.push_back({std::string(schema_field_t<Schema, K>::name.view()), schema_field_t<Schema, K>::type,
                  schema_field_t<Schema, K>::kind}),
     ...);
  }(std::make_index_sequence<Schema::size>{});
  return f;
}

// What wds_dataset<Schema> and wds_any share: the core and its shard accessors.
class wds_shards {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return core_.size(); }
  // The pattern, or a description of the list (for messages; each sample's origin is its shard).
  [[nodiscard]] std::string_view path() const noexcept { return core_.path(); }

  [[nodiscard]] std::size_t shard_count() const noexcept { return core_.shard_count(); }
  [[nodiscard]] const std::string& shard_path(std::size_t s) const { return core_.shard_path(s); }
  [[nodiscard]] std::size_t shard_size(std::size_t s) const { return core_.shard_size(s); }
  // Global sample indices [first, second) of shard s.
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const { return core_.shard_range(s); }
  // The shard holding global sample i.
  [[nodiscard]] std::size_t shard_of(std::uint64_t i) const { return core_.shard_of(i); }
  // Samples per shard (keep them to open this dataset lazily next time: `.sizes = d.sizes()`).
  [[nodiscard]] std::vector<std::size_t> sizes() const { return core_.sizes(); }
  // Whether shard s has been opened (mapped, and scanned or its index loaded) yet.
  [[nodiscard]] bool is_open(std::size_t s) const { return core_.is_open(s); }
  // Sample i's key (the member path up to the first dot of its basename).
  [[nodiscard]] std::string key(std::size_t i) const { return core_.key(i); }

 protected:
  explicit wds_shards(wds_core core) : core_(std::move(core)) {}
  wds_core core_;
};

}  // namespace detail

template <class Schema>
class wds_dataset : public detail::wds_shards {
  static_assert(Schema::size >= 1 && Schema::size <= 39, "sluice: wds_dataset: a schema of 1 to 39 fields");

 public:
  using reader_concept = reader_tag;
  using schema_type = Schema;
  using sample_type = fields_sample<Schema>;

  // A brace pattern (or one path).
  explicit wds_dataset(std::string pattern, wds_dataset_options o = {})
      : wds_shards(detail::wds_core(expand_braces(pattern), std::move(o), pattern, detail::specs_of<Schema>())) {}
  // An explicit list of shards, read in this order.
  explicit wds_dataset(std::vector<std::string> shards, wds_dataset_options o = {})
      : wds_shards(detail::wds_core(std::move(shards), std::move(o), std::string{}, detail::specs_of<Schema>())) {}
  // A braced list of patterns, each expanded, in order: `wds_dataset<S> d{"train-{0..3}.tar"}`
  // (brace-initialising with one pattern lands here, so it must expand too) or
  // `d({"train-{0..3}.tar", "extra.tar"})`.
  wds_dataset(std::initializer_list<std::string> patterns, wds_dataset_options o = {})
      : wds_shards(detail::wds_core(detail::wds_core::expand_all(patterns), std::move(o),
                                    patterns.size() == 1 ? *patterns.begin() : std::string{}, detail::specs_of<Schema>())) {}

  wds_dataset(wds_dataset&&) noexcept = default;
  wds_dataset& operator=(wds_dataset&&) noexcept = default;

  // Sample i: its fields as views into its shard's mapping (numbers parsed at the scan: views
  // into the index). A sample with a missing or malformed member raises format_error here.
  [[nodiscard]] sample_type fields(std::size_t i) const {
    sample_type out{.id = i, .origin = {}};
    out.origin = core_.sample(i, [&](std::size_t k, std::span<const std::byte> v, const field_geometry*) {
      out.values[k] = v;
    });
    return out;
  }
};

// A WebDataset whose fields are chosen at run time (a front door: the Python module, a trainer
// configured from a file): one field_spec a field, its name the extensions it takes ("jpg;png"),
// its element type and extent as wds_dataset's fields have them (a fixed non-u8 field takes an
// ASCII number or an .npy member; anything else the member's bytes or an .npy member's data).
// fields(i) is a run-time sample (core/any_sample.hpp) for read(), any_collate and decode_field;
// schema() is what it holds. Everything else is wds_dataset's: the same scan, saved index,
// errors, laziness (.sizes) and shard accessors.
//
//   sluice::io::wds_any data{"train-{0..3}.tar", {{"jpg;png"}, {"cls", sluice::dtype::i64, sluice::extent::fixed},
//                                                 {"emb.npy", sluice::dtype::f32}}};
class wds_any : public detail::wds_shards {
 public:
  using reader_concept = reader_tag;

  wds_any(std::string pattern, std::vector<field_spec> fields, wds_dataset_options o = {})
      : wds_shards(detail::wds_core(expand_braces(pattern), std::move(o), pattern, checked(fields), "wds_any")),
        schema_(std::move(fields)) {}
  wds_any(std::vector<std::string> shards, std::vector<field_spec> fields, wds_dataset_options o = {})
      : wds_shards(detail::wds_core(std::move(shards), std::move(o), std::string{}, checked(fields), "wds_any")),
        schema_(std::move(fields)) {}

  [[nodiscard]] const any_schema& schema() const noexcept { return schema_; }

  [[nodiscard]] any_sample fields(std::size_t i) const {
    any_sample out(i, {}, schema_.size());
    out.origin = core_.sample(i, [&](std::size_t k, std::span<const std::byte> v, const field_geometry* g) {
      out.fields[k] = {v, g, nullptr};
    });
    return out;
  }

 private:
  // The fields as a run-time schema takes them (names distinct, not too many), before any shard
  // is opened.
  static std::vector<field_spec> checked(const std::vector<field_spec>& f) {
    (void)any_schema(f);
    return f;
  }
  any_schema schema_;
};

}  // namespace sluice::io
