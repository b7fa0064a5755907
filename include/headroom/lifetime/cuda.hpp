// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The lifetime module with its CUDA part: guards over CUDA streams, events and stream-ordered
// resources. Needs the CUDA toolkit.
#include "headroom/lifetime.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
