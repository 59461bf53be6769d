// sluice/core/fixed_string.hpp — a string literal as a template argument.
//
// Field names (`field<"image", std::uint8_t>`, `b.get<"image">()`) and stage labels in compile
// errors (`stage_cannot_follow<"decode", "from(sampler)">`) are fixed_strings: the name is part of
// the type, so a misspelt name is a compile error whose message shows the name as written.
//
//   template <sluice::fixed_string Name> struct tag {};
//   tag<"boxes"> t;   // Name.view() == "boxes"
#pragma once

#include <cstddef>
#include <string_view>

namespace sluice {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&s)[N]) noexcept {  // NOLINT(google-explicit-constructor)
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
  [[nodiscard]] static constexpr std::size_t size() noexcept { return N - 1; }
  template <std::size_t M>
  [[nodiscard]] constexpr bool operator==(const fixed_string<M>& o) const noexcept {
    return view() == o.view();
  }
};

// "tokens" + ".lengths" -> "tokens.lengths", at compile time (names of a collator's extra outputs).
template <fixed_string A, fixed_string B>
inline constexpr auto concat_v = [] {
  char buf[A.size() + B.size() + 1]{};
  for (std::size_t i = 0; i < A.size(); ++i) buf[i] = A.chars[i];
  for (std::size_t i = 0; i < B.size(); ++i) buf[A.size() + i] = B.chars[i];
  return fixed_string<A.size() + B.size() + 1>(buf);
}();

namespace detail {
template <class>
inline constexpr bool always_false_v = false;
}  // namespace detail

}  // namespace sluice
