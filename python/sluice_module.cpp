// The Python module `sluice`: common pipelines chosen at run time from keyword arguments, each
// combination a concrete loader type compiled in source_*.cpp (no per-sample virtual call; one
// virtual call per batch, in include/sluice/python/bind.hpp's loader_handle).
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
//           "npy"      path= an .npy array (a sample is a row), labels= an optional 1-D integer .npy
//           "shard"    path= a sluice shard (sluice-pack's output); records as stored (they must all
//                      be the same size within a batch), or decode="jpeg" with size=(h, w),
//                      random_resized_crop=, flip=, layout=: decoded (JPEG, or PNG too where libpng
//                      is built in), then collated as "data"/"label". A shard with fields
//                      (sluice-pack --fields/--features) with decode="jpeg": the field
//                      image_field= (default "jpg") decoded, the shard's label of each record (or
//                      the field label_field=, one integer) the label; batches {"image", "label"}
//           "wds"      path= WebDataset shards (a list or "train-{000000..000127}.tar") for image
//                      classification: <key>.<image_field> (default "jpg;jpeg;png": any of them)
//                      decoded (JPEG or PNG by the first bytes) to size=(h, w) with
//                      random_resized_crop=, flip=, in layout= "chw" (default) or "hwc";
//                      <key>.<label_field> (default "cls") the label. Batches {"image", "label"}.
//           "tfrecord" path= a TFRecord file of tf.train.Example: the feature image_field= (default
//                      "image/encoded", ImageNet's convention) decoded like "wds", label_field=
//                      (default "image/class/label") the label.
//           "mds"      path= a MosaicML Streaming (MDS) dataset: its directory or index.json, as
//                      MDSWriter wrote it; the column image_field= (default "image": jpeg, png or
//                      bytes) decoded like "wds", the column label_field= (default "label": int or
//                      int64) the label. Batches {"image", "label"}.
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
// Prefetch: prefetch= batches ahead (default 2); depth="adaptive" lets depth::adaptive move it
//           (from prefetch= up to max(16, prefetch), within ram_budget= bytes when non-zero) to hold
//           the stall under 4 %; max_workers= above workers= lets workers::autotune add and
//           remove worker threads between 1 and max_workers (policy/workers.hpp). The batches
//           are the same whatever these choose.
// Output:   records and images: "uint8" as stored (the default), or "float32" scaled by 1/255 then
//           (x - mean) / std per channel; shape= the per-sample shape of "data" (default: flat).
//           Tokens: the file's dtype (the default), or "int64": every token tensor widened to
//           int64 while it is written into the batch (PyTorch before 2.3 has no uint16/uint32
//           tensors; embeddings take int64 ids).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "pipelines.hpp"

namespace py = pybind11;

using namespace sluice_module;

namespace {

loader_ptr make_loader(const options& o) {
  if (o.batch_size == 0) throw py::value_error("sluice.loader: batch_size must be at least 1");
  if (o.workers == 0) throw py::value_error("sluice.loader: workers must be at least 1");
  const bool images = o.source == "wds" || o.source == "tfrecord" || o.source == "mds" || (o.source == "shard" && !o.decode.empty());
  if (!images && (!o.image_field.empty() || !o.label_field.empty()))
    throw py::value_error("sluice.loader: image_field= and label_field= name the image and label of the image sources "
                          "('wds', 'tfrecord', 'mds', 'shard' with decode=); source='" + o.source + "'" +
                          (o.source == "shard" ? " without decode=" : "") + " takes neither");
  if (o.source == "idx" || o.source == "records" || o.source == "npy" || (o.source == "shard" && o.decode.empty()))
    return make_records_loader(o);
  if (o.source == "shard" || o.source == "wds" || o.source == "tfrecord" || o.source == "mds") return make_image_loader(o);
  if (o.source == "tokens" || o.source == "documents") return make_token_loader(o);
  bad_value("source", "'" + o.source + "'", "'idx', 'records', 'npy', 'shard', 'wds', 'tfrecord', 'mds', 'tokens' or 'documents'");
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
         std::uint64_t vocab, double pad_value, std::vector<double> sample_weights, std::string depth,
         std::size_t max_workers, std::uint64_t ram_budget, std::string image_field, std::string label_field) {
        options o{std::move(source), std::move(path), std::move(images), std::move(labels), std::move(decode),
                  record_bytes, header_bytes, batch_size, std::move(sampler), std::move(weights), seed, distributed,
                  drop_last, workers, prefetch, std::move(output), std::move(shape), std::move(mean), std::move(std),
                  std::move(size), random_resized_crop, flip, std::move(errors), std::move(layout),
                  std::move(offsets), std::move(dtype), std::move(collate), length, stride, vocab, pad_value,
                  std::move(sample_weights), max_workers, std::move(depth), ram_budget, std::move(image_field),
                  std::move(label_field)};
        py::gil_scoped_release nogil;  // opening files, scanning indexes
        auto l = make_loader(o);
        return l;
      },
      py::arg("source"), py::kw_only(), py::arg("path") = "", py::arg("images") = "", py::arg("labels") = "",
      py::arg("record_bytes") = 0, py::arg("header_bytes") = 0, py::arg("batch_size") = 64,
      py::arg("sampler") = "shuffle", py::arg("weights") = "inverse_log", py::arg("seed") = 0,
      py::arg("distributed") = false, py::arg("drop_last") = false, py::arg("workers") = 2, py::arg("prefetch") = 2,
      py::arg("output") = "", py::arg("shape") = std::vector<std::int64_t>{},
      py::arg("mean") = std::vector<float>{}, py::arg("std") = std::vector<float>{}, py::arg("decode") = "",
      py::arg("size") = std::vector<int>{}, py::arg("random_resized_crop") = false, py::arg("flip") = false,
      py::arg("errors") = "raise", py::arg("layout") = "chw", py::arg("offsets") = "", py::arg("dtype") = "uint16",
      py::arg("collate") = "pack", py::arg("length") = 1024, py::arg("stride") = 0, py::arg("vocab") = 0,
      py::arg("pad_value") = 0.0, py::arg("sample_weights") = std::vector<double>{}, py::arg("depth") = "fixed",
      py::arg("max_workers") = 0, py::arg("ram_budget") = 0, py::arg("image_field") = "",
      py::arg("label_field") = "",
      "A loader of a common pipeline; see the module's documentation for the keywords.");
}
