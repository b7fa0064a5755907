// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// Peak device memory of the last pipeline stage on 2 GPUs (cp = 2) under each gather_output
// policy, for logits-sized tensors ([T, 151,936] bf16, Qwen's vocabulary; AReaL's PR #1223, which
// stopped gathering CP logits, reports 37 GiB per rank of gathered logits at 128K tokens).
//
// Each rank holds its local logits [T/cp, V] in a fresh cudaMemPool (cuda::async_resource);
// the pool's high-water mark is reset, then cp::cuda::collect_output runs with its temporaries
// from the same pool, and the mark is read after the stream drained. Reported per policy:
//   result   bytes of the buffer the stage hands on (none: the local shard itself, 0 extra)
//   peak     pool high-water mark during the stage, the local logits included
// `full` keeps [T, V] (cp x the local shard) and needs a [T, V] rank-major workspace while it
// reorders; `full/8K` is the same with the workspace bounded to 8K rows (whole sequences per
// all-gather, output_options::max_workspace_rows); `per_token` keeps [T] float vectors. NCCL's internal buffers are not
// in the pool and are not counted. Sizes whose `full` case does not fit are skipped and listed.
//
//   bench_cp_gather_memory [--tokens 16384,32768,131072] [--iterations 5]
// Output: a table, then one JSON line.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"

using namespace headroom;
using bf16 = __nv_bfloat16;
using i64 = std::int64_t;

namespace {

constexpr i64 vocab = 151936;

struct options {
  std::vector<i64> tokens{16384, 32768, 131072};
  int iterations = 5;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    expects(i + 1 < argc, "bench_cp_gather_memory: ", a, " needs a value");
    std::string const v = argv[++i];
    if (a == "--tokens") {
      o.tokens.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) {
        i64 const n = std::atoll(t.c_str());
        expects(n >= 4 && n % 4 == 0, "bench_cp_gather_memory: token count ", t, " must be a positive multiple of 4");
        o.tokens.push_back(n);
      }
    } else if (a == "--iterations") {
      o.iterations = std::atoi(v.c_str());
      expects(o.iterations >= 1, "bench_cp_gather_memory: --iterations ", v, ", expected >= 1");
    } else {
      throw invalid_argument("bench_cp_gather_memory: unknown argument " + a + " (expected --tokens a,b,c --iterations N)");
    }
  }
  return o;
}

std::vector<i64> packed_batch(i64 tokens, int cp, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  i64 const m = 2 * cp;
  std::uniform_int_distribution<i64> len(256 / m, 8192 / m);
  std::vector<i64> cu{0};
  while (cu.back() < tokens) cu.push_back(std::min(tokens, cu.back() + len(gen) * m));
  return cu;
}

// Per-token stand-in for a label log-prob: the first logit of each row, as float.
__global__ void first_logit_kernel(bf16 const* logits, float* out, i64 rows, i64 width) {
  for (i64 r = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; r < rows; r += static_cast<i64>(gridDim.x) * blockDim.x)
    out[r] = __bfloat162float(logits[r * width]);
}

struct row {
  i64 tokens;
  std::string policy;
  std::uint64_t local_bytes, result_bytes, peak_bytes, planned_extra;
  double ms;
};

template <class G>
row measure(nccl::communicator& comm, cp::partition<> const& p, cp::cuda::device_cu<i64> cu,
            headroom::cuda::async_resource& mr, headroom::cuda::stream_view s, int iterations,
            cp::output_options opts = {}, std::string label = std::string(G::name)) {
  i64 const T = p.global_rows();
  std::size_t const local_bytes = static_cast<std::size_t>(p.local_rows() * vocab) * sizeof(bf16);
  void* local = mr.allocate(s, local_bytes);
  HEADROOM_CUDA_TRY(cudaMemsetAsync(local, 0x3F, local_bytes, s.get()));
  auto const lv = cp::matrix_view<bf16 const>(static_cast<bf16 const*>(local), p.local_rows(), vocab);
  constexpr bool per_token = std::same_as<G, cp::gather_output::per_token>;
  constexpr bool full = std::same_as<G, cp::gather_output::full>;
  i64 const out_width = per_token ? 1 : vocab;
  std::size_t const elem = per_token ? sizeof(float) : sizeof(bf16);
  auto const plan = cp::plan_output<G>(p, out_width, elem, opts);
  s.synchronize();
  comm.barrier(s);
  s.synchronize();
  mr.reset_high_water_marks();
  cudaEvent_t a, b;
  HEADROOM_CUDA_TRY(cudaEventCreate(&a));
  HEADROOM_CUDA_TRY(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int it = 0; it < iterations; ++it) {
    HEADROOM_CUDA_TRY(cudaEventRecord(a, s.get()));
    void* out = plan.output_buffer_bytes ? mr.allocate(s, plan.output_buffer_bytes) : nullptr;
    if constexpr (full) {
      auto const r = cp::cuda::collect_output<G>(comm, p, cu, lv, cp::matrix_view<bf16>(static_cast<bf16*>(out), T, vocab), mr, s,
                                                 cp::no_per_token{}, opts);
      static_cast<void>(r);
    } else if constexpr (per_token) {
      auto fn = [](cp::matrix_view<bf16 const> in, cp::matrix_view<float> vec, headroom::cuda::stream_view st) {
        first_logit_kernel<<<264, 256, 0, st.get()>>>(in.data, vec.data, in.rows, in.width);
      };
      auto const r = cp::cuda::collect_output<G>(comm, p, cu, lv, cp::matrix_view<float>(static_cast<float*>(out), T, 1), mr, s, fn);
      static_cast<void>(r);
    } else {
      auto const r = cp::cuda::collect_output<G>(comm, p, cu, lv, cp::matrix_view<bf16>{}, mr, s);
      static_cast<void>(r);
    }
    // The engine would now compute the loss from the result; then the result is freed.
    mr.deallocate(s, out, plan.output_buffer_bytes);
    HEADROOM_CUDA_TRY(cudaEventRecord(b, s.get()));
    HEADROOM_CUDA_TRY(cudaEventSynchronize(b));
    float t = 0;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  s.synchronize();
  std::uint64_t const peak = mr.used_bytes_high();
  mr.deallocate(s, local, local_bytes);
  s.synchronize();
  HEADROOM_CUDA_TRY(cudaEventDestroy(a));
  HEADROOM_CUDA_TRY(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return {T, label, local_bytes, plan.output_buffer_bytes, peak, plan.extra_bytes(), ms[ms.size() / 2]};
}

double gib(std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ull << 30); }

}  // namespace

int main(int argc, char** argv) try {
  options const o = parse(argc, argv);
  int const n = headroom::cuda::device_count();
  expects(n >= 2, "bench_cp_gather_memory: needs 2 GPUs, found ", n);
  std::vector<row> rows;
  std::vector<std::string> skipped;
  std::mutex m;
  std::string device_name;
  nccl::launch_per_device({0, 1}, [&](nccl::communicator& comm) {
    headroom::cuda::stream stream;
    cudaDeviceProp prop{};
    HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
    for (i64 tokens : o.tokens) {
      auto const cu_host = packed_batch(tokens, comm.size(), 7);
      cp::partition<> p(cu_host, comm.size(), comm.rank());
      // Does `full` fit? local + [T, V] result + [T, V] workspace, plus 2 GiB of slack. (The
      // packed batches have sequences of at most 8192 rows, so `full/8K` is always legal.)
      std::size_t const full_need = static_cast<std::size_t>(p.local_rows() + 2 * p.global_rows()) * vocab * sizeof(bf16) +
                                    (std::size_t{2} << 30);
      std::size_t free_b = 0, total_b = 0;
      HEADROOM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
      // Both ranks must take the same decision, or one would wait in a collective alone.
      std::vector<std::int32_t> fits_host{full_need <= free_b ? 1 : 0};
      std::int32_t* fits = nullptr;
      HEADROOM_CUDA_TRY(cudaMalloc(&fits, sizeof(std::int32_t)));
      // On `stream`: a legacy-stream cudaMemcpy may return before the bytes land, unordered
      // against the all-reduce on the non-blocking stream.
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(fits, fits_host.data(), sizeof(std::int32_t), cudaMemcpyHostToDevice, stream.get()));
      comm.all_reduce(std::span<std::int32_t const>(fits, 1), std::span<std::int32_t>(fits, 1), reduce_op::min, stream);
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(fits_host.data(), fits, sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream.get()));
      stream.synchronize();
      HEADROOM_CUDA_TRY(cudaFree(fits));
      if (fits_host[0] == 0) {
        if (comm.rank() == 0) {
          std::ostringstream why;
          why << tokens << " tokens: full needs " << gib(full_need) << " GiB, " << gib(free_b) << " GiB free";
          std::lock_guard lock(m);
          skipped.push_back(why.str());
        }
        continue;
      }
      headroom::cuda::async_resource mr(comm.device());  // a fresh pool: its marks are ours alone
      cp::cuda::device_cu_seqlens cu(p.global_cu_seqlens(), stream);
      auto const r_none = measure<cp::gather_output::none>(comm, p, cu.view(), mr, stream, o.iterations);
      auto const r_pt = measure<cp::gather_output::per_token>(comm, p, cu.view(), mr, stream, o.iterations);
      auto const r_full = measure<cp::gather_output::full>(comm, p, cu.view(), mr, stream, o.iterations);
      // The same gather with its workspace bounded to one 8K-token chunk of whole sequences.
      auto const r_chunked = measure<cp::gather_output::full>(comm, p, cu.view(), mr, stream, o.iterations,
                                                              cp::output_options{8192}, "full/8K");
      if (comm.rank() == 0) {
        std::lock_guard lock(m);
        device_name = prop.name;
        rows.push_back(r_none);
        rows.push_back(r_pt);
        rows.push_back(r_full);
        rows.push_back(r_chunked);
      }
    }
  });

  std::printf("cp gather_output memory on 2 x %s, cp = 2, logits [T, %lld] bf16 (rank 0; medians of %d runs)\n",
              device_name.c_str(), static_cast<long long>(vocab), o.iterations);
  std::printf("%8s %-10s %12s %12s %12s %12s %10s %9s\n", "tokens", "policy", "local GiB", "result GiB", "planned GiB",
              "peak GiB", "peak/none", "ms");
  for (auto const& r : rows) {
    auto const none = std::find_if(rows.begin(), rows.end(), [&](row const& x) { return x.tokens == r.tokens && x.policy == "none"; });
    std::printf("%8lld %-10s %12.2f %12.3f %12.2f %12.2f %9.2fx %9.3f\n", static_cast<long long>(r.tokens), r.policy.c_str(),
                gib(r.local_bytes), gib(r.result_bytes), gib(r.planned_extra), gib(r.peak_bytes),
                static_cast<double>(r.peak_bytes) / static_cast<double>(none->peak_bytes), r.ms);
  }
  for (auto const& s : skipped) std::printf("skipped: %s\n", s.c_str());
  std::ostringstream js;
  js << "{\"bench\":\"cp_gather_memory\",\"device\":\"" << device_name << "\",\"cp\":2,\"vocab\":" << vocab << ",\"results\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& r = rows[i];
    js << (i ? "," : "") << "{\"tokens\":" << r.tokens << ",\"policy\":\"" << r.policy << "\",\"local_bytes\":" << r.local_bytes
       << ",\"result_bytes\":" << r.result_bytes << ",\"planned_extra_bytes\":" << r.planned_extra
       << ",\"peak_bytes\":" << r.peak_bytes << ",\"ms\":" << r.ms << "}";
  }
  js << "],\"skipped\":" << skipped.size() << "}";
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "bench_cp_gather_memory: %s\n", e.what());
  return 1;
}
