// pin() and to_device() in a real pipeline, on the host backend (host memory stands in for pinned
// and device memory): collate writes each sample once, straight into pinned slots; each batch is
// copied once; errors from a capped pool reach the consumer.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "sluice/core/pipeline.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/stage/collate.hpp"
#include "sluice/stage/map.hpp"
#include "sluice/stage/pin.hpp"
#include "sluice/stage/prefetch.hpp"
#include "sluice/stage/to_device.hpp"

namespace {

constexpr std::size_t sample_bytes = 96;

std::byte pattern(std::uint64_t id, std::size_t j) { return static_cast<std::byte>((id * 131 + j * 7) & 0xff); }

struct write_log {
  std::atomic<std::uint64_t> writes{0}, into_pinned{0};
  const sluice::pin_stage* pinned = nullptr;
};

// A sample that writes itself (like a decoder): counts every write and checks where it lands.
struct counted_sample {
  std::uint64_t id = 0;
  std::int64_t label = 0;
  write_log* log = nullptr;
  [[nodiscard]] std::size_t size_bytes() const noexcept { return sample_bytes; }
  void write_into(std::span<std::byte> dst, const sluice::sample_context&) const {
    log->writes.fetch_add(1, std::memory_order_relaxed);
    if (log->pinned->owns(dst.data(), dst.size())) log->into_pinned.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t j = 0; j < dst.size(); ++j) dst[j] = pattern(id, j);
  }
};

}  // namespace

TEST_CASE("pin + to_device (host backend): one write per sample into pinned slots, one copy per batch") {
  const std::uint64_t n = 1000, batch = 32;
  write_log log;
  auto pinned = sluice::pin({.cap_bytes = 1 << 20});
  auto transfer = sluice::to_device();
  log.pinned = &pinned;
  auto loader = sluice::from(sluice::sample::sequential(n)) |
                sluice::map([&log](sluice::sample_id id) {
                  return counted_sample{id.value, static_cast<std::int64_t>(id.value % 10), &log};
                }) |
                sluice::collate({.batch = batch}) | pinned | transfer | sluice::prefetch(2, {.workers = 3});
  std::uint64_t batch_bytes = 0;  // every tensor of every batch: data, then int64 labels
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::uint64_t seen = 0, batches = 0;
    for (auto& b : loader.epoch(epoch)) {
      batch_bytes += b.slot().used_bytes;
      CHECK(b.slot().used_bytes == (b.size() * sample_bytes + 63) / 64 * 64 + b.size() * 8);
      // The labels travel in the same copy: the device tensor holds them too.
      const auto dev_labels = b.field("label");
      CHECK(std::memcmp(dev_labels.device_data(), b.labels().data(), b.size() * 8) == 0);
      const auto* dev = static_cast<const std::byte*>(b.device_data());
      REQUIRE(dev != nullptr);
      CHECK(static_cast<const void*>(dev) != static_cast<const void*>(b.bytes().data()));  // a separate copy
      CHECK(b.ready_event() == nullptr);
      CHECK(pinned.owns(b.bytes().data(), b.bytes().size()));
      bool same = true;
      for (std::size_t i = 0; i < b.size(); ++i)
        for (std::size_t j = 0; j < sample_bytes; ++j) same = same && dev[i * sample_bytes + j] == pattern(b.ids()[i], j);
      CHECK(same);
      seen += b.size();
      ++batches;
    }
    CHECK(seen == n);
    CHECK(batches == (n + batch - 1) / batch);
  }
  // Exactly one write per sample, every one straight into pinned memory: no staging copy.
  CHECK(log.writes == 3 * n);
  CHECK(log.into_pinned == 3 * n);
  CHECK(pinned.stats().bytes_in_place == batch_bytes);
  // Exactly one host-to-device copy of each batch's bytes.
  CHECK(transfer.stats().bytes_copied == batch_bytes);
  CHECK(transfer.stats().batches == 3 * ((n + batch - 1) / batch));
  // Memory is reused: slots are allocated once per ring slot, device blocks at most once per
  // batch alive (depth + workers), whatever the number of batches.
  const auto dev_pool = transfer.stats().pool;
  CHECK(dev_pool.allocations <= 2 + 3);
  CHECK(dev_pool.reuses >= dev_pool.acquires - dev_pool.allocations);
  CHECK(pinned.stats().slot_allocations <= 2 + 3);
  CHECK(pinned.stats().pool.held_bytes <= (2 + 3) * ((batch * (sample_bytes + 8) + 64 + 65535) / 65536 * 65536));
}

TEST_CASE("a pinned pool too small for a batch fails that batch with a clear error, not a crash") {
  write_log log;
  auto pinned = sluice::pin({.cap_bytes = 1024});  // a batch needs 32 * 96 bytes
  log.pinned = &pinned;
  auto loader = sluice::from(sluice::sample::sequential(100)) |
                sluice::map([&log](sluice::sample_id id) { return counted_sample{id.value, 0, &log}; }) |
                sluice::collate({.batch = 32}) | pinned | sluice::to_device() | sluice::prefetch(1, {.workers = 1});
  bool threw = false;
  try {
    for (auto& b : loader.epoch(0)) (void)b;
  } catch (const sluice::stage_error& e) {
    threw = true;
    CHECK(std::string(e.what()).find("cap") != std::string::npos);
  }
  CHECK(threw);
}

TEST_CASE("pinned memory is returned and trimmed when loaders go away") {
  write_log log;
  auto pinned = sluice::pin({.idle_epochs = 1});
  log.pinned = &pinned;
  {
    auto loader = sluice::from(sluice::sample::sequential(64)) |
                  sluice::map([&log](sluice::sample_id id) { return counted_sample{id.value, 0, &log}; }) |
                  sluice::collate({.batch = 16}) | pinned | sluice::prefetch(2, {.workers = 2});
    for (auto& b : loader.epoch(0)) (void)b;
    CHECK(pinned.stats().pool.in_use_bytes > 0);
  }
  const auto after = pinned.stats().pool;
  CHECK(after.in_use_bytes == 0);
  CHECK(after.held_bytes > 0);  // idle, ready for the next loader
  pinned.pool().end_epoch();
  pinned.pool().end_epoch();
  CHECK(pinned.stats().pool.held_bytes == 0);
}
