// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The pool module with its CUDA part: cuda_unit_pool over device memory, and NCCL user-buffer
// registration of the arena. Needs the CUDA toolkit and NCCL.
#include "headroom/pool.hpp"
#include "headroom/pool/cuda/capture.hpp"
#include "headroom/pool/cuda/nccl.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"
