// SPDX-License-Identifier: Apache-2.0
// The device writer of device-resident reports (stats/cuda/device_report.hpp) run on the host:
// its order keys must be the host reducer's keys (stats/detail/order_key.hpp) bit for bit, since
// the host decodes the reduced device words with the host decoder.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "headroom/stats.hpp"
#include "headroom/stats/cuda/device_report.hpp"
#include "headroom/stats/detail/wire.hpp"

namespace hs = headroom::stats;
using headroom::reduce_op;
using i64 = std::int64_t;

TEST_CASE("device order keys equal the host encoder's for int64 and doubles, both ops, both NaN policies") {
  std::mt19937_64 gen(7);
  std::vector<double> doubles = {0.0, -0.0, 1.0, -1.0, std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::denorm_min(),
                                 -std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(),
                                 std::numeric_limits<double>::lowest(), std::numeric_limits<double>::quiet_NaN()};
  std::vector<i64> ints = {0, -1, 1, std::numeric_limits<i64>::max(), std::numeric_limits<i64>::min(), (i64{1} << 53) + 1};
  for (int i = 0; i < 2000; ++i) {
    doubles.push_back(std::bit_cast<double>(gen()));  // any bit pattern, NaNs with payloads included
    ints.push_back(static_cast<i64>(gen()));
  }
  for (reduce_op op : {reduce_op::max, reduce_op::min}) {
    for (i64 v : ints) CHECK(hs::cuda::detail::order_key(v, op) == hs::detail::encode(v, op));
    for (bool nan : {true, false})
      for (double v : doubles) CHECK(hs::cuda::detail::order_key(v, op, nan) == hs::detail::encode(v, op, nan));
  }
}

TEST_CASE("device_report_view: set and fold write the keys the host reducer decodes, field by field") {
  using r3 = hs::report<hs::field<"peak", i64>, hs::field<"free", i64, hs::minimum>, hs::field<"ratio", double>>;
  using view = hs::cuda::device_report_view<r3>::self;
  static_assert(view::size() == 3);
  static_assert(std::same_as<view::value_t<2>, double>);
  std::vector<i64> words(hs::reduce_plan::max_header_words + 3, hs::detail::key_min);
  view v(words.data() + hs::reduce_plan::max_header_words);
  v.set<0>((i64{1} << 53) + 1);
  for (i64 x : {i64{9}, i64{4}, i64{7}}) v.fold<1>(x);  // min field: the fold keeps the smallest
  for (double x : {-2.0, -0.5, -1.0}) v.fold<2>(x);
  auto const out = hs::detail::unpack_max(r3{}, std::span<i64 const>(words));
  CHECK(out.get<"peak">() == (i64{1} << 53) + 1);
  CHECK(out.get<"free">() == 4);
  CHECK(out.get<"ratio">() == -0.5);
  // ignore_nan: a NaN folded in loses to any number.
  using nan_view = hs::cuda::device_report_view<r3, hs::ignore_nan>::self;
  nan_view w(words.data() + hs::reduce_plan::max_header_words);
  w.fold<2>(std::numeric_limits<double>::quiet_NaN());
  CHECK(hs::detail::unpack_max(r3{}, std::span<i64 const>(words)).get<"ratio">() == -0.5);
}
