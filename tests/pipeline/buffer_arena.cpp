// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The executor on a buffer plan (buffer_arena) on thread ranks: a step makes no upstream
// allocation (counted), every buffer lies at its planned offset inside the one arena, and losses
// and weight gradients are bit-equal to the same step on a plain resource. Misuse raises: a step
// under other policies than the plan's, a kept output still held at the next step (the bytes it
// shares with that step's buffers are refused, naming both), and the capture contract
// (pipeline::capture_scope) on the host substrate.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"
#include "headroom/pipeline/buffer_arena.hpp"
#include "headroom/pipeline/buffer_plan.hpp"
#include "headroom/pipeline/capture.hpp"
#include "common/error_of.hpp"
#include "toy_model.hpp"

namespace hp = headroom::pipeline;
using headroom::host::aligned_resource;
using headroom::host::inline_event;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;
using headroom_test::error_of;

namespace arena_test {  // named: its operator== is used only by the concept check

// aligned_resource that counts what it hands out (copies share the counters).
struct counted_upstream {
  std::shared_ptr<std::atomic<std::uint64_t>> allocations = std::make_shared<std::atomic<std::uint64_t>>(0);
  aligned_resource inner;
  void* allocate(inline_stream const& s, std::size_t n, std::size_t a = headroom::default_alignment) {
    ++*allocations;
    return inner.allocate(s, n, a);
  }
  void deallocate(inline_stream const& s, void* p, std::size_t n, std::size_t a = headroom::default_alignment) noexcept {
    inner.deallocate(s, p, n, a);
  }
  friend bool operator==(counted_upstream const& x, counted_upstream const& y) noexcept {
    return x.allocations == y.allocations;
  }
};
static_assert(headroom::stream_resource<counted_upstream, inline_stream>);

}  // namespace arena_test
using arena_test::counted_upstream;

namespace {

using arena_t = hp::buffer_arena<inline_stream, inline_event, counted_upstream>;
using stage_t = toy::stage<inline_stream>;

struct outcome {
  std::map<int, toy::params> params;
  std::vector<double> losses;
};

stage_t make_stage(hp::schedule const& sched, int rank, toy::dims d) {
  stage_t stage{.d = d, .chunks = {}, .backward_order = {}};
  for (int c = 0; c < sched.shape().chunks; ++c) {
    int const s = sched.placement().virtual_stage(rank, c);
    stage.chunks.emplace(s, toy::make_params(d, s));
  }
  return stage;
}

// Three steps on the arena: eager, under a capture scope (what nccl_capture.cu captures in a CUDA
// graph), eager again. Each rank's chunks are the ones the schedule's placement gives it (zbv's V
// puts {0, 3} and {1, 2} on two ranks, not the shape's interleaved {0, 2} and {1, 3}: the device
// helper that took the latter threw map::at in nccl_capture.cu on 2x H200).
template <class G>
void zero_allocation_steps(hp::pipeline_shape const& shape, toy::dims const d = {.width = 6, .rows = 3}) {
  CAPTURE(shape);
  auto const sched = hp::make_schedule<G>(shape);
  CAPTURE(sched.name());
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const plan = hp::plan_buffers(sched, bytes, hp::retention::reduced{});
  std::vector<outcome> planned(3);
  outcome plain;
  std::mutex mutex;
  headroom::host::launch(shape.stages, [&](thread_communicator& comm) {
    int const r = comm.rank();
    counted_upstream up;
    arena_t arena(plan, r, up, inline_stream{});
    hp::executor exec(comm, arena, sched, bytes);
    auto const after_setup = up.allocations->load();
    CHECK(after_setup == 1 + arena.unplanned_allocations());  // the arena, and the setup's own requests
    auto const& rb = plan.rank(r);
    auto* const base = static_cast<std::byte*>(arena.pool().arena());
    bool const last = r == sched.placement().rank_of(shape.virtual_stages() - 1);
    for (int step = 0; step < 3; ++step) {
      stage_t stage = make_stage(sched, r, d);
      std::optional<hp::capture_scope<arena_t>> scope;
      if (step == 1) scope.emplace(arena);
      auto result = exec.step(stage, hp::retention::reduced{});
      if (scope) scope->end();
      CHECK(up.allocations->load() == after_setup);  // no allocation during a step
      CHECK(arena.live() == 0);
      CHECK(arena.pool().stats().acquisitions == static_cast<std::uint64_t>(step + 1) * rb.buffers.size());
      CHECK(exec.statistics().bytes().peak == rb.peak);
      std::lock_guard lock(mutex);
      auto& mine = planned[static_cast<std::size_t>(step)];
      if (last) mine.losses = result.losses;
      for (auto& [s, p] : stage.chunks) mine.params[s] = p;
    }
    CHECK(arena.pool().stats().off_trace_fallbacks == 0);
    for (std::size_t k = 0; k < rb.buffers.size(); ++k)  // every buffer of the plan inside the arena
      CHECK(rb.buffers[k].offset + rb.buffers[k].bytes <= rb.arena_bytes);
    CHECK(base != nullptr);
    // The same step on a plain resource: the same floats.
    aligned_resource resource;
    hp::executor ref(comm, resource, sched, bytes);
    stage_t other = make_stage(sched, r, d);
    auto result = ref.step(other, hp::retention::reduced{});
    std::lock_guard lock(mutex);
    for (auto& [s, p] : other.chunks) plain.params[s] = p;
    if (last) plain.losses = result.losses;
  });
  CHECK(plain.losses.size() == static_cast<std::size_t>(shape.microbatches));
  REQUIRE(plain.params.size() == static_cast<std::size_t>(shape.virtual_stages()));
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    auto const& got = planned[static_cast<std::size_t>(step)];
    CHECK(got.losses == plain.losses);
    REQUIRE(got.params.size() == plain.params.size());
    for (auto const& [s, p] : plain.params) {
      CHECK(got.params.at(s).dw == p.dw);
      CHECK(got.params.at(s).db == p.db);
    }
  }
}

}  // namespace

TEST_CASE("buffer_arena: eager and captured steps on the plan make no allocation and train bit-equal") {
  zero_allocation_steps<hp::one_f_one_b>({.stages = 3, .microbatches = 5});
  zero_allocation_steps<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2});
  zero_allocation_steps<hp::zb_h1>({.stages = 3, .microbatches = 4});
  zero_allocation_steps<hp::zbv>({.stages = 2, .microbatches = 5, .chunks = 2});
  zero_allocation_steps<hp::dualpipe_v>({.stages = 2, .microbatches = 4, .chunks = 2});
  // nccl_capture.cu's schedules and sizes
  toy::dims const gpu{.width = 16, .rows = 8};
  zero_allocation_steps<hp::one_f_one_b>({.stages = 2, .microbatches = 4}, gpu);
  zero_allocation_steps<hp::zb_h1>({.stages = 2, .microbatches = 4}, gpu);
  zero_allocation_steps<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2}, gpu);
  zero_allocation_steps<hp::zbv>({.stages = 2, .microbatches = 4, .chunks = 2}, gpu);
}

TEST_CASE("buffer_arena: a step under other policies than the plan's raises on every rank") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 3};
  toy::dims const d{};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const plan = hp::plan_buffers(sched, bytes, hp::retention::reduced{});
  std::atomic<int> refused{0};
  headroom::host::launch(shape.stages, [&](thread_communicator& comm) {
    arena_t arena(plan, comm.rank(), counted_upstream{}, inline_stream{});
    hp::executor exec(comm, arena, sched, bytes);
    stage_t stage = make_stage(sched, comm.rank(), d);
    try {
      (void)exec.step(stage, hp::retention::none{});
    } catch (headroom::logic_error const& e) {
      refused += std::string(e.what()).find("the step runs retention none, outputs freed_when_sent, transfers "
                                            "one_by_one; the buffer plan was made for retention reduced") !=
                 std::string::npos;
    } catch (headroom::group_aborted const&) {
      ++refused;  // the peer failed first
    }
    CHECK_FALSE(arena.in_step());
    CHECK(arena.live() == 0);
  });
  CHECK(refused == 2);
}

TEST_CASE("buffer_arena: an output kept from the previous step is refused, not handed out twice") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 3};
  toy::dims const d{};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const plan = hp::plan_buffers(sched, bytes, hp::retention::all{});
  std::atomic<int> refused{0};
  headroom::host::launch(shape.stages, [&](thread_communicator& comm) {
    arena_t arena(plan, comm.rank(), counted_upstream{}, inline_stream{});
    hp::executor exec(comm, arena, sched, bytes);
    stage_t stage = make_stage(sched, comm.rank(), d);
    auto kept = exec.step(stage, hp::retention::all{});
    bool const last = comm.rank() == 1;
    CHECK(kept.outputs.size() == (last ? 3u : 0u));
    CHECK(arena.live() == kept.outputs.size());
    try {
      stage = make_stage(sched, comm.rank(), d);
      (void)exec.step(stage, hp::retention::all{});
    } catch (headroom::logic_error const& e) {
      std::string const msg = e.what();
      refused += msg.find("still held") != std::string::npos || msg.find("which is held") != std::string::npos;
    } catch (headroom::group_aborted const&) {
      ++refused;
    }
    kept.outputs.clear();  // dropped: the arena is idle again (the aborted group runs no more steps)
    CHECK(arena.live() == 0);
    CHECK_FALSE(arena.in_step());
  });
  CHECK(refused == 2);
}

TEST_CASE("pipeline::capture_scope: the capture contract raises on the host substrate") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 3};
  toy::dims const d{};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const reduced = hp::plan_buffers(sched, bytes, hp::retention::reduced{});
  auto const all = hp::plan_buffers(sched, bytes, hp::retention::all{});
  headroom::host::launch(shape.stages, [&](thread_communicator& comm) {
    int const r = comm.rank();
    inline_stream const s{};
    {
      arena_t arena(reduced, r, counted_upstream{}, s);
      hp::executor exec(comm, arena, sched, bytes);
      stage_t stage = make_stage(sched, r, d);
      (void)exec.step(stage, hp::retention::reduced{});  // eager
      hp::capture_scope scope(arena);
      CHECK(arena.pool().pending_release_events() == 0);
      stage = make_stage(sched, r, d);
      (void)exec.step(stage, hp::retention::reduced{});  // "captured": balanced
      auto const msg = error_of([&] { (void)arena.allocate(s, 64); });
      CHECK(msg.find("outside a step, inside a capture scope") != std::string::npos);
      CHECK(error_of([&] { hp::capture_scope second(arena); }).find("already has an open capture scope") !=
            std::string::npos);
      scope.end();
      void* p = arena.allocate(s, 64);  // after the scope: the upstream serves it
      arena.deallocate(s, p, 64);
    }
    {
      arena_t arena(all, r, counted_upstream{}, s);
      hp::executor exec(comm, arena, sched, bytes);
      stage_t stage = make_stage(sched, r, d);
      std::optional<hp::capture_scope<arena_t>> scope(std::in_place, arena);
      auto kept = exec.step(stage, hp::retention::all{});
      std::string const msg = error_of([&] { scope->end(); });
      if (r == 1) {
        CHECK(msg.find("3 target(s) not released as captured") != std::string::npos);
        CHECK(msg.find("output of micro-batch 0 stage 1") != std::string::npos);
        CHECK(error_of([&] { hp::capture_scope again(arena); }).find("3 planned buffer(s) still held") !=
              std::string::npos);
      } else {
        CHECK(msg == "<no exception>");
      }
      kept.outputs.clear();
      hp::capture_scope again(arena);  // idle now
      again.end();
    }
  });
}

