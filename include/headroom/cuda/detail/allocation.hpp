// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Helpers shared by the CUDA resources: alignment checks and allocation failures.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"

namespace headroom::cuda::detail {

/// Throws invalid_argument unless `alignment` is a power of two no larger than `max`.
inline void check_alignment(char const* what, std::size_t alignment, std::size_t max) {
  expects(is_power_of_two(alignment) && alignment <= max, what, ": alignment ", alignment,
          " not supported, expected a power of two <= ", max);
}

/// Out of memory becomes capacity_error (naming the request); any other failure cuda_error.
[[noreturn]] inline void throw_allocation_failure(char const* what, cudaError_t status, std::size_t bytes,
                                                  char const* call, char const* file, int line) {
  if (status == cudaErrorMemoryAllocation) {
    static_cast<void>(cudaGetLastError());
    throw capacity_error(headroom::detail::concat(what, ": cannot allocate ", bytes, " bytes (", format_bytes(bytes),
                                                  "): ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
                                                  ") from ", call, " at ", file, ":", line));
  }
  throw_cuda_failure(status, call, file, line);
}

/// Throws logic_error (after `release(p)`) when an allocator returned a misaligned pointer.
template <class Release>
void check_returned_alignment(char const* what, void* p, std::size_t alignment, Release&& release) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    release(p);
    throw logic_error(headroom::detail::concat(what, ": allocator returned ", p, ", not aligned to ", alignment));
  }
}

}  // namespace headroom::cuda::detail

#define HEADROOM_CUDA_ALLOC_TRY(what, bytes, call)                                                          \
  do {                                                                                                     \
    ::cudaError_t const headroom_cuda_status_ = (call);                                                    \
    if (headroom_cuda_status_ != ::cudaSuccess)                                                            \
      ::headroom::cuda::detail::throw_allocation_failure(what, headroom_cuda_status_, bytes, #call, __FILE__, \
                                                         __LINE__);                                        \
  } while (0)
