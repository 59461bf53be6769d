// The Python module's token sources: next-token windows and documents (packed or padded).
#include "pipelines.hpp"

#include "sluice/io/tokens.hpp"

namespace sluice_module {

namespace {
template <class T>
std::shared_ptr<sluice::python::py_loader> token_loader(const options& o) {
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  if (o.source == "tokens") {
    sluice::io::token_windows<T> w(o.path, {.length = o.length, .stride = o.stride, .vocab = o.vocab});
    const std::size_t n = w.size();
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(w)) |
                                  sluice::collate(bo, sluice::stack<"input">{}, sluice::stack<"target">{}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  }
  if (o.offsets.empty()) throw py::value_error("sluice.loader: source='documents' needs offsets= (n_docs + 1 uint64)");
  sluice::io::token_documents<T> d(o.path, o.offsets, {.vocab = o.vocab});
  const std::size_t n = d.size();
  if (o.collate == "pack")
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(d)) |
                                  sluice::collate(bo, sluice::pack<"tokens">{.length = o.length, .value = o.pad_value}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  if (o.collate == "pad")
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(d)) |
                                  sluice::collate(bo, sluice::pad<"tokens">{.value = o.pad_value, .length = o.length,
                                                                            .mask = true, .truncate = o.length != 0}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  bad_value("collate", "'" + o.collate + "'", "'pack' (rows of length= with doc ids, positions, cu_seqlens) or 'pad'");
}

}  // namespace

loader_ptr make_token_loader(const options& o) {
  if (o.path.empty()) throw py::value_error("sluice.loader: source='" + o.source + "' needs path= (a token file)");
  if (o.length == 0 && (o.source == "tokens" || o.collate == "pack"))
    throw py::value_error("sluice.loader: length= must be at least 1 here");
  if (o.dtype == "uint16") return token_loader<std::uint16_t>(o);
  if (o.dtype == "uint32") return token_loader<std::uint32_t>(o);
  bad_value("dtype", "'" + o.dtype + "'", "'uint16' or 'uint32' (the token file's element type)");
}

}  // namespace sluice_module
