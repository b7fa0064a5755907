// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// NCCL communicators across processes, with the ncclUniqueId sent over MPI.
//
//   headroom::mpi::environment env(&argc, &argv);
//   auto world = headroom::mpi::communicator::world();
//   auto nccl = headroom::mpi::make_nccl_communicator(world, headroom::mpi::local_rank(world));
//
// Rank r of the MPI communicator becomes rank r of the NCCL one. Every rank must call it.
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "headroom/cuda/device.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/communicator.hpp"

namespace headroom::mpi {

/// `root` creates an ncclUniqueId (ncclGetUniqueId) and every rank of `comm` receives it.
/// Collective over `comm`. If the root fails to create the id, every rank throws nccl_error
/// (the failure travels with the broadcast, so no rank is left waiting).
[[nodiscard]] inline ncclUniqueId broadcast_nccl_unique_id(communicator& comm, int root = 0) {
  ncclUniqueId id{};
  std::byte payload[1 + sizeof(ncclUniqueId)] = {};  // [status][id]
  ncclResult_t status = ncclSuccess;
  if (comm.rank() == root) {
    status = ncclGetUniqueId(&id);
    payload[0] = static_cast<std::byte>(status);
    std::memcpy(payload + 1, &id, sizeof id);
  }
  comm.broadcast(std::span<std::byte>(payload), root);
  auto const root_status = static_cast<ncclResult_t>(payload[0]);
  if (root_status != ncclSuccess)
    nccl::detail::throw_nccl_failure(root_status, "ncclGetUniqueId(&id) on the root rank", __FILE__, __LINE__);
  std::memcpy(&id, payload + 1, sizeof id);
  return id;
}

/// This process's index among the ranks of `comm` on the same node (MPI_COMM_TYPE_SHARED),
/// the usual choice of CUDA device. Collective over `comm`.
[[nodiscard]] inline int local_rank(communicator const& comm) {
  MPI_Comm node = MPI_COMM_NULL;
  HEADROOM_MPI_TRY(MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node));
  int r = 0;
  int const status = MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  HEADROOM_MPI_TRY(status);
  return r;
}

/// An NCCL communicator with the same ranks as `comm`, this rank on CUDA device `device`.
/// Collective over `comm` (every rank calls it, each with its own device).
[[nodiscard]] inline nccl::communicator make_nccl_communicator(communicator& comm, int device,
                                                               ncclConfig_t* config = nullptr) {
  // Agree on the arguments first, so that a bad device on one rank fails every rank instead
  // of leaving the others waiting in the broadcast.
  int const available = cuda::device_count();
  std::int32_t const mine[1] = {device >= 0 && device < available ? 1 : 0};
  std::int32_t all_ok[1] = {0};
  comm.all_reduce(std::span<std::int32_t const>(mine), std::span<std::int32_t>(all_ok), reduce_op::min);
  expects(mine[0] == 1, "mpi::make_nccl_communicator: rank ", comm.rank(), ": device ", device,
          " out of range [0, ", available, ")");
  expects(all_ok[0] == 1, "mpi::make_nccl_communicator: another rank passed a device that does not exist");
  ncclUniqueId const id = broadcast_nccl_unique_id(comm, 0);
  return nccl::communicator::init_rank(id, comm.size(), comm.rank(), device, config);
}

}  // namespace headroom::mpi
