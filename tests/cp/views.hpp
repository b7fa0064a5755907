// SPDX-License-Identifier: Apache-2.0
#pragma once
// Matrix views over host vectors for the cp tests: rows = size / width.
#include <cstdint>
#include <vector>

#include "headroom/cp/matrix.hpp"

namespace cp_test {

template <class T>
headroom::cp::matrix_view<T const> cview(std::vector<T> const& v, std::int64_t width) {
  return {v.data(), static_cast<std::int64_t>(v.size()) / width, width};
}
template <class T>
headroom::cp::matrix_view<T> mview(std::vector<T>& v, std::int64_t width) {
  return {v.data(), static_cast<std::int64_t>(v.size()) / width, width};
}

}  // namespace cp_test
