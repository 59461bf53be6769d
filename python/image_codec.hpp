// The Python module's image decoding, shared by the image sources (source_images.cpp) and the
// detection and segmentation sources (source_detection.cpp, source_segmentation.cpp): the codec
// type (JPEG, or JPEG and PNG by the first bytes where libpng is built in), the codec the keywords
// name (size=, random_resized_crop=, flip=, layout=) and the loader of an image with fields that
// follow it. Only where TurboJPEG is built in.
#pragma once

#include <tuple>
#include <type_traits>

#include "pipelines.hpp"

#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/decode.hpp"
#include "sluice/stage/field_collate.hpp"
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

// decode<Img>(codec, follow...): `follow` one follower, or a std::tuple of them.
template <class T>
struct is_tuple : std::false_type {};
template <class... T>
struct is_tuple<std::tuple<T...>> : std::true_type {};
template <sluice::fixed_string Img, class Codec, class Follow>
auto decode_following(const Codec& codec, const Follow& follow) {
  if constexpr (is_tuple<Follow>::value)
    return std::apply([&](const auto&... f) { return sluice::decode<Img>(codec, f...); }, follow);
  else
    return sluice::decode<Img>(codec, follow);
}

// A source whose image field Img is decoded with `follow` following it (one follower or a tuple), collated as the
// keywords say (normalised float32 with mean/std, or uint8 as stored) beside `extra`, the
// followed fields' collators. `pre` adds the stages between the read and the decode (the
// chain read so far in, the chain with them out). `what` names the data in a sampler refusal.
template <sluice::fixed_string Img, class Data, class Pre, class Follow, class... Extra>
loader_ptr followed_image_loader_after(const options& o, Data data, Pre pre, const Follow& follow, const char* what,
                                       Extra... extra) {
  const image_codec codec = codec_of(o);
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  const std::size_t n = data.size();
  if (o.output == "float32") {
    return with_order_sampler(o, n, [&](auto s) {
      return sluice::python::wrap(pre(sluice::from(std::move(s)) | sluice::read(std::move(data))) |
                                  decode_following<Img>(codec, follow) |
                                  sluice::collate(bo, sluice::normalized<Img>{.mean = o.mean, .std = o.std}, extra...) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    }, what);
  }
  if (!o.output.empty() && o.output != "uint8") bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  return with_order_sampler(o, n, [&](auto s) {
    return sluice::python::wrap(pre(sluice::from(std::move(s)) | sluice::read(std::move(data))) |
                                decode_following<Img>(codec, follow) |
                                sluice::collate(bo, sluice::stack<Img>{}, extra...) |
                                sluice::prefetch(depth_of(o), loader_opts(o)));
  }, what);
}

// The same, decoding straight after the read.
template <sluice::fixed_string Img, class Data, class Follow, class... Extra>
loader_ptr followed_image_loader(const options& o, Data data, const Follow& follow, const char* what, Extra... extra) {
  return followed_image_loader_after<Img>(o, std::move(data), [](auto chain) { return chain; }, follow, what, extra...);
}

}  // namespace sluice_module
#endif
