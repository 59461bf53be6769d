// Files that change under a running loader, non-regular inputs, and the ring's promises when the
// trainer keeps batches or a batch stage's hook throws. Every file is made by the test.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;

namespace {

constexpr std::size_t kRecords = 256;
constexpr std::size_t kRecordBytes = 4096;  // one page per record: truncation cuts at a record

// A fixed-record file: record i is kRecordBytes of byte (i & 0xff).
std::string write_records(const sluice_test::temp_dir& d, const std::string& name, std::size_t n = kRecords,
                          unsigned salt = 0) {
  std::vector<std::byte> bytes(n * kRecordBytes);
  for (std::size_t i = 0; i < n; ++i)
    std::memset(bytes.data() + i * kRecordBytes, static_cast<int>((i + salt) & 0xff), kRecordBytes);
  const std::string p = d.file(name);
  sluice_test::write_file(p, bytes);
  return p;
}

io::fixed_records open_records(const std::string& p) { return io::fixed_records(p, {.record_bytes = kRecordBytes}); }

// Every batch's bytes must be the records it names: zero pages never pass as data.
void check_batch(const batch& b, unsigned salt = 0) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(b.bytes().data());
  for (std::size_t i = 0; i < b.size(); ++i) {
    const auto want = static_cast<std::uint8_t>((b.ids()[i] + salt) & 0xff);
    const auto* r = p + i * kRecordBytes;
    bool same = true;
    for (std::size_t j = 0; j < kRecordBytes; ++j) same = same && r[j] == want;
    CHECK_MESSAGE(same, "sample " << b.ids()[i] << " holds bytes that are not its record");
  }
}

// Same size, new bytes (0xee over record 0), written through the same inode; the times set
// forward too, since some filesystems keep a coarse clock.
void overwrite_in_place(const std::string& p) {
  const int fd = ::open(p.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  std::vector<std::byte> junk(kRecordBytes, std::byte{0xee});
  REQUIRE(::pwrite(fd, junk.data(), junk.size(), 0) == static_cast<ssize_t>(junk.size()));
  ::close(fd);
  struct timespec ts[2] = {{0, UTIME_OMIT}, {1, 0}};
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), ts, 0) == 0);
}

}  // namespace

TEST_CASE("a file truncated under a running loader is an error naming it (raise), not SIGBUS") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin");
  auto r = open_records(p);
  auto loader = from(sample::sequential(kRecords)) | read(r) | collate({.batch = 8}) | prefetch(1, {.workers = 1});
  std::size_t seen = 0;
  try {
    for (auto& b : loader.epoch(0)) {
      check_batch(b);
      seen += b.size();
      if (seen == 8) REQUIRE(::truncate(p.c_str(), 100 * kRecordBytes) == 0);
    }
    FAIL("no error after the file was truncated");
  } catch (const stage_error& e) {
    CHECK(e.stage() == "read");
    // A sample past the cut, or one of a batch written while the file changed: such a batch
    // fails whole, as its bytes may hold the new file's (a rewrite starts with a truncation).
    CHECK(e.sample_id() >= 8);
    const std::string why = sluice_test::innermost_text(e);
    CHECK(why.find(p) != std::string::npos);
    CHECK(why.find("changed while in use") != std::string::npos);
  }
  CHECK(seen >= 8);
  CHECK(seen <= 100);
  // The next epoch refuses the file at once: its identity changed since it was opened.
  try {
    for (auto& b : loader.epoch(1)) (void)b;
    FAIL("no error on the next epoch");
  } catch (const stage_error& e) {
    CHECK(sluice_test::innermost_text(e).find(p) != std::string::npos);
  }
}

TEST_CASE("a file truncated under a running loader: skip drops exactly the lost records") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin");
  auto r = open_records(p);
  auto loader = from(sample::sequential(kRecords)) | read(r) | collate({.batch = 8}) |
                prefetch(2, {.workers = 2, .errors = on_error::skip});
  std::size_t seen = 0, batches = 0;
  for (auto& b : loader.epoch(0)) {
    CHECK(b.size() > 0);  // a batch emptied by skip is never handed out
    check_batch(b);
    seen += b.size();
    if (++batches == 1) REQUIRE(::truncate(p.c_str(), 100 * kRecordBytes) == 0);
  }
  const auto st = loader.stats();
  CHECK(seen + st.skipped == kRecords);
  CHECK(seen <= 100 + 8 * 4);  // batches filled before the truncation may still hold later records
  CHECK(st.skipped >= kRecords - 100 - 8 * 4);
  REQUIRE_FALSE(st.skip_causes.empty());
  CHECK(st.skip_causes.front().find(p) != std::string::npos);
}

TEST_CASE("a file shrunk to nothing, then a new epoch: every sample fails, the process lives") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 64);
  auto r = open_records(p);
  auto loader = from(sample::shuffle(64, {.seed = 3})) | read(r) | collate({.batch = 8}) |
                prefetch(2, {.workers = 2, .errors = on_error::skip});
  REQUIRE(::truncate(p.c_str(), 0) == 0);
  std::size_t seen = 0;
  for (auto& b : loader.epoch(0)) seen += b.size();
  CHECK(seen == 0);
  CHECK(loader.stats().skipped == 64);
}

TEST_CASE("a file overwritten in place or replaced is refused from the next epoch, naming it") {
  for (const bool replace : {false, true}) {
    CAPTURE(replace);
    sluice_test::temp_dir d;
    const auto p = write_records(d, "data.bin", 32);
    auto r = open_records(p);
    auto loader = from(sample::sequential(32)) | read(r) | collate({.batch = 8}) | prefetch(2);
    for (auto& b : loader.epoch(0)) check_batch(b);
    if (replace) {
      const auto q = write_records(d, "new.bin", 32, 7);
      std::filesystem::rename(q, p);
    } else {
      overwrite_in_place(p);
    }
    try {
      for (auto& b : loader.epoch(1)) (void)b;
      FAIL("no error");
    } catch (const stage_error& e) {
      const auto why = sluice_test::innermost_text(e);
      CHECK(why.find(p) != std::string::npos);
      CHECK(why.find("changed since it was opened") != std::string::npos);
      CHECK(why.find(replace ? "replaced" : "written") != std::string::npos);
    }
    // Reopening the dataset reads the new file.
    auto fresh = open_records(p);
    auto again = from(sample::sequential(32)) | read(fresh) | collate({.batch = 8}) | prefetch(2);
    std::size_t n = 0;
    for (auto& b : again.epoch(0)) n += b.size();
    CHECK(n == 32);
  }
}

TEST_CASE("a FIFO, a directory or a device is refused at open without blocking") {
  sluice_test::temp_dir d;
  const auto fifo = d.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& p : {fifo, d.path().string(), std::string("/dev/null")}) {
    CAPTURE(p);
    auto opened = std::async(std::launch::async, [p] {
      try {
        io::mapped_file f(p);
        return std::string("opened");
      } catch (const format_error& e) {
        return std::string(e.what());
      } catch (const std::exception& e) {
        return std::string("other: ") + e.what();
      }
    });
    REQUIRE_MESSAGE(opened.wait_for(std::chrono::seconds(10)) == std::future_status::ready, "open blocked on " << p);
    const auto what = opened.get();
    CHECK(what.find("not a regular file") != std::string::npos);
    CHECK(what.find(p) != std::string::npos);
  }
}

TEST_CASE("the trainer may keep batch 0 for a whole epoch, and the last batch across epochs") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 64);
  auto r = open_records(p);
  auto loader = from(sample::sequential(64)) | read(r) | collate({.batch = 4}) | prefetch(2, {.workers = 2});
  batch first, last;
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) {
    check_batch(b);
    if (n == 0) first = std::move(b);  // kept: the loop goes on without it
    ++n;
    if (n == 16) last = std::move(b);
  }
  CHECK(n == 16);
  REQUIRE(first);
  CHECK(first.ids()[0] == 0);
  check_batch(first);  // still valid, still its own bytes
  // Keep the last batch of epoch 0 across the boundary, and batch 0 of epoch 1 too.
  std::size_t m = 0;
  batch keep;
  for (auto& b : loader.epoch(1)) {
    check_batch(b);
    if (m == 0) keep = std::move(b);
    ++m;
  }
  CHECK(m == 16);
  check_batch(last);
  CHECK(last.ids()[0] == 60);
  check_batch(keep);
}

TEST_CASE("holding every slot but one works, holding all of them is the one usage_error (no hold_budget)") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 64);
  auto r = open_records(p);
  auto loader = from(sample::sequential(64)) | read(r) | collate({.batch = 2}) |
                prefetch(2, {.workers = 1, .hold_budget = 0});
  const std::size_t slots = 3;  // depth 2 + 1 worker
  std::vector<batch> held;
  auto range = loader.epoch(0);
  auto it = range.begin();
  for (std::size_t i = 0; i + 1 < slots; ++i) {
    held.push_back(std::move(*it));  // kept while the iterator moves on
    ++it;
  }
  REQUIRE(it != std::default_sentinel);
  check_batch(*it);  // the last free slot still serves the epoch
  held.push_back(std::move(*it));  // now the trainer holds every slot: the next step must refuse
  CHECK_THROWS_AS(++it, usage_error);
  // Releasing one lets another epoch run to its end with a single free slot.
  held.erase(held.begin());
  std::size_t rest = 0;
  auto range2 = loader.epoch(1);
  for (auto& b : range2) {
    check_batch(b);
    ++rest;
    if (rest == 5) held.clear();
  }
  CHECK(rest == 32);
}

namespace {
struct throwing_hooks {
  using stage_concept = batch_stage_tag;
  static constexpr std::string_view name = "hooks";
  static constexpr hook hooks = hook::on_deliver | hook::on_release;
  std::shared_ptr<std::atomic<int>> deliver_fail_at = std::make_shared<std::atomic<int>>(-1);
  std::shared_ptr<std::atomic<int>> release_fail_at = std::make_shared<std::atomic<int>>(-1);
  void on_deliver(batch_slot& s, no_slot_state&) const {
    if (static_cast<int>(s.index) == deliver_fail_at->load()) throw std::runtime_error("deliver hook failed");
  }
  void on_release(batch_slot& s, no_slot_state&) const {
    if (static_cast<int>(s.index) == release_fail_at->load()) throw std::runtime_error("release hook failed");
  }
};
}  // namespace

TEST_CASE("a batch stage whose hook throws never leaks its slot") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 32);
  auto r = open_records(p);
  throwing_hooks hooks;
  auto loader = from(sample::sequential(32)) | read(r) | collate({.batch = 4}) | hooks | prefetch(1, {.workers = 1});
  for (int epoch = 0; epoch < 6; ++epoch) {  // more epochs than slots: a leak would show
    hooks.deliver_fail_at->store(3);
    try {
      for (auto& b : loader.epoch(static_cast<std::uint64_t>(epoch))) (void)b;
      FAIL("no error");
    } catch (const stage_error& e) {
      CHECK(e.stage() == "hooks");
      CHECK(sluice_test::innermost_text(e) == "deliver hook failed");
    }
  }
  hooks.deliver_fail_at->store(-1);
  hooks.release_fail_at->store(2);
  try {
    for (auto& b : loader.epoch(10)) (void)b;
    FAIL("no error");
  } catch (const stage_error& e) {
    CHECK(e.stage() == "hooks");
    CHECK(sluice_test::innermost_text(e) == "release hook failed");
  }
  hooks.release_fail_at->store(-1);
  std::size_t n = 0;
  for (auto& b : loader.epoch(11)) n += b.size();
  CHECK(n == 32);
}

namespace {
// A codec that fails on records whose first byte is 0x07 and takes a little time on each.
struct slow_codec {
  using codec_concept = codec_tag;
  std::size_t output_bytes() const { return 16; }
  void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context&) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(200)) {
    }
    if (!in.empty() && in[0] == std::byte{0x07}) throw format_error("codec", {}, "corrupt image");
    std::memset(out.data(), 1, out.size());
  }
};
}  // namespace

TEST_CASE("decode's errors and busy time are decode's, not collate's") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 64);
  auto r = open_records(p);
  auto loader = from(sample::sequential(64)) | read(r) | decode(slow_codec{}) | collate({.batch = 8}) |
                prefetch(2, {.workers = 1});
  try {
    for (auto& b : loader.epoch(0)) (void)b;
    FAIL("no error");
  } catch (const stage_error& e) {
    CHECK(e.stage() == "decode");
    CHECK(e.sample_id() == 7);
    const auto why = sluice_test::innermost_text(e);
    CHECK(why.find(p) != std::string::npos);
    CHECK(why.find("corrupt image") != std::string::npos);
  }
  auto skipping = from(sample::sequential(64)) | read(r) | decode(slow_codec{}) | collate({.batch = 8}) |
                  prefetch(2, {.workers = 1, .errors = on_error::skip});
  std::size_t n = 0;
  for (auto& b : skipping.epoch(0)) n += b.size();
  CHECK(n == 63);
  const auto st = skipping.stats();
  CHECK(st.skipped == 1);
  REQUIRE(st.stages.size() == 3);  // read, decode, collate
  CHECK(st.stages[1].name == "decode");
  CHECK(st.stages[1].busy_ns >= 64 * 150'000ull);  // 64 decodes of >= 200 us (some slack)
  CHECK(st.stages[2].busy_ns < st.stages[1].busy_ns);
}

TEST_CASE("a batch emptied by skip is not delivered, positions and resume stay exact") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 64);
  auto r = open_records(p);
  // Records 8..15 (the whole of batch 1) fail to decode.
  struct fail_second_batch {
    using codec_concept = codec_tag;
    std::size_t output_bytes() const { return 4; }
    void decode(std::span<const std::byte> in, std::span<std::byte> out, const sample_context& ctx) const {
      if (ctx.id >= 8 && ctx.id < 16) throw format_error("codec", {}, "bad");
      std::memcpy(out.data(), in.data(), out.size());
    }
  };
  auto loader = from(sample::sequential(64)) | read(r) | decode(fail_second_batch{}) | collate({.batch = 8}) |
                prefetch(2, {.workers = 2, .errors = on_error::skip});
  std::vector<std::uint64_t> firsts;
  for (auto& b : loader.epoch(0)) {
    REQUIRE(b.size() > 0);
    firsts.push_back(b.ids()[0]);
  }
  CHECK(firsts == std::vector<std::uint64_t>{0, 16, 24, 32, 40, 48, 56});
  CHECK(loader.stats().skipped == 8);
  CHECK(loader.stats().skip_causes.size() == 8);
  // Stop after batch 0; the state resumes at position 8 and the empty batch is passed over.
  {
    auto range = loader.epoch(1);
    auto it = range.begin();
    CHECK(it->ids()[0] == 0);
  }
}

namespace {
// Starts deep, then drops to depth 1 at once: the ring has 4 + 2 slots, the policy allows 1 + 2.
struct shrinking_depth {
  std::size_t initial_depth() const noexcept { return 4; }
  std::size_t max_depth() const noexcept { return 4; }
  std::size_t update(const depth_signal&) noexcept { return 1; }
};
}  // namespace

TEST_CASE("a policy that lowers the depth never fails a trainer that holds fewer batches than slots") {
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 128);
  auto r = open_records(p);
  auto loader = from(sample::sequential(128)) | read(r) | collate({.batch = 4}) |
                prefetch(shrinking_depth{}, {.workers = 2});
  std::vector<batch> held;
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) {
    check_batch(b);
    ++n;
    if (held.size() < 5) held.push_back(std::move(b));  // 5 of the 6 slots, more than depth + workers
  }
  CHECK(n == 32);
  for (auto& b : held) check_batch(b);
  CHECK(loader.stats().depth == 1);
}

TEST_CASE("a worker's first batch from a file another worker marked fails its samples, it does not pass unchecked") {
  // Two workers each keep their own batch_file_check. When one marks a file (an overwrite in
  // place seen after its copy), the other may meet that file for the first time in a batch whose
  // samples it read before the mark and copied after the new bytes landed. Its check found no
  // unmarked mapping and counted the file as unmapped: the batch went out with the new bytes
  // (seen 1 run in 40 in the torn-samples test).
  sluice_test::temp_dir d;
  const auto p = write_records(d, "data.bin", 8);
  auto r = open_records(p);
  overwrite_in_place(p);
  detail::batch_file_check marker;  // the worker that sees the change first
  const std::string other = d.file("unmapped.bin");
  const std::string_view first_batch[] = {other, p, p};
  std::string why;
  CHECK(marker.first_changed(first_batch, why) == 1);
  CHECK(why.find("written") != std::string::npos);

  detail::batch_file_check late;  // the other worker, meeting the file for the first time
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    why.clear();
    CHECK(late.first_changed(first_batch, why) == 1);
    CHECK(why.find("changed since it was opened") != std::string::npos);
  }
  // A dataset opened again is a fresh, live view: its samples pass.
  auto fresh = open_records(p);
  why.clear();
  CHECK(late.first_changed(first_batch, why) == 3);
  CHECK(why.empty());
}
