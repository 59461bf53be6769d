// sluice/io/tokens.hpp — language-model token data: fixed windows over one flat token file, or
// documents over a token file plus an offsets file. Both are fields_readers (stage/read.hpp):
// fields(i) is O(1), allocates nothing, and hands out views into the mapping (zero copy).
//
// The token file is what GPT-2-style preparation scripts write with numpy `tofile`: token ids
// back to back, little-endian, uint16 or uint32, no header. token_windows<T> serves next-token
// windows ("input", and "target" shifted by one) at a stride; token_documents<T> serves one
// sample a document ("tokens"), the offsets file holding n_docs + 1 little-endian uint64
// (write_token_documents writes such a pair).
// Errors: the files' sizes and the offsets (a whole number, starting at 0, never decreasing,
// ending at the token count) are checked at open, each a format_error naming the file, the record
// and the cause; a file that is not regular is an io_error found before any open. With `.vocab`,
// a token at or above it is a format_error naming the file, the record and the token's position,
// checked per sample (lazy, the default) or over the whole file at open.
// Threads: after construction every member is safe to call concurrently. Every rule:
// docs/tokens.md.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::io {

enum class vocab_check : std::uint8_t { lazy, open };

struct token_windows_options {
  std::size_t length = 1024;  // L: tokens in "input" (and in "target")
  std::size_t stride = 0;     // tokens between window starts; 0 = L (windows do not overlap)
  std::uint64_t vocab = 0;    // V: every token must be < V; 0 = no check
  io::vocab_check vocab_check = io::vocab_check::lazy;
  map_options map{.advice = access::automatic};
};

struct token_documents_options {
  std::uint64_t vocab = 0;  // V: every token must be < V; 0 = no check
  io::vocab_check vocab_check = io::vocab_check::lazy;
  map_options map{.advice = access::automatic};
};

namespace detail {

template <class T>
concept token_type = std::is_same_v<T, std::uint16_t> || std::is_same_v<T, std::uint32_t>;

template <class T>
inline constexpr const char* token_type_name = std::is_same_v<T, std::uint16_t> ? "uint16" : "uint32";

// A file numpy.save wrote where a flat file is read: the header's bytes would be taken as the
// first values and every value after them moved. `holds` says what the file should be and
// `write` how to make one from the .npy.
inline void refuse_npy(const mapped_file& f, const std::string& holds, const std::string& write) {
  if (const auto h = npy_header_of(f))
    throw format_error(f.path(), {.offset = 0}, npy_misread(*h, holds) + "; write the values alone: " + write);
}

// Tokens of the other width read as these (a headerless file cannot say which it holds), from
// the first 8192 values: uint32 tokens read as uint16 put their high halves, 0 to 7 for any
// vocabulary under 2^19, at every second position; uint16 tokens read as uint32 pair two ids
// into values past 2^24, more than any tokenizer's vocabulary. Either is a format_error naming
// the width to read with.
template <class T>
void check_token_width(const mapped_file& f, std::size_t n) {
  const std::size_t m = std::min<std::size_t>(n, 8192) & ~std::size_t{1};
  if (m < 64) return;  // too few to tell
  std::size_t odd_small = 0, even_large = 0, huge = 0;
  for (std::size_t k = 0; k < m; ++k) {
    T v;
    std::memcpy(&v, f.data() + k * sizeof(T), sizeof(T));
    if (k % 2 == 1) odd_small += v < 8;
    else even_large += v >= 8;
    if constexpr (sizeof(T) == 4) huge += v >= (T{1} << 24);
  }
  const std::string first = "in the first " + std::to_string(m) + " tokens";
  if constexpr (sizeof(T) == 2) {
    if (odd_small == m / 2 && even_large >= m / 8)
      throw format_error(f.path(), {.offset = 0},
                         "every second uint16 token " + first + " is below 8, as when uint32 tokens are read as uint16: "
                         "those are their high halves; read the file as uint32 "
                         "(io::token_windows<std::uint32_t>; Python: dtype=\"uint32\")");
  } else {
    if (huge >= m / 2)
      throw format_error(f.path(), {.offset = 0},
                         std::to_string(huge) + " uint32 tokens " + first + " are 2^24 or more, past any vocabulary, "
                         "as when uint16 tokens are read as uint32: read the file as uint16 "
                         "(io::token_windows<std::uint16_t>; Python: dtype=\"uint16\")");
  }
}

// The token file's size must be a whole number of tokens.
template <class T>
std::size_t token_count(const mapped_file& f) {
  refuse_npy(f, std::string("a flat token file (") + token_type_name<T> + ", as ndarray.tofile writes it)",
             std::string("numpy.load(FILE).astype(numpy.") + token_type_name<T> + ").tofile(OUT)");
  if (f.size() % sizeof(T) != 0)
    throw format_error(f.path(), {.record = f.size() / sizeof(T), .offset = f.size() / sizeof(T) * sizeof(T)},
                       "file size " + std::to_string(f.size()) + " bytes is not a whole number of " +
                           token_type_name<T> + " tokens (" + std::to_string(f.size() % sizeof(T)) +
                           " trailing bytes; truncated, or written with another dtype?)");
  const std::size_t n = f.size() / sizeof(T);
  check_token_width<T>(f, n);
  return n;
}

// The position of the first token in [first, first + n) that is >= vocab, or npos.
inline constexpr std::size_t no_token = ~std::size_t{0};
template <class T>
std::size_t find_out_of_vocab(const mapped_file& f, std::size_t first, std::size_t n, std::uint64_t vocab) noexcept {
  const std::byte* p = f.data() + first * sizeof(T);
  for (std::size_t k = 0; k < n; ++k) {
    T v;
    std::memcpy(&v, p + k * sizeof(T), sizeof(T));
    if (v >= vocab) [[unlikely]] return first + k;
  }
  return no_token;
}

template <class T>
[[noreturn]] void throw_out_of_vocab(const mapped_file& f, std::size_t pos, std::uint64_t vocab, std::uint64_t record) {
  T v;
  std::memcpy(&v, f.data() + pos * sizeof(T), sizeof(T));
  throw format_error(f.path(), {.record = record, .offset = pos * sizeof(T)},
                     "token " + std::to_string(v) + " at token position " + std::to_string(pos) +
                         " is outside the vocabulary (vocab = " + std::to_string(vocab) + ")");
}

// Opening an existing FIFO for writing blocks until a reader appears: refuse anything but a
// regular file (or nothing) at a path about to be written.
inline void require_writable_regular(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw_not_regular(path, st.st_mode, "will not write to");
}

inline void write_all(std::ofstream& f, const std::string& path, const void* data, std::size_t n) {
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!f) throw io_error(path, "cannot write");
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
template <class T>
class token_windows {
  static_assert(detail::token_type<T>, "sluice: token_windows<T>: T is std::uint16_t or std::uint32_t");
  static_assert(std::endian::native == std::endian::little,
                "sluice: token files are little-endian; views into them need a little-endian host");

 public:
  using reader_concept = reader_tag;
  using token_type = T;
  using schema_type = schema<field<"input", T>, field<"target", T>>;
  using sample_type = fields_sample<schema_type>;

  explicit token_windows(std::string path, token_windows_options o = {})
      : file_(detail::regular_file_path(std::move(path)), o.map), L_(o.length), stride_(o.stride == 0 ? o.length : o.stride), vocab_(o.vocab),
        lazy_(o.vocab != 0 && o.vocab_check == vocab_check::lazy) {
    if (L_ == 0) throw usage_error("sluice: token_windows: .length must be at least 1");
    n_tokens_ = detail::token_count<T>(file_);
    if (n_tokens_ < L_ + 1)
      throw format_error(file_.path(), {},
                         "the file holds " + std::to_string(n_tokens_) + " " + detail::token_type_name<T> +
                             " tokens, fewer than one window of length + 1 = " + std::to_string(L_ + 1));
    count_ = (n_tokens_ - 1 - L_) / stride_ + 1;
    if (vocab_ != 0 && o.vocab_check == vocab_check::open) {
      const std::size_t pos = detail::find_out_of_vocab<T>(file_, 0, n_tokens_, vocab_);
      if (pos != detail::no_token) detail::throw_out_of_vocab<T>(file_, pos, vocab_, window_of(pos));
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  [[nodiscard]] std::size_t length() const noexcept { return L_; }
  [[nodiscard]] std::size_t stride() const noexcept { return stride_; }
  [[nodiscard]] std::size_t tokens() const noexcept { return n_tokens_; }
  [[nodiscard]] std::size_t start(std::size_t i) const noexcept { return i * stride_; }
  [[nodiscard]] const mapped_file& file() const noexcept { return file_; }

  // Window i: "input" = tokens [i*stride, i*stride + L), "target" = the same shifted by one.
  [[nodiscard]] sample_type fields(std::size_t i) const {
    if (i >= count_) [[unlikely]]
      throw format_error(file_.path(), {.record = i}, "window index past the last window (" + std::to_string(count_) + ")");
    const std::size_t s = i * stride_;
    if (lazy_)
      if (const std::size_t pos = detail::find_out_of_vocab<T>(file_, s, L_ + 1, vocab_); pos != detail::no_token)
        detail::throw_out_of_vocab<T>(file_, pos, vocab_, i);
    sample_type out{.id = i, .origin = file_.path()};
    const std::byte* p = file_.data() + s * sizeof(T);
    out.values[0] = std::span<const std::byte>(p, L_ * sizeof(T));
    out.values[1] = std::span<const std::byte>(p + sizeof(T), L_ * sizeof(T));
    return out;
  }
  // The tokens of window i ("input" and one more), as typed values.
  [[nodiscard]] std::span<const T> window(std::size_t i) const noexcept {
    return {reinterpret_cast<const T*>(file_.data()) + i * stride_, L_ + 1};
  }

 private:
  // The first window that holds token `pos` (the last window when the token is in the tail).
  [[nodiscard]] std::size_t window_of(std::size_t pos) const noexcept {
    const std::size_t w = pos < L_ ? 0 : (pos - L_ + stride_ - 1) / stride_;
    return std::min(w, count_ - 1);
  }
  mapped_file file_;
  std::size_t L_, stride_;
  std::uint64_t vocab_;
  bool lazy_;
  std::size_t n_tokens_ = 0, count_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Writes documents as a token file and an offsets file (n_docs + 1 little-endian uint64), each to
// "<path>.partial" first and renamed into place. `docs`: a range of ranges of T (e.g.
// std::vector<std::vector<std::uint16_t>>).
template <class T, class Docs>
void write_token_documents(const std::string& tokens_path, const std::string& offsets_path, const Docs& docs) {
  static_assert(detail::token_type<T>, "sluice: write_token_documents<T>: T is std::uint16_t or std::uint32_t");
  static_assert(std::endian::native == std::endian::little, "sluice: token files are little-endian");
  const std::string tp = tokens_path + ".partial", op = offsets_path + ".partial";
  detail::require_writable_regular(tp);
  detail::require_writable_regular(op);
  {
    std::ofstream tf(tp, std::ios::binary | std::ios::trunc);
    if (!tf) throw io_error(tp, "cannot create");
    std::ofstream of(op, std::ios::binary | std::ios::trunc);
    if (!of) throw io_error(op, "cannot create");
    std::uint64_t at = 0;
    detail::write_all(of, op, &at, sizeof at);
    for (const auto& d : docs) {
      for (const auto& t : d) {
        static_assert(std::is_convertible_v<decltype(t), T>, "sluice: write_token_documents: tokens must convert to T");
        const T v = static_cast<T>(t);
        detail::write_all(tf, tp, &v, sizeof v);
        ++at;
      }
      detail::write_all(of, op, &at, sizeof at);
    }
    tf.close();
    of.close();
    if (!tf) throw io_error(tp, "cannot write");
    if (!of) throw io_error(op, "cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tp, tokens_path, ec);
  if (ec) throw io_error(tokens_path, "cannot rename the written token file to", ec.value());
  std::filesystem::rename(op, offsets_path, ec);
  if (ec) throw io_error(offsets_path, "cannot rename the written offsets file to", ec.value());
}

template <class T>
class token_documents {
  static_assert(detail::token_type<T>, "sluice: token_documents<T>: T is std::uint16_t or std::uint32_t");
  static_assert(std::endian::native == std::endian::little,
                "sluice: token files are little-endian; views into them need a little-endian host");

 public:
  using reader_concept = reader_tag;
  using token_type = T;
  using schema_type = schema<field<"tokens", T, sluice::variable>>;
  using sample_type = fields_sample<schema_type>;

  token_documents(std::string tokens_path, std::string offsets_path, token_documents_options o = {})
      : tokens_(detail::regular_file_path(std::move(tokens_path)), o.map),
        offsets_(detail::regular_file_path(std::move(offsets_path)), {.advice = access::willneed}),
        vocab_(o.vocab), lazy_(o.vocab != 0 && o.vocab_check == vocab_check::lazy) {
    n_tokens_ = detail::token_count<T>(tokens_);
    const std::string& op = offsets_.path();
    detail::refuse_npy(offsets_, "an offsets file (uint64, as ndarray.tofile writes it)",
                       "numpy.load(FILE).astype(numpy.uint64).tofile(OUT)");
    const std::size_t ob = offsets_.size();
    if (ob % 8 != 0)
      throw format_error(op, {.record = ob / 8, .offset = ob / 8 * 8},
                         "offsets file size " + std::to_string(ob) + " bytes is not a whole number of uint64 offsets");
    if (ob == 0)
      throw format_error(op, {.offset = 0}, "offsets file is empty; it holds n_docs + 1 uint64 offsets, the first 0");
    n_docs_ = ob / 8 - 1;
    std::uint64_t prev = 0;
    for (std::size_t k = 0; k <= n_docs_; ++k) {
      const std::uint64_t v = offset(k);
      // Entry k is where document k starts and document k - 1 ends.
      const std::uint64_t doc = k == 0 ? 0 : k - 1;
      if (k == 0 && v != 0)
        throw format_error(op, {.record = 0, .offset = 0},
                           "offset 0 is " + std::to_string(v) + "; the first offset must be 0");
      if (v > n_tokens_)
        throw format_error(op, {.record = doc, .offset = k * 8},
                           "offset " + std::to_string(k) + " = " + std::to_string(v) + " is past the end of '" +
                               tokens_.path() + "' (" + std::to_string(n_tokens_) + " tokens)");
      if (v < prev)
        throw format_error(op, {.record = doc, .offset = k * 8},
                           "offsets are not monotonic: offset " + std::to_string(k) + " = " + std::to_string(v) +
                               " is less than offset " + std::to_string(k - 1) + " = " + std::to_string(prev) +
                               " (document " + std::to_string(doc) + " would end before it starts)");
      prev = v;
    }
    if (prev != n_tokens_)
      throw format_error(op, {.record = n_docs_ == 0 ? 0 : n_docs_ - 1, .offset = n_docs_ * 8},
                         "the last offset (" + std::to_string(n_docs_) + ") is " + std::to_string(prev) + ", but '" +
                             tokens_.path() + "' holds " + std::to_string(n_tokens_) +
                             " tokens; the last offset must equal the token count");
    if (vocab_ != 0 && o.vocab_check == vocab_check::open)
      for (std::size_t i = 0; i < n_docs_; ++i) check(i);
  }

  [[nodiscard]] std::size_t size() const noexcept { return n_docs_; }
  [[nodiscard]] std::string_view path() const noexcept { return tokens_.path(); }
  [[nodiscard]] std::string_view offsets_path() const noexcept { return offsets_.path(); }
  [[nodiscard]] std::size_t tokens() const noexcept { return n_tokens_; }
  // Document i is tokens [begin(i), end(i)).
  [[nodiscard]] std::uint64_t begin(std::size_t i) const noexcept { return offset(i); }
  [[nodiscard]] std::uint64_t end(std::size_t i) const noexcept { return offset(i + 1); }
  [[nodiscard]] std::size_t length(std::size_t i) const noexcept { return static_cast<std::size_t>(end(i) - begin(i)); }

  [[nodiscard]] sample_type fields(std::size_t i) const {
    if (i >= n_docs_) [[unlikely]]
      throw format_error(tokens_.path(), {.record = i}, "document index past the last document (" + std::to_string(n_docs_) + ")");
    if (lazy_) check(i);
    const std::uint64_t b = offset(i), e = offset(i + 1);
    sample_type out{.id = i, .origin = tokens_.path()};
    out.values[0] = std::span<const std::byte>(tokens_.data() + b * sizeof(T), (e - b) * sizeof(T));
    return out;
  }
  // Tokens [from, from + n) of document i, checked against the vocabulary under vocab_check::lazy
  // (those tokens only: a document packed into several rows, stage/pack_rows.hpp, is checked once
  // in all, not once a row).
  [[nodiscard]] std::span<const T> piece(std::size_t i, std::size_t from, std::size_t n) const {
    if (i >= n_docs_ || from > length(i) || n > length(i) - from) [[unlikely]]
      throw format_error(tokens_.path(), {.record = i},
                         "tokens [" + std::to_string(from) + ", " + std::to_string(from + n) + ") are not inside document " +
                             std::to_string(i) + (i < n_docs_ ? " (" + std::to_string(length(i)) + " tokens)" : ""));
    if (lazy_)
      if (const std::size_t pos = detail::find_out_of_vocab<T>(tokens_, offset(i) + from, n, vocab_); pos != detail::no_token)
        detail::throw_out_of_vocab<T>(tokens_, pos, vocab_, i);
    return {reinterpret_cast<const T*>(tokens_.data()) + offset(i) + from, n};
  }
  [[nodiscard]] std::span<const T> document(std::size_t i) const noexcept {
    return {reinterpret_cast<const T*>(tokens_.data()) + offset(i), length(i)};
  }

  // The same as io::write_token_documents<T>.
  template <class Docs>
  static void write(const std::string& tokens_path, const std::string& offsets_path, const Docs& docs) {
    write_token_documents<T>(tokens_path, offsets_path, docs);
  }

 private:
  [[nodiscard]] std::uint64_t offset(std::size_t k) const noexcept {
    std::uint64_t v;
    std::memcpy(&v, offsets_.data() + k * 8, 8);
    return v;
  }
  void check(std::size_t i) const {
    const std::size_t pos = detail::find_out_of_vocab<T>(tokens_, offset(i), length(i), vocab_);
    if (pos != detail::no_token) detail::throw_out_of_vocab<T>(tokens_, pos, vocab_, i);
  }
  mapped_file tokens_;
  mapped_file offsets_;
  std::uint64_t vocab_;
  bool lazy_;
  std::size_t n_tokens_ = 0, n_docs_ = 0;
};

}  // namespace sluice::io
