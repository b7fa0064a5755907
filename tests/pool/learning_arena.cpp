// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/fsdp_trace.hpp"
#include "headroom/pool/learning_arena.hpp"
#include "headroom/pool/models.hpp"

namespace pool = headroom::pool;
namespace m = headroom::pool::models;
using pool::fallback_reason;
using pool::learning_arena;

namespace {

std::size_t fallbacks(learning_arena const& a, fallback_reason r) {
  return a.stats().fallbacks[static_cast<std::size_t>(r)];
}

// Drives an arena and checks, independently of it, that no two leases it served overlap.
struct driver {
  learning_arena& a;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> live;  // served: [begin, end)
  std::size_t served = 0;

  void acquire(std::uint64_t b, std::uint64_t bytes) {
    auto const o = a.acquire(b, bytes);
    if (!o) return;
    ++served;
    REQUIRE(a.plan().has_value());
    std::uint64_t const end = *o + bytes;
    CHECK(end <= a.arena_bytes());
    for (auto const& kv : live) {
      CAPTURE(b);
      CAPTURE(kv.first);
      CHECK_FALSE((kv.second.first < end && *o < kv.second.second));
    }
    live[b] = {*o, end};
  }
  void release(std::uint64_t b) {
    a.release(b);
    live.erase(b);
  }
};

// One pass over `order` (unit -> its bucket ids) acquiring `prefetch` units ahead.
template <class Bytes>
void pass(driver& d, std::vector<std::vector<std::uint64_t>> const& buckets, std::vector<std::size_t> const& order,
          std::size_t prefetch, Bytes const& bytes_per_bucket) {
  std::vector<char> held(buckets.size(), 0);
  std::size_t next = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    while (next < order.size() && next <= k + prefetch && !held[order[next]]) {
      for (auto b : buckets[order[next]]) d.acquire(b, bytes_per_bucket(b));
      held[order[next++]] = 1;
    }
    for (auto b : buckets[order[k]]) d.release(b);
    held[order[k]] = 0;
  }
}

// One modelled training (or eval) step: `order` forward with `prefetch` units ahead, then
// backward (a second lease of each unit before its backward under recompute), `micro` times.
struct step_spec {
  std::vector<std::size_t> order;
  std::size_t prefetch = 1;
  bool eval = false;
  std::size_t micro = 1;
  bool recompute = false;
};

step_spec random_step(std::mt19937_64& rng, std::size_t n, int shuffle_one_in) {
  step_spec s;
  for (std::size_t u = 0; u < n; ++u) s.order.push_back(u);
  if (rng() % static_cast<std::uint64_t>(shuffle_one_in) == 0) std::shuffle(s.order.begin(), s.order.end(), rng);
  s.prefetch = 1 + rng() % 2;
  s.eval = rng() % 4 == 0;
  s.micro = s.eval ? 1 : 1 + rng() % 2;
  s.recompute = rng() % 2 == 0;
  return s;
}

template <class Bytes>
void run_step(driver& d, std::vector<std::vector<std::uint64_t>> const& units, step_spec const& s,
              Bytes const& bytes) {
  std::vector<std::size_t> backward;
  for (auto it = s.order.rbegin(); it != s.order.rend(); ++it) {
    if (s.recompute) backward.push_back(*it);
    backward.push_back(*it);
  }
  for (std::size_t mb = 0; mb < s.micro; ++mb) {
    pass(d, units, s.order, s.prefetch, bytes);
    if (!s.eval) pass(d, units, backward, s.prefetch, bytes);
  }
}

// `n` units of 1 to 3 buckets (256 B .. 16 KiB, bf16 or fp32) declared in `a`; sizes by bucket.
std::vector<std::vector<std::uint64_t>> declare_units(learning_arena& a, std::mt19937_64& rng, std::size_t n,
                                                      std::map<std::uint64_t, std::uint64_t>& size) {
  std::vector<std::vector<std::uint64_t>> units(n);
  std::uint64_t id = 0;
  char const* dtypes[] = {"bfloat16", "float32"};
  for (std::size_t u = 0; u < n; ++u)
    for (std::size_t k = 1 + rng() % 3; k > 0; --k) {
      size[id] = 256 * (1 + rng() % 64);
      a.declare({id, u, 0, dtypes[rng() % 2], size[id]});
      units[u].push_back(id++);
    }
  return units;
}

}  // namespace

TEST_CASE("learning_arena: step 0 learned, then planned offsets; a double buffer never falls back") {
  auto const w = m::make_workload(m::nemotron_h_8b());
  learning_arena a({.planner = "interval"});
  auto const t = m::declare_fsdp_buckets(w);
  for (auto const& b : t.buckets()) a.declare(b);
  auto step = m::declare_fsdp_buckets(w);
  m::record_fsdp_step(step, w, m::fsdp_buffer::params, {.micro_batches = 2});
  driver d{a, {}, 0};
  auto const replay = [&] {
    for (auto const& e : step.events()) {
      if (e.kind == pool::lease_event_kind::acquire) d.acquire(e.bucket, e.bytes);
      else if (e.kind == pool::lease_event_kind::release) d.release(e.bucket);
    }
  };
  replay();
  CHECK(d.served == 0);
  CHECK(a.learning());
  CHECK(a.end_step());
  CHECK_FALSE(a.learning());
  auto const s0 = a.stats();
  CHECK(s0.arena_bytes > 0);
  CHECK(s0.arena_bytes <= s0.megatron_max_bytes);
  CHECK(s0.arena_bytes == s0.bound);  // a double buffer: at the bound
  for (int i = 0; i < 3; ++i) {
    replay();
    CHECK_FALSE(a.end_step());
  }
  auto const s = a.stats();
  CHECK(s.steps == 4);
  CHECK(s.recorded_steps == 1);  // nothing fell back: later steps are not kept
  CHECK(s.fallbacks == std::array<std::size_t, 3>{0, 0, 0});
  CHECK(s.unpooled > 0);  // the embedding and output layer buckets
  CHECK(s.served + s.unpooled == s.acquires);
  CHECK(d.served == s.served);
}

TEST_CASE("learning_arena: requests the plan does not hold fall back by reason; replan() takes them in") {
  // Groups listed H, L, H, L (units 0..3, H = 2000 B, L = 20 B), step 0 runs
  // them in order; a later step runs H, H, L, L: the two heavy units alive together.
  learning_arena a({.planner = "max", .alignment = 1});
  std::uint64_t const bytes[] = {2000, 20, 2000, 20, 64};
  for (std::uint64_t u = 0; u < 4; ++u) a.declare({u, u, 0, "bfloat16", bytes[u]});
  a.declare({4, 4, 0, "bfloat16", 64});  // never acquired in step 0
  driver d{a, {}, 0};
  auto const by_bucket = [](std::uint64_t b) -> std::uint64_t { return b == 4 ? 64 : (b % 2 == 0 ? 2000 : 20); };
  std::vector<std::vector<std::uint64_t>> const units{{0}, {1}, {2}, {3}};
  pass(d, units, {0, 1, 2, 3}, 1, by_bucket);
  CHECK(a.end_step());
  // MaxPool: one bf16 slot in two buffer groups; group 0 only ever held H, group 1 only L.
  CHECK(a.arena_bytes() == 2000 + 20);
  pass(d, units, {0, 2, 1, 3}, 1, by_bucket);  // H, H: 0 and 2 both pinned to group 0
  // 2 meets 0 in group 0 and group 1's slot holds 20 B: it falls back. 3 meets 1 in group 1 and
  // takes group 0's idle slot, as Megatron does.
  CHECK(fallbacks(a, fallback_reason::overlaps_live) == 1);
  d.acquire(4, 64);
  d.release(4);
  CHECK(fallbacks(a, fallback_reason::unknown_bucket) == 1);
  d.acquire(1, 4000);
  d.release(1);
  CHECK(fallbacks(a, fallback_reason::larger_than_planned) == 1);
  CHECK_FALSE(a.end_step());
  CHECK(a.stats().recorded_steps == 2);
  CHECK(a.replan());
  CHECK(a.stats().replans == 1);
  auto const before = a.stats().fallbacks;
  pass(d, units, {0, 2, 1, 3}, 1, by_bucket);
  pass(d, units, {0, 1, 2, 3}, 1, by_bucket);
  d.acquire(4, 64);
  d.release(4);
  d.acquire(1, 4000);
  d.release(1);
  CHECK_FALSE(a.end_step());
  CHECK(a.stats().fallbacks == before);  // the longer trace holds every request seen
  CHECK(a.stats().recorded_steps == 3);   // this step was not seen before: kept too
}

TEST_CASE("learning_arena: after replan() every step seen so far is served again without fallback, within max") {
  // Before: only steps with a fallback were kept, so a step served well before a replan could
  // fall back after it. Random unit orders (one step in two), prefetch, recompute, accumulation,
  // eval steps; 6 steps a seed, replan(), then every step again.
  std::size_t max_infeasible = 0, replay_won = 0, interval_runs = 0, kept = 0;
  for (std::uint64_t seed = 0; seed < 45; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    std::string const planner = seed % 3 == 0 ? "max" : (seed % 3 == 1 ? "by_bytes" : "interval");
    CAPTURE(planner);
    learning_arena a({.planner = planner});
    std::size_t const n = 2 + rng() % 7;
    std::map<std::uint64_t, std::uint64_t> size;
    auto const units = declare_units(a, rng, n, size);
    auto const bytes = [&](std::uint64_t b) { return size.at(b); };
    driver d{a, {}, 0};
    std::vector<step_spec> seen;
    for (int step = 0; step < 6; ++step) {
      seen.push_back(random_step(rng, n, 2));
      run_step(d, units, seen.back(), bytes);
      (void)a.end_step();
    }
    CHECK(a.stats().recorded_steps <= seen.size());  // repeats are kept once
    (void)a.replan();
    auto const before = a.stats();
    for (auto const& s : seen) {
      run_step(d, units, s, bytes);
      CHECK_FALSE(a.end_step());
    }
    auto const after = a.stats();
    CHECK(after.fallbacks == before.fallbacks);
    CHECK(after.acquires > before.acquires);
    CHECK((after.served - before.served) + (after.unpooled - before.unpooled) == after.acquires - before.acquires);
    CHECK(after.recorded_steps == before.recorded_steps);  // nothing new
    kept += after.recorded_steps;
    auto const& p = *a.plan();
    CHECK(p.arena_bytes >= p.bound);
    if (planner == "interval") {
      ++interval_runs;
      auto const mx = p.candidates.front();
      REQUIRE(mx.name == "max");
      CHECK(p.arena_bytes <= mx.arena_bytes);  // feasible or not: the run time follows MaxPool's moves
      CHECK(p.arena_bytes <= after.megatron_max_bytes);  // buckets ask the same bytes: max is Megatron's
      if (!mx.feasible) ++max_infeasible;
      if (p.winner != "packing") ++replay_won;
    } else if (planner == "max") {
      CHECK(after.arena_bytes >= after.megatron_max_bytes);  // the replay (covering moved requests)
    }
  }
  MESSAGE("replan: " << kept << " distinct steps kept of 270; max infeasible (Megatron moved a bucket) in "
                     << max_infeasible << " of " << interval_runs << " interval runs; a replay won " << replay_won);
}

TEST_CASE("learning_arena: a max plan's arena covers a bucket's largest request at its pinned slot") {
  // One bf16 slot per unit, alignment 1. Bucket 1 is pinned to group 1 and asks 4000 B while
  // bucket 2 holds group 1, so Megatron serves it at group 0's slot: group 0 holds 4000 B,
  // group 1 64 B (4064 B). Alone, bucket 1 then takes its pinned slot for 4000 B: the arena
  // must reach 4000 + 4000.
  learning_arena a({.planner = "max", .alignment = 1});
  for (std::uint64_t b = 0; b < 3; ++b) a.declare({b, b, 0, "bfloat16", 64});
  driver d{a, {}, 0};
  auto const step0 = [&] {
    d.acquire(0, 64);
    d.acquire(1, 64);
    d.release(0);
    d.release(1);
    d.acquire(0, 64);
    d.acquire(2, 64);
    d.release(0);
    d.acquire(1, 4000);
    d.release(1);
    d.release(2);
  };
  step0();
  CHECK(a.end_step());
  CHECK(a.stats().megatron_max_bytes == 4064);
  CHECK(a.plan()->offsets.at(1) == 4000);
  CHECK(a.arena_bytes() == 8000);
  CHECK_FALSE(a.plan()->candidates.front().feasible);
  step0();  // bucket 1's 4000 B at group 0's slot, as Megatron
  d.acquire(1, 4000);  // its pinned slot, within the arena (the driver checks)
  d.release(1);
  CHECK(a.stats().fallbacks == std::array<std::size_t, 3>{0, 0, 0});
  CHECK(d.served == 6);
}

TEST_CASE("learning_arena fuzz: random orders, recompute, accumulation, eval steps; no overlap, never above max") {
  std::mt19937_64 rng(33);
  std::size_t total_fallbacks = 0, total_served = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::size_t const n = 2 + rng() % 10;
    learning_arena a({.planner = trial % 3 == 0 ? "max" : (trial % 3 == 1 ? "by_bytes" : "interval")});
    std::map<std::uint64_t, std::uint64_t> size;
    auto const units = declare_units(a, rng, n, size);
    auto const bytes = [&](std::uint64_t b) { return size.at(b); };
    driver d{a, {}, 0};
    for (int step = 0; step < 8; ++step) {
      run_step(d, units, random_step(rng, n, 3), bytes);
      bool const changed = a.end_step();
      CHECK((step == 0 || !changed));
      if (step == 4) (void)a.replan();
    }
    auto const s = a.stats();
    total_fallbacks += s.fallbacks[0] + s.fallbacks[1] + s.fallbacks[2];
    total_served += s.served;
    if (a.plan() && a.plan()->planner == "interval") {
      auto const mx = a.plan()->candidates.front();
      CHECK(a.arena_bytes() <= mx.arena_bytes);  // feasible or not (follow_moves)
    }
  }
  MESSAGE("fuzz: " << total_served << " leases served, " << total_fallbacks << " fell back");
}

TEST_CASE("learning_arena: bad input and the event cap name the value") {
  CHECK_THROWS_WITH_AS(learning_arena({.planner = "fixed"}), doctest::Contains("planner 'fixed'"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(learning_arena({.alignment = 100}), doctest::Contains("alignment 100"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(learning_arena({.max_events = 0}), doctest::Contains("max_events = 0"),
                       headroom::invalid_argument);
  learning_arena a({.max_events = 5});
  a.declare({0, 0, 0, "bfloat16", 64});
  a.declare({1, 1, 0, "bfloat16", 64});
  CHECK_THROWS_WITH_AS(a.replan(), doctest::Contains("replan() before the first end_step()"), headroom::logic_error);
  CHECK_THROWS_WITH_AS((void)a.acquire(7, 64), doctest::Contains("bucket 7, which was never declared"),
                       headroom::invalid_argument);
  CHECK_FALSE(a.acquire(0, 64).has_value());
  CHECK_THROWS_WITH_AS((void)a.acquire(0, 64), doctest::Contains("bucket 0, which is held"), headroom::logic_error);
  CHECK_THROWS_WITH_AS(a.end_step(), doctest::Contains("1 bucket(s) held"), headroom::logic_error);
  a.release(0);
  CHECK_THROWS_WITH_AS(a.release(0), doctest::Contains("bucket 0, which is not held"), headroom::logic_error);
  (void)a.acquire(1, 64);
  a.release(1);
  CHECK(a.end_step());  // 5 events: the cap
  CHECK(a.arena_bytes() == 256);
  CHECK(*a.acquire(0, 64) == 0);
  CHECK_FALSE(a.acquire(1, 64).has_value());  // both planned at 0: 1 meets 0
  a.release(0);
  a.release(1);
  // The step fell back: keeping it would take the trace to 10 events.
  CHECK_THROWS_WITH_AS(a.end_step(), doctest::Contains("beyond max_events = 5"), headroom::capacity_error);
  CHECK(a.stats().recorded_steps == 1);
  CHECK(a.arena_bytes() == 256);  // the plan stands
  for (int i = 0; i < 2; ++i) {
    CHECK(a.acquire(0, 64).has_value());
    a.release(0);
  }
  (void)a.acquire(0, 64);  // the 5th event of the step
  CHECK_THROWS_WITH_AS(a.release(0), doctest::Contains("would exceed max_events = 5"), headroom::capacity_error);
  CHECK_THROWS_WITH_AS(a.replan(), doctest::Contains("replan() within a step"), headroom::logic_error);
}

TEST_CASE("learning_arena: keep_place serves a bucket where its first lease of the step was") {
  // Three units used one at a time: the plan puts all three at offset 0.
  learning_arena a({.planner = "interval"});
  for (std::uint64_t u = 0; u < 3; ++u) a.declare({u, u, 0, "bfloat16", 1000});
  for (std::uint64_t u = 0; u < 3; ++u) {
    CHECK_FALSE(a.acquire(u, 1000).has_value());
    a.release(u);
  }
  CHECK(a.end_step());
  REQUIRE(a.plan()->offsets == std::map<std::uint64_t, std::uint64_t>{{0, 0}, {1, 0}, {2, 0}});
  CHECK(a.acquire(0, 1000, true) == std::optional<std::uint64_t>(0));
  CHECK_FALSE(a.acquire(1, 1000, true).has_value());  // 0 holds the bytes: off the arena
  a.release(0);
  a.release(1);
  CHECK_FALSE(a.acquire(1, 1000, true).has_value());  // the arena is free now, but 1 stays off it
  CHECK(fallbacks(a, fallback_reason::overlaps_live) == 2);
  CHECK(a.acquire(2, 1000, true) == std::optional<std::uint64_t>(0));
  auto const acquires = a.stats().acquires;
  CHECK_THROWS_WITH_AS((void)a.acquire(0, 1000, true),
                       doctest::Contains("bucket 0 of unit 0 was served at arena offset 0 earlier in this step"),
                       headroom::capacity_error);
  CHECK_THROWS_WITH_AS((void)a.acquire(0, 1000, true), doctest::Contains("bucket 2 holds those bytes now"),
                       headroom::capacity_error);
  CHECK(a.stats().acquires == acquires);  // refused: nothing recorded
  CHECK_FALSE(a.acquire(0, 1000).has_value());  // without keep_place: an ordinary fallback
  a.release(0);
  a.release(1);
  a.release(2);
  auto const before = a.stats();
  CHECK(a.acquire(0, 1000, true) == std::optional<std::uint64_t>(0));  // 0 came back to a free range
  CHECK(a.stats().fallbacks == before.fallbacks);
  CHECK(a.stats().served == before.served + 1);
  a.release(0);
  CHECK_THROWS_WITH_AS((void)a.acquire(0, 4000, true), doctest::Contains("4000 bytes do not fit there now"),
                       headroom::capacity_error);
  CHECK_FALSE(a.end_step());
  CHECK(a.acquire(1, 1000, true) == std::optional<std::uint64_t>(0));  // a new step: where the plan says
  a.release(1);
}

TEST_CASE("learning_arena: can_acquire answers whether requests find room, releasable leases counted free") {
  learning_arena a({.planner = "max"});
  for (std::uint64_t u = 0; u < 4; ++u) a.declare({u, u, 0, "bfloat16", 16});
  a.declare({4, pool::no_trace_unit, 0, "bfloat16", 16});
  std::vector<std::uint64_t> const all{0, 1, 2, 3, 4};
  CHECK(a.can_acquire(all));  // learning: the caller serves everything
  driver d{a, {}, 0};
  pass(d, {{0}, {1}, {2}, {3}}, {0, 1, 2, 3}, 1, [](std::uint64_t) { return std::uint64_t{16}; });
  CHECK(a.end_step());
  CHECK(a.arena_bytes() == 2 * 256);  // MaxPool: one slot in each of two buffer groups
  d.acquire(0, 16);
  d.acquire(1, 16);
  using ids = std::vector<std::uint64_t>;
  CHECK(a.can_acquire(ids{0, 1}));  // held: count as held
  CHECK(a.can_acquire(ids{4}));     // outside every unit: not the arena's
  CHECK_FALSE(a.can_acquire(ids{2}));  // both slots are held
  CHECK(a.can_acquire(ids{2}, ids{0}));
  CHECK_FALSE(a.can_acquire(ids{2, 3}, ids{0}));
  CHECK(a.can_acquire(ids{2, 3}, ids{0, 1}));
  CHECK(a.stats().acquires == 2);  // a question, not a lease
  CHECK_THROWS_WITH_AS((void)a.can_acquire(ids{9}), doctest::Contains("bucket 9, which was never declared"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS((void)a.can_acquire(ids{2}, ids{8}), doctest::Contains("bucket 8"), headroom::invalid_argument);
  d.release(0);
  d.release(1);
}
