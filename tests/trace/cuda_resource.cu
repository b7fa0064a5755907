// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The recorder over CUDA memory: stream ids are the cudaStream_t handles, properties pass
// through, and a deferred (record_stream-style) release shows as a pending block until the
// reclaimer frees it.
#include <cuda_runtime.h>

#include <cstdint>

#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
#include "headroom/trace.hpp"

using namespace headroom;
namespace tr = headroom::trace;
namespace lt = headroom::lifetime;

using traced = tr::recording_resource<cuda::async_resource, tr::recorder<>>;
static_assert(stream_resource_with<traced, cuda::stream_view, device_accessible>);

TEST_CASE("events carry the CUDA stream handle; device memory is usable") {
  cuda::async_resource pool(0);
  tr::recorder<> rec;
  rec.start();
  traced mr(pool, rec, tr::categories::activation);
  cuda::stream s;
  void* p = mr.allocate(s.view(), 1 << 20);
  HEADROOM_CUDA_TRY(cudaMemsetAsync(p, 0, 1 << 20, s.view().get()));
  mr.deallocate(s.view(), p, 1 << 20);
  s.view().synchronize();
  REQUIRE(rec.events().size() == 2);
  auto const id = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(s.view().get()));
  CHECK(id != 0);
  CHECK(rec.events()[0].stream == id);
  CHECK(rec.events()[1].kind == tr::action::free_completed);
  CHECK(rec.events()[1].addr == reinterpret_cast<std::uintptr_t>(p));
}

TEST_CASE("a deferred guard's block is pending until the reclaimer frees it") {
  cuda::async_resource pool(0);
  tr::recorder<> rec;
  rec.start();
  traced mr(pool, rec, tr::categories::communication);
  cuda::stream owner, comm;
  {
    lt::device_reclaimer<traced> quarantine(mr);
    lt::device_deferred_guard<traced> g(quarantine, owner.view(), 4 << 20);
    void* const p = g.data();
    g.use_on(comm.view());
    tr::free_requested(rec, g, tr::stream_id(owner.view()));
    g.release();
    auto const pending = tr::take_snapshot(rec);
    REQUIRE(pending.segments.size() == 1);
    CHECK(pending.segments[0].blocks[0].state == tr::block_state::active_pending_free);
    quarantine.synchronize_and_free();
    auto const done = tr::take_snapshot(rec);
    CHECK(done.segments.empty());
    REQUIRE(done.trace.size() >= 4);
    CHECK(done.trace.back().kind == tr::action::segment_free);
    CHECK(done.trace[done.trace.size() - 2].kind == tr::action::free_completed);
    CHECK(done.trace[done.trace.size() - 2].addr == reinterpret_cast<std::uintptr_t>(p));
  }
  owner.view().synchronize();
  comm.view().synchronize();
}
