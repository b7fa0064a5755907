// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::mpi — the MPI communicator over host buffers. Needs MPI only.
// The NCCL bootstrap over MPI joins two substrates (MPI, CUDA + NCCL); include it by name:
// headroom/mpi/nccl_bootstrap.hpp.
#include "headroom/mpi/communicator.hpp"
