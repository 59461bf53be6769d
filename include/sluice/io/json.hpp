// sluice/io/json.hpp — a small JSON reader for the index files of other formats (MDS index.json).
//
// sluice reads JSON only where another tool wrote an index, so this is a strict, small DOM parser
// (RFC 8259), not a library: `parse_json(text, file)` returns a json_value tree or throws a
// format_error naming the file, the byte offset and what was expected there. Numbers keep their
// exact integer value when they are integers that fit int64 (`is_int()`), else a double. Strings
// are unescaped to UTF-8 (\uXXXX surrogate pairs included; a lone surrogate is an error). Nesting
// deeper than 64 levels and bytes after the value are refused. Duplicate keys are kept in order;
// `find` returns the first.
//
//   const auto index = sluice::io::parse_json(text, "data/index.json");
//   for (const auto& shard : index.at("shards", "data/index.json").items()) ...
//
// The accessors that take a file name (`at`, `as_string`, ...) throw format_error naming it and the
// key when a value is missing or of another type, so a reader states what was wrong in one line.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice::io {

class json_value {
 public:
  using array = std::vector<json_value>;
  using object = std::vector<std::pair<std::string, json_value>>;
  enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };

  json_value() = default;
  explicit json_value(bool b) : v_(b) {}
  explicit json_value(std::int64_t i) : v_(i) {}
  explicit json_value(double d) : v_(d) {}
  explicit json_value(std::string s) : v_(std::move(s)) {}
  explicit json_value(array a) : v_(std::make_shared<array>(std::move(a))) {}
  explicit json_value(object o) : v_(std::make_shared<object>(std::move(o))) {}

  [[nodiscard]] kind type() const noexcept { return static_cast<kind>(v_.index()); }
  [[nodiscard]] bool is_null() const noexcept { return type() == kind::null; }
  [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
  [[nodiscard]] bool is_int() const noexcept { return type() == kind::integer; }
  [[nodiscard]] bool is_number() const noexcept { return is_int() || type() == kind::number; }
  [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
  [[nodiscard]] bool is_array() const noexcept { return type() == kind::array; }
  [[nodiscard]] bool is_object() const noexcept { return type() == kind::object; }

  // The member `key` of an object, or nullptr (also when this is not an object).
  [[nodiscard]] const json_value* find(std::string_view key) const noexcept {
    if (!is_object()) return nullptr;
    for (const auto& [k, v] : *std::get<6>(v_))
      if (k == key) return &v;
    return nullptr;
  }
  // The elements of an array (empty for anything else).
  [[nodiscard]] const array& items() const noexcept {
    static const array none;
    return is_array() ? *std::get<5>(v_) : none;
  }
  [[nodiscard]] const object& members() const noexcept {
    static const object none;
    return is_object() ? *std::get<6>(v_) : none;
  }

  // Checked access for readers: a format_error naming `file` and `what` (e.g. "shards[3].samples").
  [[nodiscard]] const json_value& at(std::string_view key, const std::string& file, std::string_view what = {}) const {
    if (const json_value* v = find(key)) return *v;
    throw format_error(file, {}, std::string(what.empty() ? "" : std::string(what) + ": ") + "no \"" +
                                     std::string(key) + "\"" + (is_object() ? "" : " (not a JSON object)"));
  }
  [[nodiscard]] const std::string& as_string(const std::string& file, std::string_view what) const {
    if (!is_string()) wrong(file, what, "a string");
    return std::get<4>(v_);
  }
  [[nodiscard]] std::int64_t as_int(const std::string& file, std::string_view what) const {
    if (!is_int()) wrong(file, what, "an integer");
    return std::get<2>(v_);
  }
  [[nodiscard]] double as_double(const std::string& file, std::string_view what) const {
    if (is_int()) return static_cast<double>(std::get<2>(v_));
    if (type() != kind::number) wrong(file, what, "a number");
    return std::get<3>(v_);
  }
  [[nodiscard]] bool as_bool(const std::string& file, std::string_view what) const {
    if (!is_bool()) wrong(file, what, "true or false");
    return std::get<1>(v_);
  }
  [[nodiscard]] const array& as_array(const std::string& file, std::string_view what) const {
    if (!is_array()) wrong(file, what, "an array");
    return *std::get<5>(v_);
  }

  [[nodiscard]] static const char* kind_name(kind k) noexcept {
    constexpr const char* names[] = {"null", "a boolean", "an integer", "a number", "a string", "an array", "an object"};
    return names[static_cast<int>(k)];
  }

 private:
  [[noreturn]] void wrong(const std::string& file, std::string_view what, const char* want) const {
    throw format_error(file, {}, std::string(what) + " is " + kind_name(type()) + ", not " + want);
  }
  // Arrays and objects are shared so a json_value copies cheaply; the tree is immutable once parsed.
  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::shared_ptr<array>, std::shared_ptr<object>> v_;
};

namespace detail {

class json_parser {
 public:
  json_parser(std::string_view text, const std::string& file, std::span<const std::string_view> drop = {},
              std::span<const std::string_view> raw = {})
      : s_(text), file_(file), drop_(drop), raw_(raw) {}

  json_value document() {
    json_value v = value(0);
    space();
    if (p_ != s_.size()) fail("trailing bytes after the JSON value");
    return v;
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void fail(const std::string& why) const {
    throw format_error(file_, {.offset = p_}, "not valid JSON: " + why);
  }
  void space() noexcept {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }
  bool eat(char c) noexcept {
    space();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* where) {
    if (!eat(c)) fail(std::string("expected '") + c + "' " + where);
  }
  bool word(std::string_view w) noexcept {
    if (s_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  json_value value(int depth) {
    if (depth >= max_depth) fail("nested deeper than " + std::to_string(max_depth) + " levels");
    space();
    if (p_ >= s_.size()) fail("unexpected end of the text, a value expected");
    const char c = s_[p_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return json_value(string());
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    if (word("true")) return json_value(true);
    if (word("false")) return json_value(false);
    if (word("null")) return json_value();
    fail(std::string("unexpected character '") + (c >= 0x20 && c < 0x7f ? std::string(1, c) : "?") + "'");
  }

  json_value object(int depth) {
    ++p_;  // '{'
    json_value::object out;
    if (eat('}')) return json_value(std::move(out));
    while (true) {
      space();
      if (p_ >= s_.size() || s_[p_] != '"') fail("expected a string key in an object");
      std::string k = string();
      expect(':', "after an object key");
      space();
      const std::size_t start = p_;
      json_value v = value(depth + 1);  // checked whole, kept unless dropped, or kept as its text
      if (std::find(raw_.begin(), raw_.end(), std::string_view(k)) != raw_.end())
        v = json_value(json_value::array{json_value(static_cast<std::int64_t>(start)),
                                         json_value(static_cast<std::int64_t>(p_ - start))});
      if (std::find(drop_.begin(), drop_.end(), std::string_view(k)) == drop_.end()) out.emplace_back(std::move(k), std::move(v));
      if (eat('}')) return json_value(std::move(out));
      expect(',', "or '}' in an object");
    }
  }

  json_value array(int depth) {
    ++p_;  // '['
    json_value::array out;
    if (eat(']')) return json_value(std::move(out));
    while (true) {
      out.push_back(value(depth + 1));
      if (eat(']')) return json_value(std::move(out));
      expect(',', "or ']' in an array");
    }
  }

  json_value number() {
    const std::size_t start = p_;
    if (s_[p_] == '-') ++p_;
    auto digits = [&] {
      const std::size_t d = p_;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      return p_ - d;
    };
    const std::size_t int_start = p_;
    if (digits() == 0) fail("a digit expected in a number");
    if (s_[int_start] == '0' && p_ - int_start > 1) {
      p_ = start;
      fail("a number with a leading zero");
    }
    bool integral = true;
    if (p_ < s_.size() && s_[p_] == '.') {
      ++p_;
      integral = false;
      if (digits() == 0) fail("a digit expected after '.' in a number");
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      ++p_;
      integral = false;
      if (p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      if (digits() == 0) fail("a digit expected in a number's exponent");
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + p_;
    if (integral) {
      std::int64_t i = 0;
      auto [q, ec] = std::from_chars(b, e, i);
      if (ec == std::errc{} && q == e) return json_value(i);
    }
    double d = 0;
    auto [q, ec] = std::from_chars(b, e, d);
    if (ec == std::errc::result_out_of_range) {
      p_ = start;
      fail("a number out of the range of a double");
    }
    if (ec != std::errc{} || q != e) {
      p_ = start;
      fail("a malformed number");
    }
    return json_value(d);
  }

  unsigned hex4() {
    if (s_.size() - p_ < 4) fail("a \\u escape needs 4 hex digits");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("a \\u escape needs 4 hex digits");
    }
    return v;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    ++p_;  // '"'
    std::string out;
    while (true) {
      if (p_ >= s_.size()) fail("a string is not closed");
      const char c = s_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --p_;
        fail("a control character inside a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) fail("a string ends in an escape");
      switch (s_[p_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail("a lone low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (!word("\\u")) fail("a high surrogate not followed by a low one");
            const unsigned lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("a high surrogate not followed by a low one");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          utf8(out, cp);
          break;
        }
        default:
          --p_;
          fail("an unknown escape in a string");
      }
    }
  }

  std::string_view s_;
  const std::string& file_;
  std::span<const std::string_view> drop_, raw_;
  std::size_t p_ = 0;
};

}  // namespace detail

// Parses a whole JSON text; a format_error names `file` and the byte offset of the problem.
[[nodiscard]] inline json_value parse_json(std::string_view text, const std::string& file) {
  return detail::json_parser(text, file).document();
}
// The same, with the members named in `drop` (at any depth) checked but not kept: a reader that
// needs a few keys of a large file (a COCO file's polygons) holds one such value at a time.
[[nodiscard]] inline json_value parse_json(std::string_view text, const std::string& file,
                                           std::span<const std::string_view> drop) {
  return detail::json_parser(text, file, drop).document();
}
// The same, with the members named in `raw` (at any depth) checked whole and kept as where their
// JSON text lies in `text`: an array [offset, length] (parse_json that part when it is wanted). A
// large value read one at a time later (a COCO file's polygons) then costs two numbers until it is
// read, not a tree of every number at once.
[[nodiscard]] inline json_value parse_json(std::string_view text, const std::string& file,
                                           std::span<const std::string_view> drop,
                                           std::span<const std::string_view> raw) {
  return detail::json_parser(text, file, drop, raw).document();
}

}  // namespace sluice::io
