// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// Run as: mpiexec -n 2 test_pipeline_mpi_nccl_capture   (one process per GPU; needs 2 CUDA devices)
// nccl_capture.cu's step in the layout of a real job, one process per GPU, NCCL bootstrapped over
// MPI: a planned step captured in a CUDA graph with its NCCL send / recv inside replays bit-equal to
// the eager step on every rank, with no device allocation after set-up, for 1F1B, ZB-H1,
// interleaved 1F1B and ZBV. The layout for compute-sanitizer to judge (the one-process test does not
// finish under memcheck). Each rank counts its own mismatches; the counts are summed over MPI so
// that every rank reports the same verdict; a rank whose step throws aborts the job.
#include <doctest/doctest.h>

#include <cstdint>
#include <span>

#include "capture_replay.cuh"
#include "common/mpi_gpu.hpp"
#include "headroom/mpi/communicator.hpp"

namespace mpi = headroom::mpi;
using namespace capture_test;

namespace {

mpi::environment const env;

void require_setup() {
  auto& world = headroom_test::mpi_world();
  REQUIRE_MESSAGE(world.size() == 2, "run under mpiexec -n 2; got ", world.size(), " ranks");
  REQUIRE_MESSAGE(headroom_test::mpi_rank_device() >= 0, "every rank needs its own CUDA device (one process per GPU)");
  HEADROOM_CUDA_TRY(cudaSetDevice(headroom_test::mpi_rank_device()));
}

template <class G>
void capture_and_replay(hp::pipeline_shape const& shape) {
  CAPTURE(shape);
  CAPTURE(hp::make_schedule<G>(shape).name());
  std::int32_t const mine[1] = {
      headroom_test::or_abort_job([&] { return capture_and_replay_rank<G>(headroom_test::mpi_world_nccl(), shape); })};
  std::int32_t all[1] = {0};
  headroom_test::mpi_world().all_reduce(std::span<std::int32_t const>(mine), std::span<std::int32_t>(all),
                                        headroom::reduce_op::sum);
  CHECK(mine[0] == 0);
  CHECK(all[0] == 0);
}

}  // namespace

TEST_CASE("NCCL + CUDA graph, one process per GPU: a planned step captured with its send / recv replays bit-equal") {
  require_setup();
  for_each_schedule([](auto g, hp::pipeline_shape const& shape) { capture_and_replay<typename decltype(g)::type>(shape); });
}
