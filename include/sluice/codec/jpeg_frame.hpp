// sluice/codec/jpeg_frame.hpp — what a JPEG's markers say before its first scan, read without a
// decoder: the frame header (size, components, precision, coding process), Adobe's APP14 colour
// transform and the EXIF orientation. The host codec reads the Adobe marker through it (CMYK
// stored inverted); the device decoder (stage/device_jpeg.hpp) decides from it what the device
// takes; fields that follow an image refuse a rotated one (check_upright_for_followers).
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
  int orientation = 1;       // EXIF Orientation (1..8; 1 also when absent): how a viewer turns the stored pixels
};

namespace detail {

// The Orientation tag (0x0112) of IFD0 in an APP1 "Exif" segment's TIFF block, or 1 when the
// block is malformed or has none (a damaged EXIF never fails the image: the decoder ignores it).
inline int exif_orientation(const std::uint8_t* t, std::size_t n) {
  if (n < 8 || !((t[0] == 'I' && t[1] == 'I') || (t[0] == 'M' && t[1] == 'M'))) return 1;
  const bool le = t[0] == 'I';
  const auto u16 = [&](std::size_t at) { return le ? t[at] | t[at + 1] << 8 : t[at] << 8 | t[at + 1]; };
  const auto u32 = [&](std::size_t at) {
    return static_cast<std::size_t>(le ? u16(at) | static_cast<std::uint32_t>(u16(at + 2)) << 16
                                       : static_cast<std::uint32_t>(u16(at)) << 16 | u16(at + 2));
  };
  if (u16(2) != 42) return 1;
  const std::size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const std::size_t count = static_cast<std::size_t>(u16(ifd));
  for (std::size_t k = 0; k < count && ifd + 2 + 12 * (k + 1) <= n; ++k) {
    const std::size_t e = ifd + 2 + 12 * k;
    if (u16(e) != 0x0112) continue;
    const int v = u16(e + 2) == 3 && u32(e + 4) >= 1 ? u16(e + 8) : 1;  // SHORT, its value in the entry
    return v >= 1 && v <= 8 ? v : 1;
  }
  return 1;
}

}  // namespace detail

// What EXIF orientation `o` asks of a viewer, for messages.
inline const char* orientation_text(int o) {
  switch (o) {
    case 2: return "mirrored left to right";
    case 3: return "rotated 180 degrees";
    case 4: return "mirrored top to bottom";
    case 5: return "mirrored along its main diagonal";
    case 6: return "rotated 90 degrees clockwise";
    case 7: return "mirrored along its other diagonal";
    case 8: return "rotated 90 degrees counter-clockwise";
    default: return "as stored";
  }
}

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
    if (m == 0xE1 && f.orientation == 1 && plen >= 6 && std::memcmp(p, "Exif\0\0", 6) == 0)
      f.orientation = detail::exif_orientation(p + 6, plen - 6);
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

// Fields that follow an image (boxes, points, masks) are read on the pixels as decoded, which
// are the stored ones: a JPEG whose EXIF orientation turns them for display (a phone's photo)
// has labels drawn on the image as displayed by every labelling tool, so they would land on
// other pixels without a word. A format_error saying so, for a JPEG with an orientation other
// than 1; anything else (another format, a header the decoder will name) passes.
inline void check_upright_for_followers(std::span<const std::byte> in) {
  if (in.size() < 2 || in[0] != std::byte{0xFF} || in[1] != std::byte{0xD8}) return;
  int o = 1;
  try {
    o = scan_jpeg_frame(in).orientation;
  } catch (const format_error&) {
    return;  // the decoder's error names what is wrong
  }
  if (o != 1)
    throw format_error("<jpeg data>", {},
                       "EXIF Orientation " + std::to_string(o) + " (shown " + orientation_text(o) +
                           "): the pixels decode as stored, and the fields that follow this image (boxes, points, "
                           "masks) would be read on them, while labelling tools draw them on the image as shown. Turn "
                           "the file upright first (PIL: ImageOps.exif_transpose(im).save(path)), or remove the tag "
                           "where the labels were made on the stored pixels");
}

}  // namespace sluice
