// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The hooks wired to a real pool::unit_pool: its arena (allocated through a segment-recording
// adaptor) is a segment, its leases are blocks inside it.
#include <cstdint>

#include "headroom/host.hpp"
#include "headroom/pool.hpp"
#include "headroom/trace.hpp"

using namespace headroom;
namespace tr = headroom::trace;
using host::aligned_resource;
using host::inline_stream;

namespace {
inline_stream const hs{};
}  // namespace

TEST_CASE("hooks: a unit pool's arena is a segment and its leases are blocks") {
  tr::recorder<> rec;
  rec.start();
  using arena_resource = tr::recording_resource<aligned_resource, tr::recorder<>, tr::segment_events>;
  using traced_pool = pool::unit_pool<inline_stream, host::inline_event, arena_resource>;
  pool::workload w{"w", {{"a", {pool::elements_of(dtype::bf16, 64)}}, {"b", {pool::elements_of(dtype::bf16, 64)}}}, {}};
  {
    traced_pool p(pool::make_plan<pool::max>(w), arena_resource(aligned_resource{}, rec, tr::categories::pool), hs);
    REQUIRE(rec.events().size() == 1);
    CHECK(rec.events()[0].kind == tr::action::segment_alloc);
    CHECK(rec.events()[0].addr == reinterpret_cast<std::uintptr_t>(p.arena()));
    CHECK(rec.events()[0].size == p.arena_bytes());
    auto lease = p.acquire(1, hs);
    tr::lease_acquired(rec, lease, tr::stream_id(hs));
    auto const snap = tr::take_snapshot(rec);
    REQUIRE(snap.segments.size() == 1);
    CHECK(snap.segments[0].addr == reinterpret_cast<std::uintptr_t>(p.arena()));
    CHECK(snap.segments[0].active_bytes() == lease.bytes(0).size());
    tr::lease_released(rec, lease, tr::stream_id(hs));
    p.release(lease, hs);
  }
  REQUIRE(rec.events().size() == 4);
  CHECK(rec.events()[1].kind == tr::action::alloc);
  CHECK(rec.events()[1].what == tr::categories::pool);
  CHECK(rec.events()[2].kind == tr::action::free_completed);
  CHECK(rec.events()[3].kind == tr::action::segment_free);
  CHECK(rec.live().size() == 0);
}
