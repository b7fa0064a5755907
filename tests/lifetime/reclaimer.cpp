// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <sstream>
#include <thread>
#include <vector>

#include "headroom/lifetime/deferred_reclaimer.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/host.hpp"
#include "headroom/lifetime/manual.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace capped {

// manual::resource with a cap on bytes in use: past it, allocate throws capacity_error, as
// cuda::async_resource does when the device is out of memory.
class capped_resource {
 public:
  capped_resource(manual::timeline& t, std::size_t cap) : inner_(t), cap_(cap) {}
  void* allocate(manual::stream const& s, std::size_t n, std::size_t a = default_alignment) {
    if (inner_.usage().used_current + n > cap_)
      throw capacity_error("capped_resource: cannot allocate " + std::to_string(n) + " bytes within " +
                           std::to_string(cap_));
    return inner_.allocate(s, n, a);
  }
  void deallocate(manual::stream const& s, void* p, std::size_t n, std::size_t a = default_alignment) noexcept {
    inner_.deallocate(s, p, n, a);
  }
  friend bool operator==(capped_resource const& a, capped_resource const& b) noexcept { return &a == &b; }
  manual::resource inner_;
  std::size_t cap_;
};
static_assert(stream_resource<capped_resource, manual::stream>);

using capped_reclaimer = deferred_reclaimer<capped_resource, manual::stream, manual::event>;
using capped_guard = guard<capped_reclaimer, manual::stream, manual::event, deferred>;

}  // namespace capped
using namespace capped;

TEST_CASE("out of memory with blocks in quarantine: the host waits for all of them, frees them and retries") {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  auto comm = t.make_stream("comm");
  capped_resource upstream(t, 3 * 1024);
  capped_reclaimer quarantine(upstream);
  for (int i = 0; i < 3; ++i) {
    capped_guard g(quarantine, compute, 1024);
    t.submit(comm, [] {});
    g.use_on(comm);
  }  // destructors release: three blocks in quarantine, the cap reached
  CHECK(quarantine.stats().quarantined_blocks == 3);
  CHECK(t.pending(comm) == 3);
  capped_guard g(quarantine, compute, 1024);  // fails once, synchronizes, retries
  CHECK(g.live());
  CHECK(quarantine.stats().synchronize_all_count == 1);
  CHECK(quarantine.stats().quarantined_blocks == 0);
  CHECK(t.host_waits() == 3);
  CHECK(t.pending(comm) == 0);
  CHECK(upstream.inner_.usage().reserved_current == 3 * 1024);
}

TEST_CASE("out of memory with an empty quarantine rethrows the upstream's error") {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  capped_resource upstream(t, 1024);
  capped_reclaimer quarantine(upstream);
  capped_guard g(quarantine, compute, 1024);
  CHECK_THROWS_WITH_AS(capped_guard(quarantine, compute, 1024), "capped_resource: cannot allocate 1024 bytes within 1024",
                       capacity_error);
  CHECK(quarantine.stats().synchronize_all_count == 0);
}

TEST_CASE("poll frees exactly the blocks whose every use completed") {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  auto a = t.make_stream("a");
  auto b = t.make_stream("b");
  manual::resource pool(t);
  deferred_reclaimer<manual::resource, manual::stream, manual::event> quarantine(pool);
  using G = guard<decltype(quarantine), manual::stream, manual::event, deferred>;
  G both(quarantine, compute, 100);
  G only_a(quarantine, compute, 200);
  t.submit(a, [] {});
  t.submit(b, [] {});
  both.use_on(a);
  both.use_on(b);
  only_a.use_on(a);
  void* p_both = both.data();
  void* p_a = only_a.data();
  both.release();
  only_a.release();
  CHECK(quarantine.poll() == 0);
  CHECK(t.step(a));
  CHECK(quarantine.poll() == 1);  // only_a; `both` still waits on b
  CHECK_FALSE(pool.in_use(p_a));
  CHECK(pool.in_use(p_both));
  CHECK(quarantine.stats().quarantined_bytes == 100);
  CHECK(t.step(b));
  CHECK(quarantine.poll() == 1);
  CHECK_FALSE(pool.in_use(p_both));
  std::ostringstream os;
  os << quarantine.stats();
  CHECK(os.str() == "quarantine: 0 blocks, 0 B (peak 300 B); deferred 2, freed by poll 2, synchronize-all 0");
  CHECK(t.host_waits() == 0);
}

TEST_CASE("destroying the reclaimer waits for and frees every quarantined block") {
  manual::timeline t;
  auto compute = t.make_stream("compute");
  auto comm = t.make_stream("comm");
  manual::resource pool(t);
  {
    deferred_reclaimer<manual::resource, manual::stream, manual::event> quarantine(pool);
    guard<decltype(quarantine), manual::stream, manual::event, deferred> g(quarantine, compute, 64);
    t.submit(comm, [] {});
    g.use_on(comm);
    g.release();
    CHECK(pool.usage().used_current == 64);
  }
  CHECK(pool.usage().used_current == 0);
  CHECK(t.host_waits() == 1);
}

TEST_CASE("on the host substrate every policy frees at once; deferred at the next allocation") {
  host::aligned_resource heap;
  host::inline_stream s;
  host_reclaimer quarantine(heap);
  {
    host_guard<stream_ordered> a(heap, s, 4096);
    host_guard<blocking> b(heap, s, 4096, 64);
    host_deferred_guard c(quarantine, s, 4096);
    for (auto& x : a.as_span<float>()) x = 1.0f;
    for (auto& x : b.as_span<double>()) x = 2.0;
    for (auto& x : c.as_span<int>()) x = 3;
    host::inline_stream other;
    a.use_on(other);  // same handle as the owner: nothing to record
    CHECK(a.use_count() == 0);
    CHECK(b.alignment() == 64);
  }
  CHECK(quarantine.stats().quarantined_blocks == 0);  // no uses: freed at once
  {
    auto g = make_guard<deferred>(quarantine, s, 128);
    static_assert(std::is_same_v<decltype(g), host_deferred_guard>);
    g.set_owner(s);
    g.release();
  }
  CHECK(quarantine.stats().quarantined_blocks == 0);
}

TEST_CASE("the reclaimer is safe to share between threads") {
  host::aligned_resource heap;
  host_reclaimer quarantine(heap);
  std::vector<std::jthread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        void* p = quarantine.allocate(host::inline_stream{}, 64);
        host::inline_event e;
        e.record(host::inline_stream{});
        std::vector<stream_use<host::inline_stream, host::inline_event>> uses;
        uses.push_back({host::inline_stream{}, std::move(e)});
        quarantine.quarantine(host::inline_stream{}, block{p, 64, default_alignment}, std::move(uses));
      }
    });
  threads.clear();
  CHECK(quarantine.stats().blocks_deferred == 800);
  quarantine.poll();
  CHECK(quarantine.stats().quarantined_blocks == 0);
  CHECK(quarantine.stats().blocks_freed_by_poll == 800);
}
