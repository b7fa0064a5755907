// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::nccl — the NCCL communicator, groups, NCCL-registered memory, in-process bootstrap.
// Needs the CUDA toolkit and NCCL.
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/nccl/group.hpp"
#include "headroom/nccl/mem_resource.hpp"
#include "headroom/nccl/types.hpp"
