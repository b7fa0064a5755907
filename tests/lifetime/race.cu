// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The race a stream-ordered release must not lose: a long kernel on the comm stream reads the
// guarded buffer; the owner releases it; the next allocation on the owner stream gets the same
// memory and overwrites it; the reader must still see the original values.
//
// Run plainly and under compute-sanitizer (the kernels use no shared memory and no barriers, so
// racecheck and synccheck must report nothing):
//   test_lifetime_race
//   compute-sanitizer --tool racecheck --error-exitcode 1 test_lifetime_race
//   compute-sanitizer --tool synccheck --error-exitcode 1 test_lifetime_race
// Checks about timing (the host did not wait; the control case, a free without the wait, sees
// the overwrite) need the reader to still run when the host releases. A tool that serialises
// kernel launches makes the reader finish first: the scenario detects that (`overlapping`) and
// then checks only what holds in any order, saying so in a message.
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "common/device_vector.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
#include "unordered.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace {

constexpr std::size_t n_values = std::size_t{1} << 22;  // 16 MiB of int32
constexpr std::size_t n_bytes = n_values * sizeof(std::int32_t);
constexpr std::uint64_t reader_delay_ns = 200'000'000;  // the reader starts reading after 200 ms
constexpr std::int32_t poison = -0x5a5a5a5a;

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits `delay_ns`, then copies src to dst: a reader that is still in flight when the host
// releases the buffer.
__global__ void delayed_copy(std::int32_t const* src, std::int32_t* dst, std::size_t n, std::uint64_t delay_ns) {
  std::uint64_t const start = global_ns();
  while (global_ns() - start < delay_ns) __nanosleep(1000);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void overwrite(std::int32_t* p, std::size_t n, std::int32_t value) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = value;
}

std::vector<std::int32_t> random_values(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(-1'000'000'000, 1'000'000'000);
  std::vector<std::int32_t> v(n_values);
  for (auto& x : v) x = dist(rng);
  return v;
}

void require_gpu() { REQUIRE_MESSAGE(cuda::device_count() >= 1, "test_lifetime_race needs a CUDA device"); }

using lifetime_test::unordered;

struct outcome {
  bool overlapping = false;  // the reader was still running when the host released the guard
  bool same_block = false;
  bool reader_running_after_release = false;  // the host did not wait for the reader
  bool comm_idle_after_release = false;       // the host did wait (blocking)
  std::size_t mismatches = 0;
  std::size_t overwritten = 0;
};

// Runs the scenario with guards of type G over `res`; `pool` is the device pool underneath.
template <class G, class Resource>
outcome run_scenario(Resource& res, cuda::stream_view compute, cuda::stream_view comm, std::uint32_t seed) {
  auto const expected = random_values(seed);
  outcome out;
  // Outside the pool, so it never aliases the guarded block.
  headroom_test::device_vector<std::int32_t> seen(std::vector<std::int32_t>(n_values, poison));
  {
    G g(res, compute, n_bytes, alignof(std::int32_t));
    auto* data = static_cast<std::int32_t*>(g.data());
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(data, expected.data(), n_bytes, cudaMemcpyHostToDevice, compute.get()));
    cuda::event produced;
    produced.record(compute);
    produced.wait_on(comm);
    delayed_copy<<<132, 256, 0, comm.get()>>>(data, seen.data(), n_values, reader_delay_ns);
    HEADROOM_CUDA_CHECK_LAST();
    g.use_on(comm);
    out.overlapping = !comm.ready();
    g.release();
    out.reader_running_after_release = !comm.ready();
    out.comm_idle_after_release = !out.reader_running_after_release;

    G next(res, compute, n_bytes, alignof(std::int32_t));
    out.same_block = next.data() == static_cast<void*>(data);
    overwrite<<<132, 256, 0, compute.get()>>>(static_cast<std::int32_t*>(next.data()), n_values, poison);
    HEADROOM_CUDA_CHECK_LAST();
    compute.synchronize();
    comm.synchronize();
  }
  auto const got = seen.download();
  for (std::size_t i = 0; i < n_values; ++i) {
    out.mismatches += got[i] != expected[i];
    out.overwritten += got[i] == poison;
  }
  return out;
}

}  // namespace

TEST_CASE("stream_ordered: the next owner allocation reuses the block, yet the in-flight reader sees the original") {
  require_gpu();
  cuda::scoped_device on(0);
  cuda::async_resource pool(0);
  cuda::stream compute, comm;
  for (std::uint32_t seed : {11u, 12u}) {
    auto r = run_scenario<device_guard<stream_ordered>>(pool, compute, comm, seed);
    REQUIRE_MESSAGE(r.same_block, "the pool did not hand the released block back to the owner stream, so the "
                                  "scenario would not test anything");
    CHECK(r.mismatches == 0);
    if (r.overlapping)
      CHECK(r.reader_running_after_release);  // release() did not block the host
    else
      MESSAGE("kernel launches are serialised here (a sanitizer?): the no-host-wait check is skipped");
  }
}

TEST_CASE("blocking: the host waits for the reader, then the block is reused") {
  require_gpu();
  cuda::scoped_device on(0);
  cuda::async_resource pool(0);
  cuda::stream compute, comm;
  auto r = run_scenario<device_guard<blocking>>(pool, compute, comm, 13);
  CHECK(r.comm_idle_after_release);
  CHECK(r.same_block);
  CHECK(r.mismatches == 0);
}

TEST_CASE("deferred: the block stays in quarantine while the reader runs, so the next allocation takes new memory") {
  require_gpu();
  cuda::scoped_device on(0);
  cuda::async_resource pool(0);
  cuda::stream compute, comm;  // before the reclaimer: a quarantined block is freed on `compute`
  device_reclaimer<> quarantine(pool);
  auto r = run_scenario<device_deferred_guard<>>(quarantine, compute, comm, 14);
  CHECK(r.mismatches == 0);
  CHECK(quarantine.stats().blocks_deferred == 1);
  if (r.overlapping) {
    CHECK(r.reader_running_after_release);
    CHECK_FALSE(r.same_block);                          // still quarantined at the next allocation
    CHECK(quarantine.stats().quarantined_blocks == 1);  // nobody allocated since the reader finished
    CHECK(quarantine.poll() == 1);
  } else {
    MESSAGE("kernel launches are serialised here (a sanitizer?): the quarantine was polled free at once");
    quarantine.poll();
  }
  CHECK(quarantine.stats().quarantined_bytes == 0);
  compute.synchronize();
  CHECK(pool.used_bytes() == 0);
}

TEST_CASE("control: a free without the wait lets the owner overwrite the block under the reader") {
  require_gpu();
  cuda::scoped_device on(0);
  cuda::async_resource pool(0);
  cuda::stream compute, comm;
  auto r = run_scenario<device_guard<unordered>>(pool, compute, comm, 15);
  REQUIRE(r.same_block);
  if (r.overlapping) {
    CHECK(r.reader_running_after_release);
    CHECK(r.overwritten == n_values);  // the reader copied the overwrite, not the data
  } else {
    MESSAGE("kernel launches are serialised here (a sanitizer?): the reader finished before the free, so the "
            "control cannot show the race");
    CHECK(r.mismatches == 0);
  }
}

TEST_CASE("a use stream destroyed right after use_on still orders the release") {
  require_gpu();
  cuda::scoped_device on(0);
  cuda::async_resource pool(0);
  cuda::stream compute;
  auto const expected = random_values(16);
  headroom_test::device_vector<std::int32_t> seen(n_values, 0);
  {
    device_guard<> g(pool, compute, n_bytes, alignof(std::int32_t));
    auto* data = static_cast<std::int32_t*>(g.data());
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(data, expected.data(), n_bytes, cudaMemcpyHostToDevice, compute.get()));
    {
      cuda::stream comm;
      cuda::event produced;
      produced.record(compute);
      produced.wait_on(comm);
      delayed_copy<<<132, 256, 0, comm.get()>>>(data, seen.data(), n_values, reader_delay_ns / 2);
      HEADROOM_CUDA_CHECK_LAST();
      g.use_on(comm);
    }  // cudaStreamDestroy: the reader keeps running; the guard holds only its event
    g.release();
    device_guard<> next(pool, compute, n_bytes, alignof(std::int32_t));
    CHECK(next.data() == static_cast<void*>(data));
    overwrite<<<132, 256, 0, compute.get()>>>(static_cast<std::int32_t*>(next.data()), n_values, poison);
    HEADROOM_CUDA_CHECK_LAST();
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }
  CHECK(seen.download() == expected);
}

TEST_CASE("set_owner before destroying the owner stream: the release is ordered after both streams") {
  require_gpu();
  cuda::scoped_device on(0);
  cuda::async_resource pool(0);
  cuda::stream keeper;
  auto const expected = random_values(17);
  headroom_test::device_vector<std::int32_t> seen(n_values);
  void* block_address = nullptr;
  {
    std::optional<device_guard<>> g;
    {
      cuda::stream short_lived;
      g.emplace(pool, short_lived, n_bytes, alignof(std::int32_t));
      block_address = g->data();
      HEADROOM_CUDA_TRY(
          cudaMemcpyAsync(g->data(), expected.data(), n_bytes, cudaMemcpyHostToDevice, short_lived.get()));
      delayed_copy<<<132, 256, 0, short_lived.get()>>>(static_cast<std::int32_t const*>(g->data()), seen.data(), n_values,
                                                       reader_delay_ns / 2);
      HEADROOM_CUDA_CHECK_LAST();
      g->set_owner(keeper);  // the free moves to `keeper`, after short_lived's reader
      CHECK(g->use_count() == 1);
    }
    g->release();
    device_guard<> next(pool, keeper, n_bytes, alignof(std::int32_t));
    CHECK(next.data() == block_address);
    overwrite<<<132, 256, 0, keeper.get()>>>(static_cast<std::int32_t*>(next.data()), n_values, poison);
    HEADROOM_CUDA_CHECK_LAST();
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }
  CHECK(seen.download() == expected);
}
