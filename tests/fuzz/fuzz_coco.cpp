// libFuzzer target: detection annotations as text. The same input as a COCO annotation file
// (io/coco.hpp's parse_coco, over io/json.hpp), as a YOLO label file (io/yolo.hpp) and as a
// sample's JSON member read by path (stage/json_fields.hpp): a format_error or tables whose rows
// agree with each other, never a crash or a hang.
#include <cstdlib>
#include <string_view>

#include "sluice/io/coco.hpp"
#include "sluice/io/yolo.hpp"
#include "sluice/stage/json_fields.hpp"

namespace {
using member = sluice::schema<sluice::field<"json", std::uint8_t, sluice::variable>>;
using annotations = sluice::json_fields<"json", sluice::field<"boxes", float, sluice::variable>,
                                        sluice::field<"classes", std::int64_t, sluice::variable>,
                                        sluice::field<"crowd", std::uint8_t, sluice::variable>>;
const annotations coco_paths{{"boxes", "annotations[*].bbox", sluice::json_box::xywh},
                             {"classes", "annotations[*].category_id"},
                             {"crowd", "annotations[*].iscrowd"}};
const annotations flat_paths{{"boxes", "boxes[*]", sluice::json_box::cxcywh}, {"classes", "[*]"}, {"crowd", "a.b.c"}};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool contiguous : {true, false}) {
    try {
      // with contiguous = false, segmentation values are read too (codec/instances.hpp's records)
      const auto t = sluice::io::parse_coco(text, "fuzz.json",
                                            {.contiguous = contiguous, .crowd = contiguous, .segmentation = !contiguous});
      if (t.first_box.size() != t.image_ids.size() + 1 || t.file_names.size() != t.image_ids.size()) std::abort();
      if (t.first_box.back() != t.classes.size() || t.boxes.size() != 4 * t.classes.size() ||
          t.iscrowd.size() != t.classes.size())
        std::abort();
      for (std::size_t i = 0; i + 1 < t.first_box.size(); ++i)
        if (t.first_box[i] > t.first_box[i + 1]) std::abort();
      for (std::size_t r = 0; r < t.classes.size(); ++r) {
        if (t.iscrowd[r] > 1) std::abort();
        if (contiguous && (t.classes[r] < 0 || static_cast<std::size_t>(t.classes[r]) >= t.categories.size())) std::abort();
        if (t.boxes[4 * r + 2] < t.boxes[4 * r] || t.boxes[4 * r + 3] < t.boxes[4 * r + 1]) std::abort();
      }
      if (t.first_segment.size() != t.first_box.size() || (contiguous && !t.segments.empty())) std::abort();
      for (std::size_t i = 0; !contiguous && i + 1 < t.first_box.size(); ++i) {
        // each sample's records, one a box, drawn through a small transform of a 16 x 12 image
        // when their masks are of that size
        const std::span<const std::byte> rec(t.segments.data() + t.first_segment[i], t.first_segment[i + 1] - t.first_segment[i]);
        const std::size_t boxes = t.first_box[i + 1] - t.first_box[i];
        sluice::codecs::image_transform tr;
        tr.src_width = 16, tr.src_height = 12, tr.x = 1, tr.y = -2, tr.w = 14, tr.h = 15, tr.out_width = 5, tr.out_height = 4;
        try {
          sluice::codecs::check_instances(rec, tr, boxes);
        } catch (const sluice::format_error&) {
          continue;  // a mask of another size than 16 x 12
        }
        std::vector<std::uint32_t> keep(boxes);
        for (std::uint32_t k = 0; k < boxes; ++k) keep[k] = k;
        std::vector<std::byte> out(20 * boxes);
        sluice::codecs::draw_instances(rec, out, tr, keep);
        for (const std::byte b : out)
          if (b != std::byte{0} && b != std::byte{1}) std::abort();
        for (const std::uint8_t b : sluice::codecs::detail::instance_bits())  // left all 0 for the next draw
          if (b != 0) std::abort();
      }
    } catch (const sluice::format_error&) {
    }
  }
  for (bool polygons : {false, true}) {
    std::vector<float> boxes;
    std::vector<std::int64_t> classes;
    try {
      sluice::io::detail::parse_yolo_labels(text, "fuzz.txt", {.classes = polygons ? 0u : 80u, .polygons = polygons},
                                            boxes, classes);
    } catch (const sluice::format_error&) {
    }
    if (boxes.size() != 4 * classes.size()) std::abort();
    for (std::size_t r = 0; r < classes.size(); ++r)
      if (classes[r] < 0 || boxes[4 * r + 2] < boxes[4 * r] || boxes[4 * r + 3] < boxes[4 * r + 1]) std::abort();
  }
  sluice::fields_sample<member> s;
  s.set<"json">(std::as_bytes(std::span(text.data(), text.size())));
  for (const annotations* a : {&coco_paths, &flat_paths}) {
    try {
      const auto out = (*a)(s, sluice::sample_context{});
      if (out.bytes_of<"boxes">().size() % 16 != 0 || out.bytes_of<"classes">().size() % 8 != 0) std::abort();
    } catch (const sluice::format_error&) {
    }
  }
  return 0;
}
