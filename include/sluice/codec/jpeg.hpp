// sluice/codec/jpeg.hpp — JPEG → fixed-size RGB or grey uint8, through libjpeg-turbo.
//
// Needs the sluice::jpeg CMake target (pkg-config libturbojpeg and libjpeg; defines
// SLUICE_WITH_TURBOJPEG=1).
//
// decode(in, out, ctx) writes exactly output_bytes() = width × height × channels bytes into the
// caller's memory, resized and cropped per codec/transform.hpp, in `.layout` hwc or chw; geometry()
// states the shape and layout. Only the region the resize reads is decoded, at libjpeg-turbo's DCT
// scale for it; the bytes equal a full decode followed by the same resize. CMYK and YCCK are
// converted here (Adobe's inverted CMYK un-inverted first).
// Errors: a corrupt, truncated or non-JPEG input (libjpeg's warnings count, below the region too;
// a baseline JPEG missing only its end-of-image marker decodes, as in PIL) or an image past
// `max_decoded_pixels` is a format_error; the decode stage names file and id.
// Threads: decode() is const and thread-safe: per-thread decompressors and scratch, reused. (The
// namespace is `codecs`: `sluice::codec` is the concept.) Every rule: docs/images.md.
#pragma once

#include <turbojpeg.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE
#include <jpeglib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "sluice/codec/jpeg_frame.hpp"
#include "sluice/codec/transform.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice::codecs {

// What a JPEG decode does beyond the geometry (codecs::geometry_options: size, fit, flip, layout).
struct jpeg_options {
  pixels format = pixels::rgb;
  bool dct_scaling = true;                                    // decode large images at a reduced DCT scale
  bool fast_dct = false;                                      // TJFLAG_FASTDCT: faster, slightly less accurate
  std::uint64_t max_decoded_pixels = std::uint64_t{1} << 26;  // 64 Mpixel after DCT scaling
};

struct jpeg_header {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

namespace detail {

struct tj_decompressor {
  tjhandle handle = tjInitDecompress();
  tj_decompressor() = default;
  tj_decompressor(const tj_decompressor&) = delete;
  tj_decompressor& operator=(const tj_decompressor&) = delete;
  ~tj_decompressor() {
    if (handle != nullptr) tjDestroy(handle);
  }
};

inline tj_decompressor& thread_decompressor_slot() {
  thread_local tj_decompressor d;
  return d;
}

inline tjhandle thread_decompressor() {
  auto& d = thread_decompressor_slot();
  if (d.handle == nullptr) d.handle = tjInitDecompress();
  if (d.handle == nullptr) throw std::runtime_error("sluice: tjInitDecompress failed");
  return d.handle;
}

// After an error a TurboJPEG 2.1 handle can stay in its error state (the next header read fails
// with the old message), so the failed handle is destroyed and the next call makes a fresh one.
[[noreturn]] inline void jpeg_fail(tjhandle h, const char* step) {
  std::string msg = std::string("JPEG ") + step + ": " + tjGetErrorStr2(h);
  auto& d = thread_decompressor_slot();
  if (d.handle == h) {
    tjDestroy(d.handle);
    d.handle = nullptr;
  }
  throw format_error("<jpeg data>", {}, std::move(msg));
}

// The smallest TurboJPEG scaling factor among 1/1, 1/2, 1/4 and 1/8 with factor >= `need`, as
// (num, denom). Only those four: libjpeg-turbo has SIMD reduced IDCTs for them, while the other
// factors (7/8, 3/4, 5/8, 3/8) run plain C IDCTs and are slower than a full decode or barely
// faster. Measured on 500 x 375 q90 JPEGs, one thread, images/s: 1/1 734, 7/8 445, 3/4 495,
// 5/8 588, 1/2 910, 3/8 812, 1/4 988, 1/8 1162 (2-vCPU VM, libjpeg-turbo 2.1.5, 2026-12-01).
inline tjscalingfactor pick_scale(double need) {
  int n = 0;
  const tjscalingfactor* f = tjGetScalingFactors(&n);
  tjscalingfactor best{1, 1};
  double best_v = 1.0;
  for (int i = 0; i < n; ++i) {
    const double v = static_cast<double>(f[i].num) / f[i].denom;
    if (f[i].num == 1 && (f[i].denom == 2 || f[i].denom == 4 || f[i].denom == 8) && v >= need && v < best_v) {
      best = f[i];
      best_v = v;
    }
  }
  return best;
}

// Whether the JPEG carries Adobe's APP14 marker before its first scan (scan_jpeg_frame). CMYK
// written by Adobe software, the bulk of the CMYK JPEGs in the wild, is stored inverted
// (255 = no ink) and marked so; libjpeg hands the stored values back unchanged.
inline bool has_adobe_marker(std::span<const std::byte> in) {
  try {
    return scan_jpeg_frame(in).adobe;
  } catch (const format_error&) {
    return false;
  }
}

// CMYK (4 bytes a pixel, `n` pixels) to RGB (3) or grey (1), in place (the output never overtakes
// the input). No colour management: R = (1 - C)(1 - K), and so on, on the ink amounts, inverted
// first when `inverted`; grey is the JFIF luma of that RGB, as TurboJPEG makes grey from colour.
inline void cmyk_to(std::uint8_t* p, std::size_t n, int channels, bool inverted) noexcept {
  const unsigned flip = inverted ? 0 : 255;  // stored ^ flip = 255 - ink
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* s = p + i * 4;
    const unsigned k = s[3] ^ flip;
    const unsigned r = ((s[0] ^ flip) * k + 127) / 255, g = ((s[1] ^ flip) * k + 127) / 255,
                   bl = ((s[2] ^ flip) * k + 127) / 255;
    if (channels == 3) {
      std::uint8_t* d = p + i * 3;
      d[0] = static_cast<std::uint8_t>(r), d[1] = static_cast<std::uint8_t>(g), d[2] = static_cast<std::uint8_t>(bl);
    } else {
      p[i] = static_cast<std::uint8_t>((19595 * r + 38470 * g + 7471 * bl + 32768) >> 16);
    }
  }
}

// The libjpeg API, for what TurboJPEG 2.1 cannot do: decode a region (jpeg_crop_scanline,
// jpeg_skip_scanlines). One decompressor per thread, reused; libjpeg reports errors by calling
// error_exit, which longjmps back into the step that called it. Each step is a function whose only
// locals are trivial, so the jump skips no destructor; the message is kept for the throw outside.
struct jpeg_lib_reader {
  struct error_mgr {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
  };
  jpeg_decompress_struct cinfo{};
  error_mgr err{};
  bool created = false;

  jpeg_lib_reader() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = &on_error;
    err.pub.emit_message = &on_message;
    if (setjmp(err.jump) == 0) {
      jpeg_create_decompress(&cinfo);
      created = true;
    }
  }
  jpeg_lib_reader(const jpeg_lib_reader&) = delete;
  jpeg_lib_reader& operator=(const jpeg_lib_reader&) = delete;
  ~jpeg_lib_reader() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  static void on_error(j_common_ptr c) {
    auto* e = reinterpret_cast<error_mgr*>(c->err);
    (*c->err->format_message)(c, e->msg);
    std::longjmp(e->jump, 1);
  }
  // A warning (level -1: corrupt data, a premature end) is an error, as TJFLAG_STOPONWARNING makes
  // it for TurboJPEG; trace messages are dropped. One exception, taken as PIL takes it: a baseline
  // JPEG whose data ends where its 2-byte end-of-image marker should be (JWRN_JPEG_EOF alone; data
  // cut inside the scan also runs out of bits, JWRN_HIT_MARKER, or finds no restart marker,
  // JWRN_MUST_RESYNC: errors). A progressive JPEG stays strict, as in PIL: one cut at a scan
  // boundary would decode at a lower quality without a word.
  static void on_message(j_common_ptr c, int level) {
    if (level >= 0) return;
    if (is_premature_end(c->err) && c->is_decompressor && !reinterpret_cast<j_decompress_ptr>(c)->progressive_mode) return;
    on_error(c);
  }
  // JWRN_JPEG_EOF, by its text in the library's own table (jerror.h, which names the code, would
  // bring libjpeg's ERREXIT/WARNMS macros into every program that includes sluice).
  static bool is_premature_end(const jpeg_error_mgr* e) {
    const int code = e->msg_code;
    return code > 0 && code <= e->last_jpeg_message && e->jpeg_message_table != nullptr &&
           std::strcmp(e->jpeg_message_table[code], "Premature end of JPEG file") == 0;
  }
};

inline jpeg_lib_reader& thread_jpeg_reader() {
  thread_local jpeg_lib_reader r;
  if (!r.created) throw std::runtime_error("sluice: jpeg_create_decompress failed");
  return r;
}

// Leaves the thread's decompressor ready for the next image whatever happened to this one.
struct jpeg_lib_abort {
  jpeg_lib_reader& r;
  ~jpeg_lib_abort() { jpeg_abort_decompress(&r.cinfo); }
};

// The steps, each false on a libjpeg error (the message in r.err.msg).
inline bool jpeg_lib_header(jpeg_lib_reader& r, const std::byte* data, std::size_t size) {
  if (setjmp(r.err.jump) != 0) return false;
  jpeg_mem_src(&r.cinfo, reinterpret_cast<const unsigned char*>(data), static_cast<unsigned long>(size));
  jpeg_read_header(&r.cinfo, TRUE);
  return true;
}
// Starts decompression; then, when `crop` is narrower than the output, crops the columns (libjpeg
// moves crop.x down to its iMCU grid and widens crop.w to match: the caller reads them back).
inline bool jpeg_lib_start(jpeg_lib_reader& r, JDIMENSION* full_w, JDIMENSION* crop_x, JDIMENSION* crop_w) {
  if (setjmp(r.err.jump) != 0) return false;
  jpeg_start_decompress(&r.cinfo);
  *full_w = r.cinfo.output_width;
  if (*crop_w < r.cinfo.output_width) jpeg_crop_scanline(&r.cinfo, crop_x, crop_w);
  return true;
}
// Skips rows [0, first), reads rows [first, last) into `dst` (`pitch` bytes apart), then skips
// all but the last row, reads that into `spare` and finishes: the whole entropy-coded stream is
// still parsed, so a file that is corrupt or cut short below the region fails as a full decode
// would. (Skipping to the very end would not: libjpeg then marks the input finished unread.)
inline bool jpeg_lib_rows(jpeg_lib_reader& r, JDIMENSION first, JDIMENSION last, unsigned char* dst,
                          std::size_t pitch, unsigned char* spare) {
  if (setjmp(r.err.jump) != 0) return false;
  j_decompress_ptr c = &r.cinfo;
  if (first > 0 && jpeg_skip_scanlines(c, first) != first) {
    std::snprintf(r.err.msg, sizeof r.err.msg, "fewer rows than its header says");
    return false;
  }
  while (c->output_scanline < last) {
    JSAMPROW row = dst + static_cast<std::size_t>(c->output_scanline - first) * pitch;
    if (jpeg_read_scanlines(c, &row, 1) != 1) {
      std::snprintf(r.err.msg, sizeof r.err.msg, "fewer rows than its header says");
      return false;
    }
  }
  if (c->output_scanline + 1 < c->output_height) jpeg_skip_scanlines(c, c->output_height - 1 - c->output_scanline);
  if (c->output_scanline < c->output_height) jpeg_read_scanlines(c, &spare, 1);
  jpeg_finish_decompress(c);
  return true;
}

}  // namespace detail

// Reads the header only (dimensions, subsampling); throws format_error if it is not a JPEG.
inline jpeg_header read_jpeg_header(std::span<const std::byte> in) {
  tjhandle h = detail::thread_decompressor();
  jpeg_header hd;
  if (in.empty()) throw format_error("<jpeg data>", {file_position::npos, 0}, "empty JPEG input");
  if (tjDecompressHeader3(h, reinterpret_cast<const unsigned char*>(in.data()), static_cast<unsigned long>(in.size()),
                          &hd.width, &hd.height, &hd.subsampling, &hd.colorspace) != 0)
    detail::jpeg_fail(h, "header");
  if (hd.width <= 0 || hd.height <= 0) throw format_error("<jpeg data>", {}, "JPEG header has a zero dimension");
  return hd;
}

class jpeg {
 public:
  using codec_concept = codec_tag;

  jpeg() = default;
  explicit jpeg(geometry_options g, jpeg_options o = {}) : geo_(g), opt_(o) {
    if (g.width <= 0 || g.height <= 0) throw usage_error("sluice: jpeg output width and height must be positive");
    if (g.layout != image_layout::hwc && g.layout != image_layout::chw)
      throw usage_error("sluice: jpeg .layout is image_layout::hwc or image_layout::chw");
    detail::check_geometry_options(g);
  }

  [[nodiscard]] int channels() const noexcept { return opt_.format == pixels::rgb ? 3 : 1; }
  [[nodiscard]] std::size_t output_bytes() const noexcept {
    return static_cast<std::size_t>(geo_.width) * static_cast<std::size_t>(geo_.height) * channels();
  }
  [[nodiscard]] const jpeg_options& options() const noexcept { return opt_; }
  // What decode writes: shape {H, W, C} (hwc) or {C, H, W} (chw), and the layout.
  [[nodiscard]] field_geometry geometry() const noexcept {
    const std::int64_t h = geo_.height, w = geo_.width, c = channels();
    field_geometry g{.ndim = 3, .layout = geo_.layout};
    if (geo_.layout == image_layout::chw)
      g.shape = {c, h, w};
    else g.shape = {h, w, c};
    return g;
  }
  // The resize/crop/flip options of the transform pass (codec/transform.hpp).
  [[nodiscard]] const geometry_options& transform_options() const noexcept { return geo_; }
  // Sample ctx's geometry for this JPEG (reads the header only): what decode(in, out, ctx)
  // applies, and what boxes and points of the same sample follow.
  [[nodiscard]] image_transform plan(std::span<const std::byte> in, const sample_context& ctx) const {
    const jpeg_header hd = read_jpeg_header(in);
    return plan_transform(hd.width, hd.height, transform_options(), ctx);
  }

  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context& ctx) const {
    const jpeg_header hd = read_jpeg_header(in);
    decode_as(in, out, hd, plan_transform(hd.width, hd.height, transform_options(), ctx));
  }
  // Decodes with a transform planned before (plan(), or plan_transform for this image's size).
  void decode_with(std::span<const std::byte> in, std::span<std::byte> out, const image_transform& t) const {
    decode_as(in, out, read_jpeg_header(in), t);
  }

 private:
  // Decodes only the pixels the resample reads (source_region of the plan, widened by
  // region_margin so that libjpeg's fancy upsampling at the region's edges sees the same
  // neighbours as in a full decode; then libjpeg moves the left edge down to its iMCU grid): rows
  // above are entropy-decoded and skipped, rows below too, columns outside are never
  // inverse-transformed, upsampled or colour-converted. The output equals a full decode followed by
  // the same resample, byte for byte (tests/codec/jpeg_region_test.cpp).
  static constexpr int region_margin = 2;

  void decode_as(std::span<const std::byte> in, std::span<std::byte> out, const jpeg_header& hd,
                 const image_transform& t) const {
    if (out.size() < output_bytes()) throw usage_error("sluice: jpeg decode destination is smaller than output_bytes()");
    if (t.src_width != hd.width || t.src_height != hd.height || t.out_width != geo_.width ||
        t.out_height != geo_.height)
      throw usage_error("sluice: jpeg decode given a transform planned for another image or output size");
    tjscalingfactor sf{1, 1};
    if (opt_.dct_scaling) sf = detail::pick_scale(source_scale_needed(t));
    const int dw = TJSCALED(hd.width, sf), dh = TJSCALED(hd.height, sf);
    const int c = channels();
    if (static_cast<std::uint64_t>(dw) * static_cast<std::uint64_t>(dh) > opt_.max_decoded_pixels)
      throw format_error("<jpeg data>", {}, "JPEG of " + std::to_string(hd.width) + "x" + std::to_string(hd.height) +
                                               " decodes to more than max_decoded_pixels");
    auto& r = detail::thread_jpeg_reader();
    detail::jpeg_lib_abort reset{r};
    auto fail = [&](const char* step) {
      throw format_error("<jpeg data>", {}, std::string("JPEG ") + step + ": " + r.err.msg);
    };
    if (!detail::jpeg_lib_header(r, in.data(), in.size())) fail("header");
    auto& ci = r.cinfo;
    if (static_cast<int>(ci.image_width) != hd.width || static_cast<int>(ci.image_height) != hd.height)
      throw format_error("<jpeg data>", {}, "JPEG header read twice gave two sizes");
    // libjpeg converts grey to RGB and YCbCr to grey, but CMYK/YCCK to neither: those decode to
    // CMYK and are converted here (detail::cmyk_to).
    const bool cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    const int dc = cmyk ? 4 : c;
    ci.out_color_space = cmyk ? JCS_CMYK : c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    ci.scale_num = static_cast<unsigned>(sf.num);
    ci.scale_denom = static_cast<unsigned>(sf.denom);
    ci.dct_method = opt_.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    ci.do_fancy_upsampling = TRUE;
    const geometry_plan p = to_plan(t, dw, dh, geo_.layout);
    const pixel_region need = source_region(p, dw, dh);
    const int x0 = std::max(0, need.x - region_margin), y0 = std::max(0, need.y - region_margin);
    const int x1 = std::min(dw, need.x + need.w + region_margin), y1 = std::min(dh, need.y + need.h + region_margin);
    JDIMENSION full_w = 0, crop_x = static_cast<JDIMENSION>(x0), crop_w = static_cast<JDIMENSION>(x1 - x0);
    if (!detail::jpeg_lib_start(r, &full_w, &crop_x, &crop_w)) fail("decode");
    if (static_cast<int>(full_w) != dw || static_cast<int>(ci.output_height) != dh)
      throw format_error("<jpeg data>", {}, "JPEG decoded to another size than its header and scale say");
    const pixel_region got{static_cast<int>(crop_x), y0, static_cast<int>(ci.output_width), y1 - y0};
    thread_local std::vector<std::uint8_t> scratch;
    const std::size_t dpitch = static_cast<std::size_t>(got.w) * dc;
    const std::size_t bytes = dpitch * static_cast<std::size_t>(got.h + 1);  // + the spare row
    if (scratch.size() < bytes) scratch.resize(bytes);
    if (!detail::jpeg_lib_rows(r, static_cast<JDIMENSION>(y0), static_cast<JDIMENSION>(y1), scratch.data(), dpitch,
                               scratch.data() + dpitch * static_cast<std::size_t>(got.h)))
      fail("decode");
    const std::size_t pitch = static_cast<std::size_t>(got.w) * c;
    if (cmyk) detail::cmyk_to(scratch.data(), static_cast<std::size_t>(got.w) * got.h, c, detail::has_adobe_marker(in));
    resample(scratch.data(), dw, dh, pitch, c, out, p, got);
  }

  geometry_options geo_{};
  jpeg_options opt_{};
};

static_assert(sluice::codec<jpeg>);

// Encodes an 8-bit RGB or grey image to JPEG (tests, tools, benchmarks).
inline std::vector<std::byte> encode_jpeg(std::span<const std::uint8_t> pixels_in, int width, int height, pixels format,
                                          int quality = 90, int subsampling = TJSAMP_420) {
  struct tj_compressor {
    tjhandle handle = tjInitCompress();
    ~tj_compressor() { if (handle != nullptr) tjDestroy(handle); }
  };
  thread_local tj_compressor c;
  if (c.handle == nullptr) throw std::runtime_error("sluice: tjInitCompress failed");
  const int ch = format == pixels::rgb ? 3 : 1;
  if (pixels_in.size() < static_cast<std::size_t>(width) * height * ch) throw usage_error("sluice: encode_jpeg input too small");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(c.handle, pixels_in.data(), width, width * ch, height, ch == 3 ? TJPF_RGB : TJPF_GRAY, &buf, &size,
                  ch == 3 ? subsampling : TJSAMP_GRAY, quality, 0) != 0) {
    std::string msg = tjGetErrorStr2(c.handle);
    tjFree(buf);
    throw std::runtime_error("sluice: JPEG encode failed: " + msg);
  }
  std::vector<std::byte> out(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
  tjFree(buf);
  return out;
}

}  // namespace sluice::codecs
