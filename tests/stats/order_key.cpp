// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "headroom/stats/detail/order_key.hpp"

namespace hd = headroom::stats::detail;
using headroom::reduce_op;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
std::uint64_t bits(double d) { return std::bit_cast<std::uint64_t>(d); }

// Doubles in increasing order (with -0.0 below +0.0), the edge cases the encoding must order.
std::vector<double> const ladder = {-inf,
                                    std::numeric_limits<double>::lowest(),
                                    -1e300,
                                    -1.0,
                                    -std::numeric_limits<double>::min(),
                                    -std::numeric_limits<double>::denorm_min(),
                                    -0.0,
                                    0.0,
                                    std::numeric_limits<double>::denorm_min(),
                                    std::numeric_limits<double>::min(),
                                    1.0,
                                    1.0 + std::numeric_limits<double>::epsilon(),
                                    1e300,
                                    std::numeric_limits<double>::max(),
                                    inf};
}  // namespace

TEST_CASE("double order keys are strictly increasing along the edge-case ladder, for max and reversed for min") {
  for (std::size_t i = 1; i < ladder.size(); ++i) {
    CAPTURE(ladder[i - 1]);
    CAPTURE(ladder[i]);
    CHECK(hd::encode(ladder[i - 1], reduce_op::max, true) < hd::encode(ladder[i], reduce_op::max, true));
    CHECK(hd::encode(ladder[i - 1], reduce_op::min, true) > hd::encode(ladder[i], reduce_op::min, true));
  }
}

TEST_CASE("double keys round-trip bitwise, never reach the NaN sentinels") {
  std::mt19937_64 gen(3);
  std::vector<double> values = ladder;
  for (int i = 0; i < 100000; ++i) {
    double const d = std::bit_cast<double>(gen());
    if (!std::isnan(d)) values.push_back(d);
  }
  for (double d : values)
    for (auto op : {reduce_op::max, reduce_op::min}) {
      auto const k = hd::encode(d, op, true);
      CHECK(k != hd::key_max);
      CHECK(k != hd::key_min);
      CHECK(bits(hd::decode_double(k, op)) == bits(d));
    }
}

TEST_CASE("random pairs: key order equals IEEE order (ties only for equal bits)") {
  std::mt19937_64 gen(11);
  for (int i = 0; i < 200000; ++i) {
    double const a = std::bit_cast<double>(gen());
    double const b = i % 2 ? std::bit_cast<double>(gen()) : std::nextafter(a, inf);
    if (std::isnan(a) || std::isnan(b)) continue;
    auto const ka = hd::encode(a, reduce_op::max, true);
    auto const kb = hd::encode(b, reduce_op::max, true);
    if (a < b) CHECK(ka < kb);
    if (a > b) CHECK(ka > kb);
    if (a == b) CHECK((ka == kb) == (bits(a) == bits(b)));  // only +-0.0 compare equal with other bits
  }
}

TEST_CASE("NaN: propagate maps to the top key (wins max and min), ignore to the bottom; both decode to NaN") {
  double const nans[] = {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::signaling_NaN(), std::bit_cast<double>(0x7ff0000000000001ULL)};
  for (double n : nans)
    for (auto op : {reduce_op::max, reduce_op::min}) {
      CHECK(hd::encode(n, op, true) == hd::key_max);
      CHECK(hd::encode(n, op, false) == hd::key_min);
      CHECK(std::isnan(hd::decode_double(hd::key_max, op)));
      CHECK(std::isnan(hd::decode_double(hd::key_min, op)));
      for (double d : ladder) {
        CHECK(hd::encode(n, op, true) > hd::encode(d, op, true));
        CHECK(hd::encode(n, op, false) < hd::encode(d, op, false));
      }
    }
}

TEST_CASE("int64 keys: identity for max, bitwise not for min, exact over the whole range") {
  std::vector<std::int64_t> const v = {std::numeric_limits<std::int64_t>::min(), -1, 0, 1, std::int64_t{1} << 53,
                                       (std::int64_t{1} << 53) + 1, std::numeric_limits<std::int64_t>::max()};
  for (std::size_t i = 0; i < v.size(); ++i) {
    CHECK(hd::decode_int(hd::encode(v[i], reduce_op::max), reduce_op::max) == v[i]);
    CHECK(hd::decode_int(hd::encode(v[i], reduce_op::min), reduce_op::min) == v[i]);
    if (i > 0) {
      CHECK(hd::encode(v[i - 1], reduce_op::max) < hd::encode(v[i], reduce_op::max));
      CHECK(hd::encode(v[i - 1], reduce_op::min) > hd::encode(v[i], reduce_op::min));
    }
  }
  static_assert(hd::encode(std::numeric_limits<std::int64_t>::min(), reduce_op::min) ==
                std::numeric_limits<std::int64_t>::max());  // no overflow, unlike negation
}
