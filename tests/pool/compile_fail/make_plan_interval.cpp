// SPDX-License-Identifier: Apache-2.0
// The interval planner through make_plan: it needs the execution order, so it has its own entry point.
// expect: for pool::interval call pool::make_interval_plan(workload, orders)
#include "headroom/pool/execution_order.hpp"
#include "headroom/pool/interval.hpp"
#include "headroom/pool/plan.hpp"

namespace pool = headroom::pool;

pool::plan plan_for(pool::workload const& w) {
#ifdef HEADROOM_TWIN
  return pool::make_interval_plan(w, {pool::training_order(w)});
#else
  return pool::make_plan<pool::interval>(w);
#endif
}
