// SPDX-License-Identifier: Apache-2.0
#pragma once
// The captured pipeline step of the NCCL capture tests, one rank's part: `nccl_capture.cu` runs it
// on 2 GPUs from one process (a thread per GPU), `mpi_nccl_capture.cu` one process per GPU (the
// layout of a real job, and the one for compute-sanitizer to judge: under memcheck the one-process
// test does not finish, BENCHMARKS.md run T).
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "device_toy.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/graph.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/pipeline/buffer_arena.hpp"
#include "headroom/pipeline/buffer_plan.hpp"
#include "headroom/pipeline/cuda/capture.hpp"
#include "headroom/pipeline/cuda/nccl.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
namespace hp = headroom::pipeline;
using cu::stream_view;

namespace arena_test {  // named: its operator== is used only by the concept check

// cudaMalloc'd arena, counting what it hands out (copies share the count).
struct counted_device {
  std::shared_ptr<int> allocations = std::make_shared<int>(0);
  cu::device_resource inner;
  void* allocate(stream_view s, std::size_t n, std::size_t a = headroom::default_alignment) {
    ++*allocations;
    return inner.allocate(s, n, a);
  }
  void deallocate(stream_view s, void* p, std::size_t n, std::size_t a = headroom::default_alignment) noexcept {
    inner.deallocate(s, p, n, a);
  }
  friend bool operator==(counted_device const& x, counted_device const& y) noexcept { return x.allocations == y.allocations; }
};
static_assert(headroom::stream_resource<counted_device, stream_view>);

}  // namespace arena_test
using arena_test::counted_device;

namespace capture_test {

using arena_t = hp::buffer_arena<stream_view, cu::event, counted_device>;

inline bool capturing(stream_view s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HEADROOM_CUDA_TRY(cudaStreamIsCapturing(s.get(), &status));
  return status != cudaStreamCaptureStatusNone;
}

struct gradients {
  std::map<int, toy::params> params;
  std::vector<double> losses;
};

/// The schedules both capture tests run: f(std::type_identity<G>{}, shape) for 1F1B, ZB-H1,
/// interleaved 1F1B and ZBV on 2 ranks, 4 micro-batches.
template <class F>
void for_each_schedule(F&& f) {
  f(std::type_identity<hp::one_f_one_b>{}, hp::pipeline_shape{.stages = 2, .microbatches = 4});
  f(std::type_identity<hp::zb_h1>{}, hp::pipeline_shape{.stages = 2, .microbatches = 4});
  f(std::type_identity<hp::interleaved_1f1b>{}, hp::pipeline_shape{.stages = 2, .microbatches = 4, .chunks = 2});
  f(std::type_identity<hp::zbv>{}, hp::pipeline_shape{.stages = 2, .microbatches = 4, .chunks = 2});
}

/// One rank's part: on `comm`'s device, an eager step over a buffer plan (NCCL connects, the arena
/// settles), the same step captured in a CUDA graph with its send / recv inside, 3 replays and one
/// eager step after them. Returns how many of this rank's gradients (and, on the last stage's rank,
/// losses) differ from the first eager step's; CHECKs that nothing is allocated after set-up.
template <class G>
int capture_and_replay_rank(nc::communicator& comm, hp::pipeline_shape const& shape) {
  toy::dims const d{.width = 16, .rows = 8};
  auto const sched = hp::make_schedule<G>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const plan = hp::plan_buffers(sched, bytes, hp::retention::reduced{});
  int const r = comm.rank();
  cu::async_resource model_memory(comm.device());
  cu::stream compute;
  device_toy::rank_model model(d, sched, r, model_memory, compute);
  counted_device up;
  arena_t arena(plan, r, up, compute.view());
  hp::cuda::nccl_executor<arena_t> exec(comm, arena, sched, bytes, compute, compute);
  int const after_setup = *up.allocations;
  auto zero_grads = [&] {
    compute.synchronize();
    for (auto& [s, p] : model.stage.chunks) {
      p.dw.fill_bytes(0);
      p.db.fill_bytes(0);
    }
  };
  auto snapshot = [&] {
    compute.synchronize();
    gradients g;
    for (auto& [s, p] : model.stage.chunks) g.params[s] = p.download();
    std::vector<double> l(static_cast<std::size_t>(shape.microbatches));
    model.losses.copy_to(l, compute);
    compute.synchronize();
    g.losses = l;
    return g;
  };

  zero_grads();
  (void)exec.step(model.stage, hp::retention::reduced{});  // eager: NCCL connects, the arena settles
  auto const eager = snapshot();
  CHECK(*up.allocations == after_setup);

  hp::graph_capture<arena_t> capture(arena, compute.view());
  (void)exec.step(model.stage, hp::retention::reduced{});
  cu::graph graph = capture.end();
  CHECK_FALSE(capturing(compute.view()));
  CHECK(*up.allocations == after_setup);
  CHECK(arena.live() == 0);

  int bad = 0;
  for (int replay = 0; replay < 3; ++replay) {
    zero_grads();
    graph.launch(compute.view());
    auto const got = snapshot();
    for (auto const& [s, p] : eager.params)
      bad += headroom_test::same_bytes(p.dw, got.params.at(s).dw) && headroom_test::same_bytes(p.db, got.params.at(s).db) ? 0 : 1;
    if (r == sched.placement().rank_of(shape.virtual_stages() - 1))
      bad += std::memcmp(eager.losses.data(), got.losses.data(), eager.losses.size() * sizeof(double)) == 0 ? 0 : 1;
  }
  // An eager step after the replays still agrees (the arena's state survived the capture).
  zero_grads();
  (void)exec.step(model.stage, hp::retention::reduced{});
  auto const after = snapshot();
  for (auto const& [s, p] : eager.params) bad += headroom_test::same_bytes(p.dw, after.params.at(s).dw) ? 0 : 1;
  return bad;
}

}  // namespace capture_test
