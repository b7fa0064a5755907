// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// The executor on a buffer plan over NCCL, one process driving 2 GPUs: a step makes no device
// allocation (the arena is the only one), and captured in a CUDA graph with its NCCL send / recv
// inside, it replays bit-equal to the eager step (weight gradients and losses), at the planned
// addresses. Misuse inside a real capture (a request outside a step) throws and leaves the
// stream out of capture.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "device_toy.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/graph.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
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

namespace {

using arena_t = hp::buffer_arena<stream_view, cu::event, counted_device>;

void require_two_gpus() {
  REQUIRE_MESSAGE(cu::device_count() >= 2, "this test drives 2 GPUs from one process; found ", cu::device_count());
}

bool capturing(stream_view s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HEADROOM_CUDA_TRY(cudaStreamIsCapturing(s.get(), &status));
  return status != cudaStreamCaptureStatusNone;
}

struct gradients {
  std::map<int, toy::params> params;
  std::vector<double> losses;
};

template <class G>
void capture_and_replay(hp::pipeline_shape const& shape) {
  CAPTURE(shape);
  toy::dims const d{.width = 16, .rows = 8};
  auto const sched = hp::make_schedule<G>(shape);
  CAPTURE(sched.name());  // interleaved_1f1b and zbv log the same shape
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const plan = hp::plan_buffers(sched, bytes, hp::retention::reduced{});
  std::mutex mutex;
  int mismatches = 0, replays = 0;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
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
    std::lock_guard lock(mutex);
    mismatches += bad;
    replays += 3;
  });
  CHECK(replays == 6);
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("NCCL + CUDA graph: a planned step captured with its send / recv replays bit-equal, no allocation") {
  require_two_gpus();
  capture_and_replay<hp::one_f_one_b>({.stages = 2, .microbatches = 4});
  capture_and_replay<hp::zb_h1>({.stages = 2, .microbatches = 4});
  capture_and_replay<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2});
  capture_and_replay<hp::zbv>({.stages = 2, .microbatches = 4, .chunks = 2});
}

TEST_CASE("NCCL + CUDA graph: a request outside a step inside a real capture throws; the stream leaves capture") {
  require_two_gpus();
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 2};
  toy::dims const d{};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const plan = hp::plan_buffers(sched, bytes, hp::retention::reduced{});
  int refused = 0;
  std::mutex mutex;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    cu::stream compute;
    arena_t arena(plan, comm.rank(), counted_device{}, compute.view());
    bool threw = false;
    {
      hp::graph_capture<arena_t> capture(arena, compute.view());
      try {
        (void)arena.allocate(compute.view(), 4096);
      } catch (headroom::logic_error const& e) {
        threw = std::string(e.what()).find("outside a step, inside a capture scope") != std::string::npos;
      }
    }
    CHECK_FALSE(capturing(compute.view()));
    std::lock_guard lock(mutex);
    refused += threw ? 1 : 0;
  });
  CHECK(refused == 2);
}
