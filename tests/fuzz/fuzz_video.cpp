// libFuzzer target: the video path as the decode stage runs it — the container read from memory
// (sluice's AVIO callbacks), the frames' timestamps sorted and checked, the clip chosen (by stride,
// by fps, through a clip table), the keyframe found, packets decoded with a damaged one an error,
// the frames converted and resampled into a small output; a kept index and the seek through it —
// and probe_video with the clip math
// io::clips uses. Small frame and output limits keep each input cheap.
#include <vector>

#include "sluice/codec/video.hpp"

namespace {
struct every_fifth final : sluice::codecs::clip_table {
  sluice::codecs::clip_choice choose(std::uint64_t id) const override { return {true, static_cast<std::size_t>(id % 7) * 5}; }
  std::string describe(std::uint64_t id) const override { return "clip " + std::to_string(id); }
};
// Every input is "video 0": its first clip indexes it, the second seeks through the index; a
// mutation inside an input that keeps its size and ends meets the previous input's index (a
// table that lies), which must end in a format_error or the right frames, never a crash.
struct one_video final : sluice::codecs::clip_table {
  sluice::codecs::clip_choice choose(std::uint64_t id) const override {
    return {true, static_cast<std::size_t>(id % 5) * 3};
  }
  std::string describe(std::uint64_t id) const override { return "clip " + std::to_string(id); }
  std::size_t video_of(std::uint64_t) const override { return 0; }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sluice::codecs;
  static const video by_stride({.width = 16, .height = 12, .mode = fit::random_resized_crop, .random_flip = true},
                               {.frames = 3, .stride = 2, .max_frame_pixels = std::uint64_t{1} << 16});
  static const video by_fps({.width = 8, .height = 8, .mode = fit::stretch},
                            {.frames = 4, .fps = 7.5, .layout = video_layout::cthw, .max_frame_pixels = std::uint64_t{1} << 16});
  static const video tabled({.width = 8, .height = 8}, {.frames = 2, .stride = 1, .max_frame_pixels = std::uint64_t{1} << 16},
                            std::make_shared<every_fifth>());
  static const video indexed({.width = 8, .height = 8},
                             {.frames = 2, .stride = 2, .max_frame_pixels = std::uint64_t{1} << 16},
                             std::make_shared<one_video>());
  static std::vector<std::byte> out(by_stride.output_bytes());
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  for (const video* v : {&by_stride, &by_fps, &tabled, &indexed}) {
    try {
      v->decode(in, std::span(out).first(v->output_bytes()), {.seed = 1, .epoch = 0, .id = size});
    } catch (const sluice::format_error&) {
    }
  }
  try {
    indexed.decode(in, std::span(out).first(indexed.output_bytes()), {.seed = 1, .epoch = 0, .id = size + 2});
  } catch (const sluice::format_error&) {
  }
  try {
    const video_info info = probe_video(in);
    std::vector<std::size_t> frames;
    for (const clip_options& c : {by_stride.clip(), by_fps.clip()}) {
      const std::size_t starts = clip_starts(info, c);
      if (starts > 0) clip_frames(info, c, starts - 1, frames);
      for (std::size_t f : frames)
        if (f >= info.frames()) __builtin_trap();  // a clip never reaches past the video
    }
  } catch (const sluice::format_error&) {
  }
  return 0;
}
