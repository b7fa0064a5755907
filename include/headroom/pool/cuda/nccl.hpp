// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Registering a pool's arena with an NCCL communicator, once: the arena is one allocation at
// fixed addresses, so every slot of every unit is covered by one ncclCommRegister (Megatron
// needed per-bucket registration, and "around 1 hour" for large models before manual
// registration).
//
//   pool::cuda_unit_pool<nccl::nccl_mem_resource> pool(plan, {}, stream);   // ncclMemAlloc arena
//   auto reg = pool::register_arena(comm, pool);    // deregistered when `reg` dies
//
// Keep `reg` alive while collectives use leased slots, and destroy it before the pool.
#include "headroom/nccl/communicator.hpp"
#include "headroom/nccl/mem_resource.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"

namespace headroom::pool {

/// ncclCommRegister of [pool.arena(), pool.arena() + pool.arena_bytes()) on `comm`'s device.
template <class Pool>
[[nodiscard]] nccl::registration register_arena(nccl::communicator& comm, Pool const& pool) {
  return comm.register_buffer(static_cast<void*>(pool.arena()), static_cast<std::size_t>(pool.arena_bytes()));
}

}  // namespace headroom::pool
