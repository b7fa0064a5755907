// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The host substrate's unit pool: inline_stream, inline_event and aligned_resource, so plans and
// assignment policies run (and are tested) on a CPU-only machine.
//   headroom::pool::host_unit_pool<Assignment, NonUnit, ReleaseOrder, OffTrace>
// The CUDA pool is in headroom/pool/cuda/unit_pool.hpp.
#include <type_traits>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/event.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/unit_pool.hpp"

namespace headroom::pool {

template <class Assignment = strict, class NonUnit = dynamic, class ReleaseOrder = record_if_cross_stream,
          class OffTrace = reject_off_trace>
using host_unit_pool = unit_pool<host::inline_stream, host::inline_event, host::aligned_resource, Assignment, NonUnit,
                                 ReleaseOrder, OffTrace>;
static_assert(std::is_class_v<host_unit_pool<>::lease> && std::is_class_v<host_unit_pool<first_free, persistent>::lease>);

}  // namespace headroom::pool
