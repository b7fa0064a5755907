// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// One GPU: pool::graph_capture. A step over the pool (acquire on a gather stream, fill, compute
// on the origin stream, release there) is captured and replayed bit-equal to the same step run
// eagerly; misuse inside a real capture (an upstream acquire, a lease left held) throws a
// sentence and leaves the stream out of capture and the pool usable.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/device_vector.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/graph.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/pool.hpp"
#include "headroom/pool/cuda/capture.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"

using namespace headroom;
using namespace headroom::pool;
using headroom_test::device_vector;
using headroom_test::same_bytes;

namespace {

__global__ void copy_into(float* slot, float const* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) slot[i] = src[i];
}
// out[i] = slot[i] * slot[i] - 3 * slot[i]: any stale or raced slot byte changes the result.
__global__ void compute(float const* slot, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = slot[i] * slot[i] - 3.0f * slot[i];
}

constexpr std::size_t units = 6;
constexpr std::size_t elements = 1 << 16;

workload floats(bool odd_unit) {
  workload w{"capture", {}, {}};
  for (std::size_t u = 0; u < units; ++u) w.units.push_back({"u" + std::to_string(u), {elements_of(dtype::f32, elements)}});
  if (odd_unit) w.units.push_back({"odd", {elements_of(dtype::f32, 3 * elements)}});  // a shape of its own
  return w;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

void require_gpu() { REQUIRE_MESSAGE(cuda::device_count() >= 1, "this test needs a CUDA device"); }

bool capturing(cuda::stream_view s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HEADROOM_CUDA_TRY(cudaStreamIsCapturing(s.get(), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

TEST_CASE("graph_capture: a pool step captured and replayed is bit-equal to the eager step") {
  require_gpu();
  auto const w = floats(false);
  auto const plan = make_plan<pool::max>(w);
  cuda::stream home, origin, ag;
  cuda_unit_pool<> pool(plan, cuda::device_resource{}, home.view());
  std::mt19937 gen(std::random_device{}());
  std::vector<device_vector<float>> src, out;
  for (std::size_t u = 0; u < units; ++u) {
    src.emplace_back(elements);
    out.emplace_back(elements);
  }
  cuda::event fork, gathered, join;
  auto step = [&] {
    fork.record(origin.view());
    fork.wait_on(ag.view());
    for (std::size_t u = 0; u < units; ++u) {
      auto l = pool.acquire(u, ag.view());
      copy_into<<<64, 256, 0, ag.get()>>>(l.view<float>(0).data(), src[u].data(), elements);
      gathered.record(ag.view());
      gathered.wait_on(origin.view());
      compute<<<64, 256, 0, origin.get()>>>(l.view<float>(0).data(), out[u].data(), elements);
      pool.release(l, origin.view());  // the next acquire on ag waits for this (eagerly and in the graph)
    }
    join.record(ag.view());
    join.wait_on(origin.view());
  };
  auto upload = [&](std::uint32_t round) {
    std::mt19937 g(round);
    for (auto& s : src) s.upload(random_floats(elements, g));
    for (auto& o : out) o.fill_bytes(0xAB);
  };
  auto results = [&] {
    std::vector<std::vector<float>> r;
    for (auto const& o : out) r.push_back(o.download());
    return r;
  };

  upload(0);
  step();  // eager warm-up pins the groups
  origin.synchronize();
  pool::graph_capture capture(pool, origin.view());
  step();
  CHECK(pool.stats().moves == 0);
  cuda::graph graph = capture.end();
  CHECK_FALSE(capturing(origin.view()));
  CHECK(pool.pending_release_events() == 0);  // the capture's events are forgotten
  CHECK(graph.nodes() >= 2 * units);

  for (std::uint32_t round = 1; round <= 3; ++round) {
    upload(round);
    step();  // eager reference on the same inputs
    origin.synchronize();
    auto const eager = results();
    for (auto& o : out) o.fill_bytes(0xAB);
    graph.launch(origin.view());
    origin.synchronize();
    auto const replayed = results();
    for (std::size_t u = 0; u < units; ++u) CHECK_MESSAGE(same_bytes(eager[u], replayed[u]), "round ", round, " unit ", u);
  }
  CHECK(pool.stats().slots_in_use == 0);
}

TEST_CASE("graph_capture: an upstream acquire inside a real capture throws before CUDA sees it; the stream leaves capture") {
  require_gpu();
  auto w = floats(true);
  auto plan = make_plan<pool::fixed>(w);  // the odd unit is left out: served by the upstream (dynamic)
  REQUIRE(plan.pooled.back() == 0);
  cuda::stream home, origin;
  cuda_unit_pool<> pool(plan, cuda::device_resource{}, home.view());
  {
    pool::graph_capture capture(pool, origin.view());
    CHECK(capturing(origin.view()));
    try {
      (void)pool.acquire(units, origin.view());
      FAIL("the acquire should throw");
    } catch (logic_error const& e) {
      CHECK(std::string(e.what()).find("outside the arena") != std::string::npos);
      CHECK(std::string(e.what()).find("inside a capture scope") != std::string::npos);
    }
  }  // the exception left the capture: ended, discarded
  CHECK_FALSE(capturing(origin.view()));
  CHECK(cudaGetLastError() == cudaSuccess);
  auto l = pool.acquire(units, origin.view());  // eagerly: allowed (and synchronising, as documented)
  pool.release(l, origin.view());
  origin.synchronize();
}

TEST_CASE("graph_capture: a lease left held makes end() throw; the stream is out of capture, the pool usable") {
  require_gpu();
  auto const plan = make_plan<pool::max>(floats(false));
  cuda::stream home, origin;
  cuda_unit_pool<> pool(plan, cuda::device_resource{}, home.view());
  device_vector<float> src(elements);
  cuda_unit_pool<>::lease kept;
  {
    pool::graph_capture capture(pool, origin.view());
    kept = pool.acquire(3, origin.view());
    copy_into<<<64, 256, 0, origin.get()>>>(kept.view<float>(0).data(), src.data(), elements);
    try {
      (void)capture.end();
      FAIL("end() should throw");
    } catch (logic_error const& e) {
      CHECK(std::string(e.what()).find("unit 3 'u3' (1 lease(s) held, acquired inside, so expected 0)") != std::string::npos);
    }
    CHECK_FALSE(capturing(origin.view()));
  }
  pool.release(kept, origin.view());
  pool::capture_scope again(pool);  // closed: a new scope opens
  again.end();
  origin.synchronize();
}
