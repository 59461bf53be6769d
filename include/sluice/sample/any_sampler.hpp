// sluice/sample/any_sampler.hpp — any sampler behind one indirect call a position.
//
// A front door that picks the sampler at run time (the Python module, a trainer configured from a file) would otherwise
// compile one loader per sampler type: every stage after the source is instantiated again for each. any_sampler erases
// the sampler's type, so one loader type serves them all:
//
//   sluice::sample::any_sampler order = cfg.balanced
//       ? sluice::sample::any_sampler(sluice::sample::class_balanced<inverse_log>(labels, {}, {.seed = 7}))
//       : sluice::sample::any_sampler(sluice::sample::shuffle(n, {.seed = 7}));
//   auto loader = sluice::from(std::move(order)) | sluice::read(r) | sluice::collate({.batch = 256})
//               | sluice::prefetch(2);
//
// It keeps everything the loader asks of the sampler it holds: the order (at, size), prepare(epoch) where that sampler
// has one (it is a no-op otherwise), and its fingerprint (core/state.hpp): a state saved through an any_sampler resumes
// only the same sampler, seed and data, and equals the state of the same loader built with the sampler itself. The cost
// is one virtual call per position (at) and per epoch (size, prepare): a few nanoseconds against the sample's own work.
// Copies are deep (each holds its own sampler, as a copied sampler would); moves are cheap (a moved-from any_sampler
// may only be assigned to or destroyed). inner<S>() gives the sampler back, or nullptr when it is another type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "sluice/core/concepts.hpp"
#include "sluice/core/state.hpp"

namespace sluice::sample {

class any_sampler {
 public:
  using sampler_concept = sampler_tag;

  template <class S>
    requires(sampler<std::remove_cvref_t<S>> && !std::is_same_v<std::remove_cvref_t<S>, any_sampler>)
  any_sampler(S&& s)  // NOLINT(google-explicit-constructor): any sampler is an any_sampler
      : p_(std::make_unique<model<std::remove_cvref_t<S>>>(std::forward<S>(s))) {}
  any_sampler(const any_sampler& o) : p_(o.p_ ? o.p_->clone() : nullptr) {}
  any_sampler(any_sampler&&) noexcept = default;
  any_sampler& operator=(const any_sampler& o) {
    if (this != &o) p_ = o.p_ ? o.p_->clone() : nullptr;
    return *this;
  }
  any_sampler& operator=(any_sampler&&) noexcept = default;
  ~any_sampler() = default;

  [[nodiscard]] std::size_t size(std::uint64_t epoch) const { return p_->size(epoch); }
  [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const { return p_->at(epoch, pos); }
  void prepare(std::uint64_t epoch) { p_->prepare(epoch); }
  [[nodiscard]] sampler_fingerprint fingerprint() const { return p_->fingerprint(); }
  // The held sampler's dataset_size() (core/state.hpp identifies a dataset no reader names by it),
  // or state_fingerprint::unknown when it has none.
  [[nodiscard]] std::uint64_t dataset_size() const { return p_->dataset_size(); }

  template <class S>
  [[nodiscard]] const S* inner() const noexcept {
    const auto* m = dynamic_cast<const model<S>*>(p_.get());
    return m != nullptr ? &m->s : nullptr;
  }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    [[nodiscard]] virtual std::size_t size(std::uint64_t epoch) const = 0;
    [[nodiscard]] virtual std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const = 0;
    virtual void prepare(std::uint64_t epoch) = 0;
    [[nodiscard]] virtual sampler_fingerprint fingerprint() const = 0;
    [[nodiscard]] virtual std::uint64_t dataset_size() const = 0;
    [[nodiscard]] virtual std::unique_ptr<concept_t> clone() const = 0;
  };
  template <class S>
  struct model final : concept_t {
    S s;
    template <class A>
    explicit model(A&& a) : s(std::forward<A>(a)) {}
    [[nodiscard]] std::size_t size(std::uint64_t epoch) const override { return static_cast<std::size_t>(s.size(epoch)); }
    [[nodiscard]] std::uint64_t at(std::uint64_t epoch, std::uint64_t pos) const override {
      return static_cast<std::uint64_t>(s.at(epoch, pos));
    }
    void prepare(std::uint64_t epoch) override {
      if constexpr (preparing_sampler<S>) s.prepare(epoch);
    }
    // The held sampler's own fingerprint: the same state as the loader built with the sampler
    // itself (every sampler in sample/ has one; a user's sampler without one is identified by
    // its size at epoch 0).
    [[nodiscard]] sampler_fingerprint fingerprint() const override { return fingerprint_of(s, 0); }
    [[nodiscard]] std::uint64_t dataset_size() const override {
      if constexpr (requires { static_cast<std::uint64_t>(s.dataset_size()); }) return static_cast<std::uint64_t>(s.dataset_size());
      else return state_fingerprint::unknown;
    }
    [[nodiscard]] std::unique_ptr<concept_t> clone() const override { return std::make_unique<model>(s); }
  };
  std::unique_ptr<concept_t> p_;
};

}  // namespace sluice::sample
