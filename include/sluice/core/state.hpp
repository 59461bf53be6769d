// sluice/core/state.hpp — a loader's checkpoint: where an epoch stands, and what it stands in.
//
// loader.state() returns a loader_state: the epoch, the position reached in the sampler's order,
// the augmentation seed, and a fingerprint of what decides the batches to come (the sampler's
// kind, seed and parameters; the dataset's size, paths and sizes; the batch size, drop_last and the
// collated tensors). loader.resume(state) gives the batches not yet consumed, and refuses a state
// from another pipeline with a usage_error naming every difference. save_state writes it
// atomically (temporary file, fsync, rename): a process killed at any moment leaves the previous
// state or the new one.
// Errors: load_state refuses an unknown version, a truncated or corrupt file (a 64-bit check hash)
// with a format_error naming the file; a state made by hand is refused by resume().
// What the fingerprint covers and what it does not: docs/guarantees.md; the byte layout:
// docs/formats.md.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sluice/core/batch.hpp"
#include "sluice/core/dtype.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice {

// A 64-bit hash for fingerprints: splitmix-chained 64-bit words, so the value is the same in
// every run, build and machine (no std::hash). Strings and floating point values are fed by
// their length and bytes and by their bit pattern.
class fingerprint_hash {
 public:
  constexpr fingerprint_hash& add(std::uint64_t v) noexcept {
    h_ = mix_keys(h_, v);
    return *this;
  }
  constexpr fingerprint_hash& add(double v) noexcept { return add(std::bit_cast<std::uint64_t>(v)); }
  constexpr fingerprint_hash& add(std::string_view s) noexcept {
    add(static_cast<std::uint64_t>(s.size()));
    std::uint64_t word = 0;
    std::size_t k = 0;
    for (char c : s) {
      word |= static_cast<std::uint64_t>(static_cast<unsigned char>(c)) << (8 * k);
      if (++k == 8) {
        add(word);
        word = 0;
        k = 0;
      }
    }
    if (k != 0) add(word);
    return *this;
  }
  // Every element of a range of integers or doubles, and the count.
  template <class Range>
  constexpr fingerprint_hash& add_all(const Range& r) noexcept {
    std::uint64_t n = 0;
    for (const auto& x : r) {
      if constexpr (std::is_floating_point_v<std::decay_t<decltype(x)>>) add(static_cast<double>(x));
      else add(static_cast<std::uint64_t>(x));
      ++n;
    }
    return add(n);
  }
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 0x736c75696365ULL;  // "sluice"
};

// What a sampler says about itself (its `fingerprint()`): a stable kind name ("shuffle"), a hash
// of everything that decides its order (size, seed, options, data), and its seed in clear for
// the error message (seeded = false for a sampler without one).
struct sampler_fingerprint {
  std::string kind;
  std::uint64_t params = 0;
  std::uint64_t seed = 0;
  bool seeded = false;
  friend bool operator==(const sampler_fingerprint&, const sampler_fingerprint&) = default;
};

// Everything besides (seed, epoch, position) that decides the batches after a position.
struct state_fingerprint {
  std::string sampler_kind;          // empty: no fingerprint (a state made by hand)
  std::uint64_t sampler_params = 0;  // hash of the sampler's parameters, seed and data
  std::uint64_t sampler_seed = 0;
  bool sampler_seeded = false;
  std::uint64_t sampler_size = 0;  // samples in the state's epoch
  static constexpr std::uint64_t unknown = ~std::uint64_t{0};
  std::uint64_t dataset_samples = unknown;  // records in the dataset (unknown: no reader says)
  std::uint64_t dataset_id = 0;             // hash of the readers' paths and sizes (0: none)
  std::string dataset_paths;                // the readers' paths, for messages
  std::uint64_t batch_size = 0;
  bool drop_last = false;
  std::uint64_t batch_layout = 0;  // hash of the tensor names, dtypes and collator options
  friend bool operator==(const state_fingerprint&, const state_fingerprint&) = default;
};

// Where an interrupted epoch stands: resuming it yields exactly the batches not yet delivered.
struct loader_state {
  std::uint64_t seed = 0;      // the loader's augmentation seed (loader_options::seed)
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;  // samples of the epoch's order already delivered
  state_fingerprint fingerprint{};
  friend bool operator==(const loader_state&, const loader_state&) = default;
};

// A sampler's fingerprint: its own fingerprint() where it has one, else its size in `epoch`.
template <class Sampler>
[[nodiscard]] sampler_fingerprint fingerprint_of(const Sampler& s, std::uint64_t epoch) {
  if constexpr (requires {
                  { s.fingerprint() } -> std::convertible_to<sampler_fingerprint>;
                }) {
    return s.fingerprint();
  } else {
    return {"sampler without fingerprint()",
            fingerprint_hash{}.add(static_cast<std::uint64_t>(s.size(epoch))).value(), 0, false};
  }
}

namespace detail {

template <class B>
struct batch_outputs {  // a batch whose tensors are known only at run time
  static void hash(fingerprint_hash&) noexcept {}
};
template <class... Outs>
struct batch_outputs<typed_batch<Outs...>> {
  static void hash(fingerprint_hash& h) noexcept {
    (h.add(Outs::name.view()).add(std::string_view(dtype_name(dtype_of<typename Outs::value_type>))), ...);
  }
};

// The fingerprint of a batch_chain (core/pipeline.hpp) at `epoch`.
template <class BChain>
[[nodiscard]] state_fingerprint chain_fingerprint(const BChain& chain, std::uint64_t epoch) {
  using sample_type = typename BChain::sample_chain_type::output_type;
  using collate_type = typename BChain::collate_type;
  const auto& sampler = chain.chain.sampler();
  state_fingerprint f;
  const sampler_fingerprint sf = fingerprint_of(sampler, epoch);
  f.sampler_kind = sf.kind.empty() ? std::string("unnamed sampler") : sf.kind;
  f.sampler_params = sf.params;
  f.sampler_seed = sf.seed;
  f.sampler_seeded = sf.seeded;
  f.sampler_size = static_cast<std::uint64_t>(sampler.size(epoch));

  fingerprint_hash data;
  bool any_reader = false;
  std::apply(
      [&](const auto&... st) {
        auto one = [&](const auto& stage) {
          if constexpr (requires { stage.reader(); }) {
            const auto& r = stage.reader();
            if constexpr (requires { std::string_view(r.path()); }) {
              const std::string_view p(r.path());
              data.add(p);
              if (!f.dataset_paths.empty()) f.dataset_paths += ", ";
              f.dataset_paths += p;
              any_reader = true;
            }
            if constexpr (requires { static_cast<std::uint64_t>(r.size()); }) {
              const auto n = static_cast<std::uint64_t>(r.size());
              data.add(n);
              if (f.dataset_samples == state_fingerprint::unknown) f.dataset_samples = n;
              any_reader = true;
            }
          }
        };
        (one(st), ...);
      },
      chain.chain.stages());
  f.dataset_id = any_reader ? data.value() : 0;
  if constexpr (requires { static_cast<std::uint64_t>(sampler.dataset_size()); }) {
    if (f.dataset_samples == state_fingerprint::unknown)
      f.dataset_samples = static_cast<std::uint64_t>(sampler.dataset_size());
  }

  const auto& col = chain.collate;
  f.batch_size = static_cast<std::uint64_t>(col.batch_size());
  f.drop_last = col.drop_last();
  fingerprint_hash layout;
  layout.add(std::string_view(collate_type::name));
  batch_outputs<typename collate_type::template batch_type<sample_type>>::hash(layout);
  if constexpr (requires { static_cast<std::uint64_t>(col.fingerprint()); })
    layout.add(static_cast<std::uint64_t>(col.fingerprint()));
  f.batch_layout = layout.value();
  return f;
}

inline std::string seed_text(bool seeded, std::uint64_t seed) {
  return seeded ? std::to_string(seed) : std::string("none");
}
inline std::string count_text(std::uint64_t n) {
  return n == state_fingerprint::unknown ? std::string("unknown") : std::to_string(n);
}

}  // namespace detail

// Every way `st` differs from a loader whose fingerprint at st.epoch is `now` and whose
// augmentation seed is `seed`, as "the X differs (...)" clauses joined by "; "; empty when
// the state fits the loader.
[[nodiscard]] inline std::string state_mismatch(const loader_state& st, const state_fingerprint& now,
                                                std::uint64_t seed) {
  const state_fingerprint& was = st.fingerprint;
  if (was.sampler_kind.empty())
    return "the state carries no fingerprint (made by hand?); take states from loader.state() or "
           "loader.state(epoch, position)";
  std::string out;
  auto say = [&](const std::string& clause) {
    if (!out.empty()) out += "; ";
    out += clause;
  };
  if (was.sampler_kind != now.sampler_kind) {
    say("the sampler differs (state: " + was.sampler_kind + ", loader: " + now.sampler_kind + ")");
  } else if (was.sampler_seeded != now.sampler_seeded || was.sampler_seed != now.sampler_seed) {
    say("the sampler seed differs (state " + detail::seed_text(was.sampler_seeded, was.sampler_seed) + ", loader " +
        detail::seed_text(now.sampler_seeded, now.sampler_seed) + ")");
  } else if (was.sampler_params != now.sampler_params) {
    say("the sampler's parameters differ (" + now.sampler_kind + ", same seed " +
        detail::seed_text(now.sampler_seeded, now.sampler_seed) +
        "): its size, options or data (weights, labels, lengths, rank, world) are not the state's");
  }
  if (was.sampler_size != now.sampler_size)
    say("the epoch's size differs: " + std::to_string(was.sampler_size) + " samples in the state, " +
        std::to_string(now.sampler_size) + " now");
  if (was.dataset_samples != now.dataset_samples) {
    say("the dataset differs: " + detail::count_text(was.dataset_samples) + " samples in the state, " +
        detail::count_text(now.dataset_samples) + " now");
  } else if (was.dataset_id != now.dataset_id) {
    say("the dataset differs: the state was taken over '" + was.dataset_paths + "', the loader reads '" +
        now.dataset_paths + "' (paths or sizes differ)");
  }
  if (was.batch_size != now.batch_size)
    say("the batch size differs (state " + std::to_string(was.batch_size) + ", loader " +
        std::to_string(now.batch_size) + ")");
  if (was.drop_last != now.drop_last)
    say(std::string("drop_last differs (state ") + (was.drop_last ? "true" : "false") + ", loader " +
        (now.drop_last ? "true" : "false") + ")");
  if (was.batch_layout != now.batch_layout)
    say("the batch layout differs (the collated tensors' names or dtypes, or the collate options)");
  if (st.seed != seed)
    say("the augmentation seed differs (state " + std::to_string(st.seed) + ", loader " + std::to_string(seed) +
        "): build the loader with seed " + std::to_string(st.seed) + " (C++: loader_options::seed; Python: seed=)");
  return out;
}

// Throws usage_error "sluice: resume: ..." naming every difference (see state_mismatch).
inline void check_resumable(const loader_state& st, const state_fingerprint& now, std::uint64_t seed) {
  const std::string why = state_mismatch(st, now, seed);
  if (!why.empty()) throw usage_error("sluice: resume: " + why);
}

// ---------------------------------------------------------------------------------------------
// The stored form.
inline constexpr std::uint32_t state_format_version = 1;

namespace detail {
inline constexpr char state_magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'T'};

inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_string(std::string& out, std::string_view s) {
  put_le(out, s.size(), 4);
  out.append(s);
}
inline std::uint64_t state_check(std::string_view bytes) {
  return fingerprint_hash{}.add(bytes).value();
}

// Reads the body, every length checked against what is left.
class state_reader {
 public:
  state_reader(std::string_view bytes, std::size_t at, const std::string& origin)
      : b_(bytes), at_(at), origin_(origin) {}
  std::uint64_t u(std::size_t bytes, const char* what) {
    need(bytes, what);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b_[at_ + i])) << (8 * i);
    at_ += bytes;
    return v;
  }
  bool flag(const char* what) {
    const std::uint64_t v = u(1, what);
    if (v > 1) fail(at_ - 1, std::string(what) + " is " + std::to_string(v) + ", not 0 or 1");
    return v == 1;
  }
  std::string str(const char* what) {
    const auto n = static_cast<std::size_t>(u(4, what));
    need(n, what);
    std::string s(b_.substr(at_, n));
    at_ += n;
    return s;
  }
  [[nodiscard]] std::size_t at() const noexcept { return at_; }
  [[noreturn]] void fail(std::size_t offset, const std::string& cause) const {
    throw format_error(origin_, {.offset = offset}, cause);
  }

 private:
  void need(std::size_t n, const char* what) const {
    if (n > b_.size() - at_)
      fail(at_, std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
                    std::to_string(b_.size() - at_) + " left");
  }
  std::string_view b_;
  std::size_t at_;
  const std::string& origin_;
};
}  // namespace detail

// The stored form of a state (the bytes save_state writes).
[[nodiscard]] inline std::string state_to_string(const loader_state& st) {
  std::string body;
  const state_fingerprint& f = st.fingerprint;
  detail::put_le(body, st.seed, 8);
  detail::put_le(body, st.epoch, 8);
  detail::put_le(body, st.position, 8);
  detail::put_string(body, f.sampler_kind);
  detail::put_le(body, f.sampler_params, 8);
  detail::put_le(body, f.sampler_seed, 8);
  detail::put_le(body, f.sampler_seeded ? 1 : 0, 1);
  detail::put_le(body, f.sampler_size, 8);
  detail::put_le(body, f.dataset_samples, 8);
  detail::put_le(body, f.dataset_id, 8);
  detail::put_string(body, f.dataset_paths);
  detail::put_le(body, f.batch_size, 8);
  detail::put_le(body, f.drop_last ? 1 : 0, 1);
  detail::put_le(body, f.batch_layout, 8);
  std::string out(detail::state_magic, sizeof detail::state_magic);
  detail::put_le(out, state_format_version, 4);
  detail::put_le(out, body.size(), 4);
  out += body;
  detail::put_le(out, detail::state_check(out), 8);
  return out;
}

// Parses the stored form; `origin` names it in a format_error (a file's path).
[[nodiscard]] inline loader_state state_from_string(std::string_view bytes, const std::string& origin = "<string>") {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), detail::state_magic, 8) != 0)
    throw format_error(origin, {.offset = 0},
                       bytes.size() < 8 ? "truncated: " + std::to_string(bytes.size()) + " bytes, not a sluice loader state"
                                        : std::string("not a sluice loader state (no SLUICEST magic)"));
  detail::state_reader r(bytes, 8, origin);
  const auto version = static_cast<std::uint32_t>(r.u(4, "the version"));
  if (version != state_format_version)
    r.fail(8, "loader state version " + std::to_string(version) + " is not one this sluice reads (it reads " +
                  std::to_string(state_format_version) + ")");
  const auto n = static_cast<std::size_t>(r.u(4, "the body's length"));
  if (bytes.size() - 16 < n || bytes.size() - 16 - n < 8)
    r.fail(bytes.size(), "truncated: the body and its check need " + std::to_string(16 + n + 8) + " bytes, the " +
                             "state has " + std::to_string(bytes.size()));
  if (bytes.size() != 16 + n + 8)
    r.fail(16 + n + 8, std::to_string(bytes.size() - (16 + n + 8)) + " bytes after the state's end");
  detail::state_reader tail(bytes, 16 + n, origin);
  if (tail.u(8, "the check") != detail::state_check(bytes.substr(0, 16 + n)))
    r.fail(16 + n, "corrupt: the check hash does not match the contents");
  loader_state st;
  state_fingerprint& f = st.fingerprint;
  detail::state_reader body(bytes.substr(0, 16 + n), 16, origin);
  st.seed = body.u(8, "seed");
  st.epoch = body.u(8, "epoch");
  st.position = body.u(8, "position");
  f.sampler_kind = body.str("sampler kind");
  f.sampler_params = body.u(8, "sampler parameters");
  f.sampler_seed = body.u(8, "sampler seed");
  f.sampler_seeded = body.flag("sampler seeded");
  f.sampler_size = body.u(8, "sampler size");
  f.dataset_samples = body.u(8, "dataset samples");
  f.dataset_id = body.u(8, "dataset id");
  f.dataset_paths = body.str("dataset paths");
  f.batch_size = body.u(8, "batch size");
  f.drop_last = body.flag("drop_last");
  f.batch_layout = body.u(8, "batch layout");
  if (body.at() != 16 + n) body.fail(body.at(), std::to_string(16 + n - body.at()) + " unread bytes in the body");
  return st;
}

namespace detail {
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};
inline void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t w = ::write(fd, bytes.data(), bytes.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      throw io_error(path, "cannot write loader state", errno);
    }
    bytes.remove_prefix(static_cast<std::size_t>(w));
  }
}
}  // namespace detail

// Writes `st` to `path` atomically: a temporary file beside it (path + ".tmp." + pid), fsync,
// rename over `path`, fsync of the directory. A crash leaves the old state or the new one.
// Not for two threads saving to one path at once. Throws io_error naming the file.
inline void save_state(const loader_state& st, const std::string& path) {
  const std::string bytes = state_to_string(st);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    detail::fd_guard f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) throw io_error(tmp, "cannot create loader state", errno);
    try {
      detail::write_all(f.fd, bytes, tmp);
      if (::fsync(f.fd) != 0) throw io_error(tmp, "cannot fsync loader state", errno);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
    const int fd = std::exchange(f.fd, -1);
    if (::close(fd) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      throw io_error(tmp, "cannot close loader state", e);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw io_error(path, "cannot rename the new loader state onto", e);
  }
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
  detail::fd_guard d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) throw io_error(dir, "cannot open the directory of loader state", errno);
  if (::fsync(d.fd) != 0 && errno != EINVAL) throw io_error(dir, "cannot fsync the directory of loader state", errno);
}

// Reads a state save_state wrote. io_error if it cannot be read; format_error naming the file if
// it is not a loader state, is of an unknown version, truncated or corrupt.
[[nodiscard]] inline loader_state load_state(const std::string& path) {
  // A regular file of at most 16 MiB: a FIFO is refused, not waited on.
  return state_from_string(io::detail::read_small_file(path, std::size_t{1} << 24, "a sluice loader state"), path);
}

}  // namespace sluice
