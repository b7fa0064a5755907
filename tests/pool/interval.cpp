// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "headroom/pool/interval.hpp"
#include "headroom/pool/models.hpp"
#include "headroom/pool/plan.hpp"
#include "substrate.hpp"

using namespace pool_test;
namespace m = headroom::pool::models;

namespace {
// Random workload: 1..40 units of 1..3 buckets, bf16 / fp32 / u8, up to 1 MiB each.
workload random_workload(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> units(1, 40), buckets(1, 3), kind(0, 2);
  std::uniform_int_distribution<std::uint64_t> elems(1, 1u << 19);
  dtype const types[] = {dtype::bf16, dtype::f32, dtype::u8};
  workload w{"random", {}, {}};
  std::size_t const n = units(rng);
  for (std::size_t u = 0; u < n; ++u) {
    unit un{"u" + std::to_string(u), {}};
    std::size_t const k = buckets(rng);
    for (std::size_t b = 0; b < k; ++b) un.buckets.push_back(elements_of(types[kind(rng)], elems(rng)));
    w.units.push_back(std::move(un));
  }
  return w;
}

std::string message_of(auto&& f) { return error_of<headroom::error>(f); }
}  // namespace

TEST_CASE("N = 2: the arena equals the lower bound on random workloads (training, and training + eval)") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    workload const w = random_workload(rng);
    std::vector<execution_order> const train{training_order(w)};
    std::vector<execution_order> const both{training_order(w), evaluation_order(w)};
    for (auto const* orders : {&train, &both}) {
      auto const p = make_interval_plan(w, *orders, {.resident = 2});
      INFO("trial ", trial, " units ", w.units.size());
      CHECK(p.arena_bytes == lower_bound(w, *orders, 2));
      for (auto const& o : *orders) CHECK_FALSE(find_conflict(p, o).has_value());
    }
  }
}

TEST_CASE("N = 3, 4: valid, at least the bound, never larger than MaxPool with as many buffers") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    workload const w = random_workload(rng);
    std::vector<execution_order> const orders{training_order(w), evaluation_order(w)};
    for (std::size_t n : {3u, 4u}) {
      // Beyond the training order's entries: every unit alive together, planned as that.
      auto const p = make_interval_plan(w, orders, {.resident = n});
      INFO("trial ", trial, " N ", n);
      if (n > 2 * w.units.size()) CHECK(p.resident == 2 * w.units.size());
      CHECK(p.arena_bytes >= lower_bound(w, orders, n));
      CHECK(p.arena_bytes <= make_plan<max, by_bytes>(w, {.buffers = n}).arena_bytes);
      CHECK(p.arena_bytes <= make_plan<max, by_dtype>(w, {.buffers = n}).arena_bytes);
      for (auto const& o : orders) CHECK_FALSE(find_conflict(p, o).has_value());
    }
  }
}

TEST_CASE("model workloads: N = 2 meets the bound, fp8 variants included; buckets of any dtype share bytes") {
  for (auto const& c : m::all_cases())
    for (int fp8 = 0; fp8 < 3; ++fp8) {
      auto const w = m::make_workload(c.config, {.expert_parallel = c.expert_parallel,
                                                 .fp8_params = fp8 > 0,
                                                 .first_last_layers_bf16 = fp8 == 1});
      INFO(w.name);
      std::vector<execution_order> const orders{training_order(w), evaluation_order(w)};
      auto const p = make_interval_plan(w, orders, {.resident = 2});
      CHECK(p.arena_bytes == lower_bound(w, orders, 2));
      CHECK(p.arena_bytes <= make_plan<max>(w).arena_bytes);
    }
}

TEST_CASE("a plan is deterministic, printable and lays every bucket of a unit back to back") {
  workload const w{"w",
                   {{"a", {elements_of(dtype::bf16, 1000), fp8(300)}},
                    {"b", {elements_of(dtype::f32, 100)}},
                    {"c", {elements_of(dtype::bf16, 10)}}},
                   {}};
  auto const p = make_interval_plan(w, {training_order(w)});
  CHECK(p == make_interval_plan(w, {training_order(w)}));
  CHECK(p.planner == "interval");
  CHECK(p.buffers == 1);
  CHECK(p.resident == 2);
  CHECK(p.shapes.size() == 4);
  CHECK(p.slots.size() == 4);
  auto const& a0 = p.slots[p.bucket_shape[0][0]];
  auto const& a1 = p.slots[p.bucket_shape[0][1]];
  CHECK(a1.offset == a0.offset + align_up(2000, default_alignment));
  CHECK(p.candidate_slots(0, 1).size() == 1);
  auto const text = p.to_string();
  CHECK(contains(text, "planner=interval"));
  CHECK(contains(text, "resident=2 orders=train(6)"));
  // a (2048 + 512 B) and b (512 B) are adjacent in the order, b and c too; a and c are not.
  CHECK(p.arena_bytes == lower_bound(w, std::vector{training_order(w)}, 2));
  CHECK(p.arena_bytes == 2048 + 512 + 512);
}

TEST_CASE("validate rejects overlapping residents, naming both units and the window") {
  workload const w{"w",
                   {{"a", {elements_of(dtype::bf16, 1000)}},
                    {"b", {elements_of(dtype::bf16, 1000)}},
                    {"c", {elements_of(dtype::bf16, 1000)}}},
                   {}};
  auto p = make_interval_plan(w, {training_order(w)});
  validate(p, training_order(w));
  // Move b onto a: they are resident together at positions 0..1 of the training order.
  p.slots[p.bucket_shape[1][0]].offset = p.slots[p.bucket_shape[0][0]].offset;
  auto const c = find_conflict(p, training_order(w));
  REQUIRE(c.has_value());
  CHECK(c->position == 0);
  CHECK(c->first_unit == 0);
  CHECK(c->second_unit == 1);
  auto const msg = message_of([&] { validate(p, training_order(w)); });
  CHECK(contains(msg, "unit 0 'a'"));
  CHECK(contains(msg, "unit 1 'b'"));
  CHECK(contains(msg, "positions 0..1 of order 'train'"));
  CHECK_THROWS_AS(validate(p, training_order(w)), logic_error);
}

TEST_CASE("max plans validate by slot demand: 3 residents of one shape need 3 buffers") {
  auto const w = m::make_workload(m::nemotron_h_8b());
  auto const mp = make_plan<max>(w, {.buffers = 2});
  CHECK_FALSE(find_conflict(mp, training_order(w), 2).has_value());
  auto const c = find_conflict(mp, training_order(w), 3);
  REQUIRE(c.has_value());
  CHECK(contains(c->message, "2 buffers"));
  CHECK_FALSE(find_conflict(make_plan<max>(w, {.buffers = 3}), training_order(w), 3).has_value());
}

TEST_CASE("evaluation interleaved with training: detected when not registered, fine when planned for") {
  // Five units: a training-only plan (a path u0 - u1 - ... - u4) may put u0 and u4 on one side.
  workload w{"five", {}, {}};
  for (int u = 0; u < 5; ++u) w.units.push_back({"u" + std::to_string(u), {elements_of(dtype::bf16, 1000 + u)}});
  // Evaluation pass, then the next training step: u4 (end of eval) meets u0 (start of training).
  execution_order eval_then_train = evaluation_order(w, "eval+train");
  for (auto u : training_order(w).units) eval_then_train.units.push_back(u);

  auto const train_only = make_interval_plan(w, {training_order(w)});
  auto const c = find_conflict(train_only, eval_then_train);
  REQUIRE(c.has_value());
  CHECK(c->position == 4);  // window u4, u0
  CHECK(contains(c->message, "order 'eval+train'"));

  auto const both = make_interval_plan(w, {training_order(w), eval_then_train});
  CHECK_FALSE(find_conflict(both, eval_then_train).has_value());
  CHECK_FALSE(find_conflict(both, training_order(w)).has_value());
  // The union adds u4 - u0: residency is now a 5-cycle of equal units, which needs three units'
  // bytes (an odd cycle cannot be split into two sides), one more than the window bound.
  CHECK(lower_bound(w, std::vector{training_order(w), eval_then_train}, 2) == 2 * 2048);
  CHECK(both.arena_bytes == 3 * 2048);
}

TEST_CASE("bad input gets a clear error") {
  auto const w = m::make_workload(m::nemotron_h_8b());
  std::vector<execution_order> const train{training_order(w)};
  CHECK(contains(message_of([&] { (void)make_interval_plan(w, train, {.resident = 1}); }), "N = 1"));
  CHECK(contains(message_of([&] { (void)lower_bound(w, train, 0); }), "N = 0"));
  CHECK(contains(message_of([&] { (void)make_interval_plan(w, std::vector<execution_order>{}); }),
                 "no execution order"));
  CHECK(contains(message_of([&] { (void)make_interval_plan(w, {execution_order{"empty", {}}}); }),
                 "'empty' is empty"));
  auto bad = training_order(w);
  bad.units[7] = 52;
  CHECK(contains(message_of([&] { (void)make_interval_plan(w, {bad}); }), "names unit 52 at position 7"));
  auto partial = evaluation_order(w);
  partial.units.pop_back();
  CHECK(contains(message_of([&] { (void)make_interval_plan(w, {partial}); }), "unit 51 is missing from every"));
  CHECK(contains(message_of([&] { (void)make_interval_plan(w, train, {.resident = 2, .alignment = 48}); }),
                 "alignment 48"));
  CHECK_THROWS_AS((void)make_interval_plan(w, train, {.resident = 1}), invalid_argument);
  auto const p = make_interval_plan(w, train);
  CHECK(contains(message_of([&] { validate(p, bad); }), "names unit 52"));
  CHECK(contains(message_of([&] { validate(make_plan<max>(w), training_order(w)); }), "N = 0"));
  CHECK_THROWS_AS(validate(p, execution_order{"e", {}}), invalid_argument);
}

TEST_CASE("resident N at the edge: beyond the longest order means every unit together; find_conflict never wraps") {
  auto const w = m::make_workload(m::nemotron_h_8b());  // 52 units: training order of 104 entries
  std::vector<execution_order> const both{training_order(w), evaluation_order(w)};
  // Was std::bad_alloc (2^40) and std::length_error (SIZE_MAX) from the planner's per-N tables,
  // then refused: a window longer than the order holds every unit of it, so it is planned as N = 104.
  auto const all = make_interval_plan(w, both, {.resident = 104});
  CHECK(all.arena_bytes == lower_bound(w, both, 104));
  CHECK(all.arena_bytes == headroom::align_up(all.arena_bytes, headroom::default_alignment));
  CHECK_FALSE(find_conflict(all, training_order(w), SIZE_MAX).has_value());
  for (std::size_t n : {std::size_t{1} << 40, SIZE_MAX, std::size_t{105}}) {
    INFO("N = ", n);
    auto const p = make_interval_plan(w, both, {.resident = n});
    CHECK(p.arena_bytes == all.arena_bytes);
    CHECK(p.resident == 104);
    CHECK(lower_bound(w, both, n) == lower_bound(w, both, 104));
  }
  // N = 3 on a 2-entry order: both units alive together.
  workload two{"two", {{"a", {elements_of(dtype::bf16, 1000)}}, {"b", {elements_of(dtype::bf16, 3000)}}}, {}};
  auto const p2 = make_interval_plan(two, {evaluation_order(two)}, {.resident = 3});
  CHECK(p2.arena_bytes == headroom::align_up(2000, 256) + headroom::align_up(6000, 256));
  CHECK_FALSE(find_conflict(p2, evaluation_order(two), 3).has_value());

  // find_conflict(plan, order, SIZE_MAX): the window is the whole order. Units 0 and 2 share
  // bytes in an N = 2 plan and are 2 entries apart; `i + resident` used to wrap and miss them.
  workload three{"three",
                 {{"a", {elements_of(dtype::bf16, 1000)}},
                  {"b", {elements_of(dtype::bf16, 1000)}},
                  {"c", {elements_of(dtype::bf16, 1000)}}},
                 {}};
  auto const p = make_interval_plan(three, {training_order(three)});
  REQUIRE(p.slots[p.bucket_shape[0][0]].offset == p.slots[p.bucket_shape[2][0]].offset);
  CHECK_FALSE(find_conflict(p, training_order(three)).has_value());
  for (std::size_t n : {std::size_t{3}, std::size_t{1} << 40, SIZE_MAX - 1, SIZE_MAX}) {
    INFO("N = ", n);
    auto const c = find_conflict(p, training_order(three), n);
    REQUIRE(c.has_value());
    CHECK(c->position == 0);
    CHECK(c->first_unit == 0);
    CHECK(c->second_unit == 2);
    CHECK(contains(c->message, "positions 0..5 of order 'train'") == (n != 3));
  }
  // The same for slot demand (max plans, 2 buffers): the whole order needs 3 slots of a shape.
  auto const mp = make_plan<max>(three, {.buffers = 2});
  auto const d = find_conflict(mp, training_order(three), SIZE_MAX);
  REQUIRE(d.has_value());
  CHECK(contains(d->message, "positions 0..5"));
  CHECK(contains(d->message, "2 buffers"));
}

TEST_CASE("workloads beyond 2^62 bytes are refused by name, not planned with sums that wrapped") {
  std::uint64_t const half = std::uint64_t{1} << 61;
  // Two units of 2^63 bytes: the sums of a plan would wrap around 2^64.
  workload huge{"huge", {unit{"a", {fp8(std::uint64_t{1} << 63)}}, unit{"b", {fp8(std::uint64_t{1} << 63)}}}, {}};
  CHECK_THROWS_AS(validate(huge), capacity_error);
  auto const msg = message_of([&] { validate(huge); });
  CHECK(contains(msg, "'huge'"));
  CHECK(contains(msg, "unit 'a' bucket 0"));
  CHECK(contains(msg, "2^62"));
  CHECK_THROWS_AS((void)make_interval_plan(huge, {training_order(huge)}), capacity_error);
  CHECK_THROWS_AS((void)make_plan<max>(huge), capacity_error);
  // Exactly 2^62 raw bytes in all is accepted and planned exactly: two units of 2^61 share nothing.
  workload edge{"edge", {unit{"a", {fp8(half)}}, unit{"b", {fp8(half)}}}, {}};
  auto const p = make_interval_plan(edge, {training_order(edge)});
  CHECK(p.arena_bytes == 2 * half);
  CHECK(make_plan<max>(edge).fallback_bytes() == 0);
  // ... but not once the alignment pushes it past 2^62 (each unit rounded up to 2^62).
  workload odd{"odd", {unit{"a", {fp8(half + 1)}}, unit{"b", {fp8(half - 1)}}}, {}};
  CHECK(contains(message_of([&] { (void)make_interval_plan(odd, {training_order(odd)}, {.resident = 2, .alignment = std::size_t{1} << 62}); }),
                 "once padded and aligned"));
  // A non-unit bucket counts towards the total too.
  workload side{"side", {unit{"a", {fp8(half)}}}, {fp8(3 * half)}};
  CHECK(contains(message_of([&] { validate(side); }), "non-unit bucket 0"));
}

TEST_CASE("units_sharing_bytes and order_positions describe an interval plan") {
  workload w{"five", {}, {}};
  for (int u = 0; u < 5; ++u) w.units.push_back({"u" + std::to_string(u), {elements_of(dtype::bf16, 1000)}});
  auto const p = make_interval_plan(w, {training_order(w), evaluation_order(w)});
  auto const sharing = units_sharing_bytes(p);
  REQUIRE(sharing.size() == 5);
  // A path of equal units: one side at the bottom, the other at the top of two units' bytes.
  CHECK(sharing[0] == std::vector<std::uint32_t>{2, 4});
  CHECK(sharing[1] == std::vector<std::uint32_t>{3});
  for (std::size_t u = 0; u < 5; ++u)
    for (auto v : sharing[u]) CHECK((v + u) % 2 == 0);  // never two neighbours in the orders
  CHECK(order_positions(p, 4) == "train@4,5; eval@4");
  CHECK(units_sharing_bytes(make_plan<max>(w))[0].empty());
}

TEST_CASE("an order of more units than max_order_units is refused, naming the limit") {
  auto const too_many = headroom::pool::max_order_units + 1;
  CHECK_THROWS_WITH_AS((void)headroom::pool::training_order(too_many), doctest::Contains("pool::training_order: 4294967297 units, expected <= 4294967296"), headroom::capacity_error);
  CHECK_THROWS_AS((void)headroom::pool::evaluation_order(std::size_t{1} << 62), headroom::capacity_error);
  CHECK(headroom::pool::training_order(2).units == std::vector<std::size_t>{0, 1, 1, 0});
}
