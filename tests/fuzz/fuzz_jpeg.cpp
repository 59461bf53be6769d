// libFuzzer target: the JPEG path (header, DCT-scaled decode, resize/crop/flip) into a small,
// fixed output, as the decode stage runs it; and the device decoder's path through its host double
// (the frame header read from the markers, the refusals, the full decode, the fused pass).
#include <memory>
#include <vector>

#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/device_jpeg.hpp"
#include "sluice/stage/device_jpeg_host.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const sluice::codecs::jpeg rgb(
      {.width = 24, .height = 20, .crop = sluice::codecs::crop_at::random, .resize_scale = 1.2, .random_flip = true},
      {.max_decoded_pixels = std::uint64_t{1} << 22});
  static const sluice::codecs::jpeg grey(
      {.width = 16, .height = 16, .mode = sluice::codecs::fit::stretch},
      {.format = sluice::codecs::pixels::grey, .max_decoded_pixels = std::uint64_t{1} << 22});
  static std::vector<std::byte> out(rgb.output_bytes());
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  for (const auto* c : {&rgb, &grey}) {
    try {
      c->decode(in, std::span(out).first(c->output_bytes()), {.seed = 1, .epoch = 0, .id = size});
    } catch (const sluice::format_error&) {
    }
  }
  static const sluice::jpeg_device_decoder device(sluice::host_jpeg_backend{}, rgb.transform_options(),
                                                  {.max_pixels = std::uint64_t{1} << 22});
  sluice::device_job job({{in, {.seed = 1, .epoch = 0, .id = size}}}, rgb.output_bytes());
  device.run(job);  // failures are marked (for the host to report), never thrown
  return 0;
}
