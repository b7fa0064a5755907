// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Release order policies against a model of the device: every stream keeps a vector clock, an
// event record captures the recording stream's clock, a wait merges it into the waiting stream.
// Work A happens before work B exactly when B's clock has seen A. The tests check, for every
// policy, that (1) every reuse of a slot on any stream happens after every use by its previous
// holder, on random traces over three streams, fixed and interval plans; (2) the default records
// no event where one stream acquires and releases, one per release where the lease crosses
// streams; (3) in FSDP's pattern with compute issued before the prefetch, the default keeps the
// prefetch concurrent with that compute (as record_at_release does), where record_at_reuse
// serialises it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "headroom/pool.hpp"

using namespace headroom;
using namespace headroom::pool;

// A named namespace: the equality the concepts require is never called, and clang warns about
// unused internal functions.
namespace release_order_test {

using clock_vector = std::vector<std::uint64_t>;

struct device_model {
  std::vector<clock_vector> streams;
  std::uint64_t records = 0;
  std::uint64_t waits = 0;
  explicit device_model(std::size_t n) : streams(n, clock_vector(n, 0)) {}
  static inline device_model* current = nullptr;
};

/// Work issued to a stream: the stream and its clock when issued.
struct work {
  int stream = -1;
  clock_vector clock;
};
/// a happens before b on the device (stream order, and events recorded and waited on).
bool happens_before(work const& a, work const& b) {
  return a.stream == b.stream ? a.clock[static_cast<std::size_t>(a.stream)] < b.clock[static_cast<std::size_t>(a.stream)]
                              : a.clock[static_cast<std::size_t>(a.stream)] <= b.clock[static_cast<std::size_t>(a.stream)];
}

struct model_stream {
  int id = 0;
  void synchronize() const noexcept {}
  friend bool operator==(model_stream, model_stream) noexcept = default;
  /// Issues work to this stream (a kernel using a lease's bytes).
  [[nodiscard]] work issue() const {
    auto& c = device_model::current->streams[static_cast<std::size_t>(id)];
    ++c[static_cast<std::size_t>(id)];
    return {id, c};
  }
};
static_assert(headroom::stream<model_stream>);

struct model_event {
  clock_vector at;
  void record(model_stream const& s) {
    at = device_model::current->streams[static_cast<std::size_t>(s.id)];
    ++device_model::current->records;
  }
  void wait_on(model_stream const& s) const {
    auto& c = device_model::current->streams[static_cast<std::size_t>(s.id)];
    for (std::size_t i = 0; i < at.size(); ++i) c[i] = std::max(c[i], at[i]);
    ++device_model::current->waits;
  }
  [[nodiscard]] bool ready() const noexcept { return true; }
  void synchronize() const noexcept {}
};
static_assert(headroom::event<model_event, model_stream>);

struct model_resource {
  void* allocate(model_stream const&, std::size_t n, std::size_t a) { return ::operator new(n == 0 ? 1 : n, std::align_val_t{a}); }
  void deallocate(model_stream const&, void* p, std::size_t, std::size_t a) noexcept { ::operator delete(p, std::align_val_t{a}); }
  friend bool operator==(model_resource const&, model_resource const&) noexcept { return true; }
};
static_assert(stream_resource<model_resource, model_stream>);

template <class Order>
using model_pool = unit_pool<model_stream, model_event, model_resource, first_free, dynamic, Order>;

workload units(std::size_t n) {
  workload w{"model", {}, {}};
  for (std::size_t u = 0; u < n; ++u)
    w.units.push_back({"u" + std::to_string(u), {elements_of(dtype::bf16, 64 + 8 * (u % 3)), elements_of(dtype::f32, 16)}});
  return w;
}

/// Units as in a hybrid MoE model: every third unit has a second bucket of another shape
/// ("experts"), so under FSDP's prefetch-one order its two slots were freed by two different
/// releases (its experts slot by the previous MoE unit, its params slot by a later unit).
workload mixed_units(std::size_t n) {
  workload w{"mixed", {}, {}};
  for (std::size_t u = 0; u < n; ++u) {
    unit x{"u" + std::to_string(u), {elements_of(dtype::bf16, 64)}};
    if (u % 3 == 0) x.buckets.push_back(elements_of(dtype::bf16, 256, "experts"));
    w.units.push_back(std::move(x));
  }
  return w;
}

// Random acquires and releases over three streams: each lease is used on its acquire stream,
// sometimes also on another stream that the caller then orders before the releasing stream (the
// pool's contract), and released on any of the three. Every use of a slot by its next holder
// must happen after every use by the previous one.
template <class Order>
void random_trace_is_ordered(plan const& p, std::uint64_t seed) {
  device_model dev(4);  // stream 0: home
  device_model::current = &dev;
  std::mt19937_64 rng(seed);
  model_stream const streams[3] = {{1}, {2}, {3}};
  struct past_use {
    std::byte const* begin;
    std::byte const* end;
    std::vector<work> uses;
  };
  std::vector<past_use> history;  // every released bucket's bytes and the work that used them
  std::size_t checked = 0;
  {
    model_pool<Order> pool(p, model_resource{}, model_stream{0});
    std::vector<typename model_pool<Order>::lease> held(p.unit_count());
    std::vector<std::vector<work>> uses(p.unit_count());
    for (int step = 0; step < 400; ++step) {
      std::size_t const u = rng() % p.unit_count();
      if (!held[u].valid()) {
        if (!pool.can_acquire({u})) continue;
        auto const s = streams[rng() % 3];
        held[u] = pool.acquire(u, s);
        uses[u] = {s.issue()};
        if (rng() % 3 == 0) {  // also used on another stream, ordered by the caller before the release
          auto const t = streams[rng() % 3];
          model_event joined;
          joined.record(s);
          joined.wait_on(t);
          uses[u].push_back(t.issue());
        }
        // Bytes shared with any earlier holder (the same slot, or an overlapping one on an
        // interval plan): all of its work happens before this holder's.
        for (std::size_t b = 0; b < held[u].size(); ++b) {
          auto const bytes = held[u].bytes(b);
          for (auto const& past : history) {
            if (past.end <= bytes.data() || bytes.data() + bytes.size() <= past.begin) continue;
            for (auto const& before : past.uses)
              for (auto const& now : uses[u]) {
                CHECK_MESSAGE(happens_before(before, now), "unit ", u, " bucket ", b, " reused at step ", step,
                              " before an earlier holder's work finished (", Order::name, ")");
                ++checked;
              }
          }
        }
      } else {
        // The caller's contract: every stream that used the lease is ordered before the release.
        auto const r = streams[rng() % 3];
        for (auto const& w : uses[u])
          if (w.stream != r.id) {
            model_event joined;
            joined.record(model_stream{w.stream});
            joined.wait_on(r);
          }
        for (std::size_t b = 0; b < held[u].size(); ++b) {
          auto const bytes = held[u].bytes(b);
          history.push_back({bytes.data(), bytes.data() + bytes.size(), uses[u]});
        }
        pool.release(held[u], r);
      }
    }
    for (auto& l : held)
      if (l.valid()) pool.release(l, streams[0]);
  }
  CHECK(checked > 100);  // the trace did reuse slots across streams
  device_model::current = nullptr;
}

// FSDP forward over `n` units, one prefetched. `compute_first`: compute of unit i is issued
// before the prefetch of unit i+1 (the order where deferring the record serialises).
struct step_result {
  std::vector<work> copies, computes;
  std::uint64_t records = 0, waits = 0;
  pool_stats stats;
};
template <class Order>
step_result fsdp_step(plan const& p, bool two_streams, bool compute_first) {
  device_model dev(3);
  device_model::current = &dev;
  model_stream const home{0}, ag{1};
  model_stream const compute = two_streams ? model_stream{2} : ag;
  std::size_t const n = p.unit_count();
  step_result r;
  {
    model_pool<Order> pool(p, model_resource{}, home);
    std::vector<typename model_pool<Order>::lease> held(n);
    std::vector<model_event> copied(n);
    auto prefetch = [&](std::size_t u) {
      held[u] = pool.acquire(u, ag);
      r.copies.push_back(ag.issue());  // all-gather into the lease
      copied[u].record(ag);
    };
    for (int pass = 0; pass < 3; ++pass) {
      prefetch(0);
      for (std::size_t i = 0; i < n; ++i) {
        if (!compute_first && i + 1 < n) prefetch(i + 1);
        copied[i].wait_on(compute);
        r.computes.push_back(compute.issue());
        if (compute_first && i + 1 < n) prefetch(i + 1);
        pool.release(held[i], compute);
      }
    }
    r.stats = pool.stats();
    r.records = dev.records;  // before the pool's destructor orders the home stream after the releases
    r.waits = dev.waits;
  }
  device_model::current = nullptr;
  return r;
}

}  // namespace release_order_test

using namespace release_order_test;

TEST_CASE("every policy orders every cross-stream reuse after the previous holder (random traces, 3 streams)") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed ", seed);
    auto const w = units(6);
    auto const fixed_plan = make_plan<pool::max>(w, {.buffers = 2});
    auto const interval_plan = make_interval_plan(w, {training_order(w), evaluation_order(w)}, {.resident = 3});
    auto const mixed_plan = make_plan<pool::max>(mixed_units(6), {.buffers = 2});
    for (auto const* p : {&fixed_plan, &interval_plan, &mixed_plan}) {
      random_trace_is_ordered<record_if_cross_stream>(*p, seed);
      random_trace_is_ordered<record_at_release>(*p, seed);
      random_trace_is_ordered<record_at_reuse>(*p, seed);
    }
  }
}

TEST_CASE("record_if_cross_stream: no event on one stream, one per release when the lease crosses streams") {
  auto const w = units(8);
  auto const p = make_plan<pool::max>(w, {.buffers = 2});
  std::uint64_t const pairs = 3 * 8;  // three passes of 8 units
  {  // one stream: stream order is enough, nothing recorded or waited on (beyond the test's own copies)
    auto const r = fsdp_step<record_if_cross_stream>(p, false, false);
    CHECK(r.stats.release_events == 0);
    CHECK(r.stats.reuse_events == 0);
    CHECK(r.stats.cross_stream_waits == 0);
    CHECK(r.stats.releases == pairs);
    CHECK(r.records == pairs);  // the test's `copied` events only
    auto const old = fsdp_step<record_at_release>(p, false, false);
    CHECK(old.stats.release_events == pairs);  // the previous default: one record per release, never waited on
    CHECK(old.records == 2 * pairs);
  }
  {  // two streams: one record at release and one wait per reuse, as record_at_release
    auto const r = fsdp_step<record_if_cross_stream>(p, true, false);
    auto const old = fsdp_step<record_at_release>(p, true, false);
    CHECK(r.stats.release_events == pairs);
    CHECK(r.stats.reuse_events == 0);
    CHECK(r.stats.cross_stream_waits == old.stats.cross_stream_waits);
    CHECK(r.stats.cross_stream_waits == pairs - 2);  // every acquire but the first use of the two groups
    CHECK(r.records == old.records);
    CHECK(r.waits == old.waits);
  }
}

TEST_CASE("record_if_cross_stream never serialises what recording at release overlapped") {
  auto const w = units(8);
  auto const p = make_plan<pool::max>(w, {.buffers = 2});
  // Compute of unit i issued before the prefetch of unit i+1, which reuses unit i-1's slot: the
  // prefetch must wait for compute(i-1) and must not wait for compute(i).
  auto overlapped = [](step_result const& r) {
    std::size_t overlaps = 0, ordered = 0;
    for (std::size_t k = 0; k < r.computes.size(); ++k) {
      std::size_t const unit = k % 8;  // copies[k + 1]: the prefetch issued right after compute k
      if (unit == 0 || unit == 7) continue;
      overlaps += happens_before(r.computes[k], r.copies[k + 1]) ? 0 : 1;
      ordered += happens_before(r.computes[k - 1], r.copies[k + 1]) ? 1 : 0;
    }
    return std::pair{overlaps, ordered};
  };
  auto const lazy = fsdp_step<record_if_cross_stream>(p, true, true);
  auto const eager = fsdp_step<record_at_release>(p, true, true);
  auto const deferred = fsdp_step<record_at_reuse>(p, true, true);
  auto const [lazy_overlaps, lazy_ordered] = overlapped(lazy);
  auto const [eager_overlaps, eager_ordered] = overlapped(eager);
  auto const [deferred_overlaps, deferred_ordered] = overlapped(deferred);
  CHECK(eager_overlaps == 3 * 6);  // every checked prefetch runs beside the compute issued before it
  CHECK(lazy_overlaps == eager_overlaps);
  CHECK(eager_ordered == 3 * 6);  // ... and after the compute that last used its slot
  CHECK(lazy_ordered == eager_ordered);
  CHECK(deferred_ordered == 3 * 6);
  // record_at_reuse records on the compute stream at the prefetch, after compute(i): serialised.
  CHECK(deferred_overlaps == 0);
  CHECK(deferred.stats.reuse_events > 0);
  CHECK(lazy.stats.reuse_events == 0);
}

TEST_CASE("record_if_cross_stream: a missed guess (acquired and released on one stream, reused on another) records at the reuse") {
  device_model dev(3);
  device_model::current = &dev;
  model_stream const home{0}, a{1}, b{2};
  auto const w = units(3);
  {
    model_pool<record_if_cross_stream> pool(make_plan<pool::max>(w, {.buffers = 2}), model_resource{}, home);
    auto l0 = pool.acquire(0, a);
    work const use = a.issue();
    auto l1 = pool.acquire(1, a);
    pool.release(l0, a);  // acquired and released on a: nothing recorded
    CHECK(pool.stats().release_events == 0);
    CHECK(dev.records == 0);
    auto l2 = pool.acquire(2, b);  // takes unit 0's slot on b: record on a now, b waits
    CHECK(pool.stats().reuse_events == 1);
    CHECK(pool.stats().cross_stream_waits == 1);
    CHECK(happens_before(use, b.issue()));
    pool.release(l2, b);
    pool.release(l1, a);
  }
  device_model::current = nullptr;
}


// FSDP's prefetch-one order on two streams over mixed_units: a two-bucket unit's slots were
// freed by two releases on the compute stream. The acquire issues one wait (on the later
// release, which follows the earlier one on that stream), not one per bucket; each release
// records one event (record_if_cross_stream), or the wait records one (record_at_reuse). The
// prefetch still follows every earlier holder's compute on each of its buckets.
template <class Order>
void one_record_and_one_wait_per_lease(bool records_at_release) {
  auto const w = mixed_units(9);
  auto const p = make_plan<pool::max>(w, {.buffers = 2});
  REQUIRE(p.shapes.size() == 2);
  device_model dev(3);
  device_model::current = &dev;
  model_stream const home{0}, ag{1}, compute{2};
  std::size_t const n = p.unit_count();
  std::vector<std::pair<std::byte const*, work>> last_compute;  // per slot (its bytes): the last compute on it
  std::uint64_t two_releases = 0, acquires = 0;
  {
    model_pool<Order> pool(p, model_resource{}, home);
    std::vector<typename model_pool<Order>::lease> held(n);
    auto prefetch = [&](std::size_t u) {
      std::uint64_t const records = dev.records, waits = dev.waits, events = pool.stats().release_events;
      held[u] = pool.acquire(u, ag);
      work const copy = ag.issue();
      std::vector<work const*> previous;  // the earlier holders' computes on this lease's slots
      for (std::size_t b = 0; b < held[u].size(); ++b)
        for (auto const& [bytes, used] : last_compute)
          if (bytes == held[u].bytes(b).data()) previous.push_back(&used);
      if (previous.empty()) return;  // first use of its slots
      ++acquires;
      if (previous.size() == 2 && !(previous[0]->clock == previous[1]->clock)) ++two_releases;
      CHECK(dev.waits - waits == 1);  // one wait per lease, whatever its bucket count
      CHECK(dev.records - records == (records_at_release ? 0u : 1u));
      CHECK(pool.stats().release_events == events);
      for (auto const* before : previous) CHECK(happens_before(*before, copy));
    };
    auto run = [&](std::size_t u) {
      work const use = compute.issue();
      for (std::size_t b = 0; b < held[u].size(); ++b) {
        auto const* bytes = held[u].bytes(b).data();
        auto it = std::find_if(last_compute.begin(), last_compute.end(), [&](auto const& e) { return e.first == bytes; });
        if (it == last_compute.end()) last_compute.emplace_back(bytes, use);
        else it->second = use;
      }
      std::uint64_t const records = dev.records;
      pool.release(held[u], compute);
      CHECK(dev.records - records == (records_at_release ? 1u : 0u));  // one event per release
    };
    for (int pass = 0; pass < 3; ++pass) {
      prefetch(0);
      for (std::size_t i = 0; i < n; ++i) {
        if (i + 1 < n) prefetch(i + 1);
        run(i);
      }
    }
    CHECK(pool.stats().cross_stream_waits == acquires);
  }
  CHECK(two_releases >= 6);  // the case in point occurred: slots of one lease freed by two releases
  device_model::current = nullptr;
}

TEST_CASE("a two-bucket lease freed by two releases on one stream: one record per release, one wait per acquire") {
  SUBCASE("record_if_cross_stream") { one_record_and_one_wait_per_lease<record_if_cross_stream>(true); }
  SUBCASE("record_at_release") { one_record_and_one_wait_per_lease<record_at_release>(true); }
  SUBCASE("record_at_reuse") { one_record_and_one_wait_per_lease<record_at_reuse>(false); }
}
