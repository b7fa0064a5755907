// SPDX-License-Identifier: Apache-2.0
// Host cost of getting and returning a unit's buffers over a training-step trace: forward then
// backward over all units, one unit prefetched (acquire u+1, then release u). Peers run the same
// trace with the same padded bucket sizes, in the same run:
//
//   pool            unit_pool::acquire / release with the default release order,
//                   record_if_cross_stream (strict, one arena): no event where a lease is
//                   acquired and released on one stream, one recorded at release where it crosses
//   pool record_at_release   the previous default: one event recorded at every release
//   pool record_at_reuse     no event at release; recorded when another stream reuses the slot
//   pool interval   the default pool on an interval plan (training + forward-only orders, N = 2)
//   floor           a bare cudaEventRecord (at release) + cudaStreamWaitEvent (at acquire): the
//                   least any stream-ordered pool pays per pair across streams
//   floor reuse order   the same pair, the acquire waiting on the latest release's event (as
//                   a double-buffered pool does) rather than on one recorded a pass earlier
//   floor record only   the bare cudaEventRecord alone: what a release that records pays where
//                   nothing waits (one stream)
//   floor recycled event   the record + wait pair on one event, re-recorded right after the wait
//                   (what a pool reusing its events last in, first out would pay; the pool reuses
//                   the longest-idle of slots + 16 events)
//   the pool's own calls   a bare replay of the driver calls a twin pool made over the same
//                   steps (its events, its streams, its order), without the pool's bookkeeping:
//                   pool / own calls is the bookkeeping, own calls / floor in reuse order what
//                   the pool's choice of events costs the driver (paired, two streams)
//   cudaMallocAsync cudaMallocAsync / cudaFreeAsync on the device's default pool
//                   (release threshold raised to keep memory, as a training loop does)
//   cub caching     cub::CachingDeviceAllocator (bins 2^8 .. 2^30 so large buckets are cached)
//   cudaMalloc      cudaMalloc / cudaFree
//
// Two scenarios: one stream (acquire and release on the same stream) and two streams (acquire
// on an all-gather stream, release on the compute stream). No kernels run: the streams are idle,
// so the numbers are the allocators' own host cost. Time is host wall-clock (steady_clock) per
// acquire+release pair, median over repetitions after warm-up.
//
// Then a device step: the same trace with work on both streams (a "copy" kernel into the lease
// on the all-gather stream, a "compute" kernel on it on the compute stream, fixed durations),
// timed on the device (cudaEvent) for each release order and for bare events on two fixed
// buffers. Two issue orders: prefetch first (acquire u+1 and its copy, then compute u) and
// compute first (compute u, then acquire u+1 and its copy; here deferring the record to the
// reuse makes the copy wait for compute u). The default must never be slower than
// record_at_release: recording where the lease crosses streams keeps every overlap.
//
//   bench_pool_acquire [reps]        tables, then one JSON line
// Targets: one stream <= 60 ns a pair and <= 0.2 x the bare cudaEventRecord; two streams
// <= 1.1 x the floor in reuse order (both judged on paired reps: the pool and its floor timed
// back to back, rep after rep); the device step no slower than record_at_release (within 2 %,
// the noise of a step's timing) in both orders; pair <= 1/10 of cudaMallocAsync.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cub/util_allocator.cuh>

#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"
#include "headroom/pool/interval.hpp"
#include "headroom/pool/models.hpp"

namespace hp = headroom::pool;
using headroom::cuda::stream_view;

namespace {

using clock_type = std::chrono::steady_clock;

struct trace {
  std::string name;
  hp::plan plan;
  hp::plan interval_plan;
  std::vector<std::vector<std::size_t>> bytes;  // [unit][bucket] padded sizes
  [[nodiscard]] std::size_t units() const { return bytes.size(); }
};

trace make_trace(hp::workload const& w) {
  trace t{w.name, hp::make_plan<hp::max>(w, {}, hp::pad_elements{64}),
          hp::make_interval_plan(w, {hp::training_order(w), hp::evaluation_order(w)}, {.resident = 2},
                                 hp::pad_elements{64}),
          {}};
  for (auto const& b : t.plan.bucket_bytes) t.bytes.emplace_back(b.begin(), b.end());
  return t;
}

// One step: forward then backward; in each pass acquire(first), then for each unit
// acquire(next) before release(current). `acquire(u, s)` and `release(u, s)` are the allocator.
template <class Acquire, class Release>
void step(std::size_t n, stream_view ag, stream_view compute, Acquire&& acquire, Release&& release) {
  for (int pass = 0; pass < 2; ++pass) {
    auto unit = [&](std::size_t i) { return pass == 0 ? i : n - 1 - i; };
    acquire(unit(0), ag);
    for (std::size_t i = 0; i < n; ++i) {
      if (i + 1 < n) acquire(unit(i + 1), ag);
      release(unit(i), compute);
    }
  }
}

struct result {
  std::string workload, scenario, allocator;
  double median_ns = 0, p10_ns = 0, p90_ns = 0;
};

template <class Acquire, class Release>
result measure(trace const& t, char const* scenario, char const* allocator, stream_view ag, stream_view compute,
               int warmup, int reps, int steps_per_rep, Acquire&& acquire, Release&& release) {
  for (int i = 0; i < warmup; ++i) step(t.units(), ag, compute, acquire, release);
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  std::vector<double> per_pair;
  double const pairs = static_cast<double>(steps_per_rep) * 2.0 * static_cast<double>(t.units());
  for (int r = 0; r < reps; ++r) {
    auto const t0 = clock_type::now();
    for (int s = 0; s < steps_per_rep; ++s) step(t.units(), ag, compute, acquire, release);
    auto const t1 = clock_type::now();
    per_pair.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / pairs);
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());  // outside the timed region: keep queues short
  }
  std::sort(per_pair.begin(), per_pair.end());
  auto at = [&](double q) { return per_pair[static_cast<std::size_t>(q * static_cast<double>(per_pair.size() - 1))]; };
  return {t.name, scenario, allocator, at(0.5), at(0.1), at(0.9)};
}

// A against B rep by rep (A, B, A, B, ...), the ratio of each pair of reps, median over reps.
// The lent machines' host speed drifts by up to 2x between blocks of repetitions (the bare
// record measured 180-359 ns in three calls of one day), so a ratio of two medians taken a block
// apart can say nothing; reps taken back to back see the same host.
struct paired_ratio {
  std::string workload, scenario, against;
  double a_ns = 0, b_ns = 0;           // medians of A's and B's reps, per pair
  double median = 0, p10 = 0, p90 = 0;  // of A / B per rep
  std::string what = "pool";            // A
};

template <class AcquireA, class ReleaseA, class AcquireB, class ReleaseB>
paired_ratio measure_paired(trace const& t, char const* scenario, char const* against, stream_view ag,
                            stream_view compute, int reps, int steps_per_rep, AcquireA&& acquire_a,
                            ReleaseA&& release_a, AcquireB&& acquire_b, ReleaseB&& release_b) {
  double const pairs = static_cast<double>(steps_per_rep) * 2.0 * static_cast<double>(t.units());
  auto rep = [&](auto& acquire, auto& release) {
    auto const t0 = clock_type::now();
    for (int s = 0; s < steps_per_rep; ++s) step(t.units(), ag, compute, acquire, release);
    auto const t1 = clock_type::now();
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());  // outside the timed region: keep queues short
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / pairs;
  };
  for (int i = 0; i < 20; ++i) {
    step(t.units(), ag, compute, acquire_a, release_a);
    step(t.units(), ag, compute, acquire_b, release_b);
  }
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  std::vector<double> a, b, ratio;
  for (int r = 0; r < reps; ++r) {
    a.push_back(rep(acquire_a, release_a));
    b.push_back(rep(acquire_b, release_b));
    ratio.push_back(a.back() / b.back());
  }
  auto at = [](std::vector<double>& v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
  };
  return {t.name, scenario, against, at(a, 0.5), at(b, 0.5), at(ratio, 0.5), at(ratio, 0.1), at(ratio, 0.9)};
}

// The driver calls a pool makes, to replay them bare: each call's event, stream and kind, and
// which acquire or release (counted from the start of the log) made it.
struct driver_call {
  cudaEvent_t event = nullptr;
  cudaStream_t stream = nullptr;
  bool record = false;
  std::uint32_t call = 0;
};
struct call_log {
  std::vector<driver_call>* calls = nullptr;  // null: not logging
  std::uint32_t call = 0;                     // the acquire or release being made
};
call_log the_log;  // the bench runs on one thread

}  // namespace

// (Outside the unnamed namespace: the event concept asks for ready(), which the pool never calls.)
namespace pool_acquire_bench {

// cuda::event that appends each record and wait to the_log while it logs.
class logged_event {
 public:
  void record(stream_view const& s) {
    log(true, s);
    e_.record(s);
  }
  [[nodiscard]] bool ready() const { return e_.ready(); }
  void wait_on(stream_view const& s) const {
    log(false, s);
    e_.wait_on(s);
  }
  void synchronize() const { e_.synchronize(); }

 private:
  void log(bool record, stream_view const& s) const {
    if (the_log.calls != nullptr) the_log.calls->push_back({e_.get(), s.get(), record, the_log.call});
  }
  headroom::cuda::event e_;
};
static_assert(headroom::event<logged_event, stream_view>);

}  // namespace pool_acquire_bench

namespace {

using pool_acquire_bench::logged_event;

// The floor in reuse order: each acquire waits on the latest release's event (as a
// double-buffered pool, whose acquire(u+1) reuses the slot released just before).
struct reuse_order_floor {
  std::vector<cudaEvent_t> const& events;
  std::size_t last = 0;
  void acquire(stream_view s) const { HEADROOM_CUDA_TRY(cudaStreamWaitEvent(s.get(), events[last], 0)); }
  void release(std::size_t u, stream_view s) {
    HEADROOM_CUDA_TRY(cudaEventRecord(events[u], s.get()));
    last = u;
  }
};

// Where the pool's time over the floor goes (two streams): a twin pool on logged events makes
// the driver calls of `steps` steps after a warm-up; their bare replay is timed, paired, against
// the pool (the difference is the pool's bookkeeping) and against the floor in reuse order (the
// difference is what these calls cost the driver over the floor's).
template <class Pool, class Lease>
void own_calls_against(trace const& t, Pool& pool, std::vector<Lease>& held, stream_view ag, stream_view compute,
                       int reps, std::vector<cudaEvent_t> const& events, std::vector<paired_ratio>& paired) {
  using twin_type = hp::unit_pool<stream_view, logged_event, headroom::cuda::device_resource, hp::strict, hp::dynamic,
                                  hp::record_if_cross_stream>;
  twin_type twin(t.plan, headroom::cuda::device_resource{}, ag);
  std::vector<typename twin_type::lease> twin_held(t.units());
  auto twin_acquire = [&](std::size_t u, stream_view s) {
    twin_held[u] = twin.acquire(u, s);
    ++the_log.call;
  };
  auto twin_release = [&](std::size_t u, stream_view s) {
    twin.release(twin_held[u], s);
    ++the_log.call;
  };
  for (int i = 0; i < 40; ++i) step(t.units(), ag, compute, twin_acquire, twin_release);
  constexpr int steps = 20;  // the log: as many steps as a timed rep
  std::vector<driver_call> calls;
  the_log = {&calls, 0};
  for (int i = 0; i < steps; ++i) step(t.units(), ag, compute, twin_acquire, twin_release);
  std::uint32_t const calls_in_log = the_log.call;
  the_log = {};
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  std::size_t records = 0;
  std::vector<cudaEvent_t> distinct;
  for (auto const& c : calls) {
    records += c.record ? 1 : 0;
    distinct.push_back(c.event);
  }
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  double const pairs = static_cast<double>(calls_in_log) / 2.0;
  std::printf("%s, two streams, the pool's own calls: per pair %.3f records, %.3f waits, on %zu distinct events\n",
              t.name.c_str(), static_cast<double>(records) / pairs, static_cast<double>(calls.size() - records) / pairs,
              distinct.size());

  std::size_t cursor = 0;
  std::uint32_t call = 0;
  auto replay = [&](std::size_t, stream_view) {
    while (cursor < calls.size() && calls[cursor].call == call) {
      auto const& c = calls[cursor++];
      if (c.record) {
        HEADROOM_CUDA_TRY(cudaEventRecord(c.event, c.stream));
      } else {
        HEADROOM_CUDA_TRY(cudaStreamWaitEvent(c.stream, c.event, 0));
      }
    }
    if (++call == calls_in_log) {
      call = 0;
      cursor = 0;
    }
  };
  reuse_order_floor floor{events};
  auto floor_acquire = [&](std::size_t, stream_view s) { floor.acquire(s); };
  auto floor_release = [&](std::size_t u, stream_view s) { floor.release(u, s); };
  paired.push_back(measure_paired(
      t, "two streams", "the pool's own calls", ag, compute, reps, steps,
      [&](std::size_t u, stream_view s) { held[u] = pool.acquire(u, s); },
      [&](std::size_t u, stream_view s) { pool.release(held[u], s); }, replay, replay));
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  paired.push_back(measure_paired(t, "two streams", "floor reuse order", ag, compute, reps, steps, replay, replay,
                                  floor_acquire, floor_release));
  paired.back().what = "own calls";
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
}

void run_trace(trace const& t, int reps, std::vector<result>& out, std::vector<paired_ratio>& paired) {
  headroom::cuda::stream s_ag, s_compute;
  for (int two_streams = 0; two_streams < 2; ++two_streams) {
    stream_view const ag = s_ag.view();
    stream_view const compute = two_streams ? s_compute.view() : s_ag.view();
    char const* scenario = two_streams ? "two streams" : "one stream";

    auto run_pool = [&]<class Order>(Order, char const* label, hp::plan const& plan) {
      using pool_type = hp::cuda_unit_pool<headroom::cuda::device_resource, hp::strict, hp::dynamic, Order>;
      pool_type pool(plan, headroom::cuda::device_resource{}, ag);
      std::vector<typename pool_type::lease> held(t.units());
      out.push_back(measure(
          t, scenario, label, ag, compute, 20, reps, 20,
          [&](std::size_t u, stream_view s) { held[u] = pool.acquire(u, s); },
          [&](std::size_t u, stream_view s) { pool.release(held[u], s); }));
      if (pool.stats().moves != 0)
        std::fprintf(stderr, "warning: %llu strict moves\n", static_cast<unsigned long long>(pool.stats().moves));
      // Device calls per acquire + release pair (two streams: one record and one wait each).
      auto const& st = pool.stats();
      double const acquires = static_cast<double>(st.acquisitions);
      std::printf("%s, %s, %s: per pair %.3f release events, %.3f reuse events, %.3f cross-stream waits\n", t.name.c_str(),
                  scenario, label, static_cast<double>(st.release_events) / acquires,
                  static_cast<double>(st.reuse_events) / acquires, static_cast<double>(st.cross_stream_waits) / acquires);
    };
    run_pool(hp::record_if_cross_stream{}, "pool", t.plan);
    run_pool(hp::record_at_release{}, "pool record_at_release", t.plan);
    run_pool(hp::record_at_reuse{}, "pool record_at_reuse", t.plan);
    run_pool(hp::record_if_cross_stream{}, "pool interval", t.interval_plan);
    {  // the floor: one bare event record at release, one wait at acquire, per pair
      std::vector<cudaEvent_t> events(t.units());
      for (auto& e : events) HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      out.push_back(measure(
          t, scenario, "floor", ag, compute, 20, reps, 20,
          [&](std::size_t u, stream_view s) { HEADROOM_CUDA_TRY(cudaStreamWaitEvent(s.get(), events[u], 0)); },
          [&](std::size_t u, stream_view s) { HEADROOM_CUDA_TRY(cudaEventRecord(events[u], s.get())); }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      // The same pair where the wait is on the latest release, as in a double-buffered pool
      // (acquire(u+1) reuses the slot of the unit released just before): the event waited on
      // was recorded moments ago, not a whole pass earlier.
      reuse_order_floor floor{events};
      out.push_back(measure(
          t, scenario, "floor reuse order", ag, compute, 20, reps, 20,
          [&](std::size_t, stream_view s) { floor.acquire(s); },
          [&](std::size_t u, stream_view s) { floor.release(u, s); }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      // The same pair on one recycled event: each release re-records the event the acquire just
      // waited on (as a pool whose free events are reused last in, first out). Against "floor
      // reuse order" it shows what re-recording a just-waited event costs the driver.
      out.push_back(measure(
          t, scenario, "floor recycled event", ag, compute, 20, reps, 20,
          [&](std::size_t, stream_view s) { HEADROOM_CUDA_TRY(cudaStreamWaitEvent(s.get(), events[0], 0)); },
          [&](std::size_t, stream_view s) { HEADROOM_CUDA_TRY(cudaEventRecord(events[0], s.get())); }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      // What a stream-ordered release costs where nothing waits (one stream): the record alone.
      out.push_back(measure(
          t, scenario, "floor record only", ag, compute, 20, reps, 20, [](std::size_t, stream_view) {},
          [&](std::size_t u, stream_view s) { HEADROOM_CUDA_TRY(cudaEventRecord(events[u], s.get())); }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      for (auto e : events) HEADROOM_CUDA_TRY(cudaEventDestroy(e));
    }
    {  // the targets' ratios, paired rep by rep: the default pool against the floor it must meet
      using pool_type =
          hp::cuda_unit_pool<headroom::cuda::device_resource, hp::strict, hp::dynamic, hp::record_if_cross_stream>;
      pool_type pool(t.plan, headroom::cuda::device_resource{}, ag);
      std::vector<typename pool_type::lease> held(t.units());
      std::vector<cudaEvent_t> events(t.units());
      for (auto& e : events) HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      reuse_order_floor floor{events};
      bool const wait = two_streams != 0;  // one stream: the floor is the bare record alone
      paired.push_back(measure_paired(
          t, scenario, wait ? "floor reuse order" : "floor record only", ag, compute, reps, 20,
          [&](std::size_t u, stream_view s) { held[u] = pool.acquire(u, s); },
          [&](std::size_t u, stream_view s) { pool.release(held[u], s); },
          [&](std::size_t, stream_view s) {
            if (wait) floor.acquire(s);
          },
          [&](std::size_t u, stream_view s) { floor.release(u, s); }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      if (two_streams) own_calls_against(t, pool, held, ag, compute, reps, events, paired);
      for (auto e : events) HEADROOM_CUDA_TRY(cudaEventDestroy(e));
    }
    std::vector<std::vector<void*>> ptrs(t.units());
    for (std::size_t u = 0; u < t.units(); ++u) ptrs[u].resize(t.bytes[u].size());
    {  // cudaMallocAsync on the default pool, memory kept between steps
      int device = 0;
      HEADROOM_CUDA_TRY(cudaGetDevice(&device));
      cudaMemPool_t mempool = nullptr;
      HEADROOM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&mempool, device));
      std::uint64_t keep = UINT64_MAX;
      HEADROOM_CUDA_TRY(cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold, &keep));
      out.push_back(measure(
          t, scenario, "cudaMallocAsync", ag, compute, 20, reps, 20,
          [&](std::size_t u, stream_view s) {
            for (std::size_t b = 0; b < ptrs[u].size(); ++b) HEADROOM_CUDA_TRY(cudaMallocAsync(&ptrs[u][b], t.bytes[u][b], s.get()));
          },
          [&](std::size_t u, stream_view s) {
            for (auto* p : ptrs[u]) HEADROOM_CUDA_TRY(cudaFreeAsync(p, s.get()));
          }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      HEADROOM_CUDA_TRY(cudaMemPoolTrimTo(mempool, 0));
    }
    {  // CUB caching allocator, bins up to 1 GiB so every bucket is cached
      cub::CachingDeviceAllocator cub_alloc(2, 8, 30, std::size_t{16} << 30);
      out.push_back(measure(
          t, scenario, "cub::CachingDeviceAllocator", ag, compute, 20, reps, 20,
          [&](std::size_t u, stream_view s) {
            for (std::size_t b = 0; b < ptrs[u].size(); ++b)
              HEADROOM_CUDA_TRY(cub_alloc.DeviceAllocate(&ptrs[u][b], t.bytes[u][b], s.get()));
          },
          [&](std::size_t u, stream_view) {
            for (auto* p : ptrs[u]) HEADROOM_CUDA_TRY(cub_alloc.DeviceFree(p));
          }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    }
    {  // cudaMalloc / cudaFree (synchronous; fewer steps)
      out.push_back(measure(
          t, scenario, "cudaMalloc", ag, compute, 1, std::max(3, reps / 5), 1,
          [&](std::size_t u, stream_view) {
            for (std::size_t b = 0; b < ptrs[u].size(); ++b) HEADROOM_CUDA_TRY(cudaMalloc(&ptrs[u][b], t.bytes[u][b]));
          },
          [&](std::size_t u, stream_view) {
            for (auto* p : ptrs[u]) HEADROOM_CUDA_TRY(cudaFree(p));
          }));
    }
  }
}

// ---- the device step -------------------------------------------------------------------------

__device__ unsigned long long global_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Stands in for an all-gather into the lease, or compute on it: `ns` of device time, then a
// write into the buffer (so the buffer is really used by the kernel).
__global__ void busy_on(float* buffer, unsigned long long ns) {
  unsigned long long const start = global_ns();
  while (global_ns() - start < ns) {
  }
  if (threadIdx.x == 0) buffer[0] += 1.0f;
}

constexpr unsigned long long copy_ns = 30'000;
constexpr unsigned long long compute_ns = 40'000;

struct step_timing {
  std::string workload, order, allocator;
  double median_us = 0, p10_us = 0, p90_us = 0;
};

// One step, forward then backward, one unit prefetched. `acquire(u, s)` returns the unit's
// buffer; `release(u, s)`.
template <class Acquire, class Release>
void issue_step(std::size_t n, stream_view ag, stream_view compute, bool compute_first,
                std::vector<cudaEvent_t> const& copied, Acquire&& acquire, Release&& release) {
  std::vector<float*> buffer(n, nullptr);
  for (int pass = 0; pass < 2; ++pass) {
    auto unit = [&](std::size_t i) { return pass == 0 ? i : n - 1 - i; };
    auto prefetch = [&](std::size_t i) {
      std::size_t const u = unit(i);
      buffer[u] = acquire(u, ag);
      busy_on<<<1, 32, 0, ag.get()>>>(buffer[u], copy_ns);
      HEADROOM_CUDA_TRY(cudaEventRecord(copied[u], ag.get()));
    };
    prefetch(0);
    for (std::size_t i = 0; i < n; ++i) {
      if (!compute_first && i + 1 < n) prefetch(i + 1);
      HEADROOM_CUDA_TRY(cudaStreamWaitEvent(compute.get(), copied[unit(i)], 0));
      busy_on<<<1, 32, 0, compute.get()>>>(buffer[unit(i)], compute_ns);
      if (compute_first && i + 1 < n) prefetch(i + 1);
      release(unit(i), compute);
    }
  }
  HEADROOM_CUDA_TRY(cudaGetLastError());
}

template <class Acquire, class Release>
step_timing time_step(trace const& t, char const* order, char const* allocator, bool compute_first, int reps,
                      stream_view ag, stream_view compute, Acquire&& acquire, Release&& release) {
  std::vector<cudaEvent_t> copied(t.units());
  for (auto& e : copied) HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t start = nullptr, joined = nullptr, stop = nullptr;
  HEADROOM_CUDA_TRY(cudaEventCreate(&start));
  HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  HEADROOM_CUDA_TRY(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int r = -2; r < reps; ++r) {  // two warm-up steps
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    HEADROOM_CUDA_TRY(cudaEventRecord(start, compute.get()));
    HEADROOM_CUDA_TRY(cudaStreamWaitEvent(ag.get(), start, 0));
    issue_step(t.units(), ag, compute, compute_first, copied, acquire, release);
    HEADROOM_CUDA_TRY(cudaEventRecord(joined, ag.get()));
    HEADROOM_CUDA_TRY(cudaStreamWaitEvent(compute.get(), joined, 0));
    HEADROOM_CUDA_TRY(cudaEventRecord(stop, compute.get()));
    HEADROOM_CUDA_TRY(cudaEventSynchronize(stop));
    float ms = 0;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
    if (r >= 0) us.push_back(1000.0 * ms);
  }
  for (auto e : copied) HEADROOM_CUDA_TRY(cudaEventDestroy(e));
  HEADROOM_CUDA_TRY(cudaEventDestroy(start));
  HEADROOM_CUDA_TRY(cudaEventDestroy(joined));
  HEADROOM_CUDA_TRY(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))]; };
  return {t.name, order, allocator, at(0.5), at(0.1), at(0.9)};
}

void run_device_steps(trace const& t, int reps, std::vector<step_timing>& out) {
  headroom::cuda::stream s_ag, s_compute;
  stream_view const ag = s_ag.view(), compute = s_compute.view();
  for (int compute_first = 0; compute_first < 2; ++compute_first) {
    char const* order = compute_first ? "compute first" : "prefetch first";
    auto run_pool = [&]<class Order>(Order, char const* label) {
      using pool_type = hp::cuda_unit_pool<headroom::cuda::device_resource, hp::strict, hp::dynamic, Order>;
      pool_type pool(t.plan, headroom::cuda::device_resource{}, ag);
      std::vector<typename pool_type::lease> held(t.units());
      out.push_back(time_step(
          t, order, label, compute_first != 0, reps, ag, compute,
          [&](std::size_t u, stream_view s) {
            held[u] = pool.acquire(u, s);
            return held[u].template view<float>(0).data();
          },
          [&](std::size_t u, stream_view s) { pool.release(held[u], s); }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
    };
    run_pool(hp::record_if_cross_stream{}, "pool");
    run_pool(hp::record_at_release{}, "pool record_at_release");
    run_pool(hp::record_at_reuse{}, "pool record_at_reuse");
    {  // bare events on two fixed buffers: each buffer's reuse waits on the event of its last release
      std::size_t const bytes = 256;  // the kernels touch the first element
      float* buffers[2] = {nullptr, nullptr};
      cudaEvent_t freed[2] = {nullptr, nullptr};
      bool recorded[2] = {false, false};
      for (int b = 0; b < 2; ++b) {
        HEADROOM_CUDA_TRY(cudaMalloc(&buffers[b], bytes));
        HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&freed[b], cudaEventDisableTiming));
      }
      std::vector<int> buffer_of(t.units(), 0);
      int next = 0;
      out.push_back(time_step(
          t, order, "bare events", compute_first != 0, reps, ag, compute,
          [&](std::size_t u, stream_view s) {
            int const b = next;
            next ^= 1;
            if (recorded[b]) HEADROOM_CUDA_TRY(cudaStreamWaitEvent(s.get(), freed[b], 0));
            buffer_of[u] = b;
            return buffers[b];
          },
          [&](std::size_t u, stream_view s) {
            HEADROOM_CUDA_TRY(cudaEventRecord(freed[buffer_of[u]], s.get()));
            recorded[buffer_of[u]] = true;
          }));
      HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
      for (int b = 0; b < 2; ++b) {
        HEADROOM_CUDA_TRY(cudaFree(buffers[b]));
        HEADROOM_CUDA_TRY(cudaEventDestroy(freed[b]));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int const reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 31;
  cudaDeviceProp prop{};
  HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  HEADROOM_CUDA_TRY(cudaSetDevice(0));

  std::vector<trace> traces;
  traces.push_back(make_trace(hp::models::make_workload(hp::models::nemotron_h_8b())));
  hp::models::build_options ep64;
  ep64.expert_parallel = 64;
  traces.push_back(make_trace(hp::models::make_workload(hp::models::nemotron_3_super_120b_a12b(), ep64)));

  std::vector<result> results;
  std::vector<paired_ratio> paired;
  for (auto const& t : traces) run_trace(t, reps, results, paired);
  std::vector<step_timing> steps;
  int const step_reps = std::max(5, reps / 3);
  for (auto const& t : traces) run_device_steps(t, step_reps, steps);

  std::printf("device: %s; host time per acquire+release pair (median of %d reps; p10..p90)\n", prop.name, reps);
  std::printf("%-34s %-12s %-30s %12s %21s %14s\n", "workload", "streams", "allocator", "median ns", "p10..p90 ns",
              "x pool median");
  auto find = [&](result const& r, char const* allocator) {
    for (auto const& q : results)
      if (q.workload == r.workload && q.scenario == r.scenario && q.allocator == allocator) return q.median_ns;
    return 0.0;
  };
  for (auto const& r : results)
    std::printf("%-34s %-12s %-30s %12.1f %10.1f..%-10.1f %14.1f\n", r.workload.c_str(), r.scenario.c_str(),
                r.allocator.c_str(), r.median_ns, r.p10_ns, r.p90_ns, r.median_ns / find(r, "pool"));

  // One stream: the default pool records nothing, so it should sit far below the bare record.
  bool one_stream_met = true, two_streams_met = true, tenth_of_async = true;
  double worst_one_stream = 0, worst_one_stream_vs_record = 0, worst_two_streams = 0;
  for (auto const& r : results) {
    if (r.allocator != "pool") continue;
    tenth_of_async = tenth_of_async && r.median_ns * 10.0 <= find(r, "cudaMallocAsync");
    if (r.scenario == "one stream") {
      double const record = find(r, "floor record only");
      std::printf("one stream, %s: pool %.1f ns = %.3f x bare cudaEventRecord %.1f ns; record_at_reuse %.1f ns; "
                  "record_at_release (previous default) %.1f ns\n",
                  r.workload.c_str(), r.median_ns, r.median_ns / record, record, find(r, "pool record_at_reuse"),
                  find(r, "pool record_at_release"));
    } else {
      double const floor = find(r, "floor reuse order");
      std::printf("two streams, %s: pool %.1f ns = %.3f x the floor in reuse order (%.1f ns); record_at_release %.1f ns "
                  "(%.3f x); floor on one recycled event %.1f ns (%.3f x)\n",
                  r.workload.c_str(), r.median_ns, r.median_ns / floor, floor, find(r, "pool record_at_release"),
                  find(r, "pool record_at_release") / floor, find(r, "floor recycled event"),
                  find(r, "floor recycled event") / floor);
    }
  }
  // The targets are judged on the paired reps (pool and floor back to back, see measure_paired).
  std::printf("paired reps (pool, floor, pool, floor, ...; median of %d per-rep ratios, p10..p90):\n", reps);
  for (auto const& p : paired) {
    std::printf("  %-34s %-12s %-9s %7.1f ns, %-20s %7.1f ns: %.3f x (%.3f..%.3f)\n", p.workload.c_str(),
                p.scenario.c_str(), p.what.c_str(), p.a_ns, p.against.c_str(), p.b_ns, p.median, p.p10, p.p90);
    if (p.what != "pool" || p.against == "the pool's own calls") continue;  // the cause split, not a target
    if (p.scenario == "one stream") {
      worst_one_stream = std::max(worst_one_stream, p.a_ns);
      worst_one_stream_vs_record = std::max(worst_one_stream_vs_record, p.median);
    } else {
      worst_two_streams = std::max(worst_two_streams, p.median);
    }
  }
  one_stream_met = worst_one_stream <= 60.0 && worst_one_stream_vs_record <= 0.2;
  two_streams_met = worst_two_streams <= 1.1;
  std::printf("targets (paired): one stream <= 60 ns and <= 0.2 x bare record: worst %.1f ns, %.3f x: %s; two streams <= 1.1 x "
              "floor in reuse order: worst %.3f x: %s; pair <= 1/10 of cudaMallocAsync: %s\n",
              worst_one_stream, worst_one_stream_vs_record, one_stream_met ? "met" : "NOT met", worst_two_streams,
              two_streams_met ? "met" : "NOT met", tenth_of_async ? "met" : "NOT met");

  // The device step: copy on the all-gather stream, compute on the compute stream.
  std::printf("\ntwo-stream step on the device: per unit a %.0f us copy into the lease (all-gather stream) and a %.0f us "
              "compute on it (compute stream), forward + backward; median of %d steps, us (p10..p90)\n",
              static_cast<double>(copy_ns) / 1000.0, static_cast<double>(compute_ns) / 1000.0, step_reps);
  std::printf("%-34s %-15s %-24s %12s %21s %18s\n", "workload", "order", "allocator", "median us", "p10..p90 us",
              "x record_at_release");
  auto step_of = [&](step_timing const& r, char const* allocator) {
    for (auto const& q : steps)
      if (q.workload == r.workload && q.order == r.order && q.allocator == allocator) return q.median_us;
    return 0.0;
  };
  for (auto const& r : steps)
    std::printf("%-34s %-15s %-24s %12.1f %10.1f..%-10.1f %18.3f\n", r.workload.c_str(), r.order.c_str(),
                r.allocator.c_str(), r.median_us, r.p10_us, r.p90_us, r.median_us / step_of(r, "pool record_at_release"));
  bool step_met = true;
  double worst_step = 0;
  for (std::size_t i = 0; i < traces.size(); ++i) {
    double const pairs = 2.0 * static_cast<double>(traces[i].units());
    std::printf("%s: bounds per step: serial %.1f us (copy + compute per unit), overlapped %.1f us (compute per unit + "
                "one copy)\n",
                traces[i].name.c_str(), pairs * static_cast<double>(copy_ns + compute_ns) / 1000.0,
                (pairs * static_cast<double>(compute_ns) + 2.0 * static_cast<double>(copy_ns)) / 1000.0);
  }
  for (auto const& r : steps)
    if (r.allocator == "pool") {
      double const ratio = r.median_us / step_of(r, "pool record_at_release");
      worst_step = std::max(worst_step, ratio);
      step_met = step_met && ratio <= 1.02;
      std::printf("step, %s, %s: pool %.1f us = %.3f x record_at_release; record_at_reuse %.3f x; bare events %.3f x\n",
                  r.workload.c_str(), r.order.c_str(), r.median_us, ratio,
                  step_of(r, "pool record_at_reuse") / step_of(r, "pool record_at_release"),
                  step_of(r, "bare events") / step_of(r, "pool record_at_release"));
    }
  std::printf("target: device step no slower than record_at_release (<= 1.02 x) in both orders: worst %.3f x: %s\n",
              worst_step, step_met ? "met" : "NOT met");

  std::printf("{\"bench\":\"pool_acquire\",\"device\":\"%s\",\"reps\":%d,\"rows\":[", prop.name, reps);
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto const& r = results[i];
    std::printf("%s{\"workload\":\"%s\",\"streams\":\"%s\",\"allocator\":\"%s\",\"median_ns\":%.1f,\"p10_ns\":%.1f,"
                "\"p90_ns\":%.1f,\"ratio_to_pool\":%.3f}",
                i ? "," : "", r.workload.c_str(), r.scenario.c_str(), r.allocator.c_str(), r.median_ns, r.p10_ns,
                r.p90_ns, r.median_ns / find(r, "pool"));
  }
  std::printf("],\"steps\":[");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    auto const& r = steps[i];
    std::printf("%s{\"workload\":\"%s\",\"order\":\"%s\",\"allocator\":\"%s\",\"median_us\":%.1f,\"p10_us\":%.1f,"
                "\"p90_us\":%.1f}",
                i ? "," : "", r.workload.c_str(), r.order.c_str(), r.allocator.c_str(), r.median_us, r.p10_us, r.p90_us);
  }
  std::printf("],\"worst_one_stream_ns\":%.1f,\"worst_one_stream_x_record\":%.3f,\"worst_two_streams_x_floor\":%.3f,"
              "\"worst_step_x_record_at_release\":%.3f,\"target_one_stream\":%s,\"target_two_streams\":%s,"
              "\"target_step\":%s,\"target_tenth_of_cudaMallocAsync\":%s}\n",
              worst_one_stream, worst_one_stream_vs_record, worst_two_streams, worst_step,
              one_stream_met ? "true" : "false", two_streams_met ? "true" : "false", step_met ? "true" : "false",
              tenth_of_async ? "true" : "false");
  return 0;
}
