// tj_util.hpp — TurboJPEG helpers for tests: a JPEG from raw pixels in any TurboJPEG pixel format
// and subsampling, with TurboJPEG's flags (TJFLAG_PROGRESSIVE, ...).
#pragma once

#include <doctest/doctest.h>
#include <turbojpeg.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice_test {

inline std::vector<std::byte> tj_compress(const std::vector<std::uint8_t>& px, int w, int h, int pf, int samp,
                                          int flags, int quality = 90) {
  tjhandle c = tjInitCompress();
  REQUIRE(c != nullptr);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(c, px.data(), w, 0, h, pf, &buf, &size, samp, quality, flags);
  const std::string err = rc != 0 ? tjGetErrorStr2(c) : "";
  tjDestroy(c);
  REQUIRE_MESSAGE(rc == 0, err);
  std::vector<std::byte> out(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
  tjFree(buf);
  return out;
}

}  // namespace sluice_test
