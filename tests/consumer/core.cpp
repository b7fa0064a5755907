// SPDX-License-Identifier: Apache-2.0
// Uses only the CUDA-free core: builds and runs anywhere.
#include <cstdio>
#include <span>
#include <vector>

#include <headroom/core/communicator.hpp>
#include <headroom/core/dtype.hpp>
#include <headroom/host/thread_group.hpp>
#include <headroom/version.hpp>

int main() {
  std::vector<int> gathered;
  headroom::host::launch(3, [&](headroom::host::thread_communicator& comm) {
    int const mine[1] = {10 * comm.rank()};
    std::vector<int> all(3);
    comm.all_gather(std::span<int const>(mine), std::span<int>(all));
    if (comm.rank() == 1) gathered = all;
  });
  bool const ok = gathered == std::vector<int>{0, 10, 20} && headroom::size_of(headroom::dtype::bf16) == 2;
  std::printf("headroom %s consumer (core): %s\n", HEADROOM_VERSION_STRING, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
