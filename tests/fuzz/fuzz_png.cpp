// libFuzzer target: the PNG path (signature, chunks and CRCs, zlib, every colour type and
// interlace through libpng's transforms, the longjmp-confined error path, the pixel cap, then
// resize/crop/flip) into small, fixed outputs, as the decode stage runs it.
#include <vector>

#include "sluice/codec/png.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const sluice::codecs::png rgb(
      {.width = 24, .height = 20, .crop = sluice::codecs::crop_at::random, .resize_scale = 1.2, .random_flip = true},
      {.max_decoded_pixels = std::uint64_t{1} << 22});
  static const sluice::codecs::png grey_alpha(
      {.width = 16, .height = 16, .mode = sluice::codecs::fit::stretch, .layout = sluice::image_layout::chw},
      {.format = sluice::codecs::pixels::grey, .keep_alpha = true, .max_decoded_pixels = std::uint64_t{1} << 22});
  static std::vector<std::byte> out(rgb.output_bytes());
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  for (const auto* c : {&rgb, &grey_alpha}) {
    try {
      c->decode(in, std::span(out).first(c->output_bytes()), {.seed = 1, .epoch = 0, .id = size});
    } catch (const sluice::format_error&) {
    }
  }
  try {
    (void)sluice::codecs::read_png_header(in);
  } catch (const sluice::format_error&) {
  }
  return 0;
}
