// The trainer resume_test.cpp kills: runs resume_fixture's pipeline over epoch 1 and, after each
// batch, appends "<batch> <digest>" to the log, then saves loader.state() (save_state: atomic).
// It sleeps a little per batch so that the SIGKILL lands mid-epoch, and after the epoch waits to
// be killed (exit 3 after a minute: the test did not kill it).
//
//   sluice_fault_resume_child DATA_FILE STATE_FILE LOG_FILE AUGMENTATION_SEED
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "resume_fixture.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DATA_FILE STATE_FILE LOG_FILE AUGMENTATION_SEED\n", argv[0]);
    return 2;
  }
  try {
    const std::string state_path = argv[2];
    const int log = ::open(argv[3], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) throw sluice::io_error(argv[3], "cannot open log", errno);
    const sluice::io::fixed_records data(argv[1], {.record_bytes = resume_fixture::record_bytes});
    auto loader = resume_fixture::make_loader(data, std::stoull(argv[4]));
    std::uint64_t k = 0;
    for (auto& b : loader.epoch(resume_fixture::epoch)) {
      const std::string line = std::to_string(k++) + " " + std::to_string(resume_fixture::digest(b)) + "\n";
      if (::write(log, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        throw sluice::io_error(argv[3], "cannot append to log", errno);
      sluice::save_state(loader.state(), state_path);  // the batch is consumed: checkpoint
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume child: %s\n", e.what());
    return 1;
  }
}
