// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::lifetime — stream-ordered lifetime guards, release policies, async collective work,
// the host substrate pairing and the manually advanced test substrate. CUDA-free; the CUDA guards
// are in headroom/lifetime/cuda.hpp.
#include "headroom/lifetime/deferred_reclaimer.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/host.hpp"
#include "headroom/lifetime/manual.hpp"
#include "headroom/lifetime/policy.hpp"
#include "headroom/lifetime/work.hpp"
