// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// The executor on a buffer plan over NCCL, one process driving 2 GPUs: a step makes no device
// allocation (the arena is the only one), and captured in a CUDA graph with its NCCL send / recv
// inside, it replays bit-equal to the eager step (weight gradients and losses), at the planned
// addresses. Misuse inside a real capture (a request outside a step) throws and leaves the
// stream out of capture.
#include <doctest/doctest.h>

#include <mutex>
#include <string>

#include "capture_replay.cuh"
#include "headroom/nccl/bootstrap.hpp"

using namespace capture_test;

namespace {

void require_two_gpus() {
  REQUIRE_MESSAGE(cu::device_count() >= 2, "this test drives 2 GPUs from one process; found ", cu::device_count());
}

template <class G>
void capture_and_replay(hp::pipeline_shape const& shape) {
  CAPTURE(shape);
  CAPTURE(hp::make_schedule<G>(shape).name());  // interleaved_1f1b and zbv log the same shape
  std::mutex mutex;
  int mismatches = 0, replays = 0;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    int const bad = capture_and_replay_rank<G>(comm, shape);
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
  for_each_schedule([](auto g, hp::pipeline_shape const& shape) { capture_and_replay<typename decltype(g)::type>(shape); });
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
