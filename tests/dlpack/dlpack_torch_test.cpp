// Batches into libtorch through DLPack: at::fromDLPack(sluice::to_dlpack(...)) shares the slot's
// memory, and the slot returns to the ring when the last tensor (view) made from it dies.
//
// sluice's header comes first on purpose: it includes <dlpack/dlpack.h>, and ATen's own copy of
// the same header (same include guard) must then be skipped cleanly. The example
// examples/libtorch_trainer includes them the other way round.
#include "sluice/core/dlpack.hpp"
#include "sluice/sluice.hpp"

#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <doctest/doctest.h>

#include <cstdint>

#include "test_util.hpp"

using namespace sluice;

namespace {
using sluice_test::mem_reader;
std::uint8_t record_byte(std::uint64_t i, std::size_t j) { return static_cast<std::uint8_t>((i * 31 + j) & 0xff); }
}  // namespace

TEST_CASE("at::fromDLPack shares the slot memory and reads the batch's values") {
  mem_reader r(32, 6);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 8, .shape = {2, 3}}) | prefetch(2);
  for (auto& b : loader.epoch(0)) {
    at::Tensor data = at::fromDLPack(to_dlpack(b, "data"));
    at::Tensor label = at::fromDLPack(to_dlpack(b, "label"));
    CHECK(data.data_ptr() == static_cast<void*>(b.field("data").data()));
    CHECK(label.data_ptr() == static_cast<void*>(b.field("label").data()));
    CHECK((data.scalar_type() == at::kByte));
    CHECK((label.scalar_type() == at::kLong));
    CHECK(data.device().is_cpu());
    CHECK((data.sizes() == at::IntArrayRef({8, 2, 3})));
    CHECK(data.is_contiguous());
    CHECK((label.sizes() == at::IntArrayRef({8})));
    auto px = data.accessor<std::uint8_t, 3>();
    auto lb = label.accessor<std::int64_t, 1>();
    for (std::int64_t i = 0; i < 8; ++i) {
      const std::uint64_t id = b.ids()[static_cast<std::size_t>(i)];
      CHECK(lb[i] == static_cast<std::int64_t>(id % 10));
      for (std::int64_t j = 0; j < 6; ++j) CHECK(px[i][j / 3][j % 3] == record_byte(id, static_cast<std::size_t>(j)));
    }
  }
}

TEST_CASE("float data: values equal, and a torch op reads the same memory") {
  mem_reader r(16, 4);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 4, .output = dtype::f32}) | prefetch(2);
  for (auto& b : loader.epoch(0)) {
    at::Tensor data = at::fromDLPack(to_dlpack(b, "data"));
    CHECK((data.scalar_type() == at::kFloat));
    const auto want = b.data<float>();
    const at::Tensor copy = at::from_blob(const_cast<float*>(want.data()), {4, 4}, at::kFloat).clone();
    CHECK(at::equal(data, copy));
    CHECK(data.sum().item<double>() == doctest::Approx(copy.sum().item<double>()));
  }
}

TEST_CASE("the slot returns to the ring when the last tensor dies, the batch handle first") {
  // Depth 1 and one worker: the ring has 2 slots, and no budget to grow by for kept batches.
  mem_reader r(64, 12);
  auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 8}) |
                prefetch(1, {.workers = 1, .hold_budget = 0});
  auto range = loader.epoch(0);
  auto it = range.begin();
  at::Tensor data0 = at::fromDLPack(to_dlpack(*it, "data"));
  at::Tensor label0 = at::fromDLPack(to_dlpack(*it, "label"));
  void* slot0 = data0.data_ptr();
  ++it;  // batch 0's handle is dropped first
  REQUIRE(it->index() == 1);
  at::Tensor data1 = at::fromDLPack(to_dlpack(*it, "data"));
  // The tensors of batch 0 hold slot 0: batch 2 cannot be prepared.
  CHECK_THROWS_AS(++it, usage_error);
  // A view keeps the storage (and so the slot) after the tensors it came from are gone.
  at::Tensor view = data0.slice(0, 2, 4);
  data0 = at::Tensor();
  label0 = at::Tensor();
  CHECK_THROWS_AS(++it, usage_error);
  CHECK(view.data_ptr() == static_cast<std::uint8_t*>(slot0) + 2 * 12);
  CHECK(view[0][0].item<std::uint8_t>() == record_byte(2, 0));
  view = at::Tensor();  // the last tensor of batch 0: slot 0 returns
  ++it;
  REQUIRE(it != range.end());
  CHECK(it->index() == 2);
  CHECK(static_cast<void*>(it->field("data").data()) == slot0);
  CHECK(it->ids()[0] == 16);
  data1 = at::Tensor();
  ++it;
  REQUIRE(it != range.end());
  CHECK(it->index() == 3);
}

TEST_CASE("tensors outlive the loader") {
  at::Tensor data;
  {
    mem_reader r(32, 8);
    auto loader = from(sample::sequential{r.size()}) | read(r) | collate({.batch = 4}) | prefetch(2);
    for (auto& b : loader.epoch(0)) {
      data = at::fromDLPack(to_dlpack(b, "data"));
      break;
    }
  }
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 8; ++j)
      CHECK(data[i][j].item<std::uint8_t>() == record_byte(static_cast<std::uint64_t>(i), static_cast<std::size_t>(j)));
  data = at::Tensor();  // releases the slot and destroys the ring
}
