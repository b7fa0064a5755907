// SPDX-License-Identifier: Apache-2.0
// A release policy tag without a static release function.
// expect: Policy is not a lifetime::release_policy_for this resource
#include <cstddef>
#include <string_view>

#include "headroom/lifetime/host.hpp"

namespace lt = headroom::lifetime;

struct no_release {
  static constexpr std::string_view name = "no_release";
};
#ifdef HEADROOM_TWIN
using policy = lt::blocking;
#else
using policy = no_release;
#endif
std::size_t size_of_guard() { return sizeof(lt::host_guard<policy>); }
