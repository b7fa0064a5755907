// SPDX-License-Identifier: Apache-2.0
// Compiled by nvcc against headroom::cuda and headroom::nccl; linked, not run in CI.
#include <cuda/std/span>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

#include <headroom/core/communicator.hpp>
#include <headroom/version.hpp>

int host_sum_with_cccl(int n);  // host_cccl.cpp: CCCL from a host compiler

__global__ void iota(cuda::std::span<int> out) {
  auto const i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < out.size()) out[i] = static_cast<int>(i);
}

int main() {
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  std::printf("headroom %s consumer (cuda+nccl): NCCL %d, host CCCL sum %d\n", HEADROOM_VERSION_STRING,
              nccl_version, host_sum_with_cccl(4));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 0;
  int* p = nullptr;
  if (cudaMalloc(&p, 64 * sizeof(int)) != cudaSuccess) return 1;
  iota<<<1, 64>>>(cuda::std::span<int>(p, 64));
  bool const ok = cudaDeviceSynchronize() == cudaSuccess;
  cudaFree(p);
  return ok ? 0 : 1;
}
