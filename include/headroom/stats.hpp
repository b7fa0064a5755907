// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::stats — counters, memory reports and reducers across a group (CUDA-free).
// The CUDA sources and the device staging policy are in headroom/stats/cuda.hpp.
#include "headroom/stats/checked_report.hpp"
#include "headroom/stats/counter.hpp"
#include "headroom/stats/counting_communicator.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/keys.hpp"
#include "headroom/stats/phases.hpp"
#include "headroom/stats/plan.hpp"
#include "headroom/stats/policies.hpp"
#include "headroom/stats/reducer.hpp"
#include "headroom/stats/report.hpp"
#include "headroom/stats/staging.hpp"
#include "headroom/stats/statistics_resource.hpp"
#include "headroom/stats/table.hpp"
#include "headroom/stats/value.hpp"
#include "headroom/stats/workspace.hpp"
