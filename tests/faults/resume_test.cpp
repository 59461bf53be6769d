// Resume checks what it resumes: a state from another pipeline (sampler, seeds, dataset, batch)
// is refused with a message naming the difference; the stored form round-trips and refuses
// unknown versions, truncated and corrupt files; and a trainer SIGKILLed mid-epoch resumes from
// its last saved state with bit-identical batches.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "resume_fixture.hpp"
#include "sluice/sluice.hpp"
#include "test_util.hpp"

extern char** environ;

using namespace sluice;
using sluice_test::mem_reader;
using sluice_test::temp_dir;

namespace {

// The message of the usage_error resume(st) throws ("" if it does not).
template <class Loader>
std::string refusal(Loader& l, const loader_state& st) {
  try {
    (void)l.resume(st);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

// A state of `l` part-way into epoch 0 (after two batches).
template <class Loader>
loader_state after_two_batches(Loader& l) {
  loader_state st;
  std::size_t k = 0;
  for (auto& b : l.epoch(0)) {
    (void)b;
    if (++k == 2) {
      st = l.state();
      break;
    }
  }
  return st;
}

// A sampler a user wrote, without fingerprint().
struct user_sampler {
  using sampler_concept = sampler_tag;
  std::uint64_t n;
  [[nodiscard]] std::size_t size(std::uint64_t) const { return n; }
  [[nodiscard]] std::uint64_t at(std::uint64_t, std::uint64_t pos) const { return n - 1 - pos; }
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("resume: a state of the same pipeline is accepted, also after a round trip through its stored form") {
  mem_reader r(600, 8);
  auto make = [&] { return from(sample::shuffle{600, {.seed = 7}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 3}); };
  auto a = make();
  const loader_state st = after_two_batches(a);
  CHECK(st.position == 32);
  CHECK(st.seed == 3);
  CHECK(st.fingerprint.sampler_kind == "shuffle");
  CHECK(st.fingerprint.sampler_seed == 7);
  CHECK(st.fingerprint.dataset_samples == 600);
  CHECK(st.fingerprint.batch_size == 16);
  auto b = make();
  CHECK(refusal(b, st).empty());
  CHECK(refusal(b, state_from_string(state_to_string(st))).empty());
  std::size_t batches = 0;
  for (auto& x : b.resume(st)) batches += x.size() > 0;
  CHECK(batches == (600 - 32 + 15) / 16);
}

TEST_CASE("resume: each difference is named") {
  mem_reader r(600, 8);
  auto base = from(sample::shuffle{600, {.seed = 7}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 3});
  const loader_state st = after_two_batches(base);

  SUBCASE("the sampler seed") {
    auto l = from(sample::shuffle{600, {.seed = 8}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 3});
    CHECK(refusal(l, st) == "sluice: resume: the sampler seed differs (state 7, loader 8)");
  }
  SUBCASE("the augmentation seed") {
    auto l = from(sample::shuffle{600, {.seed = 7}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 4});
    CHECK(refusal(l, st).find("the augmentation seed differs (state 3, loader 4)") != std::string::npos);
  }
  SUBCASE("the sampler's kind") {
    auto l = from(sample::block_shuffle{600, {.seed = 7}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 3});
    CHECK(refusal(l, st).find("the sampler differs (state: shuffle, loader: block_shuffle)") != std::string::npos);
  }
  SUBCASE("the dataset's size") {
    mem_reader smaller(599, 8);
    auto l = from(sample::shuffle{600, {.seed = 7}}) | read(smaller) | collate({.batch = 16}) | prefetch(2, {.seed = 3});
    CHECK(refusal(l, st) == "sluice: resume: the dataset differs: 600 samples in the state, 599 now");
  }
  SUBCASE("the sampler's parameters and the epoch's size") {
    auto l = from(sample::shuffle{599, {.seed = 7}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 3});
    const std::string why = refusal(l, st);
    CHECK(why.find("the sampler's parameters differ (shuffle, same seed 7)") != std::string::npos);
    CHECK(why.find("the epoch's size differs: 600 samples in the state, 599 now") != std::string::npos);
  }
  SUBCASE("the batch size, drop_last and layout") {
    auto l = from(sample::shuffle{600, {.seed = 7}}) | read(r) | collate({.batch = 32, .drop_last = true}) |
             prefetch(2, {.seed = 3});
    const std::string why = refusal(l, st);
    CHECK(why.find("the batch size differs (state 16, loader 32)") != std::string::npos);
    CHECK(why.find("drop_last differs (state false, loader true)") != std::string::npos);
    auto f = from(sample::shuffle{600, {.seed = 7}}) | read(r) |
             collate({.batch = 16, .output = dtype::f32, .mean = {0.5f}}) | prefetch(2, {.seed = 3});
    CHECK(refusal(f, st) == "sluice: resume: the batch layout differs (the collated tensors' names or dtypes, or "
                            "the collate options)");
  }
  SUBCASE("several at once, each named") {
    auto l = from(sample::shuffle{600, {.seed = 9}}) | read(r) | collate({.batch = 8}) | prefetch(2, {.seed = 5});
    const std::string why = refusal(l, st);
    CHECK(why.find("the sampler seed differs (state 7, loader 9)") != std::string::npos);
    CHECK(why.find("the batch size differs (state 16, loader 8)") != std::string::npos);
    CHECK(why.find("the augmentation seed differs (state 3, loader 5)") != std::string::npos);
  }
  SUBCASE("a state made by hand") {
    CHECK(refusal(base, loader_state{.epoch = 0, .position = 32}).find("carries no fingerprint") != std::string::npos);
    CHECK(refusal(base, base.state(0, 32)).empty());
  }
}

TEST_CASE("resume: the dataset's identity is its readers' paths and sizes") {
  temp_dir dir;
  resume_fixture::write_dataset(dir.file("a.bin"));
  resume_fixture::write_dataset(dir.file("b.bin"));
  const io::fixed_records a(dir.file("a.bin"), {.record_bytes = resume_fixture::record_bytes});
  const io::fixed_records b(dir.file("b.bin"), {.record_bytes = resume_fixture::record_bytes});
  auto la = resume_fixture::make_loader(a, 1);
  auto lb = resume_fixture::make_loader(b, 1);
  const loader_state st = after_two_batches(la);
  CHECK(st.fingerprint.dataset_paths == dir.file("a.bin"));
  const std::string why = refusal(lb, st);
  CHECK(why == "sluice: resume: the dataset differs: the state was taken over '" + dir.file("a.bin") +
                   "', the loader reads '" + dir.file("b.bin") + "' (paths or sizes differ)");
  // Moved on purpose: take the new loader's dataset identity into the state.
  loader_state moved = st;
  moved.fingerprint.dataset_id = lb.state(st.epoch, st.position).fingerprint.dataset_id;
  moved.fingerprint.dataset_paths = lb.state(st.epoch, st.position).fingerprint.dataset_paths;
  CHECK(refusal(lb, moved).empty());
}

TEST_CASE("resume: every sampler has a fingerprint that sees its seed and parameters") {
  const std::vector<std::int64_t> labels{0, 1, 1, 2, 2, 2, 2, 0, 1, 2};
  const std::vector<double> w{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<std::uint32_t> lengths{5, 1, 7, 3, 9, 2, 8, 4, 6, 10};
  auto differ = [](const auto& x, const auto& y) { return fingerprint_of(x, 0) != fingerprint_of(y, 0); };
  CHECK(fingerprint_of(sample::sequential{10}, 0).kind == "sequential");
  CHECK(differ(sample::sequential{10}, sample::sequential{11}));
  CHECK(differ(sample::block_shuffle{100, {.seed = 1, .block = 8}}, sample::block_shuffle{100, {.seed = 1, .block = 16}}));
  CHECK(fingerprint_of(sample::weighted{w, {.seed = 2}}, 0).seed == 2);
  std::vector<double> w2 = w;
  w2[3] = 4.5;
  CHECK(differ(sample::weighted{w, {.seed = 2}}, sample::weighted{w2, {.seed = 2}}));
  CHECK(differ(sample::weighted{w, {.seed = 2}}, sample::weighted{w, {.seed = 2, .mode = sample::replacement::without}}));
  CHECK(differ(sample::class_balanced{labels, sample::effective_number{0.9}, {.seed = 1}},
               sample::class_balanced{labels, sample::effective_number{0.99}, {.seed = 1}}));
  CHECK(differ(sample::class_balanced{labels, sample::inverse_frequency{}, {.seed = 1}},
               sample::class_balanced{labels, sample::inverse_log{}, {.seed = 1}}));
  CHECK(differ(sample::balanced_batch{labels, sample::power_schedule{.epochs = 10}, {.seed = 1, .batch = 2}},
               sample::balanced_batch{labels, sample::power_schedule{.epochs = 20}, {.seed = 1, .batch = 2}}));
  std::vector<std::uint32_t> l2 = lengths;
  l2[0] = 6;
  CHECK(differ(sample::length_bucketed{lengths, {.seed = 1, .batch = 2}}, sample::length_bucketed{l2, {.seed = 1, .batch = 2}}));
  const sample::distributed r0{sample::shuffle{100, {.seed = 4}}, {.rank = 0, .world = 2}};
  const sample::distributed r1{sample::shuffle{100, {.seed = 4}}, {.rank = 1, .world = 2}};
  CHECK(fingerprint_of(r0, 0).kind == "distributed(shuffle)");
  CHECK(fingerprint_of(r0, 0).seed == 4);
  CHECK(differ(r0, r1));
  // A user's sampler without fingerprint(): known by its size alone.
  CHECK(fingerprint_of(user_sampler{10}, 0).kind == "sampler without fingerprint()");
  CHECK(differ(user_sampler{10}, user_sampler{11}));
  CHECK(!differ(user_sampler{10}, user_sampler{10}));
}

TEST_CASE("resume: a sampler without a seed has none in its fingerprint") {
  mem_reader r(64, 8);
  auto l = from(sample::sequential{64}) | read(r) | collate({.batch = 8}) | prefetch(2);
  const loader_state st = l.state(0, 8);
  CHECK(st.fingerprint.sampler_kind == "sequential");
  CHECK(!st.fingerprint.sampler_seeded);
  auto s = from(sample::shuffle{64, {.seed = 5}}) | read(r) | collate({.batch = 8}) | prefetch(2);
  CHECK(refusal(s, st) == "sluice: resume: the sampler differs (state: sequential, loader: shuffle)");
}

TEST_CASE("state: the stored form round-trips and refuses what it cannot trust") {
  temp_dir dir;
  mem_reader r(600, 8);
  auto l = from(sample::shuffle{600, {.seed = 7}}) | read(r) | collate({.batch = 16}) | prefetch(2, {.seed = 3});
  const loader_state st = after_two_batches(l);
  const std::string path = dir.file("loader.state");
  save_state(st, path);
  CHECK(load_state(path) == st);
  CHECK(state_from_string(state_to_string(st)) == st);
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))  // no temporary left behind
    CHECK(e.path().filename() == "loader.state");
  loader_state other = st;
  other.position = 48;
  save_state(other, path);  // replaces
  CHECK(load_state(path) == other);

  const std::string good = state_to_string(st);
  auto refused = [&](const std::string& bytes, const std::string& cause) {
    sluice_test::write_file(path, bytes);
    try {
      (void)load_state(path);
    } catch (const format_error& e) {
      CHECK(e.file() == path);
      const bool says = std::string(e.what()).find(cause) != std::string::npos;
      CHECK_MESSAGE(says, e.what(), " lacks '", cause, "'");
      return;
    }
    FAIL("accepted: " << cause);
  };
  SUBCASE("an unknown version") {
    std::string v = good;
    v[8] = 2;
    refused(v, "loader state version 2 is not one this sluice reads (it reads 1)");
  }
  SUBCASE("every truncation") {
    for (std::size_t n = 0; n < good.size(); ++n) refused(good.substr(0, n), "truncated");
  }
  SUBCASE("every corrupted byte") {
    for (std::size_t i = 16; i < good.size(); ++i) {
      std::string c = good;
      c[i] = static_cast<char>(c[i] ^ 0x20);
      refused(c, "corrupt");
    }
  }
  SUBCASE("not a state, or more than one") {
    refused("hello, this is not a sluice state", "no SLUICEST magic");
    refused(good + "x", "1 bytes after the state's end");
  }
  SUBCASE("a missing file") { CHECK_THROWS_AS((void)load_state(dir.file("none")), io_error); }
  SUBCASE("a FIFO, a directory or an endless device: refused at once, naming it, never waited on") {
    const std::string fifo = dir.file("fifo.state");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const std::string zero = dir.file("zero.state");
    REQUIRE(::symlink("/dev/zero", zero.c_str()) == 0);
    for (const std::string& p : {fifo, dir.path().string(), zero}) {
      CAPTURE(p);
      auto loaded = std::async(std::launch::async, [p] {
        try {
          (void)load_state(p);
          return std::string("loaded");
        } catch (const format_error& e) {
          return std::string(e.what());
        }
      });
      REQUIRE_MESSAGE(loaded.wait_for(std::chrono::seconds(10)) == std::future_status::ready, "blocked on " << p);
      const auto what = loaded.get();
      CHECK(what.find("not a regular file") != std::string::npos);
      CHECK(what.find(p) != std::string::npos);
    }
  }
  SUBCASE("larger than a state can be: refused by its size") {
    const std::string big = dir.file("big.state");
    {
      std::ofstream f(big, std::ios::binary);
      f.seekp((std::int64_t{1} << 24) + 1);
      f.put('x');
    }
    try {
      (void)load_state(big);
      FAIL("accepted a 16 MiB file");
    } catch (const format_error& e) {
      CHECK(e.file() == big);
      CHECK(std::string(e.what()).find("larger than") != std::string::npos);
    }
  }
  SUBCASE("from a string, the origin is named") {
    try {
      (void)state_from_string(good.substr(0, 20), "ckpt/step-9");
      FAIL("accepted a truncated state");
    } catch (const format_error& e) {
      CHECK(e.file() == "ckpt/step-9");
    }
  }
}

TEST_CASE("resume: a trainer SIGKILLed mid-epoch resumes from its last saved state, bit-identical") {
  temp_dir dir;
  const std::string data_path = dir.file("data.bin"), state_path = dir.file("loader.state"),
                    log_path = dir.file("batches.log");
  resume_fixture::write_dataset(data_path);
  const io::fixed_records data(data_path, {.record_bytes = resume_fixture::record_bytes});
  constexpr std::uint64_t aug_seed = 11;

  // The reference: the whole epoch, uninterrupted, in this process.
  std::vector<std::uint64_t> reference;
  std::vector<std::vector<std::uint64_t>> reference_ids;
  {
    auto l = resume_fixture::make_loader(data, aug_seed);
    for (auto& b : l.epoch(resume_fixture::epoch)) {
      reference.push_back(resume_fixture::digest(b));
      reference_ids.emplace_back(b.ids().begin(), b.ids().end());
    }
  }
  const std::size_t epoch_batches = (resume_fixture::records + resume_fixture::batch - 1) / resume_fixture::batch;
  REQUIRE(reference.size() == epoch_batches);

  // The trainer, in its own process, killed once it has logged a dozen batches.
  const std::string seed_arg = std::to_string(aug_seed);
  std::vector<std::string> args{SLUICE_RESUME_CHILD, data_path, state_path, log_path, seed_arg};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, SLUICE_RESUME_CHILD, nullptr, nullptr, argv.data(), environ) == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_lines(log_path).size() < 12 && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) FAIL("the trainer exited early, status " << status);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  // What the trainer saw before it died is the reference, batch for batch.
  const auto lines = read_lines(log_path);
  REQUIRE(lines.size() >= 12);
  for (std::size_t k = 0; k < lines.size(); ++k) {
    std::istringstream in(lines[k]);
    std::size_t index = 0;
    std::uint64_t d = 0;
    in >> index >> d;
    CHECK(index == k);
    REQUIRE(k < reference.size());
    CHECK(d == reference[k]);
  }

  // The last saved state is whole (the save is atomic) and stands where the log says: after the
  // last logged batch, or one before it if the kill fell between the log and the save.
  const loader_state st = load_state(state_path);
  CHECK(st.epoch == resume_fixture::epoch);
  CHECK(st.seed == aug_seed);
  REQUIRE(st.position % resume_fixture::batch == 0);
  const std::size_t done = st.position / resume_fixture::batch;
  CHECK((done == lines.size() || done + 1 == lines.size()));
  CHECK(st.position < resume_fixture::records);  // mid-epoch

  // A new process (here: this one) resumes with two workers: the rest of the epoch, bit for bit.
  auto l = resume_fixture::make_loader(data, aug_seed);
  std::size_t k = done;
  for (auto& b : l.resume(st)) {
    REQUIRE(k < reference.size());
    CHECK(std::vector<std::uint64_t>(b.ids().begin(), b.ids().end()) == reference_ids[k]);
    CHECK(resume_fixture::digest(b) == reference[k]);
    ++k;
  }
  CHECK(k == reference.size());

  // The same state does not resume a loader with another augmentation or sampler seed.
  auto other_aug = resume_fixture::make_loader(data, aug_seed + 1);
  CHECK(refusal(other_aug, st).find("the augmentation seed differs (state 11, loader 12)") != std::string::npos);
  auto other_sampler = resume_fixture::make_loader(data, aug_seed, resume_fixture::sampler_seed + 1);
  CHECK(refusal(other_sampler, st) == "sluice: resume: the sampler seed differs (state 7, loader 8)");
}
