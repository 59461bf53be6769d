// fork() while a loader's workers run: the child has none of its threads. Using the loader there
// is a usage_error naming the fork; letting it go (the batch it holds, the epoch, the loader, the
// page warmer's job) returns at once instead of locking or joining for threads that are not
// there; the parent's epoch is whole.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"
#include "test_util.hpp"

using namespace sluice;

namespace {

constexpr std::size_t kRecords = 100000;  // 1.6 MB: the page warmer takes the file too

bool refused_as_forked(auto&& f, pid_t parent) {
  try {
    f();
  } catch (const usage_error& e) {
    const std::string w = e.what();
    return w.find("forked") != std::string::npos && w.find(std::to_string(parent)) != std::string::npos;
  } catch (...) {
  }
  return false;
}

}  // namespace

TEST_CASE("fork: a child refuses the parent's loader by name and lets it go without hanging, and the parent's epoch "
          "is whole") {
  sluice_test::temp_dir d;
  std::vector<std::byte> bytes(kRecords * 16);
  for (std::size_t i = 0; i < kRecords; ++i) std::memcpy(bytes.data() + i * 16, &i, sizeof i);
  const std::string path = d.file("ids.bin");
  sluice_test::write_file(path, bytes);
  io::fixed_records r(path, {.record_bytes = 16});
  auto loader =
      from(sample::shuffle(r.size(), {.seed = 5})) | read(r) | collate({.batch = 1000}) | prefetch(2, {.workers = 2});
  std::vector<char> seen(kRecords, 0);
  const auto take = [&](const batch& b) {
    for (std::size_t i = 0; i < b.size(); ++i) {
      std::uint64_t id = 0;
      std::memcpy(&id, b.bytes().data() + i * 16, sizeof id);
      REQUIRE(id < kRecords);
      ++seen[id];
    }
  };
  auto range = loader.epoch(0);
  auto it = range.begin();
  take(*it);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // no doctest macros here: the child reports through its exit status
    ::alarm(20);   // a hang ends the child with SIGALRM
    int code = 0;
    if (!refused_as_forked([&] { ++it; }, parent)) code = 10;
    if (code == 0 && !refused_as_forked([&] { (void)loader.epoch(1).begin(); }, parent)) code = 11;
    std::destroy_at(&it);      // the batch it holds: its slot stays where it is
    std::destroy_at(&range);   // the epoch's end
    std::destroy_at(&loader);  // the ring is left in memory, neither joined nor destroyed
    std::destroy_at(&r);       // the mapping: its page-warmer job is not waited for
    ::_exit(code);             // leaves without running the parent's test framework again
  }
  for (++it; it != range.end(); ++it) take(*it);  // the parent goes on meanwhile
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("the child's status: " << status);
  CHECK_MESSAGE(!(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM), "the child hung");
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "the child's check " << WEXITSTATUS(status) << " failed");
  std::size_t once = 0;
  for (char c : seen) once += c == 1;
  CHECK(once == kRecords);
}
