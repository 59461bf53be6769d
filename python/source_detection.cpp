// The Python module's detection source: WebDataset samples of an encoded image, its boxes and a
// class per box (sluice.wds(..., boxes=sluice.boxes(...))). The image is decoded like every image
// source (size, crop or random_resized_crop, flip, layout); the boxes follow the image's geometry
// (the same crop, scale and flip, drawn once per sample) and lose their class with them when they
// leave the crop; images are stacked, boxes and classes ragged:
//   {"image": (B, ...), "boxes": (n, 4) float32, "boxes.offsets": (B+1,) int64,
//    "classes": (n,) int64, "classes.offsets": (B+1,) int64}
// Members are named at run time (boxes=, classes=, image_field=); an .npy member's dtype is checked
// against the field's (float32 boxes, int64 classes): another dtype is a FormatError naming the
// shard, the sample and the member, never bytes read as another type.
#include "image_codec.hpp"

#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/instances.hpp"
#include "sluice/io/coco.hpp"
#include "sluice/io/wds.hpp"
#include "sluice/io/yolo.hpp"
#include "sluice/stage/json_fields.hpp"
#include "sluice/stage/decode.hpp"
#endif

namespace sluice_module {

#if SLUICE_WITH_TURBOJPEG
namespace {

constexpr const char* kDetection = "detection data (a sample has many classes, not one label)";

using detection = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>,
                                 sluice::field<"boxes", float, sluice::variable>,
                                 sluice::field<"classes", std::int64_t, sluice::variable>>;

using with_json = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>,
                                 sluice::field<"json", std::uint8_t, sluice::variable>>;
using json_annotations = sluice::json_fields<"json", sluice::field<"boxes", float, sluice::variable>,
                                             sluice::field<"classes", std::int64_t, sluice::variable>>;

// Detection from a JSON member of each sample (sluice.json_boxes): the boxes and classes its
// paths reach, the boxes made xyxy from the stored convention, following the image.
loader_ptr make_json_detection_loader(const options& o) {
  constexpr sluice::fixed_string Img = "image";
  constexpr sluice::fixed_string Box = "boxes";
  constexpr sluice::fixed_string Cls = "classes";
  sluice::json_box stored = sluice::json_box::xywh;
  if (o.json_format == "xyxy") stored = sluice::json_box::xyxy;
  else if (o.json_format == "cxcywh") stored = sluice::json_box::cxcywh;
  else if (o.json_format != "xywh") bad_value("format", "'" + o.json_format + "'", "'xyxy', 'xywh' or 'cxcywh'");
  const json_annotations annotations({{"boxes", o.json_boxes, stored}, {"classes", o.json_classes}});
  sluice::io::wds_dataset<with_json> data(
      shards_of(o), {.extensions = {{"image", o.image_field.empty() ? "jpg;jpeg;png" : o.image_field}, {"json", o.boxes}}});
  sluice::boxes<Box, Cls> follow{};
  follow.normalized = o.box_normalized;
  follow.min_size = o.box_min_size;
  follow.min_visible = o.box_min_visible;
  return followed_image_loader_after<Img>(
      o, std::move(data), [annotations](auto chain) { return std::move(chain) | annotations; }, follow, kDetection,
      sluice::ragged<Box>{.row = {4}}, sluice::ragged<Cls>{});
}

}  // namespace

loader_ptr make_detection_loader(const options& o) {
  constexpr sluice::fixed_string Img = "image";
  constexpr sluice::fixed_string Box = "boxes";
  constexpr sluice::fixed_string Cls = "classes";
  if (o.path.empty()) throw sluice::usage_error("sluice: source='wds' needs path=");
  if (!o.json_boxes.empty()) return make_json_detection_loader(o);
  if (o.boxes.empty() || o.classes.empty())
    throw sluice::usage_error("sluice: detection needs boxes= and classes= (the members of each sample's boxes and "
                              "their classes)");
  sluice::io::wds_dataset<detection> data(
      shards_of(o), {.extensions = {{"image", o.image_field.empty() ? "jpg;jpeg;png" : o.image_field},
                              {"boxes", o.boxes},
                              {"classes", o.classes}}});
  sluice::boxes<Box, Cls> follow{};
  follow.format = box_format_of(o.box_format);
  follow.normalized = o.box_normalized;
  follow.min_size = o.box_min_size;
  follow.min_visible = o.box_min_visible;
  return followed_image_loader<Img>(o, std::move(data), follow, kDetection, sluice::ragged<Box>{.row = {4}},
                                    sluice::ragged<Cls>{});
}

// A COCO detection dataset: the image folder images= and the annotation file path=; boxes come
// as the reader converts them (xyxy pixels, or xywh as stored), classes contiguous (or the ids),
// iscrowd beside them, all three following the image's crop and flip.
loader_ptr make_coco_loader(const options& o) {
  constexpr sluice::fixed_string Img = "image";
  constexpr sluice::fixed_string Box = "boxes";
  constexpr sluice::fixed_string Cls = "classes";
  constexpr sluice::fixed_string Crowd = "iscrowd";
  if (o.path.empty() || o.images.empty())
    throw sluice::usage_error("sluice.coco: needs the images folder and the annotation file");
  sluice::io::coco_options co{.contiguous = o.contiguous, .crowd = o.crowd, .keep_empty = o.keep_empty,
                              .segmentation = o.segmentation};
  co.boxes = box_format_of(o.box_format);
  sluice::io::coco_dataset data(o.images, o.path, co);
  sluice::boxes<Box, Cls, Crowd> follow{};
  follow.format = co.boxes;
  follow.min_size = o.box_min_size;
  follow.min_visible = o.box_min_visible;
  if (o.segmentation) {  // one instance mask per kept box, {n, H, W} beside the boxes
    constexpr sluice::fixed_string Seg = "segmentation";
    (void)codec_of(o);  // checks size= first
    return followed_image_loader<Img>(o, std::move(data), std::tuple{follow, sluice::instance_masks<Seg, Box>{}},
                                      kDetection, sluice::ragged<Box>{.row = {4}}, sluice::ragged<Cls>{},
                                      sluice::ragged<Crowd>{},
                                      sluice::ragged<Seg>{.row = {o.size[0], o.size[1]}});
  }
  return followed_image_loader<Img>(o, std::move(data), follow, kDetection, sluice::ragged<Box>{.row = {4}},
                                    sluice::ragged<Cls>{}, sluice::ragged<Crowd>{});
}

// A YOLO dataset: the images folder images=, labels beside it (Ultralytics' rule) or in labels=;
// boxes as fractions of the image, following its crop and flip as fractions of the output.
loader_ptr make_yolo_loader(const options& o) {
  constexpr sluice::fixed_string Img = "image";
  constexpr sluice::fixed_string Box = "boxes";
  constexpr sluice::fixed_string Cls = "classes";
  if (o.images.empty()) throw sluice::usage_error("sluice.yolo: needs the images folder");
  sluice::io::yolo_options yo{.classes = static_cast<std::size_t>(o.class_count), .labels = o.labels,
                              .keep_empty = o.keep_empty, .polygons = o.polygons};
  yo.boxes = box_format_of(o.box_format);
  sluice::io::yolo_dataset data(o.images, yo);
  sluice::boxes<Box, Cls> follow{};
  follow.format = yo.boxes;
  follow.normalized = true;
  follow.min_size = o.box_min_size;
  follow.min_visible = o.box_min_visible;
  return followed_image_loader<Img>(o, std::move(data), follow, kDetection, sluice::ragged<Box>{.row = {4}},
                                    sluice::ragged<Cls>{});
}
#else
loader_ptr make_coco_loader(const options& o) { return make_detection_loader(o); }
loader_ptr make_yolo_loader(const options& o) { return make_detection_loader(o); }
loader_ptr make_detection_loader(const options& o) {
  throw sluice::usage_error("sluice: source='" + o.source + "' with image decoding needs a module built with TurboJPEG");
}
#endif

}  // namespace sluice_module
