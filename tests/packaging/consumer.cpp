// What a user writes: a shard, a shuffled pipeline, one epoch.
#include <sluice/sluice.hpp>
#if SLUICE_WITH_ZLIB
#include <sluice/io/idx.hpp>  // an optional part: needs sluice::zlib
#endif

#include <cstdio>
#include <filesystem>
#include <vector>

int main() {
  auto path = (std::filesystem::temp_directory_path() / "sluice-consumer.sluice").string();
  {
    sluice::io::shard_writer w(path);
    std::vector<std::byte> rec(48);
    for (int i = 0; i < 100; ++i) {
      rec[0] = static_cast<std::byte>(i);
      w.add(rec, i % 4);
    }
    w.finish();
  }
  sluice::io::shard_reader shard(path);
  auto loader = sluice::from(sluice::sample::shuffle(shard.size(), {.seed = 1})) | sluice::read(shard) |
                sluice::collate({.batch = 16}) | sluice::prefetch(2);
  std::size_t n = 0;
  for (auto& b : loader.epoch(0)) n += b.size();
  std::filesystem::remove(path);
  std::printf("consumer saw %zu samples\n", n);
#if SLUICE_WITH_ZLIB
  std::printf("consumer has sluice::zlib (idx_reader is %zu bytes)\n", sizeof(sluice::io::idx_reader));
#endif
  return n == 100 ? 0 : 1;
}
