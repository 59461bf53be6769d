// The Python module's image sources: sluice shards of JPEGs (records, or a shard with fields),
// WebDataset image classification, TFRecord files of tf.train.Example, and MDS datasets. The
// image and label fields are named at run time (image_field=, label_field=; each source has a
// default: its usual convention). Each is decoded (JPEG, or JPEG and PNG by the first bytes where
// libpng is built in) to size=(h, w) with random_resized_crop= and flip=, in layout= CHW or HWC,
// and collated to uint8 or normalised float32. Every source here is one reader type with the
// fields {"image", "label"}, so the loaders compiled are one set per reader type.
#include "image_codec.hpp"

#include <algorithm>
#include <cstring>

#if SLUICE_WITH_TURBOJPEG
#include "sluice/io/mds.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/io/wds.hpp"
#endif

namespace sluice_module {

#if SLUICE_WITH_TURBOJPEG
namespace {

// Image classification: an encoded image and an integer label, whatever the source calls them.
using classes = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>, sluice::field<"label", std::int64_t>>;

// The name a source's field takes: the user's, else the source's convention.
std::string name_or(const std::string& given, const char* convention) { return given.empty() ? convention : given; }

// Samples with fields "image" (encoded) and "label" (an integer): decoded, collated.
template <class Reader>
loader_ptr image_classification(const options& o, Reader data, const std::vector<std::int64_t>& labels) {
  constexpr sluice::fixed_string Img = "image", Lbl = "label";
  const image_codec codec = codec_of(o);
  const std::size_t n = data.size();
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  loader_ptr l;
  if (o.output == "float32") {
    l = with_sampler(o, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(data)) |
                                  sluice::decode<Img>(codec) |
                                  sluice::collate(bo, sluice::normalized<Img>{.mean = o.mean, .std = o.std},
                                                  sluice::stack<Lbl>{}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  } else if (o.output.empty() || o.output == "uint8") {
    l = with_sampler(o, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(data)) |
                                  sluice::decode<Img>(codec) |
                                  sluice::collate(bo, sluice::stack<Img>{}, sluice::stack<Lbl>{}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  } else {
    bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  }
  return l;
}

// Every sample's label, for the class-balanced sampler: -1 where a sample cannot be read (never
// drawn by it; reading it fails, naming file, sample and field, when another sampler draws it).
template <class Reader>
std::vector<std::int64_t> labels_of(const options& o, const Reader& data) {
  std::vector<std::int64_t> labels(data.size(), -1);
  if (o.sampler != "class_balanced") return labels;
  for (std::size_t i = 0; i < data.size(); ++i) {
    try {
      const auto s = data.fields(i);
      if (s.template size_of<"label">() == sizeof(std::int64_t))
        s.template write<"label">(std::as_writable_bytes(std::span(&labels[i], 1)), sluice::sample_context{});
    } catch (const sluice::error&) {
    }
  }
  return labels;
}

// WebDataset: <key>.<image_field> (default jpg, jpeg or png) and <key>.<label_field> (default cls).
loader_ptr wds_loader(const options& o) {
  sluice::io::wds_dataset<classes> data(
      shards_of(o), {.extensions = {{"image", name_or(o.image_field, "jpg;jpeg;png")}, {"label", name_or(o.label_field, "cls")}}});
  auto labels = labels_of(o, data);
  return image_classification(o, std::move(data), labels);
}

// tf.train.Example: features image_field= (default "image/encoded") and label_field= (default
// "image/class/label"), ImageNet's TFRecords' and TF's own image tooling's names.
loader_ptr tfrecord_loader(const options& o) {
  sluice::io::tf_example_reader<classes> r(sluice::io::tfrecord_reader(shards_of(o)), {{"label", 1}},
                                          {{"image", name_or(o.image_field, "image/encoded")},
                                           {"label", name_or(o.label_field, "image/class/label")}});
  std::vector<std::int64_t> labels;
  if (o.sampler == "class_balanced") labels = r.labels<"label">();
  return image_classification(o, std::move(r), labels);
}

// An MDS dataset (MosaicML Streaming): columns image_field= (default "image") and label_field=
// (default "label").
loader_ptr mds_loader(const options& o) {
  sluice::io::mds_dataset<classes> data(
      o.path, {.columns = {{"image", name_or(o.image_field, "image")}, {"label", name_or(o.label_field, "label")}}});
  data.check_image_column(0);  // decoded: a 'pil' column (raw pixels) is refused, naming it
  auto labels = labels_of(o, data);
  return image_classification(o, std::move(data), labels);
}

// A sluice shard with fields (sluice-pack --fields / --features): the image is field image_field=
// (default "jpg", sluice-pack's wds default); the label is the shard's own label of each record
// (what sluice-pack's --label stores), or field label_field= when given (one integer per record).
class fields_shard_classes {
 public:
  using reader_concept = sluice::reader_tag;
  using schema_type = classes;
  using sample_type = sluice::fields_sample<classes>;
  using image_only = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>>;

  explicit fields_shard_classes(const options& o)
      : r_(o.path, {}, {{"image", name_or(o.image_field, "jpg")}}),
        labels_(std::make_shared<std::vector<std::int64_t>>(r_.labels())) {
    if (o.label_field.empty()) {
      // sluice-pack stores -1 for a record it was given no label for: a shard without any is
      // unlabelled, and training on -1 would fail far from here (or not at all).
      if (!labels_->empty() && std::all_of(labels_->begin(), labels_->end(), [](std::int64_t l) { return l < 0; }))
        throw sluice::usage_error("sluice: " + o.path +
                              " holds no labels (every record's is -1: packed without --label); name the field that "
                              "holds them with label_field=");
      return;
    }
    // The label field, read once here: a record whose label does not hold one integer is a
    // format_error naming the file, the record and the field.
    sluice::io::shard_fields<sluice::schema<sluice::field<"label", std::int64_t>>> l(o.path, {}, {{"label", o.label_field}});
    for (std::size_t i = 0; i < l.size(); ++i) {
      const auto b = l.fields(i).bytes_of<"label">();
      if (b.size() != sizeof(std::int64_t))
        throw sluice::format_error(std::string(l.path()), {.record = i},
                                   "field '" + o.label_field + "': " + std::to_string(b.size() / sizeof(std::int64_t)) +
                                       " values; a label needs exactly one");
      std::memcpy(&(*labels_)[i], b.data(), sizeof(std::int64_t));
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return r_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return r_.path(); }
  [[nodiscard]] const std::vector<std::int64_t>& labels() const noexcept { return *labels_; }
  [[nodiscard]] sample_type fields(std::size_t i) const {
    const auto s = r_.fields(i);
    sample_type out{.id = i, .origin = s.origin};
    out.values[0] = s.bytes_of<"image">();
    out.values[1] = std::as_bytes(std::span(&(*labels_)[i], 1));
    return out;
  }

 private:
  sluice::io::shard_fields<image_only> r_;
  std::shared_ptr<std::vector<std::int64_t>> labels_;  // shared by copies; read-only after construction
};

loader_ptr fields_shard_loader(const options& o) {
  fields_shard_classes data(o);
  auto labels = data.labels();
  return image_classification(o, std::move(data), labels);
}

// A sluice shard of encoded images (sluice-pack imagefolder): records + labels, classic collate.
loader_ptr shard_jpeg_loader(const options& o) {
  if (o.decode != "jpeg") bad_value("decode", "'" + o.decode + "'", "'jpeg' (or leave it out: records as stored)");
  sluice::io::shard_reader r(o.path);
  if (r.has_fields()) return fields_shard_loader(o);
  if (!o.image_field.empty() || !o.label_field.empty())
    throw sluice::usage_error("sluice: image_field= and label_field= name fields of a shard with fields; " + o.path +
                          " is a shard of single records (its record is the image, its label the label)");
  auto labels = r.labels();
  const image_codec codec = codec_of(o);
  const std::size_t n = r.size();
  return with_sampler(o, n, labels, [&](auto s) {
    return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(r)) | sluice::decode(codec) |
                                sluice::collate(collate_of(o)) | sluice::prefetch(depth_of(o), loader_opts(o)));
  });
}

}  // namespace
#endif

loader_ptr make_image_loader(const options& o) {
#if SLUICE_WITH_TURBOJPEG
  if (o.path.empty()) throw sluice::usage_error("sluice: source='" + o.source + "' needs path=");
  if (o.source == "wds") return wds_loader(o);
  if (o.source == "tfrecord") return tfrecord_loader(o);
  if (o.source == "mds") return mds_loader(o);
  return shard_jpeg_loader(o);
#else
  throw sluice::usage_error("sluice: source='" + o.source + "' with image decoding needs a module built with TurboJPEG");
#endif
}

}  // namespace sluice_module
