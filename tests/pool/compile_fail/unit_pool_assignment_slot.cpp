// SPDX-License-Identifier: Apache-2.0
// A non-unit policy given where the pool expects its assignment policy.
// expect: Assignment is not a pool::assignment_policy; use pool::strict or pool::first_free
#include <cstddef>

#include "headroom/pool/host.hpp"

namespace pool = headroom::pool;

#ifdef HEADROOM_TWIN
using host_pool = pool::host_unit_pool<pool::strict, pool::dynamic>;
#else
using host_pool = pool::host_unit_pool<pool::dynamic>;
#endif
std::size_t size_of_pool() { return sizeof(host_pool); }
