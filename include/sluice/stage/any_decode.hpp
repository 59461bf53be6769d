// sluice/stage/any_decode.hpp — decode one field of a run-time sample, in place.
//
// decode_field(schema, "jpg", codec) is decode<"jpg">(codec) (stage/decode.hpp) for run-time
// samples (core/any_sample.hpp): the codec writes the decoded image straight into the batch when
// collate asks (one indirect call a sample), and schema() is the schema collate is built with.
// any_decode_stage(schema).add(field, codec, {followers}) decodes several fields, each with its
// codec, and may move fields with an image's geometry as the compiled followers do: any_boxes and
// any_points (rows, or one field a coordinate as the TF Object Detection API stores them; the
// fields named with them lose the rows of dropped boxes) and any_mask.
// Errors: a field the samples do not have, one that is not u8, one decoded or followed twice, or a
// second image with followers is a usage_error at construction naming it; a record the codec
// cannot decode, or followed fields that do not fit (rows not whole, columns of different lengths,
// not one row per box), is a format_error naming the file, the record and the field, as the
// compiled stage raises it.
// Threads: as stage/decode.hpp. Examples and every rule: docs/decode.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/any_sample.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/stage/decode.hpp"

namespace sluice {

namespace detail {
// A rendered follower (codec/mask.hpp's mask<>) behind one interface, for run-time samples.
class rendered_base {
 public:
  virtual ~rendered_base() = default;
  [[nodiscard]] virtual std::size_t output_bytes(const codecs::image_transform& t) const = 0;
  [[nodiscard]] virtual field_geometry geometry(const codecs::image_transform& t) const = 0;
  virtual void check(std::span<const std::byte> in, const codecs::image_transform& t) const = 0;
  virtual void render(std::span<const std::byte> in, std::span<std::byte> out, const codecs::image_transform& t) const = 0;
};
template <rendered_follower F>
struct rendered_as final : rendered_base {
  explicit rendered_as(F x) : f(std::move(x)) {}
  F f;
  [[nodiscard]] std::size_t output_bytes(const codecs::image_transform& t) const override { return f.output_bytes(t); }
  [[nodiscard]] field_geometry geometry(const codecs::image_transform& t) const override { return f.geometry(t); }
  void check(std::span<const std::byte> in, const codecs::image_transform& t) const override { f.check(in, t); }
  void render(std::span<const std::byte> in, std::span<std::byte> out, const codecs::image_transform& t) const override {
    f.render(in, out, t);
  }
};
}  // namespace detail

// A field that follows a decoded image at run time: see the top of this file.
struct any_follower {
  enum class shape { boxes, points, rendered };
  shape kind = shape::boxes;
  // One field of rows (4 numbers a box, 2 a point), or one field a coordinate (4 / 2 fields);
  // rendered: the one field rendered.
  std::vector<std::string> coordinates;
  // Fields of one row per box (point) that lose the rows of dropped ones.
  std::vector<std::string> with;
  codecs::box_options box{};
  codecs::point_options point{};
  std::shared_ptr<const detail::rendered_base> rendered{};
};

// A field rendered through the image's transform by a rendered follower F (its field name
// unused: `field` names it): any_rendered("seg", sluice::mask<"">{.ignore_index = 255}), or
// sluice::any_mask("seg") (codec/mask.hpp). The field (u8: the encoded mask) becomes a fixed u8
// field of F's output, F's geometry its shape (stack<> collates masks to {B, H, W}).
template <rendered_follower F>
any_follower any_rendered(std::string field, F f) {
  any_follower a;
  a.kind = any_follower::shape::rendered;
  a.coordinates = {std::move(field)};
  a.rendered = std::make_shared<const detail::rendered_as<F>>(std::move(f));
  return a;
}

// Boxes (rows of 4 in box_options' format, or 4 columns) followed by the fields `with`.
inline any_follower any_boxes(std::vector<std::string> coordinates, std::vector<std::string> with = {},
                              codecs::box_options o = {}) {
  return {any_follower::shape::boxes, std::move(coordinates), std::move(with), o, {}, {}};
}
// Points (rows of 2 (x, y), or 2 columns) followed by the fields `with`.
inline any_follower any_points(std::vector<std::string> coordinates, std::vector<std::string> with = {},
                               codecs::point_options o = {}) {
  return {any_follower::shape::points, std::move(coordinates), std::move(with), {}, o, {}};
}

namespace detail {

// What the stage works out for a sample with followers and keeps in it (any_sample::set_plan):
// the image's transform, the sample's context, and the producer each followed field had before
// the stage (a reader's list written in pieces or converted: nullptr for a view), which the
// follower's producer then reads through.
struct follow_plan {
  codecs::image_transform transform;
  sample_context ctx;
  std::array<const field_producer*, max_any_fields> inner{};
};

// A producer that also plans a sample's transform (an image that fields follow).
class image_planner : public field_producer {
 public:
  [[nodiscard]] virtual codecs::image_transform plan(std::span<const std::byte> encoded, const sample_context& ctx) const = 0;

 protected:
  ~image_planner() = default;
};

// Runs `decode` (which writes field k of s) timed and reported as the decode stage's work, a
// format_error naming the file, the record and the field.
template <class Decode>
void decode_into(const any_sample& s, const std::string& label, const sample_context& ctx, Decode&& decode) {
  constexpr std::string_view stage = "decode";
  const deferred_scope timed(stage, ctx);
  try {
    try {
      decode();
    } catch (const format_error& e) {
      throw format_error(std::string(s.origin), {.record = s.id}, label + ": " + e.cause());
    }
  } catch (...) {
    throw_stage_error(stage, s.id);
  }
}

template <codec Codec>
struct codec_producer final : field_producer {
  codec_producer(Codec c, const std::string& n) : codec(std::move(c)), field("field '" + n + "'") {}
  Codec codec;
  std::string field;  // "field 'jpg'", for messages
  [[nodiscard]] std::size_t size(const any_sample&, std::size_t) const override { return codec.output_bytes(); }
  void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const override {
    decode_into(s, field, ctx, [&] { codec.decode(s.fields[k].bytes, dst, ctx); });
  }
  [[nodiscard]] field_geometry geometry(const any_sample&, std::size_t) const override { return codec_geometry(codec); }
};

// The same for an image that fields follow: decoded with the transform the stage planned.
template <codec Codec>
struct planned_codec_producer final : image_planner {
  planned_codec_producer(Codec c, const std::string& n) : codec(std::move(c)), field("field '" + n + "'") {}
  Codec codec;
  std::string field;  // "field 'jpg'", for messages
  [[nodiscard]] std::size_t size(const any_sample&, std::size_t) const override { return codec.output_bytes(); }
  void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const override {
    decode_into(s, field, ctx, [&] { codec.decode_with(s.fields[k].bytes, dst, s.plan<follow_plan>().transform); });
  }
  [[nodiscard]] field_geometry geometry(const any_sample&, std::size_t) const override { return codec_geometry(codec); }
  [[nodiscard]] codecs::image_transform plan(std::span<const std::byte> encoded, const sample_context& ctx) const override {
    return codec.plan(encoded, ctx);
  }
};

// Field k's values as the reader hands them on: its view, or what its producer writes (into
// `buf`, reused: steady state allocates nothing).
inline std::span<const std::byte> follower_input(const any_sample& s, const follow_plan& p, std::size_t k,
                                                 std::vector<std::byte>& buf) {
  const field_producer* in = p.inner[k];
  if (in == nullptr) return s.fields[k].bytes;
  const std::size_t n = in->size(s, k);
  if (buf.size() < n) buf.resize(n);
  in->write(s, k, std::span<std::byte>(buf.data(), n), p.ctx);
  return {buf.data(), n};
}
inline std::size_t follower_input_size(const any_sample& s, const follow_plan& p, std::size_t k) {
  return p.inner[k] != nullptr ? p.inner[k]->size(s, k) : s.fields[k].bytes.size();
}

// A follower with its fields found in the schema: the coordinate fields (1, or one a
// coordinate), the fields that lose dropped rows, and their names for messages.
struct placed_follower {
  any_follower how;
  std::size_t row = 4;  // coordinates a box (point)
  dtype type = dtype::f32;
  std::vector<std::size_t> coordinates, with;
  std::vector<std::string> names;  // of the coordinate fields, then the others
  std::string image;               // the image's name, for messages

  [[nodiscard]] bool columns() const noexcept { return coordinates.size() > 1; }

  // The coordinate inputs of sample s (views, or written into this thread's buffers).
  using inputs = std::array<std::span<const std::byte>, 4>;
  [[nodiscard]] inputs read(const any_sample& s, const follow_plan& p) const {
    thread_local std::array<std::vector<std::byte>, 4> buf;
    inputs in{};
    for (std::size_t j = 0; j < coordinates.size(); ++j) in[j] = follower_input(s, p, coordinates[j], buf[j]);
    return in;
  }
  // The rows of sample s (boxes or points).
  [[nodiscard]] std::size_t rows(const inputs& in) const {
    const std::size_t e = dtype_size(type);
    return columns() ? in[0].size() / e : in[0].size() / (row * e);
  }
  // Whether row r survives the transform; its mapped coordinates in out.
  template <class T>
  bool map(const inputs& c, const codecs::image_transform& t, std::size_t r, T* out) const noexcept {
    T in[4];
    if (columns()) {
      for (std::size_t j = 0; j < row; ++j) std::memcpy(&in[j], c[j].data() + r * sizeof(T), sizeof(T));
    } else {
      std::memcpy(in, c[0].data() + r * row * sizeof(T), row * sizeof(T));
    }
    return how.kind == any_follower::shape::boxes ? codecs::transform_box(t, how.box, in, out)
                                                  : codecs::transform_point(t, how.point, in, out);
  }
  template <class Fn>
  decltype(auto) typed(Fn&& fn) const {
    if (type == dtype::f64) return fn(double{});
    return fn(float{});
  }
  [[nodiscard]] std::size_t kept(const inputs& in, const codecs::image_transform& t) const {
    return typed([&]<class T>(T) {
      T out[4];
      std::size_t k = 0;
      for (std::size_t r = 0, n = rows(in); r < n; ++r) k += map(in, t, r, out);
      return k;
    });
  }

  // When the stage runs: whole rows, columns of one length, one row per box in each field.
  void check(const any_sample& s, const follow_plan& p) const {
    const auto fail = [&](const std::string& name, const std::string& why) {
      throw format_error(std::string(s.origin), {.record = s.id}, "field '" + name + "': " + why);
    };
    if (how.kind == any_follower::shape::rendered) {
      if (p.inner[coordinates[0]] != nullptr) fail(names[0], "follows an image, and the reader writes it in pieces; it must be stored as one encoded value");
      try {
        how.rendered->check(s.fields[coordinates[0]].bytes, p.transform);
      } catch (const format_error& e) {
        throw format_error(std::string(s.origin), {.record = s.id},
                           "field '" + names[0] + "' (following '" + image + "'): " + e.cause());
      }
      return;
    }
    const std::size_t e = dtype_size(type), b0 = follower_input_size(s, p, coordinates[0]);
    const std::size_t unit = columns() ? e : row * e;
    if (b0 % unit != 0)
      fail(names[0], std::to_string(b0) + " bytes is not a whole number of " +
                         (columns() ? std::string(dtype_name(type)) + " values" : "rows of " + std::to_string(row) + " coordinates"));
    const std::size_t n = b0 / unit;
    for (std::size_t j = 1; j < coordinates.size(); ++j)
      if (const std::size_t b = follower_input_size(s, p, coordinates[j]); b != n * e)
        fail(names[j], std::to_string(b / e) + " values beside " + std::to_string(n) + " of '" + names[0] +
                           "' (the coordinate columns of a box must be equally long)");
    for (std::size_t j = 0; j < with.size(); ++j) {
      const std::size_t b = follower_input_size(s, p, with[j]);
      if ((n == 0 && b != 0) || (n != 0 && b % n != 0))
        fail(names[coordinates.size() + j], std::to_string(b) + " bytes for " + std::to_string(n) + " rows of '" + names[0] +
                                                "' (it must hold one row per row of it)");
    }
  }
};

// Writes one field of a follower: a coordinate field (mapped, dropped rows left out) or a field
// with one row per box (dropped rows left out).
struct follower_producer final : field_producer {
  follower_producer(std::shared_ptr<const placed_follower> f, int c) : follow(std::move(f)), column(c) {}
  std::shared_ptr<const placed_follower> follow;
  int column;  // the coordinate field's index in follow->coordinates; -1: a field with them

  [[nodiscard]] std::size_t size(const any_sample& s, std::size_t k) const override {
    const placed_follower& f = *follow;
    const auto p = s.plan<follow_plan>();
    const auto in = f.read(s, p);
    const std::size_t n = f.rows(in);
    if (n == 0) return 0;
    const std::size_t kept = f.kept(in, p.transform);
    if (column < 0) return follower_input_size(s, p, k) / n * kept;
    return kept * dtype_size(f.type) * (f.columns() ? 1 : f.row);
  }
  void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context&) const override {
    const placed_follower& f = *follow;
    const auto p = s.plan<follow_plan>();
    const auto in = f.read(s, p);
    const std::size_t n = f.rows(in);
    if (n == 0) return;
    thread_local std::vector<std::byte> buf;
    const std::span<const std::byte> rows = column < 0 ? follower_input(s, p, k, buf) : std::span<const std::byte>{};
    const std::size_t row_bytes = rows.size() / n;
    f.typed([&]<class T>(T) {
      std::size_t w = 0;
      for (std::size_t r = 0; r < n; ++r) {
        T out[4];
        if (!f.map(in, p.transform, r, out)) continue;
        if (column < 0) {
          std::memcpy(dst.data() + w, rows.data() + r * row_bytes, row_bytes);
          w += row_bytes;
        } else if (f.columns()) {
          std::memcpy(dst.data() + w, &out[column], sizeof(T));
          w += sizeof(T);
        } else {
          std::memcpy(dst.data() + w, out, f.row * sizeof(T));
          w += f.row * sizeof(T);
        }
      }
      return 0;
    });
  }
  [[nodiscard]] field_geometry geometry(const any_sample&, std::size_t) const override { return {}; }
};

// Writes a rendered follower's field (a mask through the image's transform), timed and reported
// as the decode stage's work like the image's decode.
struct rendered_producer final : field_producer {
  explicit rendered_producer(std::shared_ptr<const placed_follower> f)
      : follow(std::move(f)), label("field '" + follow->names[0] + "' (following '" + follow->image + "')") {}
  std::shared_ptr<const placed_follower> follow;
  std::string label;
  [[nodiscard]] std::size_t size(const any_sample& s, std::size_t) const override {
    return follow->how.rendered->output_bytes(s.plan<follow_plan>().transform);
  }
  void write(const any_sample& s, std::size_t k, std::span<std::byte> dst, const sample_context& ctx) const override {
    decode_into(s, label, ctx, [&] { follow->how.rendered->render(s.fields[k].bytes, dst, s.plan<follow_plan>().transform); });
  }
  [[nodiscard]] field_geometry geometry(const any_sample& s, std::size_t) const override {
    return follow->how.rendered->geometry(s.plan<follow_plan>().transform);
  }
};

}  // namespace detail

// Decodes any number of fields of run-time samples, each with its codec (added with add()).
class any_decode_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "decode";

  explicit any_decode_stage(const any_schema& in) : out_(in) {}

  // Field `field` is decoded with `c` from now on; a usage_error if the samples have no such
  // field, if it is not a u8 field (encoded bytes), or if it is decoded already.
  template <class Codec>
    requires codec<std::remove_cvref_t<Codec>>
  any_decode_stage& add(std::string_view field, Codec&& c) {
    const std::size_t k = decoded_field(field);
    producers_.emplace_back(k, std::make_shared<const detail::codec_producer<std::remove_cvref_t<Codec>>>(
                                   std::forward<Codec>(c), out_[k].name));
    return *this;
  }
  // The same, with fields that follow the image's geometry (see the top of this file). One image
  // a stage has followers (a sample keeps one plan); the codec must have plan(bytes, ctx) and
  // decode_with(bytes, out, transform), as the image codecs do.
  template <class Codec>
    requires codec<std::remove_cvref_t<Codec>> &&
             requires(const std::remove_cvref_t<Codec>& c, std::span<const std::byte> in, std::span<std::byte> out,
                      const sample_context& ctx, const codecs::image_transform& t) {
               { c.plan(in, ctx) } -> std::same_as<codecs::image_transform>;
               c.decode_with(in, out, t);
             }
  any_decode_stage& add(std::string_view field, Codec&& c, std::vector<any_follower> follow) {
    if (follow.empty()) return add(field, std::forward<Codec>(c));
    if (planner_ != nullptr)
      throw usage_error("sluice: decode_field: fields follow '" + out_[image_].name + "' already, and '" + std::string(field) +
                        "' too: a sample keeps one image's plan (decode the other image without followers)");
    const std::size_t k = decoded_field(field);
    std::vector<std::shared_ptr<const detail::placed_follower>> placed;
    for (auto& f : follow) placed.push_back(place(k, std::move(f)));
    auto p = std::make_shared<const detail::planned_codec_producer<std::remove_cvref_t<Codec>>>(std::forward<Codec>(c), out_[k].name);
    planner_ = p.get();
    image_ = k;
    producers_.emplace_back(k, std::move(p));
    for (const auto& f : placed) {
      followers_.push_back(f);
      if (f->how.kind == any_follower::shape::rendered) {
        follower_fields_.emplace_back(f->coordinates[0], std::make_shared<const detail::rendered_producer>(f));
        continue;
      }
      for (std::size_t j = 0; j < f->coordinates.size(); ++j)
        follower_fields_.emplace_back(f->coordinates[j], std::make_shared<const detail::follower_producer>(f, static_cast<int>(j)));
      for (const std::size_t w : f->with)
        follower_fields_.emplace_back(w, std::make_shared<const detail::follower_producer>(f, -1));
    }
    return *this;
  }

  // The schema of the samples this stage hands on.
  [[nodiscard]] const any_schema& schema() const noexcept { return out_; }

  // A field the reader writes itself (a tf.train.Example list in pieces, numbers) is not one
  // encoded value: a format_error naming it, never its raw bytes decoded.
  any_sample operator()(const any_sample& in, const sample_context& ctx) const {
    any_sample s = in;
    for (const auto& [k, p] : producers_) {
      if (s.fields[k].producer != nullptr) [[unlikely]]
        throw format_error(std::string(s.origin), {.record = s.id},
                           "field '" + out_[k].name + "': not one encoded value as stored (" + std::to_string(s.size_of(k)) +
                               " bytes in pieces); a codec decodes one encoded image");
      s.fields[k].producer = p.get();
    }
    if (planner_ != nullptr) {
      if (s.planned) [[unlikely]]
        throw usage_error("sluice: decode_field: the samples reaching it carry a plan already (fields follow an image "
                          "decoded by an earlier stage); a sample keeps one image's plan");
      detail::follow_plan plan;
      try {
        check_upright_for_followers(s.fields[image_].bytes);
        plan.transform = planner_->plan(s.fields[image_].bytes, ctx);
      } catch (const format_error& e) {
        throw format_error(std::string(s.origin), {.record = s.id}, "field '" + out_[image_].name + "': " + e.cause());
      }
      plan.ctx = ctx;
      for (const auto& [k, p] : follower_fields_) plan.inner[k] = s.fields[k].producer;
      for (const auto& f : followers_) f->check(s, plan);
      s.set_plan(plan);
      for (const auto& [k, p] : follower_fields_) s.fields[k].producer = p.get();
    }
    return s;
  }

 private:
  // Field `field`'s index, made a fixed u8 field: a usage_error if there is none, if it is not u8
  // (encoded bytes), or if it is decoded already or follows an image.
  std::size_t decoded_field(std::string_view field) {
    const std::size_t k = out_.at(field, "decode_field");
    for (const auto& [j, p] : producers_)
      if (j == k) throw usage_error("sluice: decode_field: field '" + out_[k].name + "' is decoded twice");
    for (const std::size_t j : claimed_)
      if (j == k) throw usage_error("sluice: decode_field: field '" + out_[k].name + "' follows an image; it is not one");
    if (out_[k].type != dtype::u8)
      throw usage_error("sluice: decode_field: field '" + out_[k].name + "' holds " + dtype_name(out_[k].type) +
                        " elements; a codec decodes encoded bytes (a u8 field)");
    out_ = out_.with(k, {out_[k].name, dtype::u8, extent::fixed});
    return k;
  }
  // A follower of image `image` with its fields found, checked and made variable in the schema.
  std::shared_ptr<const detail::placed_follower> place(std::size_t image, any_follower f) {
    auto p = std::make_shared<detail::placed_follower>();
    p->image = out_[image].name;
    if (f.kind == any_follower::shape::rendered) {
      if (f.coordinates.size() != 1 || !f.with.empty() || f.rendered == nullptr)
        throw usage_error("sluice: decode_field: a rendered follower of '" + out_[image].name + "' renders one field (any_rendered)");
      const std::size_t k = out_.at(f.coordinates[0], "a field following '" + out_[image].name + "'");
      bool twice = k == image;
      for (const auto& [j, q] : producers_) twice = twice || j == k;
      for (const std::size_t j : claimed_) twice = twice || j == k;
      if (twice)
        throw usage_error("sluice: decode_field: field '" + out_[k].name + "' is named twice among the decoded and following fields");
      if (out_[k].type != dtype::u8)
        throw usage_error("sluice: decode_field: field '" + out_[k].name + "' (following '" + out_[image].name + "') holds " +
                          dtype_name(out_[k].type) + " elements; a mask is rendered from encoded bytes (a u8 field)");
      p->coordinates = {k};
      p->names = {out_[k].name};
      p->type = dtype::u8;
      claimed_.push_back(k);
      out_ = out_.with(k, {out_[k].name, dtype::u8, extent::fixed});
      p->how = std::move(f);
      return p;
    }
    const bool boxes = f.kind == any_follower::shape::boxes;
    p->row = boxes ? 4 : 2;
    const char* what = boxes ? "boxes" : "points";
    if (f.coordinates.size() != 1 && f.coordinates.size() != p->row)
      throw usage_error("sluice: decode_field: " + std::string(what) + " following '" + out_[image].name + "' name " +
                        std::to_string(f.coordinates.size()) + " coordinate fields; name one (rows of " +
                        std::to_string(p->row) + ") or " + std::to_string(p->row) + " (one a coordinate)");
    const auto take = [&](const std::string& name, std::vector<std::size_t>& into) {
      const std::size_t k = out_.at(name, "a field following '" + out_[image].name + "'");
      bool twice = k == image;
      for (const auto& [j, q] : producers_) twice = twice || j == k;
      for (const std::size_t j : claimed_) twice = twice || j == k;
      if (twice)
        throw usage_error("sluice: decode_field: field '" + name + "' is named twice among the decoded and following fields");
      into.push_back(k);
      claimed_.push_back(k);
      p->names.push_back(name);
      out_ = out_.with(k, {out_[k].name, out_[k].type, extent::variable});
    };
    for (const auto& c : f.coordinates) take(c, p->coordinates);
    for (const auto& w : f.with) take(w, p->with);
    p->type = out_[p->coordinates[0]].type;
    for (const std::size_t k : p->coordinates)
      if (out_[k].type != p->type || (p->type != dtype::f32 && p->type != dtype::f64))
        throw usage_error("sluice: decode_field: the coordinates of " + std::string(what) + " following '" + out_[image].name +
                          "' are field '" + out_[k].name + "' of " + dtype_name(out_[k].type) +
                          "; they must be f32 or f64 (all of one type)");
    p->how = std::move(f);
    return p;
  }

  any_schema out_;
  std::vector<std::pair<std::size_t, std::shared_ptr<const field_producer>>> producers_;
  const detail::image_planner* planner_ = nullptr;  // the image with followers
  std::size_t image_ = 0;
  std::vector<std::shared_ptr<const detail::placed_follower>> followers_;
  std::vector<std::pair<std::size_t, std::shared_ptr<const field_producer>>> follower_fields_;
  std::vector<std::size_t> claimed_;  // the fields that follow
};

// One field decoded: any_decode_stage(in).add(field, c).
template <class Codec>
  requires codec<std::remove_cvref_t<Codec>>
any_decode_stage decode_field(const any_schema& in, std::string_view field, Codec&& c) {
  any_decode_stage s(in);
  s.add(field, std::forward<Codec>(c));
  return s;
}

}  // namespace sluice
