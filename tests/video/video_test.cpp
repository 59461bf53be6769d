// Video clips (codec/video.hpp, io/video_clips.hpp): videos this test encodes itself with Debian's
// ffmpeg from frames that carry their own number in their pixels (12 bits as black or white
// 16×16 blocks along the top row), so every delivered frame is checked to be the one asked for:
// constant and variable frame rate, B-frames, several codecs and containers; clips by stride and
// by fps; both layouts; one transform per clip; every clip once per epoch through the loader with
// 1 and 2 workers; random clips a new start each epoch; a WebDataset member; and every kind of bad
// input a clear format_error naming the file, counted under skip. Skipped without the ffmpeg tool.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <sluice/sluice.hpp>

#include "sluice/codec/video.hpp"
#include "sluice/io/video_clips.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/shard_fields.hpp"
#include "sluice/io/wds.hpp"
#include "sluice/io/wds_tar.hpp"
#include "sluice/stage/decode.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::codecs;
using sluice_test::temp_dir;

namespace {

constexpr int W = 192, H = 96, bits = 12, block = 16;

bool have_ffmpeg() { return std::system("ffmpeg -hide_banner -version > /dev/null 2>&1") == 0; }

void need_ffmpeg() {
  if (!have_ffmpeg()) sluice_test::skip("the ffmpeg tool is not installed (Debian: ffmpeg)");
}

// Frame n: its number in blocks along the top, a gradient below that moves with n.
std::vector<std::uint8_t> frame_pixels(int n) {
  std::vector<std::uint8_t> f(static_cast<std::size_t>(W) * H * 3);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      std::uint8_t v = static_cast<std::uint8_t>((x * 2 + y + n * 5) & 0x7f) + 64;
      if (y < block) v = ((n >> (x / block)) & 1) != 0 ? 255 : 0;
      for (int c = 0; c < 3; ++c) f[(static_cast<std::size_t>(y) * W + x) * 3 + c] = v;
    }
  return f;
}

// The frame number an output frame (H × W × 3, as encoded: no resize) carries.
int frame_number(const std::uint8_t* rgb) {
  int n = 0;
  for (int b = 0; b < bits; ++b) {
    const std::uint8_t* p = rgb + (static_cast<std::size_t>(block / 2) * W + b * block + block / 2) * 3;
    if (p[0] > 127) n |= 1 << b;
  }
  return n;
}

void run(const std::string& cmd) {
  const int rc = std::system((cmd + " > /dev/null 2>&1").c_str());
  REQUIRE_MESSAGE(rc == 0, cmd);
}

// A constant-rate video of `n` frames at 25 fps, encoded with `codec_args` into `path`.
std::string encode_cfr(const temp_dir& dir, const std::string& name, int n, const std::string& codec_args) {
  const std::string raw = dir.file(name + ".rgb");
  {
    std::FILE* f = std::fopen(raw.c_str(), "wb");
    REQUIRE(f != nullptr);
    for (int i = 0; i < n; ++i) {
      const auto px = frame_pixels(i);
      std::fwrite(px.data(), 1, px.size(), f);
    }
    std::fclose(f);
  }
  const std::string out = dir.file(name);
  run("ffmpeg -y -hide_banner -f rawvideo -pix_fmt rgb24 -s " + std::to_string(W) + "x" + std::to_string(H) +
      " -r 25 -i " + raw + " " + codec_args + " " + out);
  return out;
}

// A variable-rate H.264 MP4: frame i shown for durations_ms[i] milliseconds, then one more frame
// (number durations_ms.size()).
std::string encode_vfr(const temp_dir& dir, const std::string& name, const std::vector<int>& durations_ms) {
  std::string list = "ffconcat version 1.0\n";
  for (std::size_t i = 0; i < durations_ms.size(); ++i) {
    const std::string ppm = dir.file(name + "-" + std::to_string(i) + ".ppm");
    std::FILE* f = std::fopen(ppm.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fprintf(f, "P6\n%d %d\n255\n", W, H);
    const auto px = frame_pixels(static_cast<int>(i));
    std::fwrite(px.data(), 1, px.size(), f);
    std::fclose(f);
    list += "file '" + ppm + "'\nduration " + std::to_string(durations_ms[i] / 1000.0) + "\n";
  }
  const std::string last = dir.file(name + "-" + std::to_string(durations_ms.size()) + ".ppm");
  {
    std::FILE* f = std::fopen(last.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fprintf(f, "P6\n%d %d\n255\n", W, H);
    const auto px = frame_pixels(static_cast<int>(durations_ms.size()));
    std::fwrite(px.data(), 1, px.size(), f);
    std::fclose(f);
  }
  list += "file '" + last + "'\nduration 0.04\n";
  sluice_test::write_file(dir.file(name + ".txt"), list);
  const std::string out = dir.file(name);
  run("ffmpeg -y -hide_banner -f concat -safe 0 -i " + dir.file(name + ".txt") +
      " -vsync vfr -c:v libx264 -bf 2 -g 10 -qp 0 -pix_fmt yuv420p -video_track_timescale 1000 " + out);
  return out;
}

const std::string h264 = "-c:v libx264 -bf 2 -g 12 -qp 0 -pix_fmt yuv420p";

std::vector<std::uint8_t> decode_clip(const video& v, std::span<const std::byte> in, sample_context ctx) {
  std::vector<std::byte> out(v.output_bytes());
  v.decode(in, out, ctx);
  std::vector<std::uint8_t> u(out.size());
  std::memcpy(u.data(), out.data(), out.size());
  return u;
}

std::vector<int> numbers(const std::vector<std::uint8_t>& clip, int frames) {
  std::vector<int> n;
  for (int j = 0; j < frames; ++j) n.push_back(frame_number(clip.data() + static_cast<std::size_t>(j) * W * H * 3));
  return n;
}

// The output of the stretch to the source size: every frame as encoded.
const geometry_options same_size{.width = W, .height = H, .mode = fit::stretch};

}  // namespace

TEST_CASE("video: probe reads the frames' timestamps of an H.264 MP4 with B-frames without decoding") {
  need_ffmpeg();
  temp_dir dir;
  const auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 40, h264));
  const video_info info = probe_video(bytes);
  CHECK(info.width == W);
  CHECK(info.height == H);
  CHECK(info.codec == "h264");
  REQUIRE(info.frames() == 40);
  for (std::size_t i = 0; i < info.frames(); ++i) CHECK(info.seconds(i) == doctest::Approx(i / 25.0).epsilon(1e-6));
}

TEST_CASE("video: every clip start of a B-frame H.264 MP4 delivers exactly the frames asked for, at stride 1 and 3") {
  need_ffmpeg();
  temp_dir dir;
  const auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 50, h264));
  for (int stride : {1, 3}) {
    const clip_options c{.frames = 8, .stride = stride, .pick = clip_pick::first};
    const video_info info = probe_video(bytes);
    const std::size_t starts = clip_starts(info, c);
    CHECK(starts == 50 - static_cast<std::size_t>(7 * stride));
    // Every start through a clip table that fixes it (io::clips does this per sample id).
    struct fixed final : clip_table {
      clip_choice choose(std::uint64_t id) const override { return {true, static_cast<std::size_t>(id)}; }
      std::string describe(std::uint64_t id) const override { return "clip " + std::to_string(id); }
    };
    const video v(same_size, c, std::make_shared<fixed>());
    for (std::size_t first = 0; first < starts; ++first) {
      const auto got = numbers(decode_clip(v, bytes, {.id = first}), c.frames);
      for (int j = 0; j < c.frames; ++j) REQUIRE(got[j] == static_cast<int>(first) + j * stride);
    }
  }
}

TEST_CASE("video: random starts are drawn from (seed, epoch, id), cover the video, and centre/first are fixed") {
  need_ffmpeg();
  temp_dir dir;
  const auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 30, h264));
  const video v(same_size, {.frames = 4, .stride = 2});
  std::set<int> starts;
  for (std::uint64_t id = 0; id < 40; ++id) {
    const auto a = decode_clip(v, bytes, {.seed = 5, .epoch = 1, .id = id});
    CHECK(a == decode_clip(v, bytes, {.seed = 5, .epoch = 1, .id = id}));  // the same sample, the same clip
    const auto n = numbers(a, 4);
    for (int j = 1; j < 4; ++j) CHECK(n[j] == n[0] + 2 * j);
    CHECK(n[0] >= 0);
    CHECK(n[0] <= 30 - 7);
    starts.insert(n[0]);
  }
  CHECK(starts.size() >= 12);  // 24 possible starts, 40 draws
  const video centre(same_size, {.frames = 4, .stride = 2, .pick = clip_pick::center});
  CHECK(numbers(decode_clip(centre, bytes, {.id = 3}), 4)[0] == (24 - 1) / 2);
  const video first(same_size, {.frames = 4, .stride = 2, .pick = clip_pick::first});
  CHECK(numbers(decode_clip(first, bytes, {.id = 9}), 4)[0] == 0);
}

TEST_CASE("video: other codecs and containers: MPEG-4 part 2 in AVI, VP9 in WebM, MJPEG and H.265 in Matroska") {
  need_ffmpeg();
  temp_dir dir;
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"a.avi", "-c:v mpeg4 -q:v 2 -bf 1 -g 8 -pix_fmt yuv420p"},
      {"a.webm", "-c:v libvpx-vp9 -b:v 0 -crf 10 -g 8 -deadline realtime -pix_fmt yuv420p"},
      {"a.mkv", "-c:v mjpeg -q:v 2 -pix_fmt yuvj420p"},
      {"b.mkv", "-c:v libx265 -x265-params log-level=none:bframes=2:keyint=8 -crf 12 -pix_fmt yuv420p"}};
  for (const auto& kind : kinds) {
    const std::string& name = kind.first;
    const std::string& args = kind.second;
    CAPTURE(name);
    const auto bytes = sluice_test::read_file(encode_cfr(dir, name, 24, args));
    const video_info info = probe_video(bytes);
    CHECK(info.frames() == 24);
    const video v(same_size, {.frames = 5, .stride = 2});
    for (std::uint64_t id = 0; id < 6; ++id) {
      const auto n = numbers(decode_clip(v, bytes, {.seed = 1, .id = id}), 5);
      for (int j = 1; j < 5; ++j) CHECK(n[j] == n[0] + 2 * j);
    }
  }
}

TEST_CASE("video: widths off swscale's pixel groups (34, 100, 426) decode whole, exactly as ffmpeg converts them") {
  // swscale's vector YUV-to-RGB paths write rows in groups of pixels past the frame's width; a
  // 34-pixel yuv420p frame once overran the RGB buffer's last row (heap corruption in
  // AddressSanitizer's and glibc's eyes). Every pixel is checked against the ffmpeg tool's
  // bilinear RGB of the same file (the same libswscale).
  need_ffmpeg();
  temp_dir dir;
  struct size_case {
    int w, h;
    const char* format;
  };
  for (const size_case c : {size_case{34, 18, "yuv420p"}, size_case{100, 20, "yuv422p"}, size_case{426, 24, "yuv420p"}}) {
    const std::string name = "w" + std::to_string(c.w) + c.format + ".mp4";
    CAPTURE(name);
    run("ffmpeg -y -hide_banner -f lavfi -i testsrc=size=" + std::to_string(c.w) + "x" + std::to_string(c.h) +
        ":rate=25 -frames:v 4 -c:v libx264 -bf 0 -pix_fmt " + c.format + " " + dir.file(name));
    run("ffmpeg -y -hide_banner -i " + dir.file(name) + " -sws_flags bilinear -f rawvideo -pix_fmt rgb24 " +
        dir.file(name + ".rgb"));
    const auto want = sluice_test::read_file(dir.file(name + ".rgb"));
    const video v({.width = c.w, .height = c.h, .mode = fit::stretch}, {.frames = 4, .stride = 1, .pick = clip_pick::first});
    const auto got = decode_clip(v, sluice_test::read_file(dir.file(name)), {.id = 0});
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != static_cast<std::uint8_t>(want[i]);
    CHECK(differ == 0);
  }
}

TEST_CASE("video: a variable-frame-rate video gives the frames by timestamp: by stride in presentation order, and by fps") {
  need_ffmpeg();
  temp_dir dir;
  std::vector<int> dur;
  for (int i = 0; i < 40; ++i) dur.push_back(i % 3 == 0 ? 80 : (i % 3 == 1 ? 40 : 120));
  const auto bytes = sluice_test::read_file(encode_vfr(dir, "v.mp4", dur));
  const video_info info = probe_video(bytes);
  REQUIRE(info.frames() == 41);
  std::vector<double> t(41, 0.0);
  for (int i = 1; i < 41; ++i) t[i] = t[i - 1] + dur[i - 1] / 1000.0;
  for (int i = 0; i < 41; ++i) CHECK(info.seconds(i) - info.seconds(0) == doctest::Approx(t[i]).epsilon(1e-6));
  // By stride: frame numbers, whatever the time between them.
  const video by_stride(same_size, {.frames = 6, .stride = 2, .pick = clip_pick::center});
  const auto s = numbers(decode_clip(by_stride, bytes, {}), 6);
  for (int j = 1; j < 6; ++j) CHECK(s[j] == s[0] + 2 * j);
  // By fps: the frame on screen at start + j / 25 s (repeated while a frame is held longer).
  const clip_options c{.frames = 10, .fps = 25};
  const video by_fps(same_size, c);
  for (std::uint64_t id = 0; id < 8; ++id) {
    const auto n = numbers(decode_clip(by_fps, bytes, {.seed = 2, .id = id}), 10);
    const double t0 = t[n[0]];
    for (int j = 0; j < 10; ++j) {
      int want = 0;
      for (int i = 0; i < 41; ++i)
        if (t[i] <= t0 + j / 25.0 + 1e-9) want = i;
      CHECK(n[j] == want);
    }
  }
}

TEST_CASE("video: cthw is the thwc clip's channel planes, and one transform is applied to every frame of a clip") {
  need_ffmpeg();
  temp_dir dir;
  const auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 20, h264));
  const geometry_options g{.width = 64, .height = 48, .mode = fit::random_resized_crop, .random_flip = true};
  const video hwc(g, {.frames = 4, .stride = 1, .layout = video_layout::thwc});
  const video chw(g, {.frames = 4, .stride = 1, .layout = video_layout::cthw});
  CHECK(chw.geometry().shape[0] == 3);
  CHECK(chw.geometry().shape[1] == 4);
  CHECK(hwc.geometry().shape[3] == 3);
  const video full(same_size, {.frames = 4, .stride = 1});
  for (std::uint64_t id = 0; id < 6; ++id) {
    const sample_context ctx{.seed = 11, .epoch = 2, .id = id};
    const auto a = decode_clip(hwc, bytes, ctx), b = decode_clip(chw, bytes, ctx);
    const std::size_t plane = 64 * 48;
    for (std::size_t tt = 0; tt < 4; ++tt)
      for (std::size_t p = 0; p < plane; ++p)
        for (std::size_t c = 0; c < 3; ++c) REQUIRE(b[(c * 4 + tt) * plane + p] == a[(tt * plane + p) * 3 + c]);
    // The same clip at full size, resampled frame by frame through the one transform planned for ctx.
    const auto src = decode_clip(full, bytes, ctx);
    const image_transform t = plan_transform(W, H, g, ctx);
    for (std::size_t tt = 0; tt < 4; ++tt) {
      std::vector<std::byte> one(plane * 3);
      resample(src.data() + tt * W * H * 3, W, H, static_cast<std::size_t>(W) * 3, 3, one, to_plan(t, W, H));
      CHECK(std::memcmp(one.data(), a.data() + tt * plane * 3, one.size()) == 0);
    }
  }
}

TEST_CASE("video: every clip of every video once per epoch through the loader, the same batches with 1 and 2 workers") {
  need_ffmpeg();
  temp_dir dir;
  std::vector<io::video_file> files;
  const std::vector<int> lengths = {30, 21, 6, 45};  // the third is shorter than a clip: counted, no clips
  for (std::size_t v = 0; v < lengths.size(); ++v)
    files.push_back({encode_cfr(dir, "v" + std::to_string(v) + ".mp4", lengths[v], h264), static_cast<std::int64_t>(v)});
  io::video_files videos(files);
  const clip_options c{.frames = 4, .stride = 2};
  auto clips = io::clips<"video">(videos, c, io::every_clip{.step = 5});
  CHECK(clips.short_video_list().size() == 1);
  // Starts 0, 5, ... up to n - 7: 30 -> 5 clips, 21 -> 3, 45 -> 8.
  REQUIRE(clips.size() == 5 + 3 + 8);
  auto run = [&](std::size_t workers) {
    auto loader = from(sample::shuffle(clips.size(), {.seed = 4})) | read(clips)
                | decode<"video">(clips.codec(same_size))
                | collate({.batch = 3}, stack<"video">{}, stack<"label">{}) | prefetch(2, {.workers = workers});
    std::vector<std::uint8_t> all;
    std::map<std::uint64_t, std::pair<std::int64_t, int>> seen;  // clip id -> (video, first frame)
    for (auto& b : loader.epoch(0)) {
      auto px = b.get<"video">();
      auto lab = b.get<"label">();
      CHECK(b.field("video").shape()[1] == 4);
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto* clip = px.data() + i * 4 * W * H * 3;
        const int f0 = frame_number(clip);
        for (int j = 1; j < 4; ++j) CHECK(frame_number(clip + static_cast<std::size_t>(j) * W * H * 3) == f0 + 2 * j);
        CHECK(seen.emplace(b.ids()[i], std::pair{lab[i], f0}).second);
      }
      all.insert(all.end(), px.values().begin(), px.values().end());
    }
    return std::pair{all, seen};
  };
  const auto [a1, s1] = run(1);
  const auto [a2, s2] = run(2);
  CHECK(a1 == a2);
  REQUIRE(s1.size() == clips.size());
  std::set<std::pair<std::int64_t, int>> want, got;
  for (std::size_t v : {0, 1, 3})
    for (int f = 0; f + 7 <= lengths[v] - 1; f += 5) want.insert({static_cast<std::int64_t>(v), f});
  for (const auto& [id, vf] : s1) got.insert(vf);
  CHECK(got == want);
}

TEST_CASE("video: random clips take a new start each epoch, the same for any worker count") {
  need_ffmpeg();
  temp_dir dir;
  std::vector<io::video_file> files;
  for (int v = 0; v < 2; ++v) files.push_back({encode_cfr(dir, "v" + std::to_string(v) + ".mp4", 60, h264), v});
  io::video_files videos(files);
  auto clips = io::clips<"video">(videos, {.frames = 2, .stride = 1}, io::random_clips{.per_video = 3});
  REQUIRE(clips.size() == 6);
  auto firsts = [&](std::uint64_t epoch, std::size_t workers) {
    auto loader = from(sample::sequential(clips.size())) | read(clips) | decode<"video">(clips.codec(same_size))
                | collate({.batch = 6}, stack<"video">{}, stack<"label">{}) | prefetch(1, {.workers = workers, .seed = 9});
    std::vector<int> f;
    for (auto& b : loader.epoch(epoch)) {
      auto px = b.get<"video">();
      auto lab = b.get<"label">();
      for (std::size_t i = 0; i < b.size(); ++i) {
        CHECK(lab[i] == static_cast<std::int64_t>(i / 3));
        f.push_back(frame_number(px.data() + i * 2 * W * H * 3));
      }
    }
    return f;
  };
  const auto e0 = firsts(0, 1);
  CHECK(e0 == firsts(0, 2));
  CHECK(e0 != firsts(1, 1));
  // Resumed part-way into epoch 1 (a fresh loader, 2 clips in): the clips of the uninterrupted run.
  auto make = [&] {
    return from(sample::shuffle(clips.size(), {.seed = 1})) | read(clips) | decode<"video">(clips.codec(same_size))
         | collate({.batch = 2}, stack<"video">{}, stack<"label">{}) | prefetch(1, {.workers = 2, .seed = 9});
  };
  std::vector<std::vector<std::uint8_t>> whole, resumed;
  {
    auto a = make();
    for (auto& b : a.epoch(1)) whole.emplace_back(b.get<"video">().values().begin(), b.get<"video">().values().end());
  }
  auto b2 = make();
  for (auto& b : b2.resume(b2.state(1, 2)))
    resumed.emplace_back(b.get<"video">().values().begin(), b.get<"video">().values().end());
  REQUIRE(whole.size() == 3);
  REQUIRE(resumed.size() == 2);
  CHECK(resumed[0] == whole[1]);
  CHECK(resumed[1] == whole[2]);
}

TEST_CASE("video: a WebDataset's .mp4 member decodes as a field") {
  need_ffmpeg();
  temp_dir dir;
  std::vector<std::byte> tar;
  for (int k = 0; k < 3; ++k) {
    const auto mp4 = sluice_test::read_file(encode_cfr(dir, "m" + std::to_string(k) + ".mp4", 12 + k, h264));
    io::append_tar_member(tar, "s/" + std::to_string(k) + ".mp4", mp4);
    const std::string cls = std::to_string(k * 10);
    io::append_tar_member(tar, "s/" + std::to_string(k) + ".cls", sluice_test::as_bytes(cls));
  }
  tar.resize(tar.size() + 1024);
  sluice_test::write_file(dir.file("v.tar"), tar);
  using s = schema<field<"mp4", std::uint8_t, variable>, field<"cls", std::int64_t>>;
  io::wds_dataset<s> d(dir.file("v.tar"));
  auto loader = from(sample::sequential(d.size())) | read(d)
              | decode<"mp4">(video(same_size, {.frames = 3, .stride = 4, .pick = clip_pick::first}))
              | collate({.batch = 3}, stack<"mp4">{}, stack<"cls">{}) | prefetch(1);
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) {
    auto px = b.get<"mp4">();
    for (std::size_t i = 0; i < b.size(); ++i, ++n) {
      CHECK(b.get<"cls">()[i] == static_cast<std::int64_t>(i * 10));
      for (int j = 0; j < 3; ++j) CHECK(frame_number(px.data() + (i * 3 + j) * W * H * 3) == 4 * j);
    }
  }
  CHECK(n == 3);
}

TEST_CASE("video: bad input is a format_error with the cause, never a crash or a hang, and skip counts it") {
  need_ffmpeg();
  temp_dir dir;
  const auto good = sluice_test::read_file(encode_cfr(dir, "a.mp4", 40, h264));
  const video v(same_size, {.frames = 4, .stride = 1, .pick = clip_pick::center});
  auto cause = [&](std::span<const std::byte> in) {
    return sluice_test::expect_format_error([&] { decode_clip(v, in, {}); }).cause();
  };
  CHECK(cause({}).find("empty") != std::string::npos);
  const auto garbage = sluice_test::random_bytes(5000, 3);
  CHECK(cause(garbage).find("not a video container") != std::string::npos);
  // Truncated: the MP4's index (moov) is written at its end, so a cut file has none.
  const std::span<const std::byte> cut(good.data(), good.size() / 2);
  CHECK(!cause(cut).empty());
  // Truncated with the index first (-movflags +faststart, as streaming sites write MP4s): the
  // packets end early at a clean EOF; the index says the file was longer, and that is the error
  // (read on, it was a shorter video, or one with no clips, without a word).
  const auto faststart = sluice_test::read_file(encode_cfr(dir, "f.mp4", 40, h264 + " -movflags +faststart"));
  for (const std::size_t keep : {faststart.size() * 6 / 10, faststart.size() - 1}) {
    const std::span<const std::byte> cut_fast(faststart.data(), keep);
    CAPTURE(keep);
    const std::string why = cause(cut_fast);
    CHECK(why.find("truncated: the container's index places frame data up to byte") != std::string::npos);
    CHECK(why.find("the file ends at byte " + std::to_string(keep)) != std::string::npos);
    CHECK_THROWS_AS(probe_video(cut_fast), format_error);
  }
  CHECK(probe_video(faststart).frames() == 40);
  // Too short for the clip.
  const video long_clip(same_size, {.frames = 30, .stride = 2});
  const auto e = sluice_test::expect_format_error([&] { decode_clip(long_clip, good, {}); });
  CHECK(e.cause().find("40 frames") != std::string::npos);
  CHECK(e.cause().find("needs 59") != std::string::npos);
  // No video stream: an audio-only file.
  run("ffmpeg -y -hide_banner -f lavfi -i sine=frequency=440:duration=1 -c:a aac " + dir.file("audio.m4a"));
  CHECK(cause(sluice_test::read_file(dir.file("audio.m4a"))).find("no video stream") != std::string::npos);
  // A codec this FFmpeg has no decoder for: a Matroska file whose codec id is made up.
  auto mkv = sluice_test::read_file(encode_cfr(dir, "a.mkv", 10, h264));
  const std::string id = "V_MPEG4/ISO/AVC", unknown = "V_SLUICE_NONEXI";  // same length: the file stays well-formed
  const auto at = std::search(mkv.begin(), mkv.end(), reinterpret_cast<const std::byte*>(id.data()),
                              reinterpret_cast<const std::byte*>(id.data()) + id.size());
  REQUIRE(at != mkv.end());
  std::memcpy(&*at, unknown.data(), unknown.size());
  CHECK(cause(mkv).find("no decoder for the video's codec") != std::string::npos);
  // Damaged packets: the middle of the file overwritten.
  auto damaged = good;
  for (std::size_t i = damaged.size() / 3; i < damaged.size() * 2 / 3; ++i) damaged[i] = static_cast<std::byte>(i * 7);
  bool threw = false;
  for (std::uint64_t id = 0; id < 8 && !threw; ++id) {
    const video any(same_size, {.frames = 4, .stride = 8});
    try {
      decode_clip(any, damaged, {.id = id});
    } catch (const format_error& err) {
      threw = true;
      CHECK(!err.cause().empty());
    }
  }
  CHECK(threw);

  // Through the loader: the broken and the short videos are named, skipped and counted.
  sluice_test::write_file(dir.file("bad.mp4"), std::span<const std::byte>(cut));
  sluice_test::write_file(dir.file("short.mp4"), std::span<const std::byte>(
                                                     sluice_test::read_file(encode_cfr(dir, "s.mp4", 3, h264))));
  io::video_files files({{dir.file("a.mp4"), 0}, {dir.file("bad.mp4"), 1}, {dir.file("short.mp4"), 2}});
  {
    auto loader = from(sample::sequential(files.size())) | read(files) | decode<"video">(v)
                | collate({.batch = 3}, stack<"video">{}, stack<"label">{}) | prefetch(1);
    try {
      for (auto& b : loader.epoch(0)) (void)b;
      FAIL("expected an error");
    } catch (const std::exception& err) {
      CHECK(sluice_test::nested_text(err).find("bad.mp4") != std::string::npos);
    }
  }
  auto loader = from(sample::sequential(files.size())) | read(files) | decode<"video">(v)
              | collate({.batch = 3}, stack<"video">{}, stack<"label">{}) | prefetch(1, {.errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  CHECK(n == 1);
  CHECK(loader.stats().skipped == 2);
  // Probing for every_clip: a broken file is an error naming it, or listed with skip_bad.
  const auto pe = sluice_test::expect_format_error([&] { io::clips<"video">(files, {.frames = 4}, io::every_clip{}); });
  CHECK(pe.file().find("bad.mp4") != std::string::npos);
  auto listed = io::clips<"video">(files, {.frames = 4}, io::every_clip{.skip_bad = true});
  CHECK(listed.bad_videos().size() == 1);
  CHECK(listed.size() == (40 - 4) / 4 + 1);  // starts 0..36, every 4th (a clip's span)
  REQUIRE(listed.short_video_list().size() == 1);
  CHECK(listed.short_video_list()[0].video == 2);
  CHECK(listed.short_video_list()[0].frames == 3);
  // Paths that cannot be read, each with its cause.
  const std::string unreadable = "2 of the 3 videos cannot be read: " + dir.file("nope.mp4") +
                                 " (No such file or directory), " + dir.file("") + " (a directory)";
  CHECK_THROWS_WITH_AS(io::video_files({{dir.file("a.mp4"), 0}, {dir.file("nope.mp4"), 1}, {dir.file(""), 2}}),
                       doctest::Contains(unreadable.c_str()), usage_error);
}

TEST_CASE("video: normalized<> turns clips into floats per channel, channels last (thwc) and first (cthw)") {
  need_ffmpeg();
  temp_dir dir;
  io::video_files files({{encode_cfr(dir, "a.mp4", 12, h264), 3}, {encode_cfr(dir, "b.mp4", 12, h264), 4}});
  const std::vector<float> mean = {10, 20, 30}, sd = {2, 4, 8};
  for (auto layout : {video_layout::thwc, video_layout::cthw}) {
    const video v({.width = 32, .height = 16}, {.frames = 3, .stride = 2, .layout = layout});
    auto loader = from(sample::sequential(2)) | read(files) | decode<"video">(v)
                | collate({.batch = 2}, normalized<"video">{.mean = mean, .std = sd, .scale = 1.0f}, stack<"label">{})
                | prefetch(1, {.seed = 5});
    for (auto& b : loader.epoch(0)) {
      auto f = b.get<"video">();
      const auto shape = b.field("video").shape();
      REQUIRE(shape.size() == 5);
      CHECK(shape[layout == video_layout::cthw ? 1 : 4] == 3);
      for (std::size_t i = 0; i < 2; ++i) {
        const auto u8 = decode_clip(v, files.fields(i).bytes_of<"video">(), {.seed = 5, .id = i});
        const std::size_t n = u8.size(), plane = n / 3;
        for (std::size_t k = 0; k < n; ++k) {
          const std::size_t c = layout == video_layout::cthw ? k / plane : k % 3;
          REQUIRE(f[i * n + k] == doctest::Approx((u8[k] - mean[c]) / sd[c]));
        }
      }
    }
  }
}

TEST_CASE("video: decoder=nvdec without a CUDA device falls back to the host decoder, counted, with the same frames") {
  need_ffmpeg();
  temp_dir dir;
  const auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 30, h264));
  AVBufferRef* dev = nullptr;
  if (av_hwdevice_ctx_create(&dev, AV_HWDEVICE_TYPE_CUDA, nullptr, nullptr, 0) >= 0) {
    av_buffer_unref(&dev);
    sluice_test::skip("a CUDA device is present: the fallback is not taken here (see the nvdec case)");
  }
  const video host(same_size, {.frames = 5, .stride = 3});
  const video gpu(same_size, {.frames = 5, .stride = 3, .decoder = video_decoder::nvdec});
  for (std::uint64_t id = 0; id < 4; ++id) CHECK(decode_clip(gpu, bytes, {.id = id}) == decode_clip(host, bytes, {.id = id}));
  CHECK(gpu.counters().clips == 4);
  CHECK(gpu.counters().nvdec_clips == 0);
  CHECK(gpu.counters().nvdec_fallbacks == 4);
  CHECK(gpu.counters().last_fallback.find("CUDA device") != std::string::npos);
  CHECK(host.counters().nvdec_fallbacks == 0);
}

TEST_CASE("video: decoder=nvdec decodes on the GPU the frames the host decodes (device test)") {
  need_ffmpeg();
  AVBufferRef* dev = nullptr;
  if (av_hwdevice_ctx_create(&dev, AV_HWDEVICE_TYPE_CUDA, nullptr, nullptr, 0) < 0)
    sluice_test::skip("no CUDA device for FFmpeg's NVDEC here");
  av_buffer_unref(&dev);
  temp_dir dir;
  const auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 40, h264));
  const video host(same_size, {.frames = 6, .stride = 2});
  const video gpu(same_size, {.frames = 6, .stride = 2, .decoder = video_decoder::nvdec});
  for (std::uint64_t id = 0; id < 8; ++id) {
    const auto a = decode_clip(host, bytes, {.seed = 4, .id = id}), b = decode_clip(gpu, bytes, {.seed = 4, .id = id});
    CHECK(numbers(a, 6) == numbers(b, 6));
    int worst = 0;
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(int(a[k]) - int(b[k])));
    CHECK(worst <= 3);  // NV12 from NVDEC vs yuv420p from the host decoder: the same samples, converted by two swscale paths
  }
  CHECK(gpu.counters().nvdec_clips == 8);
  CHECK(gpu.counters().nvdec_fallbacks == 0);
}

TEST_CASE("video: videos as a field of a sluice shard, every clip through io::clips") {
  need_ffmpeg();
  temp_dir dir;
  const std::string p = dir.file("v.sluice");
  {
    io::shard_writer w(p);
    w.set_schema({{"mp4", dtype::u8, extent::variable}});
    for (int k = 0; k < 3; ++k) {
      const auto mp4 = sluice_test::read_file(encode_cfr(dir, "s" + std::to_string(k) + ".mp4", 14 + 3 * k, h264));
      w.add_fields({std::span<const std::byte>(mp4)}, 10 + k);
    }
    w.finish();
  }
  using s = schema<field<"mp4", std::uint8_t, variable>>;
  io::shard_fields<s> shard(p);
  const clip_options c{.frames = 3, .stride = 2};
  auto clips = io::clips<"mp4">(shard, c, io::every_clip{.step = 4});
  // 14, 17, 20 frames, a clip's span 5, starts every 4: 3 + 4 + 4 clips.
  REQUIRE(clips.size() == 11);
  auto loader = from(sample::sequential(clips.size())) | read(clips) | decode<"mp4">(clips.codec(same_size))
              | collate({.batch = 4}, stack<"mp4">{}) | prefetch(1);
  std::vector<std::pair<std::size_t, int>> got;
  for (auto& b : loader.epoch(0)) {
    auto px = b.get<"mp4">();
    for (std::size_t i = 0; i < b.size(); ++i) {
      const int f0 = frame_number(px.data() + i * 3 * W * H * 3);
      for (int j = 1; j < 3; ++j) CHECK(frame_number(px.data() + (i * 3 + j) * W * H * 3) == f0 + 2 * j);
      got.emplace_back(clips.locate(static_cast<std::size_t>(b.ids()[i])).first, f0);
    }
  }
  std::vector<std::pair<std::size_t, int>> want;
  for (std::size_t v = 0; v < 3; ++v)
    for (int f = 0; f + 4 < 14 + 3 * static_cast<int>(v); f += 4) want.emplace_back(v, f);
  CHECK(got == want);
}

namespace {
// Clip id k starts at starts[k % size] of the table's video 0 (one video, numbered for the index).
struct one_video final : clip_table {
  std::vector<std::size_t> starts;
  clip_choice choose(std::uint64_t id) const override { return {true, starts[id % starts.size()]}; }
  std::string describe(std::uint64_t id) const override { return "clip " + std::to_string(id); }
  std::size_t video_of(std::uint64_t) const override { return 0; }
};
}  // namespace

TEST_CASE("video: a video's later clips seek to their keyframe through its kept index, every container, frames exact") {
  need_ffmpeg();
  temp_dir dir;
  constexpr int n = 150, gop = 12;
  // name, codec args, how many packets past the keyframe-to-clip span a clip may read (B-frame
  // reordering), and whether the packets carry decode times only (AVI: read from the start, no seek).
  struct kind {
    std::string name, args;
    bool from_start;
  };
  const std::vector<kind> kinds = {
      {"a.mp4", h264, false},
      {"a.avi", "-c:v mpeg4 -q:v 2 -bf 1 -g 12 -pix_fmt yuv420p", true},
      {"a.webm", "-c:v libvpx-vp9 -b:v 0 -crf 10 -g 12 -deadline realtime -pix_fmt yuv420p", false},
      {"a.mkv", "-c:v mjpeg -q:v 2 -pix_fmt yuvj420p", false},
      {"b.mkv", "-c:v libx265 -x265-params log-level=none:bframes=2:keyint=12:min-keyint=12 -crf 12 -pix_fmt yuv420p",
       false},
      {"c.mkv", h264, false}};
  const clip_options c{.frames = 4, .stride = 3};
  const std::size_t span = 3 * 3 + 1;
  for (const kind& k : kinds) {
    CAPTURE(k.name);
    const auto bytes = sluice_test::read_file(encode_cfr(dir, k.name, n, k.args));
    auto table = std::make_shared<one_video>();
    const std::size_t last = n - span;
    for (std::size_t f = last;; f = f * 7 / 10) {  // the last start first, then towards the start
      table->starts.push_back(f);
      if (f == 0) break;
    }
    const video v(same_size, c, table);
    std::uint64_t before = 0;
    for (std::uint64_t id = 0; id < table->starts.size(); ++id) {
      const std::size_t first = table->starts[id];
      CAPTURE(first);
      const auto got = numbers(decode_clip(v, bytes, {.id = id}), c.frames);
      for (int j = 0; j < c.frames; ++j) REQUIRE(got[j] == static_cast<int>(first) + j * c.stride);
      const std::uint64_t read = v.counters().packets - before;
      before = v.counters().packets;
      if (id == 0) {
        CHECK(read == n);  // the first clip reads the whole video and keeps its index
        CHECK(table->indexes().size() == 1);
      } else if (k.from_start) {
        CHECK(read <= first + span + 2);  // from the first packet, but no further than the clip
      } else {
        CHECK(read <= span + gop + 6);  // from the keyframe before the clip to the clip's last frame (+ reordering)
      }
    }
    CHECK(v.counters().seek_fallbacks == 0);
  }
}

TEST_CASE("video: a kept index belongs to its bytes: another video under the same number is read again") {
  need_ffmpeg();
  temp_dir dir;
  const auto a = sluice_test::read_file(encode_cfr(dir, "a.mp4", 60, h264));
  const auto b = sluice_test::read_file(encode_cfr(dir, "b.mp4", 36, h264));
  auto table = std::make_shared<one_video>();
  table->starts = {20};
  const video v(same_size, {.frames = 3, .stride = 2}, table);
  CHECK(numbers(decode_clip(v, a, {}), 3) == std::vector<int>{20, 22, 24});
  CHECK(v.counters().packets == 60);
  CHECK(numbers(decode_clip(v, b, {}), 3) == std::vector<int>{20, 22, 24});
  CHECK(v.counters().packets == 60 + 36);  // b's own index, made from b
  const std::uint64_t now = v.counters().packets;
  CHECK(numbers(decode_clip(v, b, {}), 3) == std::vector<int>{20, 22, 24});
  CHECK(v.counters().packets - now < 36);  // and kept
}

TEST_CASE("video: every_clip keeps the indexes of its probe, so no clip reads its video from the start") {
  need_ffmpeg();
  temp_dir dir;
  std::vector<io::video_file> files;
  for (int v = 0; v < 3; ++v)
    files.push_back({encode_cfr(dir, "v" + std::to_string(v) + ".mp4", 80 + 10 * v, h264), v});
  files.push_back({encode_cfr(dir, "short.mp4", 4, h264), 3});  // no clips: no index kept
  io::video_files videos(files);
  auto clips = io::clips<"video">(videos, {.frames = 3, .stride = 2}, io::every_clip{.step = 9});
  const video codec = clips.codec(same_size);
  REQUIRE(codec.table() != nullptr);
  CHECK(codec.table()->indexes().size() == 3);
  std::vector<std::byte> out(codec.output_bytes());
  for (std::size_t i = 0; i < clips.size(); ++i) {
    const auto s = clips.fields(i);
    const std::uint64_t before = codec.counters().packets;
    codec.decode(s.bytes_of<"video">(), out, {.id = i});
    CHECK(codec.counters().packets - before <= 5 + 12 + 3);
    const auto [video_no, k] = clips.locate(i);
    CHECK(frame_number(reinterpret_cast<const std::uint8_t*>(out.data())) == static_cast<int>(k * 9));
  }
  CHECK(codec.counters().seek_fallbacks == 0);
}

TEST_CASE("video: a clip that fails after a seek is read whole and fails as it would without the index") {
  need_ffmpeg();
  temp_dir dir;
  auto bytes = sluice_test::read_file(encode_cfr(dir, "a.mp4", 120, h264));
  // The packets of the middle third damaged (the container's index at the end stays whole, so
  // every packet still demuxes): clips there fail in the decoder, clips elsewhere decode.
  for (std::size_t i = bytes.size() * 2 / 5; i < bytes.size() * 3 / 5; ++i) bytes[i] = static_cast<std::byte>(i * 13);
  const clip_options c{.frames = 3, .stride = 2};
  auto table = std::make_shared<one_video>();
  table->starts = {0, 60, 110};
  const video indexed(same_size, c, table);
  struct fixed final : clip_table {
    std::vector<std::size_t> starts{0, 60, 110};
    clip_choice choose(std::uint64_t id) const override { return {true, starts[id % 3]}; }
    std::string describe(std::uint64_t id) const override { return "clip " + std::to_string(id); }
  };
  const video plain(same_size, c, std::make_shared<fixed>());  // no video_of: every clip reads the video whole
  CHECK(numbers(decode_clip(indexed, bytes, {.id = 0}), 3) == std::vector<int>{0, 2, 4});  // indexes it
  const auto with_index = sluice_test::expect_format_error([&] { decode_clip(indexed, bytes, {.id = 1}); });
  const auto without = sluice_test::expect_format_error([&] { decode_clip(plain, bytes, {.id = 1}); });
  CHECK(with_index.cause() == without.cause());
  CHECK(indexed.counters().seek_fallbacks == 1);
  CHECK(numbers(decode_clip(indexed, bytes, {.id = 2}), 3) == std::vector<int>{110, 112, 114});  // still seeks
  CHECK(indexed.counters().seek_fallbacks == 1);
}
