// libtorch's C++ data API on the peers workload (bench/peers/run.py writes the files).
//
// What a libtorch user writes for fixed-size records: a map-style Dataset whose get(i) copies
// record i out of an mmap into a fresh tensor, Stack<> to collate, a RandomSampler, batch 256,
// and the data loader's worker threads. Prints "samples_per_s <rate>" measured in steady state
// (the first batches, which include worker start-up, are excluded; epochs restart as needed).
//
//   libtorch_peer records.u8 labels.i64 <workers> <seconds>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t record_bytes = 3 * 64 * 64;

const std::uint8_t* map_whole(const char* path, std::size_t& size) {
  int fd = ::open(path, O_RDONLY);
  if (fd < 0) throw std::runtime_error(std::string("cannot open ") + path);
  struct stat st {};
  ::fstat(fd, &st);
  size = static_cast<std::size_t>(st.st_size);
  // MAP_POPULATE as in sluice's run and the roofline: all three measure the steady state.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map ") + path);
  return static_cast<const std::uint8_t*>(p);
}

class record_dataset : public torch::data::datasets::Dataset<record_dataset> {
 public:
  record_dataset(const char* records, const char* labels) {
    std::size_t bytes = 0, label_bytes = 0;
    records_ = map_whole(records, bytes);
    labels_ = reinterpret_cast<const std::int64_t*>(map_whole(labels, label_bytes));
    count_ = label_bytes / sizeof(std::int64_t);
    if (bytes != count_ * record_bytes) throw std::runtime_error("records.u8 and labels.i64 disagree");
  }
  torch::data::Example<> get(std::size_t i) override {
    auto image = torch::empty({3, 64, 64}, torch::kUInt8);
    std::memcpy(image.data_ptr<std::uint8_t>(), records_ + i * record_bytes, record_bytes);
    return {image, torch::tensor(labels_[i], torch::kInt64)};
  }
  torch::optional<std::size_t> size() const override { return count_; }

 private:
  const std::uint8_t* records_ = nullptr;
  const std::int64_t* labels_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s records.u8 labels.i64 <workers> <seconds>\n", argv[0]);
    return 2;
  }
  const auto workers = static_cast<std::size_t>(std::atoi(argv[3]));
  const double seconds = std::atof(argv[4]);
  torch::set_num_threads(1);
  auto dataset = record_dataset(argv[1], argv[2]).map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(256).workers(workers).drop_last(true));

  using clock = std::chrono::steady_clock;
  std::int64_t samples = 0, warmup = 3, checksum = 0;
  clock::time_point start;
  double elapsed = 0;
  while (elapsed < seconds) {
    for (auto& batch : *loader) {
      if (warmup > 0) {
        if (--warmup == 0) start = clock::now();
        continue;
      }
      samples += batch.data.size(0);
      checksum += batch.target[0].item<std::int64_t>();
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
      if (elapsed >= seconds) break;
    }
  }
  std::printf("samples_per_s %.1f\nchecksum %lld\n", static_cast<double>(samples) / elapsed,
              static_cast<long long>(checksum));
  return 0;
}
