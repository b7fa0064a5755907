// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom core: concepts (stream, event, resource, communicator), errors, byte sizes, dtype tags.
// CUDA-free.
#include "headroom/core/bytes.hpp"
#include "headroom/core/communicator.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
