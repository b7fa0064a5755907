// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the stats tests: reports drawn from a seed (so every rank can rebuild every
// other rank's report and compute the expected result locally), a host reference for max, and
// a way to assert that EVERY rank of a group threw.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "headroom/stats/dynamic_report.hpp"

namespace stats_test {

namespace hs = headroom::stats;

/// A report of `keys` keys (names and kinds depend only on `keys` and the seed's kind draw),
/// values drawn per rank, including the awkward ones: beyond 2^53, negative, +-inf, -0.0.
inline hs::dynamic_report random_report(int rank, std::size_t keys, std::uint64_t seed, bool with_nan = false) {
  std::mt19937_64 kinds(seed);  // same on every rank: the schema
  std::mt19937_64 gen(seed * 7919u + static_cast<std::uint64_t>(rank) * 104729u + 1u);
  hs::dynamic_report r;
  std::uniform_int_distribution<int> pick(0, 9);
  for (std::size_t i = 0; i < keys; ++i) {
    std::string const name = "key." + std::to_string(i);
    bool const is_int = kinds() % 2 == 0;
    int const p = pick(gen);
    if (is_int) {
      std::int64_t v = 0;
      switch (p) {
        case 0: v = std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(gen() % 8); break;
        case 1: v = std::numeric_limits<std::int64_t>::min() + static_cast<std::int64_t>(gen() % 8); break;
        case 2: v = (std::int64_t{1} << 53) + static_cast<std::int64_t>(gen() % 16); break;  // float64 rounds these
        case 3: v = -static_cast<std::int64_t>(gen() % 1000); break;
        default: v = static_cast<std::int64_t>(gen() >> 1); break;
      }
      r.set(name, v);
    } else {
      double v = 0;
      switch (p) {
        case 0: v = std::numeric_limits<double>::infinity(); break;
        case 1: v = -std::numeric_limits<double>::infinity(); break;
        case 2: v = -0.0; break;
        case 3: v = 0.0; break;
        case 4: v = with_nan ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::denorm_min(); break;
        case 5: v = -std::numeric_limits<double>::denorm_min(); break;
        default: v = std::ldexp(static_cast<double>(static_cast<std::int64_t>(gen())), -static_cast<int>(gen() % 80)); break;
      }
      r.set(name, v);
    }
  }
  return r;
}

/// IEEE-aware total order used as the reference: -0.0 < +0.0; NaN above everything (propagate).
inline bool double_less(double a, double b) {
  if (std::isnan(b)) return !std::isnan(a);
  if (std::isnan(a)) return false;
  if (a == b) return std::signbit(a) && !std::signbit(b);
  return a < b;
}

/// Key-by-key max over ranks' reports, computed on the host.
inline hs::dynamic_report reference_max(std::vector<hs::dynamic_report> const& reports) {
  hs::dynamic_report out = reports.at(0);
  for (std::size_t r = 1; r < reports.size(); ++r)
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto const& cur = out[i].value;
      auto const& v = reports[r][i].value;
      if (cur.index() == 0) {
        if (std::get<0>(v) > std::get<0>(cur)) out.set(out[i].name, v);
      } else if (double_less(std::get<1>(cur), std::get<1>(v))) {
        out.set(out[i].name, v);
      }
    }
  return out;
}

/// One slot per rank for what that rank observed: lets a test assert every rank threw.
struct rank_outcomes {
  explicit rank_outcomes(int n) : message(static_cast<std::size_t>(n)), threw(static_cast<std::size_t>(n), 0) {}
  template <class E, class Fn>
  void expect_throw(int rank, Fn&& fn) {
    try {
      fn();
    } catch (E const& e) {
      message[static_cast<std::size_t>(rank)] = e.what();
      threw[static_cast<std::size_t>(rank)] = 1;
    }
  }
  [[nodiscard]] int count() const {
    int n = 0;
    for (char t : threw) n += t;
    return n;
  }
  std::vector<std::string> message;
  std::vector<char> threw;
};

}  // namespace stats_test
