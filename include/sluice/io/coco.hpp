// sluice/io/coco.hpp — a COCO detection dataset as it is distributed: an image folder and one
// annotation file (instances_train2017.json), read as samples with fields. No conversion.
//
// coco_dataset is a fields_reader: sample i is entry i of the file's "images", with fields
// "image" (the file's bytes), "boxes" (f32 rows of 4: xyxy pixels, or xywh as stored),
// "classes" (i64: category k in id order is class k; categories() lists them), "iscrowd" (u8) and,
// with .segmentation = true, "segmentation" (one instance record per box: polygons or run lengths,
// which instance_masks<> draws, codec/instances.hpp). Images without annotations are kept with no
// boxes (.keep_empty = false drops them); .crowd = false drops crowd annotations.
// Errors: the annotation file is parsed and checked at open (depth and size limited); a bad entry
// is a format_error naming the file and the entry ("annotations[17].bbox: a negative width"), and
// images missing from the folder are one error listing the first of them. An image that cannot be
// read is an io_error naming it, when its sample is read (on_error::skip skips and counts it).
// Memory: the file is read whole and parsed once; only the tables are kept (4 floats, an int64 and
// a byte a box, and 8 bytes a polygon vertex with .segmentation).
// Threads: after construction every member is safe to call concurrently. Every rule:
// docs/readers.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/codec/instances.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/image_files.hpp"
#include "sluice/io/json.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::io {

using coco_schema = schema<field<"image", std::uint8_t, variable>, field<"boxes", float, variable>,
                           field<"classes", std::int64_t, variable>, field<"iscrowd", std::uint8_t, variable>,
                           field<"segmentation", std::uint8_t, variable>>;

struct coco_options {
  codecs::box_format boxes = codecs::box_format::xyxy;  // what "boxes" holds (COCO stores xywh)
  bool contiguous = true;   // classes 0..K-1 in category id order; false: the category ids as stored
  bool crowd = true;        // keep crowd annotations (iscrowd 1); false: drop them
  bool keep_empty = true;   // keep images without annotations (no boxes); false: drop them
  bool segmentation = false;  // read each annotation's polygons or run-length mask into "segmentation"
  std::size_t max_image_bytes = std::size_t{1} << 28;        // an image file larger is an error naming it
  std::size_t max_annotation_bytes = std::size_t{1} << 32;   // the annotation file's limit
};

struct coco_category {
  std::int64_t id = 0;
  std::string name;
};

// A sample of coco_dataset: the fields as views, and the image's bytes they point into.
using coco_sample = image_file_sample<coco_schema>;

// The tables coco_dataset keeps, parsed from an annotation file's text (no files are touched:
// what the fuzz target runs).
struct coco_tables {
  std::vector<std::int64_t> image_ids;         // per sample
  std::vector<std::string> file_names;         // per sample, as in the file
  std::vector<std::size_t> first_box{0};       // per sample, then the total: its rows [first, next)
  std::vector<float> boxes;                    // 4 per row
  std::vector<std::int64_t> classes;           // 1 per row
  std::vector<std::uint8_t> iscrowd;           // 1 per row
  std::vector<std::byte> segments;             // instance records (codec/instances.hpp), in row order
  std::vector<std::size_t> first_segment{0};   // per sample, then the total: its bytes [first, next)
  std::vector<coco_category> categories;       // sorted by id: class k is categories[k] when contiguous
};

namespace detail {

[[noreturn]] inline void coco_fail(const std::string& file, const std::string& where, const std::string& why) {
  throw format_error(file, {}, where + ": " + why);
}

// A file_name a sample may read: relative, and not climbing out of the images folder.
inline void check_coco_file_name(const std::string& name, const std::string& file, const std::string& where) {
  if (name.empty()) coco_fail(file, where, "an empty file_name");
  if (name.front() == '/') coco_fail(file, where, "file_name '" + name + "' is absolute; it must name a file in the images folder");
  std::string_view rest = name;
  while (!rest.empty()) {
    const auto cut = rest.find('/');
    if (rest.substr(0, cut) == "..")
      coco_fail(file, where, "file_name '" + name + "' climbs out of the images folder (\"..\")");
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 1);
  }
  if (name.find('\0') != std::string::npos) coco_fail(file, where, "file_name holds a NUL byte");
}

inline std::int64_t coco_int(const json_value& v, const std::string& file, const std::string& what) {
  if (v.is_int()) return v.as_int(file, what);
  // Tools that write JSON from Python floats store 3.0 for 3.
  const double d = v.as_double(file, what);
  if (!(std::abs(d) < 9.0e15) || std::floor(d) != d) coco_fail(file, what, "not an integer");
  return static_cast<std::int64_t>(d);
}

// One annotation's "segmentation" (its JSON text) appended as an instance record.
inline void coco_segmentation(std::string_view text, codecs::instance_writer& out, const std::string& file,
                              const std::string& w) {
  const json_value v = parse_json(text, file);
  if (v.is_array()) {  // polygons: [[x0, y0, x1, y1, ...], ...]
    const auto& polys = v.as_array(file, w);
    std::vector<std::vector<float>> ps(polys.size());
    for (std::size_t k = 0; k < polys.size(); ++k) {
      const std::string wk = w + "[" + std::to_string(k) + "]";
      const auto& xy = polys[k].as_array(file, wk);
      if (xy.size() % 2 != 0) coco_fail(file, wk, std::to_string(xy.size()) + " numbers; a polygon is x, y pairs");
      for (std::size_t i = 0; i < xy.size(); ++i) {
        const double d = xy[i].as_double(file, wk + "[" + std::to_string(i) + "]");
        if (!std::isfinite(d) || std::abs(d) > 1e9) coco_fail(file, wk, "a vertex that is not a finite number of pixels");
        ps[k].push_back(static_cast<float>(d));
      }
    }
    out.polygons(ps);
    return;
  }
  if (!v.is_object())
    coco_fail(file, w, std::string("is ") + json_value::kind_name(v.type()) +
                           "; a segmentation is polygons [[x, y, ...], ...] or a run-length mask {\"counts\", \"size\"}");
  const auto& size = v.at("size", file, w).as_array(file, w + ".size");
  if (size.size() != 2) coco_fail(file, w + ".size", std::to_string(size.size()) + " numbers; a size is [height, width]");
  std::int64_t hw[2];
  for (int k = 0; k < 2; ++k) {
    hw[k] = coco_int(size[static_cast<std::size_t>(k)], file, w + ".size");
    if (hw[k] <= 0 || hw[k] > (std::int64_t{1} << 16))
      coco_fail(file, w + ".size", "a side of " + std::to_string(hw[k]) + " pixels (1 to 65536)");
  }
  const json_value& c = v.at("counts", file, w);
  std::vector<std::uint32_t> counts;
  if (c.is_string()) {
    try {
      counts = codecs::coco_rle_counts(c.as_string(file, w + ".counts"));
    } catch (const format_error& e) {
      coco_fail(file, w + ".counts", e.cause());
    }
  } else {
    const auto& a = c.as_array(file, w + ".counts");
    counts.reserve(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::int64_t n = coco_int(a[i], file, w + ".counts[" + std::to_string(i) + "]");
      if (n < 0 || n > 0xffffffffLL) coco_fail(file, w + ".counts", "a count of " + std::to_string(n) + " (0 or more)");
      counts.push_back(static_cast<std::uint32_t>(n));
    }
  }
  std::uint64_t sum = 0;
  for (const auto n : counts) sum += n;
  if (sum != static_cast<std::uint64_t>(hw[0] * hw[1]))
    coco_fail(file, w + ".counts", "counts that sum to " + std::to_string(sum) + " pixels where the mask is " +
                                       std::to_string(hw[1]) + "x" + std::to_string(hw[0]));
  out.runs(static_cast<std::uint32_t>(hw[0]), static_cast<std::uint32_t>(hw[1]), counts);
}

}  // namespace detail

// Parses an annotation file's text into the tables; a format_error naming `file` and the entry.
inline coco_tables parse_coco(std::string_view text, const std::string& file, const coco_options& o = {}) {
  // Polygons and RLE masks are most of a COCO file: without .segmentation checked and dropped;
  // with it kept as where their text lies, converted below one at a time.
  static constexpr std::string_view segmentation[] = {"segmentation"};
  const json_value doc = o.segmentation ? parse_json(text, file, {}, segmentation) : parse_json(text, file, segmentation);
  if (!doc.is_object()) detail::coco_fail(file, "the file", "not a JSON object (a COCO annotation file has \"images\")");
  const auto& images = doc.at("images", file).as_array(file, "images");
  const json_value* anns_v = doc.find("annotations");
  const json_value* cats_v = doc.find("categories");
  static const json_value::array none;
  const auto& anns = anns_v != nullptr ? anns_v->as_array(file, "annotations") : none;
  const auto& cats = cats_v != nullptr ? cats_v->as_array(file, "categories") : none;

  coco_tables t;
  // Categories, sorted by id; their class is their rank (contiguous) or their id.
  for (std::size_t c = 0; c < cats.size(); ++c) {
    const std::string w = "categories[" + std::to_string(c) + "]";
    const json_value* name = cats[c].find("name");
    t.categories.push_back({detail::coco_int(cats[c].at("id", file, w), file, w + ".id"),
                            name != nullptr && name->is_string() ? name->as_string(file, w + ".name") : std::string{}});
  }
  std::sort(t.categories.begin(), t.categories.end(), [](const coco_category& a, const coco_category& b) { return a.id < b.id; });
  std::unordered_map<std::int64_t, std::int64_t> class_of;
  for (std::size_t k = 0; k < t.categories.size(); ++k) {
    if (!class_of.emplace(t.categories[k].id, o.contiguous ? static_cast<std::int64_t>(k) : t.categories[k].id).second)
      detail::coco_fail(file, "categories", "id " + std::to_string(t.categories[k].id) + " is given twice");
  }

  // Images, in the file's order.
  std::unordered_map<std::int64_t, std::size_t> image_of;
  image_of.reserve(images.size());
  std::vector<std::int64_t> ids;
  std::vector<std::string> names;
  ids.reserve(images.size());
  names.reserve(images.size());
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::string w = "images[" + std::to_string(i) + "]";
    const std::int64_t id = detail::coco_int(images[i].at("id", file, w), file, w + ".id");
    std::string name = images[i].at("file_name", file, w).as_string(file, w + ".file_name");
    detail::check_coco_file_name(name, file, w);
    if (!image_of.emplace(id, i).second) detail::coco_fail(file, w, "image id " + std::to_string(id) + " is given twice");
    ids.push_back(id);
    names.push_back(std::move(name));
  }

  // Annotations, grouped by image (stable: each image's boxes in the file's order).
  struct row {
    std::size_t image;
    float box[4];
    std::int64_t cls;
    std::uint8_t crowd;
    std::size_t annotation;  // its index in "annotations"
  };
  std::vector<row> rows;
  rows.reserve(anns.size());
  for (std::size_t a = 0; a < anns.size(); ++a) {
    const std::string w = "annotations[" + std::to_string(a) + "]";
    const json_value& an = anns[a];
    const std::int64_t image_id = detail::coco_int(an.at("image_id", file, w), file, w + ".image_id");
    const auto im = image_of.find(image_id);
    if (im == image_of.end()) detail::coco_fail(file, w, "image_id " + std::to_string(image_id) + " is not an id of \"images\"");
    const std::int64_t cat = detail::coco_int(an.at("category_id", file, w), file, w + ".category_id");
    const auto cl = class_of.find(cat);
    if (cl == class_of.end()) detail::coco_fail(file, w, "category_id " + std::to_string(cat) + " is not an id of \"categories\"");
    std::uint8_t crowd = 0;
    if (const json_value* c = an.find("iscrowd")) {
      const std::int64_t v = detail::coco_int(*c, file, w + ".iscrowd");
      if (v != 0 && v != 1) detail::coco_fail(file, w, "iscrowd " + std::to_string(v) + " (0 or 1)");
      crowd = static_cast<std::uint8_t>(v);
    }
    const auto& bb = an.at("bbox", file, w).as_array(file, w + ".bbox");
    if (bb.size() != 4) detail::coco_fail(file, w + ".bbox", std::to_string(bb.size()) + " numbers; a box is [x, y, width, height]");
    double v[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = bb[static_cast<std::size_t>(k)].as_double(file, w + ".bbox[" + std::to_string(k) + "]");
      if (!std::isfinite(v[k]) || std::abs(v[k]) > 1e9) detail::coco_fail(file, w + ".bbox", "a coordinate that is not a finite number of pixels");
    }
    if (v[2] < 0 || v[3] < 0)
      detail::coco_fail(file, w + ".bbox", std::string("a negative ") + (v[2] < 0 ? "width" : "height") + " (" +
                                               std::to_string(v[2] < 0 ? v[2] : v[3]) + ")");
    if (crowd != 0 && !o.crowd) continue;
    row r{im->second, {}, cl->second, crowd, a};
    codecs::box_to_corners(codecs::box_format::xywh, v);  // COCO stores xywh
    codecs::corners_to_box(o.boxes, v);
    for (int k = 0; k < 4; ++k) r.box[k] = static_cast<float>(v[k]);
    rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const row& x, const row& y) { return x.image < y.image; });

  codecs::instance_writer seg_out(t.segments);
  std::size_t r = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::size_t from = r;
    while (r < rows.size() && rows[r].image == i) ++r;
    if (r == from && !o.keep_empty) continue;
    for (std::size_t k = from; k < r; ++k) {
      t.boxes.insert(t.boxes.end(), rows[k].box, rows[k].box + 4);
      t.classes.push_back(rows[k].cls);
      t.iscrowd.push_back(rows[k].crowd);
      if (o.segmentation) {  // converted in the rows' order, straight into the table
        const std::string w = "annotations[" + std::to_string(rows[k].annotation) + "].segmentation";
        if (const json_value* at = anns[rows[k].annotation].find("segmentation")) {
          const auto& span = at->as_array(file, w);  // [offset, length] of its text (parse_json's raw members)
          detail::coco_segmentation(text.substr(static_cast<std::size_t>(span[0].as_int(file, w)),
                                                static_cast<std::size_t>(span[1].as_int(file, w))),
                                    seg_out, file, w);
        } else {
          seg_out.none();
        }
      }
    }
    t.first_segment.push_back(t.segments.size());
    t.image_ids.push_back(ids[i]);
    t.file_names.push_back(std::move(names[i]));
    t.first_box.push_back(t.classes.size());
  }
  return t;
}

class coco_dataset {
 public:
  using reader_concept = reader_tag;
  using schema_type = coco_schema;
  using sample_type = coco_sample;

  coco_dataset(std::string images, std::string annotations, coco_options o = {})
      : dir_(std::move(images)), file_(std::move(annotations)), opt_(o) {
    t_ = parse_coco(detail::read_small_file(file_, opt_.max_annotation_bytes, "a COCO annotation file"), file_, opt_);
    detail::check_directory(dir_, "coco_dataset", "the images folder of '" + file_ + "'");
    paths_.reserve(t_.file_names.size());
    for (const auto& name : t_.file_names) paths_.push_back(detail::join_path(dir_, name));
    detail::check_image_files(paths_, t_.file_names, dir_, file_);
  }

  [[nodiscard]] std::size_t size() const noexcept { return t_.image_ids.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return file_; }
  [[nodiscard]] const std::string& images() const noexcept { return dir_; }
  // Class k's category (contiguous classes); every category in id order.
  [[nodiscard]] const std::vector<coco_category>& categories() const noexcept { return t_.categories; }
  [[nodiscard]] std::int64_t image_id(std::size_t i) const { return t_.image_ids.at(i); }
  [[nodiscard]] const std::string& image_path(std::size_t i) const { return paths_.at(i); }
  [[nodiscard]] std::size_t boxes_of(std::size_t i) const { return t_.first_box.at(i + 1) - t_.first_box.at(i); }
  [[nodiscard]] const coco_tables& tables() const noexcept { return t_; }

  // Sample i: its image read whole, its rows as views into the tables.
  [[nodiscard]] coco_sample fields(std::size_t i) const {
    coco_sample s = detail::image_sample<coco_schema>(i, size(), file_, i < size() ? paths_[i] : file_, opt_.max_image_bytes);
    const std::size_t a = t_.first_box[i], b = t_.first_box[i + 1];
    s.set<"boxes">(std::span<const float>(t_.boxes.data() + 4 * a, 4 * (b - a)));
    s.set<"classes">(std::span<const std::int64_t>(t_.classes.data() + a, b - a));
    s.set<"iscrowd">(std::span<const std::uint8_t>(t_.iscrowd.data() + a, b - a));
    const std::size_t sa = t_.first_segment[i], sb = t_.first_segment[i + 1];
    s.set<"segmentation">(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(t_.segments.data()) + sa, sb - sa));
    return s;
  }

 private:
  std::string dir_, file_;
  coco_options opt_;
  coco_tables t_;
  std::vector<std::string> paths_;
};

}  // namespace sluice::io
