// SPDX-License-Identifier: Apache-2.0
// A typed-report field whose op is not a reduction policy.
// expect: stats::field<name, T, Op>: Op must be stats::maximum or stats::minimum
#include "headroom/stats/report.hpp"

namespace hs = headroom::stats;

struct sum {};
#ifdef HEADROOM_TWIN
using op = hs::minimum;
#else
using op = sum;
#endif
using free_memory = hs::report<hs::field<"free_gigabytes", double, op>>;
free_memory none() { return free_memory{}; }
