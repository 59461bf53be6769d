// The Python module's pipelines (see sluice_module.cpp): the options every source reads, the
// sampler choice, and one factory per group of sources. The groups live in their own translation
// units (source_*.cpp) so a build compiles them in parallel: each instantiates one concrete loader
// type per sampler (and output) it accepts.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <algorithm>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/python/bind.hpp"
#include "sluice/sample/alias.hpp"
#include "sluice/sample/class_balanced.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/policy/workers.hpp"
#include "sluice/sample/any_sampler.hpp"
#include "sluice/sample/rank.hpp"

namespace sluice_module {

namespace py = pybind11;

// One field of sluice.wds(fields=...): sluice.field(members, dtype=, decode=, collate=).
struct field_option {
  std::string name, members;
  std::string dtype;  // empty: an .npy member's own, else uint8
  bool decode = false;  // an image, with the options below (sluice.image)
  std::vector<int> size;
  bool random_resized_crop = false, flip = false;
  std::string layout = "hwc";
  std::string collate = "stack";  // stack, normalized, ragged, pad, pack: the C++ collators' options
  std::vector<std::int64_t> shape, row;
  std::vector<float> mean, std;
  std::string output_layout;  // normalized<>'s .output; empty: the input's
  double value = 0;
  std::size_t length = 0, multiple = 1;
  bool mask = false, truncate = false, split = true;
  // Following a decoded image (sluice.boxes_of / points_of / rows_of): the kind ("" none, boxes,
  // points, rows), the field followed (the image; rows: the boxes' field), the coordinate this
  // field holds (-1: rows of all) and codecs::box_options / point_options.
  std::string follow, follow_of;
  int coordinate = -1;
  std::string box_format = "xyxy";
  bool normalized = false, drop_outside = true;
  double min_size = 1.0, min_visible = 0.0;
  int ignore_index = 255;  // mask: where the crop leaves the image
};

struct options {
  std::string source;
  std::string path, images, labels, decode;
  std::size_t record_bytes = 0, header_bytes = 0;
  std::size_t batch_size = 64;
  std::string sampler = "shuffle", weights = "inverse_log";
  std::uint64_t seed = 0;
  bool distributed = false, drop_last = false;
  std::size_t workers = 2, prefetch = 2;
  std::string output;  // empty: the source's own ("uint8" for records and images, the stored type for tokens)
  std::vector<std::int64_t> shape;
  std::vector<float> mean, std;
  std::vector<int> size;
  bool random_resized_crop = false, flip = false;
  std::string errors = "raise";
  std::string layout = "chw";
  std::string offsets, dtype, collate = "pack";  // dtype: tokens' element type (uint16 when empty), records' row type
  std::size_t length = 1024, stride = 0;
  std::uint64_t vocab = 0;
  double pad_value = 0;
  std::vector<double> sample_weights;
  std::size_t max_workers = 0;  // above workers: the worker count is tuned
  std::string depth = "fixed";
  std::uint64_t ram_budget = 0;
  std::string image_field, label_field;  // image sources; empty: the source's convention
  std::int64_t rank = -1, world_size = -1;  // explicit rank (both or neither); -1: from the environment
  std::int64_t sampler_seed = -1;           // the sampler's seed; -1: seed (the loader's augmentation seed)
  std::uint64_t hold_budget = std::uint64_t{1} << 30;  // loader_options::hold_budget
  // Detection (wds): the members of the boxes and their classes; boxes<>'s options.
  std::string boxes, classes, box_format = "xyxy";
  bool box_normalized = false;
  double box_min_size = 1.0, box_min_visible = 0.0;
  // Segmentation (wds): the member of each sample's mask; mask<>'s fill where the crop leaves the image.
  std::string mask;
  std::int64_t ignore_index = 255;
  // Run-time fields (wds): every field the trainer names.
  std::vector<field_option> fields;
  // Sharded sources (wds, tfrecord): the shards as a list; empty: path, a path or a brace pattern.
  std::vector<std::string> paths;
  // COCO (io::coco_options): crowd annotations kept, images without boxes kept, classes 0..K-1.
  bool crowd = true, keep_empty = true, contiguous = true;
  // COCO: each annotation's polygons or run lengths drawn as its instance mask ("segmentation").
  bool segmentation = false;
  // YOLO (io::yolo_options): the class count (0: any), polygon lines read as their bounding box.
  std::uint64_t class_count = 0;
  bool polygons = false;
  // Detection from a JSON member (wds, boxes= the member): the paths of the boxes and classes,
  // and the boxes' stored convention (xyxy, xywh or cxcywh).
  std::string json_boxes, json_classes, json_format = "xywh";
  // Documents as rows (packed_rows_options): documents cut at row ends, or whole over `bins` open rows.
  bool split = true;
  std::size_t bins = 1;
  // Video (paths= the files, video_labels= one label a file or none): clips of clip_frames frames
  // at clip_stride, or at clip_fps frames a second; clips = "random" (clips_per_video a video a
  // epoch) or "every" (a clip every clip_step frames; 0: the clip's span).
  std::vector<std::int64_t> video_labels;
  int clip_frames = 16, clip_stride = 1;
  double clip_fps = 0;
  std::string clips = "random";
  std::size_t clips_per_video = 1, clip_step = 0;
};

// The shards of a sharded source: paths= as given, or path= with its braces expanded.
inline std::vector<std::string> shards_of(const options& o) {
  return o.paths.empty() ? sluice::io::expand_braces(o.path) : o.paths;
}

[[noreturn]] inline void bad_value(const std::string& arg, const std::string& got, const std::string& accepted) {
  throw sluice::usage_error("sluice: " + arg + "=" + got + " is not accepted; use " + accepted);
}

// A box format keyword ("xyxy", "xywh", "cxcywh") as the codec's enum; `arg` names the keyword.
inline sluice::codecs::box_format box_format_of(const std::string& s, const std::string& arg = "box_format") {
  if (s == "xyxy") return sluice::codecs::box_format::xyxy;
  if (s == "xywh") return sluice::codecs::box_format::xywh;
  if (s == "cxcywh") return sluice::codecs::box_format::cxcywh;
  bad_value(arg, "'" + s + "'", "'xyxy', 'xywh' or 'cxcywh'");
}

inline std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "(";
  for (std::size_t i = 0; i < s.size(); ++i) t += std::to_string(s[i]) + (s.size() == 1 || i + 1 < s.size() ? ", " : "");
  if (s.size() == 1) t.resize(t.size() - 1);
  return t + ")";
}

inline sluice::collate_options collate_of(const options& o) {
  sluice::collate_options c{.batch = o.batch_size, .drop_last = o.drop_last};
  if (o.output == "float32") c.output = sluice::dtype::f32;
  else if (!o.output.empty() && o.output != "uint8") bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  c.mean = o.mean;
  c.std = o.std;
  c.shape = o.shape;
  c.channels = std::max<std::size_t>(1, std::max(o.mean.size(), o.std.size()));
  return c;
}

inline sluice::loader_options loader_opts(const options& o) {
  if (o.workers == 0 && o.max_workers != 0)
    throw sluice::usage_error("sluice: workers=0 fills each batch in the trainer's own thread, so max_workers=" +
                              std::to_string(o.max_workers) + " has no threads to tune; give workers>=1 with it");
  sluice::loader_options l{.workers = o.workers, .max_workers = std::max(o.workers, o.max_workers), .seed = o.seed};
  l.hold_budget = static_cast<std::size_t>(o.hold_budget);
  if (o.errors == "skip") l.errors = sluice::on_error::skip;
  else if (o.errors != "raise") bad_value("errors", "'" + o.errors + "'", "'raise' or 'skip'");
  return l;
}

// The prefetch depth policy the keywords name (one loader type for all: depth::runtime).
inline sluice::depth::runtime depth_of(const options& o) {
  if (o.prefetch == 0) throw sluice::usage_error("sluice: prefetch must be at least 1");
  if (o.max_workers != 0 && o.max_workers < o.workers)
    throw sluice::usage_error("sluice: max_workers=" + std::to_string(o.max_workers) + " is below workers=" +
                          std::to_string(o.workers) + "; use 0 (a fixed worker count) or at least workers");
  auto p = sluice::depth::runtime::fixed(o.prefetch);
  if (o.depth == "adaptive")
    p = sluice::depth::runtime::adaptive(
        {.initial = o.prefetch, .max = std::max<std::size_t>(16, o.prefetch), .ram_budget_bytes = o.ram_budget});
  else if (o.depth != "fixed")
    bad_value("depth", "'" + o.depth + "'", "'fixed' or 'adaptive'");
  if (o.max_workers > o.workers) p.tune_workers({.min = 1, .max = o.max_workers});
  return p;
}

// The rank: explicit rank=/world_size= (both), else, with distributed=True, the launcher's
// environment (torchrun, Open MPI, Slurm, PMI: sample/rank.hpp); else rank 0 of 1.
inline sluice::sample::distributed_options rank_of(const options& o) {
  if ((o.rank >= 0) != (o.world_size >= 0))
    throw sluice::usage_error(std::string("sluice: ") + (o.rank >= 0 ? "rank=" : "world_size=") + " is given but " +
                              (o.rank >= 0 ? "world_size=" : "rank=") + " is not; give both (or neither, to read "
                              "them from the launcher's environment with distributed=True)");
  if (o.rank >= 0) {
    if (o.world_size == 0) throw sluice::usage_error("sluice: world_size=0: the world needs at least one rank");
    if (o.rank >= o.world_size)
      throw sluice::usage_error("sluice: rank=" + std::to_string(o.rank) + " is not below world_size=" +
                                std::to_string(o.world_size));
    return sluice::sample::rank_info::of(static_cast<std::uint64_t>(o.rank), static_cast<std::uint64_t>(o.world_size))
        .distributed({});
  }
  if (!o.distributed) return {};
  return sluice::sample::rank_from_environment().distributed({});
}

// The sampler the options name, for a dataset of n samples with `labels`, split across ranks;
// erased (sample::any_sampler: one indirect call a position), so each source compiles one loader
// whatever the sampler.
inline sluice::sample::any_sampler sampler_of(const options& o, std::size_t n, const std::vector<std::int64_t>& labels) {
  using namespace sluice::sample;  // samplers and weighting rules
  const auto r = rank_of(o);
  const std::uint64_t seed = o.sampler_seed >= 0 ? static_cast<std::uint64_t>(o.sampler_seed) : o.seed;
  if (o.sampler == "sequential") return distributed{sequential(n), r};
  if (o.sampler == "shuffle") return distributed{shuffle(n, {.seed = seed}), r};
  if (o.sampler == "weighted") {
    if (o.sample_weights.size() != n)
      throw sluice::usage_error("sluice: a weighted sampler needs one weight per sample (" + std::to_string(n) +
                                "), got " + std::to_string(o.sample_weights.size()) +
                                " (sluice.sample.weighted(weights), or sluice.loader's sample_weights=)");
    return distributed{weighted(o.sample_weights, {.seed = seed}), r};
  }
  if (o.sampler == "class_balanced") {
    if (labels.empty()) throw sluice::usage_error("sluice: sampler='class_balanced' needs labels");
    if (o.weights == "inverse_log") return distributed{class_balanced<inverse_log>(labels, {}, {.seed = seed}), r};
    if (o.weights == "inverse_frequency")
      return distributed{class_balanced<inverse_frequency>(labels, {}, {.seed = seed}), r};
    bad_value("weights", "'" + o.weights + "'", "'inverse_log' (1/log(1+n)) or 'inverse_frequency' (1/n)");
  }
  bad_value("sampler", "'" + o.sampler + "'", "'sequential', 'shuffle', 'weighted' or 'class_balanced'");
}

// Calls f(sampler) with the sampler the options name (sampler_of).
template <class F>
auto with_sampler(const options& o, std::size_t n, const std::vector<std::int64_t>& labels, F&& f) {
  return f(sampler_of(o, n, labels));
}

// Data without one label a sample (tokens, detection): the samplers that need no labels. `what`
// names the data in the refusal.
template <class F>
auto with_order_sampler(const options& o, std::size_t n, F&& f, const char* what = "token data (it has no labels)") {
  if (o.sampler == "class_balanced")
    bad_value("sampler", "'class_balanced'", std::string("'sequential', 'shuffle' or 'weighted' for ") + what);
  return f(sampler_of(o, n, {}));
}

using loader_ptr = std::shared_ptr<sluice::python::py_loader>;

loader_ptr make_records_loader(const options& o);  // idx, records, npy, shard (as stored)
loader_ptr make_image_loader(const options& o);    // shard + decode="jpeg", wds, tfrecord
loader_ptr make_detection_loader(const options& o);  // wds with boxes= and classes=
loader_ptr make_segmentation_loader(const options& o);  // wds with mask=
loader_ptr make_coco_loader(const options& o);  // a COCO image folder (images=) and its annotation file (path=)
loader_ptr make_yolo_loader(const options& o);  // a YOLO images folder (images=), labels beside it or labels=
loader_ptr make_token_loader(const options& o);    // tokens, documents
loader_ptr make_fields_loader(const options& o);   // wds with fields=
loader_ptr make_video_loader(const options& o);    // video files (paths=): clips

}  // namespace sluice_module
