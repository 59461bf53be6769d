// Video clips (codec/video.hpp) against FFmpeg's own decode of the same frames, one thread, and
// through the loader at 1 and 2 workers. Clips of 16 frames at stride 2 from 480p H.264 videos
// (854x480, 30 fps, 10 s, GOP 60, 2 B-frames: what `ffmpeg -preset veryfast` writes), to 224x224
// RGB. The videos are encoded once by the ffmpeg tool into $SLUICE_BENCH_VIDEO_DIR (default
// /tmp/sluice-bench-video) and reused, with one more of 120 s (3,600 frames) for what a clip costs
// in a long video (Arg 3600 below; Arg 300: the 8 videos of 10 s).
//
//   BM_ffmpeg_clip   the baseline: a hand-written libav loop a user would write for the same clip:
//                    av_seek_frame to the keyframe before it, decode forward, and for each wanted
//                    frame one sws_scale straight to 224x224 RGB (convert and resize in one pass)
//   BM_sluice_clip   codecs::video::decode of the same clips (same first frames), with
//                    random_resized_crop 224 + flip: demux, seek, decode, convert, crop + resize
//   BM_sluice_clip_nvdec  the same on the GPU's NVDEC, frames copied back (an error where there is none)
//   BM_loader/w      random clips (one per video per epoch, drawn from (seed, epoch, id)) through
//                    read -> decode<"video"> -> stack -> prefetch with w workers: clips/s
// The ratio that matters: BM_ffmpeg_clip's time / BM_sluice_clip's (goal >= 0.9), and BM_loader/2 /
// BM_loader/1 (goal >= 1.9 on 2 cores).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/video.hpp"
#include "sluice/io/video_clips.hpp"
#include "sluice/stage/decode.hpp"

namespace {

constexpr int n_videos = 8, frames_per_video = 300, clip_frames = 16, clip_stride = 2, out_size = 224;

std::string video_dir() {
  const char* d = std::getenv("SLUICE_BENCH_VIDEO_DIR");
  return d != nullptr ? d : "/tmp/sluice-bench-video";
}

// Encodes (once) a video of `seconds` s into `name` under video_dir(); its path.
std::string encoded(const std::string& name, int seconds, int hue) {
  std::filesystem::create_directories(video_dir());
  const std::string path = video_dir() + "/" + name;
  if (!std::filesystem::exists(path)) {
    const std::string cmd = "ffmpeg -y -hide_banner -loglevel error -f lavfi -i testsrc2=size=854x480:rate=30 -t " +
                            std::to_string(seconds) + " -vf hue=H=" + std::to_string(hue) +
                            "*t -c:v libx264 -preset veryfast -crf 23 -g 60 -bf 2 -pix_fmt yuv420p " + path +
                            ".tmp.mp4 && mv " + path + ".tmp.mp4 " + path;
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "could not encode the benchmark videos (needs the ffmpeg tool)\n");
      std::exit(1);
    }
  }
  return path;
}

const std::vector<std::string>& videos() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> p;
    for (int v = 0; v < n_videos; ++v) p.push_back(encoded("v" + std::to_string(v) + ".mp4", 10, v));
    return p;
  }();
  return paths;
}

std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), {});
  return {reinterpret_cast<const std::byte*>(c.data()), reinterpret_cast<const std::byte*>(c.data()) + c.size()};
}

const std::vector<std::vector<std::byte>>& video_bytes() {
  static const std::vector<std::vector<std::byte>> bytes = [] {
    std::vector<std::vector<std::byte>> b;
    for (const auto& path : videos()) b.push_back(file_bytes(path));
    return b;
  }();
  return bytes;
}

// One video of long_seconds s, same encoding: what a clip costs where the video is long.
constexpr int long_seconds = 120, long_frames = long_seconds * 30;
const std::vector<std::byte>& long_video() {
  static const std::vector<std::byte> bytes = file_bytes(encoded("long.mp4", long_seconds, 3));
  return bytes;
}

// The clips both benchmarks decode: (video, first frame), spread over each video.
// With `length` frames a video (long_frames: the long video alone).
std::vector<std::pair<int, int>> clip_list(int length = frames_per_video) {
  std::vector<std::pair<int, int>> c;
  const int last_start = length - (clip_frames - 1) * clip_stride - 1;
  const int videos = length == frames_per_video ? n_videos : 1;
  for (int k = 0; k < 32; ++k) c.emplace_back(k % videos, (k * 97) % (last_start + 1));
  return c;
}

// ---- the baseline ------------------------------------------------------------------------------
// (The AVIO callbacks over bytes in memory are sluice's: they only hand over bytes, as any would.)
using mem = sluice::codecs::detail::memory_source;

// Decodes frames first, first + stride, ... of `in` into out (T x 224 x 224 x 3) with plain libav.
void ffmpeg_clip(std::span<const std::byte> in, int first, std::vector<std::uint8_t>& out) {
  mem m{reinterpret_cast<const std::uint8_t*>(in.data()), static_cast<std::int64_t>(in.size())};
  auto* buf = static_cast<std::uint8_t*>(av_malloc(1 << 16));
  AVIOContext* io = avio_alloc_context(buf, 1 << 16, 0, &m, &mem::read, nullptr, &mem::seek);
  AVFormatContext* fmt = avformat_alloc_context();
  fmt->pb = io;
  avformat_open_input(&fmt, nullptr, nullptr, nullptr);
  const AVCodec* codec = nullptr;
  const int s = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  AVStream* st = fmt->streams[s];
  AVCodecContext* dec = avcodec_alloc_context3(codec);
  avcodec_parameters_to_context(dec, st->codecpar);
  dec->thread_count = 1;
  avcodec_open2(dec, codec, nullptr);
  // Frame k of a constant-rate stream is at k * (1 / fps) seconds.
  const AVRational fps = st->avg_frame_rate;
  auto pts_of = [&](int k) { return av_rescale_q(k, av_inv_q(fps), st->time_base) + (st->start_time != AV_NOPTS_VALUE ? st->start_time : 0); };
  av_seek_frame(fmt, s, pts_of(first), AVSEEK_FLAG_BACKWARD);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* f = av_frame_alloc();
  SwsContext* sws = nullptr;
  int j = 0;
  auto take = [&] {
    while (j < clip_frames && avcodec_receive_frame(dec, f) == 0) {
      if (f->pts == pts_of(first + j * clip_stride)) {
        sws = sws_getCachedContext(sws, f->width, f->height, static_cast<AVPixelFormat>(f->format), out_size, out_size,
                                   AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
        std::uint8_t* dst[4] = {out.data() + static_cast<std::size_t>(j) * out_size * out_size * 3, nullptr, nullptr, nullptr};
        const int pitch[4] = {out_size * 3, 0, 0, 0};
        sws_scale(sws, f->data, f->linesize, 0, f->height, dst, pitch);
        ++j;
      }
      av_frame_unref(f);
    }
  };
  while (j < clip_frames && av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == s) {
      avcodec_send_packet(dec, pkt);
      take();
    }
    av_packet_unref(pkt);
  }
  if (j < clip_frames) {
    avcodec_send_packet(dec, nullptr);
    take();
  }
  if (j != clip_frames) std::abort();  // the baseline must decode the same frames
  sws_freeContext(sws);
  av_frame_free(&f);
  av_packet_free(&pkt);
  avcodec_free_context(&dec);
  avformat_close_input(&fmt);
  av_freep(&io->buffer);
  avio_context_free(&io);
}

// The bytes of video v of a clip list of `length` frames a video.
const std::vector<std::byte>& bytes_of(int length, int v) {
  return length == frames_per_video ? video_bytes()[static_cast<std::size_t>(v)] : long_video();
}

void BM_ffmpeg_clip(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  const auto clips = clip_list(length);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(clip_frames) * out_size * out_size * 3);
  std::size_t k = 0;
  for (auto _ : state) {
    const auto [v, first] = clips[k++ % clips.size()];
    ffmpeg_clip(bytes_of(length, v), first, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["clips/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- sluice --------------------------------------------------------------------------------------
struct fixed_starts final : sluice::codecs::clip_table {
  int length = frames_per_video;
  std::vector<std::pair<int, int>> clips = clip_list(length);
  explicit fixed_starts(int frames) : length(frames), clips(clip_list(frames)) {}
  sluice::codecs::clip_choice choose(std::uint64_t id) const override {
    return {true, static_cast<std::size_t>(clips[id % clips.size()].second)};
  }
  std::string describe(std::uint64_t id) const override { return "clip " + std::to_string(id); }
  // Which video: its first clip reads it whole and keeps its index, the later ones seek (as io::clips' tables do).
  std::size_t video_of(std::uint64_t id) const override {
    return static_cast<std::size_t>(clips[id % clips.size()].first);
  }
};

const sluice::codecs::geometry_options rrc{.width = out_size, .height = out_size,
                                           .mode = sluice::codecs::fit::random_resized_crop, .random_flip = true};
const sluice::codecs::clip_options clip{.frames = clip_frames, .stride = clip_stride};

// Decodes the clips of clip_list() with `codec`, one a timed iteration.
void time_clips(benchmark::State& state, const sluice::codecs::video& codec, const fixed_starts& table) {
  std::vector<std::byte> out(codec.output_bytes());
  std::uint64_t k = 0;
  for (auto _ : state) {
    codec.decode(bytes_of(table.length, table.clips[k % table.clips.size()].first), out, {.seed = 1, .id = k});
    ++k;
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["clips/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  // Packets read a clip (the first clip of each video reads all of them), and seeks that missed.
  state.counters["packets/clip"] = static_cast<double>(codec.counters().packets) / static_cast<double>(k);
  state.counters["seek_misses"] = static_cast<double>(codec.counters().seek_fallbacks);
}

void BM_sluice_clip(benchmark::State& state) {
  const auto table = std::make_shared<fixed_starts>(static_cast<int>(state.range(0)));
  time_clips(state, sluice::codecs::video(rrc, clip, table), *table);
}

// The same clips decoded by NVDEC (FFmpeg's CUDA hwaccel), frames copied back to host memory and
// converted there: reports an error (no figure) where FFmpeg finds no CUDA device.
void BM_sluice_clip_nvdec(benchmark::State& state) {
  const auto table = std::make_shared<fixed_starts>(frames_per_video);
  sluice::codecs::clip_options c = clip;
  c.decoder = sluice::codecs::video_decoder::nvdec;
  const sluice::codecs::video codec(rrc, c, table);
  std::vector<std::byte> out(codec.output_bytes());
  codec.decode(video_bytes()[0], out, {.seed = 1, .id = 0});
  if (codec.counters().nvdec_fallbacks != 0) {
    state.SkipWithError(("no NVDEC here: " + codec.counters().last_fallback).c_str());
    return;
  }
  time_clips(state, codec, *table);
}

void BM_loader(benchmark::State& state) {
  std::vector<sluice::io::video_file> files;
  for (std::size_t v = 0; v < videos().size(); ++v) files.push_back({videos()[v], static_cast<std::int64_t>(v)});
  sluice::io::video_files data(files);
  auto clips = sluice::io::clips<"video">(data, clip, sluice::io::random_clips{.per_video = 4});
  auto loader = sluice::from(sluice::sample::shuffle(clips.size(), {.seed = 3})) | sluice::read(clips)
              | sluice::decode<"video">(clips.codec(rrc))
              | sluice::collate({.batch = 4}, sluice::stack<"video">{}, sluice::stack<"label">{})
              | sluice::prefetch(2, {.workers = static_cast<std::size_t>(state.range(0))});
  std::uint64_t epoch = 0, n = 0;
  for (auto _ : state) {
    for (auto& b : loader.epoch(epoch++)) {
      n += b.size();
      benchmark::DoNotOptimize(b.get<"video">().data());
    }
  }
  state.counters["clips/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
}

}  // namespace

// Arg: frames a video (300: the 8 videos of 10 s; long_frames: the one of 120 s).
BENCHMARK(BM_ffmpeg_clip)->Arg(frames_per_video)->Arg(long_frames)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);
BENCHMARK(BM_sluice_clip)->Arg(frames_per_video)->Arg(long_frames)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);
BENCHMARK(BM_sluice_clip_nvdec)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);
BENCHMARK(BM_loader)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  (void)video_bytes();  // encoded (first run only) and read before anything is timed
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
