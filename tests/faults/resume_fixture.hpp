// The training pipeline of the kill-and-resume test: resume_child.cpp runs it until the test
// SIGKILLs it, and resume_test.cpp builds it again to resume from the state the child saved.
//
// A file of fixed-size records (written by write_dataset), shuffled (sampler seed 7), each record
// xored with noise drawn from counter_rng(augmentation seed, epoch, id) as collate writes it (so
// the augmentation seed shows in the bytes), batches of 32, two workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "sluice/sluice.hpp"

namespace resume_fixture {

inline constexpr std::uint64_t records = 3000;
inline constexpr std::size_t record_bytes = 48;
inline constexpr std::size_t batch = 32;
inline constexpr std::uint64_t sampler_seed = 7;
inline constexpr std::uint64_t epoch = 1;

// Record i's byte j is a hash of (i, j): no two records alike.
inline void write_dataset(const std::string& path) {
  std::vector<char> bytes(records * record_bytes);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(sluice::splitmix64(i) & 0xff);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A record whose bytes are xored with noise keyed on (seed, epoch, id) when written into the batch.
struct noisy_record {
  std::uint64_t id = 0;
  std::int64_t label = -1;
  std::span<const std::byte> src;
  [[nodiscard]] std::size_t size_bytes() const noexcept { return src.size(); }
  void write_into(std::span<std::byte> dst, const sluice::sample_context& ctx) const {
    sluice::counter_rng rng(ctx.seed, ctx.epoch, ctx.id);
    for (std::size_t i = 0; i < src.size(); ++i)
      dst[i] = src[i] ^ static_cast<std::byte>(rng() & 0xff);
  }
};

inline auto make_loader(const sluice::io::fixed_records& data, std::uint64_t augmentation_seed,
                        std::uint64_t shuffle_seed = sampler_seed) {
  return sluice::from(sluice::sample::shuffle{data.size(), {.seed = shuffle_seed}}) | sluice::read(data) |
         sluice::map([](sluice::record_view r, const sluice::sample_context&) {
           return noisy_record{r.id, r.label, r.data};
         }) |
         sluice::collate({.batch = batch}) | sluice::prefetch(2, {.workers = 2, .seed = augmentation_seed});
}

// FNV-1a over a batch's ids and bytes.
inline std::uint64_t digest(const sluice::batch& b) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto eat = [&](unsigned char c) { h = (h ^ c) * 0x100000001b3ULL; };
  for (std::uint64_t id : b.ids())
    for (int k = 0; k < 8; ++k) eat(static_cast<unsigned char>(id >> (8 * k)));
  for (std::byte x : b.bytes()) eat(static_cast<unsigned char>(x));
  return h;
}

}  // namespace resume_fixture
