// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The cp module with its CUDA part: split / gather kernels and device gathers over a communicator.
// Needs nvcc (.cuh: the kernels are defined here).
#include "headroom/cp.hpp"
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/kernels.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cp/cuda/pipelined_gather.cuh"
