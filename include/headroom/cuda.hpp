#pragma once
// headroom::cuda — the CUDA substrate: stream and event views, device, pinned and stream-ordered
// resources, checks, dtype mapping, CCCL cuda::mr adaptors. Needs the CUDA toolkit (host compiler
// is enough; nvcc is not required).
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/cccl_adaptor.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/dtype.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"
