// The Python module's segmentation source: WebDataset samples of an encoded image and a PNG mask
// of class ids (sluice.wds(..., mask="seg.png")). The image is decoded like every image source
// (size, crop or random_resized_crop, flip, layout); the mask follows the image's geometry (the
// same window, output size and flip, drawn once per sample), resampled nearest-neighbour so class
// ids are never blended, ignore_index where the window leaves the image (codec/mask.hpp):
//   {"image": (B, ...), "mask": (B, H, W) uint8}
// A mask of another size than its image, or a PNG that is not grey or palette, is a FormatError
// naming the shard, the sample and the member.
#include "image_codec.hpp"

#if SLUICE_WITH_TURBOJPEG && SLUICE_WITH_PNG
#include "sluice/codec/mask.hpp"
#include "sluice/io/wds.hpp"
#include "sluice/stage/decode.hpp"
#endif

namespace sluice_module {

#if SLUICE_WITH_TURBOJPEG && SLUICE_WITH_PNG
namespace {

constexpr const char* kSegmentation = "segmentation data (a sample has a mask of classes, not one label)";

using segmentation = sluice::schema<sluice::field<"image", std::uint8_t, sluice::variable>,
                                    sluice::field<"mask", std::uint8_t, sluice::variable>>;

}  // namespace

loader_ptr make_segmentation_loader(const options& o) {
  constexpr sluice::fixed_string Img = "image";
  constexpr sluice::fixed_string Mask = "mask";
  if (o.path.empty()) throw sluice::usage_error("sluice: source='wds' needs path=");
  if (o.ignore_index < 0 || o.ignore_index > 255)
    bad_value("ignore_index", std::to_string(o.ignore_index), "a class id of 0..255 (a uint8 mask)");
  sluice::io::wds_dataset<segmentation> data(
      shards_of(o), {.extensions = {{"image", o.image_field.empty() ? "jpg;jpeg;png" : o.image_field}, {"mask", o.mask}}});
  const sluice::mask<Mask> follow{.ignore_index = static_cast<std::uint8_t>(o.ignore_index)};
  return followed_image_loader<Img>(o, std::move(data), follow, kSegmentation, sluice::stack<Mask>{});
}
#else
loader_ptr make_segmentation_loader(const options& o) {
  throw sluice::usage_error("sluice: source='" + o.source + "' with mask= needs a module built with TurboJPEG and libpng");
}
#endif

}  // namespace sluice_module
