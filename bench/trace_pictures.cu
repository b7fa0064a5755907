// SPDX-License-Identifier: Apache-2.0
// Memory snapshots of the seeds' two problems, recorded from C++ on 2 GPUs with trace/ and
// written in PyTorch's memory_viz format (one file per rank, dp coordinate = rank). On one GPU the
// forum cases run on a one-rank communicator (the all-reduce still runs on the communication
// stream, which is what the policies differ in) and the cp cases, which need cp = 2, are skipped.
//
//   forum_<policy>   the PyTorch forum case (bench/lifetime_forum.cu): layers whose
//                    outputs are all-reduced on a communication stream. `deferred` (the
//                    record_stream model) keeps each freed output until the host sees its
//                    all-reduce complete, so with the host running ahead the blocks pile up;
//                    `stream_ordered` frees at once in stream order.
//   cp_<policy>      the context-parallel last stage (cp = 2, dual_chunk): `full` gathers the
//                    [T, V] logits on every rank (plus a [T, V] workspace), `none` keeps the
//                    local [T/2, V] shard for a CP-local loss.
// Step 1 of 3 is profiled in each case (step 0 warms the pools up). Each step is a
// forward-like pass; blocks show their category (activation, communication, cp.logits,
// workspace) in the viewer's colours.
//
//   bench_trace_pictures [--out DIR]   default $OUT/trace_snapshots, else ./trace_snapshots
// Then: python3 bench/trace_pictures.py DIR (PNG, the viewer's style) and
//       python3 bench/trace_viz_check.py DIR (torch.cuda._memory_viz renders each snapshot).
// Output: a table (per case and rank: events, peak of active bytes in step 1), one JSON line.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/partition.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
#include "headroom/lifetime/work.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/trace.hpp"

using namespace headroom;
namespace lt = headroom::lifetime;
namespace tr = headroom::trace;
namespace fs = std::filesystem;

namespace {

constexpr int layers = 8;
constexpr std::size_t activation_bytes = 256 * MiB;
constexpr std::int64_t vocab = 32000;
constexpr std::int64_t tokens = 16384;  // 4 packed sequences of 4096

// Stands in for a layer's compute: about `us` microseconds on the device, so the host runs
// ahead of the GPU as it does in training.
__global__ void busy_kernel(float* data, std::size_t n, long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {
  }
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = 1.0f;
}

long long cycles_for_us(int device, int us) {
  int khz = 0;
  HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  return static_cast<long long>(khz) * us / 1000;
}

tr::profiler_config config_for(fs::path const& dir, nccl::communicator const& comm) {
  return {.enabled = true,
          .steps = {1},
          .output_dir = dir,
          .coordinates = {{"dp", comm.rank()}, {"cp", 0}},
          .device = comm.device()};
}

struct result {
  std::string name;
  int rank = 0;
  std::size_t events = 0;
  std::uint64_t peak_active = 0;
  std::string file;
};

using traced_pool = tr::recording_resource<cuda::async_resource, tr::recorder<>>;

template <class Policy>
result forum_case(nccl::communicator& comm, fs::path const& dir, char const* name) {
  int const rank = comm.rank();
  tr::profiler prof(config_for(dir / name, comm));
  cuda::async_resource pool(comm.device());
  traced_pool activations(pool, prof.recorder(), tr::categories::activation);
  cuda::stream compute, comm_stream;
  long long const cycles = cycles_for_us(comm.device(), 2000);
  std::size_t const n = activation_bytes / sizeof(float);

  auto run = [&](auto& resource) {
    using G = lt::guard<std::remove_reference_t<decltype(resource)>, cuda::stream_view, cuda::event, Policy>;
    std::optional<tr::step_snapshot> written;
    for (std::int64_t step = 0; step < 3; ++step) {
      prof.begin_step(step);
      std::optional<G> x;
      for (int l = 0; l < layers; ++l) {
        G y(resource, compute.view(), activation_bytes, 256);
        busy_kernel<<<132, 256, 0, compute.view().get()>>>(static_cast<float*>(y.data()), n, cycles);
        HEADROOM_CUDA_CHECK_LAST();
        auto work = lt::all_reduce_async<float>(comm, y, reduce_op::sum, compute.view(), comm_stream.view());
        work.wait(compute.view());
        if (x) {
          tr::free_requested(prof.recorder(), *x, tr::stream_id(compute.view()));
          x->release();
        }
        x = std::move(y);
      }
      if (x) {
        tr::free_requested(prof.recorder(), *x, tr::stream_id(compute.view()));
        x->release();
      }
      x.reset();
      compute.view().synchronize();
      comm_stream.view().synchronize();
      if constexpr (std::same_as<Policy, lt::deferred>) resource.synchronize_and_free();
      if (auto w = prof.end_step(step)) written = w;
    }
    return written;
  };
  std::optional<tr::step_snapshot> w;
  if constexpr (std::same_as<Policy, lt::deferred>) {
    lt::device_reclaimer<traced_pool> quarantine(activations);
    w = run(quarantine);
  } else {
    w = run(activations);
  }
  expects<logic_error>(w.has_value(), "bench_trace_pictures: step 1 was not written");
  return {name, rank, w->events, w->peak_active_bytes, w->pickle.string()};
}

template <class G>
result cp_case(nccl::communicator& comm, fs::path const& dir, char const* name) {
  int const rank = comm.rank();
  tr::profiler prof(config_for(dir / name, comm));
  cuda::async_resource pool(comm.device());
  traced_pool model(pool, prof.recorder(), tr::categories::activation);
  traced_pool logits(pool, prof.recorder(), tr::categories::cp_logits);
  traced_pool workspace(pool, prof.recorder(), tr::categories::workspace);
  cuda::stream stream;
  auto const s = stream.view();
  std::vector<std::int64_t> cu_host;
  for (std::int64_t t = 0; t <= tokens; t += tokens / 4) cu_host.push_back(t);
  cp::partition<> p(cu_host, comm.size(), rank);
  cp::cuda::device_cu_seqlens cu(p.global_cu_seqlens(), s);
  std::optional<tr::step_snapshot> written;
  for (std::int64_t step = 0; step < 3; ++step) {
    prof.begin_step(step);
    std::size_t const local_bytes = static_cast<std::size_t>(p.local_rows() * vocab) * sizeof(float);
    void* local = model.allocate(s, local_bytes);
    HEADROOM_CUDA_TRY(cudaMemsetAsync(local, 0, local_bytes, s.get()));
    auto const lv = cp::matrix_view<float const>(static_cast<float const*>(local), p.local_rows(), vocab);
    std::size_t const out_bytes = std::same_as<G, cp::gather_output::full>
                                      ? static_cast<std::size_t>(p.global_rows() * vocab) * sizeof(float)
                                      : 0;
    void* out = out_bytes ? logits.allocate(s, out_bytes) : nullptr;
    auto const r = cp::cuda::collect_output<G>(comm, p, cu.view(), lv,
                                               cp::matrix_view<float>(static_cast<float*>(out), out_bytes ? p.global_rows() : 0, vocab),
                                               workspace, s);
    // The loss's per-token vector over the rows the stage kept.
    std::size_t const loss_bytes = static_cast<std::size_t>(r.rows.rows) * sizeof(float);
    void* loss = model.allocate(s, loss_bytes);
    model.deallocate(s, loss, loss_bytes);
    if (out) logits.deallocate(s, out, out_bytes);
    model.deallocate(s, local, local_bytes);
    s.synchronize();
    if (auto w = prof.end_step(step)) written = w;
  }
  expects<logic_error>(written.has_value(), "bench_trace_pictures: step 1 was not written");
  return {name, rank, written->events, written->peak_active_bytes, written->pickle.string()};
}

}  // namespace

int main(int argc, char** argv) try {
  fs::path dir;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    expects(a == "--out" && i + 1 < argc, "bench_trace_pictures: unknown option '", a, "'; expected --out DIR");
    dir = argv[++i];
  }
  if (dir.empty()) {
    char const* out = std::getenv("OUT");
    dir = out != nullptr && *out != '\0' ? fs::path(out) / "trace_snapshots" : fs::path("trace_snapshots");
  }
  std::vector<result> results;
  std::mutex m;
  int const ranks = std::min(headroom::cuda::device_count(), 2);
  expects(ranks >= 1, "bench_trace_pictures: needs a CUDA device, found none");
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    std::vector<result> mine{forum_case<lt::stream_ordered>(comm, dir, "forum_stream_ordered"),
                             forum_case<lt::deferred>(comm, dir, "forum_deferred")};
    if (comm.size() == 2) {
      mine.push_back(cp_case<cp::gather_output::full>(comm, dir, "cp_full"));
      mine.push_back(cp_case<cp::gather_output::none>(comm, dir, "cp_none"));
    }
    std::lock_guard lock(m);
    results.insert(results.end(), mine.begin(), mine.end());
  });
  std::printf("trace pictures: memory_viz snapshots of step 1, %d rank(s), in %s\n", ranks, dir.string().c_str());
  if (ranks < 2) std::printf("cp_full / cp_none: skipped (cp = 2 needs 2 GPUs, this machine shows %d)\n", ranks);
  std::printf("%-22s %5s %8s %14s  %s\n", "case", "rank", "events", "peak active", "file");
  std::ostringstream js;
  js << "{\"bench\":\"trace_pictures\",\"dir\":\"" << dir.string() << "\",\"snapshots\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto const& r = results[i];
    std::printf("%-22s %5d %8zu %14s  %s\n", r.name.c_str(), r.rank, r.events, format_bytes(r.peak_active).c_str(),
                r.file.c_str());
    js << (i ? "," : "") << "{\"case\":\"" << r.name << "\",\"rank\":" << r.rank << ",\"events\":" << r.events
       << ",\"peak_active_bytes\":" << r.peak_active
       << ",\"file\":\"" << r.file << "\"}";
  }
  js << "]}";
  std::printf("render: python3 bench/trace_pictures.py %s; check: python3 bench/trace_viz_check.py %s\n",
              dir.string().c_str(), dir.string().c_str());
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "bench_trace_pictures failed: %s\n", e.what());
  return 1;
}
