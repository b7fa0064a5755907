// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/lifetime_pack.hpp"
#include "lifetime_brute_force.hpp"

namespace pool = headroom::pool;
using pool::lifetime_item;

namespace {

constexpr std::size_t A = 256;

// Random items: sizes 1..`max_units` alignment units, 1..2 lifetimes on a clock of `horizon` ticks.
std::vector<lifetime_item> random_items(std::mt19937_64& rng, std::size_t n, std::uint64_t max_units,
                                        std::uint64_t horizon) {
  std::uniform_int_distribution<std::uint64_t> units(1, max_units), t(0, horizon - 1), lives(1, 2);
  std::vector<lifetime_item> out;
  for (std::size_t i = 0; i < n; ++i) {
    lifetime_item it{units(rng) * A - (rng() % A), {}};  // unaligned bytes: the packer rounds up
    for (std::uint64_t k = lives(rng); k > 0; --k) {
      std::uint64_t a = t(rng), b = t(rng);
      if (a == b) ++b;
      it.alive.push_back({std::min(a, b), std::max(a, b)});
    }
    out.push_back(std::move(it));
  }
  return out;
}

void check_valid(std::vector<lifetime_item> const& items, pool::lifetime_packing const& p) {
  REQUIRE(p.offsets.size() == items.size());
  CHECK_FALSE(pool::find_overlap(items, p.offsets, A).has_value());
  std::uint64_t top = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    CHECK(p.offsets[i] % A == 0);
    top = std::max(top, p.offsets[i] + headroom::align_up(items[i].bytes, A));
  }
  CHECK(top == p.arena_bytes);
  CHECK(p.bound <= p.arena_bytes);
}

}  // namespace

TEST_CASE("pack_lifetimes: the exact search equals a brute-force optimum on random small inputs") {
  std::mt19937_64 rng(33);
  int below_greedy = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::size_t const n = 1 + trial % 6;
    auto const items = random_items(rng, n, 4, 10);
    auto const packed = pool::pack_lifetimes(items, {.alignment = A});
    check_valid(items, packed);
    CHECK(packed.optimal);
    CHECK(packed.arena_bytes == pool_test::brute_force(items, A).solve());
    auto const greedy = pool::pack_lifetimes(items, {.alignment = A, .exact_items = 0});
    check_valid(items, greedy);
    CHECK(greedy.arena_bytes >= packed.arena_bytes);
    below_greedy += greedy.arena_bytes > packed.arena_bytes ? 1 : 0;
  }
  MESSAGE("exact beat greedy on " << below_greedy << " of 300 inputs");
}

TEST_CASE("the exact search alone, started from stacking every item, reaches the brute-force optimum") {
  std::mt19937_64 rng(34);
  for (int trial = 0; trial < 200; ++trial) {
    std::size_t const n = 1 + trial % 7;
    auto const items = random_items(rng, n, 4, 10);
    auto const problem = pool::detail::make_pack_problem(items, A);
    pool::detail::pack_result stacked;
    stacked.arena = 0;
    for (std::size_t i = 0; i < n; ++i) {
      stacked.offset.push_back(stacked.arena);
      stacked.arena += problem.size[i];
    }
    CHECK(pool::detail::exact_search(problem, stacked, 1'000'000).run());
    pool::lifetime_packing as_packed{stacked.offset, stacked.arena, problem.bound, "exact", true};
    check_valid(items, as_packed);
    CHECK(stacked.arena == pool_test::brute_force(items, A).solve());
  }
}

TEST_CASE("pack_lifetimes: 12 items finish the exact search within its budget") {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 20; ++trial) {
    auto const items = random_items(rng, 12, 8, 24);
    auto const packed = pool::pack_lifetimes(items, {.alignment = A});
    check_valid(items, packed);
    CHECK(packed.optimal);
  }
}

TEST_CASE("pack_lifetimes: a known gap above the bound (the greedy left-edge trap)") {
  // Three items of 2 units pairwise overlapping at different instants, one of 1 unit: bound 4
  // units, optimum 4 by hand: a=[0,2) 2u, b=[1,3) 2u, c=[2,4) 2u at the offsets of a.
  std::vector<lifetime_item> items{{2 * A, {{0, 2}}}, {2 * A, {{1, 3}}}, {2 * A, {{2, 4}}}};
  auto const p = pool::pack_lifetimes(items, {.alignment = A});
  check_valid(items, p);
  CHECK(p.bound == 4 * A);
  CHECK(p.arena_bytes == 4 * A);
  CHECK(p.offsets[0] == p.offsets[2]);
  // An odd cycle of conflicts: 5 items each overlapping its two neighbours, 1 unit each, on
  // lifetimes with two intervals: bound 2 units, optimum 3 (a 5-cycle needs 3 colours).
  std::vector<lifetime_item> cycle;
  for (std::uint64_t i = 0; i < 5; ++i) cycle.push_back({A, {{2 * i, 2 * i + 3}}});
  cycle[4].alive.push_back({0, 1});  // item 4 also meets item 0
  auto const c = pool::pack_lifetimes(cycle, {.alignment = A});
  check_valid(cycle, c);
  CHECK(c.bound == 2 * A);
  CHECK(c.arena_bytes == 3 * A);
  CHECK(c.optimal);
}

TEST_CASE("pack_lifetimes: half-open lifetimes, zero bytes, merged intervals") {
  std::vector<lifetime_item> items{{100, {{0, 5}}}, {100, {{5, 9}}}, {0, {{0, 9}}}, {300, {{1, 3}, {2, 4}}}};
  auto const p = pool::pack_lifetimes(items, {.alignment = A});
  check_valid(items, p);
  CHECK(p.offsets[2] == 0);
  CHECK(p.bound == 3 * A);
  CHECK(p.arena_bytes == 3 * A);
  std::vector<lifetime_item> touching{{A, {{0, 5}}}, {A, {{5, 9}}}};  // [0,5) and [5,9) do not overlap
  CHECK(pool::pack_lifetimes(touching, {.alignment = A}).arena_bytes == A);
  auto const none = pool::pack_lifetimes(std::vector<lifetime_item>{}, {});
  CHECK(none.arena_bytes == 0);
  CHECK(none.offsets.empty());
}

TEST_CASE("pack_lifetimes: greedy on large inputs stays valid and near the bound on interval lifetimes") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<lifetime_item> items;
    std::uniform_int_distribution<std::uint64_t> units(1, 64), start(0, 999), len(1, 100);
    for (int i = 0; i < 300; ++i) {
      std::uint64_t const b = start(rng);
      items.push_back({units(rng) * A, {{b, b + len(rng)}}});
    }
    auto const p = pool::pack_lifetimes(items, {.alignment = A});
    check_valid(items, p);
    CHECK(p.ratio_to_bound() <= 1.25);
  }
}

TEST_CASE("pack_lifetimes: bad input names the item and the value") {
  std::vector<lifetime_item> empty_life{{A, {}}};
  CHECK_THROWS_WITH_AS((void)pool::pack_lifetimes(empty_life), doctest::Contains("item 0 (256 bytes) has no lifetime"),
                       headroom::invalid_argument);
  std::vector<lifetime_item> backwards{{A, {{0, 1}}}, {A, {{1, 2}, {7, 7}}}};
  CHECK_THROWS_WITH_AS((void)pool::pack_lifetimes(backwards), doctest::Contains("item 1 lifetime 1 is [7, 7)"),
                       headroom::invalid_argument);
  std::vector<lifetime_item> ok{{A, {{0, 1}}}};
  CHECK_THROWS_WITH_AS((void)pool::pack_lifetimes(ok, {.alignment = 48}), doctest::Contains("alignment 48"),
                       headroom::invalid_argument);
  std::vector<lifetime_item> huge{{std::uint64_t{1} << 61, {{0, 1}}}, {std::uint64_t{1} << 61, {{0, 1}}},
                                  {1, {{0, 1}}}};
  CHECK_THROWS_AS((void)pool::pack_lifetimes(huge), headroom::capacity_error);
  std::vector<std::uint64_t> offsets{0};
  CHECK_THROWS_WITH_AS((void)pool::find_overlap(backwards, offsets, A), doctest::Contains("1 offsets for 2 items"),
                       headroom::invalid_argument);
}
