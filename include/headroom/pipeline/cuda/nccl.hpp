// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The pipeline executor over NCCL: activations and gradients move with ncclSend/ncclRecv of
// bytes (ncclUint8) on the executor's transfer stream.
//
//   nccl::launch_per_device(nccl::first_devices(2), [&](nccl::communicator& comm) {   // one process
//     cuda::async_resource memory(comm.device());
//     cuda::stream s;
//     pipeline::cuda::nccl_executor<> exec(comm, memory, sched, bytes, s, s);
//     exec.step(stage, pipeline::retention::reduced{});
//   });
//
// Several processes (one GPU each) build the communicator with mpi::make_nccl_communicator
// (headroom/mpi/nccl_bootstrap.hpp) and run the same code.
#include "headroom/nccl/communicator.hpp"
#include "headroom/pipeline/cuda/executor.hpp"

namespace headroom::pipeline::cuda {

template <class Resource = headroom::cuda::async_resource>
using nccl_executor = device_executor<nccl::communicator, Resource>;

static_assert(byte_transport<nccl::communicator>);
static_assert(device_transport<nccl::communicator>);

}  // namespace headroom::pipeline::cuda
