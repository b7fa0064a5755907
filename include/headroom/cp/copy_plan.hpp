// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// How a row copy is vectorised: the widest access (16, 8, 4, 2 or 1 bytes) that the row size
// and every buffer's base address allow. Pure host logic, shared by the CUDA launchers and
// testable without a GPU.
//
//   vector_policy::widest      take the widest legal access (16-byte loads and stores when
//                              possible, a narrower exact path otherwise). The default.
//   vector_policy::require_16  the caller promises 16-byte rows and addresses (TE's float4
//                              kernels require hidden_bytes % 16 == 0); anything else throws,
//                              naming the row size or the misaligned buffer.
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "headroom/core/error.hpp"
#include "headroom/cp/detail/config.hpp"

namespace headroom::cp {

namespace vector_policy {
struct widest {
  static constexpr std::string_view name = "widest";
};
struct require_16 {
  static constexpr std::string_view name = "require_16";
};
}  // namespace vector_policy

template <class V>
concept vector_policy_type = std::same_as<V, vector_policy::widest> || std::same_as<V, vector_policy::require_16>;
static_assert(vector_policy_type<vector_policy::widest> && vector_policy_type<vector_policy::require_16>);

struct copy_plan {
  std::size_t row_bytes = 0;
  std::size_t vector_bytes = 1;      // bytes per load / store
  std::int64_t vectors_per_row = 0;  // row_bytes / vector_bytes

  [[nodiscard]] std::string describe() const {
    std::ostringstream os;
    os << "cp::copy_plan{row " << row_bytes << " B as " << vectors_per_row << " x " << vector_bytes << " B}";
    return os.str();
  }
  friend std::ostream& operator<<(std::ostream& os, copy_plan const& p) { return os << p.describe(); }
};

/// A named buffer base address, for the alignment check.
struct buffer_address {
  char const* name;
  void const* address;
};

template <vector_policy_type V = vector_policy::widest>
[[nodiscard]] copy_plan plan_copy(std::size_t row_bytes, std::initializer_list<buffer_address> buffers, char const* op) {
  expects(row_bytes > 0, op, ": row of 0 bytes, expected >= 1");
  std::size_t v = 16;
  while (v > 1 && row_bytes % v != 0) v /= 2;
  for (auto const& b : buffers) {
    auto const a = reinterpret_cast<std::uintptr_t>(b.address);
    while (v > 1 && a % v != 0) v /= 2;
  }
  if constexpr (std::same_as<V, vector_policy::require_16>) {
    expects(row_bytes % 16 == 0, op, ": vector_policy::require_16 needs rows of a multiple of 16 bytes, got ", row_bytes,
            " bytes per row (", row_bytes % 16, " left over)");
    for (auto const& b : buffers)
      expects(reinterpret_cast<std::uintptr_t>(b.address) % 16 == 0, op, ": vector_policy::require_16 needs 16-byte aligned ",
              "buffers, ", b.name, " starts at ", b.address, " (", reinterpret_cast<std::uintptr_t>(b.address) % 16,
              " bytes past a 16-byte boundary)");
  }
  return {row_bytes, v, static_cast<std::int64_t>(row_bytes / v)};
}

namespace detail {
/// Division by a divisor fixed for a whole launch (vectors per row) as a multiply-high and a
/// shift (CUTLASS FastDivmod; Granlund & Montgomery 1994). Exact for dividends in [0, 2^31).
class fast_divmod {
 public:
  constexpr fast_divmod() = default;
  constexpr explicit fast_divmod(std::uint32_t divisor) noexcept : divisor_(divisor) {
    if (divisor != 1) {
      std::uint32_t const ceil_log2 = 32u - static_cast<std::uint32_t>(std::countl_zero(divisor - 1u));
      std::uint32_t const p = 31u + ceil_log2;
      multiplier_ = static_cast<std::uint32_t>(((std::uint64_t{1} << p) + divisor - 1) / divisor);
      shift_ = p - 32u;
    }
  }
  [[nodiscard]] HEADROOM_CP_HD constexpr std::uint32_t divisor() const noexcept { return divisor_; }
  /// quotient and remainder of n / divisor, n < 2^31.
  HEADROOM_CP_HD constexpr void divide(std::uint32_t n, std::uint32_t& quotient, std::uint32_t& remainder) const noexcept {
    quotient = divisor_ == 1 ? n : mul_hi(n, multiplier_) >> shift_;
    remainder = n - quotient * divisor_;
  }

 private:
  HEADROOM_CP_HD static constexpr std::uint32_t mul_hi(std::uint32_t a, std::uint32_t b) noexcept {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(a) * b) >> 32);
  }
  std::uint32_t divisor_ = 1;
  std::uint32_t multiplier_ = 0;
  std::uint32_t shift_ = 0;
};
}  // namespace detail

}  // namespace headroom::cp
