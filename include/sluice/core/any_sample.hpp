// sluice/core/any_sample.hpp — samples whose fields are known at run time.
//
// A compiled pipeline names its fields in the type (core/schema.hpp). A front door — the Python module, a trainer
// configured from a file — learns them only at run time: from the files (a WebDataset's member extensions, an .npy
// member's dtype) or from what the user typed. For it, a reader hands on an `any_sample`: the fields as an array of
// views, described once by an `any_schema` (name, element type, fixed or variable), and collate takes one run-time
// collator per field (stage/any_collate.hpp). The per-sample work is the compiled pipeline's: a field is a view until
// collate writes it, and a field that is produced when written (a decoded image) costs one indirect call to its
// producer, never one a byte.
//
//   sluice::any_schema s{{{"jpg", sluice::dtype::u8}, {"cls", sluice::dtype::i64, sluice::extent::fixed}}};
//   sluice::any_sample x{7, "train-0.tar", 2};   // 2 fields, empty views
//   x.fields[0].bytes = jpeg;  x.fields[1].bytes = std::as_bytes(std::span(&label, 1));
//
// Field k of a sample is the schema's field k. A producer (field_producer) writes a field whose bytes exist only once
// written: its size, its writer and its geometry replace the view's; the view then holds the producer's input (the
// encoded image). A sample may also carry one plan: a small trivially copyable value a stage worked out for this sample
// and its producers read when they write (stage/any_decode.hpp keeps the image's planned crop, scale and flip there, so
// the boxes that follow the image and the image itself agree). It is copied with the sample only when set. Readers and
// decoding: docs/readers.md, docs/decode.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"

namespace sluice {

inline constexpr std::size_t max_any_fields = 12;

// One field of a run-time schema.
struct field_spec {
  std::string name;
  dtype type = dtype::u8;
  extent kind = extent::variable;  // fixed: one size for every sample (stack); variable: rows
};

// The fields of a run-time sample, in order.
class any_schema {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  any_schema() = default;
  // Names must be non-empty and distinct; at most max_any_fields fields.
  explicit any_schema(std::vector<field_spec> fields) : fields_(std::move(fields)) {
    if (fields_.size() > max_any_fields)
      throw usage_error("sluice: a run-time schema of " + std::to_string(fields_.size()) + " fields; at most " +
                        std::to_string(max_any_fields));
    for (std::size_t a = 0; a < fields_.size(); ++a) {
      if (fields_[a].name.empty()) throw usage_error("sluice: a run-time schema's field has an empty name");
      for (std::size_t b = 0; b < a; ++b)
        if (fields_[a].name == fields_[b].name)
          throw usage_error("sluice: a run-time schema names field '" + fields_[a].name + "' twice");
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return fields_.size(); }
  [[nodiscard]] const field_spec& operator[](std::size_t k) const noexcept { return fields_[k]; }
  [[nodiscard]] auto begin() const noexcept { return fields_.begin(); }
  [[nodiscard]] auto end() const noexcept { return fields_.end(); }

  [[nodiscard]] std::size_t index_of(std::string_view name) const noexcept {
    for (std::size_t k = 0; k < fields_.size(); ++k)
      if (fields_[k].name == name) return k;
    return npos;
  }
  // The field's index; a usage_error naming it, `who` (what asked) and the fields there are.
  [[nodiscard]] std::size_t at(std::string_view name, std::string_view who) const {
    const std::size_t k = index_of(name);
    if (k == npos)
      throw usage_error("sluice: " + std::string(who) + " names field '" + std::string(name) +
                        "', which the samples do not have (they have: " + describe() + ")");
    return k;
  }
  // "jpg (u8, variable), cls (i64, fixed)"
  [[nodiscard]] std::string describe() const {
    std::string t;
    for (const auto& f : fields_)
      t += (t.empty() ? "" : ", ") + f.name + " (" + dtype_name(f.type) +
           (f.kind == extent::fixed ? ", fixed)" : ", variable)");
    return t.empty() ? "no fields" : t;
  }
  // This schema with field k replaced (what a stage that turns one field into another hands on).
  [[nodiscard]] any_schema with(std::size_t k, field_spec f) const {
    any_schema s = *this;
    s.fields_.at(k) = std::move(f);
    return s;
  }

 private:
  std::vector<field_spec> fields_;
};

struct any_sample;

// Writes a field whose bytes come into being when written (a decoded image). One object serves
// every sample (a stage owns it); it must be const-callable from several threads.
class field_producer {
 public:
  [[nodiscard]] virtual std::size_t size(const any_sample& s, std::size_t k) const = 0;
  virtual void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const = 0;
  [[nodiscard]] virtual field_geometry geometry(const any_sample& s, std::size_t k) const = 0;

 protected:
  ~field_producer() = default;
};

// One field's value: a view, or a producer's input and the producer.
// Small (32 bytes): a sample is copied from stage to stage, so what the reader knows of a field's
// shape is pointed to (the reader keeps it), not held.
struct any_field {
  std::span<const std::byte> bytes;
  const field_geometry* geometry = nullptr;  // what the reader knows (a shard's stored shape), else null
  const field_producer* producer = nullptr;
};

// Fields [0, count) are set; the others are not storage anyone reads. A sample is copied from
// stage to stage and into the batch's list, and most have a few fields: constructing or copying
// one touches only those (a whole array of max_any_fields would be zeroed or copied each time:
// 384 bytes a sample, a fifth of the loader's own work on raw records).
inline constexpr std::size_t any_plan_bytes = 192;

struct any_sample {
  std::uint64_t id = 0;
  std::string_view origin;  // the file (for error messages)
  std::size_t count = 0;    // fields set: the schema's size
  bool planned = false;     // whether plan holds a value (set_plan)
  union {
    std::array<any_field, max_any_fields> fields;
  };
  union {
    alignas(8) std::array<std::byte, any_plan_bytes> plan_storage;
  };

  any_sample() noexcept {}
  // `n` fields, each an empty view (a reader sets them).
  any_sample(std::uint64_t i, std::string_view o, std::size_t n) noexcept : id(i), origin(o), count(std::min(n, max_any_fields)) {
    static constexpr std::array<any_field, max_any_fields> none{};
    take(none.data());
  }
  any_sample(const any_sample& o) noexcept : id(o.id), origin(o.origin), count(o.count) { take(o); }
  any_sample& operator=(const any_sample& o) noexcept {
    id = o.id;
    origin = o.origin;
    count = o.count;
    take(o);
    return *this;
  }

  // The sample's plan (see the top of this file): set by the stage that works it out, read by the
  // producers that need it; reading one never set is a usage_error (a producer put after a stage
  // that did not plan), never garbage.
  template <class P>
  void set_plan(const P& p) noexcept {
    static_assert(std::is_trivially_copyable_v<P> && sizeof(P) <= any_plan_bytes &&
                  alignof(P) <= 8);
    std::memcpy(plan_storage.data(), &p, sizeof(P));
    planned = true;
  }
  template <class P>
  [[nodiscard]] P plan() const {
    static_assert(std::is_trivially_copyable_v<P> && sizeof(P) <= any_plan_bytes);
    if (!planned) throw usage_error("sluice: a field producer needs the sample's plan, and no stage set one");
    P p;
    std::memcpy(&p, plan_storage.data(), sizeof(P));
    return p;
  }

  [[nodiscard]] std::size_t size_of(std::size_t k) const {
    const any_field& f = fields[k];
    return f.producer != nullptr ? f.producer->size(*this, k) : f.bytes.size();
  }
  // Writes exactly size_of(k) bytes.
  void write(std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const {
    const any_field& f = fields[k];
    if (f.producer != nullptr) f.producer->write(*this, k, dst, ctx);
    else if (!f.bytes.empty()) std::memcpy(dst.data(), f.bytes.data(), f.bytes.size());
  }
  [[nodiscard]] field_geometry geometry_of(std::size_t k) const {
    const any_field& f = fields[k];
    if (f.producer != nullptr) return f.producer->geometry(*this, k);
    return f.geometry != nullptr ? *f.geometry : field_geometry{};
  }

 private:
  // Fields [0, count) from `from` (a memcpy: it begins the fields' lifetime, any_field being an
  // implicit-lifetime aggregate of views and pointers).
  void take(const any_field* from) noexcept {
    static_assert(std::is_trivially_copyable_v<any_field>);
    if (this->count != 0) std::memcpy(static_cast<void*>(fields.data()), from, this->count * sizeof(any_field));
  }
  void take(const any_sample& o) noexcept {
    take(o.fields.data());
    planned = o.planned;
    if (planned) std::memcpy(plan_storage.data(), o.plan_storage.data(), any_plan_bytes);
  }
};

}  // namespace sluice
