// sluice-pack under faults: signals at every phase, SIGKILL, bad inputs, a FIFO, -o naming an
// input, a failed rename and a full disk. Each case runs the real tool (its path comes from CMake)
// and checks the exit status and what is left on disk: never a file under the output name unless
// the shard was verified. Phases are reached deterministically with the tool's test hook
// SLUICE_PACK_TEST_PAUSE_AT=<phase>, which makes it stop there and wait for a signal.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/shard_fields.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/io/tfrecord.hpp"
#include "sluice/io/wds_tar.hpp"
#include "test_util.hpp"
#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/jpeg.hpp"
#endif

namespace fs = std::filesystem;
using sluice_test::temp_dir;

namespace {

std::string pack_exe() {
#ifdef SLUICE_PACK_EXE
  if (fs::exists(SLUICE_PACK_EXE)) return SLUICE_PACK_EXE;
  sluice_test::skip(std::string("sluice-pack is not built at ") + SLUICE_PACK_EXE);
#else
  sluice_test::skip("this build has no sluice-pack (SLUICE_BUILD_TOOLS=OFF)");
#endif
}

struct outcome {
  bool exited = false;
  int code = -1;    // exit status when exited
  int signal = 0;   // terminating signal otherwise
  bool timed_out = false;
  std::string err;  // stderr
};

// A running sluice-pack with its stderr on a pipe.
class child {
 public:
  child(const std::vector<std::string>& args, const char* pause_at = nullptr) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const std::string exe = pack_exe();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(fds[0]);
      ::dup2(fds[1], 2);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      if (pause_at != nullptr) ::setenv("SLUICE_PACK_TEST_PAUSE_AT", pause_at, 1);
      else ::unsetenv("SLUICE_PACK_TEST_PAUSE_AT");
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(exe.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  // Reads stderr until `text` appears; false after `timeout_s` or at end of stream.
  bool wait_for(const std::string& text, double timeout_s = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
    while (err_.find(text) == std::string::npos) {
      if (!read_some(end)) return false;
    }
    return true;
  }
  void send(int sig) { ::kill(pid_, sig); }
  // Waits for the exit (killing the child after `timeout_s`), collecting the rest of stderr.
  outcome finish(double timeout_s = 60) {
    outcome r;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
    while (read_some(end)) {
    }
    if (std::chrono::steady_clock::now() >= end) {
      r.timed_out = true;
      ::kill(pid_, SIGKILL);
    }
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    r.exited = WIFEXITED(st);
    r.code = r.exited ? WEXITSTATUS(st) : -1;
    r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    r.err = err_;
    return r;
  }

 private:
  bool read_some(std::chrono::steady_clock::time_point end) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    err_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string err_;
};

outcome run_pack(const std::vector<std::string>& args, double timeout_s = 60) {
  child c(args);
  return c.finish(timeout_s);
}

// An .npy of `rows` rows of `row_bytes` bytes.
std::string write_npy(const temp_dir& d, const std::string& name, std::size_t rows, std::size_t row_bytes) {
  auto x = sluice::io::npy_header_bytes("|u1", {rows, row_bytes});
  for (std::size_t i = 0; i < rows * row_bytes; ++i) x.push_back(static_cast<std::byte>(i * 7));
  sluice_test::write_file(d.file(name), x);
  return d.file(name);
}

// Nothing under the output name, nor beside it.
void check_nothing_left(const std::string& out) {
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".partial"));
  CHECK_FALSE(fs::exists(out + ".skipped.tsv"));
  CHECK_FALSE(fs::exists(out + ".skipped.tsv.partial"));
}

#if SLUICE_WITH_TURBOJPEG
std::vector<std::byte> tiny_jpeg(int seed, int w = 24, int h = 20) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w * h * 3));
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 5 + static_cast<std::size_t>(seed) * 41);
  return sluice::codecs::encode_jpeg(px, w, h, sluice::codecs::pixels::rgb, 85);
}
// DIR/cat and DIR/dog, `n` good JPEGs each.
std::string make_tree(const temp_dir& d, int n) {
  const auto root = d.path() / "tree";
  for (const char* cls : {"cat", "dog"}) {
    fs::create_directories(root / cls);
    for (int i = 0; i < n; ++i)
      sluice_test::write_file((root / cls / ("img" + std::to_string(i) + ".jpg")).string(), tiny_jpeg(i + (cls[0] == 'd') * 100));
  }
  return root.string();
}
#endif

}  // namespace

TEST_CASE("pack: --help exits 0, an unknown kind or --verify value is a usage error (2) that leaves nothing") {
  temp_dir d;
  const auto x = write_npy(d, "x.npy", 4, 8);
  {
    child c({"--help"});
    auto r = c.finish();
    CHECK(r.code == 0);
  }
  const auto out = d.file("o.sluice");
  auto r = run_pack({"nosuchkind", x, "-o", out});
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown kind 'nosuchkind'") != std::string::npos);
  check_nothing_left(out);
  r = run_pack({"npy", x, "-o", out, "--verify", "sometimes"});
  CHECK(r.code == 2);
  check_nothing_left(out);
}

TEST_CASE("pack: SIGINT, SIGTERM and SIGHUP at every phase remove the partial files and exit 128+N") {
  temp_dir d;
  const auto x = write_npy(d, "x.npy", 64, 100);
  for (const char* phase : {"read", "write", "sealed", "verify", "commit"}) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      CAPTURE(phase);
      CAPTURE(sig);
      const auto out = d.file(std::string("o-") + phase + "-" + std::to_string(sig) + ".sluice");
      child k({"npy", x, "-o", out, "-q"}, phase);
      REQUIRE(k.wait_for(std::string("paused at ") + phase));
      if (std::string(phase) != "read") CHECK(fs::exists(out + ".partial"));
      k.send(sig);
      auto r = k.finish(30);
      CHECK_FALSE(r.timed_out);
      CHECK(r.exited);
      CHECK(r.code == 128 + sig);
      CHECK(r.err.find("interrupted; partial files removed") != std::string::npos);
      check_nothing_left(out);
    }
  }
}

TEST_CASE("pack: a signal with the skipped-input report pending removes the report's partial file too") {
  temp_dir d;
  sluice_test::write_file(d.file("bad.tar"), std::string(700, 'z'));  // not a tar: skipped
  // A good tar so the wds pack has records.
  std::vector<std::byte> t;
  for (int i = 0; i < 4; ++i) {
    const auto rec = sluice_test::random_bytes(100, static_cast<std::uint64_t>(i));
    sluice::io::append_tar_member(t, "k" + std::to_string(i) + ".jpg", rec);
    const std::string cls = std::to_string(i);
    sluice::io::append_tar_member(t, "k" + std::to_string(i) + ".cls", sluice_test::as_bytes(cls));
  }
  t.resize(t.size() + 1024);
  sluice_test::write_file(d.file("good.tar"), t);
  for (const char* phase : {"sealed", "verify", "commit"}) {
    CAPTURE(phase);
    const auto out = d.file(std::string("w-") + phase + ".sluice");
    child c({"wds", d.file("bad.tar"), d.file("good.tar"), "-o", out, "--skip-bad", "-q"}, phase);
    REQUIRE(c.wait_for(std::string("paused at ") + phase));
    CHECK(fs::exists(out + ".skipped.tsv.partial"));
    c.send(SIGTERM);
    auto r = c.finish(30);
    CHECK(r.code == 128 + SIGTERM);
    check_nothing_left(out);
  }
  // Uninterrupted, the same pack commits the shard and the report.
  const auto out = d.file("w.sluice");
  auto r = run_pack({"wds", d.file("bad.tar"), d.file("good.tar"), "-o", out, "--skip-bad", "-q"});
  CHECK(r.code == 0);
  CHECK(r.err.find("skipped 1 bad input") != std::string::npos);
  CHECK(fs::exists(out));
  CHECK(fs::exists(out + ".skipped.tsv"));
  CHECK(sluice::io::shard_reader(out).size() == 4);
}

TEST_CASE("pack: SIGKILL during verification leaves at most the partial file, never the output") {
  temp_dir d;
  const auto x = write_npy(d, "x.npy", 64, 100);
  for (const char* phase : {"write", "sealed", "verify", "commit"}) {
    CAPTURE(phase);
    const auto out = d.file(std::string("k-") + phase + ".sluice");
    child c({"npy", x, "-o", out, "-q"}, phase);
    REQUIRE(c.wait_for(std::string("paused at ") + phase));
    c.send(SIGKILL);
    auto r = c.finish(30);
    CHECK(r.signal == SIGKILL);
    CHECK_FALSE(fs::exists(out));
    CHECK(fs::exists(out + ".partial"));  // what SIGKILL can leave; never the final name
  }
}

TEST_CASE("pack: -o naming an input is refused, also through a symlink, and the input is untouched") {
  temp_dir d;
  const auto x = write_npy(d, "x.npy", 4, 8);
  const auto before = sluice_test::read_file(x);
  auto r = run_pack({"npy", x, "-o", x});
  CHECK(r.code == 2);
  CHECK(r.err.find("is the input") != std::string::npos);
  fs::create_symlink(x, d.file("link.sluice"));
  r = run_pack({"npy", x, "-o", d.file("link.sluice")});
  CHECK(r.code == 2);
  r = run_pack({"npy", d.file("link.sluice"), "-o", d.path().string() + "/./x.npy"});
  CHECK(r.code == 2);
  fs::create_hard_link(x, d.file("hard.sluice"));
  r = run_pack({"npy", x, "-o", d.file("hard.sluice")});
  CHECK(r.code == 2);
  // The partial file's name may not be an input either.
  r = run_pack({"npy", x, "-o", d.file("x")});
  CHECK(r.code == 0);
  sluice_test::write_file(d.file("y.npy.partial"), sluice_test::read_file(x));
  r = run_pack({"npy", d.file("y.npy.partial"), "-o", d.file("y.npy")});
  CHECK(r.code == 2);
  CHECK(sluice_test::read_file(x) == before);
}

TEST_CASE("pack: a FIFO input is an error naming the file, without hanging") {
  temp_dir d;
  REQUIRE(::mkfifo(d.file("fifo.npy").c_str(), 0600) == 0);
  const auto out = d.file("o.sluice");
  auto r = run_pack({"npy", d.file("fifo.npy"), "-o", out}, 20);
  CHECK_FALSE(r.timed_out);
  CHECK(r.code == 1);
  CHECK(r.err.find("fifo.npy") != std::string::npos);
  CHECK(r.err.find("not a regular file") != std::string::npos);
  check_nothing_left(out);
}

TEST_CASE("pack: a failed rename removes the complete partial file and says so") {
  temp_dir d;
  const auto x = write_npy(d, "x.npy", 4, 8);
  fs::create_directories(d.path() / "taken.sluice" / "inside");  // rename onto a non-empty directory fails
  const auto out = d.file("taken.sluice");
  auto r = run_pack({"npy", x, "-o", out, "-q"});
  CHECK(r.code == 3);
  CHECK(r.err.find("cannot rename") != std::string::npos);
  CHECK(r.err.find("no shard written") != std::string::npos);
  CHECK_FALSE(fs::exists(out + ".partial"));
  CHECK(fs::is_directory(out));
}

TEST_CASE("pack: a full disk is a clean I/O error (exit 3) with no partial file left") {
  temp_dir d;
  const auto small = d.path() / "small";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=256k") != 0)
    sluice_test::skip(std::string("cannot mount a small tmpfs here (") + std::strerror(errno) + "; needs root outside a container)");
  struct unmount {
    std::string p;
    ~unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } guard{small.string()};
  const auto x = write_npy(d, "x.npy", 256, 4096);  // 1 MiB of records into 256 KiB
  const auto out = (small / "o.sluice").string();
  auto r = run_pack({"npy", x, "-o", out, "-q"});
  CHECK(r.code == 3);
  CHECK(r.err.find("No space left on device") != std::string::npos);
  check_nothing_left(out);
  CHECK(fs::is_empty(small));
}

#if SLUICE_WITH_TURBOJPEG
TEST_CASE("pack: --skip-bad skips and lists bad JPEG inputs, without it the first one ends the pack") {
  temp_dir d;
  const auto root = make_tree(d, 3);
  const fs::path cat = fs::path(root) / "cat";
  std::vector<std::byte> apple = {std::byte{0x00}, std::byte{0x05}, std::byte{0x16}, std::byte{0x07}};
  apple.resize(4096);
  sluice_test::write_file((cat / "._img0.jpg").string(), apple);
  std::vector<std::byte> png = {std::byte{0x89}, std::byte{'P'}, std::byte{'N'}, std::byte{'G'}, std::byte{0x0d}, std::byte{0x0a}};
  png.resize(200);
  sluice_test::write_file((cat / "pic.JPEG").string(), png);
  auto trunc = tiny_jpeg(7, 64, 64);
  trunc.resize(trunc.size() * 2 / 3);
  sluice_test::write_file((cat / "trunc.jpg").string(), trunc);
  sluice_test::write_file((cat / "zero.jpg").string(), std::string());
  REQUIRE(::mkfifo((cat / "fifo.jpg").c_str(), 0600) == 0);

  const auto out = d.file("o.sluice");
  auto r = run_pack({"imagefolder", root, "-o", out, "-q"}, 30);
  CHECK_FALSE(r.timed_out);
  CHECK(r.code == 1);
  CHECK(r.err.find("bad input '") != std::string::npos);
  check_nothing_left(out);

  r = run_pack({"imagefolder", root, "-o", out, "-q", "--skip-bad", "--verify", "full"}, 30);
  CHECK_FALSE(r.timed_out);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("skipped 5 bad inputs") != std::string::npos);
  sluice::io::shard_reader s(out);
  CHECK(s.size() == 6);
  CHECK(s.class_names() == std::vector<std::string>{"cat", "dog"});
  const auto tsv = sluice_test::read_file(out + ".skipped.tsv");
  const std::string text(reinterpret_cast<const char*>(tsv.data()), tsv.size());
  CHECK(text.find("._img0.jpg\tmacOS AppleDouble") != std::string::npos);
  CHECK(text.find("pic.JPEG\tPNG data") != std::string::npos);
  CHECK(text.find("trunc.jpg\tJPEG decode") != std::string::npos);
  CHECK(text.find("zero.jpg\tempty file") != std::string::npos);
  CHECK(text.find("fifo.jpg\tnot a regular file") != std::string::npos);
  CHECK_FALSE(fs::exists(out + ".partial"));

  // Every input bad: no empty shard, an error listing them.
  {
    temp_dir e;
    fs::create_directories(e.path() / "t" / "a");
    sluice_test::write_file(e.file("t/a/zero.jpg"), std::string());
    const auto eo = e.file("e.sluice");
    auto er = run_pack({"imagefolder", e.file("t"), "-o", eo, "-q", "--skip-bad"});
    CHECK(er.code == 1);
    CHECK(er.err.find("no records to pack (all 1 inputs were bad)") != std::string::npos);
    CHECK(er.err.find("zero.jpg': empty file") != std::string::npos);
    check_nothing_left(eo);
  }

  // A re-pack with nothing to skip removes the stale report (and an old .classes file).
  for (const char* f : {"._img0.jpg", "pic.JPEG", "trunc.jpg", "zero.jpg", "fifo.jpg"}) fs::remove(cat / f);
  sluice_test::write_file(out + ".classes", std::string("old\nnames\n"));
  r = run_pack({"imagefolder", root, "-o", out, "-q", "--skip-bad"});
  CHECK(r.code == 0);
  CHECK_FALSE(fs::exists(out + ".skipped.tsv"));
  CHECK_FALSE(fs::exists(out + ".classes"));
}

TEST_CASE("pack: a truncated JPEG fails --verify full, in the input check and in the shard check") {
  temp_dir d;
  const auto root = make_tree(d, 2);
  auto trunc = tiny_jpeg(9, 64, 64);
  trunc.resize(trunc.size() * 2 / 3);
  sluice_test::write_file((fs::path(root) / "dog" / "trunc.jpg").string(), trunc);
  const auto out = d.file("o.sluice");
  auto r = run_pack({"imagefolder", root, "-o", out, "-q", "--verify", "full"});
  CHECK(r.code == 1);
  CHECK(r.err.find("trunc.jpg") != std::string::npos);
  check_nothing_left(out);
  // The header alone is fine: the default check packs it (documented: --verify full decodes).
  r = run_pack({"imagefolder", root, "-o", out, "-q"});
  CHECK(r.code == 0);
  fs::remove(out);
  // A tar's members get the same input check: the truncated member is named by its tar and its
  // member name, before anything reaches the shard, and --skip-bad skips it and lists it.
  std::vector<std::byte> t;
  sluice::io::append_tar_member(t, "a.jpg", tiny_jpeg(1));
  sluice::io::append_tar_member(t, "a.cls", sluice_test::as_bytes("0"));
  sluice::io::append_tar_member(t, "b.jpg", trunc);
  sluice::io::append_tar_member(t, "b.cls", sluice_test::as_bytes("1"));
  t.resize(t.size() + 1024);
  sluice_test::write_file(d.file("s.tar"), t);
  r = run_pack({"wds", d.file("s.tar"), "-o", out, "-q", "--verify", "full"});
  CHECK(r.code == 1);
  CHECK(r.err.find(d.file("s.tar") + " member 'b.jpg'") != std::string::npos);
  CHECK(r.err.find(".partial") == std::string::npos);
  check_nothing_left(out);
  r = run_pack({"wds", d.file("s.tar"), "-o", out, "-q", "--verify", "full", "--skip-bad"});
  CHECK(r.code == 0);
  {
    sluice::io::shard_reader packed(out);
    CHECK(packed.size() == 1);
    CHECK(packed.label(0) == 0);
    const auto report = sluice_test::read_file(out + ".skipped.tsv");
    CHECK(std::string(reinterpret_cast<const char*>(report.data()), report.size()).find("member 'b.jpg'") != std::string::npos);
  }
  fs::remove(out);
  fs::remove(out + ".skipped.tsv");
  r = run_pack({"wds", d.file("s.tar"), "-o", out, "-q"});
  CHECK(r.code == 0);
}
#endif

TEST_CASE("pack: two tar archives joined with cat are refused, and packed whole with --ignore-zeros") {
  temp_dir d;
  std::vector<std::byte> joined;
  for (int part = 0; part < 2; ++part) {
    std::vector<std::byte> t;
    for (int i = 0; i < 3; ++i) {
      const int k = part * 3 + i;
      sluice::io::append_tar_member(t, "k" + std::to_string(k) + ".jpg", sluice_test::random_bytes(100, static_cast<std::uint64_t>(k)));
      const std::string cls = std::to_string(k);
      sluice::io::append_tar_member(t, "k" + std::to_string(k) + ".cls", sluice_test::as_bytes(cls));
    }
    t.resize(t.size() + 1024);  // each archive's end-of-archive marker
    joined.insert(joined.end(), t.begin(), t.end());
  }
  sluice_test::write_file(d.file("joined.tar"), joined);
  const auto out = d.file("j.sluice");
  auto r = run_pack({"wds", d.file("joined.tar"), "-o", out, "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("joined.tar") != std::string::npos);
  CHECK(r.err.find("ignore_zeros") != std::string::npos);
  check_nothing_left(out);
  r = run_pack({"wds", d.file("joined.tar"), "-o", out, "-q", "--ignore-zeros"});
  CHECK(r.code == 0);
  sluice::io::shard_reader s(out);
  REQUIRE(s.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) CHECK(s.label(i) == static_cast<std::int64_t>(i));
}

namespace {
// Packs a 4 MiB npy, pauses the tool at its read phase, lets `change` alter the input, and checks
// the pack fails (exit 1) naming the input and each of `says`, leaving nothing behind.
void check_input_change_fails(const std::function<void(const std::string&)>& change,
                              const std::vector<std::string>& says) {
  temp_dir d;
  const auto x = write_npy(d, "x.npy", 64, 64 * 1024);
  const auto out = d.file("t.sluice");
  child c({"npy", x, "-o", out, "-q"}, "read");
  REQUIRE(c.wait_for("paused at read"));
  change(x);
  c.send(SIGUSR1);
  auto r = c.finish(60);
  INFO(r.err);
  CHECK(r.exited);
  CHECK(r.code == 1);
  CHECK(r.err.find(x) != std::string::npos);
  for (const auto& w : says) CHECK(r.err.find(w) != std::string::npos);
  check_nothing_left(out);
}
}  // namespace

TEST_CASE("pack: an input truncated while the tool has it mapped fails the pack, naming it (no SIGBUS)") {
  check_input_change_fails([](const std::string& x) {
    REQUIRE(::truncate(x.c_str(), 8192) == 0);  // the header and a little of the first row remain
  }, {"changed while in use"});
}

TEST_CASE("pack: an input written in place while the tool has it mapped fails the pack, naming it") {
  // Same size, new bytes: every record may verify against the bytes there when it was read, yet
  // the shard can mix rows from before and after the write. Refused, whatever the timing.
  check_input_change_fails([](const std::string& x) {
    const int fd = ::open(x.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    const std::vector<char> junk(4096, 'x');
    CHECK(::pwrite(fd, junk.data(), junk.size(), 3 * 64 * 1024) == static_cast<ssize_t>(junk.size()));
    ::close(fd);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1, 0}};  // a coarse clock could leave the time alone
    CHECK(::utimensat(AT_FDCWD, x.c_str(), ts, 0) == 0);
  }, {"written to", "while it was packed"});
}

// ---- shards with fields (--fields for WebDataset, --features for tf.train.Example) ----------------

namespace {
std::vector<std::byte> bytes_of_text(const std::string& s) {
  const auto b = sluice_test::as_bytes(s);
  return {b.begin(), b.end()};
}
// A WebDataset tar of `n` samples: jpg (a JPEG where TurboJPEG is built, else random bytes), json,
// boxes.bin (rows of 4 floats, sample i has i % 3 rows: some empty) and cls.
std::string write_fields_tar(const temp_dir& d, const std::string& name, int n, int skip_json_at = -1) {
  std::vector<std::byte> t;
  for (int i = 0; i < n; ++i) {
    const std::string k = "s/" + std::to_string(1000 + i);
#if SLUICE_WITH_TURBOJPEG
    sluice::io::append_tar_member(t, k + ".jpg", tiny_jpeg(i));
#else
    sluice::io::append_tar_member(t, k + ".jpg", sluice_test::random_bytes(50 + static_cast<std::size_t>(i), static_cast<std::uint64_t>(i)));
#endif
    if (i != skip_json_at) sluice::io::append_tar_member(t, k + ".json", bytes_of_text("{\"i\": " + std::to_string(i) + "}"));
    std::vector<float> boxes;
    for (int r = 0; r < (i % 3) * 4; ++r) boxes.push_back(static_cast<float>(i * 10 + r));
    sluice::io::append_tar_member(t, k + ".boxes.bin", std::as_bytes(std::span(boxes)));
    sluice::io::append_tar_member(t, k + ".cls", bytes_of_text(std::to_string(i % 4)));
  }
  t.resize(t.size() + 1024);  // the end-of-archive marker
  sluice_test::write_file(d.file(name), t);
  return d.file(name);
}
std::string text_of(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }
}  // namespace

TEST_CASE("pack: wds --fields packs several members per sample into a shard with fields, verified, read back") {
  temp_dir d;
  const auto a = write_fields_tar(d, "a.tar", 5), b = write_fields_tar(d, "b.tar", 3);
  const auto out = d.file("f.sluice");
  const auto r = run_pack({"wds", a, b, "-o", out, "--fields", "jpg,json,boxes.bin:f32", "-q"
#if SLUICE_WITH_TURBOJPEG
                           , "--verify", "full"
#endif
  });
  INFO(r.err);
  REQUIRE(r.exited);
  REQUIRE(r.code == 0);
  sluice::io::shard_reader raw(out);
  CHECK(raw.version() == 3);
  REQUIRE(raw.schema().size() == 3);
  CHECK(raw.schema()[2] == sluice::io::shard_schema_field{"boxes.bin", sluice::dtype::f32, sluice::extent::variable, {-1}});
  using s = sluice::schema<sluice::field<"jpg", std::uint8_t, sluice::variable>, sluice::field<"json", std::uint8_t, sluice::variable>,
                           sluice::field<"boxes.bin", float, sluice::variable>>;
  sluice::io::shard_fields<s> f(out);
  REQUIRE(f.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) {
    const int k = static_cast<int>(i < 5 ? i : i - 5);
    const auto smp = f.fields(i);
    CHECK(text_of(smp.bytes_of<"json">()) == "{\"i\": " + std::to_string(k) + "}");
    CHECK(smp.size_of<"boxes.bin">() == static_cast<std::size_t>((k % 3) * 4 * 4));
    if (k % 3 != 0) {
      float first = 0;
      std::memcpy(&first, smp.bytes_of<"boxes.bin">().data(), 4);
      CHECK(first == static_cast<float>(k * 10));
    }
    CHECK(f.label(i) == k % 4);
#if SLUICE_WITH_TURBOJPEG
    CHECK(text_of(smp.bytes_of<"jpg">()) == text_of(tiny_jpeg(k)));
#endif
  }
}

TEST_CASE("pack: wds --fields with a sample missing a field or a field of partial elements is bad input naming it") {
  temp_dir d;
  const auto out = d.file("f.sluice");
  const auto a = write_fields_tar(d, "a.tar", 4, 2);
  auto r = run_pack({"wds", a, "-o", out, "--fields", "jpg,json", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("a.tar") != std::string::npos);
  CHECK(r.err.find("record 2") != std::string::npos);
  CHECK(r.err.find("field 'json': missing") != std::string::npos);
  check_nothing_left(out);
  // A member that is not whole elements of its field's type.
  std::vector<std::byte> t;
  sluice::io::append_tar_member(t, "x.jpg", bytes_of_text("abc"));
  sluice::io::append_tar_member(t, "x.cls", bytes_of_text("1"));
  t.resize(t.size() + 1024);  // the end-of-archive marker
  sluice_test::write_file(d.file("odd.tar"), t);
  r = run_pack({"wds", d.file("odd.tar"), "-o", out, "--fields", "jpg:i16", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("odd.tar") != std::string::npos);
  CHECK(r.err.find("sample 'x': field 'jpg': 3 bytes, not a whole number of i16 elements") != std::string::npos);
  check_nothing_left(out);
  // A sample whose members are apart in the tar (tar -cf s.tar *.jpg *.cls) is named as such.
  std::vector<std::byte> apart;
  for (const char* name : {"p/0.jpg", "p/1.jpg", "p/0.cls", "p/1.cls"}) sluice::io::append_tar_member(apart, name, bytes_of_text("1"));
  apart.resize(apart.size() + 1024);
  sluice_test::write_file(d.file("apart.tar"), apart);
  r = run_pack({"wds", d.file("apart.tar"), "-o", out, "--fields", "jpg", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("apart.tar") != std::string::npos);
  CHECK(r.err.find("sample 'p/0' has members apart in the tar (samples 0 and 2") != std::string::npos);
  check_nothing_left(out);
  r = run_pack({"wds", d.file("apart.tar"), "-o", out, "-q"});  // the single-field path, label cls
  CHECK(r.code == 1);
  CHECK(r.err.find("sample 'p/0' has members apart in the tar") != std::string::npos);
  check_nothing_left(out);
  // With --skip-bad the bad file is listed and the good one packed.
  std::vector<std::byte> g;
  sluice::io::append_tar_member(g, "y.jpg", bytes_of_text("abcd"));
  sluice::io::append_tar_member(g, "y.cls", bytes_of_text("2"));
  g.resize(g.size() + 1024);
  sluice_test::write_file(d.file("even.tar"), g);
  r = run_pack({"wds", d.file("odd.tar"), d.file("even.tar"), "-o", out, "--fields", "jpg:i16", "--skip-bad", "-q"});
  INFO(r.err);
  CHECK(r.code == 0);
  sluice::io::shard_reader back(out);
  CHECK(back.size() == 1);
  CHECK(back.label(0) == 2);
  CHECK(text_of(sluice_test::read_file(out + ".skipped.tsv")).find("odd.tar") != std::string::npos);
}

TEST_CASE("pack: --fields and --features are usage errors where they do not belong or are malformed") {
  temp_dir d;
  const auto a = write_fields_tar(d, "a.tar", 1);
  const auto out = d.file("f.sluice");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"tfrecord", a, "-o", out, "--fields", "jpg"},
           {"wds", a, "-o", out, "--features", "jpg"},
           {"wds", a, "-o", out, "--fields", "jpg:float16"},
           {"wds", a, "-o", out, "--fields", "jpg,,json"},
           {"wds", a, "-o", out, "--fields", "jpg,jpg"},
           {"wds", a, "-o", out, "--fields", "jpg:u8:x"},
           {"wds", a, "-o", out, "--fields", "jpg", "--field", "json"},
           {"tfrecord", a, "-o", out, "--features", "x:f16"},
           {"tfrecord", a, "-o", out, "--features", "x:i64:-1"}}) {
    const auto r = run_pack(args);
    INFO(r.err);
    CHECK(r.code == 2);
    check_nothing_left(out);
  }
}

namespace {
// A TFRecord of `n` Examples: "img" bytes, "label" one int64, "xs" i floats, "pair" two int64s.
std::string write_examples(const temp_dir& d, const std::string& name, int n, int bad_pair_at = -1) {
  std::vector<std::byte> file;
  for (int i = 0; i < n; ++i) {
    std::vector<float> xs;
    for (int k = 0; k < i; ++k) xs.push_back(0.5f * static_cast<float>(k + i));
    const std::int64_t label[] = {i % 3};
    std::vector<std::int64_t> pair{i, -i};
    if (i == bad_pair_at) pair.push_back(7);
    const auto img = sluice_test::random_bytes(static_cast<std::size_t>(10 + i), static_cast<std::uint64_t>(i));
    const auto ex = sluice::io::tf_example_builder({.packed = i % 2 == 0})
                        .bytes("img", img).int64s("label", label).floats("xs", xs).int64s("pair", pair)
                        .bytes("ignored", sluice_test::as_bytes("zzz")).build();
    sluice::io::append_tfrecord(file, ex);
  }
  sluice_test::write_file(d.file(name), file);
  return d.file(name);
}
}  // namespace

TEST_CASE("pack: tfrecord --features packs tf.train.Example features into typed fields, verified, read back") {
  temp_dir d;
  const auto in = write_examples(d, "e.tfrecord", 6);
  const auto out = d.file("e.sluice");
  const auto r = run_pack({"tfrecord", in, "-o", out, "--features", "img:bytes,xs:float,pair:i32:2,label:u8:1", "--label", "label", "-q"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  using s = sluice::schema<sluice::field<"img", std::uint8_t, sluice::variable>, sluice::field<"xs", float, sluice::variable>,
                           sluice::field<"pair", std::int32_t>, sluice::field<"label", std::uint8_t>>;
  sluice::io::shard_fields<s> f(out);
  CHECK(f.shape_of<"pair">() == std::vector<std::int64_t>{2});
  REQUIRE(f.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) {
    const auto smp = f.fields(i);
    const auto img = sluice_test::random_bytes(10 + i, i);
    CHECK(text_of(smp.bytes_of<"img">()) == text_of(img));
    REQUIRE(smp.size_of<"xs">() == i * 4);
    for (std::size_t k = 0; k < i; ++k) {
      float x = 0;
      std::memcpy(&x, smp.bytes_of<"xs">().data() + 4 * k, 4);
      CHECK(x == 0.5f * static_cast<float>(k + i));
    }
    std::int32_t pair[2];
    std::memcpy(pair, smp.bytes_of<"pair">().data(), 8);
    CHECK(pair[0] == static_cast<std::int32_t>(i));
    CHECK(pair[1] == -static_cast<std::int32_t>(i));
    CHECK(std::to_integer<int>(smp.bytes_of<"label">()[0]) == static_cast<int>(i % 3));
    CHECK(f.label(i) == static_cast<std::int64_t>(i % 3));
  }
}

TEST_CASE("pack: tfrecord --features with a missing feature, a wrong count or a wrong list type is bad input naming it") {
  temp_dir d;
  const auto out = d.file("e.sluice");
  const auto in = write_examples(d, "e.tfrecord", 4, 2);
  auto r = run_pack({"tfrecord", in, "-o", out, "--features", "pair:i64:2", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("e.tfrecord") != std::string::npos);
  CHECK(r.err.find("record 2") != std::string::npos);
  CHECK(r.err.find("feature 'pair': holds 3 values, but --features fixes it at 2") != std::string::npos);
  check_nothing_left(out);
  r = run_pack({"tfrecord", in, "-o", out, "--features", "nope", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("feature 'nope': missing from the record") != std::string::npos);
  r = run_pack({"tfrecord", in, "-o", out, "--features", "xs:i64", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("feature 'xs': is a float_list, but its field is i64") != std::string::npos);
  r = run_pack({"tfrecord", in, "-o", out, "--features", "pair:u8", "-q"});  // -1 does not fit u8
  CHECK(r.code == 1);
  CHECK(r.err.find("does not fit the field's type u8") != std::string::npos);
  r = run_pack({"tfrecord", in, "-o", out, "--features", "img", "--label", "pair", "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("a label needs exactly one") != std::string::npos);
  check_nothing_left(out);
  // --skip-bad drops the one bad record and lists it.
  r = run_pack({"tfrecord", in, "-o", out, "--features", "pair:i64:2", "--skip-bad", "-q"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(sluice::io::shard_reader(out).size() == 3);
  CHECK(fs::exists(out + ".skipped.tsv"));
}

TEST_CASE("pack: SIGTERM while packing fields removes the partial file and exits 143") {
  temp_dir d;
  const auto a = write_fields_tar(d, "a.tar", 3);
  const auto out = d.file("f.sluice");
  for (const char* phase : {"write", "verify"}) {
    child c({"wds", a, "-o", out, "--fields", "jpg,json", "-q"}, phase);
    REQUIRE(c.wait_for("paused at"));
    c.send(SIGTERM);
    const auto r = c.finish(30);
    CHECK(r.exited);
    CHECK(r.code == 143);
    check_nothing_left(out);
  }
}

namespace {
// Flips one bit of byte `at` of `path`, in place (the inode and size unchanged).
void flip_byte(const std::string& path, std::size_t at) {
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  char ch = 0;
  REQUIRE(::pread(fd, &ch, 1, static_cast<off_t>(at)) == 1);
  ch = static_cast<char>(ch ^ 0x20);
  REQUIRE(::pwrite(fd, &ch, 1, static_cast<off_t>(at)) == 1);
  ::close(fd);
}
}  // namespace

TEST_CASE("pack: a field changed in the sealed shard fails verification, naming the record and the field") {
  temp_dir d;
  const auto a = write_fields_tar(d, "a.tar", 3);
  const auto out = d.file("f.sluice");
  child c({"wds", a, "-o", out, "--fields", "jpg,json"}, "sealed");
  REQUIRE(c.wait_for("paused at sealed"));
  {
    // Flip one byte of record 1's json field in the sealed partial file, in place.
    std::size_t at = 0;
    {
      sluice::io::shard_reader r(out + ".partial");
      std::array<std::span<const std::byte>, 2> v;
      r.field_views(1, v);
      REQUIRE(v[1].size() > 2);
      at = static_cast<std::size_t>(v[1].data() - r.file().bytes().data()) + 2;
    }
    flip_byte(out + ".partial", at);
  }
  c.send(SIGUSR1);
  const auto r = c.finish(30);
  INFO(r.err);
  CHECK(r.exited);
  CHECK(r.code == 1);
  CHECK(r.err.find("verification of") != std::string::npos);
  // The shard's record and where it came from: the input and its record.
  CHECK(r.err.find("record 1 (from " + a + " record 1), field 'json': bytes differ from the input") != std::string::npos);
  check_nothing_left(out);
}

TEST_CASE("pack: a record changed in the sealed shard names the tar member it was packed from") {
  temp_dir d;
  std::vector<std::byte> t;
  for (const char* key : {"s0000", "s0001", "s0002"}) {
    sluice::io::append_tar_member(t, std::string("train/") + key + ".bin", sluice_test::as_bytes(std::string("payload of ") + key));
    sluice::io::append_tar_member(t, std::string("train/") + key + ".cls", sluice_test::as_bytes("1"));
  }
  t.resize(t.size() + 1024);
  const auto tar = d.file("s.tar");
  sluice_test::write_file(tar, t);
  const auto out = d.file("o.sluice");
  child c({"wds", tar, "-o", out, "--field", "bin", "--label", "cls"}, "sealed");
  REQUIRE(c.wait_for("paused at sealed"));
  {
    // Flip one byte of record 1 in the sealed partial file, in place.
    std::size_t at = 0;
    {
      sluice::io::shard_reader r(out + ".partial");
      at = static_cast<std::size_t>(r.record(1).data() - r.file().bytes().data()) + 3;
    }
    flip_byte(out + ".partial", at);
  }
  c.send(SIGUSR1);
  const auto r = c.finish(30);
  INFO(r.err);
  CHECK(r.exited);
  CHECK(r.code == 1);
  CHECK(r.err.find("record 1 (from " + tar + " member 'train/s0001.bin'): bytes differ from the input") !=
        std::string::npos);
  check_nothing_left(out);
}

namespace {
// An .npy of `descr` and `shape` holding `data` (its bytes as they are).
template <class T>
std::string write_typed_npy(const temp_dir& d, const std::string& name, std::string_view descr,
                            const std::vector<std::uint64_t>& shape, const std::vector<T>& data) {
  auto x = sluice::io::npy_header_bytes(descr, shape);
  const auto b = std::as_bytes(std::span(data));
  x.insert(x.end(), b.begin(), b.end());
  sluice_test::write_file(d.file(name), x);
  return d.file(name);
}
}  // namespace

TEST_CASE("pack: npy of a non-uint8 array keeps its dtype and row shape (a shard with fields), labels beside it") {
  temp_dir d;
  std::vector<float> v(4 * 2 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 3.25f;
  const auto x = write_typed_npy(d, "x.npy", "<f4", {4, 2, 3}, v);
  const auto y = write_typed_npy(d, "y.npy", "<i8", {4}, std::vector<std::int64_t>{7, -1, 9, 3});
  const auto out = d.file("x.sluice");
  auto r = run_pack({"npy", x, "--labels", y, "-o", out, "-q"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  {
    sluice::io::shard_reader s(out);
    CHECK(s.version() == 3);
    REQUIRE(s.schema().size() == 2);
    CHECK(s.schema()[0] == sluice::io::shard_schema_field{"data", sluice::dtype::f32, sluice::extent::fixed, {2, 3}});
    CHECK(s.schema()[1] == sluice::io::shard_schema_field{"label", sluice::dtype::i64, sluice::extent::fixed, {}});
    REQUIRE(s.size() == 4);
    const std::int64_t want[] = {7, -1, 9, 3};
    for (std::size_t i = 0; i < 4; ++i) {
      std::span<const std::byte> f[2];
      s.field_views(i, f);
      REQUIRE(f[0].size() == 24);
      CHECK(std::memcmp(f[0].data(), v.data() + 6 * i, 24) == 0);  // the floats, bit for bit
      std::int64_t l = 0;
      REQUIRE(f[1].size() == 8);
      std::memcpy(&l, f[1].data(), 8);
      CHECK(l == want[i]);
      CHECK(s.label(i) == want[i]);
    }
  }
  // A 1-D array: one element a record (shape []), no label field without --labels.
  const auto z = write_typed_npy(d, "z.npy", "<i8", {5}, std::vector<std::int64_t>{1, -2, 3, -4, 5});
  r = run_pack({"npy", z, "-o", d.file("z.sluice"), "-q"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  {
    sluice::io::shard_reader s(d.file("z.sluice"));
    REQUIRE(s.schema().size() == 1);
    CHECK(s.schema()[0] == sluice::io::shard_schema_field{"data", sluice::dtype::i64, sluice::extent::fixed, {}});
    std::span<const std::byte> f[1];
    s.field_views(3, f);
    std::int64_t e = 0;
    REQUIRE(f[0].size() == 8);
    std::memcpy(&e, f[0].data(), 8);
    CHECK(e == -4);
    CHECK(s.label(3) == -1);
  }
  // A uint8 array with rows stays a shard of single records, byte for byte, as before.
  const auto u = write_npy(d, "u.npy", 3, 5);
  r = run_pack({"npy", u, "-o", d.file("u.sluice"), "-q"});
  REQUIRE(r.code == 0);
  {
    sluice::io::shard_reader s(d.file("u.sluice"));
    CHECK_FALSE(s.has_fields());
    REQUIRE(s.size() == 3);
    CHECK(s.record(1).size() == 5);
    CHECK(std::to_integer<int>(s.record(1)[0]) == 35);  // byte 5 of the array: 5 * 7
  }
}

TEST_CASE("pack: npy of an array sluice cannot type, or whose rows hold no elements, is bad input naming it") {
  temp_dir d;
  const auto c = write_typed_npy(d, "c.npy", "<c8", {3, 2}, std::vector<float>(12));
  const auto out = d.file("c.sluice");
  auto r = run_pack({"npy", c, "-o", out, "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("c.npy") != std::string::npos);
  CHECK(r.err.find("'<c8'") != std::string::npos);
  CHECK(r.err.find("numbers or bool") != std::string::npos);
  check_nothing_left(out);
  const auto e = write_typed_npy(d, "e.npy", "<f4", {10, 0}, std::vector<float>{});
  r = run_pack({"npy", e, "-o", out, "-q"});
  CHECK(r.code == 1);
  CHECK(r.err.find("e.npy") != std::string::npos);
  CHECK(r.err.find("shape (10, 0)") != std::string::npos);
  CHECK(r.err.find("hold no elements") != std::string::npos);
  check_nothing_left(out);
}
