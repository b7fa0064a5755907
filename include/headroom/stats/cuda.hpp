// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The stats module with its CUDA part: memory-report sources read from the CUDA runtime, the
// device staging policy for reducers over device buffers, and device-resident reports (values in
// device memory, reduced without a host round trip). Needs the CUDA toolkit.
#include "headroom/stats.hpp"
#include "headroom/stats/cuda/device_reducer.hpp"
#include "headroom/stats/cuda/device_report.hpp"
#include "headroom/stats/cuda/sources.hpp"
#include "headroom/stats/cuda/staging.hpp"
