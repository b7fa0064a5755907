// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// cu_seqlens: the cumulative sequence boundaries of a packed (THD) batch, [0, l0, l0+l1, ...].
// Engines hold them as int32 (TransformerEngine, flash-attention) or int64 (PyTorch default);
// both are accepted and validated once, then kept as int64.
#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cp/detail/config.hpp"

namespace headroom::cp {

template <class I>
concept cu_index = std::same_as<std::remove_cv_t<I>, std::int32_t> || std::same_as<std::remove_cv_t<I>, std::int64_t>;

/// Validates boundaries and widens them to int64: at least one entry, cu[0] == 0, never
/// decreasing. Equal neighbours (empty sequences, as in batches padded to a fixed count for
/// CUDA graphs) are allowed.
template <cu_index I>
[[nodiscard]] std::vector<std::int64_t> checked_cu_seqlens(std::span<I const> cu, char const* what = "cu_seqlens") {
  expects(!cu.empty(), what, ": empty, expected at least [0]");
  expects(cu[0] == 0, what, "[0] = ", cu[0], ", expected 0");
  std::vector<std::int64_t> out(cu.size());
  for (std::size_t i = 0; i < cu.size(); ++i) {
    expects(cu[i] >= 0, what, "[", i, "] = ", cu[i], " is negative, expected >= 0");
    if (i > 0)
      expects(cu[i] >= cu[i - 1], what, " decreases at index ", i, ": ", cu[i - 1], " then ", cu[i],
              ", expected non-decreasing boundaries");
    out[i] = static_cast<std::int64_t>(cu[i]);
  }
  return out;
}

template <cu_index I>
[[nodiscard]] std::vector<std::int64_t> checked_cu_seqlens(std::vector<I> const& cu, char const* what = "cu_seqlens") {
  return checked_cu_seqlens(std::span<I const>(cu), what);
}

namespace detail {
/// Largest i in [0, n) with cu[i] <= row: the sequence holding `row` when cu[0] <= row < cu[n].
/// Skips empty sequences (equal neighbours) because it picks the last of equal boundaries.
template <class I>
HEADROOM_CP_HD_INLINE std::int64_t find_sequence(I const* cu, std::int64_t n, std::int64_t row) noexcept {
  std::int64_t lo = 0, hi = n;
  while (hi - lo > 1) {
    std::int64_t const mid = lo + (hi - lo) / 2;
    if (static_cast<std::int64_t>(cu[mid]) <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}
}  // namespace detail

}  // namespace headroom::cp
