// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "headroom/stats/counter.hpp"

namespace hs = headroom::stats;

TEST_CASE("counter: value, peak and total follow adds and subtracts") {
  hs::counter c;
  c += 100;
  c += 50;
  c -= 120;
  c += 10;
  CHECK(c == hs::counter{40, 150, 160});
  c.reset_peak();
  CHECK(c.peak == 40);
  c += 5;
  CHECK(c.peak == 45);
  CHECK_THROWS_WITH_AS(c += -1, doctest::Contains("cannot add -1"), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c -= -3, doctest::Contains("cannot subtract -3"), headroom::invalid_argument);
  CHECK(c == hs::counter{45, 45, 165});  // a rejected call changes nothing
  std::ostringstream os;
  os << c;
  CHECK(os.str() == "{value 45, peak 45, total 165}");
}

TEST_CASE("counter::absorb folds a child scope as RMM does") {
  hs::counter parent{1000, 1200, 5000};
  hs::counter child{-300, 400, 900};  // freed parent memory, peaked 400 above the parent's value
  parent.absorb(child);
  CHECK(parent == hs::counter{700, 1400, 5900});
  hs::counter low{1000, 5000, 5000};
  low.absorb(hs::counter{10, 20, 20});
  CHECK(low.peak == 5000);  // the old peak stays when the child never reached it
}

TEST_CASE("scoped_counters: push/pop measures a phase while the outer counters stay exact") {
  hs::scoped_counters<2> sc;
  sc.add({1000, 1});
  sc.push();
  CHECK(sc.depth() == 2);
  sc.add({500, 1});
  sc.add({200, 1});
  sc.sub({500, 1});
  sc.sub({1000, 1});  // frees memory allocated before the scope
  auto const inner = sc.pop();
  CHECK(inner[0] == hs::counter{-800, 700, 700});
  CHECK(inner[1] == hs::counter{0, 2, 2});
  CHECK(sc.depth() == 1);
  CHECK(sc.current(0) == hs::counter{200, 1700, 1700});
  CHECK(sc.current(1) == hs::counter{1, 3, 3});
  CHECK_THROWS_WITH_AS(static_cast<void>(sc.pop()), doctest::Contains("no scope was pushed"), headroom::logic_error);
  CHECK_THROWS_WITH_AS(sc.add(2, 1), doctest::Contains("counter index 2 out of range [0, 2)"), headroom::invalid_argument);
  CHECK_THROWS_AS(sc.add({-1, 0}), headroom::invalid_argument);
  CHECK(sc.current(0) == hs::counter{200, 1700, 1700});  // the rejected batch left no partial update
}

TEST_CASE("scoped_counters: nested scopes on random traffic agree with a flat recount") {
  std::mt19937_64 gen(42);
  for (int trial = 0; trial < 50; ++trial) {
    hs::scoped_counters<1> sc;
    hs::counter flat;
    std::vector<std::int64_t> live;
    int depth = 0;
    for (int step = 0; step < 400; ++step) {
      auto const action = gen() % 10;
      if (action < 5 || live.empty()) {
        auto const n = static_cast<std::int64_t>(gen() % 4096);
        live.push_back(n);
        sc.add(0, n);
        flat += n;
      } else if (action < 8) {
        auto const i = gen() % live.size();
        sc.sub(0, live[i]);
        flat -= live[i];
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (action == 8) {
        sc.push();
        ++depth;
      } else if (depth > 0) {
        static_cast<void>(sc.pop());
        --depth;
      }
    }
    while (depth-- > 0) static_cast<void>(sc.pop());
    CHECK(sc.current(0) == flat);
  }
}

TEST_CASE("counter_scope pops on destruction; close() returns the scope early") {
  hs::scoped_counters<1> sc;
  {
    hs::counter_scope<1> s(sc);
    sc.add(0, 7);
    CHECK(sc.depth() == 2);
  }
  CHECK(sc.depth() == 1);
  CHECK(sc.current(0) == hs::counter{7, 7, 7});
  hs::counter_scope<1> s(sc);
  sc.add(0, 3);
  auto const closed = s.close();
  CHECK(closed[0] == hs::counter{3, 3, 3});
  CHECK_THROWS_WITH_AS(static_cast<void>(s.close()), doctest::Contains("already closed"), headroom::logic_error);
}

TEST_CASE("reset_peaks and take_window give per-window peaks (torchtitan style)") {
  hs::scoped_counters<1> sc;
  sc.add(0, 100);
  sc.sub(0, 60);
  auto const w1 = sc.take_window();
  CHECK(w1[0] == hs::counter{40, 100, 100});
  CHECK(sc.current(0).peak == 40);
  sc.add(0, 10);
  sc.sub(0, 10);
  CHECK(sc.take_window()[0].peak == 50);
  sc.push();
  sc.add(0, 5);
  sc.reset_peaks();  // every scope: peak = value
  CHECK(sc.current(0) == hs::counter{5, 5, 5});
  static_cast<void>(sc.pop());
  CHECK(sc.current(0) == hs::counter{45, 45, 115});
}

TEST_CASE("scoped_counters is exact under 8 threads of concurrent traffic, reads and window resets") {
  hs::scoped_counters<2> sc;
  constexpr int threads = 8;
  constexpr int iterations = 5000;
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int i = 0; i < iterations; ++i) {
          auto const n = static_cast<std::int64_t>(1 + (i + t) % 64);
          sc.add({n, 1});
          if (i % 7 == 0) static_cast<void>(sc.current());
          if (t == 0 && i % 500 == 0) static_cast<void>(sc.take_window());
          sc.sub({n, 1});
        }
      });
  }
  auto const c = sc.current();
  CHECK(c[0].value == 0);
  CHECK(c[1].value == 0);
  std::int64_t expected_total = 0;
  for (int t = 0; t < threads; ++t)
    for (int i = 0; i < iterations; ++i) expected_total += 1 + (i + t) % 64;
  CHECK(c[0].total == expected_total);
  CHECK(c[1].total == threads * iterations);
  CHECK(c[1].peak <= threads);
  CHECK(c[1].peak >= 1);
}
