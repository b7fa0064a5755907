// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "headroom/pool.hpp"
#include "headroom/pool/models.hpp"
#include "substrate.hpp"

using namespace pool_test;

namespace {

host::inline_stream const hs{};

// Five units of 1000..1004 bf16 elements (2 KiB each after alignment).
workload five() {
  workload w{"five", {}, {}};
  for (int u = 0; u < 5; ++u) w.units.push_back({"u" + std::to_string(u), {bf16(1000 + static_cast<unsigned>(u))}});
  return w;
}

bool overlap(std::span<std::byte> a, std::span<std::byte> b) {
  return a.data() < b.data() + b.size() && b.data() < a.data() + a.size();
}

}  // namespace

// ---- one event per release -------------------------------------------------------------------

TEST_CASE("one event per release, one wait per distinct event, whatever the bucket count") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2}, other{3};
  {
    workload const w{"three buckets",
                     {{"a", {bf16(64), fp8(64), elements_of(dtype::f32, 64)}},
                      {"b", {bf16(64), fp8(64), elements_of(dtype::f32, 64)}},
                      {"c", {bf16(64), fp8(64), elements_of(dtype::f32, 64)}}},
                     {}};
    test_pool<> p(make_plan<max>(w), counting_resource{}, home);
    auto la = p.acquire(0, ag);
    auto lb = p.acquire(1, ag);
    p.release(la, compute);
    CHECK(count_lines(log, "record e") == 1);  // three slots, one event
    CHECK(p.stats().release_events == 1);
    CHECK(p.pending_release_events() == 3);
    CHECK(p.busy_release_events() == 1);
    auto lc = p.acquire(2, ag);  // takes a's three slots: ag waits once
    CHECK(count_lines(log, "s1 waits") == 1);
    CHECK(p.stats().cross_stream_waits == 1);
    CHECK(p.busy_release_events() == 0);
    p.release(lb, compute);
    p.release(lc, compute);
    CHECK(p.stats().release_events == 3);
    CHECK(p.busy_release_events() == 2);
    log.lines.clear();
  }
  // Destruction: the home stream waits once per distinct release event (2), not per slot (6).
  CHECK(count_lines(log, "s0 waits") == 2);

  // Slots freed by two different releases: one wait each.
  log.lines.clear();
  {
    workload const w{"mixed", {{"a", {bf16(8)}}, {"b", {fp8(8)}}, {"d", {bf16(8), fp8(8)}}}, {}};
    test_pool<first_free> p(make_plan<max>(w), counting_resource{}, home);
    auto la = p.acquire(0, ag);
    auto lb = p.acquire(1, ag);
    p.release(la, compute);
    p.release(lb, other);
    auto ld = p.acquire(2, ag);
    CHECK(count_lines(log, "s1 waits") == 2);
    CHECK(count_lines(log, "recorded on s2") == 1);
    CHECK(count_lines(log, "recorded on s3") == 1);
    p.release(ld, ag);
  }
  recording_event::log = nullptr;
}

TEST_CASE("record_at_reuse: one record and one wait per distinct release at reuse") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  workload const w{"two buckets", {{"a", {bf16(64), fp8(64)}}, {"b", {bf16(64), fp8(64)}}, {"c", {bf16(64), fp8(64)}}}, {}};
  test_pool<strict, dynamic, record_at_reuse> p(make_plan<max>(w), counting_resource{}, home);
  auto la = p.acquire(0, ag);
  auto lb = p.acquire(1, ag);
  p.release(la, compute);
  CHECK(log.lines.empty());
  auto lc = p.acquire(2, ag);
  CHECK(count_lines(log, "record e") == 1);
  CHECK(count_lines(log, "s1 waits") == 1);
  p.release(lb, ag);
  p.release(lc, ag);
  recording_event::log = nullptr;
}

// ---- interval plans in the pool -------------------------------------------------------------

TEST_CASE("interval plan: co-resident units never overlap along the registered orders") {
  auto const w = models::make_workload(models::nemotron_3_nano_30b_a3b(), {.expert_parallel = 8});
  // Scaled down: the same bucket pattern, sizes / 4096, so the host arena stays small.
  workload small = w;
  for (auto& u : small.units)
    for (auto& b : u.buckets) b.bytes = std::max<std::uint64_t>(b.bytes / 4096, 1);
  small.non_unit.clear();
  std::vector<execution_order> const orders{training_order(small), evaluation_order(small)};
  for (std::size_t n : {2u, 3u}) {
    auto const plan = make_interval_plan(small, orders, {.resident = n});
    host_unit_pool<> p(plan, host::aligned_resource{}, hs);
    CHECK(p.arena_bytes() == plan.arena_bytes);
    for (auto const& o : orders) {
      std::vector<host_unit_pool<>::lease> window;
      std::vector<std::size_t> units;
      for (std::size_t u : o.units) {
        // Residents: the last n - 1 entries and this one; release what falls out of the window.
        if (window.size() == n) {
          p.release(window.front(), hs);
          window.erase(window.begin());
          units.erase(units.begin());
        }
        window.push_back(p.acquire(u, hs));
        units.push_back(u);
        for (std::size_t i = 0; i + 1 < window.size(); ++i)
          if (units[i] != u)
            for (std::size_t a = 0; a < window[i].size(); ++a)
              for (std::size_t b = 0; b < window.back().size(); ++b)
                CHECK_FALSE(overlap(window[i].bytes(a), window.back().bytes(b)));
        for (std::size_t b = 0; b < window.back().size(); ++b) {
          CHECK(window.back().bytes(b).data() >= p.arena());  // in the arena, at the planned offset
          CHECK(window.back().bytes(b).data() == p.arena() + plan.slots[window.back().slot(b)].offset);
        }
      }
      for (auto& l : window) p.release(l, hs);
    }
    CHECK(p.stats().off_trace_fallbacks == 0);
    CHECK(p.stats().fallback_allocations == 0);
  }
}

TEST_CASE("interval plan: a unit waits on the releases of the units whose bytes it reuses") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  auto const w = five();  // training order, N = 2: u0, u2, u4 share bytes; u1, u3 too
  {
    test_pool<> p(make_interval_plan(w, {training_order(w)}), counting_resource{}, home);
    auto l0 = p.acquire(0, ag);
    auto l1 = p.acquire(1, ag);
    p.release(l0, compute);
    auto l2 = p.acquire(2, ag);  // its own slot was never used, but u0's bytes were
    CHECK(count_lines(log, "s1 waits") == 1);
    CHECK(count_lines(log, "(recorded on s2)") == 1);
    p.release(l1, compute);
    p.release(l2, compute);
    log.lines.clear();
    // u4 shares bytes with u0 and u2; ag already waits on u0's release (u2's acquire), so only
    // u2's release is waited on.
    auto l4 = p.acquire(4, ag);
    CHECK(count_lines(log, "s1 waits") == 1);
    CHECK(p.stats().cross_stream_waits == 2);
    p.release(l4, ag);
    log.lines.clear();
    auto l0b = p.acquire(0, compute);  // same stream as u2's release; u4 released on ag: one wait
    CHECK(count_lines(log, "s2 waits") == 1);
    p.release(l0b, compute);
  }
  recording_event::log = nullptr;
}

TEST_CASE("interval plan: an acquire whose wait fails leaves no mark, so its retry still waits") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  auto const w = five();  // u0 and u2 share bytes
  {
    test_pool<> p(make_interval_plan(w, {training_order(w)}), counting_resource{}, home);
    auto l0 = p.acquire(0, ag);
    auto l1 = p.acquire(1, ag);
    p.release(l0, compute);
    recording_event::fail_waits = true;
    CHECK_THROWS_AS((void)p.acquire(2, ag), cuda_error);
    recording_event::fail_waits = false;
    CHECK(p.holders(2) == 0);
    CHECK(p.stats().cross_stream_waits == 0);
    log.lines.clear();
    auto l2 = p.acquire(2, ag);  // u0's bytes, released on s2: ag must wait on it now
    CHECK(count_lines(log, "s1 waits") == 1);
    CHECK(p.stats().cross_stream_waits == 1);
    p.release(l1, ag);
    p.release(l2, ag);
  }
  recording_event::log = nullptr;
}

TEST_CASE("interval plan: an order no registered order allows is rejected, naming both units") {
  auto const w = five();
  host_unit_pool<> p(make_interval_plan(w, {training_order(w)}), host::aligned_resource{}, hs);
  auto l0 = p.acquire(0, hs);
  // u0 and u4 share bytes (never resident together in training order with N = 2).
  CHECK(p.get_plan().slots[0].offset == p.get_plan().slots[4].offset);
  auto const msg = error_of<logic_error>([&] { (void)p.acquire(4, hs); });
  CHECK(contains(msg, "unit 4 'u4' (train@4,5)"));
  CHECK(contains(msg, "unit 0 'u0' (train@0,9)"));
  CHECK(contains(msg, "acquisition 2"));
  CHECK(contains(msg, "fallback_off_trace"));
  CHECK(p.holders(4) == 0);  // nothing changed
  CHECK_FALSE(p.can_acquire({4}));
  CHECK(p.can_acquire({4}, {0}));
  CHECK(p.can_acquire({1}));
  CHECK(p.can_acquire({1, 2}, {0}));  // 1 and 2 are adjacent in the order: disjoint bytes
  p.release(l0, hs);
  CHECK_FALSE(p.can_acquire({0, 4}));  // both free, but they share bytes
  auto l4 = p.acquire(4, hs);
  p.release(l4, hs);
}

TEST_CASE("interval plan: fallback_off_trace serves the unit from the upstream and counts it") {
  auto const w = five();
  counting_resource up;
  named_stream const home{0}, s1{1};
  {
    test_pool<strict, dynamic, record_at_release, fallback_off_trace> p(make_interval_plan(w, {training_order(w)}), up,
                                                                       home);
    auto l0 = p.acquire(0, s1);
    auto l4 = p.acquire(4, s1);  // off-trace: buffers outside the arena
    CHECK(p.stats().off_trace_fallbacks == 1);
    CHECK(p.stats().fallback_allocations == 1);
    CHECK(l4.slot(0) == SIZE_MAX);
    CHECK_FALSE(overlap(l0.bytes(0), l4.bytes(0)));
    CHECK(l4.bytes(0).size() == 2008);
    CHECK(up.c->live.size() == 2);  // arena + the fallback buffer
    // While u4 is outside the arena, u0's neighbours are not blocked by it.
    auto l1 = p.acquire(1, s1);
    p.release(l4, s1);
    CHECK(up.c->live.size() == 1);
    p.release(l0, s1);
    p.release(l1, s1);
    auto again = p.acquire(4, s1);  // now in its slot
    CHECK(again.slot(0) != SIZE_MAX);
    CHECK(p.stats().off_trace_fallbacks == 1);
    p.release(again, s1);
  }
  CHECK(up.c->live.empty());
}

TEST_CASE("interval plan: a plan that is not one the pool understands is rejected") {
  auto const w = five();
  auto bad = make_interval_plan(w, {training_order(w)});
  bad.resident = 0;  // one buffer but no residency: neither kind of plan
  CHECK(contains(error_of<invalid_argument>([&] { host_unit_pool<> p(bad, host::aligned_resource{}, hs); }),
                 "not a plan made by make_plan or make_interval_plan"));
}

TEST_CASE_TEMPLATE("interval plan, any order: held leases never share memory (reject or fall back)", OffTrace,
                   reject_off_trace, fallback_off_trace) {
  std::mt19937_64 rng(5);
  std::size_t off_trace = 0;  // over all trials: the random orders do leave the registered one
  for (int trial = 0; trial < 40; ++trial) {
    workload w{"random", {}, {}};
    std::size_t const n = 2 + rng() % 12;
    for (std::size_t u = 0; u < n; ++u) {
      unit un{"u" + std::to_string(u), {}};
      for (std::size_t b = 0, k = 1 + rng() % 3; b < k; ++b) un.buckets.push_back(bf16(1 + rng() % 5000));
      w.units.push_back(std::move(un));
    }
    std::size_t const resident = 2 + rng() % 2;
    using pool_type = unit_pool<host::inline_stream, host::inline_event, host::aligned_resource, strict, dynamic,
                                record_at_release, OffTrace>;
    pool_type p(make_interval_plan(w, {training_order(w)}, {.resident = resident}), host::aligned_resource{}, hs);
    std::vector<typename pool_type::lease> held(n);
    std::size_t rejected = 0;
    for (int op = 0; op < 200; ++op) {
      std::size_t const u = rng() % n;
      if (held[u].valid()) {
        p.release(held[u], hs);
        continue;
      }
      try {
        held[u] = p.acquire(u, hs);
      } catch (logic_error const&) {
        ++rejected;
        continue;
      }
      for (std::size_t v = 0; v < n; ++v)
        if (v != u && held[v].valid())
          for (std::size_t a = 0; a < held[u].size(); ++a)
            for (std::size_t b = 0; b < held[v].size(); ++b) CHECK_FALSE(overlap(held[u].bytes(a), held[v].bytes(b)));
    }
    if constexpr (OffTrace::fallback) CHECK(rejected == 0);
    off_trace += rejected + p.stats().off_trace_fallbacks;
    for (auto& l : held)
      if (l.valid()) p.release(l, hs);
    CHECK(p.stats().slots_in_use == 0);
    CHECK(p.stats().fallback_bytes_in_use == 0);
  }
  CHECK(off_trace > 0);
}
