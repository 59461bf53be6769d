// Per-field collate (stage/field_collate.hpp) beside hand-written memcpy baselines in the same
// binary, and pack<"tokens"> beside a vectorised NumPy reference (bench/core/pack_numpy.py, run
// once by this binary on the same documents in the same order).
//
// Multi-field: 20,000 in-memory samples (~250 MB, larger than the last-level cache) of a 3x64x64
// u8 image, an int64 label and 0-16 f32 boxes of 4 floats (counts from a fixed-seed RNG), in a
// random order (sample::shuffle, a new order per epoch), batches of 256, through
//   collate(batch_options{.batch = 256}, stack<"image">{}, stack<"label">{}, ragged<"boxes">{.row = {4}})
// (a) calling its steps directly (begin, check each, plan, write each, finish) into one
//     preallocated buffer, one thread — BM_fields_direct_collate;
// (b) through the loader: from(shuffle) | read(reader) | collate(...) | prefetch(2, {.workers = 1})
//     — BM_fields_loader;
// both against BM_fields_direct_memcpy: a hand-written gather of the same fields, same order,
// into the same layout (image {n, 12288}, label {n}, boxes {rows, 4}, boxes.offsets {n + 1},
// 64-byte aligned), checked byte-equal to the collator's output at start-up.
//
// Packing: 20,000 uint16 token documents, lengths log-normal (median 500, sigma 1, 1..16384,
// fixed seed), batches of 64 documents in a random order, pack<"tokens">{.length = 2048} called
// step by step into a preallocated buffer (BM_pack_direct) against a memcpy of the same tokens in
// the same order into one buffer (BM_pack_memcpy) and against NumPy doing the same packing
// (tokens, doc_ids, position_ids, cu_seqlens as pack defines them) per batch (BM_pack_numpy;
// the checksum of its first epoch must equal sluice's, or the binary stops).
//
// Run: build/bench/core/sluice_bench_fields --benchmark_counters_tabular=true [--json]
//      (SLUICE_BENCH_PYTHON overrides /usr/bin/python3; SLUICE_BENCH_PACK_PY the script's path)
#include <benchmark/benchmark.h>

#include "json_lines.hpp"

#include <sluice/sluice.hpp>
#include <sluice/stage/field_collate.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef SLUICE_BENCH_PACK_PY
#define SLUICE_BENCH_PACK_PY "pack_numpy.py"
#endif

namespace {

// ---------------------------------------------------------------------------------------------
// Multi-field dataset
constexpr std::size_t det_samples = 20000;
constexpr std::size_t img_bytes = 3 * 64 * 64;
constexpr std::size_t det_batch = 256;
constexpr std::size_t box_bytes = 4 * sizeof(float);

using det_schema = sluice::schema<sluice::field<"image", std::uint8_t>, sluice::field<"label", std::int64_t>,
                                  sluice::field<"boxes", float, sluice::variable>>;

// Sample i lives at arena[at[i]]: image (12288 bytes), label (8), boxes (nbox[i] * 16).
struct mem_det_reader {
  using reader_concept = sluice::reader_tag;
  std::unique_ptr<std::byte[]> arena;
  std::size_t arena_bytes = 0;
  std::vector<std::size_t> at;
  std::vector<std::uint32_t> nbox;

  mem_det_reader() : at(det_samples), nbox(det_samples) {
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<std::uint32_t> boxes(0, 16);
    std::size_t pos = 0;
    for (std::size_t i = 0; i < det_samples; ++i) {
      nbox[i] = boxes(rng);
      at[i] = pos;
      pos += img_bytes + 8 + nbox[i] * box_bytes;
    }
    arena_bytes = pos;
    arena.reset(new (std::align_val_t{64}) std::byte[pos]);
    for (std::size_t i = 0; i < det_samples; ++i) {
      std::byte* p = arena.get() + at[i];
      for (std::size_t j = 0; j < img_bytes; ++j) p[j] = static_cast<std::byte>((i * 131 + j) & 0xff);
      const std::int64_t label = static_cast<std::int64_t>(i % 1000);
      std::memcpy(p + img_bytes, &label, 8);
      for (std::size_t b = 0; b < nbox[i] * 4; ++b) {
        const float v = static_cast<float>(i) + 0.25f * static_cast<float>(b);
        std::memcpy(p + img_bytes + 8 + b * sizeof(float), &v, sizeof v);
      }
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return det_samples; }
  [[nodiscard]] std::string_view path() const noexcept { return "det.mem"; }
  [[nodiscard]] sluice::fields_sample<det_schema> fields(std::size_t i) const {
    const std::byte* p = arena.get() + at[i];
    sluice::fields_sample<det_schema> s{.id = i, .origin = path()};
    s.values[0] = {p, img_bytes};
    s.values[1] = {p + img_bytes, 8};
    s.values[2] = {p + img_bytes + 8, nbox[i] * box_bytes};
    return s;
  }
};

const mem_det_reader& det_reader() {
  static const mem_det_reader r;
  return r;
}

constexpr std::size_t align64(std::size_t x) { return (x + 63) / 64 * 64; }

// Upper bound of a batch's bytes: every sample with 16 boxes.
constexpr std::size_t det_buffer_bytes =
    align64(align64(align64(det_batch * img_bytes) + det_batch * 8) + det_batch * 16 * box_bytes) + (det_batch + 1) * 8;

// The hand-written gather: the same four tensors, in the same places as the collator puts them.
std::size_t hand_gather(const mem_det_reader& r, const sluice::sample::shuffle& order, std::uint64_t epoch,
                        std::size_t first, std::size_t n, std::byte* out) {
  std::uint64_t ids[det_batch];
  std::size_t rows = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ids[i] = order.at(epoch, first + i);
    rows += r.nbox[ids[i]];
  }
  const std::size_t o_lab = align64(n * img_bytes), o_box = align64(o_lab + n * 8), o_off = align64(o_box + rows * box_bytes);
  auto* off = reinterpret_cast<std::int64_t*>(out + o_off);
  std::size_t row = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* src = r.arena.get() + r.at[ids[i]];
    const std::size_t nb = r.nbox[ids[i]];
    std::memcpy(out + i * img_bytes, src, img_bytes);
    std::memcpy(out + o_lab + i * 8, src + img_bytes, 8);
    std::memcpy(out + o_box + row * box_bytes, src + img_bytes + 8, nb * box_bytes);
    off[i] = static_cast<std::int64_t>(row);
    row += nb;
  }
  off[n] = static_cast<std::int64_t>(row);
  return o_off + (n + 1) * 8;
}

auto det_collator() {
  using namespace sluice;
  return collate(batch_options{.batch = det_batch}, stack<"image">{}, stack<"label">{}, ragged<"boxes">{.row = {4}});
}
using det_collate_t = decltype(det_collator());
using det_sample_t = sluice::fields_sample<det_schema>;

// One batch through the collator's steps, as the loader's ring drives them: the samples' views
// gathered and checked, the tensors planned, then (with out != nullptr) each sample written and
// the batch finished. Returns the batch's bytes.
template <class Reader, class Collate>
struct direct_collate {
  using sample_t = decltype(std::declval<const Reader&>().fields(0));
  Collate col;
  typename Collate::scratch_type sc{};
  std::vector<sample_t> samples;
  sluice::batch_layout layout;
  explicit direct_collate(Collate c) : col(std::move(c)) { samples.reserve(col.batch_size()); }

  std::size_t run(const Reader& r, const sluice::sample::shuffle& order, std::uint64_t epoch,
                  std::size_t first, std::size_t n, std::byte* out) {
    samples.clear();
    col.begin(sc);
    for (std::size_t i = 0; i < n; ++i) {
      samples.push_back(r.fields(static_cast<std::size_t>(order.at(epoch, first + i))));
      col.check(samples.back(), sc);
    }
    layout.clear();
    col.plan(std::span<const sample_t>(samples), sc, layout);
    if (out == nullptr) return layout.bytes;
    for (std::size_t i = 0; i < n; ++i) {
      const sluice::sample_context ctx{0, epoch, samples[i].id, first + i};
      col.write(samples[i], i, out, sc, ctx);
    }
    col.finish(std::span<const sample_t>(samples), out, sc, layout);
    return layout.bytes;
  }
};

std::unique_ptr<std::byte[]> zeroed(std::size_t n) {
  std::unique_ptr<std::byte[]> p(new (std::align_val_t{64}) std::byte[n]);
  std::memset(p.get(), 0, n);
  return p;
}

// Start-up check: the hand gather writes what the collator writes, byte for byte.
void check_same_layout() {
  static const bool ok = [] {
    const auto& r = det_reader();
    sluice::sample::shuffle order(det_samples, {.seed = 1});
    auto a = zeroed(det_buffer_bytes), b = zeroed(det_buffer_bytes);
    direct_collate<mem_det_reader, det_collate_t> dc{det_collator()};
    for (std::size_t first : {std::size_t{0}, std::size_t{256 * 7}}) {
      const std::size_t na = hand_gather(r, order, 3, first, det_batch, a.get());
      const std::size_t nb = dc.run(r, order, 3, first, det_batch, b.get());
      if (na != nb || std::memcmp(a.get(), b.get(), na) != 0 || dc.layout.count != 4)
        throw std::runtime_error("bench_fields: the hand-written gather does not match the collator's layout");
    }
    return true;
  }();
  (void)ok;
}

std::size_t det_epoch_bytes() {
  const auto& r = det_reader();
  std::size_t b = 0;
  for (std::size_t i = 0; i < det_samples; ++i) b += img_bytes + 8 + r.nbox[i] * box_bytes;
  return b;
}

template <class Fn>
void det_epochs(benchmark::State& state, Fn&& batch_fn) {
  check_same_layout();
  sluice::sample::shuffle order(det_samples, {.seed = 1});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (std::size_t first = 0; first < det_samples; first += det_batch)
      batch_fn(order, epoch, first, std::min(det_batch, det_samples - first));
    ++epoch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * det_samples));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * det_epoch_bytes()));
}

void BM_fields_direct_memcpy(benchmark::State& state) {
  const auto& r = det_reader();
  auto buf = zeroed(det_buffer_bytes);
  det_epochs(state, [&](const auto& order, std::uint64_t epoch, std::size_t first, std::size_t n) {
    hand_gather(r, order, epoch, first, n, buf.get());
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
  });
}

void BM_fields_direct_collate(benchmark::State& state) {
  const auto& r = det_reader();
  auto buf = zeroed(det_buffer_bytes);
  direct_collate<mem_det_reader, det_collate_t> dc{det_collator()};
  det_epochs(state, [&](const auto& order, std::uint64_t epoch, std::size_t first, std::size_t n) {
    dc.run(r, order, epoch, first, n, buf.get());
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
  });
}

void BM_fields_loader(benchmark::State& state) {
  check_same_layout();
  const auto& r = det_reader();
  const auto workers = static_cast<std::size_t>(state.range(0));
  auto loader = sluice::from(sluice::sample::shuffle(det_samples, {.seed = 1})) | sluice::read(r) | det_collator() |
                sluice::prefetch(2, {.workers = workers});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(epoch)) benchmark::DoNotOptimize(b.template get<"image">().data());
    ++epoch;
  }
  state.counters["stall"] = loader.stats().stall_fraction;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * det_samples));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * det_epoch_bytes()));
}

// ---------------------------------------------------------------------------------------------
// Packing
constexpr std::size_t tok_docs = 20000;
constexpr std::size_t pack_batch = 64;
constexpr std::size_t pack_length = 2048;
using tok_schema = sluice::schema<sluice::field<"tokens", std::uint16_t, sluice::variable>>;
using tok_sample_t = sluice::fields_sample<tok_schema>;

struct mem_tok_reader {
  using reader_concept = sluice::reader_tag;
  std::vector<std::uint16_t> tokens;
  std::vector<std::size_t> start;  // tok_docs + 1
  mem_tok_reader() : start(tok_docs + 1) {
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> len(std::log(500.0), 1.0);
    std::vector<std::size_t> lens(tok_docs);
    for (auto& l : lens) l = static_cast<std::size_t>(std::clamp(std::llround(len(rng)), 1LL, 16384LL));
    for (std::size_t i = 0; i < tok_docs; ++i) start[i + 1] = start[i] + lens[i];
    tokens.resize(start[tok_docs]);
    std::uniform_int_distribution<unsigned> tok(1, 50000);
    for (auto& t : tokens) t = static_cast<std::uint16_t>(tok(rng));
  }
  [[nodiscard]] std::size_t size() const noexcept { return tok_docs; }
  [[nodiscard]] std::string_view path() const noexcept { return "tokens.mem"; }
  [[nodiscard]] std::size_t length(std::size_t i) const noexcept { return start[i + 1] - start[i]; }
  [[nodiscard]] tok_sample_t fields(std::size_t i) const {
    tok_sample_t s{.id = i, .origin = path()};
    s.set<"tokens">(std::span<const std::uint16_t>(tokens.data() + start[i], length(i)));
    return s;
  }
};

const mem_tok_reader& tok_reader() {
  static const mem_tok_reader r;
  return r;
}

auto pack_collator() {
  using namespace sluice;
  return collate(batch_options{.batch = pack_batch}, pack<"tokens">{.length = pack_length});
}
using pack_collate_t = decltype(pack_collator());


// The largest batch of any of the first epochs (a bound for the preallocated buffer).
std::size_t pack_buffer_bytes() {
  static const std::size_t bytes = [] {
    const auto& r = tok_reader();
    sluice::sample::shuffle order(tok_docs, {.seed = 1});
    direct_collate<mem_tok_reader, pack_collate_t> dp{pack_collator()};
    std::size_t m = 0;
    for (std::uint64_t e = 0; e < 64; ++e)
      for (std::size_t first = 0; first < tok_docs; first += pack_batch)
        m = std::max(m, dp.run(r, order, e, first, std::min(pack_batch, tok_docs - first), nullptr));
    return m * 2;  // later epochs may hold a larger batch
  }();
  return bytes;
}

// Sum over one epoch's batches of every int in tokens, doc_ids, position_ids and cu_seqlens.
long long pack_checksum(std::uint64_t epoch) {
  const auto& r = tok_reader();
  sluice::sample::shuffle order(tok_docs, {.seed = 1});
  direct_collate<mem_tok_reader, pack_collate_t> dp{pack_collator()};
  auto buf = zeroed(pack_buffer_bytes());
  long long sum = 0;
  for (std::size_t first = 0; first < tok_docs; first += pack_batch) {
    dp.run(r, order, epoch, first, std::min(pack_batch, tok_docs - first), buf.get());
    const auto& L = dp.layout;
    auto add = [&](std::size_t t, auto tag) {
      using T = decltype(tag);
      const T* p = reinterpret_cast<const T*>(buf.get() + L.tensors[t].offset);
      for (std::int64_t k = 0; k < L.tensors[t].numel(); ++k) sum += static_cast<long long>(p[k]);
    };
    add(0, std::uint16_t{});
    add(1, std::int32_t{});
    add(2, std::int32_t{});
    add(3, std::int32_t{});
  }
  return sum;
}

std::size_t epoch_tokens() { return tok_reader().tokens.size(); }

template <class Fn>
void pack_epochs(benchmark::State& state, Fn&& batch_fn) {
  sluice::sample::shuffle order(tok_docs, {.seed = 1});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (std::size_t first = 0; first < tok_docs; first += pack_batch)
      batch_fn(order, epoch, first, std::min(pack_batch, tok_docs - first));
    ++epoch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens() * sizeof(std::uint16_t)));
}

void BM_pack_memcpy(benchmark::State& state) {
  const auto& r = tok_reader();
  auto buf = zeroed(pack_buffer_bytes());
  pack_epochs(state, [&](const auto& order, std::uint64_t epoch, std::size_t first, std::size_t n) {
    std::byte* dst = buf.get();
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<std::size_t>(order.at(epoch, first + i));
      const std::size_t b = r.length(id) * sizeof(std::uint16_t);
      std::memcpy(dst, r.tokens.data() + r.start[id], b);
      dst += b;
    }
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
  });
}

void BM_pack_direct(benchmark::State& state) {
  const auto& r = tok_reader();
  auto buf = zeroed(pack_buffer_bytes());
  direct_collate<mem_tok_reader, pack_collate_t> dp{pack_collator()};
  pack_epochs(state, [&](const auto& order, std::uint64_t epoch, std::size_t first, std::size_t n) {
    dp.run(r, order, epoch, first, n, buf.get());
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
  });
}

// Writes the documents and epoch 0's order for pack_numpy.py; returns the directory.
std::string write_pack_inputs() {
  const auto& r = tok_reader();
  const auto dir = std::filesystem::temp_directory_path() / "sluice-bench-pack";
  std::filesystem::create_directories(dir);
  auto put = [&](const char* name, const void* p, std::size_t n) {
    std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  };
  put("tokens.u16", r.tokens.data(), r.tokens.size() * sizeof(std::uint16_t));
  std::vector<std::uint64_t> starts(r.start.begin(), r.start.end());
  put("starts.u64", starts.data(), starts.size() * 8);
  sluice::sample::shuffle order(tok_docs, {.seed = 1});
  std::vector<std::uint64_t> ids(tok_docs);
  for (std::size_t i = 0; i < tok_docs; ++i) ids[i] = order.at(0, i);
  put("order.u64", ids.data(), ids.size() * 8);
  return dir.string();
}

// Runs the NumPy reference once (it times itself for ~min_time seconds over whole epochs) and
// reports its tokens/s as this benchmark's items/s.
void BM_pack_numpy(benchmark::State& state) {
  const std::string dir = write_pack_inputs();
  const char* py = std::getenv("SLUICE_BENCH_PYTHON");
  const char* script = std::getenv("SLUICE_BENCH_PACK_PY");
  const std::string cmd = std::string(py ? py : "/usr/bin/python3") + " " + (script ? script : SLUICE_BENCH_PACK_PY) +
                          " --dir " + dir + " --batch " + std::to_string(pack_batch) + " --length " +
                          std::to_string(pack_length) + " --min-time 2";
  const long long want = pack_checksum(0);
  for (auto _ : state) {
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      state.SkipWithError("cannot start python");
      return;
    }
    char line[512] = {};
    std::string out;
    while (std::fgets(line, sizeof line, p)) out += line;
    if (pclose(p) != 0) {
      state.SkipWithError(("pack_numpy.py failed: " + out).c_str());
      return;
    }
    double tokens = 0, seconds = 0;
    long long checksum = 0;
    if (std::sscanf(out.c_str(), "%lf %lf %lld", &tokens, &seconds, &checksum) != 3 || seconds <= 0) {
      state.SkipWithError(("unexpected pack_numpy.py output: " + out).c_str());
      return;
    }
    if (checksum != want) {
      state.SkipWithError(("NumPy packing differs from sluice's: checksum " + std::to_string(checksum) + " vs " +
                           std::to_string(want)).c_str());
      return;
    }
    state.SetIterationTime(seconds);
    state.counters["items_per_second"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  }
}

}  // namespace

// The same documents as a fixed token budget a step (stage/pack_rows.hpp): rows of 2048 (tokens,
// doc_ids i32 and position_ids i32 per token), against BM_pack_memcpy's copy of the same tokens.
// BM_packed_rows_direct/3 writes every row of an epoch (all three fields) into one buffer of 8
// rows, as BM_pack_direct does for pack<>, and /1 writes the tokens only (a trainer that collates
// no ids); BM_packed_rows_handwritten writes the three fields by hand, the roofline of that output;
// BM_packed_rows_loader runs the loader (8 rows a batch, 1 or 2 workers). Items: the epoch's tokens.
struct mem_docs {
  using token_type = std::uint16_t;
  const mem_tok_reader* r;
  [[nodiscard]] std::size_t size() const noexcept { return r->size(); }
  [[nodiscard]] std::size_t tokens() const noexcept { return r->tokens.size(); }
  [[nodiscard]] std::size_t length(std::size_t i) const noexcept { return r->length(i); }
  [[nodiscard]] std::string_view path() const noexcept { return r->path(); }
  [[nodiscard]] std::span<const std::uint16_t> piece(std::size_t i, std::size_t from, std::size_t n) const {
    return {r->tokens.data() + r->start[i] + from, n};
  }
};
// The same rows hand-written: the order's documents laid end to end, each piece's tokens copied,
// its doc_ids filled and its position_ids counted straight into the buffer (row r at r % ring),
// with no plan and no search. It writes what BM_packed_rows_direct writes (checked on a whole
// epoch before the first timing): the roofline of this output, where BM_pack_memcpy is the
// roofline of the tokens alone.
void handwritten_rows(std::uint64_t epoch, std::byte* buf, std::size_t ring) {
  const auto& r = tok_reader();
  constexpr std::size_t L = pack_length;
  const sluice::sample::shuffle order(tok_docs, {.seed = 1});
  std::size_t row = 0, at = 0;  // the row being written and the tokens in it
  auto tok = [&] { return reinterpret_cast<std::uint16_t*>(buf + (row % ring) * L * 10); };
  auto doc = [&] { return reinterpret_cast<std::int32_t*>(buf + (row % ring) * L * 10 + L * 2); };
  auto pos = [&] { return reinterpret_cast<std::int32_t*>(buf + (row % ring) * L * 10 + L * 6); };
  for (std::size_t i = 0; i < tok_docs; ++i) {
    const auto d = static_cast<std::size_t>(order.at(epoch, i));
    const std::size_t len = r.length(d);
    for (std::size_t from = 0; from < len;) {
      const std::size_t n = std::min(len - from, L - at);
      std::memcpy(tok() + at, r.tokens.data() + r.start[d] + from, n * 2);
      std::fill(doc() + at, doc() + at + n, static_cast<std::int32_t>(d));
      auto v = static_cast<std::int32_t>(from);
      for (std::int32_t *o = pos() + at, *e = o + n; o != e; ++o) *o = v++;
      at += n;
      from += n;
      if (at == L) at = 0, ++row;
    }
  }
  if (at != 0) {
    std::fill(tok() + at, tok() + L, std::uint16_t{0});
    std::fill(doc() + at, doc() + L, -1);
    std::fill(pos() + at, pos() + L, 0);
  }
}
// packed_rows' rows of `epoch` written field by field as collate writes them (row r at r % ring).
template <class Rows>
void packed_rows_epoch(const Rows& rows, std::uint64_t epoch, std::byte* buf, std::size_t ring, bool ids = true) {
  using namespace sluice;
  constexpr std::size_t L = pack_length;
  const std::uint64_t n = rows.rows(epoch);
  for (std::uint64_t r = 0; r < n; ++r) {
    const sample_context ctx{0, epoch, r, r};
    const auto s = rows(sample_id{r}, ctx);
    std::byte* dst = buf + (r % ring) * L * 10;
    s.template write<"tokens">(std::span<std::byte>(dst, L * 2), ctx);
    if (!ids) continue;
    s.template write<"doc_ids">(std::span<std::byte>(dst + L * 2, L * 4), ctx);
    s.template write<"position_ids">(std::span<std::byte>(dst + L * 6, L * 4), ctx);
  }
}
void BM_packed_rows_direct(benchmark::State& state) {
  using namespace sluice;
  static const mem_docs docs{&tok_reader()};
  auto rows = packed_rows(docs, sample::shuffle(tok_docs, {.seed = 1}), {.length = pack_length});
  {  // The hand-written baseline writes the same bytes: epoch 1, every row.
    const std::size_t n = rows.rows(1), bytes = n * pack_length * 10;
    auto a = zeroed(bytes), b = zeroed(bytes);
    packed_rows_epoch(rows, 1, a.get(), n);
    handwritten_rows(1, b.get(), n);
    if (std::memcmp(a.get(), b.get(), bytes) != 0) {
      state.SkipWithError("BM_packed_rows_handwritten writes other rows than packed_rows");
      return;
    }
  }
  auto buf = zeroed(8 * pack_length * (2 + 4 + 4));
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    packed_rows_epoch(rows, epoch, buf.get(), 8, state.range(0) == 3);
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
    ++epoch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens() * sizeof(std::uint16_t)));
}
void BM_packed_rows_handwritten(benchmark::State& state) {
  auto buf = zeroed(8 * pack_length * (2 + 4 + 4));
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    handwritten_rows(epoch, buf.get(), 8);
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
    ++epoch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens() * sizeof(std::uint16_t)));
}
void BM_packed_rows_loader(benchmark::State& state) {
  using namespace sluice;
  static const mem_docs docs{&tok_reader()};
  auto rows = packed_rows(docs, sample::shuffle(tok_docs, {.seed = 1}), {.length = pack_length});
  auto loader = from(rows.sampler()) | rows |
                collate({.batch = 8}, stack<"tokens">{}, stack<"doc_ids">{}, stack<"position_ids">{}) |
                prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(epoch)) benchmark::DoNotOptimize(b.bytes().data());
    ++epoch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * epoch_tokens() * sizeof(std::uint16_t)));
}

BENCHMARK(BM_fields_direct_memcpy)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_fields_direct_collate)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_fields_loader)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_pack_memcpy)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_pack_direct)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_packed_rows_handwritten)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_packed_rows_direct)->Arg(3)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_packed_rows_loader)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_pack_numpy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  return sluice_bench::run_main(argc, argv,
                                {{"BM_fields_direct_collate", "BM_fields_direct_memcpy"},
                                 {"BM_fields_loader/1", "BM_fields_direct_memcpy"},
                                 {"BM_pack_direct", "BM_pack_memcpy"},
                                 {"BM_pack_direct", "BM_pack_numpy"},
                                 {"BM_packed_rows_direct/1", "BM_pack_memcpy"},
                                 {"BM_packed_rows_direct/3", "BM_pack_memcpy"},
                                 {"BM_packed_rows_direct/3", "BM_packed_rows_handwritten"},
                                 {"BM_pack_numpy", "BM_pack_memcpy"}});
}
