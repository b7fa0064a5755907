// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Byte counts, alignment and human-readable sizes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <bit>
#include <cstdio>
#include <concepts>
#include <type_traits>

#include "headroom/core/error.hpp"

namespace headroom {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

/// Alignment every headroom resource guarantees unless asked for more (same as cudaMalloc's 256).
inline constexpr std::size_t default_alignment = 256;

[[nodiscard]] constexpr bool is_power_of_two(std::size_t n) noexcept { return std::has_single_bit(n); }

/// Rounds `n` up to a multiple of `alignment` (a power of two). Throws on overflow.
[[nodiscard]] constexpr std::size_t align_up(std::size_t n, std::size_t alignment) {
  expects(is_power_of_two(alignment), "align_up: alignment ", alignment, " is not a power of two");
  std::size_t const mask = alignment - 1;
  expects<capacity_error>(n <= SIZE_MAX - mask, "align_up: ", n, " bytes overflow when aligned to ", alignment);
  return (n + mask) & ~mask;
}

/// Rounds `n` up to a multiple of any positive `m` (not only powers of two). Throws on overflow.
[[nodiscard]] constexpr std::size_t round_up(std::size_t n, std::size_t m) {
  expects(m > 0, "round_up: multiple must be positive, got ", m);
  std::size_t const r = n % m;
  expects<capacity_error>(r == 0 || n <= SIZE_MAX - (m - r), "round_up: ", n, " overflows when rounded up to a multiple of ", m);
  return r == 0 ? n : n + (m - r);
}

/// a * b for sizes and counts; throws capacity_error naming `what` and both operands when the
/// product does not fit in T (a wrapped size is an under-allocation waiting to happen).
template <std::integral T, class... What>
[[nodiscard]] constexpr T checked_mul(T a, T b, What const&... what) {
  T out{};
  bool const overflow = __builtin_mul_overflow(a, b, &out);
  expects<capacity_error>(!overflow, what..., ": ", a, " x ", b, " overflows ", sizeof(T) * 8, "-bit ",
                          std::is_signed_v<T> ? "signed " : "unsigned ", "arithmetic");
  return out;
}

/// "1.50 GiB" style formatting, exact bytes below 1 KiB.
[[nodiscard]] inline std::string format_bytes(std::uint64_t n) {
  char buf[48];
  if (n < KiB) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  } else {
    char const* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n) / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) {
      v /= 1024.0;
      ++u;
    }
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

}  // namespace headroom
