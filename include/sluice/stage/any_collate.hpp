// sluice/stage/any_collate.hpp — collate for run-time samples: one collator per field, chosen at
// run time.
//
// The per-field collators are the compiled ones (stage/field_collate.hpp) with the field named at
// run time (stack<>, normalized<>, ragged<>, pad<>, pack<>, their Name left empty), with the same
// options and outputs; the batch is a plain sluice::batch whose tensors are named at run time.
// Errors: a field the samples do not have, a collator that does not fit the field's type, or a pad
// value the type cannot hold is a usage_error at construction naming the field; per batch, bytes
// that do not fit are a format_error naming the file, the record and the field.
// Cost: one indirect call per field and sample for check and one for write; nothing per byte.
// An example: docs/collate.md.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/batch.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/state.hpp"
#include "sluice/core/tensor.hpp"
#include "sluice/stage/field_collate.hpp"

namespace sluice {

// How one field of a run-time sample is collated.
using any_field_collator = std::variant<stack<>, normalized<>, ragged<>, pad<>, pack<>>;

// A field (by name) and its collator.
struct field_collate_spec {
  std::string field;
  any_field_collator how;
};

namespace detail {

// Field k of a run-time sample, as a compiled collator sees a field sample: a schema of one field
// named "" whose label (field_label) is the run-time name.
template <class T, extent E>
struct any_field_view {
  using schema_type = schema<field<"", T, E>>;
  std::uint64_t id = 0;
  std::string_view origin;
  const any_sample* sample = nullptr;
  std::size_t k = 0;
  std::string_view label;
  const std::array<std::pair<std::string_view, std::string_view>, 6>* suffixed = nullptr;  // the part's

  [[nodiscard]] std::string_view field_label() const noexcept { return label; }
  // label + suffix (".offsets", ...), interned when the part was made; any other suffix now.
  [[nodiscard]] std::string_view suffixed_label(std::string_view suffix) const {
    for (const auto& [sfx, name] : *suffixed)
      if (sfx == suffix) return name;
    return intern_name(std::string(label) + std::string(suffix));
  }
  template <fixed_string N>
  [[nodiscard]] std::size_t size_of() const {
    return sample->size_of(k);
  }
  template <fixed_string N>
  void write(std::span<std::byte> dst, const sample_context& ctx) const {
    sample->write(k, dst, ctx);
  }
  template <fixed_string N>
  [[nodiscard]] field_geometry geometry_of() const {
    return sample->geometry_of(k);
  }
};

struct any_part_scratch {
  virtual ~any_part_scratch() = default;
  [[nodiscard]] virtual std::unique_ptr<any_part_scratch> clone() const = 0;
  virtual void assign(const any_part_scratch& o) = 0;
};

// One field's collator behind one virtual call a step.
class any_part {
 public:
  virtual ~any_part() = default;
  [[nodiscard]] virtual std::unique_ptr<any_part_scratch> make_scratch() const = 0;
  virtual void begin(any_part_scratch& sc) const = 0;
  virtual void check(const any_sample& s, any_part_scratch& sc) const = 0;
  virtual void plan(std::span<const any_sample> all, any_part_scratch& sc, batch_layout& layout) const = 0;
  virtual void write(const any_sample& s, std::size_t i, std::byte* base, any_part_scratch& sc,
                     const sample_context& ctx) const = 0;
  virtual void finish(std::span<const any_sample> all, std::byte* base, any_part_scratch& sc,
                      const batch_layout& layout) const = 0;
};

template <class C, class T, extent E>
class any_part_of final : public any_part {
  using view = any_field_view<T, E>;
  struct scratch final : any_part_scratch {
    typename C::scratch inner{};
    std::vector<view> views;  // the batch's samples as views (plan, finish): grows once
    // A helping worker's copy needs the collator's plan, not the views (rebuilt where needed).
    [[nodiscard]] std::unique_ptr<any_part_scratch> clone() const override {
      auto c = std::make_unique<scratch>();
      c->inner = inner;
      return c;
    }
    void assign(const any_part_scratch& o) override { inner = static_cast<const scratch&>(o).inner; }
  };

 public:
  any_part_of(C c, std::size_t k, std::string_view label) : c_(std::move(c)), k_(k), label_(label) {
    constexpr std::array<std::string_view, 6> suffixes{".offsets", ".lengths", ".mask", ".doc_ids", ".position_ids",
                                                        ".cu_seqlens"};
    for (std::size_t i = 0; i < suffixes.size(); ++i)
      suffixed_[i] = {suffixes[i], intern_name(std::string(label) + std::string(suffixes[i]))};
  }

  [[nodiscard]] std::unique_ptr<any_part_scratch> make_scratch() const override { return std::make_unique<scratch>(); }
  void begin(any_part_scratch& sc) const override { c_.begin(inner(sc)); }
  void check(const any_sample& s, any_part_scratch& sc) const override { c_.check(at(s), inner(sc)); }
  void plan(std::span<const any_sample> all, any_part_scratch& sc, batch_layout& layout) const override {
    c_.plan(views(all, sc), inner(sc), layout);
  }
  void write(const any_sample& s, std::size_t i, std::byte* base, any_part_scratch& sc,
             const sample_context& ctx) const override {
    c_.write(at(s), i, base, inner(sc), ctx);
  }
  void finish(std::span<const any_sample> all, std::byte* base, any_part_scratch& sc,
              const batch_layout& layout) const override {
    // The views plan() made, unless the samples moved since (they do not between the two).
    const auto& v = static_cast<scratch&>(sc).views;
    const bool same = v.size() == all.size() && (all.empty() || v.front().sample == &all.front());
    c_.finish(same ? std::span<const view>(v) : views(all, sc), base, inner(sc), layout);
  }

 private:
  [[nodiscard]] view at(const any_sample& s) const noexcept { return {s.id, s.origin, &s, k_, label_, &suffixed_}; }
  static typename C::scratch& inner(any_part_scratch& sc) noexcept { return static_cast<scratch&>(sc).inner; }
  std::span<const view> views(std::span<const any_sample> all, any_part_scratch& sc) const {
    auto& v = static_cast<scratch&>(sc).views;
    v.resize(all.size());
    for (std::size_t i = 0; i < all.size(); ++i) v[i] = at(all[i]);
    return v;
  }

  C c_;
  std::size_t k_;
  std::string_view label_;
  std::array<std::pair<std::string_view, std::string_view>, 6> suffixed_{};
};

template <class C>
inline constexpr const char* any_collator_name = "";
template <>
inline constexpr const char* any_collator_name<stack<>> = "stack";
template <>
inline constexpr const char* any_collator_name<normalized<>> = "normalized";
template <>
inline constexpr const char* any_collator_name<ragged<>> = "ragged";
template <>
inline constexpr const char* any_collator_name<pad<>> = "pad";
template <>
inline constexpr const char* any_collator_name<pack<>> = "pack";

// The part for collator c of field k (its spec f), for the field's element type.
template <class C>
std::unique_ptr<any_part> make_any_part(C c, std::size_t k, const field_spec& f) {
  const std::string_view label = intern_name(f.name);
  const std::string who = std::string("sluice: ") + any_collator_name<C> + "<> of field '" + f.name + "' (" +
                          dtype_name(f.type) + "): ";
  if constexpr (std::is_same_v<C, normalized<>>) {
    if (f.type != dtype::u8)
      throw usage_error(who + "normalized<> converts u8 images to float; this field is " + dtype_name(f.type) +
                        " (stack<> keeps it as it is)");
    return std::make_unique<any_part_of<C, std::uint8_t, extent::fixed>>(std::move(c), k, label);
  } else {
    return visit_dtype(f.type, [&]<class T>() -> std::unique_ptr<any_part> {
      if constexpr (std::is_same_v<C, stack<>>) {
        return std::make_unique<any_part_of<C, T, extent::fixed>>(std::move(c), k, label);
      } else {
        if constexpr (std::is_same_v<C, pack<>>) {
          if (!std::is_integral_v<T> || std::is_same_v<T, bool>)
            throw usage_error(who + "pack<> packs integer tokens; this field is " + dtype_name(f.type) +
                              " (pad<> or ragged<> collate other sequences)");
          if (c.length == 0) throw usage_error(who + ".length must be at least 1");
        }
        if constexpr (std::is_same_v<C, pad<>> || std::is_same_v<C, pack<>>)
          (void)pad_value_as<T>(c.value, f.name);  // a pad value the type cannot hold: refused now
        if constexpr (std::is_same_v<C, pad<>>)
          if (c.multiple == 0) throw usage_error(who + ".multiple must be at least 1");
        return std::make_unique<any_part_of<C, T, extent::variable>>(std::move(c), k, label);
      }
    });
  }
}

}  // namespace detail

// The batch collator of run-time samples (a field collator each).
class any_collate {
 public:
  using collate_concept = collate_tag;
  static constexpr std::string_view name = "collate";
  static constexpr bool concurrent_write = true;  // every part is a compiled collator that is
  template <class S>
  using batch_type = batch;

  // One part's scratch each; copies are deep (a helping worker's copy of the owner's plan).
  class scratch_type {
   public:
    scratch_type() = default;
    scratch_type(const scratch_type& o) { *this = o; }
    scratch_type& operator=(const scratch_type& o) {
      if (this == &o) return *this;
      if (parts.size() != o.parts.size()) {
        parts.clear();
        for (const auto& p : o.parts) parts.push_back(p->clone());
      } else {
        for (std::size_t i = 0; i < parts.size(); ++i) parts[i]->assign(*o.parts[i]);
      }
      return *this;
    }
    scratch_type(scratch_type&&) noexcept = default;
    scratch_type& operator=(scratch_type&&) noexcept = default;
    ~scratch_type() = default;
    std::vector<std::unique_ptr<detail::any_part_scratch>> parts;
  };

  // `in`: the schema of the samples collate receives; one spec a field to emit (fields no spec
  // names are not emitted). Every check of the header comment is made here.
  // A template only so that the parts (every collator for every dtype) are instantiated in the
  // programs that build a run-time collate, not in every one that includes the header: they were
  // a third of the compile of a minimal compiled pipeline. Fields is a std::vector of specs (a
  // braced list of them picks the default).
  template <class Fields = std::vector<field_collate_spec>>
    requires std::same_as<Fields, std::vector<field_collate_spec>>
  any_collate(batch_options o, const any_schema& in, Fields fields) : opt_(o) {
    if (opt_.batch == 0) throw usage_error("sluice: collate({.batch = 0}): a batch needs at least one sample");
    if (fields.empty()) throw usage_error("sluice: collate: no field to collate (give one collator a field)");
    for (std::size_t a = 0; a < fields.size(); ++a)
      for (std::size_t b = 0; b < a; ++b)
        if (fields[a].field == fields[b].field)
          throw usage_error("sluice: collate: field '" + fields[a].field + "' has two collators");
    fingerprint_hash h;
    for (auto& f : fields) {
      const std::size_t k = in.at(f.field, "collate");
      h.add(std::string_view(f.field)).add(static_cast<std::uint64_t>(f.how.index()));
      h.add(static_cast<std::uint64_t>(in[k].type));
      parts_.push_back(std::visit([&](auto c) { return std::shared_ptr<const detail::any_part>(
                                                    detail::make_any_part(std::move(c), k, in[k])); },
                                  std::move(f.how)));
    }
    fingerprint_ = h.value();
  }
  [[nodiscard]] std::size_t batch_size() const noexcept { return opt_.batch; }
  [[nodiscard]] bool drop_last() const noexcept { return opt_.drop_last; }
  // The fields, their collators and types, for a loader state's fingerprint (core/state.hpp): a
  // state saved by a pipeline of other fields is refused on resume, as a compiled batch type's is.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_; }

  void begin(scratch_type& sc) const {
    if (sc.parts.size() != parts_.size()) {
      sc.parts.clear();
      for (const auto& p : parts_) sc.parts.push_back(p->make_scratch());
    }
    for (std::size_t f = 0; f < parts_.size(); ++f) parts_[f]->begin(*sc.parts[f]);
  }
  void check(const any_sample& s, scratch_type& sc) const {
    for (std::size_t f = 0; f < parts_.size(); ++f) parts_[f]->check(s, *sc.parts[f]);
  }
  void plan(std::span<const any_sample> all, scratch_type& sc, batch_layout& layout) const {
    for (std::size_t f = 0; f < parts_.size(); ++f) parts_[f]->plan(all, *sc.parts[f], layout);
  }
  void write(const any_sample& s, std::size_t i, std::byte* base, scratch_type& sc, const sample_context& ctx) const {
    for (std::size_t f = 0; f < parts_.size(); ++f) parts_[f]->write(s, i, base, *sc.parts[f], ctx);
  }
  void finish(std::span<const any_sample> all, std::byte* base, scratch_type& sc, const batch_layout& layout) const {
    for (std::size_t f = 0; f < parts_.size(); ++f) parts_[f]->finish(all, base, *sc.parts[f], layout);
  }

 private:
  batch_options opt_;
  std::vector<std::shared_ptr<const detail::any_part>> parts_;
  std::uint64_t fingerprint_ = 0;
};

// collate({.batch = 64}, schema, {{"jpg", sluice::stack<>{}}, {"cls", sluice::stack<>{}}})
// (A template for the reason any_collate's constructor is one.)
template <class Fields = std::vector<field_collate_spec>>
  requires std::same_as<Fields, std::vector<field_collate_spec>>
any_collate collate(batch_options o, const any_schema& in, Fields fields) {
  return any_collate(o, in, std::move(fields));
}

}  // namespace sluice
