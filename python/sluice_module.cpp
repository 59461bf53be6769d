// The Python module `sluice`: common pipelines chosen at run time from keyword arguments, each
// combination a concrete loader type compiled here (no per-sample virtual call; one virtual call
// per batch, in python/bind.hpp's loader_handle).
//
//   import sluice, torch
//   loader = sluice.loader("idx", images="train-images-idx3-ubyte.gz", labels="train-labels-idx1-ubyte.gz",
//                          batch_size=256, sampler="class_balanced", weights="inverse_log", seed=7,
//                          workers=2, output="float32", shape=(1, 28, 28))
//   for epoch in range(10):
//       loader.set_epoch(epoch)
//       for batch in loader:
//           x = torch.from_dlpack(batch["data"]); y = torch.from_dlpack(batch["label"])
//
// Sources:  "idx"      images= (and labels=) IDX files, plain or .gz (the MNIST family)
//           "records"  path= a file of fixed-size records, record_bytes=, labels= (int64 per record,
//                      optional), header_bytes=
//           "shard"    path= a sluice shard (sluice-pack's output); records as stored (they must all
//                      be the same size within a batch), or decode="jpeg" with size=(h, w),
//                      random_resized_crop=, flip=: decoded to u8 HWC, then collated
//           "wds"      path= WebDataset shards (a list or "train-{000000..000127}.tar") for image
//                      classification: <key>.jpg/.jpeg/.png decoded (JPEG or PNG by the first
//                      bytes) to size=(h, w) with random_resized_crop=, flip=, in layout= "chw"
//                      (default) or "hwc"; <key>.cls the label. Batches {"image", "label"}.
//           "tokens"   path= a flat token file (dtype= "uint16" or "uint32", as numpy tofile writes),
//                      windows of length= (stride=, vocab= checked): {"input", "target"}
//           "documents" path= tokens + offsets= (n_docs + 1 uint64): collate="pack" rows of length=
//                      with "tokens.doc_ids", ".position_ids", ".cu_seqlens", or "pad" (to the
//                      longest, or to length= truncating) with "tokens.lengths" and ".mask"
// Samplers: "sequential", "shuffle", "weighted" (sample_weights= one per sample: draws with
//           replacement, alias method), "class_balanced" (weights "inverse_log": 1/log(1 + n), the
//           default, or "inverse_frequency": 1/n), each split across ranks when distributed=True
//           (rank and world from torchrun's or mpirun's environment; a single process is rank 0
//           of 1).
// Output:   "uint8" as stored, or "float32" scaled by 1/255 then (x - mean) / std per channel;
//           shape= the per-sample shape of "data" (default: flat).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/io/fixed_records.hpp"
#include "sluice/io/idx.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/tokens.hpp"
#include "sluice/python/bind.hpp"
#include "sluice/sample/alias.hpp"
#include "sluice/sample/class_balanced.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/rank.hpp"
#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/jpeg.hpp"
#include "sluice/io/wds.hpp"
#endif
#if SLUICE_WITH_TURBOJPEG && SLUICE_WITH_PNG
#include "sluice/codec/image.hpp"
#endif

namespace py = pybind11;

namespace {

struct options {
  std::string source;
  std::string path, images, labels, decode;
  std::size_t record_bytes = 0, header_bytes = 0;
  std::size_t batch_size = 64;
  std::string sampler = "shuffle", weights = "inverse_log";
  std::uint64_t seed = 0;
  bool distributed = false, drop_last = false;
  std::size_t workers = 2, prefetch = 2;
  std::string output = "uint8";
  std::vector<std::int64_t> shape;
  std::vector<float> mean, std;
  std::vector<int> size;
  bool random_resized_crop = false, flip = false;
  std::string errors = "raise";
  std::string layout = "chw";
  std::string offsets, dtype = "uint16", collate = "pack";
  std::size_t length = 1024, stride = 0;
  std::uint64_t vocab = 0;
  double pad_value = 0;
  std::vector<double> sample_weights;
};

[[noreturn]] void bad_value(const std::string& arg, const std::string& got, const std::string& accepted) {
  throw py::value_error("sluice.loader: " + arg + "=" + got + " is not accepted; use " + accepted);
}

sluice::collate_options collate_of(const options& o) {
  sluice::collate_options c{.batch = o.batch_size, .drop_last = o.drop_last};
  if (o.output == "float32") c.output = sluice::dtype::f32;
  else if (o.output != "uint8") bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  c.mean = o.mean;
  c.std = o.std;
  c.shape = o.shape;
  if (!o.mean.empty()) c.channels = o.mean.size();
  return c;
}

sluice::loader_options loader_opts(const options& o) {
  sluice::loader_options l{.workers = o.workers, .seed = o.seed};
  if (o.errors == "skip") l.errors = sluice::on_error::skip;
  else if (o.errors != "raise") bad_value("errors", "'" + o.errors + "'", "'raise' or 'skip'");
  return l;
}

sluice::sample::distributed_options rank_of(const options& o) {
  if (!o.distributed) return {};
  return sluice::sample::rank_from_environment().distributed({});
}

// Calls f(sampler) with the sampler the options name, for a dataset of n samples with `labels`.
template <class F>
auto with_sampler(const options& o, std::size_t n, const std::vector<std::int64_t>& labels, F&& f) {
  using namespace sluice::sample;  // samplers and weighting rules
  const auto r = rank_of(o);
  if (o.sampler == "sequential") return f(distributed{sequential(n), r});
  if (o.sampler == "shuffle") return f(distributed{shuffle(n, {.seed = o.seed}), r});
  if (o.sampler == "weighted") {
    if (o.sample_weights.size() != n)
      throw py::value_error("sluice.loader: sampler='weighted' needs sample_weights= with one weight per sample (" +
                            std::to_string(n) + "), got " + std::to_string(o.sample_weights.size()));
    return f(distributed{weighted(o.sample_weights, {.seed = o.seed}), r});
  }
  if (o.sampler == "class_balanced") {
    if (labels.empty()) throw py::value_error("sluice.loader: sampler='class_balanced' needs labels");
    if (o.weights == "inverse_log")
      return f(distributed{class_balanced<inverse_log>(labels, {}, {.seed = o.seed}), r});
    if (o.weights == "inverse_frequency")
      return f(distributed{class_balanced<inverse_frequency>(labels, {}, {.seed = o.seed}), r});
    bad_value("weights", "'" + o.weights + "'", "'inverse_log' (1/log(1+n)) or 'inverse_frequency' (1/n)");
  }
  bad_value("sampler", "'" + o.sampler + "'", "'sequential', 'shuffle', 'weighted' or 'class_balanced'");
}

template <class Reader>
std::shared_ptr<sluice::python::py_loader> records_loader(const options& o, Reader r, std::vector<std::int64_t> labels) {
  const std::size_t n = r.size();
  return with_sampler(o, n, labels, [&](auto s) {
    return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(r)) | sluice::collate(collate_of(o)) |
                                sluice::prefetch(o.prefetch, loader_opts(o)));
  });
}

#if SLUICE_WITH_TURBOJPEG
// WebDataset for image classification: <key>.jpg/.jpeg/.png (decoded) and <key>.cls (an integer).
using wds_classes = sluice::schema<sluice::field<"jpg;jpeg;png", std::uint8_t, sluice::variable>,
                                   sluice::field<"cls", std::int64_t>>;
#if SLUICE_WITH_PNG
using image_codec = sluice::codecs::image;  // JPEG or PNG, by the first bytes
#else
using image_codec = sluice::codecs::jpeg;
#endif

std::shared_ptr<sluice::python::py_loader> wds_loader(const options& o) {
  if (o.size.size() != 2 || o.size[0] <= 0 || o.size[1] <= 0)
    throw py::value_error("sluice.loader: source='wds' needs size=(height, width), both positive");
  if (o.layout != "chw" && o.layout != "hwc") bad_value("layout", "'" + o.layout + "'", "'chw' or 'hwc'");
  const auto layout = o.layout == "chw" ? sluice::image_layout::chw : sluice::image_layout::hwc;
  sluice::io::wds_dataset<wds_classes> data(o.path);
  // Labels for the class-balanced sampler; a sample that cannot be read gets -1 here (never drawn
  // by it) and fails, naming shard, key and field, when a sampler that draws it reads it.
  std::vector<std::int64_t> labels(data.size(), -1);
  if (o.sampler == "class_balanced") {
    for (std::size_t i = 0; i < data.size(); ++i) {
      try {
        const auto b = data.fields(i).bytes_of<"cls">();
        if (b.size() == sizeof(std::int64_t)) std::memcpy(&labels[i], b.data(), sizeof(std::int64_t));
      } catch (const sluice::error&) {
      }
    }
  }
  const image_codec codec({.width = o.size[1], .height = o.size[0],
                           .mode = o.random_resized_crop ? sluice::codecs::fit::random_resized_crop
                                                         : sluice::codecs::fit::crop,
                           .random_flip = o.flip, .layout = layout});
  const std::size_t n = data.size();
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  std::shared_ptr<sluice::python::py_loader> l;
  if (o.output == "float32") {
    l = with_sampler(o, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(data)) |
                                  sluice::decode<"jpg;jpeg;png">(codec) |
                                  sluice::collate(bo, sluice::normalized<"jpg;jpeg;png">{.mean = o.mean, .std = o.std},
                                                  sluice::stack<"cls">{}) |
                                  sluice::prefetch(o.prefetch, loader_opts(o)));
    });
  } else if (o.output == "uint8") {
    l = with_sampler(o, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(data)) |
                                  sluice::decode<"jpg;jpeg;png">(codec) |
                                  sluice::collate(bo, sluice::stack<"jpg;jpeg;png">{}, sluice::stack<"cls">{}) |
                                  sluice::prefetch(o.prefetch, loader_opts(o)));
    });
  } else {
    bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  }
  l->rename = {{"jpg;jpeg;png", "image"}, {"cls", "label"}};
  return l;
}
#endif

// Token data: only order samplers (sequential, shuffle) apply; there are no labels.
template <class F>
auto with_order_sampler(const options& o, std::size_t n, F&& f) {
  using namespace sluice::sample;
  const auto r = rank_of(o);
  if (o.sampler == "sequential") return f(distributed{sequential(n), r});
  if (o.sampler == "shuffle") return f(distributed{shuffle(n, {.seed = o.seed}), r});
  bad_value("sampler", "'" + o.sampler + "'", "'sequential' or 'shuffle' for token data (it has no labels)");
}

template <class T>
std::shared_ptr<sluice::python::py_loader> token_loader(const options& o) {
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  if (o.source == "tokens") {
    sluice::io::token_windows<T> w(o.path, {.length = o.length, .stride = o.stride, .vocab = o.vocab});
    const std::size_t n = w.size();
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(w)) |
                                  sluice::collate(bo, sluice::stack<"input">{}, sluice::stack<"target">{}) |
                                  sluice::prefetch(o.prefetch, loader_opts(o)));
    });
  }
  if (o.offsets.empty()) throw py::value_error("sluice.loader: source='documents' needs offsets= (n_docs + 1 uint64)");
  sluice::io::token_documents<T> d(o.path, o.offsets, {.vocab = o.vocab});
  const std::size_t n = d.size();
  if (o.collate == "pack")
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(d)) |
                                  sluice::collate(bo, sluice::pack<"tokens">{.length = o.length, .value = o.pad_value}) |
                                  sluice::prefetch(o.prefetch, loader_opts(o)));
    });
  if (o.collate == "pad")
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(d)) |
                                  sluice::collate(bo, sluice::pad<"tokens">{.value = o.pad_value, .length = o.length,
                                                                            .mask = true, .truncate = o.length != 0}) |
                                  sluice::prefetch(o.prefetch, loader_opts(o)));
    });
  bad_value("collate", "'" + o.collate + "'", "'pack' (rows of length= with doc ids, positions, cu_seqlens) or 'pad'");
}

std::shared_ptr<sluice::python::py_loader> make_loader(const options& o) {
  if (o.batch_size == 0) throw py::value_error("sluice.loader: batch_size must be at least 1");
  if (o.workers == 0) throw py::value_error("sluice.loader: workers must be at least 1");
  if (o.source == "idx") {
    if (o.images.empty()) throw py::value_error("sluice.loader: source='idx' needs images= (and labels=)");
    sluice::io::idx_reader r(o.images, o.labels);
    std::vector<std::int64_t> labels;
    if (r.has_labels())
      for (std::size_t i = 0; i < r.size(); ++i) labels.push_back(r.label(i));
    return records_loader(o, std::move(r), std::move(labels));
  }
  if (o.source == "records") {
    if (o.path.empty() || o.record_bytes == 0)
      throw py::value_error("sluice.loader: source='records' needs path= and record_bytes=");
    sluice::io::fixed_records r(o.path, {.record_bytes = o.record_bytes, .labels_path = o.labels, .header_bytes = o.header_bytes});
    auto labels = r.labels();
    if (!o.labels.empty()) return records_loader(o, std::move(r), std::move(labels));
    return records_loader(o, std::move(r), {});
  }
  if (o.source == "shard") {
    if (o.path.empty()) throw py::value_error("sluice.loader: source='shard' needs path=");
    sluice::io::shard_reader r(o.path);
    auto labels = r.labels();
    if (o.decode.empty()) return records_loader(o, std::move(r), std::move(labels));
#if SLUICE_WITH_TURBOJPEG
    if (o.decode != "jpeg") bad_value("decode", "'" + o.decode + "'", "'jpeg' (or leave it out: records as stored)");
    if (o.size.size() != 2 || o.size[0] <= 0 || o.size[1] <= 0)
      throw py::value_error("sluice.loader: decode='jpeg' needs size=(height, width), both positive");
    const sluice::codecs::jpeg codec({.width = o.size[1], .height = o.size[0],
                                      .mode = o.random_resized_crop ? sluice::codecs::fit::random_resized_crop
                                                                    : sluice::codecs::fit::crop,
                                      .random_flip = o.flip});
    const std::size_t n = r.size();
    return with_sampler(o, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(r)) | sluice::decode(codec) |
                                  sluice::collate(collate_of(o)) | sluice::prefetch(o.prefetch, loader_opts(o)));
    });
#else
    throw py::value_error("sluice.loader: decode='jpeg' needs a module built with TurboJPEG");
#endif
  }
  if (o.source == "tokens" || o.source == "documents") {
    if (o.path.empty()) throw py::value_error("sluice.loader: source='" + o.source + "' needs path= (a token file)");
    if (o.length == 0 && (o.source == "tokens" || o.collate == "pack"))
      throw py::value_error("sluice.loader: length= must be at least 1 here");
    if (o.dtype == "uint16") return token_loader<std::uint16_t>(o);
    if (o.dtype == "uint32") return token_loader<std::uint32_t>(o);
    bad_value("dtype", "'" + o.dtype + "'", "'uint16' or 'uint32' (the token file's element type)");
  }
  if (o.source == "wds") {
    if (o.path.empty()) throw py::value_error("sluice.loader: source='wds' needs path= (a shard, or a brace pattern)");
#if SLUICE_WITH_TURBOJPEG
    return wds_loader(o);
#else
    throw py::value_error("sluice.loader: source='wds' needs a module built with TurboJPEG");
#endif
  }
  bad_value("source", "'" + o.source + "'", "'idx', 'records', 'shard', 'wds', 'tokens' or 'documents'");
}

}  // namespace

PYBIND11_MODULE(sluice, m) {
  m.doc() = "sluice: C++ data pipelines for PyTorch training loops, zero-copy through DLPack.";
  sluice::python::register_types(m);
  m.def(
      "loader",
      [](std::string source, std::string path, std::string images, std::string labels, std::size_t record_bytes,
         std::size_t header_bytes, std::size_t batch_size, std::string sampler, std::string weights, std::uint64_t seed,
         bool distributed, bool drop_last, std::size_t workers, std::size_t prefetch, std::string output,
         std::vector<std::int64_t> shape, std::vector<float> mean, std::vector<float> std, std::string decode,
         std::vector<int> size, bool random_resized_crop, bool flip, std::string errors, std::string layout,
         std::string offsets, std::string dtype, std::string collate, std::size_t length, std::size_t stride,
         std::uint64_t vocab, double pad_value, std::vector<double> sample_weights) {
        options o{std::move(source), std::move(path), std::move(images), std::move(labels), std::move(decode),
                  record_bytes, header_bytes, batch_size, std::move(sampler), std::move(weights), seed, distributed,
                  drop_last, workers, prefetch, std::move(output), std::move(shape), std::move(mean), std::move(std),
                  std::move(size), random_resized_crop, flip, std::move(errors), std::move(layout),
                  std::move(offsets), std::move(dtype), std::move(collate), length, stride, vocab, pad_value,
                  std::move(sample_weights)};
        py::gil_scoped_release nogil;  // opening files, scanning indexes
        auto l = make_loader(o);
        return l;
      },
      py::arg("source"), py::kw_only(), py::arg("path") = "", py::arg("images") = "", py::arg("labels") = "",
      py::arg("record_bytes") = 0, py::arg("header_bytes") = 0, py::arg("batch_size") = 64,
      py::arg("sampler") = "shuffle", py::arg("weights") = "inverse_log", py::arg("seed") = 0,
      py::arg("distributed") = false, py::arg("drop_last") = false, py::arg("workers") = 2, py::arg("prefetch") = 2,
      py::arg("output") = "uint8", py::arg("shape") = std::vector<std::int64_t>{},
      py::arg("mean") = std::vector<float>{}, py::arg("std") = std::vector<float>{}, py::arg("decode") = "",
      py::arg("size") = std::vector<int>{}, py::arg("random_resized_crop") = false, py::arg("flip") = false,
      py::arg("errors") = "raise", py::arg("layout") = "chw", py::arg("offsets") = "", py::arg("dtype") = "uint16",
      py::arg("collate") = "pack", py::arg("length") = 1024, py::arg("stride") = 0, py::arg("vocab") = 0,
      py::arg("pad_value") = 0.0, py::arg("sample_weights") = std::vector<double>{},
      "A loader of a common pipeline; see the module's documentation for the keywords.");
}
