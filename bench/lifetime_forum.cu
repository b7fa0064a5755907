// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// The PyTorch forum case on 2 GPUs (dev-discuss.pytorch.org, "FSDP & CUDACachingAllocator: an
// outsider newb perspective", and PyTorch PR #76861 on record_stream): tensor-parallel
// layers whose outputs are all-reduced on a communication stream. With record_stream semantics
// (`deferred`) a freed output stays out of reuse until the host sees the all-reduce complete,
// and the host runs ahead of the GPU, so memory grows with the depth of the queue. A
// `stream_ordered` release makes the compute stream wait on the device and frees at once.
//
// Per rank (one thread per GPU), per configuration, on a fresh cudaMemPool_t:
//   for each iteration, for each of `layers` layers:
//     y = x @ W[l]                  (cuBLAS bf16 GEMM, fp32 accumulate, batch x hidden)
//     all_reduce(y) on comm stream  (lifetime::all_reduce_async, then work.wait(compute))
//     free x with the policy; x = y; sample the pool's used / reserved bytes from the host
// Configurations: no_allreduce (baseline), stream_ordered, deferred, blocking.
//
// Output: a table, then one JSON line. The memory trace (one row per layer) goes to a CSV file
// for bench/lifetime_plot.py: --trace PATH, else $OUT/lifetime_memory_trace.csv when OUT is
// set, else ./lifetime_memory_trace.csv.
//
//   bench_lifetime_forum [--layers 8] [--hidden 8192] [--batch 4096] [--iterations 5]
//                        [--warmup 1] [--trace PATH]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
#include "headroom/lifetime/work.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"

using namespace headroom;
namespace lt = headroom::lifetime;
using bf16 = __nv_bfloat16;

namespace {

struct options {
  int layers = 8;
  int hidden = 8192;
  int batch = 4096;
  int iterations = 5;
  int warmup = 1;
  std::string trace;
};

options parse(int argc, char** argv) {
  options o;
  auto positive = [](char const* flag, char const* text) {
    char* end = nullptr;
    long const v = std::strtol(text, &end, 10);
    expects(end != text && *end == '\0' && v > 0 && v < (1L << 30), "bench_lifetime_forum: ", flag,
            " expects a positive integer, got '", text, "'");
    return static_cast<int>(v);
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    expects(i + 1 < argc, "bench_lifetime_forum: ", a, " needs a value");
    char const* v = argv[++i];
    if (a == "--layers") o.layers = positive("--layers", v);
    else if (a == "--hidden") o.hidden = positive("--hidden", v);
    else if (a == "--batch") o.batch = positive("--batch", v);
    else if (a == "--iterations") o.iterations = positive("--iterations", v);
    else if (a == "--warmup") o.warmup = std::string_view(v) == "0" ? 0 : positive("--warmup", v);
    else if (a == "--trace") o.trace = v;
    else throw invalid_argument(std::string("bench_lifetime_forum: unknown option ") + std::string(a) +
                                "; expected --layers, --hidden, --batch, --iterations, --warmup or --trace");
  }
  if (o.trace.empty()) {
    char const* out = std::getenv("OUT");
    o.trace = out != nullptr ? std::string(out) + "/lifetime_memory_trace.csv" : "lifetime_memory_trace.csv";
  }
  return o;
}

void cublas_try(cublasStatus_t s, char const* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(std::string("cuBLAS ") + what + " failed: " + cublasGetStatusName(s) + " (" +
                     cublasGetStatusString(s) + ")");
}

// Uniform values in [-scale, scale) from a hash of the index: reproducible, no curand needed.
__global__ void fill_uniform(bf16* p, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float const u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    p[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
  }
}

enum class config { no_allreduce, stream_ordered, deferred, blocking };
constexpr config all_configs[] = {config::no_allreduce, config::stream_ordered, config::deferred, config::blocking};
constexpr char const* name_of(config c) {
  switch (c) {
    case config::no_allreduce: return "no_allreduce";
    case config::stream_ordered: return "stream_ordered";
    case config::deferred: return "deferred";
    case config::blocking: return "blocking";
  }
  return "?";
}

struct sample {
  int iteration, layer;
  double t_ms;
  std::uint64_t used, reserved;
};

struct rank_result {
  std::uint64_t peak_used = 0, peak_reserved = 0;
  std::size_t peak_quarantined = 0;
  std::vector<float> ms_per_iteration;
  double checksum = 0.0;
  std::vector<sample> trace;
};

double median(std::vector<float> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t const m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Everything one rank needs that outlives the configurations: weights, input, cuBLAS.
struct rank_setup {
  rank_setup(options const& o, int rank) {
    std::size_t const w_elems = std::size_t(o.hidden) * o.hidden;
    std::size_t const x_elems = std::size_t(o.batch) * o.hidden;
    weights.resize(static_cast<std::size_t>(o.layers));
    float const w_scale = std::sqrt(3.0f / static_cast<float>(o.hidden));  // keeps the variance per layer
    for (int l = 0; l < o.layers; ++l) {
      HEADROOM_CUDA_TRY(cudaMalloc(&weights[static_cast<std::size_t>(l)], w_elems * sizeof(bf16)));
      fill_uniform<<<1024, 256>>>(weights[static_cast<std::size_t>(l)], w_elems, 1000u + static_cast<unsigned>(l), w_scale);
      HEADROOM_CUDA_CHECK_LAST();
    }
    HEADROOM_CUDA_TRY(cudaMalloc(&input, x_elems * sizeof(bf16)));
    fill_uniform<<<1024, 256>>>(input, x_elems, 7u + static_cast<unsigned>(rank), 1.0f);
    HEADROOM_CUDA_CHECK_LAST();
    HEADROOM_CUDA_TRY(cudaMalloc(&workspace, workspace_bytes));
    cublas_try(cublasCreate(&handle), "cublasCreate");
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }
  rank_setup(rank_setup const&) = delete;
  rank_setup& operator=(rank_setup const&) = delete;
  ~rank_setup() {
    if (handle != nullptr) cublasDestroy(handle);
    for (auto* w : weights) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(w));
    HEADROOM_CUDA_TRY_NOTHROW(cudaFree(input));
    HEADROOM_CUDA_TRY_NOTHROW(cudaFree(workspace));
  }

  // y[batch, hidden] = x[batch, hidden] @ W[hidden, hidden], row-major; in cuBLAS's column-major
  // terms y^T = W^T-as-stored @ x^T, i.e. C(hidden x batch) = A(hidden x hidden) * B(hidden x batch).
  void gemm(options const& o, bf16 const* x, bf16 const* w, bf16* y, cuda::stream_view s) {
    cublas_try(cublasSetStream(handle, s.get()), "cublasSetStream");
    cublas_try(cublasSetWorkspace(handle, workspace, workspace_bytes), "cublasSetWorkspace");
    float const alpha = 1.0f, beta = 0.0f;
    cublas_try(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, o.hidden, o.batch, o.hidden, &alpha, w, CUDA_R_16BF,
                            o.hidden, x, CUDA_R_16BF, o.hidden, &beta, y, CUDA_R_16BF, o.hidden, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  }

  static constexpr std::size_t workspace_bytes = 32 * MiB;
  std::vector<bf16*> weights;
  bf16* input = nullptr;
  void* workspace = nullptr;
  cublasHandle_t handle = nullptr;
};

// Runs one configuration with guards of type G allocated from `res`; `pool` is the cudaMemPool_t
// underneath (for the counters).
template <class G, class Resource>
void run_layers(options const& o, config c, rank_setup& setup, nccl::communicator& comm, Resource& res,
                cuda::async_resource& pool, cuda::stream_view compute, cuda::stream_view comm_stream, int iteration,
                bool record, rank_result& out, std::chrono::steady_clock::time_point t0) {
  std::size_t const act_bytes = std::size_t(o.batch) * o.hidden * sizeof(bf16);
  std::optional<G> x;  // the previous layer's output
  for (int l = 0; l < o.layers; ++l) {
    G y(res, compute, act_bytes, alignof(bf16));
    bf16 const* in = x ? static_cast<bf16 const*>(x->data()) : setup.input;
    setup.gemm(o, in, setup.weights[static_cast<std::size_t>(l)], static_cast<bf16*>(y.data()), compute);
    if (c != config::no_allreduce) {
      auto work = lt::all_reduce_async<bf16>(comm, y, reduce_op::sum, compute, comm_stream);
      work.wait(compute);
    }
    x = std::move(y);  // the previous output is released here, with G's policy
    if (record) {
      double const t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      out.trace.push_back({iteration, l, t, pool.used_bytes(), pool.reserved_bytes()});
    }
  }
  if (iteration + 1 == o.warmup + o.iterations) {
    // Checksum of the last output, to confirm the three all-reduce policies compute the same.
    std::vector<bf16> host(act_bytes / sizeof(bf16));
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), x->data(), act_bytes, cudaMemcpyDeviceToHost, compute.get()));
    compute.synchronize();
    double sum = 0.0;
    for (auto v : host) sum += std::fabs(static_cast<double>(__bfloat162float(v)));
    out.checksum = sum;
  }
}

template <class G, class Resource>
rank_result run_config(options const& o, config c, rank_setup& setup, nccl::communicator& comm, Resource& res,
                       cuda::async_resource& pool, cuda::stream_view compute, cuda::stream_view comm_stream,
                       lt::device_reclaimer<>* quarantine) {
  rank_result out;
  std::vector<cuda::event> marks;
  for (int i = 0; i <= o.iterations; ++i) marks.emplace_back(cuda::event_options{.timing = true});
  // Warm-up: cuBLAS heuristics, NCCL channels, the pool's first reservations. Then start clean.
  auto const t_warm = std::chrono::steady_clock::now();
  for (int i = 0; i < o.warmup; ++i)
    run_layers<G>(o, c, setup, comm, res, pool, compute, comm_stream, i, false, out, t_warm);
  compute.synchronize();
  comm_stream.synchronize();
  if (quarantine != nullptr) quarantine->synchronize_and_free();
  compute.synchronize();
  pool.reset_high_water_marks();
  comm.barrier(comm_stream);  // both ranks start the measured iterations together
  comm_stream.synchronize();

  auto const t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iterations; ++i) {
    marks[static_cast<std::size_t>(i)].record(compute);
    run_layers<G>(o, c, setup, comm, res, pool, compute, comm_stream, o.warmup + i, true, out, t0);
  }
  marks.back().record(compute);
  marks.back().synchronize();
  comm_stream.synchronize();
  for (int i = 0; i < o.iterations; ++i)
    out.ms_per_iteration.push_back(elapsed_ms(marks[static_cast<std::size_t>(i)], marks[static_cast<std::size_t>(i) + 1]));
  if (quarantine != nullptr) {
    out.peak_quarantined = quarantine->stats().peak_quarantined_bytes;
    quarantine->synchronize_and_free();
  }
  out.peak_used = pool.used_bytes_high();
  out.peak_reserved = pool.reserved_bytes_high();
  return out;
}

rank_result run_one(options const& o, config c, rank_setup& setup, nccl::communicator& comm) {
  cuda::async_resource pool(comm.device());  // fresh pool: reserved starts at 0
  cuda::stream compute, comm_stream;
  switch (c) {
    case config::no_allreduce:
    case config::stream_ordered:
      return run_config<lt::device_guard<lt::stream_ordered>>(o, c, setup, comm, pool, pool, compute, comm_stream,
                                                              nullptr);
    case config::blocking:
      return run_config<lt::device_guard<lt::blocking>>(o, c, setup, comm, pool, pool, compute, comm_stream, nullptr);
    case config::deferred: {
      lt::device_reclaimer<> quarantine(pool);
      return run_config<lt::device_deferred_guard<>>(o, c, setup, comm, quarantine, pool, compute, comm_stream,
                                                     &quarantine);
    }
  }
  throw logic_error("bench_lifetime_forum: unknown configuration");
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

}  // namespace

int main(int argc, char** argv) try {
  options const o = parse(argc, argv);
  constexpr int ranks = 2;
  constexpr std::size_t n_configs = std::size(all_configs);
  std::vector<std::vector<rank_result>> results(n_configs, std::vector<rank_result>(ranks));
  std::string device;

  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    rank_setup setup(o, comm.rank());
    for (std::size_t k = 0; k < n_configs; ++k)
      results[k][static_cast<std::size_t>(comm.rank())] = run_one(o, all_configs[k], setup, comm);
    if (comm.rank() == 0) device = device_name(comm.device());
  });

  // Report the worse rank of each configuration.
  struct row {
    std::uint64_t used, reserved;
    std::size_t quarantined;
    double ms;
    std::vector<float> ms_all;
    double checksum;
  };
  std::vector<row> rows;
  for (std::size_t k = 0; k < n_configs; ++k) {
    row r{0, 0, 0, 0.0, {}, results[k][0].checksum};
    for (auto const& rr : results[k]) {
      r.used = std::max(r.used, rr.peak_used);
      r.reserved = std::max(r.reserved, rr.peak_reserved);
      r.quarantined = std::max(r.quarantined, rr.peak_quarantined);
      r.ms = std::max(r.ms, median(rr.ms_per_iteration));
    }
    r.ms_all = results[k][0].ms_per_iteration;
    rows.push_back(r);
  }
  double const base_used = static_cast<double>(rows[0].used);
  double const so_ratio = static_cast<double>(rows[1].used) / base_used;
  bool const agree = rows[1].checksum == rows[2].checksum && rows[2].checksum == rows[3].checksum;

  std::printf("lifetime_forum: %d layers of [%d x %d] @ [%d x %d] bf16, all-reduce on a comm stream, 2 ranks, "
              "%d iterations (+%d warm-up), device %s\n",
              o.layers, o.batch, o.hidden, o.hidden, o.hidden, o.iterations, o.warmup, device.c_str());
  std::printf("%-16s %14s %14s %10s %14s %16s\n", "policy", "peak used", "peak reserved", "used/base", "ms/iter (med)",
              "peak quarantined");
  for (std::size_t k = 0; k < n_configs; ++k) {
    auto const& r = rows[k];
    std::printf("%-16s %14s %14s %10.3f %14.3f %16s\n", name_of(all_configs[k]), format_bytes(r.used).c_str(),
                format_bytes(r.reserved).c_str(), static_cast<double>(r.used) / base_used, r.ms,
                format_bytes(r.quarantined).c_str());
  }
  std::printf("stream_ordered peak used / no_allreduce peak used = %.4f (target <= 1.05: %s); "
              "all-reduce policies agree on the output: %s\n",
              so_ratio, so_ratio <= 1.05 ? "met" : "NOT met", agree ? "yes" : "NO");

  // Trace for bench/lifetime_plot.py.
  {
    std::ofstream csv(o.trace);
    expects(static_cast<bool>(csv), "bench_lifetime_forum: cannot write the trace to '", o.trace, "'");
    csv << "policy,rank,iteration,layer,t_ms,used_bytes,reserved_bytes\n";
    for (std::size_t k = 0; k < n_configs; ++k)
      for (int r = 0; r < ranks; ++r)
        for (auto const& s : results[k][static_cast<std::size_t>(r)].trace)
          csv << name_of(all_configs[k]) << ',' << r << ',' << s.iteration << ',' << s.layer << ',' << s.t_ms << ','
              << s.used << ',' << s.reserved << '\n';
    std::printf("memory trace: %s (plot: python3 bench/lifetime_plot.py %s docs/img/lifetime_memory.png)\n",
                o.trace.c_str(), o.trace.c_str());
  }

  std::ostringstream js;
  js << "{\"bench\":\"lifetime_forum\",\"device\":\"" << device << "\",\"ranks\":" << ranks << ",\"layers\":" << o.layers
     << ",\"hidden\":" << o.hidden << ",\"batch\":" << o.batch << ",\"iterations\":" << o.iterations << ",\"results\":[";
  for (std::size_t k = 0; k < n_configs; ++k) {
    auto const& r = rows[k];
    js << (k ? "," : "") << "{\"policy\":\"" << name_of(all_configs[k]) << "\",\"peak_used_bytes\":" << r.used
       << ",\"peak_reserved_bytes\":" << r.reserved << ",\"peak_quarantined_bytes\":" << r.quarantined
       << ",\"ms_per_iter_median\":" << r.ms << ",\"ms_per_iter_rank0\":[";
    for (std::size_t i = 0; i < r.ms_all.size(); ++i) js << (i ? "," : "") << r.ms_all[i];
    js << "]}";
  }
  js << "],\"stream_ordered_peak_ratio\":" << so_ratio << ",\"target_met\":" << (so_ratio <= 1.05 ? "true" : "false")
     << ",\"outputs_agree\":" << (agree ? "true" : "false") << "}";
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "bench_lifetime_forum failed: %s\n", e.what());
  return 1;
}
