// SPDX-License-Identifier: Apache-2.0
// A typed report given a plain type instead of a stats::field.
// expect: stats::report<Fields...>: every argument must be a stats::field<name, T>
#include <cstdint>

#include "headroom/stats/report.hpp"

namespace hs = headroom::stats;

#ifdef HEADROOM_TWIN
using step_memory = hs::report<hs::field<"allocated_bytes", std::int64_t>>;
#else
using step_memory = hs::report<std::int64_t>;
#endif
step_memory none() { return step_memory{}; }
