// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Order-preserving 64-bit keys: the trick that lets one all_reduce(max, int64) reduce a report
// of integers and doubles exactly, whatever its mix, and min-fields in the same pass.
//
//   int64  -> itself.                        (exact over the whole range)
//   double -> its bits b as int64; b < 0 ? b ^ INT64_MAX : b.
//             Positive doubles order like their bit patterns; flipping the 63 low bits of a
//             negative one reverses its order, and the sign bit keeps it below every positive.
//             -0.0 -> -1 and +0.0 -> 0 stay distinct, so the result is bitwise one of the inputs.
//             +-inf order at the ends of the numbers; no non-NaN double maps to INT64_MIN/MAX.
//   NaN    -> INT64_MAX (propagate: wins) or INT64_MIN (ignore: loses), after the min flip, so
//             a NaN result decodes as a quiet NaN (payload and sign are not kept).
//   min    -> ~key (bitwise not reverses the order of int64 and never overflows, unlike -key).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "headroom/core/communicator.hpp"

namespace headroom::stats::detail {

inline constexpr std::int64_t key_max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t key_min = std::numeric_limits<std::int64_t>::min();

[[nodiscard]] constexpr std::int64_t double_order_key(double d) noexcept {
  auto const b = std::bit_cast<std::int64_t>(d);
  return b < 0 ? (b ^ key_max) : b;
}
[[nodiscard]] constexpr double double_from_order_key(std::int64_t k) noexcept {
  return std::bit_cast<double>(k < 0 ? (k ^ key_max) : k);
}

[[nodiscard]] constexpr std::int64_t orient(std::int64_t k, reduce_op op) noexcept { return op == reduce_op::min ? ~k : k; }

/// Key of an integer for a reduction with `op` (max or min) done as max.
[[nodiscard]] constexpr std::int64_t encode(std::int64_t v, reduce_op op) noexcept { return orient(v, op); }
[[nodiscard]] constexpr std::int64_t decode_int(std::int64_t k, reduce_op op) noexcept { return orient(k, op); }

/// Key of a double for a reduction with `op` (max or min) done as max.
[[nodiscard]] constexpr std::int64_t encode(double v, reduce_op op, bool nan_propagates) noexcept {
  if (v != v) return nan_propagates ? key_max : key_min;
  return orient(double_order_key(v), op);
}
[[nodiscard]] constexpr double decode_double(std::int64_t k, reduce_op op) noexcept {
  if (k == key_max || k == key_min) return std::numeric_limits<double>::quiet_NaN();
  return double_from_order_key(orient(k, op));
}

}  // namespace headroom::stats::detail
