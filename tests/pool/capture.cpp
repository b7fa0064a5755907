// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// pool::capture_scope on the host substrate: the capture contract is checked, not remembered.

#include <string>
#include <vector>

#include "headroom/pool.hpp"

using namespace headroom;
using namespace headroom::pool;

#include "substrate.hpp"

using namespace pool_test;

namespace {

workload five() {  // training order, N = 2: u0, u2, u4 share bytes
  workload w{"five", {}, {}};
  for (int u = 0; u < 5; ++u) w.units.push_back({"u" + std::to_string(u), {bf16(1000 + static_cast<unsigned>(u))}});
  return w;
}

}  // namespace

TEST_CASE("capture_scope: clears release events on entry and on exit; a balanced step ends cleanly") {
  log_t log;
  recording_event::log = &log;
  named_stream const home{0}, ag{1}, compute{2};
  test_pool<> p(make_plan<max>(uniform(3)), counting_resource{}, home);
  auto l0 = p.acquire(0, ag);
  p.release(l0, compute);  // recorded on compute, pending for the next acquire on ag
  REQUIRE(p.pending_release_events() == 1);
  {
    capture_scope scope(p);
    CHECK(p.pending_release_events() == 0);  // nothing inside waits on an event from outside
    log.lines.clear();
    auto a = p.acquire(0, ag);
    CHECK(count_lines(log, "waits") == 0);
    auto b = p.acquire(1, ag);
    p.release(a, compute);
    p.release(b, compute);
    CHECK(p.pending_release_events() == 2);  // recorded inside the capture
    scope.end();
    CHECK_FALSE(scope.open());
    CHECK(p.pending_release_events() == 0);  // and not waited on outside it
  }
  log.lines.clear();
  auto l = p.acquire(0, ag);
  CHECK(count_lines(log, "waits") == 0);
  p.release(l, compute);
  recording_event::log = nullptr;
}

TEST_CASE("capture_scope: a lease acquired inside and still held makes end() throw, naming it; the scope closes") {
  host_unit_pool<> p(make_plan<max>(uniform(4)), host::aligned_resource{}, host::inline_stream{});
  host::inline_stream const s{};
  host_unit_pool<>::lease kept;
  {
    capture_scope scope(p);
    auto a = p.acquire(0, s);
    kept = p.acquire(2, s);
    p.release(a, s);
    auto const msg = error_of<logic_error>([&] { scope.end(); });
    CHECK(contains(msg, "1 target(s) not released as captured"));
    CHECK(contains(msg, "unit 2 'u2' (1 lease(s) held, acquired inside, so expected 0)"));
    CHECK_FALSE(scope.open());
    CHECK(contains(error_of<logic_error>([&] { scope.end(); }), "closed already"));
  }
  capture_scope again(p);  // the first one closed: a new one opens
  auto const msg = error_of<logic_error>([&] { p.release(kept, s); });
  CHECK(contains(msg, "unit 2 'u2' was acquired before the capture scope opened (1 lease(s) held then)"));
  CHECK(kept.valid());  // refused before anything changed
  CHECK(p.holders(2) == 1);
  again.end();            // u2 is still held as it was: balanced
  p.release(kept, s);     // outside a scope: fine
  CHECK(p.holders(2) == 0);
}

TEST_CASE("capture_scope: leases held before it stay untouched; re-fetches inside must be released inside") {
  host_unit_pool<> p(make_plan<max>(uniform(3)), host::aligned_resource{}, host::inline_stream{});
  host::inline_stream const s{};
  auto before = p.acquire(1, s);
  {
    capture_scope scope(p);
    auto refetch = p.acquire(1, s);  // same slots, a second holder
    CHECK(refetch.bytes(0).data() == before.bytes(0).data());
    p.release(refetch, s);  // back to the one lease held before: allowed
    CHECK(contains(error_of<logic_error>([&] { p.release(before, s); }), "acquired before the capture scope"));
    auto dangling = p.acquire(1, s);  // a re-fetch left held
    auto const msg = error_of<logic_error>([&] { scope.end(); });
    CHECK(contains(msg, "unit 1 'u1' (2 lease(s) held, held before the scope by 1)"));
    p.release(dangling, s);
  }
  p.release(before, s);
}

TEST_CASE("capture_scope: an acquire that would allocate from the upstream is refused before anything changes") {
  counting_resource r;
  named_stream const home{0}, s{1};
  workload w{"w", {{"a", {bf16(8)}}, {"b", {bf16(8)}}, {"odd", {bf16(100), bf16(3)}}}, {bf16(1000)}};
  {
    test_pool<strict, dynamic> p(make_plan<fixed>(w), r, home);
    auto const allocations = r.c->allocations;
    capture_scope scope(p);
    auto const msg = error_of<logic_error>([&] { (void)p.acquire(2, s); });
    CHECK(contains(msg, "unit 2 'odd' of plan 'w' has 2 bucket(s) outside the arena"));
    CHECK(contains(msg, "inside a capture scope"));
    CHECK(contains(msg, "NonUnit = persistent"));
    CHECK(contains(error_of<logic_error>([&] { (void)p.acquire_non_unit(0, s); }), "non-unit bucket 0"));
    CHECK(r.c->allocations == allocations);
    CHECK(p.holders(2) == 0);
    auto a = p.acquire(0, s);  // pooled units are fine
    p.release(a, s);
    scope.end();
  }
  {
    test_pool<strict, persistent> p(make_plan<fixed>(w), r, home);  // every buffer made at construction
    auto const allocations = r.c->allocations;
    capture_scope scope(p);
    auto odd = p.acquire(2, s);
    auto nu = p.acquire_non_unit(0, s);
    p.release(odd, s);
    p.release(nu, s);
    scope.end();
    CHECK(r.c->allocations == allocations);
  }
  CHECK(r.c->live.empty());
}

TEST_CASE_TEMPLATE("capture_scope: an off-trace acquire on an interval plan is refused under either policy", OffTrace,
                   reject_off_trace, fallback_off_trace) {
  auto const w = five();
  counting_resource r;
  named_stream const home{0}, s{1};
  {
    test_pool<strict, dynamic, record_at_release, OffTrace> p(make_interval_plan(w, {training_order(w)}), r, home);
    auto const allocations = r.c->allocations;
    capture_scope scope(p);
    auto l0 = p.acquire(0, s);
    auto const msg = error_of<logic_error>([&] { (void)p.acquire(4, s); });
    CHECK(contains(msg, "unit 4 'u4' shares arena bytes with unit 0 'u0', which is held, inside a capture scope"));
    CHECK(p.stats().off_trace_fallbacks == 0);
    CHECK(r.c->allocations == allocations);
    p.release(l0, s);
    auto l4 = p.acquire(4, s);  // on the trace now
    p.release(l4, s);
    scope.end();
  }
  CHECK(r.c->live.empty());
}

TEST_CASE("capture_scope: one scope per pool; a scope destroyed without end() closes without checking") {
  host_unit_pool<> p(make_plan<max>(uniform(3)), host::aligned_resource{}, host::inline_stream{});
  host::inline_stream const s{};
  host_unit_pool<>::lease held;
  {
    capture_scope scope(p);
    CHECK(contains(error_of<logic_error>([&] { capture_scope second(p); }),
                   "plan 'uniform' already has an open capture scope"));
    held = p.acquire(0, s);  // an exception would leave here: no check in the destructor
  }
  p.release(held, s);  // no scope: a lease from any time may be released
  capture_scope next(p);
  next.end();
}
