// sluice's side of bench/peers (run.py drives it), plus the memcpy roofline.
//
//   sluice_peers roofline records.u8 labels.i64 <seconds> [threads=1]
//       a plain mmap + memcpy gather: shuffled record indices, 256 records and labels copied
//       into a reused batch buffer per thread, the threads taking alternate batches — the
//       physical limit of what any loader that collates into contiguous batches can reach on
//       this machine. An untimed first epoch, then whole epochs timed (the shuffle outside);
//       prints the rate and epoch_spread, (fastest − slowest) / median epoch rate.
//
//   sluice_peers raw records.u8 labels.i64 <workers> <seconds>
//       sluice's pipeline: shuffle sampler -> read(fixed_records) -> collate(256) -> prefetch.
//
//   sluice_peers jpeg images.jpgpack images.offsets images.labels <workers> <seconds>
//       shuffle -> read(packed JPEGs) -> decode (TurboJPEG, 64x64 RGB, HWC uint8) -> collate(256)
//       -> prefetch; needs codec/jpeg.hpp (sluice::jpeg).
//
//   sluice_peers rrc images.jpgpack images.offsets images.labels <workers> <seconds>
//       the same over ImageNet-size JPEGs (run.py's rrc/ folder), each decoded with the ImageNet
//       training transform: random_resized_crop to 224x224 (scale [0.08, 1], ratio [3/4, 4/3])
//       and a random horizontal flip, HWC uint8; only the crop's region is decoded.
//
//   sluice_peers weighted weights.f64 <seconds>
//       the alias-method weighted sampler: build its table over the weights, then draw as many
//       ids as there are weights with draw_n, 256 at a time; repeated; draws/s including the build
//       (as torch.multinomial, and WeightedRandomSampler which calls it, rebuild their cumulative
//       table on every pass). One thread, like torch's multinomial kernel on the CPU; run.py sets
//       it beside torch.multinomial in bulk and a bulk list(WeightedRandomSampler).
//
// Every mode prints "samples_per_s <rate>" (and a checksum so the work cannot be optimised away).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <span>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/sluice.hpp"
#if __has_include("sluice/sample/alias.hpp")
#  include "sluice/sample/alias.hpp"
#  define SLUICE_PEERS_HAVE_WEIGHTED 1
#endif
#if defined(SLUICE_WITH_TURBOJPEG) && __has_include("sluice/codec/jpeg.hpp")
#  include "sluice/codec/jpeg.hpp"
#  define SLUICE_PEERS_HAVE_JPEG 1
#  if __has_include("sluice/stage/decode.hpp")
#    include "sluice/stage/decode.hpp"
#    define SLUICE_PEERS_HAVE_DECODE_STAGE 1
#  endif
#endif

namespace {

constexpr std::size_t record_bytes = 3 * 64 * 64;
constexpr std::size_t batch_size = 256;
using bench_clock = std::chrono::steady_clock;

double seconds_since(bench_clock::time_point t) {
  return std::chrono::duration<double>(bench_clock::now() - t).count();
}

const std::byte* map_whole(const char* path, std::size_t& size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("cannot open ") + path);
  struct stat st {};
  ::fstat(fd, &st);
  size = static_cast<std::size_t>(st.st_size);
  // MAP_POPULATE: fault every page in up front, so the timed loop measures the gather, not the
  // first epoch's page faults (run.py warmed the page cache already).
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map ") + path);
  return static_cast<const std::byte*>(p);
}

int roofline(const char* records_path, const char* labels_path, double seconds, std::size_t threads) {
  std::size_t bytes = 0, label_bytes = 0;
  const std::byte* records = map_whole(records_path, bytes);
  const auto* labels = reinterpret_cast<const std::int64_t*>(map_whole(labels_path, label_bytes));
  const std::size_t n = label_bytes / sizeof(std::int64_t);
  if (threads == 0) threads = 1;
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  // One page-aligned batch buffer per thread. It matters: on an AMD EPYC (ERMS/FSRM memcpy) a
  // destination 16 bytes off the source's alignment (what std::vector gives) copied 12 KiB
  // records ~4x slower than a 64-byte-aligned one (measured: 0.14 vs 0.52 M records/s).
  std::vector<std::byte*> buffers;
  std::vector<std::vector<std::int64_t>> batch_labels(threads, std::vector<std::int64_t>(batch_size));
  for (std::size_t t = 0; t < threads; ++t)
    buffers.push_back(static_cast<std::byte*>(std::aligned_alloc(4096, batch_size * record_bytes)));
  std::vector<std::uint64_t> checksum(threads);
  // One epoch: thread t gathers batches t, t + threads, ... of the current order.
  auto epoch = [&] {
    auto work = [&](std::size_t t) {
      std::byte* batch = buffers[t];
      for (std::size_t b = t * batch_size; b + batch_size <= n; b += threads * batch_size) {
        for (std::size_t k = 0; k < batch_size; ++k) {
          const std::uint32_t i = order[b + k];
          std::memcpy(batch + k * record_bytes, records + std::size_t{i} * record_bytes, record_bytes);
          batch_labels[t][k] = labels[i];
        }
        checksum[t] += static_cast<std::uint64_t>(batch[record_bytes * 3 + 5]) + static_cast<std::uint64_t>(batch_labels[t][7]);
      }
    };
    if (threads == 1) {
      work(0);
    } else {
      std::vector<std::thread> ts;
      for (std::size_t t = 0; t < threads; ++t) ts.emplace_back(work, t);
      for (auto& t : ts) t.join();
    }
  };
  std::mt19937_64 rng(7);
  // An untimed first epoch: the buffers' pages and the mapping's TLB entries warm, as the
  // loaders' rates exclude their first batches.
  std::shuffle(order.begin(), order.end(), rng);
  epoch();
  std::uint64_t samples = 0;
  double timed = 0;
  std::vector<double> rates;  // per epoch, for the spread
  const std::size_t per_epoch = n / batch_size * batch_size;
  while (timed < seconds) {
    std::shuffle(order.begin(), order.end(), rng);  // outside the timed gather
    const auto t0 = bench_clock::now();
    epoch();
    const double s = seconds_since(t0);
    timed += s;
    samples += per_epoch;
    rates.push_back(static_cast<double>(per_epoch) / s);
  }
  std::sort(rates.begin(), rates.end());
  const double median = rates[rates.size() / 2];
  std::uint64_t sum = 0;
  for (auto c : checksum) sum += c;
  std::printf("samples_per_s %.1f\nepochs %zu\nepoch_spread %.3f\nchecksum %llu\n", static_cast<double>(samples) / timed,
              rates.size(), (rates.back() - rates.front()) / median, static_cast<unsigned long long>(sum));
  for (auto* p : buffers) std::free(p);
  return 0;
}

// Steady-state rate of a sluice loader: the first batches (thread start, first-touch of the ring
// slots) are excluded; epochs follow one another until `seconds` have passed.
template <class Loader>
int time_loader(Loader& loader, double seconds) {
  std::uint64_t samples = 0, checksum = 0, warmup = 3;
  bench_clock::time_point start;
  double elapsed = 0;
  for (std::uint64_t e = 0; elapsed < seconds; ++e) {
    for (auto& b : loader.epoch(e)) {
      if (warmup > 0) {
        if (--warmup == 0) start = bench_clock::now();
        continue;
      }
      samples += b.size();
      checksum += static_cast<std::uint64_t>(b.bytes()[5]) + static_cast<std::uint64_t>(b.labels()[0]);
      elapsed = seconds_since(start);
      if (elapsed >= seconds) break;
    }
  }
  std::printf("samples_per_s %.1f\nchecksum %llu\n", static_cast<double>(samples) / elapsed,
              static_cast<unsigned long long>(checksum));
  auto st = loader.stats();
  std::printf("stall_fraction %.3f\n", st.stall_fraction);
  return 0;
}

int raw(const char* records_path, const char* labels_path, std::size_t workers, double seconds) {
  // populate: the mapping is faulted in at open (the roofline does the same), so every epoch
  // runs at its steady-state speed.
  sluice::io::fixed_records reader{records_path, {.record_bytes = record_bytes, .labels_path = labels_path,
                                                  .map = {.advice = sluice::io::access::random, .populate = sluice::io::populate_mode::now}}};
  auto loader = sluice::from(sluice::sample::shuffle{reader.size(), {.seed = 7}}) | sluice::read(reader) |
                sluice::collate({.batch = batch_size, .drop_last = true}) |
                sluice::prefetch(2, {.workers = workers});
  return time_loader(loader, seconds);
}

#ifdef SLUICE_PEERS_HAVE_JPEG
// The packed JPEG set as a sluice record reader: record i is bytes [off[i], off[i+1]) of the pack.
class packed_jpegs {
 public:
  using reader_concept = sluice::reader_tag;
  packed_jpegs(const char* pack, const char* offsets, const char* labels)
      : pack_(pack), offsets_(offsets), labels_(labels) {
    count_ = offsets_.size() / 8 - 1;
    if (offsets_.size() % 8 != 0 || offsets_.size() < 16 || labels_.size() != count_ * 8)
      throw sluice::format_error(offsets, {.offset = 0}, "offsets and labels do not describe the same images");
    if (offset(count_) > pack_.size())
      throw sluice::format_error(offsets, {.record = count_}, "last offset is past the end of the pack");
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::string_view path() const noexcept { return pack_.path(); }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    const std::uint64_t a = offset(i), b = offset(i + 1);
    if (a > b || b > pack_.size()) throw sluice::format_error(std::string(pack_.path()), {.record = i}, "bad offsets");
    return {pack_.data() + a, b - a};
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const noexcept {
    std::int64_t v;
    std::memcpy(&v, labels_.data() + i * 8, 8);
    return v;
  }

 private:
  [[nodiscard]] std::uint64_t offset(std::size_t i) const noexcept {
    std::uint64_t v;
    std::memcpy(&v, offsets_.data() + i * 8, 8);
    return v;
  }
  sluice::io::mapped_file pack_, offsets_, labels_;
  std::size_t count_ = 0;
};

#ifndef SLUICE_PEERS_HAVE_DECODE_STAGE
// Until stage/decode.hpp is merged: a record that decodes itself straight into its batch slot
// (collate's deferred sample), which is what the decode stage does.
struct jpeg_sample {
  std::uint64_t id;
  std::int64_t label;
  std::span<const std::byte> encoded;
  const sluice::codecs::jpeg* codec;
  [[nodiscard]] std::size_t size_bytes() const noexcept { return codec->output_bytes(); }
  void write_into(std::span<std::byte> dst, const sluice::sample_context& ctx) const { codec->decode(encoded, dst, ctx); }
};
#endif

int jpeg(const char* pack, const char* offsets, const char* labels, std::size_t workers, double seconds,
         bool rrc = false) {
  const packed_jpegs reader{pack, offsets, labels};
  const sluice::codecs::jpeg codec = rrc ? sluice::codecs::jpeg{{.width = 224,
                                                                  .height = 224,
                                                                  .mode = sluice::codecs::fit::random_resized_crop,
                                                                  .random_flip = true}}
                                         : sluice::codecs::jpeg{{.width = 64, .height = 64}};
#ifdef SLUICE_PEERS_HAVE_DECODE_STAGE
  auto decode = sluice::decode(codec);
#else
  auto decode = sluice::map([&codec](sluice::record_view r) { return jpeg_sample{r.id, r.label, r.data, &codec}; });
#endif
  auto loader = sluice::from(sluice::sample::shuffle{reader.size(), {.seed = 7}}) | sluice::read(reader) | decode |
                sluice::collate({.batch = batch_size, .drop_last = true}) |
                sluice::prefetch(2, {.workers = workers});
  return time_loader(loader, seconds);
}
#endif

#ifdef SLUICE_PEERS_HAVE_WEIGHTED
int weighted(const char* weights_path, double seconds) {
  std::size_t bytes = 0;
  const auto* w = reinterpret_cast<const double*>(map_whole(weights_path, bytes));
  const std::span<const double> weights(w, bytes / sizeof(double));
  std::uint64_t draws = 0, checksum = 0;
  // Ids are drawn 256 at a time with draw_n (the same ids as at(epoch, pos), with the table's
  // cache misses overlapped), as a consumer of a whole epoch's order would.
  std::vector<std::uint64_t> ids(256);
  auto start = bench_clock::now();
  for (std::uint64_t epoch = 0; seconds_since(start) < seconds; ++epoch) {
    const sluice::sample::weighted sampler{weights, {.seed = 7}};
    const std::size_t n = sampler.size(epoch);
    for (std::size_t pos = 0; pos < n; pos += ids.size()) {
      const std::span<std::uint64_t> chunk(ids.data(), std::min<std::size_t>(ids.size(), n - pos));
      sampler.draw_n(epoch, pos, chunk);
      for (const std::uint64_t id : chunk) checksum += id;
    }
    draws += n;
  }
  std::printf("samples_per_s %.1f\nchecksum %llu\n", static_cast<double>(draws) / seconds_since(start),
              static_cast<unsigned long long>(checksum));
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "roofline" && (argc == 5 || argc == 6))
    return roofline(argv[2], argv[3], std::atof(argv[4]), argc == 6 ? static_cast<std::size_t>(std::atoi(argv[5])) : 1);
  if (mode == "raw" && argc == 6)
    return raw(argv[2], argv[3], static_cast<std::size_t>(std::atoi(argv[4])), std::atof(argv[5]));
#ifdef SLUICE_PEERS_HAVE_JPEG
  if ((mode == "jpeg" || mode == "rrc") && argc == 7)
    return jpeg(argv[2], argv[3], argv[4], static_cast<std::size_t>(std::atoi(argv[5])), std::atof(argv[6]),
                mode == "rrc");
#else
  if (mode == "jpeg" || mode == "rrc") {
    std::fprintf(stderr, "sluice_peers: built without codec/jpeg.hpp or TurboJPEG\n");
    return 3;
  }
#endif
#ifdef SLUICE_PEERS_HAVE_WEIGHTED
  if (mode == "weighted" && argc == 4) return weighted(argv[2], std::atof(argv[3]));
#else
  if (mode == "weighted") {
    std::fprintf(stderr, "sluice_peers: built without sample/alias.hpp\n");
    return 3;
  }
#endif
  std::fprintf(stderr,
               "usage: %s roofline records.u8 labels.i64 <seconds> [threads]\n"
               "       %s raw records.u8 labels.i64 <workers> <seconds>\n"
               "       %s jpeg images.jpgpack images.offsets images.labels <workers> <seconds>\n"
               "       %s rrc images.jpgpack images.offsets images.labels <workers> <seconds>\n"
               "       %s weighted weights.f64 <seconds>\n", argv[0], argv[0], argv[0], argv[0], argv[0]);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "sluice_peers: %s\n", e.what());
  return 1;
}
