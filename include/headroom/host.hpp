// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::host — the host substrate: inline stream and event, aligned resource, thread_group
// communicator (ranks as threads of one process). CUDA-free.
#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/event.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/host/thread_group.hpp"
