// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The CUDA pool: unit_pool on cuda::stream_view and cuda::event, with a device upstream
// (cuda::device_resource by default; nccl::nccl_mem_resource for an arena NCCL can register on
// every path, see pool/cuda/nccl.hpp).
//
//   pool::cuda_unit_pool<> pool(plan, cuda::device_resource{}, home_stream);
//   auto lease = pool.acquire(u, all_gather_stream);     // all_gather_stream waits on the device
//   pool.release(lease, compute_stream);                 // records one event, never blocks
#include <concepts>
#include <type_traits>

#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/unit_pool.hpp"

namespace headroom::pool {

template <class Upstream = cuda::device_resource, class Assignment = strict, class NonUnit = dynamic,
          class ReleaseOrder = record_if_cross_stream, class OffTrace = reject_off_trace>
using cuda_unit_pool = unit_pool<cuda::stream_view, cuda::event, Upstream, Assignment, NonUnit, ReleaseOrder, OffTrace>;

static_assert(std::default_initializable<cuda::event>, "unit_pool creates its release events up front");
static_assert(std::is_class_v<cuda_unit_pool<>::lease>);

}  // namespace headroom::pool
