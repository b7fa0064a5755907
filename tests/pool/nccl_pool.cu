// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
#include <doctest/doctest.h>

// Two GPUs, one thread each: the pool's arena registered once with NCCL (ncclMemAlloc arena, or
// cudaMalloc arena + ncclCommRegister); all-gathers write into leased slots on an all-gather
// stream while a compute stream consumes them; then the same step captured in a CUDA graph and
// replayed with new inputs. Results are checked against host references on random data with
// poisoned outputs.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/pool/cuda/nccl.hpp"
#include "headroom/pool/interval.hpp"

using namespace headroom;
using namespace headroom::pool;

namespace {

__global__ void affine(float const* in, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i] + 1.0f;
}

struct device_buffer {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count) : n(count) { HEADROOM_CUDA_TRY(cudaMalloc(&p, n * sizeof(float))); }
  device_buffer(device_buffer&& o) noexcept : p(std::exchange(o.p, nullptr)), n(o.n) {}
  device_buffer(device_buffer const&) = delete;
  ~device_buffer() {
    if (p) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p));
  }
  void upload(std::vector<float> const& h) { HEADROOM_CUDA_TRY(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice)); HEADROOM_CUDA_TRY(cudaDeviceSynchronize()); }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<float> h(n);
    HEADROOM_CUDA_TRY(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() {  // legacy-stream memset: wait so it cannot land after the work under test
    HEADROOM_CUDA_TRY(cudaMemset(p, 0xFF, n * sizeof(float)));
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }
};

// Hybrid miniature with an MoE-like unit of two buckets (non-expert + experts), f32 so that
// the all-gather is exact. Sizes are not multiples of the world size: the padding policy pads.
workload mini_hybrid() {
  auto f32 = [](std::uint64_t n) { return elements_of(dtype::f32, n); };
  return {"mini-hybrid",
          {{"layer.0 (M)", {f32(38745)}},
           {"layer.1 (E)", {f32(20302), f32(159645)}},
           {"layer.2 (M)", {f32(38745)}},
           {"layer.3 (*)", {f32(23399)}},
           {"layer.4 (E)", {f32(20302), f32(159645)}},
           {"layer.5 (M)", {f32(38745)}}},
          {}};
}

// Shard of rank r for (unit, bucket) in step `step`: every rank can compute every rank's shard.
std::vector<float> shard(std::uint64_t seed, int step, int rank, std::size_t unit, std::size_t bucket, std::size_t n) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32), static_cast<std::uint32_t>(step),
                    static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(unit), static_cast<std::uint32_t>(bucket)};
  std::mt19937 gen(seq);
  std::uniform_real_distribution<float> d(-1000.0f, 1000.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

struct rank_data {
  std::vector<std::vector<device_buffer>> shards;  // [unit][bucket], n / world elements
  std::vector<std::vector<device_buffer>> outs;    // [unit][bucket], n elements
};

rank_data make_buffers(plan const& p, int world) {
  rank_data d;
  for (std::size_t u = 0; u < p.unit_count(); ++u) {
    d.shards.emplace_back();
    d.outs.emplace_back();
    for (auto bytes : p.bucket_bytes[u]) {
      std::size_t const n = bytes / sizeof(float);
      d.shards.back().emplace_back(n / static_cast<std::size_t>(world));
      d.outs.back().emplace_back(n);
    }
  }
  return d;
}

void upload_shards(rank_data& d, std::uint64_t seed, int step, int rank) {
  for (std::size_t u = 0; u < d.shards.size(); ++u)
    for (std::size_t b = 0; b < d.shards[u].size(); ++b) {
      d.shards[u][b].upload(shard(seed, step, rank, u, b, d.shards[u][b].n));
      d.outs[u][b].poison();
    }
}

// Returns the number of wrong elements over all units: out must be 2 * (rank-major concat) + 1.
std::size_t count_wrong(rank_data const& d, std::uint64_t seed, int step, int world) {
  std::size_t bad = 0;
  for (std::size_t u = 0; u < d.outs.size(); ++u)
    for (std::size_t b = 0; b < d.outs[u].size(); ++b) {
      auto const got = d.outs[u][b].download();
      std::size_t const m = d.shards[u][b].n;
      for (int r = 0; r < world; ++r) {
        auto const want = shard(seed, step, r, u, b, m);
        for (std::size_t i = 0; i < m; ++i) bad += got[static_cast<std::size_t>(r) * m + i] != 2.0f * want[i] + 1.0f;
      }
    }
  return bad;
}

// One FSDP-style pass over the units (forward order, or backward), one unit prefetched:
// all-gather into the leased slots on `ag`, consume on `compute`, release on `compute`.
template <class Pool>
void pass(Pool& pool, nccl::communicator& comm, rank_data& d, cuda::stream_view ag, cuda::stream_view compute,
          cuda::event& gathered, bool backward, std::vector<std::byte*>* addresses = nullptr) {
  std::size_t const n = d.shards.size();
  auto unit_at = [&](std::size_t i) { return backward ? n - 1 - i : i; };
  std::vector<typename Pool::lease> held(n);
  auto gather = [&](std::size_t u) {
    held[u] = pool.acquire(u, ag);
    for (std::size_t b = 0; b < held[u].size(); ++b)
      comm.all_gather(std::span<float const>(d.shards[u][b].p, d.shards[u][b].n), held[u].template view<float>(b), ag);
  };
  gather(unit_at(0));
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const u = unit_at(i);
    gathered.record(ag);
    gathered.wait_on(compute);
    if (i + 1 < n) gather(unit_at(i + 1));
    for (std::size_t b = 0; b < held[u].size(); ++b) {
      auto const slot = held[u].template view<float>(b);
      if (addresses != nullptr) addresses->push_back(held[u].bytes(b).data());
      affine<<<128, 256, 0, compute.get()>>>(slot.data(), d.outs[u][b].p, d.outs[u][b].n);
    }
    HEADROOM_CUDA_CHECK_LAST();
    pool.release(held[u], compute);
  }
}

// MaxPool, or the interval planner for training and forward-only orders (N = 2); buckets padded
// to a multiple of world x 32 elements so that each splits into equal shards.
struct max_plan {
  static plan make(workload const& w, int world) {
    return make_plan<pool::max>(w, {}, pad_elements{static_cast<std::uint64_t>(world) * 32});
  }
};
struct interval_plan {
  static plan make(workload const& w, int world) {
    return make_interval_plan(w, {training_order(w), evaluation_order(w)}, {.resident = 2},
                              pad_elements{static_cast<std::uint64_t>(world) * 32});
  }
};

void require_two_gpus() {
  int const n = cuda::device_count();
  REQUIRE_MESSAGE(n >= 2, "this test needs 2 CUDA devices, found ", n);
}

template <class Upstream, class Plan = max_plan>
void all_gather_into_registered_slots(std::uint64_t seed) {
  nccl::launch_per_device(nccl::first_devices(2), [&](nccl::communicator& comm) {
    int const world = comm.size();
    int const rank = comm.rank();
    auto const plan = Plan::make(mini_hybrid(), world);
    cuda::stream home, ag, compute;
    cuda::event gathered;
    rank_data d = make_buffers(plan, world);
    {
      cuda_unit_pool<Upstream> pool(plan, Upstream{}, home.view());
      HEADROOM_CUDA_TRY(cudaMemset(pool.arena(), 0xFF, pool.arena_bytes()));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());  // the legacy-stream memset must land before the all-gathers
      auto registration = register_arena(comm, pool);  // once, for every slot
      REQUIRE(registration.active());
      CHECK(registration.size() == pool.arena_bytes());
      for (int step = 0; step < 2; ++step) {
        upload_shards(d, seed, step, rank);
        HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
        pass(pool, comm, d, ag.view(), compute.view(), gathered, step == 1);
        HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
        auto const bad = count_wrong(d, seed, step, world);
        CHECK_MESSAGE(bad == 0, "rank ", rank, " step ", step, ": ", bad, " wrong elements");
      }
      CHECK(pool.stats().slots_in_use == 0);
      CHECK(pool.stats().slots_in_use_peak <= pool.stats().slots_total);
      CHECK(pool.stats().cross_stream_waits > 0);
      CHECK(pool.stats().off_trace_fallbacks == 0);
      registration.reset();  // deregister before the arena is freed
    }
  });
}

}  // namespace

TEST_CASE("2 GPUs: all-gathers into leased slots of an ncclMemAlloc arena registered once") {
  require_two_gpus();
  all_gather_into_registered_slots<nccl::nccl_mem_resource>(std::random_device{}() * 0x9E3779B97F4A7C15ull);
}

TEST_CASE("2 GPUs: all-gathers into leased slots of a cudaMalloc arena registered once") {
  require_two_gpus();
  all_gather_into_registered_slots<cuda::device_resource>(std::random_device{}() * 0x9E3779B97F4A7C15ull + 1);
}

TEST_CASE("2 GPUs: all-gathers into an interval-planned ncclMemAlloc arena registered once") {
  require_two_gpus();
  all_gather_into_registered_slots<nccl::nccl_mem_resource, interval_plan>(std::random_device{}() *
                                                                           0x9E3779B97F4A7C15ull + 3);
}

TEST_CASE_TEMPLATE("2 GPUs: CUDA graph of all-gather + compute on leased slots replays at stable addresses", Plan,
                   max_plan, interval_plan) {
  require_two_gpus();
  std::uint64_t const seed = std::random_device{}() * 0x9E3779B97F4A7C15ull + 2;
  nccl::launch_per_device(nccl::first_devices(2), [&](nccl::communicator& comm) {
    int const world = comm.size();
    int const rank = comm.rank();
    auto const plan = Plan::make(mini_hybrid(), world);
    cuda::stream home, origin, ag;
    cuda::event fork, gathered, join;
    rank_data d = make_buffers(plan, world);
    cuda_unit_pool<nccl::nccl_mem_resource> pool(plan, {}, home.view());
    auto registration = register_arena(comm, pool);

    auto step = [&](std::vector<std::byte*>* addresses) {
      fork.record(origin.view());
      fork.wait_on(ag.view());
      pass(pool, comm, d, ag.view(), origin.view(), gathered, false, addresses);
      join.record(ag.view());
      join.wait_on(origin.view());
    };

    // Warm-up (eager) pins each bucket's group; the capture must take the same slots.
    std::vector<std::byte*> eager, captured;
    upload_shards(d, seed, 0, rank);
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    step(&eager);
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    CHECK(count_wrong(d, seed, 0, world) == 0);
    pool.clear_release_events();

    cudaGraph_t graph = nullptr;
    HEADROOM_CUDA_TRY(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal));
    step(&captured);
    HEADROOM_CUDA_TRY(cudaStreamEndCapture(origin.get(), &graph));
    pool.clear_release_events();
    cudaGraphExec_t exec = nullptr;
    HEADROOM_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(captured == eager);
    CHECK(pool.stats().moves == 0);
    CHECK(pool.stats().off_trace_fallbacks == 0);
    for (auto* a : captured) CHECK((a >= pool.arena() && a < pool.arena() + pool.arena_bytes()));

    for (int replay = 1; replay <= 3; ++replay) {
      upload_shards(d, seed, replay, rank);  // the graph reads the same shard buffers
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, origin.get()));
      origin.synchronize();
      auto const bad = count_wrong(d, seed, replay, world);
      CHECK_MESSAGE(bad == 0, "rank ", rank, " replay ", replay, ": ", bad, " wrong elements");
    }
    HEADROOM_CUDA_TRY(cudaGraphExecDestroy(exec));
    HEADROOM_CUDA_TRY(cudaGraphDestroy(graph));
    registration.reset();
  });
}
