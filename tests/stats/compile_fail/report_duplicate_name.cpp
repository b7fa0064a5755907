// SPDX-License-Identifier: Apache-2.0
// A typed report with two fields of the same name.
// expect: stats::report<Fields...>: two fields have the same name
#include <cstdint>

#include "headroom/stats/report.hpp"

namespace hs = headroom::stats;

#ifdef HEADROOM_TWIN
using step_memory = hs::report<hs::field<"allocated_bytes", std::int64_t>, hs::field<"reserved_bytes", std::int64_t>>;
#else
using step_memory = hs::report<hs::field<"allocated_bytes", std::int64_t>, hs::field<"allocated_bytes", std::int64_t>>;
#endif
step_memory none() { return step_memory{}; }
