// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "headroom/pool.hpp"

using namespace headroom;
using namespace headroom::pool;

#include "substrate.hpp"

using namespace pool_test;

namespace {

host::inline_stream const hs{};

}  // namespace

TEST_CASE("counting_resource copies compare equal, distinct resources do not") {
  counting_resource a, b;
  counting_resource const c = a;
  CHECK(a == c);
  CHECK_FALSE(a == b);
}

// ---- Megatron PR #6316: capacity with live and releasable buffers -------------------------------

TEST_CASE_TEMPLATE("capacity counts live and releasable slots (PR #6316)", Planner, fixed, max) {
  host_unit_pool<> p(make_plan<Planner>(uniform(4)), host::aligned_resource{}, hs);
  auto l0 = p.acquire(0, hs);
  auto l1 = p.acquire(1, hs);
  CHECK(p.can_acquire({0}));          // already live
  CHECK_FALSE(p.can_acquire({2}));
  CHECK(p.can_acquire({2}, {0}));     // fits once unit 0 is released
  CHECK_FALSE(p.can_acquire({2, 3}, {0}));
  CHECK(p.can_acquire({2, 3}, {0, 1}));
  CHECK_FALSE(p.can_acquire({2}, {3}));  // unit 3 holds nothing
  CHECK(p.can_acquire({2, 2}, {0}));     // duplicates count once
  p.release(l0, hs);
  p.release(l1, hs);
  CHECK(p.can_acquire({2, 3}));
}

TEST_CASE_TEMPLATE("triple buffering: three distinct addresses, the fourth reuses the released one", Planner, fixed, max) {
  host_unit_pool<> p(make_plan<Planner>(uniform(4), buffers(3)), host::aligned_resource{}, hs);
  auto l0 = p.acquire(0, hs);
  auto l1 = p.acquire(1, hs);
  auto l2 = p.acquire(2, hs);
  std::set<std::byte*> addrs{l0.bytes(0).data(), l1.bytes(0).data(), l2.bytes(0).data()};
  CHECK(addrs.size() == 3);
  CHECK_FALSE(p.can_acquire({3}));
  CHECK(p.can_acquire({3}, {0}));
  auto const msg = error_of<capacity_error>([&] { (void)p.acquire(3, hs); });
  CHECK(contains(msg, "unit 3 'u3'"));
  CHECK(contains(msg, "3 slots, all held"));
  CHECK(contains(msg, "slot 0 (group 0) held by unit 0 'u0'"));
  CHECK(contains(msg, "held by unit 2 'u2'"));
  CHECK(p.stats().slots_in_use == 3);  // the failed acquire changed nothing
  std::byte* const addr0 = l0.bytes(0).data();
  p.release(l0, hs);
  auto l3 = p.acquire(3, hs);
  CHECK(l3.bytes(0).data() == addr0);
  p.release(l1, hs);
  p.release(l2, hs);
  p.release(l3, hs);
}

TEST_CASE("capacity check across two pools groups requests by pool (PR #6316)") {
  // 8 units split across two pools of 3 buffers: units 0-3 in A, 4-7 in B (as local 0-3).
  host_unit_pool<> a(make_plan<max>(uniform(4), buffers(3)), host::aligned_resource{}, hs);
  host_unit_pool<> b(make_plan<max>(uniform(4), buffers(3)), host::aligned_resource{}, hs);
  std::vector<host_unit_pool<>::lease> held;
  for (std::size_t u = 0; u < 3; ++u) {
    held.push_back(a.acquire(u, hs));
    held.push_back(b.acquire(u, hs));
  }
  auto fits = [&](std::vector<std::size_t> const& releasable_a, std::vector<std::size_t> const& releasable_b) {
    std::size_t const want[] = {3};
    return a.can_acquire(want, releasable_a) && b.can_acquire(want, releasable_b);
  };
  CHECK_FALSE(fits({}, {}));   // [3, 7] does not fit
  CHECK_FALSE(fits({0}, {}));  // releasing 0 alone is not enough
  CHECK(fits({0}, {0}));       // 0 and 4 releasable: fits
  for (std::size_t i = 0; i < held.size(); ++i) (i % 2 == 0 ? a : b).release(held[i], hs);
}

// ---- strict assignment ---------------------------------------------------------------------

TEST_CASE("strict: pins on first acquire, retries the pin, moves and reports when it is held") {
  std::vector<std::string> messages;
  std::vector<move_event> events;
  strict policy([&](move_event const& e) {
    messages.emplace_back(e.message);
    events.push_back(e);
  });
  host_unit_pool<strict> p(make_plan<max>(uniform(4)), host::aligned_resource{}, hs, policy);
  auto l0 = p.acquire(0, hs);  // group 0, pinned
  auto l1 = p.acquire(1, hs);  // group 1, pinned
  CHECK(p.pinned_group(0, 0) == 0);
  CHECK(p.pinned_group(1, 0) == 1);
  CHECK(p.pinned_group(2, 0) == SIZE_MAX);
  std::byte* const a0 = l0.bytes(0).data();
  std::byte* const a1 = l1.bytes(0).data();
  p.release(l0, hs);
  p.release(l1, hs);
  // Both groups free: unit 1 retries its pin (group 1), though group 0 is the lowest free.
  l1 = p.acquire(1, hs);
  CHECK(l1.bytes(0).data() == a1);
  auto l2 = p.acquire(2, hs);  // takes group 0 and pins it
  CHECK(p.pinned_group(2, 0) == 0);
  p.release(l1, hs);
  // Unit 0 is pinned to group 0, held by unit 2: it moves to group 1 without re-pinning.
  l0 = p.acquire(0, hs);
  CHECK(l0.bytes(0).data() == a1);
  CHECK(p.stats().moves == 1);
  CHECK(p.pinned_group(0, 0) == 0);
  REQUIRE(messages.size() == 1);
  CHECK(contains(messages[0], "unit 0 'u0'"));
  CHECK(contains(messages[0], "pinned to group 0"));
  CHECK(contains(messages[0], "held by unit 2 'u2'"));
  CHECK(contains(messages[0], "took group 1"));
  CHECK(events[0].unit == 0);
  CHECK(events[0].pinned_group == 0);
  CHECK(events[0].taken_group == 1);
  CHECK(events[0].holder_unit == 2);
  p.release(l2, hs);
  p.release(l0, hs);
  // With the pin free again it is used again: no new move.
  l0 = p.acquire(0, hs);
  CHECK(l0.bytes(0).data() == a0);
  CHECK(p.stats().moves == 1);
  p.release(l0, hs);
}

TEST_CASE("strict: a logger that throws leaves the pool as it was before the acquire") {
  strict policy([](move_event const&) { throw std::runtime_error("logger failed"); });
  host_unit_pool<strict> p(make_plan<max>(uniform(3)), host::aligned_resource{}, hs, policy);
  auto l0 = p.acquire(0, hs);  // pins group 0
  p.release(l0, hs);
  auto l1 = p.acquire(1, hs);  // takes group 0
  CHECK_THROWS_WITH_AS((void)p.acquire(0, hs), "logger failed", std::runtime_error);  // moves to group 1
  CHECK(p.holders(0) == 0);
  CHECK(p.stats().slots_in_use == 1);
  CHECK(p.can_acquire({0, 2}, {1}));
  p.release(l1, hs);
}

TEST_CASE("first_free: lowest free group every time, nothing pinned, no moves") {
  host_unit_pool<first_free> p(make_plan<max>(uniform(3)), host::aligned_resource{}, hs);
  auto l0 = p.acquire(0, hs);
  auto l1 = p.acquire(1, hs);
  std::byte* const a1 = l1.bytes(0).data();
  p.release(l1, hs);
  p.release(l0, hs);
  l1 = p.acquire(1, hs);  // lowest free is group 0, not where unit 1 was
  CHECK(l1.bytes(0).data() != a1);
  CHECK(p.pinned_group(1, 0) == SIZE_MAX);
  CHECK(p.stats().moves == 0);
  p.release(l1, hs);
}

// ---- stream ordering -----------------------------------------------------------------------

TEST_CASE("record_at_release: every release records on the releasing stream; reuse on another stream waits on the device") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  {
    test_pool<strict, dynamic, record_at_release> p(make_plan<max>(uniform(3)), counting_resource{}, home);
    auto l0 = p.acquire(0, ag);  // fresh slot: no wait
    auto l1 = p.acquire(1, ag);
    CHECK(log.lines.empty());
    p.release(l0, compute);
    REQUIRE(log.lines.size() == 1);
    CHECK(contains(log.lines[0], "on s2"));
    auto l2 = p.acquire(2, ag);  // reuses unit 0's slot: ag waits on compute's event
    REQUIRE(log.lines.size() == 2);
    CHECK(contains(log.lines[1], "s1 waits"));
    CHECK(contains(log.lines[1], "recorded on s2"));
    CHECK(p.stats().cross_stream_waits == 1);
    p.release(l2, ag);
    auto l0b = p.acquire(0, ag);  // released and reacquired on the same stream: no wait
    CHECK(log.lines.size() == 3);
    CHECK(p.stats().cross_stream_waits == 1);
    p.release(l0b, compute);
    p.release(l1, compute);
    log.lines.clear();
  }
  // Destruction: the home stream waits for both releases recorded on compute, then frees.
  CHECK(std::count_if(log.lines.begin(), log.lines.end(), [](auto const& l) { return contains(l, "s0 waits"); }) == 2);
  recording_event::log = nullptr;
}

TEST_CASE("record_at_reuse: nothing recorded at release; a reuse on another stream records then waits") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  {
    unit_pool<named_stream, recording_event, counting_resource, strict, dynamic, record_at_reuse> p(
        make_plan<max>(uniform(3)), counting_resource{}, home);
    auto l0 = p.acquire(0, ag);
    auto l1 = p.acquire(1, ag);
    p.release(l0, ag);
    CHECK(log.lines.empty());  // no event at release
    l0 = p.acquire(0, ag);     // same stream: nothing at all
    CHECK(log.lines.empty());
    p.release(l0, compute);
    CHECK(log.lines.empty());
    auto l2 = p.acquire(2, ag);  // other stream: record on compute now, ag waits
    REQUIRE(log.lines.size() == 2);
    CHECK(contains(log.lines[0], "on s2"));
    CHECK(contains(log.lines[1], "s1 waits"));
    CHECK(p.stats().cross_stream_waits == 1);
    p.release(l2, compute);
    p.release(l1, ag);
    log.lines.clear();
  }
  // Destruction: the release on compute is ordered before the home stream (record, then wait).
  REQUIRE(log.lines.size() >= 2);
  CHECK(std::count_if(log.lines.begin(), log.lines.end(),
                      [](auto const& l) { return l.rfind("record", 0) == 0 && contains(l, "on s2"); }) == 1);
  CHECK(std::count_if(log.lines.begin(), log.lines.end(), [](auto const& l) { return contains(l, "s0 waits"); }) == 2);
  recording_event::log = nullptr;
}

TEST_CASE("clear_release_events: the next reuse waits on nothing") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  test_pool<> p(make_plan<max>(uniform(3)), counting_resource{}, home);
  auto l0 = p.acquire(0, ag);
  p.release(l0, compute);
  CHECK(p.pending_release_events() == 1);
  p.clear_release_events();
  CHECK(p.pending_release_events() == 0);
  log.lines.clear();
  auto l1 = p.acquire(1, ag);  // reuses group 0 without a wait
  CHECK(log.lines.empty());
  CHECK(p.stats().cross_stream_waits == 0);
  p.release(l1, ag);
  recording_event::log = nullptr;
}

// ---- buckets without a slot ----------------------------------------------------------------

TEST_CASE("dynamic: unpooled units and non-unit buckets come from upstream per acquire, freed on the release stream") {
  counting_resource r;
  named_stream const home{0}, s{5};
  workload w{"w", {{"a", {bf16(8)}}, {"b", {bf16(8)}}, {"odd", {bf16(100), bf16(3)}}}, {bf16(1000)}};
  {
    test_pool<strict, dynamic> p(make_plan<fixed>(w), r, home);
    CHECK(r.c->allocations == 1);  // the arena
    auto odd = p.acquire(2, s);
    CHECK(r.c->allocations == 3);
    CHECK(odd.slot(0) == SIZE_MAX);
    CHECK(odd.bytes(0).size() == 200);
    CHECK(odd.bytes(1).size() == 6);
    CHECK(p.stats().fallback_bytes_in_use == 206);
    auto nu = p.acquire_non_unit(0, s);
    CHECK(nu.kind() == target_kind::non_unit);
    CHECK(nu.index() == 0);
    CHECK(nu.bytes(0).size() == 2000);
    std::memset(nu.bytes(0).data(), 7, 2000);
    p.release(odd, s);
    p.release(nu, s);
    CHECK(r.c->deallocations == 3);
    CHECK(r.c->free_streams == std::vector<int>{5, 5, 5});
    CHECK(p.stats().fallback_bytes_in_use == 0);
    CHECK(p.stats().fallback_bytes_peak == 2206);
    CHECK(p.stats().fallback_allocations == 3);
    CHECK(p.stats().bytes_reserved == p.arena_bytes());
  }
  CHECK(r.c->live.empty());
}

TEST_CASE("persistent: one buffer per unslotted bucket at construction, same address every acquire") {
  counting_resource r;
  named_stream const home{0};
  workload w{"w", {{"a", {bf16(8)}}, {"b", {bf16(8)}}, {"odd", {bf16(100)}}}, {bf16(1000), bf16(10)}};
  {
    test_pool<strict, persistent> p(make_plan<fixed>(w), r, home);
    CHECK(r.c->allocations == 4);  // arena + odd + two non-unit buckets
    CHECK(p.stats().persistent_bytes == 200 + 2000 + 20);
    CHECK(p.stats().bytes_reserved == p.arena_bytes() + 2220);
    auto l = p.acquire(2, home);
    std::byte* const a = l.bytes(0).data();
    p.release(l, home);
    l = p.acquire(2, home);
    CHECK(l.bytes(0).data() == a);
    p.release(l, home);
    CHECK(r.c->allocations == 4);
    CHECK(r.c->deallocations == 0);
  }
  CHECK(r.c->live.empty());
  CHECK(r.c->deallocations == 4);
}

TEST_CASE("an upstream failure leaves the pool unchanged") {
  counting_resource r;
  r.c->fail_after = 2;  // arena + one fallback buffer
  named_stream const home{0};
  workload w{"w", {{"a", {bf16(8)}}, {"b", {bf16(8)}}, {"odd", {bf16(100), bf16(3)}}}, {}};
  test_pool<strict, dynamic> p(make_plan<fixed>(w), r, home);
  CHECK_THROWS_AS((void)p.acquire(2, home), capacity_error);
  CHECK(r.c->live.size() == 1);  // only the arena
  CHECK(p.holders(2) == 0);
  CHECK(p.stats().fallback_bytes_in_use == 0);
  r.c->fail_after = SIZE_MAX;
  auto l = p.acquire(2, home);
  p.release(l, home);
  // Persistent construction failure frees what it took.
  counting_resource r2;
  r2.c->fail_after = 1;
  CHECK_THROWS_AS((test_pool<strict, persistent>(make_plan<fixed>(w), r2, home)), capacity_error);
  CHECK(r2.c->live.empty());
}

// A failed acquire (no slot for its second bucket; a device-side wait that fails) changes
// nothing, its stream order included: the slots still follow their release.
namespace {
// Unit 0 has a bf16 and an f32 bucket (two shapes), units 1 and 2 one f32 bucket each.
workload two_shapes() {
  return {"w", {{"p", {bf16(8), elements_of(dtype::f32, 8)}}, {"q", {elements_of(dtype::f32, 8)}}, {"r", {elements_of(dtype::f32, 8)}}}, {}};
}
}  // namespace

TEST_CASE("a failed acquire leaves its slots free and following their release") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  SUBCASE("no free slot for the second bucket") {
    test_pool<> p(make_plan<max>(two_shapes()), counting_resource{}, home);
    auto lp = p.acquire(0, ag);
    std::byte* const first = lp.bytes(0).data();
    std::size_t const bf16_slot = lp.slot(0);
    p.release(lp, compute);  // one event, both slots follow it
    auto lq = p.acquire(1, ag);  // takes the f32 slot unit 0 freed (waits on the event)
    auto lr = p.acquire(2, ag);  // the other f32 slot: every f32 slot is held
    std::size_t const lines = log.lines.size();
    auto const msg = error_of<capacity_error>([&] { (void)p.acquire(0, ag); });
    CHECK(contains(msg, "no free slot for bucket 1"));
    CHECK(p.holders(0) == 0);
    CHECK(p.slot_holder(bf16_slot) == SIZE_MAX);
    CHECK(p.stats().slots_in_use == 2);
    CHECK(p.stats().acquisitions == 3);
    CHECK(p.pending_release_events() == 1);  // the bf16 slot still follows the release on compute
    CHECK(p.busy_release_events() == 1);
    CHECK(log.lines.size() == lines);
    p.release(lq, ag);  // same stream: nothing recorded
    lp = p.acquire(0, ag);
    CHECK(lp.bytes(0).data() == first);
    REQUIRE(log.lines.size() == lines + 1);  // one wait: the bf16 slot's release on compute
    CHECK(contains(log.lines.back(), "s1 waits"));
    CHECK(contains(log.lines.back(), "recorded on s2"));
    CHECK(p.busy_release_events() == 0);  // both releases' slots taken (the one on ag needs no wait)
    CHECK(p.stats().moves == 0);
    p.release(lp, ag);
    p.release(lr, ag);
  }
  SUBCASE("the device-side wait fails") {
    test_pool<> p(make_plan<max>(two_shapes()), counting_resource{}, home);
    auto lp = p.acquire(0, ag);
    std::byte* const first[] = {lp.bytes(0).data(), lp.bytes(1).data()};
    p.release(lp, compute);
    recording_event::fail_waits = true;
    CHECK_THROWS_AS((void)p.acquire(0, ag), cuda_error);
    recording_event::fail_waits = false;
    CHECK(p.holders(0) == 0);
    CHECK(p.stats().slots_in_use == 0);
    CHECK(p.stats().acquisitions == 1);
    CHECK(p.pending_release_events() == 2);
    CHECK(p.busy_release_events() == 1);
    std::size_t const lines = log.lines.size();
    lp = p.acquire(0, ag);  // the same slots, one wait on the one release
    CHECK(lp.bytes(0).data() == first[0]);
    CHECK(lp.bytes(1).data() == first[1]);
    REQUIRE(log.lines.size() == lines + 1);
    CHECK(contains(log.lines.back(), "s1 waits"));
    CHECK(p.pending_release_events() == 0);
    CHECK(p.busy_release_events() == 0);
    p.release(lp, ag);
  }
  recording_event::log = nullptr;
}

// ---- re-fetch, leases, statistics ----------------------------------------------------------

TEST_CASE("acquiring a held unit returns the same slots; freed after the last release") {
  host_unit_pool<> p(make_plan<max>(uniform(3)), host::aligned_resource{}, hs);
  auto a = p.acquire(0, hs);
  auto b = p.acquire(0, hs);
  CHECK(a.bytes(0).data() == b.bytes(0).data());
  CHECK(p.holders(0) == 2);
  CHECK(p.stats().refetches == 1);
  CHECK(p.stats().slots_in_use == 1);
  p.release(a, hs);
  CHECK(p.holders(0) == 1);
  CHECK(p.slot_holder(b.slot(0)) == 0);
  p.release(b, hs);
  CHECK(p.holders(0) == 0);
  CHECK(p.slot_holder(0) == SIZE_MAX);
  CHECK(p.stats().releases == 1);
}

TEST_CASE("lease views: typed spans, oversize requests are errors") {
  host_unit_pool<> p(make_plan<max>(workload{"w", {{"a", {bf16(100), fp8(64)}}}, {}}), host::aligned_resource{}, hs);
  auto l = p.acquire(0, hs);
  CHECK(l.size() == 2);
  CHECK(l.kind() == target_kind::unit);
  CHECK(l.view<std::uint16_t>(0).size() == 100);
  CHECK(l.view<float>(0, 50).size() == 50);
  CHECK(l.bytes(1, 64).size() == 64);
  auto const msg = error_of<capacity_error>([&] { (void)l.bytes(0, 201); });
  CHECK(contains(msg, "201 bytes"));
  CHECK(contains(msg, "bucket 0 of unit 0 'a'"));
  CHECK(contains(msg, "planned 200 bytes"));
  CHECK_THROWS_AS((void)l.view<double>(0, 26), capacity_error);
  CHECK(contains(error_of<invalid_argument>([&] { (void)l.bytes(2); }), "bucket 2 out of range [0, 2)"));
  p.release(l, hs);
}

TEST_CASE("bad input: unknown unit, double release, foreign lease, moved-from lease") {
  host_unit_pool<> p(make_plan<max>(uniform(3)), host::aligned_resource{}, hs);
  host_unit_pool<> q(make_plan<max>(uniform(2)), host::aligned_resource{}, hs);
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.acquire(3, hs); }), "unit 3 out of range [0, 3)"));
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.acquire_non_unit(0, hs); }), "non-unit bucket 0 out of range"));
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.can_acquire({7}); }), "unit 7 out of range"));
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.can_acquire({0}, {9}); }), "releasable unit 9"));
  CHECK_THROWS_AS((void)p.holders(3), invalid_argument);
  CHECK_THROWS_AS((void)p.slot_holder(6), invalid_argument);
  CHECK_THROWS_AS((void)p.pinned_group(0, 1), invalid_argument);

  auto l = p.acquire(0, hs);
  p.release(l, hs);
  CHECK(contains(error_of<logic_error>([&] { p.release(l, hs); }), "already released or moved from"));
  CHECK(contains(error_of<logic_error>([&] { (void)l.bytes(0); }), "lease is empty"));

  auto foreign = q.acquire(1, hs);
  auto const msg = error_of<invalid_argument>([&] { p.release(foreign, hs); });
  CHECK(contains(msg, "unit 1 'u1'"));
  CHECK(contains(msg, "belongs to another pool"));
  CHECK(foreign.valid());  // still releasable by its own pool
  q.release(foreign, hs);

  // Overwriting a live lease would leak its slots: refused, both leases stay valid.
  auto keep = p.acquire(2, hs);
  auto other = p.acquire(0, hs);
  CHECK(contains(error_of<logic_error>([&] { keep = std::move(other); }), "still holds unit 2 'u2'"));
  CHECK(keep.valid());
  CHECK(other.valid());
  p.release(keep, hs);
  keep = std::move(other);  // onto an empty lease: fine
  CHECK_FALSE(other.valid());
  p.release(keep, hs);

  auto m = p.acquire(1, hs);
  auto moved = std::move(m);
  CHECK_FALSE(m.valid());
  CHECK_THROWS_AS(p.release(m, hs), logic_error);
  p.release(moved, hs);
  CHECK(p.stats().slots_in_use == 0);

  plan bad = make_plan<max>(uniform(2));
  bad.slots.pop_back();
  CHECK(contains(error_of<invalid_argument>([&] { host_unit_pool<> x(bad, host::aligned_resource{}, hs); }),
                 "not a plan made by make_plan"));
}

TEST_CASE("statistics track use, peak and reservations") {
  host_unit_pool<> p(make_plan<max>(workload{"w", {{"a", {bf16(8), fp8(4)}}, {"b", {bf16(8)}}}, {}}),
                     host::aligned_resource{}, hs);
  CHECK(p.stats().slots_total == 4);
  CHECK(p.stats().arena_bytes == p.get_plan().arena_bytes);
  auto a = p.acquire(0, hs);
  auto b = p.acquire(1, hs);
  CHECK(p.stats().slots_in_use == 3);
  p.release(a, hs);
  CHECK(p.stats().slots_in_use == 1);
  CHECK(p.stats().slots_in_use_peak == 3);
  CHECK(p.stats().acquisitions == 2);
  p.release(b, hs);
  std::ostringstream os;
  os << p.stats();
  CHECK(contains(os.str(), "slots 0/4 (peak 3)"));
}

// ---- property: random workloads and random acquire / release sequences -----------------------

TEST_CASE("property: random schedules keep live leases disjoint and can_acquire predicts acquire") {
  std::random_device rd;
  auto const seed = rd();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 60; ++trial) {
    workload w{"random", {}, {}};
    std::uniform_int_distribution<int> nunits(2, 10), nb(1, 3), sz(1, 300), kind(0, 2);
    dtype const types[] = {dtype::bf16, dtype::u8, dtype::f32};
    int const n = nunits(gen);
    for (int u = 0; u < n; ++u) {
      unit un{"r" + std::to_string(u), {}};
      for (int b = nb(gen); b > 0; --b) un.buckets.push_back(elements_of(types[kind(gen)], static_cast<std::uint64_t>(sz(gen))));
      w.units.push_back(un);
    }
    std::size_t const nbuf = 2 + static_cast<std::size_t>(trial % 3);
    host_unit_pool<strict> p(make_plan<max>(w, buffers(nbuf)), host::aligned_resource{}, hs);
    std::map<std::size_t, host_unit_pool<strict>::lease> live;
    std::map<std::size_t, std::uint8_t> stamp;
    auto check_live = [&] {
      for (auto const& [u, l] : live)
        for (std::size_t b = 0; b < l.size(); ++b) {
          auto const s = l.bytes(b);
          auto const want = stamp[u];
          REQUIRE(std::all_of(s.begin(), s.end(), [&](std::byte x) { return static_cast<std::uint8_t>(x) == want; }));
        }
    };
    std::uniform_int_distribution<std::size_t> pick(0, static_cast<std::size_t>(n) - 1);
    for (int step = 0; step < 200; ++step) {
      std::size_t const u = pick(gen);
      if (live.count(u)) {
        p.release(live.at(u), hs);
        live.erase(u);
        continue;
      }
      bool const predicted = p.can_acquire({u});
      if (predicted) {
        auto l = p.acquire(u, hs);
        stamp[u] = static_cast<std::uint8_t>(step);
        for (std::size_t b = 0; b < l.size(); ++b) std::memset(l.bytes(b).data(), stamp[u], l.bytes(b).size());
        live.emplace(u, std::move(l));
      } else {
        CHECK_THROWS_AS((void)p.acquire(u, hs), capacity_error);
      }
      check_live();  // no live lease was overwritten by another
      CHECK(p.stats().slots_in_use <= p.stats().slots_total);
    }
    // With max planning and N >= 2 buffers, any N units fit at once.
    for (auto& [u, l] : live) p.release(l, hs);
    live.clear();
    std::vector<std::size_t> first(std::min<std::size_t>(nbuf, static_cast<std::size_t>(n)));
    for (std::size_t i = 0; i < first.size(); ++i) first[i] = i;
    CHECK(p.can_acquire(first));
  }
}

// What CUDA graph capture relies on: a step replayed in the same order takes the same addresses.
// The pool is empty at the start of every step, so strict pins make step k repeat step 1.
TEST_CASE("property: a repeated FSDP step (prefetch depth buffers - 1) takes the same addresses every time") {
  std::random_device rd;
  auto const seed = rd();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 100; ++trial) {
    workload w{"random", {}, {}};
    std::uniform_int_distribution<int> nunits(3, 16), nb(1, 3), sz(1, 400), kind(0, 2);
    dtype const types[] = {dtype::bf16, dtype::u8, dtype::f32};
    bool const uniform_units = trial % 4 == 0;
    int const n = nunits(gen);
    for (int u = 0; u < n; ++u) {
      unit un{"r" + std::to_string(u), {}};
      if (uniform_units)
        un.buckets.push_back(bf16(64));
      else
        for (int b = nb(gen); b > 0; --b)
          un.buckets.push_back(elements_of(types[kind(gen)], static_cast<std::uint64_t>(sz(gen))));
      w.units.push_back(un);
    }
    std::size_t const nbuf = 2 + static_cast<std::size_t>(trial % 3);
    std::size_t const depth = nbuf - 1;  // units prefetched ahead of the one computing
    host_unit_pool<strict> p(make_plan<max>(w, buffers(nbuf)), host::aligned_resource{}, hs);
    std::vector<host_unit_pool<strict>::lease> held(w.units.size());
    auto step = [&] {
      std::vector<std::byte*> addresses;
      for (int pass = 0; pass < 2; ++pass) {
        auto unit_at = [&](std::size_t i) { return pass == 0 ? i : w.units.size() - 1 - i; };
        std::size_t next = 0;  // next position to acquire
        for (std::size_t i = 0; i < w.units.size(); ++i) {
          while (next < w.units.size() && next <= i + depth) {
            auto const u = unit_at(next++);
            held[u] = p.acquire(u, hs);
            for (std::size_t b = 0; b < held[u].size(); ++b) addresses.push_back(held[u].bytes(b).data());
          }
          p.release(held[unit_at(i)], hs);
        }
      }
      return addresses;
    };
    auto const first = step();
    auto const moves_first = p.stats().moves;
    for (int k = 0; k < 3; ++k) {
      auto const moves_before = p.stats().moves;
      CHECK(step() == first);
      CHECK(p.stats().moves - moves_before == moves_first);
    }
    if (uniform_units) CHECK(p.stats().moves == 0);
    CHECK(p.stats().slots_in_use == 0);
  }
}
