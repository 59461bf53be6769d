// The demo's two samplers over the long-tailed subset (labels of images outside it are -1):
//   uniform_subset  every kept image once per epoch, in a seeded Feistel order (sluice::sample::shuffle
//                   over the subset, mapped to image ids);
//   class-balanced  draws with replacement, class first (uniformly: inverse-frequency weights),
//                   then an image of that class; as many draws per epoch as the subset has images.
// When sluice's own sample/class_balanced.hpp is available it is used for the second; otherwise a
// minimal equivalent defined here (same distribution, no alias table since classes are equal).
#pragma once

#include <sluice/core/concepts.hpp>
#include <sluice/core/random.hpp>
#include <sluice/sample/shuffle.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#if __has_include(<sluice/sample/class_balanced.hpp>)
#  include <sluice/sample/class_balanced.hpp>
#  define DEMO_HAS_SLUICE_CLASS_BALANCED 1
#else
#  define DEMO_HAS_SLUICE_CLASS_BALANCED 0
#endif

namespace demo {

class uniform_subset {
 public:
  using sampler_concept = sluice::sampler_tag;
  uniform_subset(std::span<const std::int64_t> labels, std::uint64_t seed)
      : ids_(std::make_shared<std::vector<std::uint64_t>>()), order_(0, {.seed = seed}) {
    for (std::uint64_t i = 0; i < labels.size(); ++i)
      if (labels[i] >= 0) ids_->push_back(i);
    order_ = sluice::sample::shuffle(ids_->size(), {.seed = seed});
  }
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return ids_->size(); }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const noexcept {
    return (*ids_)[static_cast<std::size_t>(order_.at(epoch, pos))];
  }

 private:
  std::shared_ptr<std::vector<std::uint64_t>> ids_;
  sluice::sample::shuffle order_;
};

// Minimal class-balanced sampler (used only when sluice's is not available).
class minimal_class_balanced {
 public:
  using sampler_concept = sluice::sampler_tag;
  minimal_class_balanced(std::span<const std::int64_t> labels, std::uint64_t seed)
      : by_class_(std::make_shared<std::vector<std::vector<std::uint64_t>>>()), seed_(seed) {
    for (std::uint64_t i = 0; i < labels.size(); ++i) {
      if (labels[i] < 0) continue;
      auto c = static_cast<std::size_t>(labels[i]);
      if (by_class_->size() <= c) by_class_->resize(c + 1);
      (*by_class_)[c].push_back(i);
      ++n_;
    }
    std::erase_if(*by_class_, [](const auto& v) { return v.empty(); });
  }
  [[nodiscard]] std::size_t size(std::uint64_t) const noexcept { return n_; }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const noexcept {
    sluice::counter_rng r(seed_, epoch, pos);
    const auto& members = (*by_class_)[static_cast<std::size_t>(r.below(by_class_->size()))];
    return members[static_cast<std::size_t>(r.below(members.size()))];
  }

 private:
  std::shared_ptr<std::vector<std::vector<std::uint64_t>>> by_class_;
  std::size_t n_ = 0;
  std::uint64_t seed_;
};

// Uniform for epochs before `switch_epoch`, then class-balanced: deferred re-sampling (Cao et al.,
// 2019, "LDAM-DRW"): learn features from the natural distribution first, rebalance late.
template <class First, class Then>
class switching_sampler {
 public:
  using sampler_concept = sluice::sampler_tag;
  switching_sampler(First a, Then b, std::uint64_t switch_epoch)
      : a_(std::move(a)), b_(std::move(b)), switch_(switch_epoch) {}
  [[nodiscard]] std::size_t size(std::uint64_t e) const { return e < switch_ ? a_.size(e) : b_.size(e); }
  [[nodiscard]] std::uint64_t at(std::uint64_t e, std::uint64_t pos) const { return e < switch_ ? a_.at(e, pos) : b_.at(e, pos); }
  void prepare(std::uint64_t e) {
    if constexpr (requires { b_.prepare(e); }) { if (e >= switch_) b_.prepare(e); }
    if constexpr (requires { a_.prepare(e); }) { if (e < switch_) a_.prepare(e); }
  }

 private:
  First a_;
  Then b_;
  std::uint64_t switch_;
};

#if DEMO_HAS_SLUICE_CLASS_BALANCED
inline constexpr const char* balanced_sampler_name = "sluice::sample::class_balanced (inverse frequency)";
inline auto make_balanced(std::span<const std::int64_t> labels, std::uint64_t seed) {
  return sluice::sample::class_balanced<>(labels, {}, {.seed = seed});  // default rule: inverse frequency
}
#else
inline constexpr const char* balanced_sampler_name = "demo::minimal_class_balanced (sluice's not available)";
inline auto make_balanced(std::span<const std::int64_t> labels, std::uint64_t seed) {
  return minimal_class_balanced(labels, seed);
}
#endif

}  // namespace demo
