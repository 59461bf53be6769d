// The extension module sluice._sluice: the engine under the sluice package (python/sluice/), which
// checks the keywords, documents them and builds the call. Common pipelines are chosen at run time
// from keyword arguments, each combination a concrete loader type compiled in source_*.cpp (no
// per-sample virtual call; one virtual call per batch, in include/sluice/python/bind.hpp's
// loader_handle). What each keyword means is documented once, in python/sluice/__init__.py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "pipelines.hpp"

namespace py = pybind11;

using namespace sluice_module;

namespace {

loader_ptr make_loader(const options& o) {
  if (o.batch_size == 0) throw sluice::usage_error("sluice: batch_size must be at least 1");
  if (o.source == "video") return make_video_loader(o);
  if (!o.fields.empty()) {
    if (o.source != "wds" && o.source != "shard" && o.source != "mds" && o.source != "tfrecord" && o.source != "npy")
      throw sluice::usage_error("sluice: fields= is read from WebDataset samples, sluice shards with fields, MDS "
                                "datasets, TFRecord files and .npy arrays (source='wds', 'shard', 'mds', 'tfrecord' or "
                                "'npy'), not source='" + o.source + "'");
    return make_fields_loader(o);
  }
  const bool images = o.source == "wds" || o.source == "tfrecord" || o.source == "mds" || (o.source == "shard" && !o.decode.empty());
  if (!images && (!o.image_field.empty() || !o.label_field.empty()))
    throw sluice::usage_error("sluice: image_field= and label_field= name the image and label of the image sources "
                          "('wds', 'tfrecord', 'mds', 'shard' with decode=); source='" + o.source + "'" +
                          (o.source == "shard" ? " without decode=" : "") + " takes neither");
  if (o.source == "idx" || o.source == "records" || o.source == "npy" || (o.source == "shard" && o.decode.empty()))
    return make_records_loader(o);
  if (!o.mask.empty() && (o.source != "wds" || !o.boxes.empty()))
    throw sluice::usage_error(o.source != "wds" ? "sluice: mask= is read from WebDataset samples (source='wds'), not source='" + o.source + "'"
                                                : std::string("sluice: mask= and boxes= together are not offered yet; use one"));
  if (o.source == "wds" && !o.mask.empty()) return make_segmentation_loader(o);
  if (o.source == "wds" && !o.boxes.empty()) return make_detection_loader(o);
  if (o.source == "coco") return make_coco_loader(o);
  if (o.source == "yolo") return make_yolo_loader(o);
  if (!o.boxes.empty() || !o.classes.empty())
    throw sluice::usage_error("sluice: boxes= and classes= are read from WebDataset samples (source='wds'), not source='" +
                              o.source + "'");
  if (o.source == "shard" || o.source == "wds" || o.source == "tfrecord" || o.source == "mds") return make_image_loader(o);
  if (o.source == "tokens" || o.source == "documents") return make_token_loader(o);
  bad_value("source", "'" + o.source + "'", "'idx', 'records', 'npy', 'shard', 'wds', 'tfrecord', 'mds', 'coco', 'yolo', 'tokens' or 'documents'");
}

// One field of fields= as the sluice package sends it (every key present; python/sluice/__init__.py).
field_option field_of(const py::dict& d) {
  field_option f;
  f.name = d["name"].cast<std::string>();
  f.members = d["members"].cast<std::string>();
  f.dtype = d["dtype"].cast<std::string>();
  f.decode = d["decode"].cast<bool>();
  f.size = d["size"].cast<std::vector<int>>();
  f.random_resized_crop = d["random_resized_crop"].cast<bool>();
  f.flip = d["flip"].cast<bool>();
  f.layout = d["layout"].cast<std::string>();
  f.collate = d["collate"].cast<std::string>();
  f.shape = d["shape"].cast<std::vector<std::int64_t>>();
  f.row = d["row"].cast<std::vector<std::int64_t>>();
  f.mean = d["mean"].cast<std::vector<float>>();
  f.std = d["std"].cast<std::vector<float>>();
  f.output_layout = d["output_layout"].cast<std::string>();
  f.value = d["value"].cast<double>();
  f.length = d["length"].cast<std::size_t>();
  f.multiple = d["multiple"].cast<std::size_t>();
  f.mask = d["mask"].cast<bool>();
  f.truncate = d["truncate"].cast<bool>();
  f.split = d["split"].cast<bool>();
  f.follow = d["follow"].cast<std::string>();
  f.follow_of = d["follow_of"].cast<std::string>();
  f.coordinate = d["coordinate"].cast<int>();
  f.box_format = d["box_format"].cast<std::string>();
  f.normalized = d["normalized"].cast<bool>();
  f.drop_outside = d["drop_outside"].cast<bool>();
  f.min_size = d["min_size"].cast<double>();
  f.min_visible = d["min_visible"].cast<double>();
  f.ignore_index = d["ignore_index"].cast<int>();
  return f;
}

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice's engine; use the sluice package (import sluice).";
  sluice::python::register_types(m, "sluice");
  m.def(
      "loader",
      [](std::string source, std::string path, std::string images, std::string labels, std::size_t record_bytes,
         std::size_t header_bytes, std::size_t batch_size, std::string sampler, std::string weights, std::uint64_t seed,
         bool distributed, bool drop_last, std::size_t workers, std::size_t prefetch, std::string output,
         std::vector<std::int64_t> shape, std::vector<float> mean, std::vector<float> std, std::string decode,
         std::vector<int> size, bool random_resized_crop, bool flip, std::string errors, std::string layout,
         std::string offsets, std::string dtype, std::string collate, std::size_t length, std::size_t stride,
         std::uint64_t vocab, double pad_value, std::vector<double> sample_weights, std::string depth,
         std::size_t max_workers, std::uint64_t ram_budget, std::string image_field, std::string label_field,
         std::int64_t rank, std::int64_t world_size, std::int64_t sampler_seed, std::uint64_t hold_budget,
         std::string boxes, std::string classes, std::string box_format, bool box_normalized, double box_min_size,
         double box_min_visible, std::string mask, std::int64_t ignore_index, py::list fields,
         std::vector<std::string> paths, bool crowd, bool keep_empty, bool contiguous,
         std::uint64_t class_count, bool polygons, std::string json_boxes, std::string json_classes,
         std::string json_format, bool split, std::size_t bins, bool segmentation,
         std::vector<std::int64_t> video_labels, int clip_frames, int clip_stride, double clip_fps, std::string clips,
         std::size_t clips_per_video, std::size_t clip_step) {
        options o{std::move(source), std::move(path), std::move(images), std::move(labels), std::move(decode),
                  record_bytes, header_bytes, batch_size, std::move(sampler), std::move(weights), seed, distributed,
                  drop_last, workers, prefetch, std::move(output), std::move(shape), std::move(mean), std::move(std),
                  std::move(size), random_resized_crop, flip, std::move(errors), std::move(layout),
                  std::move(offsets), std::move(dtype), std::move(collate), length, stride, vocab, pad_value,
                  std::move(sample_weights), max_workers, std::move(depth), ram_budget, std::move(image_field),
                  std::move(label_field), rank, world_size, sampler_seed};
        o.hold_budget = hold_budget;
        o.boxes = std::move(boxes);
        o.classes = std::move(classes);
        o.box_format = std::move(box_format);
        o.box_normalized = box_normalized;
        o.box_min_size = box_min_size;
        o.box_min_visible = box_min_visible;
        o.mask = std::move(mask);
        o.ignore_index = ignore_index;
        o.paths = std::move(paths);
        o.crowd = crowd;
        o.keep_empty = keep_empty;
        o.contiguous = contiguous;
        o.class_count = class_count;
        o.polygons = polygons;
        o.json_boxes = std::move(json_boxes);
        o.json_classes = std::move(json_classes);
        o.json_format = std::move(json_format);
        o.split = split;
        o.bins = bins;
        o.segmentation = segmentation;
        o.video_labels = std::move(video_labels);
        o.clip_frames = clip_frames;
        o.clip_stride = clip_stride;
        o.clip_fps = clip_fps;
        o.clips = std::move(clips);
        o.clips_per_video = clips_per_video;
        o.clip_step = clip_step;
        for (const auto& item : fields) o.fields.push_back(field_of(item.cast<py::dict>()));
        sluice::python::detail::without_gil nogil;  // opening files, scanning indexes
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
      py::arg("errors") = "raise", py::arg("layout") = "chw", py::arg("offsets") = "", py::arg("dtype") = "",
      py::arg("collate") = "pack", py::arg("length") = 1024, py::arg("stride") = 0, py::arg("vocab") = 0,
      py::arg("pad_value") = 0.0, py::arg("sample_weights") = std::vector<double>{}, py::arg("depth") = "fixed",
      py::arg("max_workers") = 0, py::arg("ram_budget") = 0, py::arg("image_field") = "",
      py::arg("label_field") = "", py::arg("rank") = -1, py::arg("world_size") = -1, py::arg("sampler_seed") = -1,
      py::arg("hold_budget") = std::uint64_t{1} << 30, py::arg("boxes") = "", py::arg("classes") = "",
      py::arg("box_format") = "xyxy", py::arg("box_normalized") = false, py::arg("box_min_size") = 1.0,
      py::arg("box_min_visible") = 0.0, py::arg("mask") = "", py::arg("ignore_index") = 255, py::arg("fields") = py::list(),
      py::arg("paths") = std::vector<std::string>{}, py::arg("crowd") = true, py::arg("keep_empty") = true,
      py::arg("contiguous") = true, py::arg("class_count") = 0, py::arg("polygons") = false,
      py::arg("json_boxes") = "", py::arg("json_classes") = "", py::arg("json_format") = "xywh",
      py::arg("split") = true, py::arg("bins") = 1, py::arg("segmentation") = false,
      py::arg("video_labels") = std::vector<std::int64_t>{}, py::arg("clip_frames") = 16, py::arg("clip_stride") = 1,
      py::arg("clip_fps") = 0.0, py::arg("clips") = "random", py::arg("clips_per_video") = 1, py::arg("clip_step") = 0,
      "The engine of sluice's sources (python/sluice/__init__.py checks and documents the keywords).");
  m.def(
      "rank_from_environment",
      [] {
        const auto r = sluice::sample::rank_from_environment();
        return py::make_tuple(r.rank, r.world, sluice::sample::rank_source_name(r.source),
                              r.source != sluice::sample::rank_source::single_process);
      },
      "(rank, world, launcher, found): what the launcher's environment says (sample/rank.hpp).");
}
