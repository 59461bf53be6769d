// sluice/io/yolo.hpp — a YOLO detection dataset as Ultralytics and the tools that export to it
// lay it out: images/<split>/name.jpg beside labels/<split>/name.txt, one line a box.
//
// yolo_dataset reads every .jpg, .jpeg and .png under the images folder (in path order) with its
// label file (the path's last "/images/" made "/labels/", or below `.labels`), as samples with
// "image" (the file's bytes), "boxes" (f32 rows of 4, fractions of the image: xyxy from the
// stored cx cy w h, or xywh) and "classes" (i64). With `.polygons`, a segmentation polygon line is
// read as its bounding box. An image without labels is a sample with no boxes (`.keep_empty`).
// Errors: an image of another kind (.webp, .bmp, ...) is refused at open naming it, never left out;
// a folder whose images have no label file at all is a usage_error saying where it looked; every
// label file is checked at open, a bad line a format_error naming the file and the line; an image
// that cannot be read is an io_error naming it, when its sample is read.
// Threads: after construction every member is safe to call concurrently. Every rule:
// docs/readers.md.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "sluice/codec/transform.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/image_files.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::io {

using yolo_schema = schema<field<"image", std::uint8_t, variable>, field<"boxes", float, variable>,
                           field<"classes", std::int64_t, variable>>;
using yolo_sample = image_file_sample<yolo_schema>;

struct yolo_options {
  codecs::box_format boxes = codecs::box_format::xyxy;  // what "boxes" holds, as fractions of the image
                                                        // (cxcywh: the label file's own cx cy w h)
  std::size_t classes = 0;    // the class count (data.yaml's nc): a class at or above it is an error; 0: any
  std::string labels{};       // the labels folder; empty: Ultralytics' images -> labels rule
  bool keep_empty = true;     // keep images without boxes; false: drop them
  bool polygons = false;      // read a line of 6 or more numbers as a polygon (its bounding box); false: an error
  std::size_t max_image_bytes = std::size_t{1} << 28;
  std::size_t max_label_bytes = std::size_t{1} << 24;
};

namespace detail {

inline std::string lower_ext(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// Ultralytics' rule: the last "/images/" of the path made "/labels/", the extension ".txt".
inline std::string yolo_label_of(const std::string& image) {
  std::string l = image;
  const auto at = l.rfind("/images/");
  if (at != std::string::npos) l.replace(at, 8, "/labels/");
  const auto slash = l.rfind('/');
  const auto dot = l.rfind('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) l.erase(dot);
  return l + ".txt";
}

// Parses one label file's text into rows (boxes: 4 a row, as `format` says; classes: one a row).
inline void parse_yolo_labels(std::string_view text, const std::string& file, const yolo_options& o,
                              std::vector<float>& boxes, std::vector<std::int64_t>& classes) {
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    const std::string where = "line " + std::to_string(line_no);
    std::vector<std::string_view> tok;
    for (std::size_t p = 0; p < line.size();) {
      while (p < line.size() && std::isspace(static_cast<unsigned char>(line[p]))) ++p;
      const std::size_t b = p;
      while (p < line.size() && !std::isspace(static_cast<unsigned char>(line[p]))) ++p;
      if (p > b) tok.push_back(line.substr(b, p - b));
    }
    if (tok.empty()) continue;
    auto number = [&](std::string_view t, const char* what) {
      double v = 0;
      const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
      if (r.ec != std::errc{} || r.ptr != t.data() + t.size() || !std::isfinite(v))
        throw format_error(file, {}, where + ": " + what + " '" + std::string(t) + "' is not a number");
      return v;
    };
    const double c = number(tok[0], "the class");
    if (c < 0 || std::floor(c) != c || c > 9.0e15)
      throw format_error(file, {}, where + ": the class '" + std::string(tok[0]) + "' is not a non-negative integer");
    if (o.classes != 0 && c >= static_cast<double>(o.classes))
      throw format_error(file, {}, where + ": class " + std::string(tok[0]) + " is not below the class count " +
                                       std::to_string(o.classes));
    const std::size_t n = tok.size() - 1;
    if (n != 4 && (!o.polygons || n < 6 || n % 2 != 0))
      throw format_error(file, {}, where + ": " + std::to_string(n) + " numbers after the class; a box is 4 (cx cy w h)" +
                                       (o.polygons ? ", a polygon an even 6 or more"
                                                   : " (a segmentation polygon, an even 6 or more, is read with .polygons "
                                                     "= true as its bounding box; pose labels are not read)"));
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) {
      v[k] = number(tok[k + 1], "the coordinate");
      if (v[k] < 0 || v[k] > 1)
        throw format_error(file, {}, where + ": the coordinate " + std::string(tok[k + 1]) +
                                         " is outside [0, 1] (YOLO labels are fractions of the image's size)");
    }
    double x0, y0, x1, y1;
    if (n == 4) {
      x0 = v[0] - v[2] / 2, y0 = v[1] - v[3] / 2, x1 = v[0] + v[2] / 2, y1 = v[1] + v[3] / 2;
    } else {
      x0 = x1 = v[0], y0 = y1 = v[1];
      for (std::size_t k = 0; k < n; k += 2) {
        x0 = std::min(x0, v[k]), x1 = std::max(x1, v[k]);
        y0 = std::min(y0, v[k + 1]), y1 = std::max(y1, v[k + 1]);
      }
    }
    double b[4] = {x0, y0, x1, y1};
    codecs::corners_to_box(o.boxes, b);
    if (n == 4 && o.boxes == codecs::box_format::cxcywh) b[0] = v[0], b[1] = v[1], b[2] = v[2], b[3] = v[3];  // as written
    for (double x : b) boxes.push_back(static_cast<float>(x));
    classes.push_back(static_cast<std::int64_t>(c));
  }
}

}  // namespace detail

class yolo_dataset {
 public:
  using reader_concept = reader_tag;
  using schema_type = yolo_schema;
  using sample_type = yolo_sample;

  explicit yolo_dataset(std::string images, yolo_options o = {}) : dir_(std::move(images)), opt_(std::move(o)) {
    detail::check_directory(dir_, "yolo_dataset", "the images folder");
    if (!opt_.labels.empty()) detail::check_directory(opt_.labels, "yolo_dataset", "the labels folder");
    namespace fs = std::filesystem;
    std::vector<std::string> found, other;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir_, fs::directory_options::follow_directory_symlink, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::string e = detail::lower_ext(it->path());
      if (e == ".jpg" || e == ".jpeg" || e == ".png") found.push_back(it->path().string());
      else if (e == ".bmp" || e == ".tif" || e == ".tiff" || e == ".webp" || e == ".dng" || e == ".mpo" ||
               e == ".pfm" || e == ".heic" || e == ".gif")
        other.push_back(it->path().string());
    }
    if (ec) throw io_error(dir_, "cannot list the images folder", ec.value());
    if (!other.empty()) {
      std::sort(other.begin(), other.end());
      throw usage_error("sluice: yolo_dataset: '" + dir_ + "' holds " + std::to_string(other.size()) +
                        " images that are not JPEG or PNG (" + other.front() + (other.size() > 1 ? ", ..." : "") +
                        "); sluice decodes JPEG and PNG: convert them, or move them out of the folder");
    }
    if (found.empty())
      throw usage_error("sluice: yolo_dataset: '" + dir_ + "' holds no .jpg, .jpeg or .png images (sub-folders included)");
    std::sort(found.begin(), found.end());
    first_box_.push_back(0);
    std::size_t labelled = 0;
    std::string first_label;
    for (auto& image : found) {
      std::string label;
      if (opt_.labels.empty()) {
        // On the absolute path, so that a relative "images/..." finds its "labels/..." too.
        label = detail::yolo_label_of(fs::absolute(fs::path(image)).lexically_normal().string());
      } else {
        label = detail::join_path(opt_.labels, fs::path(image).lexically_relative(dir_).replace_extension(".txt").string());
      }
      if (first_label.empty()) first_label = label;
      struct stat st {};
      if (::stat(label.c_str(), &st) == 0) {
        ++labelled;
        detail::parse_yolo_labels(detail::read_small_file(label, opt_.max_label_bytes, "a YOLO label file"), label, opt_,
                                  boxes_, classes_);
      }
      if (classes_.size() == first_box_.back() && !opt_.keep_empty) continue;
      first_box_.push_back(classes_.size());
      images_.push_back(std::move(image));
      labels_.push_back(std::move(label));
    }
    // Not one label file where they were looked for: the labels are elsewhere, not every image
    // background. An error, never a dataset read without its boxes.
    if (labelled == 0)
      throw usage_error("sluice: yolo_dataset: none of the " + std::to_string(found.size()) + " images under '" + dir_ +
                        "' has a label file (the first was looked for at '" + first_label +
                        "'); name the labels folder with .labels (Python: labels=)");
  }

  [[nodiscard]] std::size_t size() const noexcept { return images_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return dir_; }
  [[nodiscard]] const std::string& image_path(std::size_t i) const { return images_.at(i); }
  [[nodiscard]] const std::string& label_path(std::size_t i) const { return labels_.at(i); }
  [[nodiscard]] std::size_t boxes_of(std::size_t i) const { return first_box_.at(i + 1) - first_box_.at(i); }

  // Sample i: its image read whole, its rows as views into the tables.
  [[nodiscard]] yolo_sample fields(std::size_t i) const {
    yolo_sample s = detail::image_sample<yolo_schema>(i, size(), dir_, i < size() ? images_[i] : dir_, opt_.max_image_bytes);
    const std::size_t a = first_box_[i], b = first_box_[i + 1];
    s.set<"boxes">(std::span<const float>(boxes_.data() + 4 * a, 4 * (b - a)));
    s.set<"classes">(std::span<const std::int64_t>(classes_.data() + a, b - a));
    return s;
  }

 private:
  std::string dir_;
  yolo_options opt_;
  std::vector<std::string> images_, labels_;
  std::vector<std::size_t> first_box_;
  std::vector<float> boxes_;
  std::vector<std::int64_t> classes_;
};

}  // namespace sluice::io
