// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// One GPU: stream-ordered reuse across an all-gather stream and a compute stream, no host
// blocking, fallback buffers from a stream-ordered upstream, and a CUDA graph that captures
// fill + compute on leased slots and replays at stable addresses with correct results.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"
#include "headroom/pool/interval.hpp"

using namespace headroom;
using namespace headroom::pool;

namespace {

// "All-gather" stand-in: slot[i] = src[i] after a delay, so a missing wait would let it
// overwrite a slot the compute stream is still reading.
__global__ void fill_slot(float* slot, float const* src, std::size_t n, unsigned delay_ns) {
  if (delay_ns > 0 && threadIdx.x == 0 && blockIdx.x == 0) __nanosleep(delay_ns);
  __syncthreads();
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) slot[i] = src[i];
}

// "Compute": out[i] = 2 * slot[i] + 1, slowly, reading the slot twice (before and after a sleep)
// so that a concurrent overwrite of the slot shows up as a wrong result.
__global__ void compute_slot(float const* slot, float* out, std::size_t n, unsigned delay_ns) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float const a = slot[i];
    if (delay_ns > 0) __nanosleep(delay_ns);
    float const b = slot[i];
    out[i] = a == b ? 2.0f * a + 1.0f : -1.0e30f;
  }
}

__device__ unsigned long long global_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void sleep_for(unsigned long long ns) {
  unsigned long long const start = global_ns();
  while (global_ns() - start < ns) __nanosleep(10000);
}

// Sleeps `ns`, then writes `value` to slot[0]: a late writer that an unordered reuse would race.
__global__ void sleep_then_write(float* slot, float value, unsigned long long ns) {
  unsigned long long const start = global_ns();
  while (global_ns() - start < ns) __nanosleep(10000);
  slot[0] = value;
}
__global__ void write_value(float* slot, float value) { slot[0] = value; }

struct device_buffer {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count) : n(count) { HEADROOM_CUDA_TRY(cudaMalloc(&p, n * sizeof(float))); }
  device_buffer(device_buffer&& o) noexcept : p(std::exchange(o.p, nullptr)), n(o.n) {}
  device_buffer(device_buffer const&) = delete;
  ~device_buffer() {
    if (p) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p));
  }
  void upload(std::vector<float> const& h) {
    HEADROOM_CUDA_TRY(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());  // pageable copies may return before the DMA lands
  }
  std::vector<float> download() const {
    std::vector<float> h(n);
    HEADROOM_CUDA_TRY(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() {  // legacy-stream memset: wait so it cannot land after the work under test
    HEADROOM_CUDA_TRY(cudaMemset(p, 0xFF, n * sizeof(float)));
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }  // NaN pattern
};

// Hybrid miniature: units of different sizes (Mamba-, MLP-, attention-like), f32 buckets.
workload mini_hybrid() {
  workload w{"mini-hybrid", {}, {}};
  std::uint64_t const sizes[] = {40000, 65536, 12000, 40000, 65536, 40000, 12000, 65536};
  for (std::size_t u = 0; u < std::size(sizes); ++u)
    w.units.push_back({"layer." + std::to_string(u), {elements_of(dtype::f32, sizes[u])}});
  return w;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> d(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// The plans the CUDA tests run on: Megatron's MaxPool, and the interval planner for training
// and forward-only orders with one unit prefetched (N = 2).
struct max_plan {
  static plan make(workload const& w) { return make_plan<pool::max>(w); }
};
struct interval_plan {
  static plan make(workload const& w) {
    return make_interval_plan(w, {training_order(w), evaluation_order(w)}, {.resident = 2});
  }
};

void require_gpu() {
  int const n = cuda::device_count();
  REQUIRE_MESSAGE(n >= 1, "this test needs a CUDA device, found ", n);
}

}  // namespace

template <class Order, class Plan>
struct setup {
  using order = Order;
  using plan_kind = Plan;
};

TEST_CASE_TEMPLATE("two streams, two buffers, eight units: reuse waits on the device and results are exact", Setup,
                   setup<record_if_cross_stream, max_plan>, setup<record_at_release, max_plan>,
                   setup<record_at_reuse, max_plan>, setup<record_if_cross_stream, interval_plan>,
                   setup<record_at_release, interval_plan>, setup<record_at_reuse, interval_plan>) {
  using pool_type = cuda_unit_pool<cuda::device_resource, strict, dynamic, typename Setup::order>;
  require_gpu();
  auto const w = mini_hybrid();
  auto const plan = Setup::plan_kind::make(w);
  cuda::stream home, ag, compute;
  std::mt19937 gen(std::random_device{}());
  std::vector<device_buffer> src, out;
  std::vector<std::vector<float>> host_src;
  for (auto const& u : w.units) {
    std::size_t const n = u.buckets[0].bytes / sizeof(float);
    host_src.push_back(random_floats(n, gen));
    src.emplace_back(n).upload(host_src.back());
    out.emplace_back(n).poison();
  }
  cuda::event gathered;
  {
    pool_type pool(plan, cuda::device_resource{}, home.view());
    HEADROOM_CUDA_TRY(cudaMemset(pool.arena(), 0xFF, pool.arena_bytes()));
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    std::vector<typename pool_type::lease> held(w.units.size());
    // Forward with one unit prefetched: acquire u+1 on ag while u computes on compute.
    held[0] = pool.acquire(0, ag.view());
    // Fast fills, slow compute: without the device-side wait, the fill of unit u+2 would
    // overwrite unit u's slot while compute still reads it (compute_slot reads twice).
    fill_slot<<<64, 256, 0, ag.get()>>>(held[0].template view<float>(0).data(), src[0].p, src[0].n, 0);
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      gathered.record(ag.view());
      gathered.wait_on(compute.view());
      if (u + 1 < w.units.size()) {
        held[u + 1] = pool.acquire(u + 1, ag.view());
        fill_slot<<<64, 256, 0, ag.get()>>>(held[u + 1].template view<float>(0).data(), src[u + 1].p, src[u + 1].n, 0);
      }
      compute_slot<<<64, 256, 0, compute.get()>>>(held[u].template view<float>(0).data(), out[u].p, out[u].n, 20000);
      HEADROOM_CUDA_CHECK_LAST();
      pool.release(held[u], compute.view());
    }
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    CHECK(pool.stats().cross_stream_waits == w.units.size() - 2);  // every acquire after the first two
    CHECK(pool.stats().slots_in_use_peak == 2);
    CHECK(pool.stats().off_trace_fallbacks == 0);
    CHECK(pool.stats().moves == 0);
  }
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    auto const got = out[u].download();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != 2.0f * host_src[u][i] + 1.0f;
    CHECK_MESSAGE(bad == 0, "unit ", u, ": ", bad, " of ", got.size(), " elements wrong");
  }
}

TEST_CASE("acquire and release never block the host") {
  require_gpu();
  auto const plan = make_plan<pool::max>(mini_hybrid());
  cuda::stream home, a, b;
  cuda_unit_pool<> pool(plan, cuda::device_resource{}, home.view());
  auto l0 = pool.acquire(0, a.view());
  auto l1 = pool.acquire(1, a.view());
  sleep_for<<<1, 1, 0, b.get()>>>(500'000'000ull);  // 0.5 s
  HEADROOM_CUDA_CHECK_LAST();
  pool.release(l0, b.view());      // event after the spin
  auto l3 = pool.acquire(3, a.view());  // reuses l0's slot: a waits for b on the device
  CHECK(l3.slot(0) == 0);
  CHECK_FALSE(b.ready());  // the host got here while b still spins
  CHECK(pool.stats().cross_stream_waits == 1);
  pool.release(l1, a.view());
  pool.release(l3, a.view());
  a.synchronize();  // a waited for b
  CHECK(b.ready());
}

TEST_CASE("record_if_cross_stream: a slot acquired and released on one stream, reused on another, is ordered on the device") {
  require_gpu();
  auto const plan = make_plan<pool::max>(mini_hybrid());
  cuda::stream home, a, b;
  cuda_unit_pool<> pool(plan, cuda::device_resource{}, home.view());
  auto l0 = pool.acquire(0, b.view());
  auto l1 = pool.acquire(1, a.view());
  float* const slot = l0.view<float>(0).data();
  sleep_then_write<<<1, 1, 0, b.get()>>>(slot, 1.0f, 200'000'000ull);  // 0.2 s, then writes 1
  HEADROOM_CUDA_CHECK_LAST();
  pool.release(l0, b.view());  // acquired and released on b: no event recorded
  CHECK(pool.stats().release_events == 0);
  auto l2 = pool.acquire(0, a.view());  // the same slot on a: records on b now, a waits for it
  CHECK(l2.view<float>(0).data() == slot);
  CHECK(pool.stats().reuse_events == 1);
  CHECK(pool.stats().cross_stream_waits == 1);
  CHECK_FALSE(b.ready());  // the host did not block
  write_value<<<1, 1, 0, a.get()>>>(slot, 2.0f);  // unordered, it would land first and be overwritten
  HEADROOM_CUDA_CHECK_LAST();
  a.synchronize();
  float got = 0;
  HEADROOM_CUDA_TRY(cudaMemcpy(&got, slot, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(got == 2.0f);
  pool.release(l2, a.view());
  pool.release(l1, a.view());
}

TEST_CASE("fallback buckets from a stream-ordered upstream: dynamic and persistent") {
  require_gpu();
  workload w{"fallback", {{"a", {elements_of(dtype::f32, 1024)}}, {"b", {elements_of(dtype::f32, 1024)}},
                          {"odd", {elements_of(dtype::f32, 3000)}}},
             {elements_of(dtype::f32, 5000)}};
  auto const plan = make_plan<pool::fixed>(w);
  cuda::stream s;
  auto const upstream = cuda::async_resource(cuda::current_device());
  std::mt19937 gen(std::random_device{}());
  auto const data = random_floats(3000, gen);
  {
    cuda_unit_pool<cuda::async_resource, strict, dynamic> pool(plan, upstream, s.view());
    auto l = pool.acquire(2, s.view());
    CHECK(l.slot(0) == SIZE_MAX);
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(l.bytes(0).data(), data.data(), 3000 * sizeof(float), cudaMemcpyHostToDevice, s.get()));
    std::vector<float> back(3000, 0.0f);
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(back.data(), l.bytes(0).data(), 3000 * sizeof(float), cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    CHECK(back == data);
    CHECK(pool.stats().fallback_bytes_in_use == 12000);
    pool.release(l, s.view());
    CHECK(pool.stats().fallback_bytes_in_use == 0);
    auto nu = pool.acquire_non_unit(0, s.view());
    CHECK(nu.bytes(0).size() == 20000);
    pool.release(nu, s.view());
    s.synchronize();
  }
  {
    cuda_unit_pool<cuda::async_resource, strict, persistent> pool(plan, upstream, s.view());
    CHECK(pool.stats().persistent_bytes == 12000 + 20000);
    auto l = pool.acquire(2, s.view());
    std::byte* const first = l.bytes(0).data();
    pool.release(l, s.view());
    l = pool.acquire(2, s.view());
    CHECK(l.bytes(0).data() == first);
    pool.release(l, s.view());
    s.synchronize();
  }
}

TEST_CASE_TEMPLATE("CUDA graph: capture fill + compute on leased slots, replay at stable addresses", Plan, max_plan,
                   interval_plan) {
  require_gpu();
  auto const w = mini_hybrid();
  auto const plan = Plan::make(w);
  cuda::stream origin, ag, home;
  std::mt19937 gen(std::random_device{}());
  std::vector<device_buffer> src, out;
  for (auto const& u : w.units) {
    std::size_t const n = u.buckets[0].bytes / sizeof(float);
    src.emplace_back(n).upload(random_floats(n, gen));  // the warm-up reads it (initcheck)
    out.emplace_back(n).poison();
  }
  cuda_unit_pool<> pool(plan, cuda::device_resource{}, home.view());
  cuda::event fork, gathered, join;

  // One step: the same code runs eagerly (warm-up, pins the groups) and under capture.
  std::vector<std::byte*> addresses(w.units.size());
  auto step = [&] {
    fork.record(origin.view());
    fork.wait_on(ag.view());
    std::vector<cuda_unit_pool<>::lease> held(w.units.size());
    held[0] = pool.acquire(0, ag.view());
    fill_slot<<<64, 256, 0, ag.get()>>>(held[0].view<float>(0).data(), src[0].p, src[0].n, 0);
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      gathered.record(ag.view());
      gathered.wait_on(origin.view());
      if (u + 1 < w.units.size()) {
        held[u + 1] = pool.acquire(u + 1, ag.view());
        fill_slot<<<64, 256, 0, ag.get()>>>(held[u + 1].view<float>(0).data(), src[u + 1].p, src[u + 1].n, 0);
      }
      addresses[u] = held[u].bytes(0).data();
      compute_slot<<<64, 256, 0, origin.get()>>>(held[u].view<float>(0).data(), out[u].p, out[u].n, 0);
      pool.release(held[u], origin.view());
    }
    join.record(ag.view());  // ag rejoins the origin stream
    join.wait_on(origin.view());
  };

  step();  // eager warm-up
  origin.synchronize();
  ag.synchronize();
  auto const eager_addresses = addresses;
  pool.clear_release_events();  // no wait inside the capture on an event recorded outside it

  cudaGraph_t graph = nullptr;
  HEADROOM_CUDA_TRY(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal));
  step();
  HEADROOM_CUDA_TRY(cudaStreamEndCapture(origin.get(), &graph));
  pool.clear_release_events();  // events recorded in the capture must not be waited on outside it
  cudaGraphExec_t exec = nullptr;
  HEADROOM_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));

  CHECK(addresses == eager_addresses);  // strict pins: captured addresses = warm-up addresses
  CHECK(pool.stats().moves == 0);
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    if (plan.resident == 0) {
      // MaxPool, one f32 bucket per unit: one shape; one unit prefetched, so units alternate
      // between the two groups, at the planned offsets.
      REQUIRE(plan.shapes.size() == 1);
      auto const slot = plan.slot_index(static_cast<std::uint32_t>(u % 2), 0);
      CHECK(addresses[u] == pool.arena() + plan.slots[slot].offset);
    } else {  // interval: every unit at its own planned offset
      CHECK(addresses[u] == pool.arena() + plan.slots[plan.bucket_shape[u][0]].offset);
    }
  }
  CHECK(pool.stats().off_trace_fallbacks == 0);

  for (int replay = 0; replay < 3; ++replay) {
    std::vector<std::vector<float>> host_src;
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      host_src.push_back(random_floats(src[u].n, gen));
      src[u].upload(host_src.back());
      out[u].poison();
    }
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, origin.get()));
    origin.synchronize();
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      auto const got = out[u].download();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != 2.0f * host_src[u][i] + 1.0f;
      CHECK_MESSAGE(bad == 0, "replay ", replay, " unit ", u, ": ", bad, " wrong");
    }
  }
  HEADROOM_CUDA_TRY(cudaGraphExecDestroy(exec));
  HEADROOM_CUDA_TRY(cudaGraphDestroy(graph));
}

TEST_CASE("the CUDA pool rejects bad input like the host pool") {
  require_gpu();
  cuda::stream s;
  cuda_unit_pool<> pool(make_plan<pool::max>(mini_hybrid()), cuda::device_resource{}, s.view());
  CHECK_THROWS_AS((void)pool.acquire(8, s.view()), invalid_argument);
  auto a = pool.acquire(0, s.view());
  auto b = pool.acquire(1, s.view());
  CHECK_THROWS_AS((void)pool.acquire(2, s.view()), capacity_error);
  pool.release(a, s.view());
  CHECK_THROWS_AS(pool.release(a, s.view()), logic_error);
  pool.release(b, s.view());
  s.synchronize();
}
