#pragma once
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
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "headroom/core/error.hpp"

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

}  // namespace headroom::cp
