// sluice/stage/collate.hpp — `collate({...})`: samples -> one contiguous batch, written once.
//
// Collate is where bytes are finally copied: each sample is written straight into its place in
// the batch slot (which is pinned memory when a transfer follows). A sample that can write itself
// (a decoder: `write_into`) decodes directly into the slot; a byte view is copied with memcpy, or
// converted to float32 with per-channel normalisation, y = (x * scale - mean[c]) / std[c].
//
//   sluice::collate({.batch = 256})                                     // uint8, as stored
//   sluice::collate({.batch = 256, .output = sluice::dtype::f32,
//                    .mean = {0.286f}, .std = {0.353f}, .channels = 1})  // normalised floats
//
// Every sample of a batch must have the same size (the first sample of the first epoch sets it,
// or `.sample_bytes` states it); a different size is an error naming the sample. `drop_last`
// drops a final partial batch. The batch count of an epoch is ceil(n / batch) (or floor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/batch.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"

namespace sluice {

enum class layout : std::uint8_t { hwc, chw };

struct collate_options {
  std::size_t batch = 256;
  bool drop_last = false;
  dtype output = dtype::u8;
  // float32 output only:
  float scale = 1.0f / 255.0f;
  std::vector<float> mean{};  // per channel; empty: 0
  std::vector<float> std{};   // per channel; empty: 1
  std::size_t channels = 1;
  sluice::layout layout = layout::hwc;
  // Bytes of one input sample; 0 = learn it from the first sample.
  std::size_t sample_bytes = 0;
};

class collate_stage {
 public:
  static constexpr std::string_view name = "collate";

  explicit collate_stage(collate_options o) : opt_(std::move(o)) {
    if (opt_.batch == 0) throw usage_error("sluice: collate({.batch = 0}): a batch needs at least one sample");
    if (opt_.output == dtype::f32) {
      if (opt_.channels == 0) throw usage_error("sluice: collate: channels must be at least 1");
      auto check = [&](const std::vector<float>& v, const char* what) {
        if (!v.empty() && v.size() != opt_.channels && v.size() != 1)
          throw usage_error(std::string("sluice: collate: ") + what + " has " + std::to_string(v.size()) +
                            " values for " + std::to_string(opt_.channels) + " channels");
      };
      check(opt_.mean, "mean");
      check(opt_.std, "std");
      a_.resize(opt_.channels);
      b_.resize(opt_.channels);
      for (std::size_t c = 0; c < opt_.channels; ++c) {
        float m = opt_.mean.empty() ? 0.f : opt_.mean[opt_.mean.size() == 1 ? 0 : c];
        float s = opt_.std.empty() ? 1.f : opt_.std[opt_.std.size() == 1 ? 0 : c];
        if (!(s > 0.f)) throw usage_error("sluice: collate: std must be positive");
        a_[c] = opt_.scale / s;
        b_[c] = -m / s;
      }
    }
  }

  [[nodiscard]] const collate_options& options() const noexcept { return opt_; }
  [[nodiscard]] std::size_t batch_size() const noexcept { return opt_.batch; }
  [[nodiscard]] dtype output() const noexcept { return opt_.output; }
  // Bytes one sample takes in the batch, given its input size.
  [[nodiscard]] std::size_t output_bytes(std::size_t input_bytes) const noexcept {
    return input_bytes * dtype_size(opt_.output);
  }

  template <collatable S>
  static std::size_t input_bytes(const S& s) {
    if constexpr (bytes_sample<S>) return s.bytes().size();
    else return s.size_bytes();
  }

  // Writes one sample into `dst` (output_bytes(input_bytes) bytes). `scratch` is a per-worker
  // buffer used only when a self-writing sample must be converted to float.
  template <collatable S>
  void write(const S& s, std::size_t expected_input_bytes, std::byte* dst, const sample_context& ctx,
             std::vector<std::byte>& scratch) const {
    std::size_t n = input_bytes(s);
    if (n != expected_input_bytes)
      throw usage_error("sample is " + std::to_string(n) + " bytes but this pipeline's samples are " +
                        std::to_string(expected_input_bytes) +
                        " bytes; resize them to one size before collate");
    if constexpr (bytes_sample<S>) {
      auto src = s.bytes();
      if (opt_.output == dtype::u8) std::memcpy(dst, src.data(), n);
      else to_float(reinterpret_cast<const std::uint8_t*>(src.data()), n, reinterpret_cast<float*>(dst));
    } else {
      if (opt_.output == dtype::u8) {
        s.write_into(std::span<std::byte>(dst, n), ctx);
      } else {
        if (scratch.size() < n) scratch.resize(n);  // once per worker, at warm-up
        s.write_into(std::span<std::byte>(scratch.data(), n), ctx);
        to_float(reinterpret_cast<const std::uint8_t*>(scratch.data()), n, reinterpret_cast<float*>(dst));
      }
    }
  }

 private:
  void to_float(const std::uint8_t* x, std::size_t n, float* y) const noexcept {
    const std::size_t ch = opt_.channels;
    if (ch == 1) {
      const float a = a_[0], b = b_[0];
      for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]) * a + b;
    } else if (opt_.layout == layout::chw) {
      const std::size_t plane = n / ch;
      for (std::size_t c = 0; c < ch; ++c) {
        const float a = a_[c], b = b_[c];
        for (std::size_t i = 0; i < plane; ++i) y[c * plane + i] = static_cast<float>(x[c * plane + i]) * a + b;
      }
    } else {
      for (std::size_t i = 0; i < n; i += ch)
        for (std::size_t c = 0; c < ch && i + c < n; ++c) y[i + c] = static_cast<float>(x[i + c]) * a_[c] + b_[c];
    }
  }

  collate_options opt_;
  std::vector<float> a_, b_;
};

inline collate_stage collate(collate_options o = {}) { return collate_stage(std::move(o)); }

}  // namespace sluice
