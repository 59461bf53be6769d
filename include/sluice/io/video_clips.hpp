// sluice/io/video_clips.hpp — videos as plain files, and the clips of any reader's videos.
//
// io::video_files is a fields reader over a list of video files (with a class label each): field
// "video" is the file's bytes (mapped when first read, no copy), field "label" its label. The
// files are checked to be regular files when the reader is made; each is mapped once, on first use.
//
// io::clips<"field">(videos, clip_options, plan) lists the clips of a fields reader's videos (this
// one, a WebDataset's `.mp4` member, a shard field) as a fields reader of its own: sample i is clip
// i, handed on as its video's sample with id i, and `.codec(geometry)` is the codecs::video that
// decodes exactly that clip (codec/video.hpp). Two plans:
//   every_clip{.step = s}     every clip of every video, first frames 0, s, 2s, ... (s = 0: one
//                             clip's span, so clips do not overlap); every video is probed once
//                             here (its packets demuxed, nothing decoded, its timestamps and
//                             keyframes kept, compact); a video shorter than a
//                             clip has none and is listed (short_video_list()), one that cannot be
//                             read is an error naming it, or with `.skip_bad` counted and listed
//                             (bad_videos());
//   random_clips{.per_video = k}  k clips of each video per epoch, each drawn from (seed, epoch,
//                             clip id): a new start every epoch, the same for any worker count and
//                             on resume; nothing is probed here: a video's first clip reads all
//                             of its packets and keeps its index.
// Either way each later clip of a video seeks straight to the keyframe before it and reads the
// packets from there to its last frame only: a clip costs the same in a 10 s video and a 10 min one.
// The sampler then runs over clips.size() like over any dataset: shuffle, distributed, weighted.
// Errors: a probed file that FFmpeg cannot read (every_clip) is a format_error naming the file;
// a clip that fails to decode is the decode stage's format_error naming the file, the clip and the
// video. Threads: fields(i) may be called from several threads.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include "sluice/codec/video.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/fixed_string.hpp"
#include "sluice/core/schema.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/stage/read.hpp"

namespace sluice::io {

struct video_file {
  std::string path;
  std::int64_t label = -1;
};

class video_files {
 public:
  using reader_concept = reader_tag;
  using schema_type = schema<field<"video", std::uint8_t, variable>, field<"label", std::int64_t>>;

  explicit video_files(std::vector<video_file> files) : files_(std::move(files)) {
    if (files_.empty()) throw usage_error("sluice: video_files: an empty list of videos");
    std::string missing;
    std::size_t n_missing = 0;
    for (const auto& f : files_) {
      struct stat st {};
      const bool found = ::stat(f.path.c_str(), &st) == 0;
      if (found && S_ISREG(st.st_mode)) continue;
      const int err = found ? 0 : errno;
      if (n_missing++ < 5)
        missing += (missing.empty() ? "" : ", ") + f.path +
                   (err == 0 && S_ISDIR(st.st_mode) ? " (a directory)"
                    : err == 0                      ? " (not a regular file)"
                                                    : " (" + std::string(std::strerror(err)) + ")");
    }
    if (n_missing != 0)
      throw usage_error("sluice: video_files: " + std::to_string(n_missing) + " of the " + std::to_string(files_.size()) +
                        " videos cannot be read: " + missing + (n_missing > 5 ? ", ..." : ""));
    maps_ = std::make_unique<slot[]>(files_.size());
  }

  [[nodiscard]] std::size_t size() const noexcept { return files_.size(); }
  // The first file's path: the name the read stage gives an id past the end (each sample names its own file).
  [[nodiscard]] std::string_view path() const noexcept { return files_.front().path; }
  [[nodiscard]] const video_file& file(std::size_t i) const { return files_.at(i); }

  [[nodiscard]] fields_sample<schema_type> fields(std::size_t i) const {
    if (i >= files_.size())
      throw usage_error("sluice: video_files: sample " + std::to_string(i) + " out of range (" +
                        std::to_string(files_.size()) + " videos)");
    fields_sample<schema_type> s{.id = i, .origin = files_[i].path};
    s.set<"video">(mapping(i).bytes());
    s.set<"label">(std::span<const std::int64_t>(&files_[i].label, 1));
    return s;
  }

 private:
  struct slot {
    std::once_flag once;
    mapped_file file;
  };
  const mapped_file& mapping(std::size_t i) const {
    slot& s = maps_[i];
    // A failed open leaves the flag unset: the next read of this video tries again (and fails again, named).
    std::call_once(s.once, [&] { s.file = mapped_file(files_[i].path, {.advice = access::normal, .populate = populate_mode::none}); });
    return s.file;
  }
  std::vector<video_file> files_;
  std::unique_ptr<slot[]> maps_;
};

struct every_clip {
  std::size_t step = 0;   // frames between clip starts; 0: (frames - 1) × stride + 1, a clip's span by stride (no overlap)
  bool skip_bad = false;  // a video FFmpeg cannot read: counted and listed instead of an error
};
struct random_clips {
  std::size_t per_video = 1;
};

namespace detail {
// clip id -> (video, first frame): prefix sums of each video's clip count (every_clip), or k a
// video with no fixed start (random_clips).
class clip_plan final : public codecs::clip_table {
 public:
  std::vector<std::uint64_t> offsets;  // every_clip: offsets[v] = first clip id of video v; size videos + 1
  std::vector<std::uint32_t> videos;   // every_clip: the source video of each listed entry of offsets
  std::size_t step = 0;
  std::size_t per_video = 0;           // random_clips: k (> 0); 0: every_clip

  [[nodiscard]] std::pair<std::size_t, std::size_t> locate(std::uint64_t id) const {
    if (per_video != 0) return {static_cast<std::size_t>(id / per_video), static_cast<std::size_t>(id % per_video)};
    const auto it = std::upper_bound(offsets.begin(), offsets.end(), id);
    const auto k = static_cast<std::size_t>(it - offsets.begin()) - 1;
    return {videos[k], static_cast<std::size_t>(id - offsets[k])};
  }
  [[nodiscard]] codecs::clip_choice choose(std::uint64_t id) const override {
    if (per_video != 0) return {};
    return {true, locate(id).second * step};
  }
  [[nodiscard]] std::string describe(std::uint64_t id) const override {
    const auto [v, k] = locate(id);
    return "clip " + std::to_string(k) + " of video " + std::to_string(v);
  }
  [[nodiscard]] std::size_t video_of(std::uint64_t id) const override { return locate(id).first; }
};
}  // namespace detail

template <fixed_string Field, fields_reader R>
class video_clips {
 public:
  using reader_concept = reader_tag;
  struct bad_video {
    std::size_t video;
    std::string why;
  };
  struct short_video {  // shorter than a clip: no clips
    std::size_t video;
    std::size_t frames;
  };

  video_clips(const R& videos, codecs::clip_options c, every_clip plan) : videos_(&videos), clip_(c) {
    auto p = std::make_shared<detail::clip_plan>();
    const codecs::video check({}, c);  // the options checked once, as the codec will take them
    const std::size_t span = static_cast<std::size_t>(c.frames - 1) * static_cast<std::size_t>(c.stride) + 1;
    p->step = plan.step != 0 ? plan.step : span;
    std::uint64_t total = 0;
    for (std::size_t v = 0; v < videos.size(); ++v) {
      const auto s = videos.fields(v);
      const auto bytes = s.template bytes_of<Field>();
      std::size_t starts = 0, frames = 0;
      try {
        const codecs::video_info info = codecs::probe_video(bytes);
        starts = codecs::clip_starts(info, c);
        frames = info.frames();
        if (starts != 0) {  // kept: the codec's clips of this video seek instead of reading it again
          const std::uint64_t identity = codecs::detail::video_identity(bytes);
          p->indexes().keep(v, std::make_shared<const codecs::detail::video_index>(info, identity));
        }
      } catch (const format_error& e) {
        if (!plan.skip_bad) throw format_error(std::string(origin_of(s)), {.record = v}, e.cause());
        bad_.push_back({v, e.cause()});
        continue;
      }
      if (starts == 0) {
        short_.push_back({v, frames});
        continue;
      }
      p->offsets.push_back(total);
      p->videos.push_back(static_cast<std::uint32_t>(v));
      total += (starts - 1) / p->step + 1;
    }
    p->offsets.push_back(total);
    size_ = static_cast<std::size_t>(total);
    plan_ = std::move(p);
  }
  video_clips(const R& videos, codecs::clip_options c, random_clips plan) : videos_(&videos), clip_(c) {
    if (plan.per_video == 0) throw usage_error("sluice: random_clips.per_video must be positive");
    const codecs::video check({}, c);
    auto p = std::make_shared<detail::clip_plan>();
    p->per_video = plan.per_video;
    size_ = videos.size() * plan.per_video;
    plan_ = std::move(p);
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::string_view path() const noexcept { return videos_->path(); }
  // The video clip i comes from, and its index among that video's clips.
  [[nodiscard]] std::pair<std::size_t, std::size_t> locate(std::size_t i) const { return plan_->locate(i); }
  [[nodiscard]] const std::vector<short_video>& short_video_list() const noexcept { return short_; }
  [[nodiscard]] const std::vector<bad_video>& bad_videos() const noexcept { return bad_; }
  [[nodiscard]] const codecs::clip_options& clip_options() const noexcept { return clip_; }

  auto fields(std::size_t i) const {
    if (i >= size_)
      throw usage_error("sluice: video_clips: clip " + std::to_string(i) + " out of range (" + std::to_string(size_) +
                        " clips)");
    auto s = videos_->fields(locate(i).first);
    s.id = i;
    return s;
  }

  // The codec that decodes each sample's own clip, with `g`'s resize, crop and flip.
  [[nodiscard]] codecs::video codec(codecs::geometry_options g) const { return codecs::video(g, clip_, plan_); }

 private:
  const R* videos_;
  codecs::clip_options clip_;
  std::shared_ptr<const detail::clip_plan> plan_;
  std::size_t size_ = 0;
  std::vector<short_video> short_;
  std::vector<bad_video> bad_;
};

// The clips of `videos`' field `Field` (a reference: the reader must outlive the clips).
template <fixed_string Field, fields_reader R, class Plan>
video_clips<Field, R> clips(const R& videos, codecs::clip_options c, Plan plan) {
  return video_clips<Field, R>(videos, c, plan);
}

}  // namespace sluice::io
