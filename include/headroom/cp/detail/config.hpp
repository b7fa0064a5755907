// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// One definition of the index math serves host ops and CUDA kernels (and constant expressions).
#if defined(__CUDACC__)
#define HEADROOM_CP_HD __host__ __device__
#define HEADROOM_CP_HD_INLINE __host__ __device__ __forceinline__ constexpr
#else
#define HEADROOM_CP_HD
#define HEADROOM_CP_HD_INLINE constexpr
#endif
