// sluice/cuda/resident.hpp on Thrust's CUDA backend: the checks of tests/resident (which run the
// same header on the CPP backend) on a GPU. Each epoch's device-computed order equals the host
// sampler's at every position; batch bytes (every gather word width), labels and ids equal a host
// gather; normalised floats equal sluice::normalize bit for bit; short last batch, drop_last, rank
// shards; all work on a non-default stream.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/core/batch_ops.hpp"
#include "sluice/cuda/resident.hpp"
#include "../../resident/resident_data.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/sample/shuffle.hpp"

namespace {

using sluice::cuda::check;
using sluice::cuda::resident_dataset;

using sluice_resident_test::data;

template <class T>
std::vector<T> download(const T* d, std::size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  if (n == 0) return h;
  check(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync D2H");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return h;
}

std::vector<std::uint8_t> host_gather(const data& d, const std::vector<std::uint64_t>& ids) {
  std::vector<std::uint8_t> out(ids.size() * d.rb);
  for (std::size_t j = 0; j < ids.size(); ++j) std::memcpy(out.data() + j * d.rb, d.bytes.data() + ids[j] * d.rb, d.rb);
  return out;
}

// Every batch against the host sampler; returns the number of samples seen (0 on a mismatch).
template <class Sampler>
std::size_t epoch_matches(const data& d, resident_dataset& ds, const Sampler& s, std::uint64_t e, std::size_t batch,
                          bool drop_last, const sluice::normalize_params* p, cudaStream_t st) {
  const std::size_t total = s.size(e);
  auto ep = ds.epoch(e, s);
  if (ep.samples() != total || ep.size() != (drop_last ? total / batch : (total + batch - 1) / batch)) return 0;
  std::size_t seen = 0, k = 0;
  for (const auto& b : ep) {
    std::vector<std::uint64_t> ids(b.size);
    for (std::size_t j = 0; j < b.size; ++j) ids[j] = s.at(e, k * batch + j);
    const std::size_t want = total - k * batch < batch ? total - k * batch : batch;
    if (b.size != want || b.index != k) return 0;
    if (download(b.ids, b.size, st) != ids) return 0;
    const auto ref = host_gather(d, ids);
    if (b.bytes != nullptr && download(b.bytes, ref.size(), st) != ref) return 0;
    const auto labels = download(b.labels, b.size, st);
    for (std::size_t j = 0; j < b.size; ++j)
      if (labels[j] != d.labels[ids[j]]) return 0;
    if (p != nullptr) {
      std::vector<float> want_f(ref.size());
      sluice::normalize(std::span<const std::uint8_t>(ref), std::span<float>(want_f), *p);
      const auto got = download(b.normalized, ref.size(), st);
      if (std::memcmp(got.data(), want_f.data(), got.size() * sizeof(float)) != 0) return 0;
    }
    seen += b.size;
    ++k;
  }
  return seen;
}

}  // namespace

GPU_TEST("resident: the device order equals sample::shuffle's at every position") {
  sluice::cuda::stream st;
  for (std::size_t n : {1u, 2u, 3u, 7u, 64u, 1000u, 4097u, 60000u}) {
    data d(n, 3);
    resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 32, .stream = st.get()});
    for (std::uint64_t seed : {0ull, 7ull, 123456789ull}) {
      sluice::sample::shuffle s{n, {.seed = seed}};
      for (std::uint64_t e : {0ull, 1ull, 5ull}) {
        const auto ids = ds.epoch(e, s).ids_on_host();
        std::size_t mismatches = ids.size() == n ? 0 : 1;
        for (std::uint64_t p = 0; p < n && p < ids.size(); ++p) mismatches += ids[p] != s.at(e, p);
        CHECK(mismatches == 0);
      }
    }
  }
}

GPU_TEST("resident: batches equal the host gather, every word width, short last batch") {
  sluice::cuda::stream st;
  for (std::size_t rb : {1u, 2u, 5u, 12u, 784u}) {
    data d(1000, rb);
    resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 64, .stream = st.get()});
    sluice::sample::shuffle s{1000, {.seed = 42}};
    CHECK(epoch_matches(d, ds, s, 0, 64, false, nullptr, st.get()) == 1000);
    CHECK(epoch_matches(d, ds, s, 1, 64, false, nullptr, st.get()) == 1000);
    CHECK(epoch_matches(d, ds, sluice::sample::sequential{1000}, 2, 64, false, nullptr, st.get()) == 1000);
  }
}

GPU_TEST("resident: drop_last and normalised floats bit for bit") {
  sluice::cuda::stream st;
  data d(1000, 12);
  sluice::normalize_params p{3};
  p.set(0, 123.7f, 58.4f).set(1, 116.3f, 57.1f).set(2, 103.5f, 57.4f);
  sluice::sample::shuffle s{1000, {.seed = 3}};
  resident_dataset dropped(d.bytes, d.rb, d.labels, {.batch = 64, .drop_last = true, .normalize = p, .stream = st.get()});
  CHECK(epoch_matches(d, dropped, s, 1, 64, true, &p, st.get()) == 960);
  resident_dataset floats_only(d.bytes, d.rb, d.labels, {.batch = 100, .bytes = false, .normalize = p, .stream = st.get()});
  CHECK(epoch_matches(d, floats_only, s, 2, 100, false, &p, st.get()) == 1000);
}

GPU_TEST("resident: rank shards follow sample::distributed") {
  using sluice::sample::distributed;
  sluice::cuda::stream st;
  data d(1001, 4);
  resident_dataset ds(d.bytes, d.rb, d.labels, {.batch = 50, .stream = st.get()});
  for (auto tail : {sluice::sample::tail::pad, sluice::sample::tail::drop}) {
    std::size_t total = 0;
    for (std::uint64_t rank = 0; rank < 3; ++rank) {
      distributed<sluice::sample::shuffle> s{sluice::sample::shuffle{1001, {.seed = 5}},
                                             {.rank = rank, .world = 3, .tail = tail, .start = 17}};
      total += epoch_matches(d, ds, s, 2, 50, false, nullptr, st.get());
    }
    CHECK(total == (tail == sluice::sample::tail::pad ? (1001 - 17 + 2) / 3 * 3 : (1001 - 17) / 3 * 3));
  }
}
