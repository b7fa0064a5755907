// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/lifetime/deferred_reclaimer.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/manual.hpp"
#include "unordered.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace {

using mstream = manual::stream;
using mevent = manual::event;
template <class P>
using mguard = guard<manual::resource, mstream, mevent, P>;
using mreclaimer = deferred_reclaimer<manual::resource, mstream, mevent>;
using mdeferred_guard = guard<mreclaimer, mstream, mevent, deferred>;

constexpr std::size_t n_values = 1024;
constexpr std::size_t n_bytes = n_values * sizeof(std::int32_t);

std::vector<std::int32_t> random_values(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(-1'000'000, 1'000'000);
  std::vector<std::int32_t> v(n_values);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<std::int32_t> read(void const* p) {
  std::vector<std::int32_t> v(n_values);
  std::memcpy(v.data(), p, n_bytes);
  return v;
}

void fill(void* p, std::int32_t value) {
  auto* q = static_cast<std::int32_t*>(p);
  std::fill(q, q + n_values, value);
}

using lifetime_test::unordered;
static_assert(release_policy_for<unordered, manual::resource, mstream, mevent>);

// The race scenario on the manual substrate: a producer on `compute` fills the block, a reader
// on `comm` copies it (completes only when the test advances comm), the guard is released, the
// next allocation on `compute` overwrites it. Returns what the reader saw.
struct race_result {
  std::vector<std::int32_t> expected, seen;
  bool reused_same_block = false;
  std::size_t host_waits = 0;
  bool overwrite_ran_before_reader = false;
};

// A guard of policy P on `owner` over n_bytes: deferred guards draw from the quarantine, the
// others from the pool.
template <class P>
auto policy_guard(manual::resource& pool, mreclaimer& quarantine, mstream owner) {
  if constexpr (std::is_same_v<P, deferred>)
    return mdeferred_guard(quarantine, owner, n_bytes);
  else
    return mguard<P>(pool, owner, n_bytes);
}

// The scene most tests play in: a timeline with a compute and a comm stream, and a pool on it.
struct scene {
  manual::timeline t;
  mstream compute = t.make_stream("compute");
  mstream comm = t.make_stream("comm");
  manual::resource pool{t};
};

// Takes the released block `p` again on `owner` and overwrites it there. The reader of the old
// contents, queued before the release, must still see `expected`: the overwrite waits for it.
void overwrite_after_reader(manual::timeline& t, manual::resource& pool, mstream owner, void* p,
                            std::vector<std::int32_t> const& seen, std::vector<std::int32_t> const& expected) {
  auto next = make_guard(pool, owner, n_bytes, alignof(std::int32_t));
  CHECK(next.data() == p);
  t.submit(owner, [q = next.data()] { fill(q, -1); });
  t.run(owner);  // held by the wait for the reader
  CHECK(seen.empty());
  t.run_all();
  CHECK(seen == expected);
}

template <class Guard, class Resource>
race_result race(manual::timeline& t, Resource& res, mstream compute, mstream comm, std::uint32_t seed) {
  race_result r;
  r.expected = random_values(seed);
  bool reader_ran = false;
  Guard g(res, compute, n_bytes, alignof(std::int32_t));
  void* const p = g.data();
  t.submit(compute, [&, p] { std::memcpy(p, r.expected.data(), n_bytes); });
  t.run(compute);
  t.submit(comm, [&, p] {
    r.seen = read(p);
    reader_ran = true;
  });
  g.use_on(comm);
  g.release();
  Guard next(res, compute, n_bytes, alignof(std::int32_t));
  r.reused_same_block = next.data() == p;
  void* const q = next.data();
  t.submit(compute, [&, q] {
    r.overwrite_ran_before_reader = !reader_ran;
    fill(q, -7);
  });
  t.run(compute);  // compute first: a missing wait lets the overwrite run before the reader
  t.run_all();
  r.host_waits = t.host_waits();
  return r;
}

}  // namespace

TEST_CASE_FIXTURE(scene, "stream_ordered: the owner stream waits on the device, memory is reused at once, the reader sees its data") {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    auto r = race<mguard<stream_ordered>>(t, pool, compute, comm, seed);
    CHECK(r.reused_same_block);
    CHECK(r.seen == r.expected);
    CHECK_FALSE(r.overwrite_ran_before_reader);
    CHECK(r.host_waits == 0);
  }
  CHECK(pool.usage().reserved_high == n_bytes);  // one block served every allocation
}

TEST_CASE_FIXTURE(scene, "negative control: a free without the wait lets the next owner overwrite the block under the reader") {
  auto r = race<mguard<unordered>>(t, pool, compute, comm, 4);
  CHECK(r.reused_same_block);
  CHECK(r.overwrite_ran_before_reader);
  CHECK(r.seen != r.expected);
  CHECK(r.seen == std::vector<std::int32_t>(n_values, -7));
}

TEST_CASE_FIXTURE(scene, "stream_ordered: the owner's later work is held until the use stream reaches the mark") {
  auto g = make_guard<stream_ordered>(pool, compute, n_bytes);
  static_assert(std::is_same_v<decltype(g), mguard<stream_ordered>>);
  bool later_ran = false;
  t.submit(comm, [] {});
  g.use_on(comm);
  g.release();
  t.submit(compute, [&] { later_ran = true; });
  t.run(compute);
  CHECK_FALSE(later_ran);
  CHECK(t.pending(compute) == 3);  // wait, free, later work
  CHECK(t.step(comm));
  t.run(compute);
  CHECK(later_ran);
  CHECK(t.host_waits() == 0);
}

TEST_CASE_FIXTURE(scene, "deferred: the block waits in quarantine until the host sees the use complete, so memory grows") {
  mreclaimer quarantine(pool);

  auto r = race<mdeferred_guard>(t, quarantine, compute, comm, 5);
  CHECK_FALSE(r.reused_same_block);  // the reader had not completed when the host allocated
  CHECK(r.seen == r.expected);
  CHECK(r.host_waits == 0);
  CHECK(quarantine.stats().quarantined_blocks == 1);
  CHECK(quarantine.stats().blocks_deferred == 1);

  // The device lags: every released block stays out of reuse, so the pool reserves more. (The
  // race above ended with the device idle, so the first allocation polls its block free.)
  constexpr int layers = 6;
  for (int i = 0; i < layers; ++i) {
    mdeferred_guard g(quarantine, compute, n_bytes, alignof(std::int32_t));
    t.submit(comm, [] {});
    g.use_on(comm);
    g.release();
  }
  CHECK(quarantine.stats().quarantined_blocks == layers);
  CHECK(quarantine.stats().quarantined_bytes == layers * n_bytes);
  CHECK(quarantine.stats().blocks_freed_by_poll == 1);
  CHECK(pool.usage().reserved_current == layers * n_bytes);
  std::size_t const reserved_before = pool.usage().reserved_current;

  t.run_all();  // the device catches up; the host notices at its next allocation
  CHECK(quarantine.stats().quarantined_blocks == layers);
  mdeferred_guard after(quarantine, compute, n_bytes, alignof(std::int32_t));
  CHECK(quarantine.stats().quarantined_blocks == 0);
  CHECK(quarantine.stats().blocks_freed_by_poll == 1 + layers);
  CHECK(quarantine.stats().peak_quarantined_bytes == layers * n_bytes);
  CHECK(pool.usage().reserved_current == reserved_before);  // reused, not grown
  CHECK(t.host_waits() == 0);
}

TEST_CASE_FIXTURE(scene, "blocking: the host waits for the use, then the block is reused") {
  auto r = race<mguard<blocking>>(t, pool, compute, comm, 6);
  CHECK(r.reused_same_block);
  CHECK(r.seen == r.expected);
  CHECK_FALSE(r.overwrite_ran_before_reader);
  CHECK(r.host_waits == 1);
}

TEST_CASE("the forum loop: peak reserved memory per policy when the device lags the host") {
  // Per layer: allocate the output on compute, all-reduce it on comm, free the previous one.
  constexpr int layers = 8;
  auto run = [&]<class Guard>(auto& res, manual::timeline& t, mstream compute, mstream comm) {
    Guard prev(res, compute, n_bytes);
    for (int l = 0; l < layers; ++l) {
      Guard out(res, compute, n_bytes);
      t.submit(compute, [] {});  // the layer's matrix product
      t.submit(comm, [] {});     // its all-reduce
      out.use_on(comm);
      prev = std::move(out);  // releases the previous output with the guard's policy
    }
    prev.release();
  };
  std::size_t peak[3] = {};
  std::size_t waits[3] = {};
  {
    scene s;
    run.operator()<mguard<stream_ordered>>(s.pool, s.t, s.compute, s.comm);
    peak[0] = s.pool.usage().reserved_high;
    waits[0] = s.t.host_waits();
  }
  {
    scene s;
    mreclaimer quarantine(s.pool);
    run.operator()<mdeferred_guard>(quarantine, s.t, s.compute, s.comm);
    peak[1] = s.pool.usage().reserved_high;
    waits[1] = s.t.host_waits();
  }
  {
    scene s;
    run.operator()<mguard<blocking>>(s.pool, s.t, s.compute, s.comm);
    peak[2] = s.pool.usage().reserved_high;
    waits[2] = s.t.host_waits();
  }
  CHECK(peak[0] == 2 * n_bytes);             // two activations, whatever the lag
  CHECK(peak[1] == layers * n_bytes);  // every output that comm used stays reserved
  CHECK(peak[2] == 2 * n_bytes);
  CHECK(waits[0] == 0);
  CHECK(waits[1] == 0);
  CHECK(waits[2] == layers);  // one host wait per released output that comm used
}

TEST_CASE_TEMPLATE("release without any use frees on the owner stream at once", P, stream_ordered, blocking, deferred) {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  manual::resource pool(t);
  mreclaimer quarantine(pool);
  auto make = [&] { return policy_guard<P>(pool, quarantine, compute); };
  auto g = make();
  void* p = g.data();
  REQUIRE(p != nullptr);
  CHECK(g.use_count() == 0);
  g.release();
  CHECK(g.state() == guard_state::released);
  CHECK(g.data() == nullptr);
  CHECK(g.size() == 0);
  CHECK(pool.usage().used_current == 0);
  CHECK(quarantine.stats().quarantined_blocks == 0);
  CHECK(t.pending(compute) == 1);  // only the free: no wait was enqueued
  CHECK(t.host_waits() == 0);
  auto again = make();
  CHECK(again.data() == p);
}

TEST_CASE_TEMPLATE("destroying a live guard releases it with its policy", P, stream_ordered, blocking, deferred) {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  auto comm = t.make_stream("comm");
  manual::resource pool(t);
  mreclaimer quarantine(pool);
  void* p = nullptr;
  {
    auto g = policy_guard<P>(pool, quarantine, compute);
    p = g.data();
    t.submit(comm, [] {});
    g.use_on(comm);
  }
  if constexpr (std::is_same_v<P, deferred>) {
    CHECK(quarantine.stats().quarantined_blocks == 1);
    CHECK(pool.in_use(p));
    t.run_all();
    CHECK(quarantine.poll() == 1);
  } else if constexpr (std::is_same_v<P, blocking>) {
    CHECK(t.host_waits() == 1);
    CHECK(t.pending(comm) == 0);
  } else {
    CHECK(t.host_waits() == 0);
    CHECK(t.pending(comm) == 1);
    CHECK(t.pending(compute) == 2);  // wait + free
  }
  CHECK_FALSE(pool.in_use(p));
  CHECK(pool.usage().used_current == 0);
}

TEST_CASE_FIXTURE(scene, "use on the owner stream needs no event; repeated use on a stream re-records once complete") {
  auto g = make_guard(pool, compute, 64);
  g.use_on(compute);
  CHECK(g.use_count() == 0);
  t.submit(comm, [] {});
  g.use_on(comm);
  CHECK(g.use_count() == 1);
  t.submit(comm, [] {});
  g.use_on(comm);  // the first use is still in flight: keep it, add a second mark
  CHECK(g.use_count() == 2);
  t.run_all();
  t.submit(comm, [] {});
  g.use_on(comm);  // both completed: the first is re-recorded
  CHECK(g.use_count() == 2);
  CHECK(g.uses()[0].event.ready() == false);
  CHECK(g.uses()[1].event.ready() == true);
  g.release();
  CHECK(t.pending(compute) == 3);  // two waits + the free
}

TEST_CASE("set_owner moves the free to another stream and still waits for the old owner's work") {
  manual::timeline t;
  auto a = t.make_stream("a");
  auto b = t.make_stream("b");
  manual::resource pool(t);
  auto g = make_guard(pool, a, n_bytes, alignof(std::int32_t));
  auto const expected = random_values(7);
  std::vector<std::int32_t> seen;
  void* p = g.data();
  t.submit(a, [&, p] { std::memcpy(p, expected.data(), n_bytes); });
  t.submit(a, [&, p] { seen = read(p); });
  g.set_owner(b);
  CHECK(g.owner() == b);
  CHECK(g.use_count() == 1);
  g.release();
  overwrite_after_reader(t, pool, b, p, seen, expected);  // held by the wait on a
}

TEST_CASE_FIXTURE(scene, "move construction and assignment transfer ownership; assignment releases the target's block") {
  auto a = make_guard(pool, compute, 256);
  void* pa = a.data();
  t.submit(comm, [] {});
  a.use_on(comm);

  mguard<stream_ordered> b(std::move(a));
  CHECK(a.state() == guard_state::empty);
  CHECK_FALSE(a);
  CHECK(a.data() == nullptr);
  CHECK(a.use_count() == 0);
  CHECK(b.data() == pa);
  CHECK(b.use_count() == 1);
  CHECK(b.size() == 256);

  auto c = make_guard(pool, compute, 512);
  void* pc = c.data();
  c = std::move(b);  // c's own 512 bytes go back first
  CHECK(c.data() == pa);
  CHECK_FALSE(pool.in_use(pc));
  CHECK(pool.in_use(pa));
  CHECK(b.state() == guard_state::empty);

  auto& alias = c;
  c = std::move(alias);  // self-move keeps the block
  CHECK(c.data() == pa);
  CHECK(pool.in_use(pa));

  mguard<stream_ordered> empty;
  CHECK(empty.state() == guard_state::empty);
  empty = std::move(c);
  CHECK(empty.data() == pa);
  empty.release();
  CHECK_FALSE(pool.in_use(pa));
  CHECK(pool.usage().used_current == 0);
}

TEST_CASE_FIXTURE(scene, "misuse throws logic_error naming the guard's state; bad arguments throw invalid_argument") {
  auto g = make_guard(pool, compute, 100);
  g.release();
  CHECK_THROWS_WITH_AS(g.release(),
                       "lifetime::guard<stream_ordered>::release: the guard of 100 bytes was released already; a "
                       "block is released exactly once",
                       logic_error);
  CHECK_THROWS_WITH_AS(g.use_on(comm), "lifetime::guard<stream_ordered>::use_on: the guard of 100 bytes was released already",
                       logic_error);
  CHECK_THROWS_AS(g.set_owner(comm), logic_error);
  CHECK_THROWS_AS((void)g.as_span<float>(), logic_error);
  CHECK(pool.usage().used_current == 0);  // the second release freed nothing twice
  CHECK(pool.refused_frees() == 0);

  auto h = make_guard<blocking>(pool, compute, 100);
  auto moved = std::move(h);
  CHECK_THROWS_WITH_AS(h.release(), "lifetime::guard<blocking>::release: the guard is empty (moved-from or default-constructed)",
                       logic_error);
  CHECK_THROWS_AS(h.use_on(comm), logic_error);

  CHECK_THROWS_WITH_AS((void)moved.as_span<double>(),
                       "lifetime::guard::as_span: 100 bytes is not a multiple of the element size 8", invalid_argument);
  auto odd = make_guard(pool, compute, 64, 2);
  CHECK_THROWS_WITH_AS((void)odd.as_span<std::int32_t>(),
                       "lifetime::guard::as_span: alignment 2 is less than the element alignment 4", invalid_argument);
  CHECK(moved.as_span<std::int32_t>().size() == 25);
  CHECK_THROWS_WITH_AS((void)make_guard(pool, compute, 64, 3), "lifetime::guard: alignment 3 is not a power of two",
                       invalid_argument);
}

TEST_CASE_FIXTURE(scene, "a use stream may be destroyed after use_on: the guard keeps only the event") {
  auto const expected = random_values(8);
  std::vector<std::int32_t> seen;
  auto g = make_guard(pool, compute, n_bytes, alignof(std::int32_t));
  void* p = g.data();
  std::memcpy(p, expected.data(), n_bytes);
  t.submit(comm, [&, p] { seen = read(p); });
  g.use_on(comm);
  t.destroy(comm);  // queued work still completes, as with cudaStreamDestroy
  g.release();
  overwrite_after_reader(t, pool, compute, p, seen, expected);
}

TEST_CASE("an owner stream gone before release: release throws and keeps the block; set_owner recovers") {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  auto comm = t.make_stream("comm");
  auto spare = t.make_stream("spare");
  manual::resource pool(t);
  auto g = make_guard(pool, compute, 64);
  void* p = g.data();
  t.submit(comm, [] {});
  g.use_on(comm);
  t.destroy(compute);
  CHECK_THROWS_WITH_AS(g.release(), "manual::timeline::wait: stream 'compute' was destroyed; a stream accepts no work after that",
                       logic_error);
  CHECK(g.live());
  CHECK(pool.in_use(p));
  g.set_owner(spare);  // remembers what compute had issued, frees on spare
  g.release();
  CHECK_FALSE(pool.in_use(p));
  CHECK(pool.refused_frees() == 0);
}

TEST_CASE_FIXTURE(scene, "destroying a guard whose owner stream is gone leaks the block rather than free it unordered") {
  void* used = nullptr;
  void* unused = nullptr;
  {
    auto with_use = make_guard(pool, compute, 64);
    auto without_use = make_guard(pool, compute, 128);
    used = with_use.data();
    unused = without_use.data();
    t.submit(comm, [] {});
    with_use.use_on(comm);
    t.destroy(compute);
  }  // with_use: the wait cannot be enqueued -> reported on stderr, leaked
     // without_use: the substrate refuses the free on a dead stream (as cudaFreeAsync would fail)
  CHECK(pool.in_use(used));
  CHECK(pool.in_use(unused));
  CHECK(pool.refused_frees() == 1);
  auto other = t.make_stream("other");
  auto later = make_guard(pool, other, 64);
  CHECK(later.data() != used);  // a leaked block is never handed out again
}

TEST_CASE("zero-byte guards and printing") {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  manual::resource pool(t);
  auto z = make_guard(pool, compute, 0);
  CHECK(z.live());
  CHECK(z.size() == 0);
  CHECK(z.as_span<float>().empty());
  std::ostringstream os;
  os << z;
  CHECK(os.str().rfind("guard<stream_ordered>{live, 0 bytes at ", 0) == 0);
  z.release();
  os.str("");
  os << z;
  CHECK(os.str() == "guard<stream_ordered>{released}");
}

TEST_CASE_FIXTURE(scene, "deferred marks the use streams at the time of the free (record_stream); stream_ordered at the use") {
  mreclaimer quarantine(pool);

  mdeferred_guard d(quarantine, compute, 64);
  t.submit(comm, [] {});  // the use
  d.use_on(comm);
  t.submit(comm, [] {});  // later, unrelated comm work
  d.release();
  CHECK(t.step(comm));
  CHECK(quarantine.poll() == 0);  // the mark covers the later work too
  CHECK(t.step(comm));
  CHECK(quarantine.poll() == 1);

  auto so = make_guard(pool, compute, 64);
  t.submit(comm, [] {});
  so.use_on(comm);
  t.submit(comm, [] {});
  so.release();
  bool after = false;
  t.submit(compute, [&] { after = true; });
  t.run(compute);
  CHECK_FALSE(after);
  CHECK(t.step(comm));  // only the use
  t.run(compute);
  CHECK(after);  // the owner did not wait for the later comm work
  CHECK(t.pending(comm) == 1);
}
