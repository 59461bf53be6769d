// The device batch operations against the host reference, bit for bit (class std within 1e-12).
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/core/batch_ops.hpp"
#include "sluice/cuda/batch_ops.cuh"

namespace {

using sluice::cuda::check;

using gpu_test::device_buffer;

template <class T>
std::vector<T> download(const T* d, std::size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  check(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync D2H");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return h;
}

template <class Out>
std::uint64_t bits_of(Out v) {
  if constexpr (std::is_same_v<Out, float>) {
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  } else {
    return v.bits;
  }
}

// Compares device normalize with the host at element offset `offset` (misaligned when not 0 mod 4).
template <class Out>
bool normalize_matches(std::size_t n, std::size_t offset, int channels, cudaStream_t s) {
  std::mt19937 g(static_cast<unsigned>(n * 31 + offset * 7 + channels));
  std::vector<std::uint8_t> in(n);
  for (auto& v : in) v = static_cast<std::uint8_t>(g() & 0xff);
  sluice::normalize_params p{channels};
  for (int c = 0; c < channels; ++c) p.set(c, 100.0f + 13.7f * c, 0.002f + 0.37f * c);  // channel 0 reaches 77500: fp16 overflows
  std::vector<Out> expect(n);
  sluice::normalize(std::span<const std::uint8_t>(in), std::span<Out>(expect), p);

  device_buffer d_in(n + offset), d_out((n + offset) * sizeof(Out));
  check(cudaMemcpyAsync(d_in.as<std::uint8_t>(offset), in.data(), n, cudaMemcpyHostToDevice, s), "H2D");
  sluice::cuda::normalize(d_in.as<std::uint8_t>(offset), d_out.as<Out>(offset), n, p, s);
  const auto got = download(d_out.as<Out>(offset), n, s);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (bits_of(got[i]) != bits_of(expect[i])) {
      if (bad++ < 3)
        std::printf("  mismatch n=%zu offset=%zu C=%d at %zu: device %llx host %llx\n", n, offset, channels, i,
                    static_cast<unsigned long long>(bits_of(got[i])), static_cast<unsigned long long>(bits_of(expect[i])));
    }
  return bad == 0;
}

template <class Out>
bool cast_matches(std::size_t n, std::size_t offset, cudaStream_t s) {
  std::mt19937 g(static_cast<unsigned>(n + offset));
  std::uniform_real_distribution<float> mag(-40.0f, 40.0f);
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float e = std::ldexp(1.0f, static_cast<int>(mag(g) * 0.5f));  // 2^-20 .. 2^20
    in[i] = (g() & 1 ? -1.0f : 1.0f) * e * (1.0f + static_cast<float>(g() % 1000) / 1000.0f);
    if (i % 997 == 5) in[i] = 65520.0f;                          // the fp16 tie to infinity
    if (i % 1009 == 6) in[i] = std::numeric_limits<float>::max(); // overflows bf16 too
    if (i % 1013 == 7) in[i] = -std::numeric_limits<float>::infinity();  // not an overflow
  }
  std::vector<Out> expect(n);
  const std::uint64_t expect_overflow = sluice::cast_count_overflow(std::span<const float>(in), std::span<Out>(expect));
  device_buffer d_in((n + offset) * 4), d_out((n + offset) * sizeof(Out)), d_count(8);
  check(cudaMemcpyAsync(d_in.as<float>(offset), in.data(), n * 4, cudaMemcpyHostToDevice, s), "H2D");
  sluice::cuda::cast_count_overflow(d_in.as<float>(offset), d_out.as<Out>(offset), n, d_count.as<unsigned long long>(), s);
  const auto got = download(d_out.as<Out>(offset), n, s);
  const auto count = download(d_count.as<unsigned long long>(), 1, s);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (got[i].bits != expect[i].bits && bad++ < 3)
      std::printf("  mismatch n=%zu at %zu (in %g): device %x host %x\n", n, i, in[i], got[i].bits, expect[i].bits);
  if (count[0] != expect_overflow)
    std::printf("  overflow count n=%zu: device %llu host %llu\n", n, count[0], static_cast<unsigned long long>(expect_overflow));
  return bad == 0 && count[0] == expect_overflow;
}

}  // namespace

GPU_TEST("normalize uint8 -> float matches the host bit for bit (aligned, misaligned, tails, 1/3/4 channels)") {
  sluice::cuda::stream s;
  for (int channels : {1, 3, 4})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{4099}, std::size_t{3 * 224 * 224 * 8 + 7}})
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) CHECK(normalize_matches<float>(n, offset, channels, s.get()));
}

GPU_TEST("normalize uint8 -> fp16 and bf16 matches the host bit for bit") {
  sluice::cuda::stream s;
  for (int channels : {3, 8})
    for (std::size_t n : {std::size_t{7}, std::size_t{1 << 20}, std::size_t{3 * 224 * 224 * 4 + 3}})
      for (std::size_t offset : {std::size_t{0}, std::size_t{2}}) {
        CHECK(normalize_matches<sluice::f16>(n, offset, channels, s.get()));
        CHECK(normalize_matches<sluice::bf16>(n, offset, channels, s.get()));
      }
}

GPU_TEST("cast float -> fp16/bf16 counts overflows like the host, and fp16 overflows where bf16 does not") {
  sluice::cuda::stream s;
  for (std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{1001}, std::size_t{(1 << 22) + 3}})
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      CHECK(cast_matches<sluice::f16>(n, offset, s.get()));
      CHECK(cast_matches<sluice::bf16>(n, offset, s.get()));
    }
  // Directly: values beyond fp16's range overflow fp16 only.
  const std::vector<float> in = {1.0f, 7e4f, -1e5f, 65504.0f};
  device_buffer d_in(16), d_h(8), d_b(8), d_count(16);
  check(cudaMemcpyAsync(d_in.p, in.data(), 16, cudaMemcpyHostToDevice, s.get()), "H2D");
  sluice::cuda::cast_count_overflow(d_in.as<float>(), d_h.as<sluice::f16>(), 4, d_count.as<unsigned long long>(), s.get());
  sluice::cuda::cast_count_overflow(d_in.as<float>(), d_b.as<sluice::bf16>(), 4, d_count.as<unsigned long long>(1), s.get());
  const auto counts = download(d_count.as<unsigned long long>(), 2, s.get());
  CHECK(counts[0] == 2);
  CHECK(counts[1] == 0);
}

GPU_TEST("label histogram and class-count std on the device match the host") {
  sluice::cuda::stream s;
  for (std::size_t classes : {std::size_t{1}, std::size_t{10}, std::size_t{1000}, std::size_t{5000}}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{256}, std::size_t{100000}}) {
      std::mt19937 g(static_cast<unsigned>(classes * 7 + n));
      std::vector<std::int64_t> labels(n);
      for (auto& l : labels) l = static_cast<std::int64_t>(g() % (classes + 2)) - 1;  // -1 and `classes` are outside
      std::vector<std::uint32_t> expect(classes);
      const std::uint64_t outside = sluice::label_histogram(std::span<const std::int64_t>(labels), std::span<std::uint32_t>(expect));
      const double expect_std = sluice::class_count_std(expect);
      device_buffer d_labels(n * 8), d_counts(classes * 4), d_outside(8), d_std(8);
      check(cudaMemcpyAsync(d_labels.p, labels.data(), n * 8, cudaMemcpyHostToDevice, s.get()), "H2D");
      sluice::cuda::label_histogram(d_labels.as<std::int64_t>(), n, d_counts.as<std::uint32_t>(), classes,
                                    d_outside.as<unsigned long long>(), s.get());
      sluice::cuda::class_count_std(d_counts.as<std::uint32_t>(), classes, d_std.as<double>(), s.get());
      const auto counts = download(d_counts.as<std::uint32_t>(), classes, s.get());
      const auto got_outside = download(d_outside.as<unsigned long long>(), 1, s.get());
      const auto got_std = download(d_std.as<double>(), 1, s.get());
      CHECK(counts == expect);
      CHECK(got_outside[0] == outside);
      const double tol = 1e-12 * (expect_std > 1 ? expect_std : 1);
      CHECK(std::abs(got_std[0] - expect_std) <= tol);
      if (std::abs(got_std[0] - expect_std) > tol) std::printf("  std: device %.17g host %.17g\n", got_std[0], expect_std);
    }
  }
}
