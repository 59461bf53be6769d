// The Python module's record sources: IDX, fixed-size records, .npy, sluice shards as stored.
//
// The data is what the file says: an .npy array's rows arrive with its dtype and shape, an IDX
// file's items with its element type and dimensions, fixed records with the dtype= and shape= the
// trainer declares (uint8, one flat row, by default). Collate copies the bytes; the batch's
// "data" tensor is then described with the file's dtype and per-sample shape (bind.hpp's
// tensor_view_spec; nothing is converted). output="float32" (scaled by 1/255, then mean/std)
// applies to uint8 data only, and to float32 data as the identity; any other conversion would
// change or reinterpret values and is a UsageError naming the field and both types.
#include "pipelines.hpp"

#include "sluice/io/fixed_records.hpp"
#include "sluice/io/idx.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"

namespace sluice_module {

// A shard with fields read without fields= (source_fields.cpp): every field stacked as stored.
loader_ptr make_shard_fields_as_stored_loader(const options& o);

namespace {

// What a source's samples are: dtype (numpy-style name, for messages) and per-sample shape.
struct row_type {
  DLDataType type{kDLUInt, 8, 1};
  std::string name = "uint8";
  std::vector<std::int64_t> shape;  // empty: one flat row of bytes (unless scalar)
  bool scalar = false;              // each sample is one element (a 1-D .npy array): "data" is (B,)
};

DLDataType dl(std::uint8_t code, std::uint8_t bits) { return DLDataType{code, bits, 1}; }

row_type named_type(const std::string& dtype) {
  static const std::pair<const char*, DLDataType> known[] = {
      {"uint8", dl(kDLUInt, 8)},     {"int8", dl(kDLInt, 8)},       {"uint16", dl(kDLUInt, 16)},
      {"int16", dl(kDLInt, 16)},     {"uint32", dl(kDLUInt, 32)},   {"int32", dl(kDLInt, 32)},
      {"uint64", dl(kDLUInt, 64)},   {"int64", dl(kDLInt, 64)},     {"float16", dl(kDLFloat, 16)},
      {"float32", dl(kDLFloat, 32)}, {"float64", dl(kDLFloat, 64)}, {"bfloat16", dl(kDLBfloat, 16)}};
  for (const auto& [n, t] : known)
    if (dtype == n) return {t, n, {}};
  bad_value("dtype", "'" + dtype + "'",
            "'uint8', 'int8', 'uint16', 'int16', 'uint32', 'int32', 'uint64', 'int64', 'float16', 'float32', "
            "'float64' or 'bfloat16'");
}

// An .npy array's element type as a tensor type; what a tensor cannot hold is a UsageError.
row_type npy_type(const sluice::io::npy_reader& r) {
  const auto& d = r.dtype();
  row_type t;
  const auto bits = static_cast<std::uint8_t>(d.item_bytes * 8);
  switch (d.kind) {
    case 'u': t.type = dl(kDLUInt, bits); t.name = "uint" + std::to_string(bits); break;
    case 'i': t.type = dl(kDLInt, bits); t.name = "int" + std::to_string(bits); break;
    case 'f': t.type = dl(kDLFloat, bits); t.name = "float" + std::to_string(bits); break;
    case 'c': t.type = dl(kDLComplex, bits); t.name = "complex" + std::to_string(bits); break;
    case 'b':  // kDLBool only from DLPack 0.8 on: where the header is older, bool arrives as uint8
#if SLUICE_DLPACK_KDLBOOL
      t.type = dl(kDLBool, 8);
#else
      t.type = dl(kDLUInt, 8);
#endif
      t.name = "bool";
      break;
    default:
      throw sluice::usage_error("sluice.npy: " + std::string(r.path()) + " holds dtype '" + d.descr +
                                "', which has no tensor type (numbers and bool only)");
  }
  for (std::size_t i = 1; i < r.shape().size(); ++i) t.shape.push_back(static_cast<std::int64_t>(r.shape()[i]));
  t.scalar = r.shape().size() == 1;
  return t;
}

row_type idx_type_of(const sluice::io::idx_reader& r) {
  using sluice::io::idx_type;
  row_type t;
  switch (r.images().type()) {
    case idx_type::u8: break;
    case idx_type::i8: t.type = dl(kDLInt, 8); t.name = "int8"; break;
    default:
      // IDX stores multi-byte elements big-endian: handing them out as they are would give wrong
      // values on every machine sluice runs on.
      throw sluice::usage_error("sluice.idx: " + std::string(r.path()) +
                                " holds big-endian multi-byte elements (IDX type " +
                                std::to_string(static_cast<int>(r.images().type())) +
                                "); sluice reads IDX files of uint8 or int8 only (convert the file with numpy: "
                                "np.save of the array gives an .npy sluice.npy reads as is)");
  }
  const auto dims = r.images().dims();
  for (std::size_t i = 1; i < dims.size(); ++i) t.shape.push_back(dims[i]);
  return t;
}

std::size_t elements(const std::vector<std::int64_t>& s) {
  std::size_t n = 1;
  for (auto d : s) n *= static_cast<std::size_t>(d);
  return n;
}

template <class Reader>
loader_ptr records_loader(const options& o, Reader r, std::vector<std::int64_t> labels, row_type row,
                          std::size_t row_bytes) {
  const std::size_t n = r.size();
  options c = o;
  const bool u8 = row.type.code == kDLUInt && row.type.bits == 8 && row.name == "uint8";
  const bool f32 = row.type.code == kDLFloat && row.type.bits == 32;
  // shape=: the trainer's per-sample shape, which must hold the row's elements exactly.
  const std::size_t item = sluice::python::detail::element_bytes(row.type);
  if (!o.shape.empty()) {
    for (auto d : o.shape)
      if (d <= 0) bad_value("shape", "with a dimension " + std::to_string(d), "positive dimensions");
    if (elements(o.shape) * item != row_bytes)
      throw sluice::usage_error("sluice: shape=" + shape_text(o.shape) + " holds " +
                                std::to_string(elements(o.shape)) + " " + row.name + " elements, a sample has " +
                                std::to_string(row_bytes / item));
    row.shape = o.shape;
  }
  if (!o.shape.empty()) row.scalar = false;
  if (row.shape.empty() && !row.scalar) row.shape = {static_cast<std::int64_t>(row_bytes / item)};
  // mean=/std= of C values normalise channels interleaved in each sample (element i is channel
  // i % C): a sample must hold whole C-channel pixels.
  if (const std::size_t ch = std::max(o.mean.size(), o.std.size()); ch > 1 && elements(row.shape) % ch != 0)
    throw sluice::usage_error("sluice: mean=/std= have " + std::to_string(ch) + " values (one per channel), but a sample holds " +
                              std::to_string(elements(row.shape)) + " elements, not a whole number of " +
                              std::to_string(ch) + "-channel pixels; give one value for all, or a per-channel count that divides it");
  std::vector<sluice::python::tensor_view_spec> views;
  if (u8) {
    // uint8: the classic collate's own outputs (as stored, or normalised float32); one element a
    // sample (a 1-D array) is collated as rows of one and described as (B,).
    c.shape = row.shape;
    if (row.scalar) views.push_back({"data", o.output == "float32" ? dl(kDLFloat, 32) : row.type, {}});
  } else if (o.output.empty() || o.output == row.name) {
    if (!o.mean.empty() || !o.std.empty())
      throw sluice::usage_error("sluice: mean=/std= normalise uint8 data; field 'data' is " + row.name +
                                " (normalise it in the trainer)");
    c.output.clear();
    c.shape.clear();
    views.push_back({"data", row.type, row.shape});
  } else {
    throw sluice::usage_error("sluice: output='" + o.output + "' for field 'data' of dtype " + row.name +
                              ": sluice converts uint8 to float32 (scaled by 1/255) and keeps every other dtype as "
                              "the file has it" +
                              std::string(f32 ? "" : "; leave output= out to get " + row.name));
  }
  auto l = with_sampler(c, n, labels, [&](auto s) {
    return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(r)) | sluice::collate(collate_of(c)) |
                                sluice::prefetch(depth_of(c), loader_opts(c)));
  });
  l->views = std::move(views);
  return l;
}

}  // namespace

loader_ptr make_records_loader(const options& o) {
  if (o.source == "idx") {
    if (o.images.empty()) throw sluice::usage_error("sluice.idx: needs images= (and labels=)");
    sluice::io::idx_reader r(o.images, o.labels);
    std::vector<std::int64_t> labels;
    if (r.has_labels())
      for (std::size_t i = 0; i < r.size(); ++i) labels.push_back(r.label(i));
    const row_type t = idx_type_of(r);
    const std::size_t rb = r.record_bytes();
    return records_loader(o, std::move(r), std::move(labels), t, rb);
  }
  if (o.source == "records") {
    if (o.path.empty() || o.record_bytes == 0) throw sluice::usage_error("sluice.records: needs path= and record_bytes=");
    const row_type t = o.dtype.empty() ? row_type{} : named_type(o.dtype);
    if (o.record_bytes % sluice::python::detail::element_bytes(t.type) != 0)
      throw sluice::usage_error("sluice.records: record_bytes=" + std::to_string(o.record_bytes) +
                                " is not a whole number of " + t.name + " elements");
    sluice::io::fixed_records r(o.path, {.record_bytes = o.record_bytes, .labels_path = o.labels, .header_bytes = o.header_bytes});
    auto labels = r.labels();
    if (o.labels.empty()) labels.clear();
    return records_loader(o, std::move(r), std::move(labels), t, o.record_bytes);
  }
  if (o.source == "npy") {
    if (o.path.empty()) throw sluice::usage_error("sluice.npy: needs path= (an .npy array; a sample is a row)");
    sluice::io::npy_reader r(o.path, {.labels_path = o.labels});
    std::vector<std::int64_t> labels;
    if (!o.labels.empty())
      for (std::size_t i = 0; i < r.size(); ++i) labels.push_back(r.label(i));
    const row_type t = npy_type(r);
    const std::size_t rb = r.row_bytes();
    return records_loader(o, std::move(r), std::move(labels), t, rb);
  }
  // "shard", records as stored
  if (o.path.empty()) throw sluice::usage_error("sluice.shard: needs path=");
  sluice::io::shard_reader r(o.path);
  // A shard with fields (sluice-pack npy of a non-uint8 array, --fields, --features): each field as
  // stored, with its dtype and shape, never its record's bytes (field table included) as uint8.
  if (r.has_fields()) return make_shard_fields_as_stored_loader(o);
  auto labels = r.labels();
  // A shard's records may differ in size (collate checks each batch): no per-sample shape here
  // unless the trainer gives one.
  options c = o;
  if (o.output.empty() || o.output == "uint8" || o.output == "float32") {
    c.shape = o.shape;
    const std::size_t n = r.size();
    return with_sampler(c, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(r)) |
                                  sluice::collate(collate_of(c)) | sluice::prefetch(depth_of(c), loader_opts(c)));
    });
  }
  bad_value("output", "'" + o.output + "'", "'uint8' (as stored) or 'float32' (scaled by 1/255)");
}

}  // namespace sluice_module
