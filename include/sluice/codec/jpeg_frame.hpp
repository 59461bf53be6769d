// sluice/codec/jpeg_frame.hpp — what a JPEG's markers say before its first scan, read without a
// decoder: the frame header (size, components, precision, coding process) and Adobe's APP14
// colour transform. The host codec reads the Adobe marker through it (CMYK stored inverted); the
// device decoder (stage/device_jpeg.hpp) decides from it what the device takes.
// Threads: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "sluice/core/error.hpp"

namespace sluice {

// What a JPEG's frame header (SOFn) says, read by walking its markers: no decoder involved.
struct jpeg_frame {
  int width = 0, height = 0, components = 0, precision = 0;
  bool progressive = false;  // SOF2, SOF6, SOF10, SOF14
  bool arithmetic = false;   // SOF9..SOF15: arithmetic entropy coding
  bool lossless = false;     // SOF3, SOF7, SOF11, SOF15
  bool hierarchical = false;  // SOF5..7, SOF13..15: differential (hierarchical) frames
  bool adobe = false;        // an APP14 "Adobe" segment came before the frame header
  int adobe_transform = -1;  // its colour transform: 0 none (RGB or CMYK as stored), 1 YCbCr, 2 YCCK
};

// Reads the JPEG's markers from its start to its first scan: the frame header, and an APP14
// "Adobe" segment wherever it stands before the scan (where libjpeg reads it too). A format_error
// (not a JPEG, the data ending before the first scan, a scan before the frame header, two frame
// headers, a zero dimension) when it cannot.
inline jpeg_frame scan_jpeg_frame(std::span<const std::byte> in) {
  const auto* b = reinterpret_cast<const std::uint8_t*>(in.data());
  const std::size_t n = in.size();
  const auto fail = [](const std::string& why) -> jpeg_frame {
    throw format_error("<jpeg data>", {}, "JPEG header: " + why);
  };
  if (n < 2 || b[0] != 0xFF || b[1] != 0xD8) return fail("no start-of-image marker (not a JPEG)");
  jpeg_frame f;
  std::size_t i = 2;
  for (;;) {
    while (i < n && b[i] != 0xFF) ++i;  // bytes between segments (not allowed, but tolerated as libjpeg does)
    while (i < n && b[i] == 0xFF) ++i;  // fill bytes
    if (i >= n) return fail("the data ends before the first scan");
    const std::uint8_t m = b[i++];
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // no length
    if (m == 0xD9) return fail("end of image before the first scan");
    if (m == 0xDA) return f.width != 0 ? f : fail("a scan before the frame header");
    if (i + 2 > n) return fail("the data ends inside a segment's length");
    const std::size_t len = static_cast<std::size_t>(b[i]) << 8 | b[i + 1];
    if (len < 2 || i + len > n) return fail("a segment longer than the data");
    const std::uint8_t* p = b + i + 2;
    const std::size_t plen = len - 2;
    if (m == 0xEE && plen >= 5 && std::memcmp(p, "Adobe", 5) == 0) {
      f.adobe = true;
      if (plen >= 12) f.adobe_transform = p[11];
    }
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) {
      if (f.width != 0) return fail("two frame headers");
      if (plen < 6) return fail("a frame header shorter than 6 bytes");
      f.precision = p[0];
      f.height = p[1] << 8 | p[2];
      f.width = p[3] << 8 | p[4];
      f.components = p[5];
      f.progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE;
      f.arithmetic = m >= 0xC9;
      f.lossless = m == 0xC3 || m == 0xC7 || m == 0xCB || m == 0xCF;
      f.hierarchical = (m >= 0xC5 && m <= 0xC7) || m >= 0xCD;
      if (f.width == 0 || f.height == 0) return fail("a zero dimension (a height given later by DNL is not supported)");
      if (f.components == 0 || plen < 6 + 3 * static_cast<std::size_t>(f.components))
        return fail("a frame header with " + std::to_string(f.components) + " components and " + std::to_string(plen) +
                    " bytes");
    }
    i += len;
  }
}

}  // namespace sluice
