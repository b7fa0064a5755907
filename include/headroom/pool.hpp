// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::pool — workloads, execution orders, planners (fixed, max, interval) and plans (pure),
// lifetime packing (pack_lifetimes), lease traces planned on their lifetimes (lease_trace,
// plan_lifetimes, learning_arena, modelled Megatron-FSDP traces),
// assignment, non-unit, release-order and off-trace policies, the unit pool and its host-substrate
// form host_unit_pool, plan fingerprints. CUDA-free; the CUDA pool and NCCL registration are in
// headroom/pool/cuda.hpp. The model presets (a data table) are included by name:
// headroom/pool/models.hpp.
#include "headroom/pool/capture.hpp"
#include "headroom/pool/execution_order.hpp"
#include "headroom/pool/fingerprint.hpp"
#include "headroom/pool/fsdp_trace.hpp"
#include "headroom/pool/host.hpp"
#include "headroom/pool/interval.hpp"
#include "headroom/pool/lease.hpp"
#include "headroom/pool/lease_trace.hpp"
#include "headroom/pool/learning_arena.hpp"
#include "headroom/pool/lifetime_pack.hpp"
#include "headroom/pool/lifetime_plan.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/pool_stats.hpp"
#include "headroom/pool/unit_pool.hpp"
#include "headroom/pool/workload.hpp"
