// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The pipeline module with its CUDA part: the executor on CUDA streams over device memory, over
// NCCL, and device slots for the loss values of a step. Needs the CUDA toolkit and NCCL.
#include "headroom/pipeline.hpp"
#include "headroom/pipeline/cuda/capture.hpp"
#include "headroom/pipeline/cuda/device_values.hpp"
#include "headroom/pipeline/cuda/executor.hpp"
#include "headroom/pipeline/cuda/nccl.hpp"
