// sluice/cuda/resident.hpp — a small dataset held in device memory, shuffled and batched there.
//
// For MNIST- or CIFAR-sized data the fastest loader copies nothing per epoch: resident_dataset
// copies N fixed-size records and their labels to the device once, computes each epoch's order
// there from the same counter-based keys as the host samplers (epoch(e, sampler) takes
// sequential, shuffle, or distributed over either), and gathers each batch there, optionally
// normalised bit for bit as the host normalises. Written on Thrust alone: with nvcc it runs on a
// CUDA stream; with a host compiler and Thrust's CPP backend (sluice::thrust_host) "device"
// memory is host memory, which is how its tests run without a GPU.
// Guarantees: batch k holds sampler.at(e, k * batch + j) at position j; memory is allocated in the
// constructor only; a batch's views stay valid until the next batch is gathered.
// Errors: bad sizes, options or samplers are usage_errors saying which; device failures surface as
// Thrust's exceptions.
// Threads: not thread-safe: one consumer. Work is enqueued on options.stream without host
// synchronisation. Streams and every rule: docs/device.md.
#pragma once

#include <thrust/detail/config.h>

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA && !defined(__CUDACC__)
#error "sluice/cuda/resident.hpp: Thrust's CUDA backend needs nvcc. For the host backend define THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP (CMake: link sluice::thrust_host)."
#endif

#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/batch_ops.hpp"
#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/random.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/sample/shuffle.hpp"

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#include <cuda_runtime_api.h>
#define SLUICE_RESIDENT_ON_CUDA 1
#else
#define SLUICE_RESIDENT_ON_CUDA 0
#endif

namespace sluice::cuda {

struct resident_options {
  std::size_t batch = 256;
  bool drop_last = false;                     // leave out a last batch shorter than `batch`
  bool bytes = true;                          // gather the records' bytes into batch.bytes
  std::optional<normalize_params> normalize = std::nullopt;  // also write batch.normalized (float), same pass
#if SLUICE_RESIDENT_ON_CUDA
  cudaStream_t stream = nullptr;  // where every gather is enqueued (nullptr: legacy default stream)
#endif
};

// One batch: views of the dataset's batch buffers (device memory; host memory on a host backend).
struct resident_batch {
  std::uint64_t epoch = 0;
  std::size_t index = 0;                  // k: batch k of the epoch
  std::size_t size = 0;                   // samples in this batch (the last may be short)
  std::size_t record_bytes = 0;
  const std::uint8_t* bytes = nullptr;    // size * record_bytes, or nullptr without options.bytes
  const float* normalized = nullptr;      // size * record_bytes, or nullptr without options.normalize
  const std::int64_t* labels = nullptr;   // size
  const std::uint64_t* ids = nullptr;     // size: the dataset ids, in the epoch's order
};

namespace detail {

// Position -> dataset id for one epoch (one rank): sample::distributed's mapping over a sequential
// or Feistel order. Built on the host, applied on the device.
struct resident_order {
  feistel_permutation perm;
  bool shuffled = false;
  std::uint64_t n = 0, start = 0, rank = 0, world = 1;
  SLUICE_HOST_DEVICE std::uint64_t operator()(std::uint64_t pos) const {
    std::uint64_t g = start + rank + pos * world;
    if (g >= n) g = start + (g - n) % (n - start);  // tail::pad wraps to the run's first positions
    return shuffled ? perm(g) : g;
  }
};

struct resident_labels {
  const std::int64_t* labels;
  SLUICE_HOST_DEVICE std::int64_t operator()(std::uint64_t id) const { return labels[id]; }
};

SLUICE_HOST_DEVICE inline float resident_normalize(std::uint8_t x, float mean, float inv_std) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(__fsub_rn(static_cast<float>(x), mean), inv_std);  // never fused: the host's rounding
#else
  const float diff = static_cast<float>(x) - mean;
  return diff * inv_std;
#endif
}

#if SLUICE_RESIDENT_ON_CUDA
// One thread a word (the widest of 8/4/2/1 bytes that divides record_bytes): consecutive threads
// copy consecutive words of one record, so reads and writes coalesce.
template <class Word>
struct gather_words {
  const Word* src;
  Word* dst;
  const std::uint64_t* ids;
  std::uint64_t words;  // per record
  __host__ __device__ void operator()(std::uint64_t i) const {
    const std::uint64_t r = i / words, w = i - r * words;
    dst[i] = src[ids[r] * words + w];
  }
};
struct gather_normalized {
  const std::uint8_t* src;
  float* dst;
  const std::uint64_t* ids;
  std::uint64_t record_bytes;
  normalize_params p;
  __host__ __device__ void operator()(std::uint64_t i) const {
    const std::uint64_t r = i / record_bytes, b = i - r * record_bytes;
    const int c = static_cast<int>(b % static_cast<std::uint64_t>(p.channels));
    dst[i] = resident_normalize(src[ids[r] * record_bytes + b], p.mean[c], p.inv_std[c]);
  }
};
#else
// On a host backend, one call a record: a memcpy (and one pass of normalisation) per record.
struct gather_records {
  const std::uint8_t* src;
  std::uint8_t* dst;
  float* dst_f;  // nullptr: no normalisation
  const std::uint64_t* ids;
  std::size_t record_bytes;
  const normalize_params* p;
  void operator()(std::size_t r) const {
    const std::uint8_t* in = src + ids[r] * record_bytes;
    if (dst != nullptr) std::memcpy(dst + r * record_bytes, in, record_bytes);
    if (dst_f != nullptr) {
      float* out = dst_f + r * record_bytes;
      const int channels = p->channels;
      if (channels == 1) {  // the common grey case, a loop the compiler vectorises
        const float mean = p->mean[0], inv_std = p->inv_std[0];
        for (std::size_t b = 0; b < record_bytes; ++b) out[b] = resident_normalize(in[b], mean, inv_std);
      } else {
        int c = 0;
        for (std::size_t b = 0; b < record_bytes; ++b) {
          out[b] = resident_normalize(in[b], p->mean[c], p->inv_std[c]);
          c = c + 1 == channels ? 0 : c + 1;
        }
      }
    }
  }
};
#endif

}  // namespace detail

class resident_dataset;

// One epoch's order on the device and its batches. Iterate it (input range: each step gathers the
// next batch into the dataset's buffers) or ask for batch(k) in any order (resume mid-epoch).
class resident_epoch {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = resident_batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    const resident_batch& operator*() const { return e_->batch(k_); }
    const resident_batch* operator->() const { return &e_->batch(k_); }
    iterator& operator++() {
      ++k_;
      return *this;
    }
    void operator++(int) { ++k_; }
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.k_ == b.k_; }

   private:
    friend class resident_epoch;
    iterator(resident_epoch* e, std::size_t k) : e_(e), k_(k) {}
    resident_epoch* e_ = nullptr;
    std::size_t k_ = 0;
  };

  [[nodiscard]] iterator begin() { return {this, 0}; }
  [[nodiscard]] iterator end() { return {this, batches_}; }
  [[nodiscard]] std::size_t size() const noexcept { return batches_; }     // batches
  [[nodiscard]] std::size_t samples() const noexcept { return samples_; }  // in the order (before drop_last)
  [[nodiscard]] std::uint64_t number() const noexcept { return epoch_; }
  // Gathers batch k (k < size()) unless it is the batch gathered last.
  const resident_batch& batch(std::size_t k);
  // The epoch's dataset ids, samples() of them, on the device.
  [[nodiscard]] const std::uint64_t* ids() const;
  // The same, copied to the host (for checks and logs; synchronises).
  [[nodiscard]] std::vector<std::uint64_t> ids_on_host() const;

 private:
  friend class resident_dataset;
  resident_epoch(resident_dataset& ds, std::uint64_t epoch, std::size_t samples, std::size_t batches,
                 std::uint64_t generation)
      : ds_(&ds), epoch_(epoch), samples_(samples), batches_(batches), generation_(generation) {}
  void check_current() const;
  resident_dataset* ds_;
  std::uint64_t epoch_;
  std::size_t samples_, batches_;
  std::uint64_t generation_;
};

class resident_dataset {
 public:
  // Copies n = records.size() / record_bytes records and their n labels to the device.
  resident_dataset(std::span<const std::byte> records, std::size_t record_bytes, std::span<const std::int64_t> labels,
                   resident_options o = {})
      : record_bytes_(record_bytes), o_(std::move(o)) {
    if (record_bytes == 0) throw usage_error("sluice: resident_dataset: record_bytes is 0");
    if (records.size() % record_bytes != 0)
      throw usage_error("sluice: resident_dataset: " + std::to_string(records.size()) +
                        " bytes of records are not a whole number of " + std::to_string(record_bytes) +
                        "-byte records");
    n_ = records.size() / record_bytes;
    if (labels.size() != n_)
      throw usage_error("sluice: resident_dataset: " + std::to_string(labels.size()) + " labels for " +
                        std::to_string(n_) + " records (one label a record)");
    if (o_.batch == 0) throw usage_error("sluice: resident_dataset: batch is 0");
    if (o_.normalize && record_bytes % static_cast<std::size_t>(o_.normalize->channels) != 0)
      throw usage_error("sluice: resident_dataset: normalize has " + std::to_string(o_.normalize->channels) +
                        " channels, which do not divide record_bytes " + std::to_string(record_bytes));
    if (!o_.bytes && !o_.normalize)
      throw usage_error("sluice: resident_dataset: options gather nothing (bytes is false and no normalize)");
    if (n_ > 0) {  // (an empty span's data() may be null: Thrust's copy would still touch it)
      const auto* first = reinterpret_cast<const std::uint8_t*>(records.data());
      records_.assign(first, first + records.size());
      labels_.assign(labels.data(), labels.data() + labels.size());
    }
    order_.resize(n_);
    const std::size_t cap = o_.batch < n_ ? o_.batch : n_;
    if (o_.bytes) bytes_.resize(cap * record_bytes);
    if (o_.normalize) floats_.resize(cap * record_bytes);
    batch_labels_.resize(cap);
  }
  resident_dataset(std::span<const std::uint8_t> records, std::size_t record_bytes,
                   std::span<const std::int64_t> labels, resident_options o = {})
      : resident_dataset(std::as_bytes(records), record_bytes, labels, std::move(o)) {}

  resident_dataset(const resident_dataset&) = delete;  // epochs point at their dataset
  resident_dataset& operator=(const resident_dataset&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] std::size_t record_bytes() const noexcept { return record_bytes_; }
  [[nodiscard]] const resident_options& options() const noexcept { return o_; }
  // Device bytes held: records, labels, the order and the batch buffers.
  [[nodiscard]] std::size_t device_bytes() const noexcept {
    return records_.size() + labels_.size() * 8 + order_.size() * 8 + bytes_.size() + floats_.size() * 4 +
           batch_labels_.size() * 8;
  }
#if SLUICE_RESIDENT_ON_CUDA
  [[nodiscard]] cudaStream_t stream() const noexcept { return o_.stream; }
#endif

  // Computes epoch e's order on the device; the epoch's batches are then gathered one at a time.
  resident_epoch epoch(std::uint64_t e) { return epoch(e, sample::sequential{n_}); }
  resident_epoch epoch(std::uint64_t e, const sample::sequential& s) {
    check_size(s.dataset_size());
    return start(e, n_, detail::resident_order{{}, false, n_, 0, 0, 1});
  }
  resident_epoch epoch(std::uint64_t e, const sample::shuffle& s) {
    check_size(s.dataset_size());
    return start(e, n_, detail::resident_order{feistel_permutation(n_, mix_keys(s.seed(), e)), true, n_, 0, 0, 1});
  }
  resident_epoch epoch(std::uint64_t e, const sample::distributed<sample::sequential>& s) {
    check_size(s.inner().dataset_size());
    const auto& d = s.options();
    return start(e, s.size(e), detail::resident_order{{}, false, n_, d.start, d.rank, d.world});
  }
  resident_epoch epoch(std::uint64_t e, const sample::distributed<sample::shuffle>& s) {
    check_size(s.inner().dataset_size());
    const auto& d = s.options();
    return start(e, s.size(e),
                 detail::resident_order{feistel_permutation(n_, mix_keys(s.inner().seed(), e)), true, n_, d.start,
                                        d.rank, d.world});
  }

 private:
  friend class resident_epoch;

  auto policy() const {
#if SLUICE_RESIDENT_ON_CUDA
    return thrust::cuda::par_nosync.on(o_.stream);
#else
    return thrust::device;
#endif
  }
  void check_size(std::uint64_t sampler_n) const {
    if (sampler_n != n_)
      throw usage_error("sluice: resident_dataset: the sampler covers " + std::to_string(sampler_n) +
                        " samples but the dataset holds " + std::to_string(n_));
  }
  resident_epoch start(std::uint64_t e, std::size_t samples, const detail::resident_order& order) {
    ++generation_;
    gathered_ = false;
    if (samples > 0)
      thrust::transform(policy(), thrust::counting_iterator<std::uint64_t>(0),
                        thrust::counting_iterator<std::uint64_t>(samples), order_.begin(), order);
    const std::size_t batches = o_.drop_last ? samples / o_.batch : (samples + o_.batch - 1) / o_.batch;
    return resident_epoch(*this, e, samples, batches, generation_);
  }

  const resident_batch& gather(std::uint64_t epoch, std::size_t samples, std::size_t k) {
    if (gathered_ && batch_.index == k) return batch_;
    const std::size_t first = k * o_.batch;
    const std::size_t count = samples - first < o_.batch ? samples - first : o_.batch;
    const std::uint64_t* ids = thrust::raw_pointer_cast(order_.data()) + first;
    std::uint8_t* bytes = o_.bytes ? thrust::raw_pointer_cast(bytes_.data()) : nullptr;
    float* floats = o_.normalize ? thrust::raw_pointer_cast(floats_.data()) : nullptr;
    const std::uint8_t* src = thrust::raw_pointer_cast(records_.data());
    const auto policy = this->policy();
#if SLUICE_RESIDENT_ON_CUDA
    if (bytes != nullptr) {
      if (record_bytes_ % 8 == 0) gather_as<std::uint64_t>(policy, src, bytes, ids, count);
      else if (record_bytes_ % 4 == 0) gather_as<std::uint32_t>(policy, src, bytes, ids, count);
      else if (record_bytes_ % 2 == 0) gather_as<std::uint16_t>(policy, src, bytes, ids, count);
      else gather_as<std::uint8_t>(policy, src, bytes, ids, count);
    }
    if (floats != nullptr)
      thrust::for_each_n(policy, thrust::counting_iterator<std::uint64_t>(0), count * record_bytes_,
                         detail::gather_normalized{src, floats, ids, record_bytes_, *o_.normalize});
#else
    thrust::for_each_n(policy, thrust::counting_iterator<std::size_t>(0), count,
                       detail::gather_records{src, bytes, floats, ids, record_bytes_,
                                              o_.normalize ? &*o_.normalize : nullptr});
#endif
    thrust::transform(policy, order_.begin() + static_cast<std::ptrdiff_t>(first),
                      order_.begin() + static_cast<std::ptrdiff_t>(first + count), batch_labels_.begin(),
                      detail::resident_labels{thrust::raw_pointer_cast(labels_.data())});
    batch_ = resident_batch{epoch, k, count, record_bytes_, bytes, floats,
                            thrust::raw_pointer_cast(batch_labels_.data()), ids};
    gathered_ = true;
    return batch_;
  }
#if SLUICE_RESIDENT_ON_CUDA
  template <class Word, class Policy>
  void gather_as(const Policy& policy, const std::uint8_t* src, std::uint8_t* dst, const std::uint64_t* ids,
                 std::size_t count) const {
    const std::uint64_t words = record_bytes_ / sizeof(Word);
    thrust::for_each_n(policy, thrust::counting_iterator<std::uint64_t>(0), count * words,
                       detail::gather_words<Word>{reinterpret_cast<const Word*>(src), reinterpret_cast<Word*>(dst),
                                                  ids, words});
  }
#endif

  std::size_t n_ = 0, record_bytes_;
  resident_options o_;
  thrust::device_vector<std::uint8_t> records_;
  thrust::device_vector<std::int64_t> labels_;
  thrust::device_vector<std::uint64_t> order_;
  thrust::device_vector<std::uint8_t> bytes_;
  thrust::device_vector<float> floats_;
  thrust::device_vector<std::int64_t> batch_labels_;
  resident_batch batch_;
  bool gathered_ = false;
  std::uint64_t generation_ = 0;
};

inline void resident_epoch::check_current() const {
  if (generation_ != ds_->generation_)
    throw usage_error("sluice: resident_epoch " + std::to_string(epoch_) +
                      " was replaced by a later resident_dataset::epoch() call (one epoch at a time)");
}
inline const resident_batch& resident_epoch::batch(std::size_t k) {
  check_current();
  if (k >= batches_)
    throw usage_error("sluice: resident_epoch::batch: batch " + std::to_string(k) + " of an epoch of " +
                      std::to_string(batches_) + " batches");
  return ds_->gather(epoch_, samples_, k);
}
inline const std::uint64_t* resident_epoch::ids() const {
  check_current();
  return thrust::raw_pointer_cast(ds_->order_.data());
}
inline std::vector<std::uint64_t> resident_epoch::ids_on_host() const {
  check_current();
  std::vector<std::uint64_t> out(samples_);
#if SLUICE_RESIDENT_ON_CUDA
  // The order was computed on the dataset's stream, which may be non-blocking: wait for it first.
  if (const cudaError_t rc = cudaStreamSynchronize(ds_->o_.stream); rc != cudaSuccess)
    throw error(std::string("sluice: resident_epoch::ids_on_host: cudaStreamSynchronize failed: ") +
                cudaGetErrorString(rc));
#endif
  thrust::copy(ds_->order_.begin(), ds_->order_.begin() + static_cast<std::ptrdiff_t>(samples_), out.begin());
  return out;
}

}  // namespace sluice::cuda
