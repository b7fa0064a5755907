// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// matrix_view: a row-major [rows, width] view of contiguous elements. Every cp op works on rows
// (tokens); the trailing width (hidden size, vocabulary, 1 for per-token vectors) is opaque.
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"

namespace headroom::cp {

template <class T>
struct matrix_view {
  T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t width = 1;

  constexpr matrix_view() = default;
  constexpr matrix_view(T* d, std::int64_t r, std::int64_t w) : data(d), rows(r), width(w) {
    expects(r >= 0 && w >= 1, "matrix_view: shape [", r, ", ", w, "] must have rows >= 0 and width >= 1");
    expects(d != nullptr || r == 0, "matrix_view: null data for ", r, " rows");
    // Every size the ops derive from the shape (elements, bytes, row offsets) must fit: a
    // wrapped size would address memory the view does not cover.
    std::int64_t const elements = checked_mul(r, w, "matrix_view: shape rows x width");
    expects<capacity_error>(elements <= PTRDIFF_MAX / static_cast<std::int64_t>(sizeof(T)), "matrix_view: shape [", r,
                            ", ", w, "] holds ", elements, " elements of ", sizeof(T), " bytes, more than the ",
                            PTRDIFF_MAX, " bytes an address range can span");
  }
  /// A [span.size() / width, width] view; the span must hold a whole number of rows.
  constexpr matrix_view(std::span<T> s, std::int64_t w) : matrix_view(s.data(), w >= 1 ? static_cast<std::int64_t>(s.size()) / w : 0, w) {
    expects(static_cast<std::int64_t>(s.size()) % w == 0, "matrix_view: ", s.size(), " elements are not a whole number of rows of width ", w);
  }
  /// Mutable → const conversion.
  template <class U>
    requires(std::is_same_v<T, U const>)
  constexpr matrix_view(matrix_view<U> o) noexcept : data(o.data), rows(o.rows), width(o.width) {}

  [[nodiscard]] constexpr std::size_t size() const noexcept { return static_cast<std::size_t>(rows * width); }
  [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size() * sizeof(T); }
  [[nodiscard]] constexpr std::size_t row_bytes() const noexcept { return static_cast<std::size_t>(width) * sizeof(T); }
  [[nodiscard]] constexpr std::span<T> span() const noexcept { return {data, size()}; }
  [[nodiscard]] constexpr T* row(std::int64_t r) const noexcept { return data + r * width; }
};

template <class T>
[[nodiscard]] constexpr matrix_view<T const> as_const(matrix_view<T> m) noexcept {
  return m;
}

namespace detail {
/// Bytes of `rows` rows of `row_bytes` each (a buffer size); capacity_error naming `op`, `what`
/// and both operands when the product overflows.
[[nodiscard]] inline std::size_t rows_bytes(std::int64_t rows, std::size_t row_bytes, char const* op, char const* what) {
  expects(rows >= 0, op, ": ", what, " has ", rows, " rows, expected >= 0");
  return checked_mul(static_cast<std::size_t>(rows), row_bytes, op, " ", what, " bytes: rows x row bytes");
}

/// Throws invalid_argument naming `what` unless `m` has `rows` rows of `width` elements.
template <class T>
void expect_shape(matrix_view<T> const& m, std::int64_t rows, std::int64_t width, char const* op, char const* what) {
  expects(m.rows == rows && m.width == width, op, ": ", what, " has shape [", m.rows, ", ", m.width, "], expected [",
          rows, ", ", width, "]");
}
}  // namespace detail

}  // namespace headroom::cp
