// sluice/stage/device_jpeg_host.hpp — host_jpeg_backend: stage/device_jpeg.hpp's backend on the
// host, the double of the device's part. Each image is decoded at full size by libjpeg-turbo
// (accurate integer IDCT, fancy upsampling: what the host codec decodes) and resampled by the
// fused pass's host reference (codec/fused_resample.hpp) straight into the job's output. With it,
// jpeg_device_decoder runs every line it runs with nvJPEG up to the CUDA calls: tests of the
// split, the refusals and the failure paths run on any machine, and its output is the host
// codec's byte for byte when that codec's DCT scaling is off. Needs the sluice::jpeg target.
// Threads: run() is const and keeps its buffers per thread.
#pragma once

#include <turbojpeg.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/codec/fused_resample.hpp"
#include "sluice/codec/jpeg.hpp"
#include "sluice/stage/device_jpeg.hpp"

namespace sluice {

struct host_jpeg_backend {
  bool progressive = true;  // false: refuse progressive JPEGs, as nvJPEG's hardware engine does

  [[nodiscard]] bool takes_progressive() const noexcept { return progressive; }

  void run(std::span<device_jpeg_item> items) const {
    thread_local std::vector<std::uint8_t> rgb;
    tjhandle h = codecs::detail::thread_decompressor();
    for (device_jpeg_item& it : items) {
      const int w = it.frame.width, hgt = it.frame.height;
      const std::size_t pitch = static_cast<std::size_t>(w) * 3;
      rgb.resize(pitch * static_cast<std::size_t>(hgt));
      if (tjDecompress2(h, reinterpret_cast<const unsigned char*>(it.encoded.data()),
                        static_cast<unsigned long>(it.encoded.size()), rgb.data(), w, static_cast<int>(pitch), hgt,
                        TJPF_RGB, TJFLAG_ACCURATEDCT) != 0) {
        it.ok = false;
        it.why = std::string("libjpeg-turbo: ") + tjGetErrorStr2(h);
        continue;
      }
      codecs::fused_resample_host(rgb.data(), w, hgt, pitch, it.plan, it.output);
      it.ok = true;
    }
  }
};

}  // namespace sluice
