// DLPack export of batch tensors: what the DLTensor says, and how long the slot stays held.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "sluice/core/dlpack.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/field_collate.hpp"
#include "sluice/stage/to_device.hpp"
#include "test_util.hpp"

static_assert(SLUICE_HAS_DLPACK(), "tests/dlpack is built only where dlpack/dlpack.h is");

using namespace sluice;

namespace {
using sluice_test::mem_reader;

// Calls the deleter once, when the test is done with the export (also on a failed CHECK).
struct owned_export {
  DLManagedTensor* m = nullptr;
  explicit owned_export(DLManagedTensor* p) : m(p) {}
  owned_export(const owned_export&) = delete;
  owned_export& operator=(const owned_export&) = delete;
  ~owned_export() { reset(); }
  void reset() {
    if (m != nullptr) m->deleter(std::exchange(m, nullptr));
  }
  const DLTensor& t() const { return m->dl_tensor; }
};

std::vector<std::int64_t> dims(const DLTensor& t) { return {t.shape, t.shape + t.ndim}; }
std::vector<std::int64_t> strides(const DLTensor& t) { return {t.strides, t.strides + t.ndim}; }
bool same_dtype(DLDataType a, std::uint8_t code, std::uint8_t bits) {
  return a.code == code && a.bits == bits && a.lanes == 1;
}
// Byte j of mem_reader's record i.
std::uint8_t record_byte(std::uint64_t i, std::size_t j) { return static_cast<std::uint8_t>((i * 31 + j) & 0xff); }

// A reader of detection samples: an 8-byte "image" and i % 3 boxes of 4 floats (value 100*i + k).
using det = schema<field<"image", std::uint8_t>, field<"boxes", float, variable>>;
struct det_reader {
  using reader_concept = reader_tag;
  std::vector<std::uint8_t> pixels;
  std::vector<std::vector<float>> boxes;
  explicit det_reader(std::size_t n) : pixels(n * 8), boxes(n) {
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < (i % 3) * 4; ++k) boxes[i].push_back(static_cast<float>(100 * i + k));
  }
  std::size_t size() const { return boxes.size(); }
  fields_sample<det> fields(std::size_t i) const {
    fields_sample<det> s{.id = i, .origin = "memory"};
    s.set<"image">(std::span<const std::uint8_t>(pixels.data() + i * 8, 8));
    s.set<"boxes">(std::span<const float>(boxes[i]));
    return s;
  }
  std::string_view path() const { return "memory"; }
};
}  // namespace

TEST_CASE("dtype codes follow the DLPack header") {
  CHECK(same_dtype(detail::dlpack_dtype(dtype::u8), kDLUInt, 8));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::u16), kDLUInt, 16));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::u32), kDLUInt, 32));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::u64), kDLUInt, 64));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::i8), kDLInt, 8));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::i16), kDLInt, 16));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::i32), kDLInt, 32));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::i64), kDLInt, 64));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::f16), kDLFloat, 16));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::f32), kDLFloat, 32));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::f64), kDLFloat, 64));
  CHECK(same_dtype(detail::dlpack_dtype(dtype::bf16), kDLBfloat, 16));
#if SLUICE_DLPACK_KDLBOOL
  CHECK(same_dtype(detail::dlpack_dtype(dtype::boolean), kDLBool, 8));
#else
  CHECK(same_dtype(detail::dlpack_dtype(dtype::boolean), kDLUInt, 8));
#endif
}

TEST_CASE("data and label of a classic batch export in place, with shape, strides and dtype") {
  mem_reader r(64, 12);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 8, .shape = {3, 4}}) | prefetch(2);
  std::size_t seen = 0;
  for (auto& b : loader.epoch(0)) {
    owned_export data(to_dlpack(b, "data"));
    owned_export label(to_dlpack(b, "label"));
    REQUIRE(data.m != nullptr);
    CHECK(data.m->manager_ctx != nullptr);
    CHECK(data.t().data == static_cast<void*>(b.field("data").data()));
    CHECK(data.t().byte_offset == 0);
    CHECK(data.t().device.device_type == kDLCPU);
    CHECK(data.t().device.device_id == 0);
    CHECK(same_dtype(data.t().dtype, kDLUInt, 8));
    CHECK(dims(data.t()) == std::vector<std::int64_t>{8, 3, 4});
    CHECK(strides(data.t()) == std::vector<std::int64_t>{12, 4, 1});

    CHECK(label.t().data == static_cast<void*>(b.field("label").data()));
    CHECK(label.t().device.device_type == kDLCPU);
    CHECK(same_dtype(label.t().dtype, kDLInt, 64));
    CHECK(dims(label.t()) == std::vector<std::int64_t>{8});
    CHECK(strides(label.t()) == std::vector<std::int64_t>{1});

    const auto* px = static_cast<const std::uint8_t*>(data.t().data);
    const auto* lb = static_cast<const std::int64_t*>(label.t().data);
    for (std::size_t i = 0; i < b.size(); ++i) {
      CHECK(lb[i] == static_cast<std::int64_t>(b.ids()[i] % 10));
      for (std::size_t j = 0; j < 12; ++j) CHECK(px[i * 12 + j] == record_byte(b.ids()[i], j));
    }
    // By index: the collator's order ("data" first).
    owned_export first(to_dlpack(b, std::size_t{0}));
    CHECK(first.t().data == data.t().data);
    ++seen;
  }
  CHECK(seen == 8);
}

TEST_CASE("float output exports as kDLFloat 32") {
  mem_reader r(16, 4);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 4, .output = dtype::f32}) | prefetch(2);
  for (auto& b : loader.epoch(0)) {
    owned_export data(to_dlpack(b, "data"));
    CHECK(same_dtype(data.t().dtype, kDLFloat, 32));
    CHECK(dims(data.t()) == std::vector<std::int64_t>{4, 4});
    const auto* v = static_cast<const float*>(data.t().data);
    const auto want = b.data<float>();
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(v[i] == want[i]);
  }
}

TEST_CASE("misuse is a usage_error: no such tensor, index past the end, empty handle") {
  mem_reader r(16, 4);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 4}) | prefetch(2);
  for (auto& b : loader.epoch(0)) {
    CHECK_THROWS_AS((void)to_dlpack(b, "image"), usage_error);
    CHECK_THROWS_AS((void)to_dlpack(b, std::size_t{2}), usage_error);
    batch moved = std::move(b);
    CHECK_THROWS_AS((void)to_dlpack(b, "data"), usage_error);
    break;
  }
  batch empty;
  CHECK_THROWS_AS((void)to_dlpack(empty, "data"), usage_error);
}

TEST_CASE("an export holds the slot after the batch is dropped, and its deleter returns it") {
  // Depth 1 and one worker: the ring has 2 slots, and no budget to grow by for kept batches.
  mem_reader r(64, 12);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 8}) |
                prefetch(1, {.workers = 1, .hold_budget = 0});
  auto range = loader.epoch(0);
  auto it = range.begin();
  REQUIRE(it->index() == 0);
  owned_export e0(to_dlpack(*it, "data"));
  ++it;  // batch 0's handle is gone; the export still holds slot 0
  REQUIRE(it->index() == 1);
  owned_export e1(to_dlpack(*it, "label"));
  // Batch 2 would go into slot 0, which the export of batch 0 holds: the loader says so.
  CHECK_THROWS_AS(++it, usage_error);
  // Batch 0's bytes are intact: no worker wrote the held slot.
  const auto* px = static_cast<const std::uint8_t*>(e0.t().data);
  for (std::uint64_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 12; ++j) CHECK(px[i * 12 + j] == record_byte(i, j));

  void* slot0 = e0.t().data;
  e0.reset();  // the last holder of slot 0: it returns to the ring
  ++it;
  REQUIRE(it != range.end());
  CHECK(it->index() == 2);
  CHECK(static_cast<void*>(it->field("data").data()) == slot0);  // batch 2 refilled slot 0
  CHECK(it->ids()[0] == 16);
  // Batch 1's handle went with the failed ++it; its export holds slot 1 until now.
  e1.reset();
  ++it;
  REQUIRE(it != range.end());
  CHECK(it->index() == 3);
}

TEST_CASE("deleters run on another thread while the loader goes on") {
  // Each batch's export is checked and released by a thread of its own, concurrently with the
  // next batch's delivery and the workers' fills; at most two slots are held, the ring has four.
  mem_reader r(256, 16);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 8}) | prefetch(2, {.workers = 2});
  std::thread consumer;
  std::atomic<std::size_t> bad{0};
  std::size_t batches = 0;
  for (auto& b : loader.epoch(0)) {
    DLManagedTensor* m = to_dlpack(b, "data");
    std::vector<std::uint64_t> ids(b.ids().begin(), b.ids().end());
    b.reset();
    if (consumer.joinable()) consumer.join();
    consumer = std::thread([m, ids = std::move(ids), &bad] {
      const auto* px = static_cast<const std::uint8_t*>(m->dl_tensor.data);
      for (std::size_t i = 0; i < ids.size(); ++i)
        for (std::size_t j = 0; j < 16; ++j) bad += px[i * 16 + j] != record_byte(ids[i], j);
      m->deleter(m);
    });
    ++batches;
  }
  if (consumer.joinable()) consumer.join();
  CHECK(batches == 32);
  CHECK(bad.load() == 0);
}

TEST_CASE("the deleter may run after the loader is destroyed") {
  std::optional<owned_export> data, label;
  {
    mem_reader r(32, 8);
    auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 4}) | prefetch(2);
    auto range = loader.epoch(0);
    auto it = range.begin();
    ++it;  // batch 1
    data.emplace(to_dlpack(*it, "data"));
    label.emplace(to_dlpack(*it, "label"));
    // The reader's memory goes too, but the batch holds copies of its records.
  }
  const auto* px = static_cast<const std::uint8_t*>(data->t().data);
  const auto* lb = static_cast<const std::int64_t*>(label->t().data);
  for (std::uint64_t i = 0; i < 4; ++i) {
    CHECK(lb[i] == static_cast<std::int64_t>((4 + i) % 10));
    for (std::size_t j = 0; j < 8; ++j) CHECK(px[i * 8 + j] == record_byte(4 + i, j));
  }
  data.reset();
  label.reset();  // the last holder: releases the slot and destroys the ring
}

TEST_CASE("a field batch exports a ragged field and its offsets, by compile-time name") {
  det_reader r(12);
  auto loader = from(sample::sequential{r.size()}) | read(r) |
                collate({.batch = 4}, stack<"image">{}, ragged<"boxes">{.row = {4}}) | prefetch(2);
  std::size_t batches = 0;
  for (auto& b : loader.epoch(0)) {
    owned_export boxes(to_dlpack<"boxes">(b));
    owned_export offsets(to_dlpack<"boxes.offsets">(b));
    owned_export image(to_dlpack<"image">(b));
    std::int64_t rows = 0;
    for (auto id : b.ids()) rows += static_cast<std::int64_t>(id % 3);

    CHECK(boxes.t().data == static_cast<void*>(b.field("boxes").data()));
    CHECK(same_dtype(boxes.t().dtype, kDLFloat, 32));
    CHECK(dims(boxes.t()) == std::vector<std::int64_t>{rows, 4});
    CHECK(strides(boxes.t()) == std::vector<std::int64_t>{4, 1});
    CHECK(offsets.t().data == static_cast<void*>(b.field("boxes.offsets").data()));
    CHECK(same_dtype(offsets.t().dtype, kDLInt, 64));
    CHECK(dims(offsets.t()) == std::vector<std::int64_t>{5});
    CHECK(same_dtype(image.t().dtype, kDLUInt, 8));
    CHECK(dims(image.t()) == std::vector<std::int64_t>{4, 8});

    const auto* off = static_cast<const std::int64_t*>(offsets.t().data);
    const auto* val = static_cast<const float*>(boxes.t().data);
    CHECK(off[0] == 0);
    CHECK(off[4] == rows);
    for (std::size_t i = 0; i < 4; ++i) {
      const std::uint64_t id = b.ids()[i];
      REQUIRE(off[i + 1] - off[i] == static_cast<std::int64_t>(id % 3));
      for (std::int64_t k = 0; k < (off[i + 1] - off[i]) * 4; ++k)
        CHECK(val[off[i] * 4 + k] == static_cast<float>(100 * id + static_cast<std::uint64_t>(k)));
    }
    ++batches;
  }
  CHECK(batches == 3);
}

TEST_CASE("the host backend of to_device exports its copy as kDLCPU memory") {
  mem_reader r(32, 8);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 4}) | to_device() | prefetch(2);
  for (auto& b : loader.epoch(0)) {
    owned_export data(to_dlpack(b, "data"));
    REQUIRE(b.slot().device_data != nullptr);
    CHECK(b.slot().device_id == -1);
    CHECK(data.t().data == b.field("data").device_data());
    CHECK(data.t().device.device_type == kDLCPU);
    CHECK(data.t().device.device_id == 0);
    const auto* px = static_cast<const std::uint8_t*>(data.t().data);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 8; ++j) CHECK(px[i * 8 + j] == record_byte(b.ids()[i], j));
  }
}

namespace {
// A ring of one slot that counts its releases, for what a loader cannot show without a GPU.
struct counting_ring final : detail::ring_base {
  std::atomic<int> releases{0};
  void release(detail::slot_base&) noexcept override { ++releases; }
};
}  // namespace

TEST_CASE("a CUDA device copy exports as kDLCUDA with the device ordinal, the last holder releases once") {
  auto ring = std::make_shared<counting_ring>();
  alignas(64) static std::byte host[256];
  alignas(64) static std::byte device[256];  // stands in for device memory: only the pointer is used
  detail::slot_base slot;
  slot.data = host;
  slot.layout.add("x", dtype::bf16, {2, 3});
  slot.layout.add("y", dtype::boolean, {2});
  slot.count = 2;
  slot.device_data = device;
  slot.device_id = 1;
  slot.holders.store(1);
  batch b(ring, &slot);
  owned_export x(to_dlpack(b, "x"));
  owned_export y(to_dlpack(b, "y"));
  CHECK(x.t().device.device_type == kDLCUDA);
  CHECK(x.t().device.device_id == 1);
  CHECK(x.t().data == static_cast<void*>(device + slot.layout.tensors[0].offset));
  CHECK(same_dtype(x.t().dtype, kDLBfloat, 16));
  CHECK(y.t().data == static_cast<void*>(device + slot.layout.tensors[1].offset));
  CHECK(slot.holders.load() == 3);
  b.reset();
  x.reset();
  CHECK(ring->releases.load() == 0);
  y.reset();
  CHECK(ring->releases.load() == 1);
  CHECK(slot.holders.load() == 0);
}
