// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// Latency of stats::reducer::max across 2 GPUs (NCCL), against the peers in the same run
// (Megatron-Bridge PR #3645, github.com/NVIDIA-NeMo/Megatron-Bridge/pull/3645, stacks the report
// into one float64 tensor and does one all_reduce(MAX); composer does one collective per key).
//
// One thread per GPU. For each report size (8, 64, 512 keys; half int64, half double), every
// method runs `warmup` times, then `iterations` timed times; each method starts from host values
// and ends with host values, as a dashboard needs them:
//   nccl_device     ncclAllReduce(max) of keys x int64 on device buffers: the collective alone,
//                   nothing copied (a floor, not a like-for-like peer)
//   nccl_staged     the same collective with the host copies around it, written by hand:
//                   cudaMemcpyAsync H2D (pinned) + ncclAllReduce + D2H (pinned) + sync.
//                   "A bare ncclAllReduce of the same bytes": the target is max <= 1.1x this.
//   headroom_max    stats::reducer<blocking_device_staging>::max with a pinned host buffer:
//                   packs order keys + a 6-word schema header, one all_reduce, checks, unpacks
//   headroom_max_pageable   the same without the pinned buffer
//   per_key         one ncclAllReduce per key (staged once in, once out): composer's pattern
//   headroom_gather stats::reducer::gather (one all_gather, per-rank table), for reference
//   device_resident stats::cuda::device_reducer::max on a report already in device memory
//                   one ncclAllReduce of the keys, a D2H copy into a pinned slot and an
//                   event, then get() (waits for the event, decodes). Target <= 1.1x nccl_device.
//   device_graph    the same reduction captured once in a CUDA graph: cudaGraphLaunch, then get()
//   host enqueue    host time the training thread spends per logged step: device_reducer::max()
//                   alone (eager), cudaGraphLaunch alone (graph), and ready() + get() once the
//                   result is there (the later read). Target <= 5 us for the enqueue.
// Time per call: host wall clock (steady_clock) around the call, and CUDA events recorded on
// the stream before and after; medians on rank 0. The torch peer is bench/stats_reduce_torch.py.
//
// Output: a table, then one JSON line.
//   bench_stats_reduce [--iterations 500] [--warmup 50]
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/stats/cuda/device_reducer.hpp"
#include "headroom/stats/cuda/staging.hpp"
#include "headroom/stats.hpp"

using namespace headroom;
namespace hs = headroom::stats;
using staging = hs::cuda::blocking_device_staging;

namespace {

struct options {
  int iterations = 500;
  int warmup = 50;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    expects(i + 1 < argc, "bench_stats_reduce: ", a, " needs a value");
    char const* v = argv[++i];
    char* end = nullptr;
    long const n = std::strtol(v, &end, 10);
    expects(end != v && *end == '\0' && n > 0 && n < (1L << 24), "bench_stats_reduce: ", a,
            " expects a positive integer, got '", v, "'");
    if (a == "--iterations") o.iterations = static_cast<int>(n);
    else if (a == "--warmup") o.warmup = static_cast<int>(n);
    else expects(false, "bench_stats_reduce: unknown option ", a, " (expected --iterations or --warmup)");
  }
  return o;
}

hs::dynamic_report make_report(int rank, std::size_t keys) {
  hs::dynamic_report r;
  for (std::size_t i = 0; i < keys; ++i) {
    std::string const name = "memory/key." + std::to_string(i);
    if (i % 2 == 0) r.set(name, static_cast<std::int64_t>((std::int64_t{1} << 40) + 1000 * static_cast<std::int64_t>(i) + rank));
    else r.set(name, -1.0 * static_cast<double>(i) + 0.25 * rank);
  }
  return r;
}

struct timing {
  double wall_us = 0;
  double event_us = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Runs `op` warmup + iterations times on `s`; medians of host wall time and event time.
timing measure(cuda::stream_view s, int warmup, int iterations, std::function<void()> const& op) {
  cudaEvent_t start = nullptr, stop = nullptr;
  HEADROOM_CUDA_TRY(cudaEventCreate(&start));
  HEADROOM_CUDA_TRY(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) op();
  s.synchronize();
  std::vector<double> wall, event;
  wall.reserve(static_cast<std::size_t>(iterations));
  event.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    HEADROOM_CUDA_TRY(cudaEventRecord(start, s.get()));
    auto const t0 = std::chrono::steady_clock::now();
    op();
    auto const t1 = std::chrono::steady_clock::now();
    HEADROOM_CUDA_TRY(cudaEventRecord(stop, s.get()));
    HEADROOM_CUDA_TRY(cudaEventSynchronize(stop));
    float ms = 0;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
    wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    event.push_back(1000.0 * ms);
  }
  HEADROOM_CUDA_TRY(cudaEventDestroy(start));
  HEADROOM_CUDA_TRY(cudaEventDestroy(stop));
  return {median(wall), median(event)};
}

struct row {
  std::size_t keys = 0;
  timing nccl_device, nccl_staged, headroom_max, headroom_max_pageable, per_key, headroom_gather;
  timing device_resident, device_graph;
  double enqueue_us = 0, graph_launch_us = 0, read_us = 0;  // host time on the training thread
};

// Median host time of `enqueue` alone; the stream drains (untimed) between calls.
double host_us(cuda::stream_view s, int warmup, int iterations, std::function<void()> const& enqueue,
               std::function<void()> const& drain) {
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < warmup + iterations; ++i) {
    auto const t0 = std::chrono::steady_clock::now();
    enqueue();
    auto const t1 = std::chrono::steady_clock::now();
    s.synchronize();
    drain();
    if (i >= warmup) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) try {
  options const opt = parse(argc, argv);
  std::vector<std::size_t> const sizes = {8, 64, 512};
  std::vector<row> rows(sizes.size());
  std::string device_name;
  std::mutex m;

  nccl::launch_per_device(nccl::first_devices(2), [&](nccl::communicator& comm) {
    cuda::stream stream;
    cuda::stream_view const s = stream.view();
    ncclComm_t const raw = comm.get();
    if (comm.rank() == 0) {
      cudaDeviceProp prop{};
      HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
      std::lock_guard lock(m);
      device_name = prop.name;
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      std::size_t const keys = sizes[k];
      hs::reduce_plan const plan(keys);
      std::size_t const ws_bytes = staging::workspace_bytes(plan, comm.size());
      hs::workspace<cuda::device_resource, cuda::stream_view> dev(cuda::device_resource{}, s, ws_bytes);
      hs::workspace<cuda::pinned_resource, cuda::stream_view> pinned(cuda::pinned_resource{}, s, ws_bytes);
      hs::reducer<staging> pinned_reducer(plan, staging(dev.bytes(), pinned.bytes()));
      hs::reducer<staging> pageable_reducer(plan, staging(dev.bytes()));
      auto const report = make_report(comm.rank(), keys);

      // Correctness first: the reduced report must be each key's max over both ranks.
      auto const expect = [&] {
        auto const a = make_report(0, keys);
        auto const b = make_report(1, keys);
        hs::dynamic_report e;
        for (std::size_t i = 0; i < keys; ++i)
          e.set(a[i].name, hs::to_double(a[i].value) >= hs::to_double(b[i].value) ? a[i].value : b[i].value);
        return e;
      }();
      expects<logic_error>(pinned_reducer.max(report, comm, s) == expect, "bench_stats_reduce: wrong max for ", keys, " keys");
      expects<logic_error>(pageable_reducer.max(report, comm, s) == expect, "bench_stats_reduce: wrong max (pageable)");

      // Raw NCCL peers on the same bytes (keys x int64), host values in and out.
      std::vector<std::int64_t> host_words(keys);
      for (std::size_t i = 0; i < keys; ++i) host_words[i] = static_cast<std::int64_t>(i) * (comm.rank() + 1);
      auto* h_in = reinterpret_cast<std::int64_t*>(pinned.data());
      auto* h_out = h_in + keys;
      auto* d_in = reinterpret_cast<std::int64_t*>(dev.data());
      auto* d_out = d_in + keys;
      std::copy(host_words.begin(), host_words.end(), h_in);
      std::size_t const bytes = keys * sizeof(std::int64_t);

      auto nccl_device = [&] {
        HEADROOM_NCCL_TRY(ncclAllReduce(d_in, d_out, keys, ncclInt64, ncclMax, raw, s.get()));
        s.synchronize();
      };
      auto nccl_staged = [&] {
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s.get()));
        HEADROOM_NCCL_TRY(ncclAllReduce(d_in, d_out, keys, ncclInt64, ncclMax, raw, s.get()));
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s.get()));
        s.synchronize();
      };
      auto per_key = [&] {
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s.get()));
        for (std::size_t i = 0; i < keys; ++i)
          HEADROOM_NCCL_TRY(ncclAllReduce(d_in + i, d_out + i, 1, ncclInt64, ncclMax, raw, s.get()));
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s.get()));
        s.synchronize();
      };
      nccl_staged();
      for (std::size_t i = 0; i < keys; ++i)
        expects<logic_error>(h_out[i] == static_cast<std::int64_t>(i) * 2, "bench_stats_reduce: wrong NCCL staged max");

      hs::dynamic_report sink;
      auto headroom_max = [&] { sink = pinned_reducer.max(report, comm, s); };
      auto headroom_max_pageable = [&] { sink = pageable_reducer.max(report, comm, s); };
      hs::rank_table table;
      auto headroom_gather = [&] { table = pinned_reducer.gather(report, comm, s); };

      int const it = opt.iterations;
      int const per_key_it = std::max(10, it / static_cast<int>(keys / 8 + 1));
      row r;
      r.keys = keys;
      r.nccl_device = measure(s, opt.warmup, it, nccl_device);
      r.nccl_staged = measure(s, opt.warmup, it, nccl_staged);
      r.headroom_max = measure(s, opt.warmup, it, headroom_max);
      r.headroom_max_pageable = measure(s, opt.warmup, it, headroom_max_pageable);
      r.per_key = measure(s, std::min(opt.warmup, per_key_it), per_key_it, per_key);
      r.headroom_gather = measure(s, opt.warmup, it, headroom_gather);
      expects<logic_error>(sink == expect, "bench_stats_reduce: wrong max after timing");

      // Device-resident: the report's keys already live on the device (stored once here; a
      // kernel would write them in a real step), so a step costs the collective and one copy.
      using dev_reducer = hs::cuda::device_reducer<hs::dynamic_report, nccl::communicator>;
      hs::workspace<cuda::device_resource, cuda::stream_view> dr_dev(cuda::device_resource{}, s, dev_reducer::device_bytes(plan));
      hs::workspace<cuda::pinned_resource, cuda::stream_view> dr_pin(cuda::pinned_resource{}, s, dev_reducer::pinned_bytes(plan, 2));
      dev_reducer resident(comm, plan, report, dr_dev.bytes(), dr_pin.bytes(), s);
      expects<logic_error>(resident.max(s).get() == expect, "bench_stats_reduce: wrong device-resident max");
      auto device_resident = [&] { sink = resident.max(s).get(); };
      // Destroyed before the communicator even when a check throws (NCCL keeps resources for
      // the graphs that captured its collectives).
      struct graph_guard {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ~graph_guard() {
          if (exec != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaGraphExecDestroy(exec));
          if (graph != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaGraphDestroy(graph));
        }
      } g;
      HEADROOM_CUDA_TRY(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
      auto const captured = resident.max(s);
      HEADROOM_CUDA_TRY(cudaStreamEndCapture(s.get(), &g.graph));
      HEADROOM_CUDA_TRY(cudaGraphInstantiate(&g.exec, g.graph, 0));
      cudaGraphExec_t const exec = g.exec;
      auto device_graph = [&] {
        HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, s.get()));
        sink = captured.get();
      };
      HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, s.get()));
      expects<logic_error>(captured.get() == expect, "bench_stats_reduce: wrong graph-captured max");
      r.device_graph = measure(s, opt.warmup, it, device_graph);
      r.device_resident = measure(s, opt.warmup, it, device_resident);
      dev_reducer::pending_type pending;
      r.enqueue_us = host_us(s, opt.warmup, it, [&] { pending = resident.max(s); }, [&] { sink = pending.get(); });
      r.graph_launch_us = host_us(s, opt.warmup, it, [&] { HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, s.get())); }, [] {});
      r.read_us = host_us(s, opt.warmup, it, [&] { if (pending.ready()) sink = pending.get(); }, [] {});
      expects<logic_error>(sink == expect, "bench_stats_reduce: wrong device-resident max after timing");
      if (comm.rank() == 0) {
        std::lock_guard lock(m);
        rows[k] = r;
      }
    }
  });

  std::printf("stats::reducer::max on 2 GPUs (%s), medians of %d calls, microseconds (host wall / CUDA events)\n",
              device_name.c_str(), opt.iterations);
  std::printf("%6s %8s | %15s %15s %15s %15s %15s %15s | %9s %9s %9s\n", "keys", "bytes", "nccl_device", "nccl_staged",
              "headroom_max", "max_pageable", "per_key", "gather", "max/stag", "max/dev", "perkey/max");
  auto cell = [](timing t) {
    char b[32];
    std::snprintf(b, sizeof b, "%6.1f / %6.1f", t.wall_us, t.event_us);
    return std::string(b);
  };
  for (auto const& r : rows)
    std::printf("%6zu %8zu | %15s %15s %15s %15s %15s %15s | %9.3f %9.3f %9.1f\n", r.keys, r.keys * 8,
                cell(r.nccl_device).c_str(), cell(r.nccl_staged).c_str(), cell(r.headroom_max).c_str(),
                cell(r.headroom_max_pageable).c_str(), cell(r.per_key).c_str(), cell(r.headroom_gather).c_str(),
                r.headroom_max.wall_us / r.nccl_staged.wall_us, r.headroom_max.wall_us / r.nccl_device.wall_us,
                r.per_key.wall_us / r.headroom_max.wall_us);
  std::printf("\ndevice-resident reports (stats::cuda::device_reducer), same run; host us on the training thread\n");
  std::printf("%6s | %15s %15s %15s | %9s %9s | %9s %9s %9s\n", "keys", "nccl_device", "device_resident", "device_graph",
              "res/dev", "graph/dev", "enqueue", "launch", "read");
  for (auto const& r : rows)
    std::printf("%6zu | %15s %15s %15s | %9.3f %9.3f | %9.2f %9.2f %9.2f\n", r.keys, cell(r.nccl_device).c_str(),
                cell(r.device_resident).c_str(), cell(r.device_graph).c_str(), r.device_resident.wall_us / r.nccl_device.wall_us,
                r.device_graph.wall_us / r.nccl_device.wall_us, r.enqueue_us, r.graph_launch_us, r.read_us);
  std::ostringstream js;
  js << "{\"bench\":\"stats_reduce\",\"device\":\"" << device_name << "\",\"gpus\":2,\"iterations\":" << opt.iterations
     << ",\"unit\":\"us\",\"target_max_over_staged\":1.1,\"results\":[";
  auto put = [&](char const* name, timing t) {
    js << "\"" << name << "_wall_us\":" << t.wall_us << ",\"" << name << "_event_us\":" << t.event_us << ",";
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& r = rows[i];
    js << (i ? "," : "") << "{\"keys\":" << r.keys << ",\"bytes\":" << r.keys * 8 << ",";
    put("nccl_device", r.nccl_device);
    put("nccl_staged", r.nccl_staged);
    put("headroom_max", r.headroom_max);
    put("headroom_max_pageable", r.headroom_max_pageable);
    put("per_key", r.per_key);
    put("headroom_gather", r.headroom_gather);
    put("device_resident", r.device_resident);
    put("device_graph", r.device_graph);
    js << "\"enqueue_host_us\":" << r.enqueue_us << ",\"graph_launch_host_us\":" << r.graph_launch_us
       << ",\"read_host_us\":" << r.read_us << ",\"resident_over_device\":" << r.device_resident.wall_us / r.nccl_device.wall_us
       << ",\"graph_over_device\":" << r.device_graph.wall_us / r.nccl_device.wall_us << ",";
    js << "\"max_over_staged\":" << r.headroom_max.wall_us / r.nccl_staged.wall_us
       << ",\"max_over_device\":" << r.headroom_max.wall_us / r.nccl_device.wall_us
       << ",\"per_key_over_max\":" << r.per_key.wall_us / r.headroom_max.wall_us << "}";
  }
  js << "]}";
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "bench_stats_reduce: %s\n", e.what());
  return 1;
}
