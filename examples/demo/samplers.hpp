// The demo's samplers over the long-tailed subset (labels of images outside it are -1):
//   uniform_subset       every kept image once per epoch, in a seeded Feistel order
//                        (sluice::sample::shuffle over the subset, mapped to image ids);
//   make_class_balanced  sluice::sample::class_balanced with a weighting rule from
//                        sluice/sample/class_weights.hpp: a class by its weight, then an image of it;
//   switching_sampler    one sampler before an epoch, another from it on (deferred re-sampling).
#pragma once

#include <sluice/core/concepts.hpp>
#include <sluice/core/random.hpp>
#include <sluice/sample/class_balanced.hpp>
#include <sluice/sample/class_weights.hpp>
#include <sluice/sample/shuffle.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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

// The two class weightings the demo compares with uniform sampling, both through sluice::sample::class_balanced (draws
// with replacement; as many draws per epoch as the subset has images). A rule gives the weight of
// one sample of a class of n images, so the class's share of the draws is n * weight:
//   inverse_log        weight 1/log(1+n): rare classes up, softly (the seed's rule for a long tail)
//   inverse_frequency  weight 1/n: every class drawn equally often (class-balanced)
template <class Rule>
auto make_class_balanced(std::span<const std::int64_t> labels, std::uint64_t seed) {
  return sluice::sample::class_balanced<Rule>(labels, Rule{}, {.seed = seed});
}

}  // namespace demo
