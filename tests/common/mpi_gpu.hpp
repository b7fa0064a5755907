// SPDX-License-Identifier: Apache-2.0
#pragma once
// For GPU tests run under mpiexec, one process per GPU: the world communicator, this rank's GPU
// and an NCCL communicator over the world, each made on first use and kept to the end of the
// program. The test file itself holds `headroom::mpi::environment const env;` at namespace scope
// so that MPI lives from before main to after it.
//
// The GPU is the rank's index on its node; every rank learns whether all ranks have one, so a
// missing GPU fails every rank with the same message instead of leaving one waiting.
//
// A rank whose NCCL step throws leaves its peer inside NCCL, waiting for transfers that will not
// come: `or_abort_job` runs such a step and, on an exception, prints it with the rank and ends
// the whole job (MPI_Abort), so the verdict comes at once instead of at ctest's time limit.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <utility>

#include <mpi.h>

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

/// f(), or on an exception the message on stderr (with this rank) and MPI_Abort of the job.
template <class F>
decltype(auto) or_abort_job(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    char const* what = "a failed REQUIRE or another non-standard exception";  // doctest's own type
    try {
      throw;
    } catch (std::exception const& e) {
      what = e.what();
    } catch (...) {
    }
    std::fprintf(stderr, "rank %d: %s (ending the job: the other ranks wait in NCCL for this one)\n",
                 mpi_world().rank(), what);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    throw;  // MPI_Abort does not return
  }
}

}  // namespace headroom_test
