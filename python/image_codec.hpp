// The Python module's image decoding, shared by the image sources (source_images.cpp) and the
// detection source (source_detection.cpp): the codec type (JPEG, or JPEG and PNG by the first bytes
// where libpng is built in) and the codec the keywords name (size=, random_resized_crop=, flip=,
// layout=). Only where TurboJPEG is built in.
#pragma once

#include "pipelines.hpp"

#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/jpeg.hpp"
#if SLUICE_WITH_PNG
#include "sluice/codec/image.hpp"
#endif

namespace sluice_module {

#if SLUICE_WITH_PNG
using image_codec = sluice::codecs::image;  // JPEG or PNG, by the first bytes
#else
using image_codec = sluice::codecs::jpeg;
#endif

inline image_codec codec_of(const options& o) {
  if (o.size.size() != 2 || o.size[0] <= 0 || o.size[1] <= 0)
    throw sluice::usage_error("sluice: source='" + o.source + "' needs size=(height, width), both positive");
  if (o.layout != "chw" && o.layout != "hwc") bad_value("layout", "'" + o.layout + "'", "'chw' or 'hwc'");
  return image_codec({.width = o.size[1], .height = o.size[0],
                      .mode = o.random_resized_crop ? sluice::codecs::fit::random_resized_crop : sluice::codecs::fit::crop,
                      .random_flip = o.flip,
                      .layout = o.layout == "chw" ? sluice::image_layout::chw : sluice::image_layout::hwc});
}

}  // namespace sluice_module
#endif
