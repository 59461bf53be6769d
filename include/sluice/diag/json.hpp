// sluice/diag/json.hpp — a small streaming JSON writer for reports and traces.
//
// Diagnostics must not pull in a JSON library, and they only ever write. `json_writer` appends to a
// std::string: objects, arrays, keys and scalar values, with commas placed for you and strings
// escaped (control characters as \u00XX; bytes >= 0x80 pass through, so UTF-8 stays UTF-8).
// Non-finite doubles become null (JSON has no NaN). Doubles are written in their shortest form
// that reads back exactly (std::to_chars).
//
//   sluice::diag::json_writer w;
//   w.begin_object().key("epoch").value(3).key("loss").value(0.41).end_object();
//   std::string text = std::move(w).str();
//
// Misuse (a value where a key is due, an unbalanced end) is a programming error caught by assert.
#pragma once

#include <sys/stat.h>

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sluice/core/error.hpp"

namespace sluice::diag {

class json_writer {
 public:
  json_writer& begin_object() { open('{', true); return *this; }
  json_writer& end_object() { close('}'); return *this; }
  json_writer& begin_array() { open('[', false); return *this; }
  json_writer& end_array() { close(']'); return *this; }

  json_writer& key(std::string_view k) {
    assert(!stack_.empty() && stack_.back().is_object && !key_pending_);
    comma();
    quote(k);
    out_ += ':';
    key_pending_ = true;
    return *this;
  }
  json_writer& value(std::string_view s) { before_value(); quote(s); return *this; }
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(const std::string& s) { return value(std::string_view(s)); }
  json_writer& value(bool b) { before_value(); out_ += b ? "true" : "false"; return *this; }
  json_writer& null() { before_value(); out_ += "null"; return *this; }
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
  json_writer& value(T v) {
    before_value();
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) { out_ += "null"; return *this; }
    }
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
    return *this;
  }
  // Writes pre-formatted JSON (e.g. a nested document) as one value.
  json_writer& raw(std::string_view json) { before_value(); out_ += json; return *this; }

  // key + value in one call.
  template <class T>
  json_writer& field(std::string_view k, const T& v) { key(k); return value(v); }
  // An array of numbers.
  template <class Range>
  json_writer& array(std::string_view k, const Range& r) {
    key(k).begin_array();
    for (const auto& x : r) value(x);
    return end_array();
  }

  [[nodiscard]] const std::string& str() const& noexcept { return out_; }
  [[nodiscard]] std::string str() && noexcept { return std::move(out_); }
  [[nodiscard]] bool complete() const noexcept { return stack_.empty() && !out_.empty(); }

 private:
  struct level { bool is_object; bool first; };
  void open(char c, bool is_object) {
    before_value();
    out_ += c;
    stack_.push_back({is_object, true});
  }
  void close(char c) {
    assert(!stack_.empty() && !key_pending_);
    stack_.pop_back();
    out_ += c;
  }
  void comma() {
    if (stack_.empty()) return;
    if (!stack_.back().first) out_ += ',';
    stack_.back().first = false;
  }
  void before_value() {
    if (key_pending_) { key_pending_ = false; return; }
    assert(stack_.empty() || !stack_.back().is_object);
    comma();
  }
  void quote(std::string_view s) {
    out_ += '"';
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            const char* hex = "0123456789abcdef";
            out_ += "\\u00";
            out_ += hex[c >> 4];
            out_ += hex[c & 15];
          } else {
            out_ += ch;
          }
      }
    }
    out_ += '"';
  }
  std::string out_;
  std::vector<level> stack_;
  bool key_pending_ = false;
};

// Writes text to a file, replacing it; throws io_error when the file cannot be written.
inline void write_text_file(const std::string& path, std::string_view text) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))  // a FIFO would block the open
    throw io_error(path, "will not write a report to something that is not a regular file");
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw io_error(path, "cannot write", errno);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!f) throw io_error(path, "cannot write", errno);
}

}  // namespace sluice::diag
