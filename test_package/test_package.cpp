// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <span>
#include <vector>

#include <headroom/host/thread_group.hpp>
#include <headroom/version.hpp>

int main() {
  long long total = 0;
  headroom::host::launch(2, [&](headroom::host::thread_communicator& comm) {
    long long const mine[1] = {comm.rank() + 1};
    long long sum[1] = {0};
    comm.all_reduce(std::span<long long const>(mine), std::span<long long>(sum), headroom::reduce_op::sum);
    if (comm.rank() == 0) total = sum[0];
  });
  std::printf("headroom %s: all_reduce over 2 ranks = %lld\n", HEADROOM_VERSION_STRING, total);
  return total == 3 ? 0 : 1;
}
