// Helpers shared by sluice's tests: temporary directories that clean up after themselves,
// small file writers, and the texts of sluice's errors.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"

namespace sluice_test {

// Runs `f` and returns the format_error it must throw; any other outcome fails the test case
// (no exception: a std::logic_error, which the test framework reports).
template <class F>
sluice::format_error expect_format_error(F&& f) {
  try {
    f();
  } catch (const sluice::format_error& e) {
    return e;
  }
  throw std::logic_error("expected a sluice::format_error, none was thrown");
}

// An error's text and every nested cause's, joined by " | " (what rethrow_if_nested reaches).
inline std::string nested_text(const std::exception& e) {
  std::string t = e.what();
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    t += " | " + nested_text(inner);
  }
  return t;
}

// The innermost cause's text (what a trainer reads at the end of the nested chain).
inline std::string innermost_text(const std::exception& e) {
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    return innermost_text(inner);
  }
  return e.what();
}

// Ends the running test case as Skipped: ctest runs each case alone and maps exit 77 to
// "Skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). For a missing input, tool or device —
// never for a failure.
[[noreturn]] inline void skip(const std::string& why) {
  std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
  std::fflush(nullptr);
  std::_Exit(77);
}

// Records of `record_bytes` bytes held in memory: record i's byte j is (i * 31 + j) & 0xff, its
// label i % 10. A record_reader for pipeline tests that need no file.
struct mem_reader {
  using reader_concept = sluice::reader_tag;
  std::vector<std::byte> data;
  std::size_t rb = 16;
  mem_reader(std::size_t n, std::size_t record_bytes) : data(n * record_bytes), rb(record_bytes) {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i / rb * 31 + i % rb) & 0xff);
  }
  std::size_t size() const { return rb == 0 ? 0 : data.size() / rb; }
  std::span<const std::byte> record(std::size_t i) const { return {data.data() + i * rb, rb}; }
  std::int64_t label(std::size_t i) const { return static_cast<std::int64_t>(i % 10); }
  std::string_view path() const { return "memory"; }
};

// A string's bytes as a span.
inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class temp_dir {
 public:
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, std::span<const std::byte> data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}
inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}
inline std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = static_cast<std::byte>(c[i]);
  return out;
}
inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(g() & 0xff);
  return v;
}

}  // namespace sluice_test
