// The Python module's image sources: sluice shards of JPEGs, WebDataset image classification,
// TFRecord files of tf.train.Example in the ImageNet convention, and MDS datasets. Each is decoded (JPEG, or JPEG and
// PNG by the first bytes where libpng is built in) to size=(h, w) with random_resized_crop= and
// flip=, in layout= CHW or HWC, and collated to uint8 or normalised float32.
#include "pipelines.hpp"

#include <cstring>

#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/jpeg.hpp"
#include "sluice/io/mds.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/io/wds.hpp"
#endif
#if SLUICE_WITH_TURBOJPEG && SLUICE_WITH_PNG
#include "sluice/codec/image.hpp"
#endif

namespace sluice_module {

#if SLUICE_WITH_TURBOJPEG
namespace {

#if SLUICE_WITH_PNG
using image_codec = sluice::codecs::image;  // JPEG or PNG, by the first bytes
#else
using image_codec = sluice::codecs::jpeg;
#endif

// WebDataset: <key>.jpg/.jpeg/.png and <key>.cls (an integer).
using wds_classes = sluice::schema<sluice::field<"jpg;jpeg;png", std::uint8_t, sluice::variable>,
                                   sluice::field<"cls", std::int64_t>>;
// tf.train.Example as ImageNet's TFRecords (and TF's own image tooling) write it.
using example_classes = sluice::schema<sluice::field<"image/encoded", std::uint8_t, sluice::variable>,
                                       sluice::field<"image/class/label", std::int64_t>>;

image_codec codec_of(const options& o) {
  if (o.size.size() != 2 || o.size[0] <= 0 || o.size[1] <= 0)
    throw py::value_error("sluice.loader: source='" + o.source + "' needs size=(height, width), both positive");
  if (o.layout != "chw" && o.layout != "hwc") bad_value("layout", "'" + o.layout + "'", "'chw' or 'hwc'");
  return image_codec({.width = o.size[1], .height = o.size[0],
                      .mode = o.random_resized_crop ? sluice::codecs::fit::random_resized_crop : sluice::codecs::fit::crop,
                      .random_flip = o.flip,
                      .layout = o.layout == "chw" ? sluice::image_layout::chw : sluice::image_layout::hwc});
}

// Samples with fields Img (encoded) and Lbl (an integer): decoded, collated, keys image/label.
template <sluice::fixed_string Img, sluice::fixed_string Lbl, class Reader>
loader_ptr image_classification(const options& o, Reader data, const std::vector<std::int64_t>& labels) {
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
  } else if (o.output == "uint8") {
    l = with_sampler(o, n, labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(data)) |
                                  sluice::decode<Img>(codec) |
                                  sluice::collate(bo, sluice::stack<Img>{}, sluice::stack<Lbl>{}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  } else {
    bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  }
  l->rename = {{std::string(Img.view()), "image"}, {std::string(Lbl.view()), "label"}};
  return l;
}

loader_ptr wds_loader(const options& o) {
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
  return image_classification<"jpg;jpeg;png", "cls">(o, std::move(data), labels);
}

loader_ptr tfrecord_loader(const options& o) {
  sluice::io::tf_example_reader<example_classes> r(o.path, {.counts = {{"image/class/label", 1}}});
  std::vector<std::int64_t> labels;
  if (o.sampler == "class_balanced") labels = r.labels<"image/class/label">();
  return image_classification<"image/encoded", "image/class/label">(o, std::move(r), labels);
}

// An MDS dataset (MosaicML Streaming): the image and label columns named at run time.
using mds_classes = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>, sluice::field<"label", std::int64_t>>;

loader_ptr mds_loader(const options& o) {
  sluice::io::mds_dataset<mds_classes> data(o.path, {.columns = {{"image", o.image_column}, {"label", o.label_column}}});
  std::vector<std::int64_t> labels(data.size(), -1);  // -1: unreadable, never drawn by class_balanced
  if (o.sampler == "class_balanced") {
    for (std::size_t i = 0; i < data.size(); ++i) {
      try {
        std::memcpy(&labels[i], data.fields(i).bytes_of<"label">().data(), sizeof(std::int64_t));
      } catch (const sluice::error&) {
      }
    }
  }
  return image_classification<"image", "label">(o, std::move(data), labels);
}

// A sluice shard of encoded images (sluice-pack imagefolder): records + labels, classic collate.
loader_ptr shard_jpeg_loader(const options& o) {
  if (o.decode != "jpeg") bad_value("decode", "'" + o.decode + "'", "'jpeg' (or leave it out: records as stored)");
  sluice::io::shard_reader r(o.path);
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
  if (o.path.empty()) throw py::value_error("sluice.loader: source='" + o.source + "' needs path=");
  if (o.source == "wds") return wds_loader(o);
  if (o.source == "tfrecord") return tfrecord_loader(o);
  if (o.source == "mds") return mds_loader(o);
  return shard_jpeg_loader(o);
#else
  throw py::value_error("sluice.loader: source='" + o.source + "' with image decoding needs a module built with TurboJPEG");
#endif
}

}  // namespace sluice_module
