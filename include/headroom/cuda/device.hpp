// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Device selection helpers: the current device, the number of devices, and an RAII guard that
// makes a device current for a scope and restores the previous one.
#include <cuda_runtime_api.h>

#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"

namespace headroom::cuda {

[[nodiscard]] inline int device_count() {
  int n = 0;
  cudaError_t const status = cudaGetDeviceCount(&n);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  HEADROOM_CUDA_TRY(status);
  return n;
}

[[nodiscard]] inline int current_device() {
  int d = 0;
  HEADROOM_CUDA_TRY(cudaGetDevice(&d));
  return d;
}

/// Throws invalid_argument unless `device` is an ordinal of this process's devices.
inline void require_device(int device, char const* what) {
  int const n = device_count();
  expects(device >= 0 && device < n, what, ": device ", device, " out of range, expected [0, ", n, ")");
}

/// Makes `device` current until the end of the scope; restores the previous device after.
class scoped_device {
 public:
  explicit scoped_device(int device) : previous_(current_device()) {
    if (device != previous_) {
      require_device(device, "cuda::scoped_device");
      HEADROOM_CUDA_TRY(cudaSetDevice(device));
    }
  }
  scoped_device(scoped_device const&) = delete;
  scoped_device& operator=(scoped_device const&) = delete;
  ~scoped_device() {
    int d = previous_;
    if (cudaGetDevice(&d) == cudaSuccess && d != previous_) HEADROOM_CUDA_TRY_NOTHROW(cudaSetDevice(previous_));
  }

 private:
  int previous_;
};

}  // namespace headroom::cuda
