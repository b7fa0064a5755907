// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
#include <doctest/doctest.h>

// Asynchronous collectives over guarded device buffers on 2 GPUs (NCCL, one thread per GPU).
// The producer of each input is a kernel that writes only after a delay, so a collective that
// did not wait for the caller's stream would reduce the poison left in the input.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <random>
#include <type_traits>
#include <vector>

#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
#include "headroom/lifetime/work.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace {

constexpr int ranks = 2;
constexpr std::uint64_t producer_delay_ns = 50'000'000;

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits, then copies: a slow producer (or consumer) on a stream.
template <class T>
__global__ void delayed_copy(T const* src, T* dst, std::size_t n, std::uint64_t delay_ns) {
  std::uint64_t const start = global_ns();
  while (global_ns() - start < delay_ns) __nanosleep(1000);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// bf16 keeps 8 significant bits. Its values are k/16 with |k| <= 127 (7 bits), so every input is
// exact and so is a 2-rank sum (|k| <= 254, 8 bits): the result can be compared exactly. (Values
// k/64 with |k| up to 1000 were neither: 10-bit inputs were rounded on conversion, and 39% of the
// sums rounded again in NCCL's bf16 add, so an exact float sum was the wrong reference.)
template <class T>
std::vector<T> rank_values(int rank, std::size_t n) {
  std::mt19937 rng(777u + static_cast<unsigned>(rank));
  std::uniform_int_distribution<int> dist(-1000, 1000);
  std::uniform_int_distribution<int> small(-127, 127);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      x = __float2bfloat16(static_cast<float>(small(rng)) / 16.0f);
    else
      x = static_cast<T>(dist(rng)) / T{8};
  }
  return v;
}

// Device copy of `host`, written by a delayed kernel on `s` into guard `g`, which was poisoned
// first (0xFF bytes: NaN for floats, -1 for integers).
template <class T, class G>
void produce_slowly(G& g, std::vector<T> const& host, cuda::stream_view s) {
  T* staging = nullptr;
  HEADROOM_CUDA_TRY(cudaMallocAsync(&staging, host.size() * sizeof(T), s.get()));
  HEADROOM_CUDA_TRY(cudaMemsetAsync(g.data(), 0xFF, g.size(), s.get()));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(staging, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  delayed_copy<T><<<64, 256, 0, s.get()>>>(staging, static_cast<T*>(g.data()), host.size(), producer_delay_ns);
  HEADROOM_CUDA_CHECK_LAST();
  HEADROOM_CUDA_TRY(cudaFreeAsync(staging, s.get()));
}

template <class T, class G>
std::vector<T> fetch(G const& g, cuda::stream_view s) {
  std::vector<T> out(g.size() / sizeof(T));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(out.data(), g.data(), g.size(), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  return out;
}

template <class T, class G>
void poison(G& g, cuda::stream_view s) {
  HEADROOM_CUDA_TRY(cudaMemsetAsync(g.data(), 0xFF, g.size(), s.get()));
}

std::mutex check_mutex;  // doctest assertions from several threads
#define LOCKED_CHECK(...)                    \
  do {                                       \
    std::lock_guard lock_(check_mutex);      \
    CHECK(__VA_ARGS__);                      \
  } while (0)

}  // namespace

TEST_CASE("all_reduce_async (float, out of place): comm waits for the producer; the stash goes back at wait") {
  constexpr std::size_t n = 1 << 20;
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    cuda::async_resource pool(comm.device());
    cuda::stream compute, comm_stream;
    {
      device_guard<> in(pool, compute, n * sizeof(float), alignof(float));
      device_guard<> out(pool, compute, n * sizeof(float), alignof(float));
      poison<float>(out, compute);
      produce_slowly(in, rank_values<float>(comm.rank(), n), compute);
      auto work = all_reduce_async<float>(comm, std::move(in), out, reduce_op::sum, compute, comm_stream);
      LOCKED_CHECK(work.stashed() == 1);
      work.wait(compute);
      LOCKED_CHECK(work.stashed() == 0);
      auto got = fetch<float>(out, compute);
      auto a = rank_values<float>(0, n), b = rank_values<float>(1, n);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += got[i] != a[i] + b[i];
      LOCKED_CHECK(wrong == 0);
      LOCKED_CHECK(pool.used_bytes() == n * sizeof(float));  // only `out` is left
    }
    compute.synchronize();
    LOCKED_CHECK(pool.used_bytes() == 0);
  });
}

TEST_CASE("all_reduce_async (bf16, in place): the caller keeps the buffer and reads the result after wait") {
  constexpr std::size_t n = 3 << 18;
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    cuda::async_resource pool(comm.device());
    cuda::stream compute, comm_stream;
    device_guard<> buf(pool, compute, n * sizeof(__nv_bfloat16), alignof(__nv_bfloat16));
    produce_slowly(buf, rank_values<__nv_bfloat16>(comm.rank(), n), compute);
    auto work = all_reduce_async<__nv_bfloat16>(comm, buf, reduce_op::sum, compute, comm_stream);
    work.wait(compute);
    LOCKED_CHECK(buf.use_count() == 1);
    auto got = fetch<__nv_bfloat16>(buf, compute);
    auto a = rank_values<__nv_bfloat16>(0, n), b = rank_values<__nv_bfloat16>(1, n);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // Inputs and sums are exact in bf16 (see rank_values); poison (NaN) never compares equal.
      float const expected = __bfloat162float(a[i]) + __bfloat162float(b[i]);
      wrong += __bfloat162float(got[i]) != expected;
    }
    LOCKED_CHECK(wrong == 0);
  });
}

TEST_CASE("all_gather_async and reduce_scatter_async (int32) match host references") {
  constexpr std::size_t n = 1 << 16;
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    cuda::async_resource pool(comm.device());
    cuda::stream compute, comm_stream;
    int const me = comm.rank();
    {
      device_guard<> in(pool, compute, n * sizeof(std::int32_t), alignof(std::int32_t));
      device_guard<> out(pool, compute, ranks * n * sizeof(std::int32_t), alignof(std::int32_t));
      poison<std::int32_t>(out, compute);
      produce_slowly(in, rank_values<std::int32_t>(me, n), compute);
      auto w = all_gather_async<std::int32_t>(comm, std::move(in), out, compute, comm_stream);
      w.wait(compute);
      auto got = fetch<std::int32_t>(out, compute);
      std::vector<std::int32_t> expected;
      for (int r = 0; r < ranks; ++r) {
        auto v = rank_values<std::int32_t>(r, n);
        expected.insert(expected.end(), v.begin(), v.end());
      }
      LOCKED_CHECK(got == expected);
    }
    {
      device_guard<> in(pool, compute, ranks * n * sizeof(std::int32_t), alignof(std::int32_t));
      device_guard<> out(pool, compute, n * sizeof(std::int32_t), alignof(std::int32_t));
      poison<std::int32_t>(out, compute);
      produce_slowly(in, rank_values<std::int32_t>(me, ranks * n), compute);
      auto w = reduce_scatter_async<std::int32_t>(comm, std::move(in), out, reduce_op::max, compute, comm_stream);
      w.wait(compute);
      auto got = fetch<std::int32_t>(out, compute);
      std::vector<std::int32_t> expected(n);
      auto a = rank_values<std::int32_t>(0, ranks * n), b = rank_values<std::int32_t>(1, ranks * n);
      for (std::size_t i = 0; i < n; ++i) {
        std::size_t const k = static_cast<std::size_t>(me) * n + i;
        expected[i] = std::max(a[k], b[k]);
      }
      LOCKED_CHECK(got == expected);
    }
  });
}

TEST_CASE("deferred guards: the stash lands in the quarantine at wait and is freed once the host sees it done") {
  constexpr std::size_t n = 1 << 20;
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    cuda::async_resource pool(comm.device());
    // Declared before the reclaimer so that they outlive it: a quarantined block is freed later
    // (by poll or the reclaimer's destructor) on its owner stream, and `out`'s release at the end
    // of this scope records on comm_stream and quarantines the block owned by compute. Declared
    // after it, the streams were destroyed first and the destructor freed on a dead stream (SIGSEGV).
    cuda::stream compute, comm_stream;
    device_reclaimer<> quarantine(pool);
    device_deferred_guard<> in(quarantine, compute, n * sizeof(float), alignof(float));
    device_deferred_guard<> out(quarantine, compute, n * sizeof(float), alignof(float));
    produce_slowly(in, rank_values<float>(comm.rank(), n), compute);
    auto w = all_reduce_async<float>(comm, std::move(in), out, reduce_op::sum, compute, comm_stream);
    w.wait(compute);
    LOCKED_CHECK(quarantine.stats().quarantined_blocks == 1);
    compute.synchronize();
    comm_stream.synchronize();
    LOCKED_CHECK(quarantine.poll() == 1);
    auto got = fetch<float>(out, compute);
    auto a = rank_values<float>(0, n), b = rank_values<float>(1, n);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += got[i] != a[i] + b[i];
    LOCKED_CHECK(wrong == 0);
  });
}

TEST_CASE("bad local arguments throw on every rank before anything is issued") {
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    cuda::async_resource pool(comm.device());
    cuda::stream compute, comm_stream;
    device_guard<> odd(pool, compute, 6);
    bool threw = false;
    try {
      (void)all_reduce_async<float>(comm, odd, reduce_op::sum, compute, comm_stream);
    } catch (invalid_argument const&) {
      threw = true;
    }
    LOCKED_CHECK(threw);
    device_guard<> gone(pool, compute, 16);
    gone.release();
    device_guard<> out(pool, compute, 16);
    threw = false;
    try {
      (void)all_reduce_async<float>(comm, std::move(gone), out, reduce_op::sum, compute, comm_stream);
    } catch (logic_error const&) {
      threw = true;
    }
    LOCKED_CHECK(threw);
    comm.barrier(comm_stream);  // the communicator still works: nothing was half issued
    comm_stream.synchronize();
  });
}
