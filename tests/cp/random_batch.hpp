// SPDX-License-Identifier: Apache-2.0
#pragma once
// Random packed batches for the cp tests: raw lengths (empty sequences included), padding for
// a layout and CP size, and random row data.
#include <cstdint>
#include <random>
#include <vector>

#include "headroom/cp/padding.hpp"

namespace cp_test {

using i64 = std::int64_t;

template <class Layout>
headroom::cp::padding random_padding(std::mt19937_64& gen, int cp_size, int max_sequences = 12, int max_len = 40) {
  std::vector<i64> raw{0};
  int const n = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_sequences));
  for (int i = 0; i < n; ++i) raw.push_back(raw.back() + static_cast<i64>(gen() % static_cast<unsigned>(max_len + 1)));
  if (raw.back() == 0) raw.back() = 1;
  auto const align = headroom::cp::alignment_for<Layout>(cp_size);
  return headroom::cp::padding(raw, align, gen() % 3 == 0 ? 2 * align : 1);
}

template <class T>
std::vector<T> random_rows(std::mt19937_64& gen, i64 rows, i64 width) {
  std::vector<T> v(static_cast<std::size_t>(rows * width));
  std::uniform_int_distribution<int> d(-1000, 1000);
  for (auto& x : v) x = static_cast<T>(d(gen));
  return v;
}

template <class T>
double dot(std::vector<T> const& a, std::vector<T> const& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

}  // namespace cp_test
