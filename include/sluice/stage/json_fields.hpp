// sluice/stage/json_fields.hpp — typed fields from a JSON member of each sample (a WebDataset
// `key.json` of annotations), by path.
//
// json_fields<"json", Out...> parses field "json" of each sample when the stage runs and adds the
// fields Out..., each filled with the numbers one path reaches ("annotations[*].bbox",
// "objects[*].label"; "[*]" is every element of an array), flattened in order. Values are checked
// against the field's type (an integer field never truncates 3.5). A path given a json_box
// convention (xyxy, COCO's xywh, YOLO's cxcywh) reaches rows of 4 numbers and the field holds them
// as xyxy, ready for boxes<> to follow the crop.
// Errors: invalid JSON (depth 64, strict), a missing key, a "[*]" on a non-array, a non-number, a
// value that does not fit, a box count not a multiple of 4: a format_error naming the file, the
// sample, the member and the path, raised when the stage runs (on_error::skip skips the sample);
// a path that does not parse, or an Out field without exactly one path, is a usage_error at
// construction. Every rule and an example: docs/readers.md.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/json.hpp"

namespace sluice {

enum class json_box : std::uint8_t { none, xyxy, xywh, cxcywh };

// One output field: its name, the path to its numbers, and (for boxes) the stored convention.
struct json_path {
  std::string field;
  std::string path;
  json_box box = json_box::none;
};

namespace detail {

// A parsed path: keys and "every element" steps.
struct json_step {
  bool each = false;
  std::string key;
};

inline std::vector<json_step> parse_json_path(const std::string& path, std::string_view who) {
  auto bad = [&](const std::string& why) -> std::vector<json_step> {
    throw usage_error("sluice: " + std::string(who) + ": path '" + path + "' " + why +
                      " (keys joined by '.', \"[*]\" after a key for every element of its array)");
  };
  std::vector<json_step> steps;
  if (path.empty()) return bad("is empty");
  std::size_t p = 0;
  bool first = true;
  while (p <= path.size()) {
    const std::size_t end = std::min(path.find('.', p), path.size());
    std::string_view part(path.data() + p, end - p);
    const std::size_t br = std::min(part.find('['), part.size());
    const std::string_view key = part.substr(0, br);
    if (key.empty() && !(first && br == 0 && br < part.size())) return bad("has an empty key");
    if (!key.empty()) steps.push_back({false, std::string(key)});
    std::string_view rest = part.substr(br);
    while (!rest.empty()) {
      if (rest.substr(0, 3) != "[*]") return bad("has a bracket other than \"[*]\"");
      steps.push_back({true, {}});
      rest.remove_prefix(3);
    }
    first = false;
    if (end == path.size()) break;
    p = end + 1;
    if (p == path.size()) return bad("ends with '.'");
  }
  return steps;
}

inline std::string json_where(const std::vector<json_step>& steps, std::size_t upto,
                              const std::vector<std::size_t>& index) {
  std::string s;
  std::size_t e = 0;
  for (std::size_t k = 0; k < upto && k < steps.size(); ++k) {
    if (steps[k].each) s += "[" + (e < index.size() ? std::to_string(index[e++]) : std::string("*")) + "]";
    else s += (s.empty() ? "" : ".") + steps[k].key;
  }
  return s.empty() ? "the top level" : s;
}

// Walks `v` along steps[k...], calling leaf(value, where-text) for each value reached.
template <class Leaf>
void json_walk(const io::json_value& v, const std::vector<json_step>& steps, std::size_t k,
               std::vector<std::size_t>& index, Leaf&& leaf) {
  if (k == steps.size()) {
    leaf(v, index);
    return;
  }
  if (steps[k].each) {
    if (!v.is_array())
      throw std::invalid_argument(json_where(steps, k, index) + " is " + io::json_value::kind_name(v.type()) +
                                  ", not an array (\"[*]\")");
    const auto& items = v.items();
    for (std::size_t i = 0; i < items.size(); ++i) {
      index.push_back(i);
      json_walk(items[i], steps, k + 1, index, leaf);
      index.pop_back();
    }
    return;
  }
  const io::json_value* next = v.find(steps[k].key);
  if (next == nullptr)
    throw std::invalid_argument(json_where(steps, k + 1, index) + " is missing" +
                                (v.is_object() ? "" : std::string(" (") + json_where(steps, k, index) + " is " +
                                                          io::json_value::kind_name(v.type()) + ", not an object)"));
  json_walk(*next, steps, k + 1, index, leaf);
}

// Appends the numbers of `v` (a number, a boolean, or arrays of them) as T to `out`; `where()`
// names the value in an error (called only then: no string is built on the way to a good value).
template <class T, class Where>
void json_numbers(const io::json_value& v, const Where& where, std::vector<T>& out) {
  if (v.is_array()) {
    for (const auto& x : v.items()) json_numbers<T>(x, where, out);
    return;
  }
  double d = 0;
  std::int64_t i = 0;
  bool integral = false;
  if (v.is_bool()) {
    i = v.as_bool("", "") ? 1 : 0, d = static_cast<double>(i), integral = true;
  } else if (v.is_int()) {
    i = v.as_int("", ""), d = static_cast<double>(i), integral = true;
  } else if (v.is_number()) {
    d = v.as_double("", "");
    if (std::isfinite(d) && std::floor(d) == d && std::abs(d) < 9.0e18) i = static_cast<std::int64_t>(d), integral = true;
  } else {
    throw std::invalid_argument(where() + " holds " + io::json_value::kind_name(v.type()) + ", not a number");
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(d) || std::abs(d) > static_cast<double>(std::numeric_limits<T>::max()))
      throw std::invalid_argument(where() + " holds " + std::to_string(d) + ", not a finite " + std::string(dtype_name(dtype_of<T>)));
    out.push_back(static_cast<T>(d));
  } else {
    using L = std::numeric_limits<T>;
    if (!integral)
      throw std::invalid_argument(where() + " holds " + std::to_string(d) + ", not an integer (the field is " +
                                  std::string(dtype_name(dtype_of<T>)) + ")");
    bool fits = false;
    if constexpr (std::is_signed_v<T>)
      fits = i >= static_cast<std::int64_t>(L::min()) && i <= static_cast<std::int64_t>(L::max());
    else
      fits = i >= 0 && static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(L::max());
    if (!fits)
      throw std::invalid_argument(where() + " holds " + std::to_string(i) + ", outside the field's type " +
                                  std::string(dtype_name(dtype_of<T>)));
    out.push_back(static_cast<T>(i));
  }
}

template <class T>
void json_box_to_xyxy(json_box b, std::vector<T>& v, std::size_t from) {
  for (std::size_t r = from; r + 4 <= v.size(); r += 4) {
    T* x = v.data() + r;
    if (b == json_box::xywh) x[2] += x[0], x[3] += x[1];
    else if (b == json_box::cxcywh) {
      const T cx = x[0], cy = x[1], w = x[2], h = x[3];
      x[0] = cx - w / 2, x[1] = cy - h / 2, x[2] = cx + w / 2, x[3] = cy + h / 2;
    }
  }
}

}  // namespace detail

// The sample json_fields hands on: the input's fields, and Out... filled from its JSON member.
template <fixed_string Member, field_sample Inner, class... Out>
struct json_fields_sample {
  using inner_schema = typename Inner::schema_type;
  template <class S>
  struct add;
  template <class... F>
  struct add<schema<F...>> {
    using type = schema<F..., Out...>;
  };
  using schema_type = typename add<inner_schema>::type;
  static constexpr std::size_t outs = sizeof...(Out);
  static constexpr std::array<std::string_view, outs> out_names{Out::name.view()...};

  std::uint64_t id = 0;
  std::string_view origin;
  Inner inner;
  std::shared_ptr<const std::vector<std::byte>> values_owner;  // every Out field's bytes
  std::array<std::span<const std::byte>, outs> values{};

  template <fixed_string N>
  static constexpr int out_index() {
    int k = 0, found = -1;
    ((found = found < 0 && Out::name == N ? k : found, ++k), ...);
    return found;
  }

  template <fixed_string N>
  [[nodiscard]] std::size_t size_of() const {
    if constexpr (constexpr int k = out_index<N>(); k >= 0) return values[k].size();
    else return inner.template size_of<N>();
  }
  template <fixed_string N>
  void write(std::span<std::byte> dst, const sample_context& ctx) const {
    if constexpr (constexpr int k = out_index<N>(); k >= 0) {
      if (!values[k].empty()) std::memcpy(dst.data(), values[k].data(), values[k].size());
    } else {
      inner.template write<N>(dst, ctx);
    }
  }
  template <fixed_string N>
    requires(out_index<N>() >= 0 || requires(const Inner& s) { s.template bytes_of<N>(); })
  [[nodiscard]] std::span<const std::byte> bytes_of() const {
    if constexpr (constexpr int k = out_index<N>(); k >= 0) return values[k];
    else return inner.template bytes_of<N>();
  }
  template <fixed_string N>
    requires(out_index<N>() < 0 && requires(const Inner& s) { s.template geometry_of<N>(); })
  [[nodiscard]] field_geometry geometry_of() const {
    return inner.template geometry_of<N>();
  }
};

template <fixed_string Member, class... Out>
class json_fields {
  static_assert(sizeof...(Out) >= 1, "sluice: json_fields<Member, Out...>: name at least one output field");
  static_assert(((Out::kind == extent::variable) && ...),
                "sluice: json_fields: an output field is variable (a sample holds as many values as its path reaches)");

 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "json_fields";
  static constexpr std::array<std::string_view, sizeof...(Out)> out_names{Out::name.view()...};
  static constexpr std::array<bool, sizeof...(Out)> out_float{std::is_floating_point_v<typename Out::value_type>...};

  json_fields(std::initializer_list<json_path> paths) : json_fields(std::vector<json_path>(paths)) {}
  explicit json_fields(std::vector<json_path> paths) {
    for (auto& p : paths) {
      std::size_t k = 0;
      while (k < out_names.size() && out_names[k] != p.field) ++k;
      if (k == out_names.size())
        throw usage_error("sluice: json_fields: a path is given for '" + p.field + "', which is not an output field");
      if (!steps_[k].empty()) throw usage_error("sluice: json_fields: field '" + p.field + "' is given two paths");
      if (p.box != json_box::none && !out_float[k])
        throw usage_error("sluice: json_fields: field '" + p.field + "' holds integers; a box convention needs a float field");
      steps_[k] = detail::parse_json_path(p.path, "json_fields");
      paths_[k] = p.path;
      box_[k] = p.box;
    }
    for (std::size_t k = 0; k < out_names.size(); ++k)
      if (steps_[k].empty()) throw usage_error("sluice: json_fields: output field '" + std::string(out_names[k]) + "' has no path");
  }

  template <field_sample S>
  json_fields_sample<Member, S, Out...> operator()(S s, const sample_context& ctx) const {
    json_fields_sample<Member, S, Out...> out{s.id, s.origin, std::move(s), {}, {}};
    const std::string member = std::string(Member.view());
    const std::string file(out.origin);
    std::span<const std::byte> text;
    std::vector<std::byte> buf;
    if constexpr (requires { out.inner.template bytes_of<Member>(); }) {
      text = out.inner.template bytes_of<Member>();
    } else {
      buf.resize(out.inner.template size_of<Member>());
      out.inner.template write<Member>(buf, ctx);
      text = buf;
    }
    io::json_value doc;
    try {
      doc = io::parse_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), file);
    } catch (const format_error& e) {
      throw format_error(file, {.record = out.id},
                         "field '" + member + "'" +
                             (e.offset() != file_position::npos ? ", byte " + std::to_string(e.offset()) : std::string()) +
                             ": " + e.cause());
    }
    // Each field's values, then all of them in one buffer the sample owns.
    std::array<std::vector<std::byte>, sizeof...(Out)> parts;
    std::size_t k = 0;
    auto fill = [&]<class F>() {
      using T = typename F::value_type;
      std::vector<T> v;
      std::vector<std::size_t> index;
      try {
        detail::json_walk(doc, steps_[k], 0, index, [&](const io::json_value& x, const std::vector<std::size_t>& at) {
          detail::json_numbers<T>(x, [&] { return detail::json_where(steps_[k], steps_[k].size(), at); }, v);
        });
        if (box_[k] != json_box::none) {
          if (v.size() % 4 != 0)
            throw std::invalid_argument("holds " + std::to_string(v.size()) + " numbers, not rows of 4 (a box each)");
          if constexpr (std::is_floating_point_v<T>) detail::json_box_to_xyxy(box_[k], v, 0);
        }
      } catch (const std::invalid_argument& e) {
        throw format_error(file, {.record = out.id},
                           "field '" + member + "', path '" + paths_[k] + "' (field '" + std::string(F::name.view()) +
                               "'): " + e.what());
      }
      parts[k].resize(v.size() * sizeof(T));
      if (!v.empty()) std::memcpy(parts[k].data(), v.data(), parts[k].size());
      ++k;
    };
    (fill.template operator()<Out>(), ...);
    auto all = std::make_shared<std::vector<std::byte>>();
    std::size_t total = 0;
    for (const auto& p : parts) total += p.size() + 8;
    all->resize(total);
    std::size_t at = 0;
    std::array<std::pair<std::size_t, std::size_t>, sizeof...(Out)> where{};
    for (std::size_t j = 0; j < parts.size(); ++j) {
      at = (at + 7) / 8 * 8;  // each field 8-byte aligned
      if (!parts[j].empty()) std::memcpy(all->data() + at, parts[j].data(), parts[j].size());
      where[j] = {at, parts[j].size()};
      at += parts[j].size();
    }
    for (std::size_t j = 0; j < parts.size(); ++j) out.values[j] = std::span<const std::byte>(all->data() + where[j].first, where[j].second);
    out.values_owner = std::move(all);
    return out;
  }

 private:
  std::array<std::vector<detail::json_step>, sizeof...(Out)> steps_{};
  std::array<std::string, sizeof...(Out)> paths_{};
  std::array<json_box, sizeof...(Out)> box_{};
};

}  // namespace sluice
