// sluice/io/image_files.hpp — what the readers of image folders share (io/coco.hpp, io/yolo.hpp):
// a sample that owns its image file's bytes, and the check at open that every image is a file.
//
// An image folder is read one file per sample: fields(i) reads the file whole (bounded by a size
// limit; a FIFO or a directory is refused without blocking) into bytes the sample holds, and the
// sample's "image" field is a view of them, so the bytes live as long as any copy of the sample.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/regular_file.hpp"

namespace sluice::io {

// A sample of a reader of image files: the fields as views, and the image's bytes they point into.
template <class Schema>
struct image_file_sample : fields_sample<Schema> {
  std::shared_ptr<const std::string> image_bytes;
};

namespace detail {

inline std::string join_path(const std::string& dir, const std::string& name) {
  return dir + (dir.empty() || dir.back() == '/' ? "" : "/") + name;
}

// `dir` must be a directory: io_error when it cannot be read, usage_error when it is a file.
inline void check_directory(const std::string& dir, const std::string& who, const std::string& role) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw io_error(dir, "cannot open " + role, errno);
  if (!S_ISDIR(st.st_mode)) throw usage_error("sluice: " + who + ": '" + dir + "' is not a directory (" + role + ")");
}

// Every path must be a regular file; else one format_error naming `listed_in` (the file that
// lists them), how many are missing and the first few (`names`: as the list spells them).
inline void check_image_files(const std::vector<std::string>& paths, const std::vector<std::string>& names,
                              const std::string& dir, const std::string& listed_in) {
  std::string first;
  std::size_t missing = 0, shown = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    struct stat st {};
    if (::stat(paths[i].c_str(), &st) == 0 && S_ISREG(st.st_mode)) continue;
    if (shown++ < 5) first += (first.empty() ? "" : ", ") + names[i];
    ++missing;
  }
  if (missing != 0)
    throw format_error(listed_in, {}, std::to_string(missing) + " of its " + std::to_string(paths.size()) +
                                          " images are not files in '" + dir + "': " + first + (missing > 5 ? ", ..." : ""));
}

// The image file read whole, for a sample to hold.
inline std::shared_ptr<const std::string> read_image_file(const std::string& path, std::size_t limit) {
  return std::make_shared<const std::string>(read_small_file(path, limit, "an image"));
}

// Sample i of a reader of `size` images named `name`: the image file at `path` read whole (at
// most `limit` bytes) into its "image" field; the reader sets the others. A usage_error when i is
// out of range.
template <class Schema>
image_file_sample<Schema> image_sample(std::size_t i, std::size_t size, const std::string& name, const std::string& path,
                                       std::size_t limit) {
  if (i >= size)
    throw usage_error("sluice: sample " + std::to_string(i) + " out of range for '" + name + "' (" + std::to_string(size) +
                      " images)");
  image_file_sample<Schema> s;
  s.id = i;
  s.origin = path;
  s.image_bytes = read_image_file(path, limit);
  s.template set<"image">(std::as_bytes(std::span(s.image_bytes->data(), s.image_bytes->size())));
  return s;
}

}  // namespace detail
}  // namespace sluice::io
