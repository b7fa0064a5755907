// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A string usable as a template argument, for the compile-time keys of typed reports.
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace headroom::stats::detail {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(char const (&s)[N]) noexcept { std::copy_n(s, N, chars); }  // NOLINT: implicit by design
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
  template <std::size_t M>
  [[nodiscard]] constexpr bool operator==(fixed_string<M> const& o) const noexcept {
    return view() == o.view();
  }
};

}  // namespace headroom::stats::detail
