// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// dtype tags for CUDA's 16-bit floating-point types.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "headroom/core/dtype.hpp"

namespace headroom {

template <> struct dtype_of<__half> : std::integral_constant<dtype, dtype::f16> {};
template <> struct dtype_of<__nv_bfloat16> : std::integral_constant<dtype, dtype::bf16> {};

static_assert(dtype_v<__half> == dtype::f16 && size_of(dtype_v<__half>) == sizeof(__half));
static_assert(dtype_v<__nv_bfloat16 const> == dtype::bf16 && size_of(dtype_v<__nv_bfloat16>) == sizeof(__nv_bfloat16));

}  // namespace headroom
