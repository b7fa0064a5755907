// SPDX-License-Identifier: Apache-2.0
// A non-unit policy given where the pool expects its release order.
// expect: ReleaseOrder is not a pool::release_order_policy; use pool::record_if_cross_stream
#include <cstddef>

#include "headroom/pool/host.hpp"

namespace pool = headroom::pool;

#ifdef HEADROOM_TWIN
using host_pool = pool::host_unit_pool<pool::strict, pool::dynamic, pool::record_at_reuse>;
#else
using host_pool = pool::host_unit_pool<pool::strict, pool::dynamic, pool::persistent>;
#endif
std::size_t size_of_pool() { return sizeof(host_pool); }
