// SPDX-License-Identifier: Apache-2.0
#pragma once
// For GPU tests run under mpiexec, one process per GPU: the world communicator, this rank's GPU
// and an NCCL communicator over the world, each made on first use and kept to the end of the
// program. The test file itself holds `headroom::mpi::environment const env;` at namespace scope
// so that MPI lives from before main to after it.
//
// The GPU is the rank's index on its node; every rank learns whether all ranks have one, so a
// missing GPU fails every rank with the same message instead of leaving one waiting.
#include <cstdint>
#include <span>

#include "headroom/cuda/device.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/mpi/nccl_bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"

namespace headroom_test {

inline headroom::mpi::communicator& mpi_world() {
  static headroom::mpi::communicator w = headroom::mpi::communicator::world();
  return w;
}

/// This rank's CUDA device, or -1 on every rank when some rank has none.
inline int mpi_rank_device() {
  static int const device = [] {
    int const local = headroom::mpi::local_rank(mpi_world());
    std::int32_t const ok[1] = {local < headroom::cuda::device_count() ? 1 : 0};
    std::int32_t all_ok[1] = {0};
    mpi_world().all_reduce(std::span<std::int32_t const>(ok), std::span<std::int32_t>(all_ok), headroom::reduce_op::min);
    return all_ok[0] == 1 ? local : -1;
  }();
  return device;
}

/// NCCL rank r on this rank's device, for MPI rank r.
inline headroom::nccl::communicator& mpi_world_nccl() {
  static headroom::nccl::communicator c = headroom::mpi::make_nccl_communicator(mpi_world(), mpi_rank_device());
  return c;
}

}  // namespace headroom_test
