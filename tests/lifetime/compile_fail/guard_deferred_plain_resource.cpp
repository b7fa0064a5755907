// SPDX-License-Identifier: Apache-2.0
// The deferred release policy on a resource without a quarantine.
// expect: the deferred policy quarantines released blocks, so Resource must be a lifetime::quarantining_resource
#include <cstddef>

#include "headroom/lifetime/host.hpp"

namespace lt = headroom::lifetime;

#ifdef HEADROOM_TWIN
using deferred_guard = lt::host_deferred_guard;
#else
using deferred_guard = lt::host_guard<lt::deferred>;
#endif
std::size_t size_of_guard() { return sizeof(deferred_guard); }
