// SPDX-License-Identifier: Apache-2.0
// A host translation unit that includes CCCL: the include path comes from CCCL::CCCL, which
// headroom::cuda links (CUDA 13 keeps CCCL under include/cccl; old CMake does not add it).
#include <cuda/std/array>
#include <cuda/std/span>

int host_sum_with_cccl(int n) {
  cuda::std::array<int, 4> values{1, 2, 3, 4};
  int sum = 0;
  for (int v : cuda::std::span<int const>(values.data(), static_cast<cuda::std::size_t>(n))) sum += v;
  return sum;
}
