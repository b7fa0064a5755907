// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The two element types a statistic may have: exact 64-bit integers (bytes, counts) and
// doubles (ratios, gigabytes). A run-time value holds one of them and keeps its kind through
// every reduction, so integer counters never pass through floating point.
#include <concepts>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <variant>

namespace headroom::stats {

/// The element types of a report: std::int64_t or double, nothing else (no bool, no float).
template <class T>
concept stat_value = std::same_as<T, std::int64_t> || std::same_as<T, double>;

enum class value_kind : std::uint8_t { int64 = 1, float64 = 2 };

[[nodiscard]] constexpr std::string_view name_of(value_kind k) noexcept {
  return k == value_kind::int64 ? "int64" : "float64";
}

template <stat_value T>
inline constexpr value_kind kind_of_v = std::same_as<T, std::int64_t> ? value_kind::int64 : value_kind::float64;

/// A run-time statistic: an int64 or a double.
using value = std::variant<std::int64_t, double>;

[[nodiscard]] inline value_kind kind_of(value const& v) noexcept {
  return v.index() == 0 ? value_kind::int64 : value_kind::float64;
}

/// The value as a double (exact for doubles; rounded for integers beyond 2^53).
[[nodiscard]] inline double to_double(value const& v) noexcept {
  return v.index() == 0 ? static_cast<double>(std::get<0>(v)) : std::get<1>(v);
}

inline std::ostream& print_value(std::ostream& os, value const& v) {
  if (v.index() == 0) return os << std::get<0>(v);
  return os << std::get<1>(v);
}

}  // namespace headroom::stats
