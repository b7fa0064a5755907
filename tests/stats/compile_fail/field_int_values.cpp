// SPDX-License-Identifier: Apache-2.0
// A typed-report field of int: values travel as 64-bit words, so only std::int64_t and double.
// expect: stats::field<name, T>: T must be std::int64_t or double
#include <cstdint>

#include "headroom/stats/report.hpp"

namespace hs = headroom::stats;

#ifdef HEADROOM_TWIN
using value = std::int64_t;
#else
using value = int;
#endif
using retries = hs::report<hs::field<"num_alloc_retries", value>>;
retries none() { return retries{}; }
