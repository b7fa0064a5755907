// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::trace — allocation history at chosen steps, written as PyTorch memory_viz
// snapshots (CUDA-free: works over any stream_resource).
#include "headroom/trace/clock.hpp"
#include "headroom/trace/event.hpp"
#include "headroom/trace/file.hpp"
#include "headroom/trace/hooks.hpp"
#include "headroom/trace/live_table.hpp"
#include "headroom/trace/memory_viz.hpp"
#include "headroom/trace/pickle.hpp"
#include "headroom/trace/policy.hpp"
#include "headroom/trace/profiler.hpp"
#include "headroom/trace/recorder.hpp"
#include "headroom/trace/resource.hpp"
#include "headroom/trace/ring.hpp"
#include "headroom/trace/snapshot.hpp"
#include "headroom/trace/svg.hpp"
#include "headroom/trace/take_snapshot.hpp"
#include "headroom/trace/timeline.hpp"
