// sluice/stage/pack_rows.hpp — a fixed token budget a step: documents streamed into rows of L
// tokens, R rows a batch, static shapes, deterministic and resumable at any row.
//
// packed_rows(docs, order, {.length = L}) turns a document dataset and a document order into a
// dataset of rows: row r of epoch e is tokens [r L, (r + 1) L) of the documents laid end to end in
// the order's epoch-e sequence (a document cut at a row's end continues in the next row), or, with
// `.split = false`, whole documents a row (next-fit, or best-fit over `.bins` open rows). Each row
// has "tokens", and on demand "doc_ids" (the document's global index, -1 on padding),
// "position_ids" (restarting in each document) and "cu_seqlens" (int32 {L + 1}: the row's segment
// boundaries, static shape); flat_cu_seqlens joins a batch's rows for variable-length attention.
// A field not collated is never written.
// Errors: with `.split = false`, a document longer than L is a format_error naming the tokens file
// and the document, raised for the row that would hold it.
// Determinism: a row depends only on (order, epoch, row): bit-identical batches for any worker
// count, and a loader_state resumes at its row. The epoch's plan is made once, by the first worker
// that needs it. A picture of one batch and every rule: docs/tokens.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/state.hpp"

namespace sluice {

struct packed_rows_options {
  std::size_t length = 2048;  // L: tokens a row
  bool split = true;          // a document may continue in the next row; false: whole documents only
  std::uint64_t pad = 0;      // the token of the space no document fills
  // .split = false: rows open at once. 1: each document goes to the current row, or starts the
  // next (in the order). More: best-fit, each document into the open row it fills most closely.
  std::size_t bins = 1;
};

namespace detail {
// Where each document of an epoch's order starts in the token stream (with .split = false, after
// the padding that moved it to a new row), and the stream's length.
struct packed_plan {
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> start;  // by position in the order
  std::vector<std::uint64_t> doc;    // the document at each position (the order's at(epoch, p))
  std::uint64_t tokens = 0;          // stream length, padding between documents included
  std::vector<std::size_t> too_long;  // .split = false: positions of documents longer than L
};
}  // namespace detail

template <class Docs, class Order>
class packed_rows_stage;

// The rows of a packed_rows: a sampler over row indices (size(epoch) = rows in that epoch).
template <class Docs, class Order>
class packed_rows_sampler {
 public:
  using sampler_concept = sampler_tag;
  explicit packed_rows_sampler(std::shared_ptr<const typename packed_rows_stage<Docs, Order>::shared> s) : s_(std::move(s)) {}
  [[nodiscard]] std::size_t size(std::uint64_t epoch) const { return static_cast<std::size_t>(s_->rows(epoch)); }
  [[nodiscard]] std::uint64_t at(std::uint64_t /*epoch*/, std::uint64_t pos) const noexcept { return pos; }
  [[nodiscard]] sampler_fingerprint fingerprint() const { return s_->fingerprint(); }

 private:
  std::shared_ptr<const typename packed_rows_stage<Docs, Order>::shared> s_;
};

template <class Docs, class Order>
class packed_rows_stage {
 public:
  using stage_concept = sample_stage_tag;
  static constexpr std::string_view name = "packed_rows";
  using token_type = typename Docs::token_type;
  using schema_type = schema<field<"tokens", token_type>, field<"doc_ids", std::int32_t>, field<"position_ids", std::int32_t>,
                             field<"cu_seqlens", std::int32_t>>;

  // What the stage and its sampler share: the dataset, the order, the options, the epoch plans.
  class shared {
   public:
    shared(std::shared_ptr<const Docs> own, const Docs& d, Order o, packed_rows_options opt)
        : owned(std::move(own)), docs(&d), order(std::move(o)), opt(opt) {
      if (opt.length == 0) throw usage_error("sluice: packed_rows: .length must be at least 1");
      if (opt.length > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw usage_error("sluice: packed_rows: .length must fit in int32 positions");
      if (opt.bins == 0) throw usage_error("sluice: packed_rows: .bins must be at least 1 (1: next-fit, more: best-fit)");
      if (d.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw usage_error("sluice: packed_rows: " + std::to_string(d.size()) +
                          " documents: doc_ids are int32, so at most 2^31 - 1 documents (split the dataset)");
      if (static_cast<std::uint64_t>(static_cast<token_type>(opt.pad)) != opt.pad)
        throw usage_error("sluice: packed_rows: .pad " + std::to_string(opt.pad) + " does not fit the token type");
    }
    std::shared_ptr<const Docs> owned;  // set when the stage owns the dataset (an rvalue was given)
    const Docs* docs;
    Order order;
    packed_rows_options opt;

    [[nodiscard]] std::uint64_t rows(std::uint64_t epoch) const {
      const std::uint64_t t = opt.split ? docs->tokens() : plan(epoch)->tokens;
      return (t + opt.length - 1) / opt.length;
    }
    // The order's (with its seed: a state of another shuffle is refused), with L, split, pad and
    // the dataset's size and token count.
    [[nodiscard]] sampler_fingerprint fingerprint() const {
      sampler_fingerprint f = fingerprint_of(order, 0);
      f.kind = "packed_rows(" + f.kind + ")";
      fingerprint_hash h;
      h.add(f.params)
          .add(static_cast<std::uint64_t>(opt.length))
          .add(static_cast<std::uint64_t>(opt.split ? 1 : 0))
          .add(opt.pad)
          .add(static_cast<std::uint64_t>(docs->size()))
          .add(static_cast<std::uint64_t>(docs->tokens()));
      if (!opt.split && opt.bins > 1) h.add(std::string_view("best-fit")).add(static_cast<std::uint64_t>(opt.bins));
      f.params = h.value();
      return f;
    }
    // The plan of `epoch`, made once (under a mutex: the first worker to need it makes it).
    std::shared_ptr<const detail::packed_plan> plan(std::uint64_t epoch) const {
      std::lock_guard lk(m_);
      for (const auto& p : plans_)
        if (p && p->epoch == epoch) return p;
      auto p = std::make_shared<detail::packed_plan>();
      p->epoch = epoch;
      const std::size_t n = order.size(epoch);
      p->start.resize(n);
      p->doc.resize(n);
      if (!opt.split && opt.bins > 1) best_fit(*p, epoch, n);
      else next_fit(*p, epoch, n);
      plans_[next_] = p;
      next_ ^= 1;
      return p;
    }

   private:
    std::uint64_t checked_doc(std::uint64_t epoch, std::size_t i) const {
      const std::uint64_t d = order.at(epoch, i);
      if (d >= docs->size())
        throw usage_error("sluice: packed_rows: the order gives document " + std::to_string(d) + ", past the dataset's " +
                          std::to_string(docs->size()));
      return d;
    }
    // Documents in the order's sequence, each where the last ended or (whole documents, .bins 1)
    // at the next row when it does not fit the rest of this one.
    void next_fit(detail::packed_plan& p, std::uint64_t epoch, std::size_t n) const {
      const std::uint64_t L = opt.length;
      std::uint64_t at = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t d = checked_doc(epoch, i);
        const std::uint64_t len = docs->length(static_cast<std::size_t>(d));
        if (!opt.split && len > 0) {
          if (len > L) p.too_long.push_back(i);
          if (len <= L && at % L + len > L) at = (at + L - 1) / L * L;  // to the next row
          if (len > L && at % L != 0) at = (at + L - 1) / L * L;         // refused, but keep the rows apart
        }
        p.doc[i] = d;
        p.start[i] = at;
        at += len;
      }
      p.tokens = at;
    }
    // .bins > 1: best-fit over that many open rows (see the top of this file). The plan lists the
    // documents in stream order (rows as they are closed), so starts rise as next-fit's do.
    void best_fit(detail::packed_plan& p, std::uint64_t epoch, std::size_t n) const {
      const std::uint64_t L = opt.length;
      struct row {
        std::uint64_t fill = 0, opened = 0;
        std::vector<std::uint64_t> docs;
      };
      std::vector<row> open;
      std::uint64_t at = 0, opened = 0;
      std::size_t w = 0;
      auto emit = [&](std::uint64_t d, std::uint64_t start) {
        p.doc[w] = d;
        p.start[w] = start;
        ++w;
      };
      auto close = [&](std::size_t k) {
        std::uint64_t off = 0;
        for (const std::uint64_t d : open[k].docs) {
          emit(d, at + off);
          off += docs->length(static_cast<std::size_t>(d));
        }
        at += L;
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
      };
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t d = checked_doc(epoch, i);
        const std::uint64_t len = docs->length(static_cast<std::size_t>(d));
        if (len == 0) {  // takes no room: where the stream is now
          emit(d, at);
          continue;
        }
        if (len > L) {  // refused when its rows are read; rows of its own meanwhile
          p.too_long.push_back(w);
          emit(d, at);
          at += (len + L - 1) / L * L;
          continue;
        }
        std::size_t best = open.size();
        for (std::size_t k = 0; k < open.size(); ++k)
          if (L - open[k].fill >= len && (best == open.size() || open[k].fill > open[best].fill)) best = k;
        if (best == open.size()) {
          if (open.size() >= opt.bins) {
            std::size_t fullest = 0;
            for (std::size_t k = 1; k < open.size(); ++k)
              if (open[k].fill > open[fullest].fill) fullest = k;
            close(fullest);
          }
          open.push_back({0, opened++, {}});
          best = open.size() - 1;
        }
        open[best].fill += len;
        open[best].docs.push_back(d);
      }
      while (!open.empty()) close(0);  // oldest first: `open` is in the order rows were opened
      // The last row's padding is not part of the stream (as next-fit leaves it).
      std::uint64_t end = 0;
      for (std::size_t j = 0; j < w; ++j) end = std::max(end, p.start[j] + docs->length(static_cast<std::size_t>(p.doc[j])));
      p.tokens = end;
    }

    mutable std::mutex m_;
    mutable std::shared_ptr<const detail::packed_plan> plans_[2];
    mutable int next_ = 0;
  };

  // One row: its fields are written from the documents when collate asks (three short walks).
  struct sample {
    using schema_type = packed_rows_stage::schema_type;
    std::uint64_t id = 0;
    std::string_view origin;
    std::shared_ptr<const detail::packed_plan> plan;
    const shared* s = nullptr;

    template <fixed_string N>
    [[nodiscard]] std::size_t size_of() const noexcept {
      const std::size_t n = s->opt.length + (N == fixed_string("cu_seqlens") ? 1 : 0);
      return n * sizeof(typename schema_type::template field_t<N>::value_type);
    }
    template <fixed_string N>
    void write(std::span<std::byte> dst, const sample_context&) const {
      using T = typename schema_type::template field_t<N>::value_type;
      const std::uint64_t L = s->opt.length, row0 = id * L;
      T* out = reinterpret_cast<T*>(dst.data());
      if constexpr (N == fixed_string("cu_seqlens")) {
        // Where each segment ends (a run of padding or a document's piece), after the 0 it
        // starts from; then L repeated to L + 1 values (empty segments: a static shape).
        std::size_t n = 0;
        out[0] = 0;
        walk([&](std::uint64_t, std::uint64_t b) { out[++n] = static_cast<T>(b - row0); },
             [&](std::size_t, std::uint64_t, std::uint64_t b) { out[++n] = static_cast<T>(b - row0); });
        std::fill(out + n + 1, out + L + 1, static_cast<T>(L));
      } else {
        // Padding: the pad token, document -1, position 0.
        auto pad = [&](std::uint64_t a, std::uint64_t b) {
          if constexpr (N == fixed_string("tokens")) std::fill(out + (a - row0), out + (b - row0), static_cast<T>(s->opt.pad));
          else if constexpr (N == fixed_string("doc_ids")) std::fill(out + (a - row0), out + (b - row0), T{-1});
          else std::fill(out + (a - row0), out + (b - row0), T{0});
        };
        walk(pad, [&](std::size_t p, std::uint64_t a, std::uint64_t b) {
          const std::uint64_t d = plan->doc[p], from = a - plan->start[p];
          T* o = out + (a - row0);
          if constexpr (N == fixed_string("tokens")) {
            // This piece's tokens only, checked against the vocabulary (io::token_documents::piece).
            const auto t = s->docs->piece(static_cast<std::size_t>(d), static_cast<std::size_t>(from),
                                          static_cast<std::size_t>(b - a));
            std::memcpy(o, t.data(), t.size_bytes());
          } else if constexpr (N == fixed_string("doc_ids")) {
            std::fill(o, o + (b - a), static_cast<T>(d));
          } else {
            T v = static_cast<T>(from);  // an int32 counter: the loop vectorises
            for (T* e = o + (b - a); o != e; ++o) *o = v++;
          }
        });
      }
    }

   private:
    // The row [row0, row0 + L) in stream order: pad(a, b) for each run of padding, piece(p, a, b)
    // for each non-empty piece of the document at plan position p.
    template <class Pad, class Piece>
    void walk(Pad&& pad, Piece&& piece) const {
      const std::uint64_t L = s->opt.length, row0 = id * L, row1 = row0 + L;
      const auto& st = plan->start;
      // The first document that ends after row0: the last that starts at or before it, or later.
      std::size_t p = static_cast<std::size_t>(std::upper_bound(st.begin(), st.end(), row0) - st.begin());
      if (p > 0) --p;
      std::uint64_t cur = row0;  // every position before it is walked
      for (; p < st.size() && st[p] < row1; ++p) {
        const std::uint64_t len = s->docs->length(static_cast<std::size_t>(plan->doc[p]));
        const std::uint64_t a = std::max(st[p], row0), b = std::min(st[p] + len, row1);
        if (a >= b) continue;
        if (a > cur) pad(cur, a);
        piece(p, a, b);
        cur = b;
      }
      if (cur < row1) pad(cur, row1);
    }
  };

  packed_rows_stage(const Docs& docs, Order order, packed_rows_options opt = {})
      : s_(std::make_shared<shared>(nullptr, docs, std::move(order), opt)) {}
  packed_rows_stage(std::shared_ptr<const Docs> docs, Order order, packed_rows_options opt = {})
      : s_(std::make_shared<shared>(docs, *docs, std::move(order), opt)) {}

  // The sampler of this packing's rows: from(rows.sampler()) | rows | collate(...).
  [[nodiscard]] packed_rows_sampler<Docs, Order> sampler() const { return packed_rows_sampler<Docs, Order>(s_); }
  [[nodiscard]] std::uint64_t rows(std::uint64_t epoch) const { return s_->rows(epoch); }

  sample operator()(sample_id id, const sample_context& ctx) const {
    auto plan = s_->plan(ctx.epoch);
    const std::uint64_t L = s_->opt.length;
    if (id.value >= (plan->tokens + L - 1) / L)
      throw format_error(std::string(s_->docs->path()), {.record = id.value},
                         "row " + std::to_string(id.value) + " is past the epoch's last row (" +
                             std::to_string((plan->tokens + L - 1) / L) + " rows)");
    if (!plan->too_long.empty()) {
      // .split = false: a row that would hold a document longer than L fails, naming it. The
      // documents are in stream order: the last one starting at or before this row's end.
      const auto& tl = plan->too_long;
      const std::uint64_t row1 = (id.value + 1) * L;
      auto it = std::upper_bound(tl.begin(), tl.end(), row1, [&](std::uint64_t r, std::size_t p) { return r <= plan->start[p]; });
      if (it != tl.begin()) {
        const std::size_t p = *(it - 1);
        const std::uint64_t len = s_->docs->length(static_cast<std::size_t>(plan->doc[p]));
        if (plan->start[p] + len > id.value * L)
          throw format_error(std::string(s_->docs->path()), {.record = plan->doc[p]},
                             "document " + std::to_string(plan->doc[p]) + " has " + std::to_string(len) +
                                 " tokens, more than a row of " + std::to_string(L) +
                                 " (packed_rows .split = false keeps documents whole)");
      }
    }
    return sample{id.value, s_->docs->path(), std::move(plan), s_.get()};
  }

 private:
  std::shared_ptr<shared> s_;
};

// The segments of a batch of packed rows as one sequence, as variable-length attention kernels
// take them (flash_attn_varlen_func's cu_seqlens_q/k and max_seqlen): `rows` is the batch's
// "cu_seqlens" field, {R, L + 1} int32 row by row; the result is R x L tokens' boundaries
// (0, ..., R x L), each row's segments offset by its start, the empty ones left out.
struct varlen_segments {
  std::vector<std::int32_t> cu_seqlens;  // segments + 1 values, rising, from 0 to R x L
  std::int32_t max_seqlen = 0;           // the longest segment
};
inline varlen_segments flat_cu_seqlens(std::span<const std::int32_t> rows, std::size_t length) {
  if (length == 0 || rows.size() % (length + 1) != 0)
    throw usage_error("sluice: flat_cu_seqlens: " + std::to_string(rows.size()) + " values are not rows of length + 1 = " +
                      std::to_string(length + 1) + " (pass the batch's \"cu_seqlens\" and the rows' length)");
  const std::size_t R = rows.size() / (length + 1);
  if (R * length > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw usage_error("sluice: flat_cu_seqlens: " + std::to_string(R * length) + " tokens overflow int32 cu_seqlens");
  varlen_segments v;
  v.cu_seqlens.reserve(R * 4 + 1);
  v.cu_seqlens.push_back(0);
  for (std::size_t r = 0; r < R; ++r) {
    const std::int32_t* c = rows.data() + r * (length + 1);
    const auto base = static_cast<std::int32_t>(r * length);
    if (c[0] != 0 || c[length] != static_cast<std::int32_t>(length))
      throw usage_error("sluice: flat_cu_seqlens: row " + std::to_string(r) + " does not run from 0 to " +
                        std::to_string(length) + " (is `length` the rows' length?)");
    for (std::size_t k = 1; k <= length && c[k - 1] != static_cast<std::int32_t>(length); ++k) {
      if (c[k] < c[k - 1]) throw usage_error("sluice: flat_cu_seqlens: row " + std::to_string(r) + " falls at " + std::to_string(k));
      if (c[k] == c[k - 1]) continue;
      v.max_seqlen = std::max(v.max_seqlen, c[k] - c[k - 1]);
      v.cu_seqlens.push_back(base + c[k]);
    }
  }
  return v;
}

// packed_rows(docs, order, {.length = L}): docs is a token-document dataset (io::token_documents):
// an lvalue is referenced (it must outlive the loader), an rvalue is moved into the stage; order
// is a sampler over its documents.
template <class Docs, class Order>
  requires sampler<std::decay_t<Order>>
packed_rows_stage<Docs, std::decay_t<Order>> packed_rows(const Docs& docs, Order&& order, packed_rows_options opt = {}) {
  return packed_rows_stage<Docs, std::decay_t<Order>>(docs, std::forward<Order>(order), opt);
}
template <class Docs, class Order>
  requires(sampler<std::decay_t<Order>> && !std::is_lvalue_reference_v<Docs>)
packed_rows_stage<Docs, std::decay_t<Order>> packed_rows(Docs&& docs, Order&& order, packed_rows_options opt = {}) {
  return packed_rows_stage<Docs, std::decay_t<Order>>(std::make_shared<const Docs>(std::move(docs)),
                                                      std::forward<Order>(order), opt);
}

}  // namespace sluice
