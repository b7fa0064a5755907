// Bandwidth of cp::cuda::split and of gather's reorder (to_sequence_order) on one GPU, against
// peers in the same run:
//   memcpy    cudaMemcpyAsync device-to-device of the same bytes: the ceiling (target >= 90%)
//   indexed   the index-tensor approach (Megatron/AReaL index_select, TE's reorder): a
//             precomputed int64 index in device memory, one warp per row, 16-byte copies
// Shapes (issue 4): 16K and 128K tokens x 4096 bf16 (hidden states) for split and reorder, and
// the reorder at the logits width 151,936 bf16 (16K tokens; 128K when two 37 GiB copies fit).
// Batches: random packed sequences of 256..8192 tokens (multiples of 2*cp), cp in {2, 8}.
// Each case: `warmup` runs, then `iterations` timed runs, each bracketed by CUDA events recorded
// behind a short spin kernel (so host launch overhead is not timed); medians. Bandwidth counts
// bytes read + bytes written. The torch peer is bench/cp_torch.py.
//
//   bench_cp_bandwidth [--iterations 20] [--warmup 3]
// Output: a table, then one JSON line.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cp/partition.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"

using namespace headroom;
using bf16 = __nv_bfloat16;
using i64 = std::int64_t;

namespace {

struct options {
  int iterations = 20;
  int warmup = 3;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    auto value = [&]() -> int {
      expects(i + 1 < argc, "bench_cp_bandwidth: ", a, " needs a value");
      int const v = std::atoi(argv[++i]);
      expects(v >= 1, "bench_cp_bandwidth: ", a, " = ", v, ", expected >= 1");
      return v;
    };
    if (a == "--iterations")
      o.iterations = value();
    else if (a == "--warmup")
      o.warmup = value();
    else
      throw invalid_argument("bench_cp_bandwidth: unknown argument " + a + " (expected --iterations N, --warmup N)");
  }
  return o;
}

/// Padded cu_seqlens of `tokens` rows: sequences of 256..8192 rows, multiples of 2*cp.
std::vector<i64> packed_batch(i64 tokens, int cp, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  i64 const m = 2 * cp;
  std::uniform_int_distribution<i64> len(256 / m, 8192 / m);
  std::vector<i64> cu{0};
  while (cu.back() < tokens) cu.push_back(std::min(tokens, cu.back() + len(gen) * m));
  return cu;
}

struct device_bytes {
  void* p = nullptr;
  explicit device_bytes(std::size_t n) { HEADROOM_CUDA_TRY(cudaMalloc(&p, n)); HEADROOM_CUDA_TRY(cudaMemset(p, 0x3C, n)); }
  device_bytes(device_bytes const&) = delete;
  device_bytes& operator=(device_bytes const&) = delete;
  ~device_bytes() { HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p)); }
};

/// The index-tensor peer: out[r] = in[index[r]], one warp per row, 16-byte copies.
__global__ void indexed_rows_kernel(uint4 const* __restrict__ in, uint4* __restrict__ out, i64 const* __restrict__ index,
                                    i64 rows, i64 vectors_per_row) {
  i64 const warp = (blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x) / 32;
  int const lane = static_cast<int>(threadIdx.x % 32);
  i64 const warps = static_cast<i64>(gridDim.x) * blockDim.x / 32;
  for (i64 r = warp; r < rows; r += warps) {
    i64 const src = index[r];
    for (i64 v = lane; v < vectors_per_row; v += 32) out[r * vectors_per_row + v] = in[src * vectors_per_row + v];
  }
}

/// Keeps the GPU busy for `cycles` clocks while the host enqueues the timed work behind it, so launch
/// overhead on the host never shows up between the two events.
__global__ void spin_kernel(long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {
  }
}

double median_ms(headroom::cuda::stream_view s, options const& o, std::function<void()> const& op) {
  cudaEvent_t a, b;
  HEADROOM_CUDA_TRY(cudaEventCreate(&a));
  HEADROOM_CUDA_TRY(cudaEventCreate(&b));
  for (int i = 0; i < o.warmup; ++i) op();
  std::vector<double> ms;
  for (int i = 0; i < o.iterations; ++i) {
    spin_kernel<<<1, 1, 0, s.get()>>>(200000);  // ~0.1 ms of clock cycles
    HEADROOM_CUDA_TRY(cudaEventRecord(a, s.get()));
    op();
    HEADROOM_CUDA_TRY(cudaEventRecord(b, s.get()));
    HEADROOM_CUDA_TRY(cudaEventSynchronize(b));
    float t = 0;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  HEADROOM_CUDA_TRY(cudaEventDestroy(a));
  HEADROOM_CUDA_TRY(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct result {
  std::string op;
  i64 tokens, width;
  int cp;
  std::size_t bytes_out;
  double ours_ms, memcpy_ms, indexed_ms;
  [[nodiscard]] double gbps(double ms) const { return 2.0 * static_cast<double>(bytes_out) / (ms * 1e-3) / 1e9; }
};

result run_case(std::string const& op, i64 tokens, i64 width, int cp_size, options const& o, headroom::cuda::stream_view s) {
  auto const cu = packed_batch(tokens, cp_size, 42 + static_cast<std::uint64_t>(cp_size));
  cp::partition<> p(cu, cp_size, cp_size / 2);  // a middle rank: both chunks non-trivial
  cp::cuda::device_cu_seqlens dcu(p.global_cu_seqlens(), s);
  bool const is_split = op == "split";
  i64 const out_rows = is_split ? p.local_rows() : p.global_rows();
  std::size_t const row = static_cast<std::size_t>(width) * sizeof(bf16);
  std::size_t const in_bytes = static_cast<std::size_t>(p.global_rows()) * row;
  std::size_t const out_bytes = static_cast<std::size_t>(out_rows) * row;
  device_bytes in(in_bytes), out(out_bytes);
  auto const index_host = is_split ? p.local_index() : p.gather_index();
  device_bytes index(index_host.size() * sizeof(i64));
  HEADROOM_CUDA_TRY(cudaMemcpy(index.p, index_host.data(), index_host.size() * sizeof(i64), cudaMemcpyHostToDevice));
  auto const in_v = cp::matrix_view<bf16 const>(static_cast<bf16 const*>(in.p), p.global_rows(), width);
  auto const out_v = cp::matrix_view<bf16>(static_cast<bf16*>(out.p), out_rows, width);

  result r{op, tokens, width, cp_size, out_bytes, 0, 0, 0};
  r.ours_ms = median_ms(s, o, [&] {
    if (is_split)
      cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), in_v, out_v, s);
    else
      cp::cuda::to_sequence_order<cp::vector_policy::require_16>(p, dcu.view(), in_v, out_v, s);
  });
  r.memcpy_ms = median_ms(s, o, [&] { HEADROOM_CUDA_TRY(cudaMemcpyAsync(out.p, in.p, out_bytes, cudaMemcpyDeviceToDevice, s.get())); });
  int sms = 0, dev = 0;
  HEADROOM_CUDA_TRY(cudaGetDevice(&dev));
  HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  r.indexed_ms = median_ms(s, o, [&] {
    indexed_rows_kernel<<<sms * 8, 256, 0, s.get()>>>(static_cast<uint4 const*>(in.p), static_cast<uint4*>(out.p),
                                                       static_cast<i64 const*>(index.p), out_rows, static_cast<i64>(row / 16));
    HEADROOM_CUDA_CHECK_LAST();
  });
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  options const o = parse(argc, argv);
  int dev = 0;
  HEADROOM_CUDA_TRY(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
  headroom::cuda::stream stream;

  struct shape {
    char const* op;
    i64 tokens, width;
  };
  std::vector<shape> const shapes{{"split", 16384, 4096},         {"split", 131072, 4096},
                                  {"reorder", 16384, 4096},       {"reorder", 131072, 4096},
                                  {"reorder", 16384, 151936},     {"reorder", 131072, 151936}};
  std::vector<result> results;
  std::vector<std::string> skipped;
  for (auto const& sh : shapes) {
    for (int cp_size : {2, 8}) {
      std::size_t const row = static_cast<std::size_t>(sh.width) * sizeof(bf16);
      std::size_t const need = 2 * static_cast<std::size_t>(sh.tokens) * row + (std::size_t{1} << 30);
      std::size_t free_b = 0, total_b = 0;
      HEADROOM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
      if (need > free_b) {
        std::ostringstream why;
        why << sh.op << " " << sh.tokens << "x" << sh.width << " cp " << cp_size << ": needs " << (need >> 30)
            << " GiB, " << (free_b >> 30) << " GiB free";
        skipped.push_back(why.str());
        continue;
      }
      results.push_back(run_case(sh.op, sh.tokens, sh.width, cp_size, o, stream));
    }
  }

  std::printf("cp bandwidth on %s (%d SMs); medians of %d runs after %d warm-up; GB/s = (read + written) / time\n",
              prop.name, prop.multiProcessorCount, o.iterations, o.warmup);
  std::printf("%-8s %7s %7s %3s %10s | %9s %8s | %9s %8s | %9s %8s | %7s %7s\n", "op", "tokens", "width", "cp", "out MiB",
              "ours ms", "GB/s", "memcpy ms", "GB/s", "index ms", "GB/s", "vs cpy", "vs idx");
  for (auto const& r : results)
    std::printf("%-8s %7lld %7lld %3d %10.1f | %9.3f %8.0f | %9.3f %8.0f | %9.3f %8.0f | %6.1f%% %6.2fx\n", r.op.c_str(),
                static_cast<long long>(r.tokens), static_cast<long long>(r.width), r.cp,
                static_cast<double>(r.bytes_out) / (1 << 20), r.ours_ms, r.gbps(r.ours_ms), r.memcpy_ms,
                r.gbps(r.memcpy_ms), r.indexed_ms, r.gbps(r.indexed_ms), 100.0 * r.memcpy_ms / r.ours_ms,
                r.indexed_ms / r.ours_ms);
  for (auto const& s : skipped) std::printf("skipped: %s\n", s.c_str());

  std::ostringstream js;
  js << "{\"bench\":\"cp_bandwidth\",\"device\":\"" << prop.name << "\",\"iterations\":" << o.iterations
     << ",\"warmup\":" << o.warmup << ",\"dtype\":\"bfloat16\",\"results\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto const& r = results[i];
    js << (i ? "," : "") << "{\"op\":\"" << r.op << "\",\"tokens\":" << r.tokens << ",\"width\":" << r.width
       << ",\"cp\":" << r.cp << ",\"bytes_out\":" << r.bytes_out << ",\"ours_ms\":" << r.ours_ms
       << ",\"memcpy_ms\":" << r.memcpy_ms << ",\"indexed_ms\":" << r.indexed_ms << ",\"ours_gbps\":" << r.gbps(r.ours_ms)
       << ",\"memcpy_gbps\":" << r.gbps(r.memcpy_ms) << ",\"fraction_of_memcpy\":" << r.memcpy_ms / r.ours_ms << "}";
  }
  js << "],\"skipped\":" << skipped.size() << "}";
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "bench_cp_bandwidth: %s\n", e.what());
  return 1;
}
