// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::cp — packed-sequence context-parallel split / gather (CUDA-free part). The CUDA
// kernels and device gathers are in headroom/cp/cuda.cuh (needs nvcc).
#include "headroom/cp/copy_plan.hpp"
#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/gather.hpp"
#include "headroom/cp/layout.hpp"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/output.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/cp/row_runs.hpp"
