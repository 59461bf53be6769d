// The Python module's token sources: next-token windows and documents (packed or padded), the
// token ids as stored (uint16 or uint32) or widened to int64 (output="int64": PyTorch before 2.3
// has no uint16/uint32 tensors, and embeddings take int64 ids).
#include "pipelines.hpp"

#include <type_traits>

#include "sluice/io/tokens.hpp"
#include "sluice/stage/convert.hpp"
#include "sluice/stage/pack_rows.hpp"

namespace sluice_module {

namespace {

// The pipeline p with the token fields Names converted to Out (void: as stored).
template <class Out, sluice::fixed_string... Names, class P>
auto widened(P&& p) {
  if constexpr (std::is_void_v<Out>) return std::forward<P>(p);
  else return (std::forward<P>(p) | ... | sluice::convert<Names, Out>());
}

template <class T, class Out>
std::shared_ptr<sluice::python::py_loader> token_loader(const options& o) {
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  if (o.source == "tokens") {
    sluice::io::token_windows<T> w(o.path, {.length = o.length, .stride = o.stride, .vocab = o.vocab});
    const std::size_t n = w.size();
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(widened<Out, "input", "target">(sluice::from(std::move(s)) | sluice::read(std::move(w))) |
                                  sluice::collate(bo, sluice::stack<"input">{}, sluice::stack<"target">{}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  }
  if (o.offsets.empty()) throw sluice::usage_error("sluice: source='documents' needs offsets= (n_docs + 1 uint64)");
  sluice::io::token_documents<T> d(o.path, o.offsets, {.vocab = o.vocab});
  const std::size_t n = d.size();
  if (o.collate == "pack")
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(widened<Out, "tokens">(sluice::from(std::move(s)) | sluice::read(std::move(d))) |
                                  sluice::collate(bo, sluice::pack<"tokens">{.length = o.length, .value = o.pad_value}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  if (o.collate == "rows") {
    // A fixed token budget a step: batch_size rows of length tokens, the documents streamed in
    // the sampler's order (the same stream on every rank); the ranks split the rows.
    if (o.pad_value < 0 || o.pad_value != static_cast<double>(static_cast<std::uint64_t>(o.pad_value)))
      bad_value("pad_value", std::to_string(o.pad_value), "a token id (a whole number >= 0)");
    options whole = o;
    whole.distributed = false;
    whole.rank = whole.world_size = -1;
    auto rows = sluice::packed_rows(std::move(d), with_order_sampler(whole, n, [](auto s) { return s; }),
                                    {.length = o.length, .split = o.split, .pad = static_cast<std::uint64_t>(o.pad_value),
                                     .bins = o.bins});
    sluice::sample::any_sampler s = sluice::sample::distributed{rows.sampler(), rank_of(o)};
    return sluice::python::wrap(widened<Out, "tokens">(sluice::from(std::move(s)) | std::move(rows)) |
                                sluice::collate(bo, sluice::stack<"tokens">{}, sluice::stack<"doc_ids">{},
                                                sluice::stack<"position_ids">{}, sluice::stack<"cu_seqlens">{}) |
                                sluice::prefetch(depth_of(o), loader_opts(o)));
  }
  if (o.collate == "pad")
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(widened<Out, "tokens">(sluice::from(std::move(s)) | sluice::read(std::move(d))) |
                                  sluice::collate(bo, sluice::pad<"tokens">{.value = o.pad_value, .length = o.length,
                                                                            .mask = true, .truncate = o.length != 0}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  bad_value("collate", "'" + o.collate + "'",
            "'pack' (a batch's documents into rows of length=), 'rows' (batch_size rows of length= tokens every "
            "batch, documents streamed across batches) or 'pad'");
}

template <class T>
std::shared_ptr<sluice::python::py_loader> token_loader_as(const options& o) {
  if (o.output.empty()) return token_loader<T, void>(o);
  if (o.output == "int64") return token_loader<T, std::int64_t>(o);
  bad_value("output", "'" + o.output + "'",
            "'int64' (token ids widened, for PyTorch before 2.3 and embeddings) or leave it out (the file's dtype)");
}

}  // namespace

loader_ptr make_token_loader(const options& o) {
  if (o.path.empty()) throw sluice::usage_error("sluice: source='" + o.source + "' needs path= (a token file)");
  if (o.length == 0 && (o.source == "tokens" || o.collate == "pack" || o.collate == "rows"))
    throw sluice::usage_error("sluice: length= must be at least 1 here");
  if (o.dtype == "uint16" || o.dtype.empty()) return token_loader_as<std::uint16_t>(o);
  if (o.dtype == "uint32") return token_loader_as<std::uint32_t>(o);
  bad_value("dtype", "'" + o.dtype + "'", "'uint16' or 'uint32' (the token file's element type)");
}

}  // namespace sluice_module
