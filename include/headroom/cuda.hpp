// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::cuda — the CUDA substrate: stream and event views, device, pinned and stream-ordered
// resources, checks, dtype mapping. Needs the CUDA toolkit (a host compiler is enough).
// The adaptors to CCCL's cuda::mr join headroom to another library (and bring the global
// namespace ::cuda with them), so they are included by name: headroom/cuda/cccl_adaptor.hpp.
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/dtype.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/graph.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"
