// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// launch_per_device's failure path: a rank throws while its peer waits inside an NCCL
// collective; the group is aborted, nobody hangs, and the failing rank's exception comes out.
// Kept in its own executable: if abort ever failed to unblock the peer, only this test times out.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
using headroom::reduce_op;

namespace {

std::vector<int> two_devices() {
  int const n = cu::device_count();
  REQUIRE_MESSAGE(n >= 2, "this test needs 2 CUDA devices (one rank per GPU), found ", n);
  return {0, 1};
}

}  // namespace

TEST_CASE("a rank that throws aborts the group; its exception is rethrown, not the peer's") {
  auto const devices = two_devices();
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(nc::launch_per_device(devices,
                                             [](nc::communicator& c) {
                                               cu::stream s;
                                               float* buf = nullptr;
                                               HEADROOM_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&buf), 1024 * sizeof(float), s.get()));
                                               HEADROOM_CUDA_TRY(cudaMemsetAsync(buf, 0, 1024 * sizeof(float), s.get()));
                                               std::span<float> data(buf, 1024);
                                               // Warm up: connections are set up by the first collective.
                                               c.all_reduce(data, data, reduce_op::sum, s);
                                               s.synchronize();
                                               if (c.rank() == 1) {
                                                 std::this_thread::sleep_for(std::chrono::milliseconds(300));
                                                 throw std::runtime_error("rank 1 failed on purpose");
                                               }
                                               // Rank 0 waits in this collective for a peer that never comes,
                                               // until the group is aborted.
                                               c.all_reduce(data, data, reduce_op::sum, s);
                                               cudaError_t const sync = cudaStreamSynchronize(s.get());
                                               static_cast<void>(sync);  // the aborted kernel may or may not report
                                               c.check_async();          // throws: the communicator was aborted
                                               FAIL("rank 0 continued after the abort");
                                             }),
                       "rank 1 failed on purpose", std::runtime_error);
  auto const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("aborted group returned after ", seconds, " s");
  CHECK(seconds < 60.0);
}

TEST_CASE("after an aborted group, a new group works") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [](nc::communicator& c) {
    cu::stream s;
    std::int32_t* p = nullptr;
    HEADROOM_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&p), sizeof(std::int32_t), s.get()));
    std::int32_t v = c.rank() + 5;
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(p, &v, sizeof v, cudaMemcpyHostToDevice, s.get()));
    c.all_reduce(std::span<std::int32_t const>(p, 1), std::span<std::int32_t>(p, 1), reduce_op::max, s);
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(&v, p, sizeof v, cudaMemcpyDeviceToHost, s.get()));
    HEADROOM_CUDA_TRY(cudaFreeAsync(p, s.get()));
    s.synchronize();
    CHECK(v == 6);
  });
}

TEST_CASE("abort() by hand: later calls throw group_aborted without reaching NCCL") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [](nc::communicator& c) {
    c.barrier(cu::stream());  // a temporary stream: fine for enqueueing
    cudaDeviceSynchronize();
    c.abort();
    CHECK(c.aborted());
    c.abort();  // idempotent
    cu::stream s;
    CHECK_THROWS_WITH_AS(c.barrier(s), doctest::Contains("was aborted"), headroom::group_aborted);
    CHECK_THROWS_AS(c.check_async(), headroom::group_aborted);
  });
}
