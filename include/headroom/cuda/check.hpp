// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Checked CUDA runtime calls.
//
//   HEADROOM_CUDA_TRY(cudaMemsetAsync(p, 0, n, s));     // throws headroom::cuda_error
//   HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p));             // destructors: reports to stderr,
//                                                       // evaluates to false on failure
//
// The message names the call as written, the error's name and description, and file:line:
//   "CUDA call cudaSetDevice(99) failed: cudaErrorInvalidDevice (invalid device ordinal) at f.cu:12"
// A failed call's error is also cleared from the runtime's "last error" slot (as RMM does), so a
// later cudaGetLastError() does not report it a second time. Sticky errors (a kernel fault)
// cannot be cleared; every later call reports them.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "headroom/core/error.hpp"

namespace headroom::cuda::detail {

[[nodiscard]] inline std::string describe_cuda_failure(cudaError_t status, char const* call, char const* file,
                                                       int line) {
  return headroom::detail::concat("CUDA call ", call, " failed: ", cudaGetErrorName(status), " (",
                                  cudaGetErrorString(status), ") at ", file, ":", line);
}

[[noreturn]] inline void throw_cuda_failure(cudaError_t status, char const* call, char const* file, int line) {
  static_cast<void>(cudaGetLastError());  // clear a non-sticky error
  throw cuda_error(describe_cuda_failure(status, call, file, line));
}

/// Returns true on success; on failure prints one line to stderr and returns false. Never throws.
inline bool report_cuda_failure(cudaError_t status, char const* call, char const* file, int line) noexcept {
  if (status == cudaSuccess) return true;
  static_cast<void>(cudaGetLastError());
  std::fprintf(stderr, "headroom: CUDA call %s failed: %s (%s) at %s:%d\n", call, cudaGetErrorName(status),
               cudaGetErrorString(status), file, line);
  return false;
}

}  // namespace headroom::cuda::detail

/// Evaluates `call` (a cudaError_t expression); throws headroom::cuda_error unless it is cudaSuccess.
#define HEADROOM_CUDA_TRY(call)                                                                \
  do {                                                                                         \
    ::cudaError_t const headroom_cuda_status_ = (call);                                        \
    if (headroom_cuda_status_ != ::cudaSuccess)                                                \
      ::headroom::cuda::detail::throw_cuda_failure(headroom_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

/// For destructors and other noexcept paths: reports a failure to stderr and evaluates to a
/// bool (true on success). Never throws.
#define HEADROOM_CUDA_TRY_NOTHROW(call) \
  (::headroom::cuda::detail::report_cuda_failure((call), #call, __FILE__, __LINE__))

/// Checks for an error left by an earlier asynchronous launch (e.g. right after `kernel<<<...>>>`).
#define HEADROOM_CUDA_CHECK_LAST() HEADROOM_CUDA_TRY(::cudaGetLastError())
