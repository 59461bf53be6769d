// The Python module's record sources: IDX, fixed-size records, .npy, sluice shards as stored.
#include "pipelines.hpp"

#include "sluice/io/fixed_records.hpp"
#include "sluice/io/idx.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"

namespace sluice_module {

namespace {
template <class Reader>
std::shared_ptr<sluice::python::py_loader> records_loader(const options& o, Reader r, std::vector<std::int64_t> labels) {
  const std::size_t n = r.size();
  return with_sampler(o, n, labels, [&](auto s) {
    return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(r)) | sluice::collate(collate_of(o)) |
                                sluice::prefetch(depth_of(o), loader_opts(o)));
  });
}

}  // namespace

loader_ptr make_records_loader(const options& o) {
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
  if (o.source == "npy") {
    if (o.path.empty()) throw py::value_error("sluice.loader: source='npy' needs path= (an .npy array; a sample is a row)");
    sluice::io::npy_reader r(o.path, {.labels_path = o.labels});
    std::vector<std::int64_t> labels;
    if (!o.labels.empty())
      for (std::size_t i = 0; i < r.size(); ++i) labels.push_back(r.label(i));
    return records_loader(o, std::move(r), std::move(labels));
  }
  // "shard", records as stored
  if (o.path.empty()) throw py::value_error("sluice.loader: source='shard' needs path=");
  sluice::io::shard_reader r(o.path);
  auto labels = r.labels();
  return records_loader(o, std::move(r), std::move(labels));
}

}  // namespace sluice_module
