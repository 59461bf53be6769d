// sluice/codec/video.hpp — a clip of T frames from an encoded video, through FFmpeg, into the batch.
//
// Needs the sluice::video CMake target (pkg-config libavformat, libavcodec, libavutil, libswscale;
// defines SLUICE_WITH_VIDEO=1).
//
// codecs::video is a codec (core/concepts.hpp): decode(in, out, ctx) reads a whole video held in
// memory (a mapped file, a WebDataset member, a shard field) and writes exactly output_bytes() =
// T × H × W × 3 bytes (RGB, uint8) into the caller's memory, as T×H×W×C (`video_layout::thwc`) or
// C×T×H×W (`cthw`). A clip is (first frame, T frames, every `stride`-th frame), or with `fps` > 0
// the frames on screen at first + j / fps seconds: frames are chosen by presentation timestamp,
// so variable-frame-rate videos and B-frames give the frames asked for. The first frame is drawn
// from (seed, epoch, id) (`clip_pick::random`), or is the middle or first valid start, or is set
// per sample id by a clip table (io/video_clips.hpp: every clip of every video, k random clips per
// video). One codecs::image_transform per clip (resize, crop, random_resized_crop, flip, planned
// from (seed, epoch, id) as for images, codec/transform.hpp) applies to every frame of the clip.
// Decoding seeks to the last keyframe at or before the clip and decodes forward, skipping the frames
// no other frame refers to (B-frames, mostly) unless the clip takes them; each thread keeps
// its decoder and reuses it for the next clip of a video with the same codec parameters. With a
// clip table that names each sample's video (clip_table::video_of), a video's packets are read
// whole once and its index kept (timestamps and keyframes); its later clips seek to their keyframe
// and read only up to their last frame, so a clip's cost does not grow with the video's length.
// Not done: audio (ignored), rotation metadata and non-square pixels (frames come as stored).
// Errors: no video stream, a truncated or corrupt file, an unsupported codec, a packet the decoder
// refuses, a video shorter than the clip, no frames, two frames with one timestamp: a format_error
// whose cause names the clip and, for the decoder, carries FFmpeg's own text; the decode stage adds
// the file and the sample. FFmpeg's log lines raised inside a decode become that text instead of
// going to stderr (sluice installs an av_log callback once; other callers' lines pass through).
// Threads: decode() is const and thread-safe: per-thread demuxer buffers, decoder and converter.
// Every rule: docs/video.md.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/codec/transform.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/core/tensor.hpp"

namespace sluice::codecs {

// How a codec without a clip table chooses a clip's first frame among the valid starts.
enum class clip_pick { random, center, first };
// The order of a clip's output: frames of rows of RGB pixels, or three planes of T frames.
enum class video_layout { thwc, cthw };
// Where frames are decoded: FFmpeg's software decoder, or the GPU's NVDEC through FFmpeg's CUDA
// hwaccel with the frames copied back to host memory (then converted and resized as on the host
// path). nvdec falls back to the host decoder, counted (video::counters()), where FFmpeg has no
// CUDA device (no GPU, no driver) or the codec has no NVDEC support.
enum class video_decoder { host, nvdec };

struct clip_options {
  int frames = 16;   // T
  int stride = 1;    // frames between the clip's frames (presentation order), when fps is 0
  double fps = 0;    // > 0: the frames on screen at first + j / fps seconds (repeats where the video is slower)
  clip_pick pick = clip_pick::random;
  video_layout layout = video_layout::thwc;
  int decoder_threads = 1;                                  // FFmpeg's own threads per decode; 1: sluice's workers are the parallelism
  video_decoder decoder = video_decoder::host;
  std::uint64_t max_frame_pixels = std::uint64_t{1} << 26;  // a frame larger than this is refused
};

// A keyframe packet: its presentation time (its decode time where it has none) and decode time.
struct keyframe {
  std::int64_t time = 0, dts = 0;
};

// What a video holds, read without decoding: the video stream's size, codec, the presentation
// timestamps of its frames, in order, and its keyframes (in the stream's time base, num/den
// seconds a tick).
struct video_info {
  int width = 0, height = 0;
  std::string codec;
  int time_base_num = 0, time_base_den = 1;
  std::vector<std::int64_t> pts;  // presentation order, strictly increasing
  std::vector<keyframe> keyframes;  // decode order
  bool decode_times_only = false;   // the packets carry decode times only (AVI): frames are counted out from the first
  [[nodiscard]] std::size_t frames() const noexcept { return pts.size(); }
  [[nodiscard]] double seconds(std::size_t i) const noexcept {
    return static_cast<double>(pts[i]) * time_base_num / time_base_den;
  }
};

namespace detail {

// ---- FFmpeg's log: captured inside a sluice decode, passed on elsewhere -----------------------
struct av_log_capture {
  bool active = false;
  std::string last;  // the last line at AV_LOG_ERROR or worse
};
inline av_log_capture& log_capture() noexcept {
  thread_local av_log_capture c;
  return c;
}
inline void av_log_hook(void* avcl, int level, const char* fmt, va_list vl) {
  av_log_capture& c = log_capture();
  if (!c.active) {
    av_log_default_callback(avcl, level, fmt, vl);
    return;
  }
  if (level > AV_LOG_ERROR) return;
  char line[512];
  int print_prefix = 1;
  av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &print_prefix);
  std::string s(line);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (!s.empty()) c.last = std::move(s);
}
// While alive, FFmpeg's lines on this thread are kept for the error text instead of printed.
class log_scope {
 public:
  log_scope() {
    static std::once_flag once;
    std::call_once(once, [] { av_log_set_callback(&av_log_hook); });
    log_capture().active = true;
    log_capture().last.clear();
  }
  log_scope(const log_scope&) = delete;
  log_scope& operator=(const log_scope&) = delete;
  ~log_scope() { log_capture().active = false; }
};

inline std::string av_text(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  std::string s(buf);
  if (!log_capture().last.empty()) s += " (FFmpeg: " + log_capture().last + ")";
  return s;
}

[[noreturn]] inline void video_fail(const std::string& cause) { throw format_error("<video data>", {}, cause); }

// ---- a demuxer over bytes in memory ------------------------------------------------------------
struct memory_source {
  const std::uint8_t* data = nullptr;
  std::int64_t size = 0, pos = 0;
  static int read(void* opaque, std::uint8_t* buf, int n) {
    auto* m = static_cast<memory_source*>(opaque);
    const std::int64_t left = m->size - m->pos;
    if (left <= 0) return AVERROR_EOF;
    const int k = static_cast<int>(std::min<std::int64_t>(left, n));
    std::memcpy(buf, m->data + m->pos, static_cast<std::size_t>(k));
    m->pos += k;
    return k;
  }
  static std::int64_t seek(void* opaque, std::int64_t off, int whence) {
    auto* m = static_cast<memory_source*>(opaque);
    whence &= ~AVSEEK_FORCE;
    if (whence == AVSEEK_SIZE) return m->size;
    std::int64_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->pos + off : whence == SEEK_END ? m->size + off : -1;
    if (p < 0 || p > m->size) return AVERROR(EINVAL);
    m->pos = p;
    return p;
  }
};

// An opened container over `in` and its best video stream.
class demuxer {
 public:
  explicit demuxer(std::span<const std::byte> in) {
    try {
      open(in);
    } catch (...) {
      close();  // a constructor that throws runs no destructor
      throw;
    }
  }
  demuxer(const demuxer&) = delete;
  demuxer& operator=(const demuxer&) = delete;
  ~demuxer() { close(); }
  // The same container from its start again (a seek's fallback).
  void reopen(std::span<const std::byte> in) {
    close();
    try {
      open(in);
    } catch (...) {
      close();
      throw;
    }
  }
  [[nodiscard]] AVStream* stream() const noexcept { return fmt_->streams[stream_]; }
  [[nodiscard]] const AVCodec* decoder() const noexcept { return decoder_; }
  [[nodiscard]] AVFormatContext* format() const noexcept { return fmt_; }
  [[nodiscard]] std::int64_t bytes() const noexcept { return src_.size; }
  // The next packet of the video stream into `pkt` (unreferenced first); false at the end.
  bool next(AVPacket* pkt) {
    for (;;) {
      av_packet_unref(pkt);
      const int e = av_read_frame(fmt_, pkt);
      if (e == AVERROR_EOF) return false;
      if (e < 0) video_fail("cannot read a packet (truncated or corrupt file?): " + av_text(e));
      if (pkt->stream_index == stream_) return true;
    }
  }

 private:
  void open(std::span<const std::byte> in) {
    src_.data = reinterpret_cast<const std::uint8_t*>(in.data());
    src_.size = static_cast<std::int64_t>(in.size());
    src_.pos = 0;
    if (in.empty()) video_fail("an empty video (0 bytes)");
    constexpr int buffer_bytes = 1 << 16;
    auto* buf = static_cast<std::uint8_t*>(av_malloc(buffer_bytes));
    if (buf == nullptr) throw std::bad_alloc();
    io_ = avio_alloc_context(buf, buffer_bytes, 0, &src_, &memory_source::read, nullptr, &memory_source::seek);
    if (io_ == nullptr) {
      av_free(buf);
      throw std::bad_alloc();
    }
    fmt_ = avformat_alloc_context();
    if (fmt_ == nullptr) throw std::bad_alloc();
    fmt_->pb = io_;
    fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
    if (int e = avformat_open_input(&fmt_, nullptr, nullptr, nullptr); e < 0) {
      fmt_ = nullptr;  // freed by avformat_open_input on failure
      video_fail("not a video container FFmpeg can open: " + av_text(e));
    }
    const AVCodec* dec = nullptr;
    int s = av_find_best_stream(fmt_, AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
    if (s == AVERROR_STREAM_NOT_FOUND || (s >= 0 && fmt_->streams[s]->codecpar->width <= 0)) {
      // Some containers state a stream's parameters only once packets are read.
      if (int e = avformat_find_stream_info(fmt_, nullptr); e < 0) video_fail("cannot read the streams: " + av_text(e));
      s = av_find_best_stream(fmt_, AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
    }
    if (s == AVERROR_STREAM_NOT_FOUND) video_fail("no video stream in the file");
    if (s == AVERROR_DECODER_NOT_FOUND || dec == nullptr) {
      const AVCodecParameters* p = s >= 0 ? fmt_->streams[s]->codecpar : nullptr;
      video_fail(std::string("no decoder for the video's codec '") +
                 (p != nullptr ? avcodec_get_name(p->codec_id) : "unknown") + "' in this FFmpeg");
    }
    if (s < 0) video_fail("no usable video stream: " + av_text(s));
    stream_ = s;
    decoder_ = dec;
    for (unsigned i = 0; i < fmt_->nb_streams; ++i)
      if (static_cast<int>(i) != s) fmt_->streams[i]->discard = AVDISCARD_ALL;
  }
  void close() noexcept {
    if (fmt_ != nullptr) avformat_close_input(&fmt_);
    if (io_ != nullptr) {
      av_freep(&io_->buffer);
      avio_context_free(&io_);
    }
    fmt_ = nullptr;
    io_ = nullptr;
    stream_ = -1;
  }

  memory_source src_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
  int stream_ = -1;
  const AVCodec* decoder_ = nullptr;
};

// The value an FFmpeg enum field holds, read as its underlying integer: a damaged stream can put a
// number there that names no enumerator (colour space 33), and reading that as the enum type is
// undefined behaviour.
template <class E>
std::underlying_type_t<E> enum_bits(const E& e) noexcept {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

inline std::int64_t packet_time(const AVPacket* p) noexcept { return p->pts != AV_NOPTS_VALUE ? p->pts : p->dts; }

inline void fill_info(video_info& info, const demuxer& d) {
  const AVStream* st = d.stream();
  info.width = st->codecpar->width;
  info.height = st->codecpar->height;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  info.time_base_num = st->time_base.num;
  info.time_base_den = st->time_base.den > 0 ? st->time_base.den : 1;
  if (info.width <= 0 || info.height <= 0) video_fail("the video stream states no frame size");
}

// Sorts the frames' timestamps into presentation order; two frames with one timestamp are an error.
inline void finish_pts(std::vector<std::int64_t>& pts) {
  std::sort(pts.begin(), pts.end());
  const auto dup = std::adjacent_find(pts.begin(), pts.end());
  if (dup != pts.end())
    video_fail("two frames carry the same presentation timestamp " + std::to_string(*dup) +
               " (a broken timestamp sequence)");
}

struct owned_packet {
  AVPacket* p = av_packet_alloc();
  owned_packet() {
    if (p == nullptr) throw std::bad_alloc();
  }
  owned_packet(const owned_packet&) = delete;
  owned_packet& operator=(const owned_packet&) = delete;
  ~owned_packet() { av_packet_free(&p); }
};

// Reads every packet of d's video stream (each into slot(), which may hand out the same packet
// every time or a new one to keep), noting the stream's size, timestamps and keyframes in info.
template <class Slot>
void scan_packets(demuxer& d, video_info& info, Slot&& slot) {
  fill_info(info, d);
  info.pts.clear();
  info.keyframes.clear();
  info.decode_times_only = false;
  for (;;) {
    AVPacket* p = slot();
    if (!d.next(p)) break;
    const std::int64_t t = packet_time(p);
    if (t == AV_NOPTS_VALUE) video_fail("a packet carries no timestamp");
    info.decode_times_only = info.decode_times_only || p->pts == AV_NOPTS_VALUE;
    info.pts.push_back(t);
    if ((p->flags & AV_PKT_FLAG_KEY) != 0) info.keyframes.push_back({t, p->dts != AV_NOPTS_VALUE ? p->dts : t});
  }
  // An index (an MP4's, written first with -movflags +faststart, or a Matroska's cues) that places
  // frames past the end of the bytes: the file was cut short, and its packets ended early at a
  // clean EOF. Read on, it would be a shorter video (or one with no clips) and nothing said.
  const int entries = avformat_index_get_entries_count(d.stream());
  std::int64_t end = 0;
  for (int i = 0; i < entries; ++i)
    if (const AVIndexEntry* e = avformat_index_get_entry(d.stream(), i); e != nullptr && e->pos >= 0)
      end = std::max(end, e->pos + e->size);
  if (end > d.bytes())
    video_fail("truncated: the container's index places frame data up to byte " + std::to_string(end) +
               " and the file ends at byte " + std::to_string(d.bytes()) + " (" + std::to_string(info.pts.size()) +
               " frames read)");
  if (info.pts.empty()) video_fail("the video stream has no frames");
  finish_pts(info.pts);
}

// A sequence of integers kept as runs of a constant step: a constant-rate video's timestamps are
// one run whatever its length; at worst 12 bytes an element (runs of two).
class int64_runs {
 public:
  void push_back(std::int64_t v) {
    if (!runs_.empty()) {
      run& r = runs_.back();
      const std::uint64_t n = size_ - r.start;
      const auto u = static_cast<std::uint64_t>(v);
      if (n == 1) r.step = u - r.first;  // modular: no signed overflow whatever the values
      if (n == 1 || r.first + r.step * n == u) {
        ++size_;
        return;
      }
    }
    runs_.push_back({static_cast<std::uint64_t>(v), 0, size_});
    ++size_;
  }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(size_); }
  void append_to(std::vector<std::int64_t>& out) const {
    out.reserve(out.size() + size());
    for (std::size_t k = 0; k < runs_.size(); ++k) {
      const std::uint64_t end = k + 1 < runs_.size() ? runs_[k + 1].start : size_;
      for (std::uint64_t i = 0; i < end - runs_[k].start; ++i)
        out.push_back(static_cast<std::int64_t>(runs_[k].first + runs_[k].step * i));
    }
  }

 private:
  struct run {
    std::uint64_t first, step, start;  // start: the index of the run's first element
  };
  std::vector<run> runs_;
  std::uint64_t size_ = 0;
};

// Which video bytes an index was made from: the size and a hash of the first and last 4 KiB
// (an MP4's index sits at one end or the other), so a video replaced under the same number is probed again.
inline std::uint64_t video_identity(std::span<const std::byte> in) noexcept {
  std::uint64_t h = mix_keys(0x766964656f5f6964ULL, in.size());
  const auto words = [&](std::size_t from, std::size_t n) {
    for (std::size_t i = from; i + 8 <= from + n; i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, in.data() + i, 8);
      h = mix_keys(h, w);
    }
  };
  const std::size_t edge = std::min<std::size_t>(4096, in.size());
  words(0, edge);
  words(in.size() - edge, edge);
  return h;
}

// A video's timestamps and keyframes, kept compact between its clips (see video_index_cache).
struct video_index {
  std::uint64_t identity = 0;
  int64_runs pts, key_time, key_dts;
  bool decode_times_only = false;

  video_index(const video_info& info, std::uint64_t id) : identity(id), decode_times_only(info.decode_times_only) {
    for (std::int64_t t : info.pts) pts.push_back(t);
    for (const keyframe& k : info.keyframes) {
      key_time.push_back(k.time);
      key_dts.push_back(k.dts);
    }
  }
  // Writes the timestamps and keyframes back into info (its size and time base come from the demuxer).
  void expand(video_info& info, std::vector<std::int64_t>& scratch) const {
    info.pts.clear();
    pts.append_to(info.pts);
    scratch.clear();
    key_time.append_to(scratch);
    key_dts.append_to(scratch);
    info.keyframes.resize(key_time.size());
    for (std::size_t i = 0; i < info.keyframes.size(); ++i)
      info.keyframes[i] = {scratch[i], scratch[info.keyframes.size() + i]};
    info.decode_times_only = decode_times_only;
  }
};

}  // namespace detail

// Reads a video's stream, frame timestamps and keyframes without decoding a frame (the demuxer
// reads every packet). A format_error (no video stream, a truncated file, no frames, ...) when it cannot.
inline video_info probe_video(std::span<const std::byte> in) {
  const detail::log_scope logs;
  detail::demuxer d(in);
  video_info info;
  detail::owned_packet pkt;
  detail::scan_packets(d, info, [&] { return pkt.p; });
  return info;
}

// How many first frames a clip of these options may start at in this video (0: it is too short).
inline std::size_t clip_starts(const video_info& v, const clip_options& c) {
  const std::size_t n = v.frames();
  if (c.fps > 0) {
    if (n == 0) return 0;
    const double span = (c.frames - 1) / c.fps, last = v.seconds(n - 1);
    // The starts whose clip ends by the last frame: a prefix (timestamps increase), found by halving.
    std::size_t lo = 0, hi = n;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (v.seconds(mid) + span <= last + 1e-9) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
  const std::size_t need = static_cast<std::size_t>(c.frames - 1) * static_cast<std::size_t>(c.stride) + 1;
  return n >= need ? n - need + 1 : 0;
}

// The frames (indices in presentation order) of the clip starting at frame `first`, into `out`
// (c.frames of them, non-decreasing; repeated where fps asks for frames faster than the video has).
inline void clip_frames(const video_info& v, const clip_options& c, std::size_t first, std::vector<std::size_t>& out) {
  out.clear();
  if (c.fps > 0) {
    const double t0 = v.seconds(first);
    std::size_t i = first;
    for (int j = 0; j < c.frames; ++j) {
      const double t = t0 + j / c.fps + 1e-9;
      while (i + 1 < v.frames() && v.seconds(i + 1) <= t) ++i;
      out.push_back(i);
    }
    return;
  }
  for (int j = 0; j < c.frames; ++j) out.push_back(first + static_cast<std::size_t>(j) * static_cast<std::size_t>(c.stride));
}

// What a clip table says about sample `id`: the first frame, or none (draw it as clip_pick::random).
struct clip_choice {
  bool fixed = false;
  std::size_t first = 0;
};

// The indexes of a clip table's videos (timestamps and keyframes, detail::video_index), made by
// a video's first clip (or by io::clips' every_clip, which probes every video anyway) and kept
// for its next clips: they seek to their keyframe instead of reading the video's packets from
// the start. A few dozen bytes for a constant-rate video; the identity check makes a video that
// changed under its number be read again.
class video_index_cache {
 public:
  [[nodiscard]] std::shared_ptr<const detail::video_index> find(std::size_t video, std::uint64_t identity) const {
    const std::lock_guard lock(m_);
    const auto it = map_.find(video);
    if (it == map_.end() || it->second->identity != identity) return nullptr;
    return it->second;
  }
  void keep(std::size_t video, std::shared_ptr<const detail::video_index> index) {
    const std::lock_guard lock(m_);
    map_[video] = std::move(index);
  }
  [[nodiscard]] std::size_t size() const {
    const std::lock_guard lock(m_);
    return map_.size();
  }

 private:
  mutable std::mutex m_;
  std::unordered_map<std::size_t, std::shared_ptr<const detail::video_index>> map_;
};

// A table that maps a sample id to its clip (io/video_clips.hpp); the codec asks it per sample.
class clip_table {
 public:
  static constexpr std::size_t no_video = static_cast<std::size_t>(-1);
  virtual ~clip_table() = default;
  [[nodiscard]] virtual clip_choice choose(std::uint64_t id) const = 0;
  // What the error text says the sample is ("clip 7 of video 3").
  [[nodiscard]] virtual std::string describe(std::uint64_t id) const = 0;
  // Which video sample `id` is a clip of (the table's own numbering), or no_video: then each clip
  // reads its video's packets from the start, as a codec without a table does.
  [[nodiscard]] virtual std::size_t video_of(std::uint64_t) const { return no_video; }
  // The indexes of the table's videos (shared by its copies and the codecs made with it).
  [[nodiscard]] video_index_cache& indexes() const noexcept { return *indexes_; }

 private:
  std::shared_ptr<video_index_cache> indexes_ = std::make_shared<video_index_cache>();
};

// What a codec and its copies decoded where (nvdec asked for, host used: a fallback).
struct video_counters {
  std::atomic<std::uint64_t> clips{0};
  std::atomic<std::uint64_t> nvdec_clips{0};
  std::atomic<std::uint64_t> nvdec_fallbacks{0};
  std::atomic<std::uint64_t> packets{0};         // packets demuxed for clips (a clip's own; an index's first scan)
  std::atomic<std::uint64_t> seek_fallbacks{
      0};                     // seeks that missed the keyframe, or clips that failed after one: read whole instead
  std::string last_fallback;  // why, the first time: set before nvdec_fallbacks counts it, read it after
  std::once_flag fallback_once;
};

namespace detail {

// Offers the CUDA frames where the decoder can produce them, else its first software format.
inline AVPixelFormat pick_cuda_format(AVCodecContext*, const AVPixelFormat* fmts) {
  for (const AVPixelFormat* p = fmts; *p != AV_PIX_FMT_NONE; ++p)
    if (*p == AV_PIX_FMT_CUDA) return *p;
  for (const AVPixelFormat* p = fmts; *p != AV_PIX_FMT_NONE; ++p)
    if ((av_pix_fmt_desc_get(*p)->flags & AV_PIX_FMT_FLAG_HWACCEL) == 0) return *p;
  return AV_PIX_FMT_NONE;
}

// One thread's decoding state, reused across clips.
struct video_worker {
  std::vector<AVPacket*> packets;  // the video's packets in decode order (pool: grows, never shrinks)
  std::size_t used = 0;
  video_info info;
  std::vector<std::int64_t> scratch;
  std::vector<std::size_t> wanted;
  std::vector<std::int64_t> wanted_pts;
  AVFrame* frame = av_frame_alloc();
  SwsContext* sws = nullptr;
  int sws_cs = -1, sws_full = -1;  // the colour matrix and range it was last set to
  std::vector<std::uint8_t> rgb;
  std::vector<std::byte> planes;  // one frame in chw, for the cthw layout
  // The decoder of the last clip, kept when the next one has the same codec parameters.
  AVCodecContext* dec = nullptr;
  const AVCodec* dec_codec = nullptr;
  std::vector<std::uint8_t> dec_extradata;
  int dec_w = 0, dec_h = 0, dec_format = -1, dec_threads = 0;
  bool dec_nvdec = false;             // the decoder above decodes on the GPU
  AVBufferRef* cuda_device = nullptr;  // this thread's CUDA device for NVDEC, made on first use
  std::string cuda_error;              // why it could not be made (then never tried again)
  AVFrame* host_frame = av_frame_alloc();  // a GPU frame copied back

  video_worker() {
    if (frame == nullptr || host_frame == nullptr) throw std::bad_alloc();
  }
  video_worker(const video_worker&) = delete;
  video_worker& operator=(const video_worker&) = delete;
  ~video_worker() {
    for (AVPacket* p : packets) av_packet_free(&p);
    av_frame_free(&frame);
    av_frame_free(&host_frame);
    if (sws != nullptr) sws_freeContext(sws);
    if (dec != nullptr) avcodec_free_context(&dec);
    if (cuda_device != nullptr) av_buffer_unref(&cuda_device);
  }
  AVPacket* next_packet() {
    if (used == packets.size()) {
      AVPacket* p = av_packet_alloc();
      if (p == nullptr) throw std::bad_alloc();
      packets.push_back(p);
    }
    return packets[used++];
  }
  void release_packets() noexcept {
    for (std::size_t i = 0; i < used; ++i) av_packet_unref(packets[i]);
    used = 0;
  }
  // Why NVDEC cannot decode `codec` on this thread ("" when it can): no CUDA device, or no NVDEC
  // support in FFmpeg for the codec.
  std::string nvdec_refusal(const AVCodec* codec) {
    if (cuda_device == nullptr && cuda_error.empty()) {
      if (int e = av_hwdevice_ctx_create(&cuda_device, AV_HWDEVICE_TYPE_CUDA, nullptr, nullptr, 0); e < 0) {
        cuda_device = nullptr;
        cuda_error = "FFmpeg could not open a CUDA device: " + av_text(e);
      }
    }
    if (cuda_device == nullptr) return cuda_error;
    for (int i = 0;; ++i) {
      const AVCodecHWConfig* c = avcodec_get_hw_config(codec, i);
      if (c == nullptr) return std::string("FFmpeg's ") + codec->name + " decoder has no CUDA (NVDEC) support";
      if ((c->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX) != 0 && c->device_type == AV_HWDEVICE_TYPE_CUDA) return {};
    }
  }
  // A decoder for `par`, the previous one flushed when it fits; on the GPU when `nvdec`.
  AVCodecContext* decoder_for(const AVCodec* codec, const AVCodecParameters* par, int threads, std::uint64_t max_pixels,
                              bool nvdec = false) {
    const bool same = dec != nullptr && dec_codec == codec && dec_nvdec == nvdec && dec_w == par->width && dec_h == par->height &&
                      dec_format == par->format && dec_threads == threads &&
                      dec->max_pixels == static_cast<std::int64_t>(max_pixels) &&
                      dec_extradata.size() == static_cast<std::size_t>(std::max(par->extradata_size, 0)) &&
                      (par->extradata_size <= 0 ||
                       std::memcmp(dec_extradata.data(), par->extradata, static_cast<std::size_t>(par->extradata_size)) == 0);
    if (same) {
      avcodec_flush_buffers(dec);
      dec->skip_frame = AVDISCARD_DEFAULT;
      return dec;
    }
    if (dec != nullptr) avcodec_free_context(&dec);
    dec = avcodec_alloc_context3(codec);
    if (dec == nullptr) throw std::bad_alloc();
    if (int e = avcodec_parameters_to_context(dec, par); e < 0) {
      avcodec_free_context(&dec);
      video_fail("cannot set up the decoder: " + av_text(e));
    }
    dec->thread_count = threads;
    dec->max_pixels = static_cast<std::int64_t>(max_pixels);  // the bitstream's own size is checked too
    dec->err_recognition |= AV_EF_EXPLODE;  // a damaged packet is an error, not a concealed frame
    if (nvdec) {
      dec->hw_device_ctx = av_buffer_ref(cuda_device);
      dec->get_format = &pick_cuda_format;
    }
    if (int e = avcodec_open2(dec, codec, nullptr); e < 0) {
      avcodec_free_context(&dec);
      video_fail(std::string("cannot open the ") + codec->name + " decoder: " + av_text(e));
    }
    dec_codec = codec;
    dec_w = par->width;
    dec_h = par->height;
    dec_format = par->format;
    dec_threads = threads;
    dec_nvdec = nvdec;
    dec_extradata.assign(par->extradata, par->extradata + std::max(par->extradata_size, 0));
    return dec;
  }
};

inline video_worker& this_video_worker() {
  thread_local video_worker w;
  return w;
}

}  // namespace detail

class video {
 public:
  using codec_concept = codec_tag;

  video() : video(geometry_options{}, clip_options{}) {}
  explicit video(geometry_options g, clip_options c = {}, std::shared_ptr<const clip_table> table = nullptr)
      : geo_(g), clip_(c), table_(std::move(table)), counters_(std::make_shared<video_counters>()) {
    if (g.width <= 0 || g.height <= 0) throw usage_error("sluice: video output width and height must be positive");
    detail::check_geometry_options(g);
    if (c.frames <= 0) throw usage_error("sluice: video clip_options.frames must be positive");
    if (c.stride <= 0) throw usage_error("sluice: video clip_options.stride must be positive");
    if (!(c.fps >= 0) || c.fps > 1e6) throw usage_error("sluice: video clip_options.fps must be 0 (use stride) or a rate in frames per second");
    if (c.decoder_threads <= 0) throw usage_error("sluice: video clip_options.decoder_threads must be positive");
    if (c.layout != video_layout::thwc && c.layout != video_layout::cthw)
      throw usage_error("sluice: video clip_options.layout is video_layout::thwc or video_layout::cthw");
    geo_.layout = image_layout::hwc;  // each frame is resampled as HWC; cthw is assembled from planes
  }

  static constexpr int channels = 3;
  [[nodiscard]] std::size_t frame_bytes() const noexcept {
    return static_cast<std::size_t>(geo_.width) * static_cast<std::size_t>(geo_.height) * channels;
  }
  [[nodiscard]] std::size_t output_bytes() const noexcept { return frame_bytes() * static_cast<std::size_t>(clip_.frames); }
  [[nodiscard]] const clip_options& clip() const noexcept { return clip_; }
  [[nodiscard]] const geometry_options& transform_options() const noexcept { return geo_; }
  [[nodiscard]] const std::shared_ptr<const clip_table>& table() const noexcept { return table_; }
  // Clips decoded, on NVDEC, and NVDEC's fallbacks to the host decoder (shared by the codec's copies).
  [[nodiscard]] const video_counters& counters() const noexcept { return *counters_; }
  // {T, H, W, C} with layout hwc (channels last), or {C, T, H, W} with layout chw (channels first):
  // normalized<> and the field collators read the channel axis from it.
  [[nodiscard]] field_geometry geometry() const noexcept {
    const std::int64_t t = clip_.frames, h = geo_.height, w = geo_.width;
    field_geometry g{.ndim = 4};
    if (clip_.layout == video_layout::cthw) {
      g.shape = {channels, t, h, w};
      g.layout = image_layout::chw;
    } else {
      g.shape = {t, h, w, channels};
      g.layout = image_layout::hwc;
    }
    return g;
  }

  // The clip ctx's sample takes: its first frame (drawn, or the clip table's) among the valid starts.
  [[nodiscard]] std::size_t choose_first(const video_info& v, const sample_context& ctx) const {
    const std::size_t starts = clip_starts(v, clip_);
    if (starts == 0) detail::video_fail(too_short(v));
    if (table_ != nullptr) {
      const clip_choice c = table_->choose(ctx.id);
      if (c.fixed) {
        if (c.first >= starts)
          detail::video_fail(table_->describe(ctx.id) + " starts at frame " + std::to_string(c.first) + ", past the last start " +
                             std::to_string(starts - 1) + " of this video (" + std::to_string(v.frames()) +
                             " frames): the video changed since its clips were listed");
        return c.first;
      }
    }
    switch (clip_.pick) {
      case clip_pick::first: return 0;
      case clip_pick::center: return (starts - 1) / 2;
      case clip_pick::random: break;
    }
    // A key of its own, so the clip's start and its crop (counter_rng(seed, epoch, id)) are independent.
    counter_rng rng(ctx.seed ^ 0x636c69705f737461ULL, ctx.epoch, ctx.id);
    return static_cast<std::size_t>(rng.below(starts));
  }

  // Writes sample ctx's clip of video `in` into out (output_bytes()). With a clip table, a
  // format_error's cause starts with what the table calls the sample ("clip 7 of video 3").
  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context& ctx) const {
    if (table_ == nullptr) return decode_clip(in, out, ctx);
    try {
      decode_clip(in, out, ctx);
    } catch (const format_error& e) {
      throw format_error(e.file(), {}, table_->describe(ctx.id) + ": " + e.cause());
    }
  }

 private:
  void decode_clip(std::span<const std::byte> in, std::span<std::byte> out, const sample_context& ctx) const {
    if (out.size() < output_bytes()) throw usage_error("sluice: video decode destination is smaller than output_bytes()");
    const detail::log_scope logs;
    detail::video_worker& w = detail::this_video_worker();
    struct release {
      detail::video_worker& w;
      ~release() { w.release_packets(); }
    } released{w};
    detail::demuxer d(in);
    detail::fill_info(w.info, d);
    if (static_cast<std::uint64_t>(w.info.width) * static_cast<std::uint64_t>(w.info.height) > clip_.max_frame_pixels)
      detail::video_fail("frames of " + std::to_string(w.info.width) + "x" + std::to_string(w.info.height) +
                         " exceed clip_options.max_frame_pixels");
    // The video's index, kept from an earlier clip of it; without one, every packet of the stream
    // is read and kept (reference-counted, no copy beyond the demuxer's) and the index made from them.
    const std::size_t video = table_ != nullptr ? table_->video_of(ctx.id) : clip_table::no_video;
    std::uint64_t identity = 0;
    std::shared_ptr<const detail::video_index> index;
    if (video != clip_table::no_video) {
      identity = detail::video_identity(in);
      index = table_->indexes().find(video, identity);
    }
    if (index != nullptr) {
      index->expand(w.info, w.scratch);
      const std::size_t first = choose_first(w.info, ctx);
      clip_frames(w.info, clip_, first, w.wanted);
      try {
        decode_frames(d, in, w, plan_transform(w.info.width, w.info.height, geo_, ctx), first, out, false);
        return;
      } catch (const format_error&) {
        // After a seek, a demuxer may read otherwise than from the start (its timestamps, a read
        // error past the keyframe): the clip is read whole instead, as a first clip is, and gives
        // the same frames or the same error as without the index. Counted.
        counters_->seek_fallbacks.fetch_add(1, std::memory_order_relaxed);
      }
      w.release_packets();
      d.reopen(in);
    }
    detail::scan_packets(d, w.info, [&] { return w.next_packet(); });
    --w.used;  // the slot the end of the stream was read into
    counters_->packets.fetch_add(w.used, std::memory_order_relaxed);
    if (video != clip_table::no_video)
      table_->indexes().keep(video, std::make_shared<const detail::video_index>(w.info, identity));
    const std::size_t first = choose_first(w.info, ctx);
    clip_frames(w.info, clip_, first, w.wanted);
    decode_frames(d, in, w, plan_transform(w.info.width, w.info.height, geo_, ctx), first, out, true);
  }

  std::string too_short(const video_info& v) const {
    std::string s = "the video has " + std::to_string(v.frames()) + " frames";
    if (clip_.fps > 0)
      s += " over " + std::to_string(v.frames() > 0 ? v.seconds(v.frames() - 1) - v.seconds(0) : 0.0) +
           " s; a clip of " + std::to_string(clip_.frames) + " frames at " + std::to_string(clip_.fps) + " fps needs " +
           std::to_string((clip_.frames - 1) / clip_.fps) + " s";
    else
      s += "; a clip of " + std::to_string(clip_.frames) + " frames at stride " + std::to_string(clip_.stride) +
           " needs " + std::to_string((clip_.frames - 1) * clip_.stride + 1);
    return s;
  }

  std::string clip_text(std::size_t first) const {
    return "clip at frame " + std::to_string(first) + " (" + std::to_string(clip_.frames) + " frames" +
           (clip_.fps > 0 ? " at " + std::to_string(clip_.fps) + " fps" : ", stride " + std::to_string(clip_.stride)) + ")";
  }

  // Decodes from the last keyframe at or before the clip's first frame, writing each wanted frame.
  // A frame is known by its presentation timestamp; where the packets carry only decode times
  // (AVI), by counting the frames out from the first packet (a keyframe's position in decode
  // order says nothing of its place in presentation order when B-frames follow it). The packets
  // come from the worker's kept ones (`kept`: the whole stream was just read) or from the demuxer,
  // sought to the keyframe (or from the start where a seek misses it, counted).
  void decode_frames(detail::demuxer& d, std::span<const std::byte> in, detail::video_worker& w,
                     const image_transform& t, std::size_t first, std::span<std::byte> out, bool kept) const {
    const std::int64_t first_pts = w.info.pts[w.wanted.front()];
    const bool by_count = w.info.decode_times_only;
    std::size_t next = 0;       // kept: the next packet to send
    AVPacket* held = nullptr;   // not kept: the packet the demuxer reads into
    bool pending = false;       // held has a packet not sent yet (the one a seek read)
    std::uint64_t demuxed = 0;  // not kept: packets read
    struct count_packets {
      video_counters& c;
      const std::uint64_t& n;
      ~count_packets() { c.packets.fetch_add(n, std::memory_order_relaxed); }
    } counted{*counters_, demuxed};
    if (kept) {
      for (std::size_t i = 0; i < w.used && !by_count; ++i)
        if ((w.packets[i]->flags & AV_PKT_FLAG_KEY) != 0 && detail::packet_time(w.packets[i]) <= first_pts) next = i;
    } else {
      held = w.next_packet();
      const keyframe* key = nullptr;
      for (const keyframe& k : w.info.keyframes)
        if (k.time <= first_pts && !by_count) key = &k;
      if (key != nullptr) {
        pending = seek_keyframe(d, *key, first_pts, held, demuxed);
        if (!pending) {
          counters_->seek_fallbacks.fetch_add(1, std::memory_order_relaxed);
          d.reopen(in);
        }
      }
    }
    const auto pull = [&]() -> AVPacket* {
      if (kept) return next < w.used ? w.packets[next++] : nullptr;
      if (pending) {
        pending = false;
        return held;
      }
      if (!d.next(held)) return nullptr;
      ++demuxed;
      return held;
    };
    bool nvdec = false;
    if (clip_.decoder == video_decoder::nvdec) {
      const std::string refusal = w.nvdec_refusal(d.decoder());
      nvdec = refusal.empty();
      if (!nvdec) {  // the reason first: a reader that sees the count may read it
        std::call_once(counters_->fallback_once, [&] { counters_->last_fallback = refusal; });
        counters_->nvdec_fallbacks.fetch_add(1, std::memory_order_release);
      }
    }
    AVCodecContext* dec = w.decoder_for(d.decoder(), d.stream()->codecpar, clip_.decoder_threads,
                                        clip_.max_frame_pixels, nvdec);
    counters_->clips.fetch_add(1, std::memory_order_relaxed);
    if (nvdec) counters_->nvdec_clips.fetch_add(1, std::memory_order_relaxed);
    const geometry_plan plan = to_plan(t, w.info.width, w.info.height, image_layout::hwc);
    w.wanted_pts.clear();
    for (std::size_t k : w.wanted) w.wanted_pts.push_back(w.info.pts[k]);  // non-decreasing: sorted
    std::size_t j = 0;       // the next wanted frame
    std::size_t shown = 0;   // by_count: the presentation index of the next frame out
    const auto take = [&](AVFrame* f) {
      std::int64_t ts = f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
      if (by_count) ts = shown < w.info.frames() ? w.info.pts[shown++] : INT64_MAX;
      if (j < w.wanted.size() && ts > w.info.pts[w.wanted[j]])
        detail::video_fail(clip_text(first) + ": the decoder produced no frame at timestamp " +
                           std::to_string(w.info.pts[w.wanted[j]]) + " (frame " + std::to_string(w.wanted[j]) +
                           "; a damaged stream?)");
      if (j == w.wanted.size() || ts != w.info.pts[w.wanted[j]]) return;
      if (f->decode_error_flags != 0 || (f->flags & AV_FRAME_FLAG_CORRUPT) != 0)
        detail::video_fail(clip_text(first) + ": frame " + std::to_string(w.wanted[j]) + " decoded with errors" +
                           (detail::log_capture().last.empty() ? "" : " (FFmpeg: " + detail::log_capture().last + ")"));
      write_frame(f, w, plan, j, out);
      ++j;
      while (j < w.wanted.size() && w.wanted[j] == w.wanted[j - 1]) {  // fps faster than the video: repeat
        repeat_frame(out, j - 1, j);
        ++j;
      }
    };
    const auto drain = [&]() {
      for (;;) {
        const int e = avcodec_receive_frame(dec, w.frame);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
        if (e < 0) detail::video_fail(clip_text(first) + ": the decoder failed: " + detail::av_text(e));
        take(w.frame);
        av_frame_unref(w.frame);
        if (j == w.wanted.size()) return;
      }
    };
    while (j < w.wanted.size()) {
      AVPacket* p = pull();
      if (p == nullptr) break;
      // A frame no other frame refers to (a B-frame, mostly) is decoded only when the clip takes it:
      // between the keyframe and the clip, and between a strided clip's frames, the decoder skips it.
      if (!by_count)
        dec->skip_frame = std::binary_search(w.wanted_pts.begin(), w.wanted_pts.end(), detail::packet_time(p))
                              ? AVDISCARD_DEFAULT
                              : AVDISCARD_NONREF;
      const int e = avcodec_send_packet(dec, p);
      if (e < 0 && e != AVERROR(EAGAIN))
        detail::video_fail(clip_text(first) + ": the packet at timestamp " + std::to_string(detail::packet_time(p)) +
                           " could not be decoded: " + detail::av_text(e));
      drain();
    }
    if (j < w.wanted.size()) {
      avcodec_send_packet(dec, nullptr);  // flush: the frames held back for reordering
      drain();
    }
    if (j < w.wanted.size())
      detail::video_fail(clip_text(first) + ": the stream ended before frame " + std::to_string(w.wanted[j]) +
                         " was decoded (a damaged or truncated stream?)");
  }

  // Seeks d to keyframe k (by its time, then by its decode time) and reads the packet there into
  // pkt (counted in `reads`): true when that is a keyframe at or before the clip's first frame (k
  // or an earlier one).
  static bool seek_keyframe(detail::demuxer& d, const keyframe& k, std::int64_t first_pts, AVPacket* pkt,
                            std::uint64_t& reads) {
    for (const std::int64_t target : {k.time, k.dts}) {
      try {
        if (av_seek_frame(d.format(), d.stream()->index, target, AVSEEK_FLAG_BACKWARD) < 0 || !d.next(pkt)) continue;
      } catch (const format_error&) {
        return false;  // a read error where the seek landed: read from the start instead
      }
      ++reads;
      if ((pkt->flags & AV_PKT_FLAG_KEY) != 0 && detail::packet_time(pkt) <= first_pts) return true;
    }
    return false;
  }

  // Output frame `to` := output frame `from` (thwc: one block; cthw: plane c of frame j sits at
  // (c * T + j) * H * W).
  void repeat_frame(std::span<std::byte> out, std::size_t from, std::size_t to) const noexcept {
    if (clip_.layout == video_layout::thwc) {
      std::memcpy(out.data() + to * frame_bytes(), out.data() + from * frame_bytes(), frame_bytes());
      return;
    }
    const std::size_t plane = static_cast<std::size_t>(geo_.width) * static_cast<std::size_t>(geo_.height);
    const std::size_t T = static_cast<std::size_t>(clip_.frames);
    for (std::size_t c = 0; c < channels; ++c)
      std::memcpy(out.data() + (c * T + to) * plane, out.data() + (c * T + from) * plane, plane);
  }

  // Converts decoded frame f to RGB at its own size, then resamples it through the clip's plan into
  // output frame j.
  void write_frame(AVFrame* f, detail::video_worker& w, const geometry_plan& plan, std::size_t j,
                   std::span<std::byte> out) const {
    if (f->format == AV_PIX_FMT_CUDA) {  // decoded by NVDEC: copied back (NV12) for the host's conversion
      av_frame_unref(w.host_frame);
      if (int e = av_hwframe_transfer_data(w.host_frame, f, 0); e < 0)
        detail::video_fail("frame " + std::to_string(w.wanted[j]) + ": copying the NVDEC frame to host memory failed: " +
                           detail::av_text(e));
      std::memcpy(&w.host_frame->colorspace, &f->colorspace, sizeof f->colorspace);  // as stored (see enum_bits)
      std::memcpy(&w.host_frame->color_range, &f->color_range, sizeof f->color_range);
      f = w.host_frame;
    }
    if (f->width != w.info.width || f->height != w.info.height)
      detail::video_fail("frame " + std::to_string(w.wanted[j]) + " is " + std::to_string(f->width) + "x" +
                         std::to_string(f->height) + ", the stream says " + std::to_string(w.info.width) + "x" +
                         std::to_string(w.info.height) + " (a size change inside a video is not supported)");
    const int W = f->width, H = f->height;
    // Rows 64-byte aligned for swscale's SIMD, and wide enough for what it writes: its vector
    // YUV-to-RGB paths store whole groups of up to 32 pixels a row, past W (a 34-pixel row of 102
    // bytes is written as 144), so the row is sized for W rounded up to 32 pixels, and the
    // buffer keeps a row of that slack after the last one.
    const std::size_t pitch = ((static_cast<std::size_t>(W) + 31) / 32 * 32 * channels + 63) & ~std::size_t{63};
    const std::size_t need = pitch * (static_cast<std::size_t>(H) + 1);
    if (w.rgb.size() < need) w.rgb.resize(need);
    SwsContext* before = w.sws;
    w.sws = sws_getCachedContext(w.sws, W, H, static_cast<AVPixelFormat>(f->format), W, H, AV_PIX_FMT_RGB24, SWS_BILINEAR,
                                 nullptr, nullptr, nullptr);
    if (w.sws == nullptr) {
      const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format));
      detail::video_fail(std::string("cannot convert frames of pixel format ") + (name != nullptr ? name : "unknown") + " to RGB");
    }
    // The matrix and range the stream states (BT.601 when it states none), to full-range RGB; set
    // again only when the converter or the stream's statement changes.
    const auto space = static_cast<long long>(detail::enum_bits(f->colorspace));
    const int cs = space == AVCOL_SPC_UNSPECIFIED || space == AVCOL_SPC_RGB || space < 0 || space >= AVCOL_SPC_NB
                       ? SWS_CS_DEFAULT
                       : static_cast<int>(space);
    const int src_full = detail::enum_bits(f->color_range) == AVCOL_RANGE_JPEG ? 1 : 0;
    if (w.sws != before || cs != w.sws_cs || src_full != w.sws_full) {
      int* inv = nullptr;
      int* tbl = nullptr;
      int in_full = 0, out_full = 0, bright = 0, contrast = 0, sat = 0;
      if (sws_getColorspaceDetails(w.sws, &inv, &in_full, &tbl, &out_full, &bright, &contrast, &sat) >= 0)
        sws_setColorspaceDetails(w.sws, sws_getCoefficients(cs), src_full, tbl, 1, bright, contrast, sat);
      w.sws_cs = cs;
      w.sws_full = src_full;
    }
    std::uint8_t* dst[4] = {w.rgb.data(), nullptr, nullptr, nullptr};
    const int dst_pitch[4] = {static_cast<int>(pitch), 0, 0, 0};
    if (sws_scale(w.sws, f->data, f->linesize, 0, H, dst, dst_pitch) != H)
      detail::video_fail("frame " + std::to_string(w.wanted[j]) + ": the conversion to RGB failed");
    if (clip_.layout == video_layout::thwc) {
      resample(w.rgb.data(), W, H, pitch, channels, {out.data() + j * frame_bytes(), frame_bytes()}, plan);
      return;
    }
    geometry_plan planar = plan;
    planar.layout = image_layout::chw;
    if (w.planes.size() < frame_bytes()) w.planes.resize(frame_bytes());
    resample(w.rgb.data(), W, H, pitch, channels, {w.planes.data(), frame_bytes()}, planar);
    const std::size_t plane = static_cast<std::size_t>(geo_.width) * static_cast<std::size_t>(geo_.height);
    const std::size_t T = static_cast<std::size_t>(clip_.frames);
    for (std::size_t c = 0; c < channels; ++c)
      std::memcpy(out.data() + (c * T + j) * plane, w.planes.data() + c * plane, plane);
  }

  geometry_options geo_;
  clip_options clip_;
  std::shared_ptr<const clip_table> table_;
  std::shared_ptr<video_counters> counters_;
};

}  // namespace sluice::codecs
