// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// Run as: mpiexec -n 2 test_pipeline_mpi_nccl_executor   (one process per GPU; needs 2 CUDA devices)
// The pipeline executor across processes: NCCL bootstrapped over MPI, the toy MLP's kernels on
// each rank's GPU (device_toy.cuh). Every schedule's gradients and losses are bit-equal to a
// single-GPU run of the same kernels, each rank checking its own chunks. Checks use CHECK, so a
// failing rank keeps issuing the same transfers as the other; a rank whose step throws ends the
// job (its peer would wait in NCCL until ctest's limit).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/mpi_gpu.hpp"
#include "device_toy.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/mpi/communicator.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
namespace hp = headroom::pipeline;
namespace mpi = headroom::mpi;

namespace {

mpi::environment const env;

mpi::communicator& world() { return headroom_test::mpi_world(); }
int my_device() { return headroom_test::mpi_rank_device(); }
nc::communicator& nccl() { return headroom_test::mpi_world_nccl(); }

void require_setup() {
  REQUIRE_MESSAGE(world().size() == 2, "run under mpiexec -n 2; got ", world().size(), " ranks");
  REQUIRE_MESSAGE(my_device() >= 0, "every rank needs its own CUDA device (one process per GPU)");
  HEADROOM_CUDA_TRY(cudaSetDevice(my_device()));
}

template <class G, class R = hp::retention::reduced>
void check_against_reference(hp::pipeline_shape const& shape, bool two_streams) {
  CAPTURE(shape);
  CAPTURE(two_streams);
  toy::dims const d{.width = 16, .rows = 8};
  int const rank = world().rank();
  cu::stream compute;
  cu::stream transfer;
  auto const ref = device_toy::run_reference(d, shape.virtual_stages(), shape.microbatches, compute);

  cu::async_resource memory(my_device());
  auto const sched = hp::make_schedule<G>(shape);
  device_toy::rank_model model(d, sched, rank, memory, compute);
  auto& stage = model.stage;
  hp::cuda::nccl_executor<> exec(nccl(), memory, sched, hp::model_bytes::uniform(shape, toy::stage_cost(d)), compute,
                                 two_streams ? transfer.view() : compute.view());
  auto result = headroom_test::or_abort_job([&] { return exec.step(stage, R{}); });
  auto const plan = exec.plan(R{}).rank(rank);
  CHECK(exec.statistics().bytes().peak == plan.peak);
  CHECK(exec.statistics().bytes().value == plan.held_at_end);
  std::vector<double> host_losses(static_cast<std::size_t>(shape.microbatches));
  model.losses.copy_to(host_losses, compute);
  compute.synchronize();
  transfer.synchronize();

  for (auto const& chunk : stage.chunks) {
    int const s = chunk.first;  // a plain variable: clang 14 cannot capture structured bindings
    auto const& p = chunk.second;
    CAPTURE(s);
    auto const got = p.download();
    auto const& r = ref.stages[static_cast<std::size_t>(s)];
    CHECK(headroom_test::same_bytes(got.dw, r.dw));
    CHECK(headroom_test::same_bytes(got.db, r.db));
    CHECK(std::any_of(got.dw.begin(), got.dw.end(), [](float g) { return g != 0.0f; }));
  }
  if (rank == shape.rank_of(shape.virtual_stages() - 1)) {
    CHECK(result.losses.size() == (R::keeps_losses ? ref.losses.size() : 0u));  // CHECK: the peer goes on
    CHECK(result.outputs.size() == (R::keeps_outputs ? ref.losses.size() : 0u));
    CHECK(headroom_test::same_bytes(host_losses, ref.losses));  // written whatever the retention
  } else {
    CHECK(result.losses.empty());
  }
}

}  // namespace

TEST_CASE("MPI + NCCL: gradients and losses bit-equal to a single-GPU run, every schedule") {
  require_setup();
  for (bool two_streams : {false, true}) {
    for (int m : {1, 4}) {
      check_against_reference<hp::gpipe>({.stages = 2, .microbatches = m}, two_streams);
      check_against_reference<hp::one_f_one_b>({.stages = 2, .microbatches = m}, two_streams);
    }
    check_against_reference<hp::zb_h1>({.stages = 2, .microbatches = 5}, two_streams);
    check_against_reference<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2}, two_streams);
  }
  check_against_reference<hp::one_f_one_b, hp::retention::all>({.stages = 2, .microbatches = 4}, true);
  check_against_reference<hp::one_f_one_b, hp::retention::none>({.stages = 2, .microbatches = 4}, true);
}

TEST_CASE("MPI + NCCL: a schedule for another group size is rejected on every rank before any transfer") {
  require_setup();
  hp::pipeline_shape const shape{.stages = 3, .microbatches = 4};
  cu::async_resource memory(my_device());
  cu::stream s;
  CHECK_THROWS_WITH_AS(hp::cuda::nccl_executor<>(nccl(), memory, hp::make_schedule<hp::one_f_one_b>(shape),
                                                 hp::model_bytes::uniform(shape, toy::stage_cost(toy::dims{})), s, s),
                       doctest::Contains("p = 3"), headroom::invalid_argument);
  world().barrier();  // both ranks got here: nobody is left in a transfer
}
