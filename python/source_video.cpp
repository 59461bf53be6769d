// The Python module's video source: video files (paths=, with labels or none) as clips
// (io/video_clips.hpp): k random clips a video a epoch, or every clip at a step; each decoded
// (codec/video.hpp) to size=(h, w) with random_resized_crop= and flip= (one transform a clip), in
// layout "hwc" (T, H, W, C) or "chw" (C, T, H, W), collated to uint8 or normalised float32.
// Built where the module has FFmpeg (SLUICE_WITH_VIDEO); elsewhere the source is a UsageError.
#include "pipelines.hpp"

#if SLUICE_WITH_VIDEO
#include <cstdio>

#include "sluice/codec/video.hpp"
#include "sluice/io/video_clips.hpp"
#include "sluice/stage/decode.hpp"
#endif

namespace sluice_module {

#if SLUICE_WITH_VIDEO
namespace {

using clips_type = sluice::io::video_clips<"video", sluice::io::video_files>;

// What sluice.Loader warns of when videos are shorter than a clip: they are in no epoch (a
// truncated file is an error instead), the first five named with their frames.
std::string short_videos_note(const options& o, const std::vector<clips_type::short_video>& few) {
  char fps[32];
  std::snprintf(fps, sizeof fps, "%g", o.clip_fps);
  std::string text = "sluice.videos: " + std::to_string(few.size()) + " of " + std::to_string(o.paths.size()) +
                     " videos are shorter than a clip (" + std::to_string(o.clip_frames) + " frames " +
                     (o.clip_fps > 0 ? "at " + std::string(fps) + " a second"
                                     : "every " + std::to_string(o.clip_stride) + (o.clip_stride == 1 ? " frame" : " frames")) +
                     ") and give no clips: ";
  for (std::size_t k = 0; k < few.size() && k < 5; ++k)
    text += (k != 0 ? ", '" : "'") + o.paths[few[k].video] + "' (" + std::to_string(few[k].frames) +
            (few[k].frames == 1 ? " frame)" : " frames)");
  if (few.size() > 5) text += ", ...";
  return text + "; they are in no epoch (fewer frames= or a smaller stride= takes them)";
}

// The pipeline over the clips: decode each, collate to uint8 or normalised float32.
loader_ptr clips_pipeline(const options& o, const std::shared_ptr<const clips_type>& clips,
                          const sluice::codecs::video& codec, const std::vector<std::int64_t>& labels,
                          const sluice::batch_options& bo) {
  if (o.output == "float32")
    return with_sampler(o, clips->size(), labels, [&](auto s) {
      return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read_stage(clips) | sluice::decode<"video">(codec) |
                                  sluice::collate(bo, sluice::normalized<"video">{.mean = o.mean, .std = o.std},
                                                  sluice::stack<"label">{}) |
                                  sluice::prefetch(depth_of(o), loader_opts(o)));
    });
  if (!o.output.empty() && o.output != "uint8") bad_value("output", "'" + o.output + "'", "'uint8' or 'float32'");
  return with_sampler(o, clips->size(), labels, [&](auto s) {
    return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read_stage(clips) | sluice::decode<"video">(codec) |
                                sluice::collate(bo, sluice::stack<"video">{}, sluice::stack<"label">{}) |
                                sluice::prefetch(depth_of(o), loader_opts(o)));
  });
}

// The clips reader and its codec for a plan (every clip, or k random ones), over the one pipeline.
template <class Plan>
loader_ptr clips_loader(const options& o, Plan plan) {
  if (o.paths.empty()) throw sluice::usage_error("sluice: source='video' needs paths= (the video files)");
  if (!o.video_labels.empty() && o.video_labels.size() != o.paths.size())
    throw sluice::usage_error("sluice: video labels= has " + std::to_string(o.video_labels.size()) + " labels for " +
                              std::to_string(o.paths.size()) + " videos; give one a video, or none");
  if (o.size.size() != 2 || o.size[0] <= 0 || o.size[1] <= 0)
    throw sluice::usage_error("sluice: a video source needs size=(height, width), both positive");
  if (o.layout != "chw" && o.layout != "hwc") bad_value("layout", "'" + o.layout + "'", "'chw' or 'hwc'");
  std::vector<sluice::io::video_file> files;
  for (std::size_t i = 0; i < o.paths.size(); ++i)
    files.push_back({o.paths[i], o.video_labels.empty() ? -1 : o.video_labels[i]});
  // Owned by the loader: the clips reader references the files reader, so both live in one holder.
  struct holder {
    sluice::io::video_files videos;
    clips_type clips;
    holder(std::vector<sluice::io::video_file> f, const sluice::codecs::clip_options& c, Plan p)
        : videos(std::move(f)), clips(videos, c, p) {}
  };
  const sluice::codecs::clip_options c{.frames = o.clip_frames, .stride = o.clip_stride, .fps = o.clip_fps,
                                       .layout = o.layout == "chw" ? sluice::codecs::video_layout::cthw
                                                                   : sluice::codecs::video_layout::thwc};
  auto h = std::make_shared<const holder>(std::move(files), c, plan);
  const sluice::codecs::video codec = h->clips.codec(
      {.width = o.size[1], .height = o.size[0],
       .mode = o.random_resized_crop ? sluice::codecs::fit::random_resized_crop : sluice::codecs::fit::crop,
       .random_flip = o.flip});
  // Per clip, its video's label (for class_balanced).
  std::vector<std::int64_t> labels;
  if (!o.video_labels.empty()) {
    labels.resize(h->clips.size());
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = o.video_labels[h->clips.locate(i).first];
  }
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  loader_ptr l = clips_pipeline(o, std::shared_ptr<const clips_type>(h, &h->clips), codec, labels, bo);
  if (const auto& few = h->clips.short_video_list(); !few.empty()) l->notes.push_back(short_videos_note(o, few));
  return l;
}

}  // namespace

loader_ptr make_video_loader(const options& o) {
  if (o.clips == "random") {
    if (o.clips_per_video == 0) throw sluice::usage_error("sluice: clips_per_video must be at least 1");
    return clips_loader(o, sluice::io::random_clips{.per_video = o.clips_per_video});
  }
  if (o.clips == "every") return clips_loader(o, sluice::io::every_clip{.step = o.clip_step});
  bad_value("clips", "'" + o.clips + "'", "'random' (clips_per_video= a video a epoch) or 'every' (a clip every step= frames)");
}
#else
loader_ptr make_video_loader(const options&) {
  throw sluice::usage_error("sluice: this sluice module was built without FFmpeg, so it has no video source (build it "
                            "from source with Debian's libavformat-dev, libavcodec-dev and libswscale-dev installed)");
}
#endif

}  // namespace sluice_module
