// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cuda/std/span>
#include <cuda_runtime.h>

#include <string>
#include <vector>

// The CUDA-free core and the host substrate must compile under nvcc -std=c++20 as well.
#include "headroom/core/bytes.hpp"
#include "headroom/core/communicator.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/event.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/version.hpp"

namespace {

__global__ void affine(cuda::std::span<int> out, int a, int b) {
  auto const i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < out.size()) out[i] = a * static_cast<int>(i) + b;
}

void check_cuda(cudaError_t e, char const* what) {
  REQUIRE_MESSAGE(e == cudaSuccess, (std::string(what) + ": " + cudaGetErrorString(e)));
}

}  // namespace

TEST_CASE("core headers are usable from a .cu file") {
  static_assert(headroom::stream<headroom::host::inline_stream>);
  static_assert(headroom::communicator<headroom::host::thread_communicator>);
  CHECK(HEADROOM_VERSION_MAJOR == headroom::version.major);
  CHECK(headroom::size_of(headroom::dtype_v<float>) == 4);
}

TEST_CASE("a kernel writes the expected values") {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  REQUIRE_MESSAGE(devices >= 1, ("this test needs a GPU, found " + std::to_string(devices)));

  constexpr int n = 1000;
  cudaStream_t stream{};
  check_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  void* raw = nullptr;
  check_cuda(cudaMallocAsync(&raw, n * sizeof(int), stream), "cudaMallocAsync");
  cuda::std::span<int> out(static_cast<int*>(raw), n);
  affine<<<(n + 255) / 256, 256, 0, stream>>>(out, 3, -7);
  check_cuda(cudaGetLastError(), "kernel launch");
  std::vector<int> host(n);
  check_cuda(cudaMemcpyAsync(host.data(), raw, n * sizeof(int), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check_cuda(cudaFreeAsync(raw, stream), "cudaFreeAsync");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  for (int i = 0; i < n; ++i) {
    if (host[static_cast<std::size_t>(i)] != 3 * i - 7)
      FAIL_CHECK(("element " + std::to_string(i) + " is " + std::to_string(host[static_cast<std::size_t>(i)])));
  }
}
