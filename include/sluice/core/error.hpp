// sluice/core/error.hpp — the exceptions sluice throws, and why each exists.
//
// Every failure a user can meet names where it happened in words they can act on:
//   io_error      — the operating system refused (open, mmap, read); names the path and errno text.
//   format_error  — a file is not what its format says; names the file, the record or byte offset,
//                   and the cause. Parsers check every length against the file before trusting it.
//   stage_error   — a stage threw while processing a sample inside the pipeline; names the stage,
//                   the sample id, and carries the original exception as the nested cause.
//   usage_error   — the pipeline was used in a way that cannot work (e.g. holding more batches
//                   than the ring has slots); says what to do instead.
// All derive from sluice::error (a std::runtime_error), so `catch (const sluice::error&)` catches
// everything sluice raises on purpose.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class usage_error : public error {
 public:
  using error::error;
};

// The trainer's wait for a batch was given up because the interrupt check it installed said so
// (loader::set_interrupt: a Python binding checks for Ctrl-C). The epoch is not cancelled: asking
// for the next batch again waits for the same batch.
class interrupted : public error {
 public:
  interrupted() : error("sluice: the wait for a batch was interrupted") {}
};

class io_error : public error {
 public:
  io_error(std::string path, std::string_view what, int err)
      : error("sluice: " + std::string(what) + " '" + path + "': " + std::strerror(err)),
        path_(std::move(path)), errno_(err) {}
  io_error(std::string path, std::string_view what)
      : error("sluice: " + std::string(what) + " '" + path + "'"), path_(std::move(path)) {}
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] int error_number() const noexcept { return errno_; }

 private:
  std::string path_;
  int errno_ = 0;
};

// Where in a file a format error was found. `record` is the record index when known, else
// npos; `offset` is the byte offset when known, else npos.
struct file_position {
  static constexpr std::uint64_t npos = ~std::uint64_t{0};
  std::uint64_t record = npos;
  std::uint64_t offset = npos;
};

class format_error : public error {
 public:
  format_error(std::string file, file_position where, std::string cause)
      : error(compose(file, where, cause)), file_(std::move(file)), where_(where),
        cause_(std::move(cause)) {}
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] std::uint64_t record() const noexcept { return where_.record; }
  [[nodiscard]] std::uint64_t offset() const noexcept { return where_.offset; }
  [[nodiscard]] const std::string& cause() const noexcept { return cause_; }

 private:
  static std::string compose(const std::string& file, file_position w, const std::string& cause) {
    std::string s = "sluice: bad file '" + file + "'";
    if (w.record != file_position::npos) s += ", record " + std::to_string(w.record);
    if (w.offset != file_position::npos) s += ", byte offset " + std::to_string(w.offset);
    s += ": " + cause;
    return s;
  }
  std::string file_;
  file_position where_;
  std::string cause_;
};

// Thrown by the pipeline at the consumer when a stage failed on a sample. The original exception
// is kept as the nested exception (std::rethrow_if_nested reaches it) and its text is part of
// what().
class stage_error : public error, public std::nested_exception {
 public:
  stage_error(std::string stage, std::uint64_t sample_id, std::string cause)
      : error("sluice: stage '" + stage + "' failed on sample " + std::to_string(sample_id) + ": " +
              cause),
        stage_(std::move(stage)), sample_id_(sample_id), cause_(std::move(cause)) {}
  [[nodiscard]] const std::string& stage() const noexcept { return stage_; }
  [[nodiscard]] std::uint64_t sample_id() const noexcept { return sample_id_; }
  [[nodiscard]] const std::string& cause() const noexcept { return cause_; }

 private:
  std::string stage_;
  std::uint64_t sample_id_;
  std::string cause_;
};

namespace detail {
// Text of the exception currently being handled, for wrapping it in a stage_error.
inline std::string current_exception_text() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Wraps the exception being handled into a stage_error naming the stage and the sample. One that
// is already a stage_error (a deferred stage, e.g. decode inside collate, named itself) passes
// through unchanged, so the stage that failed is the one reported.
[[noreturn]] inline void throw_stage_error(std::string_view stage, std::uint64_t id) {
  try {
    throw;
  } catch (const stage_error&) {
    throw;
  } catch (...) {
  }
  std::throw_with_nested(stage_error(std::string(stage), id, current_exception_text()));
}
}  // namespace detail

}  // namespace sluice
