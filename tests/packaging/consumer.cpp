// What a user writes: a shard, a shuffled pipeline, one epoch.
#include <sluice/sluice.hpp>
#if SLUICE_WITH_ZLIB
#include <sluice/io/idx.hpp>  // an optional part: needs sluice::zlib
#endif
#if SLUICE_WITH_PNG
#include <sluice/codec/png.hpp>  // an optional part: needs sluice::png
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
#if SLUICE_WITH_PNG
  {  // libpng is linked and called: a non-PNG input is its error, as a format_error
    const sluice::codecs::png dec({.width = 4, .height = 4});
    std::vector<std::byte> out(dec.output_bytes()), junk(16, std::byte{7});
    try {
      dec.decode(junk, out, {});
      return 1;
    } catch (const sluice::format_error&) {
      std::printf("consumer has sluice::png\n");
    }
  }
#endif
#if SLUICE_WITH_ZLIB
  std::printf("consumer has sluice::zlib (idx_reader is %zu bytes)\n", sizeof(sluice::io::idx_reader));
#endif
  return n == 100 ? 0 : 1;
}
