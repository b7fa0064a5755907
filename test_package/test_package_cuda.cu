// SPDX-License-Identifier: Apache-2.0
// Compiled and linked only: proves headroom::cuda brings the CUDA runtime and CCCL.
#include <cuda/std/span>
#include <cuda_runtime.h>

#include <cstdio>

#include <headroom/core/communicator.hpp>
#include <headroom/version.hpp>

__global__ void fill(cuda::std::span<int> out) {
  auto const i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < out.size()) out[i] = static_cast<int>(i);
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("headroom %s: no GPU, nothing to run\n", HEADROOM_VERSION_STRING);
    return 0;
  }
  int* p = nullptr;
  if (cudaMalloc(&p, 32 * sizeof(int)) != cudaSuccess) return 1;
  fill<<<1, 32>>>(cuda::std::span<int>(p, 32));
  bool const ok = cudaDeviceSynchronize() == cudaSuccess;
  cudaFree(p);
  return ok ? 0 : 1;
}
