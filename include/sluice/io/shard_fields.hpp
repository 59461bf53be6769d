// sluice/io/shard_fields.hpp — a sluice shard with fields (version 3) as a fields_reader.
//
// shard_fields<Schema> names the fields it wants with a compile-time schema (`names` may map a
// field to another shard field at run time) and hands out fields_samples whose views point into
// the mapping; shard_any reads the fields the shard says it has, at run time. Labels and class
// names are the shard's.
// Errors: at open, a field missing from the shard's schema or of another dtype or extent is a
// format_error naming the file and the field (a shard without fields, versions 1 and 2, is read
// with shard_reader); fields(i) checks record i's field table and CRC (unless .verify = false), a
// format_error naming the file, the record, the byte offset and the field (on_error::skip drops
// the sample). A `names` entry outside the schema is a usage_error.
// Threads: const after construction; fields(i) allocates nothing. Every rule: docs/formats.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/shard.hpp"

namespace sluice::io {

template <class Schema>
class shard_fields {
 public:
  using reader_concept = reader_tag;
  using schema_type = Schema;
  using sample_type = fields_sample<Schema>;

  using names_type = std::vector<std::pair<std::string, std::string>>;  // field -> shard field

  explicit shard_fields(std::string path, shard_options opt = {}, const names_type& names = {})
      : shard_fields(shard_reader(std::move(path), opt), names) {}
  explicit shard_fields(shard_reader r, const names_type& names = {}) : r_(std::move(r)) {
    const std::string p(r_.path());
    if (!r_.has_fields())
      throw format_error(p, {}, "a version-" + std::to_string(r_.version()) +
                                    " shard of single records, without fields (read it with shard_reader)");
    slot_.assign(r_.schema().size(), none);
    std::vector<shard_schema_field> want;
    detail::schema_fields<Schema>::append(want);
    // By the schema's own names (want[] is in schema order), so entries never see each other's
    // renaming (a swap {{"x", "y"}, {"y", "x"}} swaps); a field named twice takes the last entry.
    for (const auto& [f, to] : names) {
      const auto at = std::find(Schema::names.begin(), Schema::names.end(), f);
      if (at == Schema::names.end())
        throw usage_error("sluice: shard_fields: names maps field '" + f + "', which is not a field of the schema");
      if (to.empty()) throw usage_error("sluice: shard_fields: names gives field '" + f + "' an empty shard field name");
      want[static_cast<std::size_t>(at - Schema::names.begin())].name = to;
    }
    for (std::size_t s = 0; s < want.size(); ++s) {
      const std::size_t k = r_.field_index(want[s].name);
      if (k == shard_reader::npos) {
        std::string have;
        for (const auto& f : r_.schema()) have += (have.empty() ? "" : ", ") + f.name;
        throw format_error(p, {}, "field '" + want[s].name + "': not in the shard (its fields: " + have + ")");
      }
      if (slot_[k] != none)
        throw usage_error("sluice: shard_fields: fields '" + std::string(Schema::names[slot_[k]]) + "' and '" +
                          std::string(Schema::names[s]) + "' both read the shard's field '" + want[s].name +
                          "'; a shard field can go to one schema field only");
      const shard_schema_field& f = r_.schema()[k];
      if (f.type != want[s].type || f.kind != want[s].kind)
        throw format_error(p, {}, "field '" + want[s].name + "': the shard stores it as " + schema_field_text(f) +
                                      ", the schema asks for " + dtype_name(want[s].type) +
                                      (want[s].kind == extent::variable ? " variable" : " fixed"));
      slot_[k] = s;
      at_[s] = k;
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return r_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return r_.path(); }
  [[nodiscard]] const mapped_file& file() const noexcept { return r_.file(); }
  [[nodiscard]] const shard_reader& reader() const noexcept { return r_; }
  // The shard's own description of the fields (all of them, with their shapes).
  [[nodiscard]] const std::vector<shard_schema_field>& shard_schema() const noexcept { return r_.schema(); }
  // The per-sample shape of field Name as stored in the shard (-1 leading: variable).
  template <fixed_string Name>
  [[nodiscard]] const std::vector<std::int64_t>& shape_of() const {
    static_assert(Schema::template index_of<Name> < Schema::size);  // a name outside Schema fails here, named
    return r_.schema()[at_[Schema::template index_of<Name>]].shape;
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const { return r_.label(i); }
  [[nodiscard]] std::vector<std::int64_t> labels() const { return r_.labels(); }
  [[nodiscard]] const std::vector<std::string>& class_names() const noexcept { return r_.class_names(); }

  // Record i's fields as views into the mapping.
  [[nodiscard]] sample_type fields(std::size_t i) const {
    sample_type s{.id = i, .origin = r_.path()};
    r_.for_each_field(i, [&](std::size_t k, std::span<const std::byte> b) {
      if (slot_[k] != none) s.values[slot_[k]] = b;
    });
    return s;
  }

 private:
  static constexpr std::size_t none = ~std::size_t{0};
  shard_reader r_;
  std::vector<std::size_t> slot_;  // per shard field: its place in Schema, or none
  std::array<std::size_t, Schema::size> at_{};  // per schema field: the shard field it reads
};

// A sluice shard with fields, read with the fields it says it has (run time): fields(i) is a
// run-time sample (core/any_sample.hpp) for read(), any_decode_stage and any_collate. `names`
// picks and names them ({{"image", "jpg"}}: the sample's field "image" is the shard's "jpg"), in
// that order; empty: every field of the shard under its own name. The element types and extents
// are the shard's (schema()), and a fixed field carries its stored shape as its geometry, so
// stack<> gives {B, shape...} without being told. A shard field that does not exist, or one
// named twice, is refused at construction (a format_error naming the file and listing the
// shard's fields; a usage_error); records are checked as shard_fields<> checks them.
class shard_any {
 public:
  using reader_concept = reader_tag;
  using names_type = std::vector<std::pair<std::string, std::string>>;  // sample field -> shard field

  explicit shard_any(std::string path, shard_options opt = {}, const names_type& names = {})
      : r_(std::move(path), opt) {
    const std::string p(r_.path());
    if (!r_.has_fields())
      throw format_error(p, {}, "a version-" + std::to_string(r_.version()) +
                                    " shard of single records, without fields (read it with shard_reader)");
    names_type picked = names;
    if (picked.empty())
      for (const auto& f : r_.schema()) picked.emplace_back(f.name, f.name);
    if (picked.size() > max_any_fields)
      throw usage_error("sluice: shard_any: " + std::to_string(picked.size()) + " fields; a run-time sample holds at most " +
                        std::to_string(max_any_fields) + " (pick the ones to read with names)");
    slot_.assign(r_.schema().size(), none);
    std::vector<field_spec> specs;
    for (std::size_t s = 0; s < picked.size(); ++s) {
      const auto& [name, from] = picked[s];
      const std::size_t k = r_.field_index(from);
      if (k == shard_reader::npos) {
        std::string have;
        for (const auto& f : r_.schema()) have += (have.empty() ? "" : ", ") + f.name + " (" + schema_field_text(f) + ")";
        throw format_error(p, {}, "field '" + from + "': not in the shard (its fields: " + have + ")");
      }
      if (slot_[k] != none)
        throw usage_error("sluice: shard_any: the shard's field '" + from + "' is read twice; a shard field can go to "
                          "one sample field only");
      const shard_schema_field& f = r_.schema()[k];
      slot_[k] = s;
      specs.push_back({name, f.type, f.kind});
      field_geometry g;
      if (f.kind == extent::fixed && f.shape.size() <= max_dims - 1) {
        g.ndim = static_cast<std::uint8_t>(f.shape.size());
        for (std::size_t d = 0; d < f.shape.size(); ++d) g.shape[d] = f.shape[d];
      }
      geometry_.push_back(g);
    }
    schema_ = any_schema(std::move(specs));  // a usage_error for an output name given twice
  }

  [[nodiscard]] const any_schema& schema() const noexcept { return schema_; }
  [[nodiscard]] std::size_t size() const noexcept { return r_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return r_.path(); }
  [[nodiscard]] const mapped_file& file() const noexcept { return r_.file(); }
  [[nodiscard]] const shard_reader& reader() const noexcept { return r_; }
  [[nodiscard]] std::int64_t label(std::size_t i) const { return r_.label(i); }
  [[nodiscard]] std::vector<std::int64_t> labels() const { return r_.labels(); }

  [[nodiscard]] any_sample fields(std::size_t i) const {
    any_sample s(i, r_.path(), schema_.size());
    r_.for_each_field(i, [&](std::size_t k, std::span<const std::byte> b) {
      if (slot_[k] != none) s.fields[slot_[k]] = {b, &geometry_[slot_[k]], nullptr};
    });
    return s;
  }

 private:
  static constexpr std::size_t none = ~std::size_t{0};
  shard_reader r_;
  any_schema schema_;
  std::vector<std::size_t> slot_;  // per shard field: its place in the sample, or none
  std::vector<field_geometry> geometry_;
};

}  // namespace sluice::io
