// SPDX-License-Identifier: Apache-2.0
// Bandwidth of cp::cuda::split and of gather's reorder (to_sequence_order) on one GPU, against
// peers in the same run:
//   memcpy    cudaMemcpyAsync device-to-device of the same bytes: the ceiling (target >= 90%)
//   indexed   the index-tensor approach (Megatron/AReaL index_select, TE's reorder): a
//             precomputed int64 index in device memory, one warp per row, 16-byte copies
// Shapes: 16K and 128K tokens x 4096 bf16 (hidden states) for split and reorder, and
// the reorder at the logits width 151,936 bf16 (16K tokens; 128K when two 37 GiB copies fit).
// Batches: random packed sequences of 256..8192 tokens (multiples of 2*cp), cp in {2, 8}.
// Each case: `warmup` runs, then `iterations` timed runs, each bracketed by CUDA events recorded
// behind a short spin kernel (so host launch overhead is not timed); medians. Small cases rotate
// through several buffer sets ("sets": enough that four L2s of traffic pass between two uses of
// one), each timed run covering one pass: so a 16 MiB split reads memory, not the L2 the previous
// run filled, and spans many event-timer ticks. Bandwidth counts bytes read + bytes written.
// The torch peer is bench/cp_torch.py.
//
// Gather on 2 GPUs, cp = 2, 16K and 128K x 4096 and 16K x 151936 bf16: the whole
// device gather against the bare ncclAllGather of the same bytes (the target: <= 1.1x):
//   all_gather     ncclAllGather of the local rows into a [T, w] buffer (rank-major): the floor
//   serial         cp::cuda::gather: one all-gather into a workspace, then the reorder kernel
//   pipelined/K    cp::cuda::gather_pipeline with K chunks (defaultK: the library's default): own
//                  rows placed beside the all-gather, peers' rows of chunk c-1 beside chunk c's
//   in_place       cp::cuda::gather_in_place: one ncclGroup of send/recv per (sequence, chunk)
//                  straight into the sequence positions, plus a kernel placing the own rows
// Each output is compared with the serial gather's, byte for byte, before timing. Timing: both
// ranks run a short spin kernel, then the op between two events; rank 0's medians.
//
// The one-GPU ops and their peers are timed interleaved (each iteration runs ours, memcpy and the
// index kernel in turn), so a drift of the clock or of a neighbour's load hits all three alike.
//
//   bench_cp_bandwidth [--iterations 20] [--warmup 3] [--no-gather] [--repeat N] [--runs-grid]
//                      [--case OP:TOKENS:WIDTH:CP ...]
// (--case, repeatable: only those rows, e.g. --case split:16384:4096:8 under ncu)
// --repeat N: the one-GPU table N times; then per row the median over the repetitions of each
//   time, and of the fraction of memcpy with its range (the ">= 90 % on every row" check).
// --runs-grid: for rows that take the runs kernel, also time it on other grids (one round per
//   block, the default; the previous 4 blocks per resident slot; 1 per slot), each against memcpy.
// Output: tables, then one JSON line.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/cp/cuda/in_place_gather.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cp/cuda/pipelined_gather.cuh"
#include "headroom/cuda/device.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"
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
  int repeat = 1;         // --repeat N: the one-GPU table N times, medians per row
  bool runs_grid = false;  // --runs-grid: the runs kernel on other grids too
  bool gather = true;  // --no-gather: the one-GPU rows only (e.g. under a profiler)
  std::vector<std::string> cases;  // --case OP:TOKENS:WIDTH:CP (repeatable): only these rows
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
    if (a == "--no-gather")
      o.gather = false;
    else if (a == "--runs-grid")
      o.runs_grid = true;
    else if (a == "--repeat")
      o.repeat = value();
    else if (a == "--iterations")
      o.iterations = value();
    else if (a == "--warmup")
      o.warmup = value();
    else if (a == "--case") {
      expects(i + 1 < argc, "bench_cp_bandwidth: --case needs a value OP:TOKENS:WIDTH:CP (e.g. split:16384:4096:8)");
      o.cases.emplace_back(argv[++i]);
    } else
      throw invalid_argument("bench_cp_bandwidth: unknown argument " + a +
                             " (expected --iterations N, --warmup N, --repeat N, --runs-grid, --no-gather, --case OP:TOKENS:WIDTH:CP)");
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

/// Device bytes filled with 0x3C in order on `s`. The fill is a cudaMemsetAsync on the stream that
/// will use the buffer: the bench's streams are non-blocking, so a cudaMemset (legacy stream,
/// asynchronous for device memory) could still be running when a kernel on `s` reads the buffer.
struct device_bytes {
  void* p = nullptr;
  device_bytes(std::size_t n, headroom::cuda::stream_view s) {
    HEADROOM_CUDA_TRY(cudaMalloc(&p, n));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(p, 0x3C, n, s.get()));
  }
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

/// Word i of `p` = (i, ~i) as two 64-bit halves: every 16-byte word of the checked input differs,
/// so a row or word in the wrong place (or not written) shows in the word-for-word check.
__global__ void fill_distinct_words(uint4* p, i64 n) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    auto const u = static_cast<std::uint64_t>(i);
    p[i] = make_uint4(static_cast<unsigned>(u), static_cast<unsigned>(u >> 32), ~static_cast<unsigned>(u),
                      ~static_cast<unsigned>(u >> 32));
  }
}

/// Keeps the GPU busy for `cycles` clocks while the host enqueues the timed work behind it, so launch
/// overhead on the host never shows up between the two events.
__global__ void spin_kernel(long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {
  }
}

/// Median milliseconds of one `op`. Each sample runs op(0), ..., op(sets - 1) back to back between
/// the two events and divides by `sets`: with several buffer sets every call reads memory the
/// previous ones did not leave in L2, and short ops span many event-timer ticks.
double median_ms(headroom::cuda::stream_view s, options const& o, int sets, std::function<void(int)> const& op) {
  cudaEvent_t a, b;
  HEADROOM_CUDA_TRY(cudaEventCreate(&a));
  HEADROOM_CUDA_TRY(cudaEventCreate(&b));
  for (int i = 0; i < o.warmup; ++i)
    for (int k = 0; k < sets; ++k) op(k);
  std::vector<double> ms;
  for (int i = 0; i < o.iterations; ++i) {
    spin_kernel<<<1, 1, 0, s.get()>>>(200000);  // ~0.1 ms of clock cycles
    HEADROOM_CUDA_TRY(cudaEventRecord(a, s.get()));
    for (int k = 0; k < sets; ++k) op(k);
    HEADROOM_CUDA_TRY(cudaEventRecord(b, s.get()));
    HEADROOM_CUDA_TRY(cudaEventSynchronize(b));
    float t = 0;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / sets);
  }
  HEADROOM_CUDA_TRY(cudaEventDestroy(a));
  HEADROOM_CUDA_TRY(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
double median_ms(headroom::cuda::stream_view s, options const& o, std::function<void()> const& op) {
  return median_ms(s, o, 1, [&](int) { op(); });
}

/// Waits for `s`; a failure (a kernel fault surfaces here) names the row and the op that ran.
void synchronize_op(headroom::cuda::stream_view s, std::string const& row, std::string const& op, char const* when) {
  cudaError_t const st = cudaStreamSynchronize(s.get());
  if (st != cudaSuccess)
    throw cuda_error(headroom::detail::concat("bench_cp_bandwidth: ", row, ": ", op, " failed (", when, "): ",
                                              cudaGetErrorName(st), " (", cudaGetErrorString(st), ")"));
}

struct named_op {
  std::string name;
  std::function<void(int)> run;
};

/// Median milliseconds of each of `ops`, timed in turn within every iteration (as median_ms).
/// Each op is synchronized after its warm-up and its timed runs, so a fault names its row and op.
std::vector<double> interleaved_median_ms(headroom::cuda::stream_view s, options const& o, int sets,
                                          std::string const& row, std::vector<named_op> const& ops) {
  cudaEvent_t a, b;
  HEADROOM_CUDA_TRY(cudaEventCreate(&a));
  HEADROOM_CUDA_TRY(cudaEventCreate(&b));
  for (auto const& op : ops) {
    for (int i = 0; i < o.warmup; ++i)
      for (int k = 0; k < sets; ++k) op.run(k);
    synchronize_op(s, row, op.name, "warm-up");
  }
  std::vector<std::vector<double>> ms(ops.size());
  for (int i = 0; i < o.iterations; ++i)
    for (std::size_t j = 0; j < ops.size(); ++j) {
      spin_kernel<<<1, 1, 0, s.get()>>>(200000);
      HEADROOM_CUDA_TRY(cudaEventRecord(a, s.get()));
      for (int k = 0; k < sets; ++k) ops[j].run(k);
      HEADROOM_CUDA_TRY(cudaEventRecord(b, s.get()));
      synchronize_op(s, row, ops[j].name, "timed run");
      float t = 0;
      HEADROOM_CUDA_TRY(cudaEventElapsedTime(&t, a, b));
      ms[j].push_back(t / sets);
    }
  HEADROOM_CUDA_TRY(cudaEventDestroy(a));
  HEADROOM_CUDA_TRY(cudaEventDestroy(b));
  std::vector<double> out;
  for (auto& m : ms) {
    std::sort(m.begin(), m.end());
    out.push_back(m[m.size() / 2]);
  }
  return out;
}

template <class T>
T median_of(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// The runs kernel on one grid (--runs-grid), against memcpy timed beside it.
struct runs_grid_result {
  std::string grid;
  i64 blocks;
  double ms, memcpy_ms;
};

struct result {
  std::string op;
  i64 tokens, width;
  int cp;
  std::size_t bytes_out;
  int sets;  // buffer sets rotated through (rotation_sets)
  double ours_ms, memcpy_ms, indexed_ms;
  std::string kernel;                  // "runs" or "tiled": which kernel the op took
  std::vector<runs_grid_result> grids;  // --runs-grid
  double fraction = 0;                        // memcpy time / ours (the median over --repeat)
  double fraction_min = 0, fraction_max = 0;  // its range over the repetitions
  [[nodiscard]] double gbps(double ms) const { return 2.0 * static_cast<double>(bytes_out) / (ms * 1e-3) / 1e9; }
};

/// Buffer sets a case rotates through so that each call's bytes (read + written) are out of
/// L2 by the time they come round again: four L2s of traffic between two uses (at most 16 sets).
int rotation_sets(std::size_t touched_bytes) {
  int dev = 0, l2 = 0;
  HEADROOM_CUDA_TRY(cudaGetDevice(&dev));
  HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  std::size_t const want = 4 * static_cast<std::size_t>(l2);
  return static_cast<int>(std::clamp<std::size_t>((want + touched_bytes - 1) / touched_bytes, 1, 16));
}

/// Words of `a` and `b` that differ (counted into *bad).
__global__ void count_mismatches(uint4 const* a, uint4 const* b, i64 n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    uint4 const x = a[i], y = b[i];
    mine += (x.x != y.x) || (x.y != y.y) || (x.z != y.z) || (x.w != y.w);
  }
  if (mine != 0) atomicAdd(bad, mine);
}

result run_case(std::string const& op, i64 tokens, i64 width, int cp_size, options const& o, headroom::cuda::stream_view s) {
  auto const cu = packed_batch(tokens, cp_size, 42 + static_cast<std::uint64_t>(cp_size));
  cp::partition<> p(cu, cp_size, cp_size / 2);  // a middle rank: both chunks non-trivial
  cp::cuda::device_cu_seqlens dcu(p.global_cu_seqlens(), s);
  bool const is_split = op == "split";
  i64 const out_rows = is_split ? p.local_rows() : p.global_rows();
  std::size_t const row = static_cast<std::size_t>(width) * sizeof(bf16);
  std::size_t const in_bytes = static_cast<std::size_t>(p.global_rows()) * row;
  std::size_t const out_bytes = static_cast<std::size_t>(out_rows) * row;
  int const sets = rotation_sets(2 * out_bytes);
  std::vector<std::unique_ptr<device_bytes>> in, out;
  for (int k = 0; k < sets; ++k) {
    in.push_back(std::make_unique<device_bytes>(in_bytes, s));
    out.push_back(std::make_unique<device_bytes>(out_bytes, s));
  }
  std::ostringstream row_name;
  row_name << op << " " << tokens << "x" << width << " cp " << cp_size;
  // The index peer's rows: one input row (< the input's rows) per output row of this row's shape.
  auto const index_host = is_split ? p.local_index() : p.gather_index();
  expects<logic_error>(static_cast<i64>(index_host.size()) == out_rows, "bench_cp_bandwidth: ", row_name.str(),
                       ": index has ", index_host.size(), " entries, expected ", out_rows, " (output rows)");
  for (std::size_t r = 0; r < index_host.size(); ++r)
    expects<logic_error>(index_host[r] >= 0 && index_host[r] < p.global_rows(), "bench_cp_bandwidth: ", row_name.str(),
                         ": index[", r, "] = ", index_host[r], ", expected in [0, ", p.global_rows(), ") (input rows)");
  // Copied in order on `s` (the stream the index kernel runs on), not with cudaMemcpy: a pageable
  // cudaMemcpy may return before its DMA lands, and the legacy stream it uses does not order the
  // non-blocking `s`: the index kernel could read the 0x3C fill as row 0x3C3C3C3C3C3C3C3C (an
  // illegal address, seen at 128K x 4096 cp 8, whose 128 KiB index is one staged chunk).
  device_bytes index(index_host.size() * sizeof(i64), s);
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(index.p, index_host.data(), index_host.size() * sizeof(i64), cudaMemcpyHostToDevice, s.get()));
  fill_distinct_words<<<1024, 256, 0, s.get()>>>(static_cast<uint4*>(in[0]->p), static_cast<i64>(in_bytes / 16));
  HEADROOM_CUDA_CHECK_LAST();
  HEADROOM_CUDA_TRY(cudaStreamSynchronize(s.get()));  // index_host is pageable; the fills are done

  // The kernel the op takes (ops.cuh): the runs kernel when the copy is small enough and its
  // runs fit, else the tiled kernel.
  auto const plan = cp::plan_copy<cp::vector_policy::require_16>(row, {{"input", in[0]->p}, {"output", out[0]->p}},
                                                                 "bench_cp_bandwidth");
  cp::row_runs runs;
  bool const takes_runs = cp::cuda::detail::runs_kernel_size(out_rows, plan) &&
                          (is_split ? cp::split_runs(p, runs) : cp::sequence_order_runs(p, runs));

  result r{op, tokens, width, cp_size, out_bytes, sets, 0, 0, 0, takes_runs ? "runs" : "tiled", {}, 0, 0, 0};
  auto const ours = [&](int k) {
    auto const in_v = cp::matrix_view<bf16 const>(static_cast<bf16 const*>(in[k]->p), p.global_rows(), width);
    auto const out_v = cp::matrix_view<bf16>(static_cast<bf16*>(out[k]->p), out_rows, width);
    if (is_split)
      cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), in_v, out_v, s);
    else
      cp::cuda::to_sequence_order<cp::vector_policy::require_16>(p, dcu.view(), in_v, out_v, s);
  };
  auto const memcpy_op = [&](int k) {
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(out[k]->p, in[k]->p, out_bytes, cudaMemcpyDeviceToDevice, s.get()));
  };
  int sms = 0, dev = 0;
  HEADROOM_CUDA_TRY(cudaGetDevice(&dev));
  HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  auto const indexed = [&](int k) {
    indexed_rows_kernel<<<sms * 8, 256, 0, s.get()>>>(static_cast<uint4 const*>(in[k]->p), static_cast<uint4*>(out[k]->p),
                                                       static_cast<i64 const*>(index.p), out_rows, static_cast<i64>(row / 16));
    HEADROOM_CUDA_CHECK_LAST();
  };
  row_name << " (" << r.kernel << " kernel, " << sets << " sets)";
  std::string const row_desc = row_name.str();
  std::fprintf(stderr, "bench_cp_bandwidth: %s\n", row_desc.c_str());  // a crash names its row
  // Before timing: ours must equal the index kernel's output, word for word (rows up to 1 GiB).
  if (out_bytes <= (std::size_t{1} << 30)) {
    device_bytes ref(out_bytes, s), bad(sizeof(unsigned long long), s);
    indexed(0);
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(ref.p, out[0]->p, out_bytes, cudaMemcpyDeviceToDevice, s.get()));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(out[0]->p, 0, out_bytes, s.get()));
    synchronize_op(s, row_desc, "index kernel", "reference");
    ours(0);
    synchronize_op(s, row_desc, "ours", "checked run");
    HEADROOM_CUDA_TRY(cudaMemsetAsync(bad.p, 0, sizeof(unsigned long long), s.get()));
    count_mismatches<<<1024, 256, 0, s.get()>>>(static_cast<uint4 const*>(out[0]->p), static_cast<uint4 const*>(ref.p),
                                                static_cast<i64>(out_bytes / 16), static_cast<unsigned long long*>(bad.p));
    HEADROOM_CUDA_CHECK_LAST();
    unsigned long long n = 0;
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(&n, bad.p, sizeof n, cudaMemcpyDeviceToHost, s.get()));
    synchronize_op(s, row_desc, "mismatch count", "check");
    expects<logic_error>(n == 0, "bench_cp_bandwidth: ", row_desc, ": ", n,
                         " 16-byte words differ from the index kernel's output");
  }
  auto const ms = interleaved_median_ms(s, o, sets, row_desc, {{"ours", ours}, {"memcpy", memcpy_op}, {"index kernel", indexed}});
  r.ours_ms = ms[0];
  r.memcpy_ms = ms[1];
  r.indexed_ms = ms[2];
  r.fraction = r.fraction_min = r.fraction_max = r.memcpy_ms / r.ours_ms;
  if (o.runs_grid && takes_runs) {
    namespace cd = cp::cuda::detail;
    i64 const per_round = i64{cd::block_threads} * cd::runs_unroll;
    i64 const rounds = (out_rows * static_cast<i64>(plan.vectors_per_row) + per_round - 1) / per_round;
    i64 const resident = cd::resident_blocks(cd::runs_kernel_of(plan.vector_bytes));
    struct grid {
      std::string name;
      i64 blocks;
    };
    for (grid const& g : {grid{"default", cd::runs_grid(rounds, plan.vector_bytes)}, grid{"1 round/block", rounds},
                          grid{"2 rounds/block", (rounds + 1) / 2}, grid{"4 x resident", 4 * resident},
                          grid{"1 x resident", resident}}) {
      auto const timed = interleaved_median_ms(
          s, o, sets, row_desc,
          {{"runs kernel on " + std::to_string(g.blocks) + " blocks (" + g.name + ")",
            [&](int k) { cd::launch_copy_runs(runs, in[k]->p, out[k]->p, plan, s, "bench_cp_bandwidth", g.blocks); }},
           {"memcpy", memcpy_op}});
      r.grids.push_back({g.name, std::min(g.blocks, rounds), timed[0], timed[1]});
    }
  }
  return r;
}

// ---- gather on 2 GPUs ----------------------------------------------------------------------

struct gather_result {
  std::string method;
  i64 tokens, width;
  double ms;
};

std::vector<gather_result> gather_on_two_gpus(options const& o, std::string& device_name, std::vector<std::string>& notes) {
  std::vector<gather_result> results;
  std::mutex m;
  struct shape {
    i64 tokens, width;
  };
  std::vector<shape> const shapes{{16384, 4096}, {131072, 4096}, {16384, 151936}};
  nccl::launch_per_device(nccl::first_devices(2), [&](nccl::communicator& comm) {
    headroom::cuda::stream stream;
    auto const s = stream.view();
    if (comm.rank() == 0) {
      cudaDeviceProp prop{};
      HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
      std::lock_guard lock(m);
      device_name = prop.name;
    }
    for (auto const& sh : shapes) {
      auto const cu = packed_batch(sh.tokens, comm.size(), 77);
      cp::partition<> p(cu, comm.size(), comm.rank());
      cp::cuda::device_cu_seqlens dcu(p.global_cu_seqlens(), s);
      std::size_t const row = static_cast<std::size_t>(sh.width) * sizeof(bf16);
      std::size_t const local_bytes = static_cast<std::size_t>(p.local_rows()) * row;
      std::size_t const full_bytes = static_cast<std::size_t>(p.global_rows()) * row;
      device_bytes local(local_bytes, s), out(full_bytes, s), ref(full_bytes, s), ws(full_bytes, s);
      device_bytes bad(sizeof(unsigned long long), s);
      // All on `s`, after the 0x3C fills: ranks differ, so misplaced rows show.
      HEADROOM_CUDA_TRY(cudaMemsetAsync(local.p, 0x11 + comm.rank(), local_bytes, s.get()));
      // Distinct rows: stamp each local row's first 8 bytes with (rank, row).
      std::vector<i64> stamp(static_cast<std::size_t>(p.local_rows()));
      for (i64 r = 0; r < p.local_rows(); ++r) stamp[static_cast<std::size_t>(r)] = (i64{comm.rank()} << 40) | r;
      HEADROOM_CUDA_TRY(cudaMemcpy2DAsync(local.p, row, stamp.data(), sizeof(i64), sizeof(i64), stamp.size(),
                                          cudaMemcpyHostToDevice, s.get()));
      stream.synchronize();  // stamp is pageable host memory
      auto const lv = cp::matrix_view<bf16 const>(static_cast<bf16 const*>(local.p), p.local_rows(), sh.width);
      auto const ov = cp::matrix_view<bf16>(static_cast<bf16*>(out.p), p.global_rows(), sh.width);
      auto const rv = cp::matrix_view<bf16>(static_cast<bf16*>(ref.p), p.global_rows(), sh.width);
      auto const wv = cp::matrix_view<bf16>(static_cast<bf16*>(ws.p), p.global_rows(), sh.width);

      cp::cuda::gather<cp::vector_policy::require_16>(comm, p, dcu.view(), lv, rv, wv, s);  // the reference
      auto check_same = [&](std::string const& what) {
        HEADROOM_CUDA_TRY(cudaMemsetAsync(bad.p, 0, sizeof(unsigned long long), s.get()));
        count_mismatches<<<1024, 256, 0, s.get()>>>(static_cast<uint4 const*>(out.p), static_cast<uint4 const*>(ref.p),
                                                    static_cast<i64>(full_bytes / 16), static_cast<unsigned long long*>(bad.p));
        HEADROOM_CUDA_CHECK_LAST();
        unsigned long long n = 0;
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(&n, bad.p, sizeof n, cudaMemcpyDeviceToHost, s.get()));
        stream.synchronize();
        expects<logic_error>(n == 0, "bench_cp_bandwidth: ", what, " at ", sh.tokens, " x ", sh.width, ": ", n,
                             " 16-byte words differ from cp::cuda::gather's output");
        HEADROOM_CUDA_TRY(cudaMemsetAsync(out.p, 0, full_bytes, s.get()));
      };
      auto time_it = [&](std::string const& method, std::function<void()> const& op) {
        double const ms = median_ms(s, o, op);
        if (comm.rank() == 0) {
          std::lock_guard lock(m);
          results.push_back({method, sh.tokens, sh.width, ms});
        }
      };
      time_it("all_gather", [&] {
        comm.all_gather(std::span<std::byte const>(static_cast<std::byte const*>(local.p), local_bytes),
                        std::span<std::byte>(static_cast<std::byte*>(out.p), full_bytes), s);
      });
      time_it("serial", [&] { cp::cuda::gather<cp::vector_policy::require_16>(comm, p, dcu.view(), lv, ov, wv, s); });
      check_same("serial");
      for (int chunks : {0, 1, 2, 4, 8}) {
        cp::cuda::gather_pipeline pipe(chunks);
        i64 const rows = pipe.workspace_rows(p);
        auto const pw = cp::matrix_view<bf16>(static_cast<bf16*>(ws.p), rows, sh.width);
        auto run = [&] { pipe.gather<cp::vector_policy::require_16>(comm, p, dcu.view(), lv, ov, pw, s); };
        run();
        std::string const name = "pipelined/" + (chunks == 0 ? "default" + std::to_string(pipe.chunks_for(p.local_rows()))
                                                              : std::to_string(chunks));
        check_same(name);
        time_it(name, run);
      }
      auto in_place = [&] { cp::cuda::gather_in_place<cp::vector_policy::require_16>(comm, p, dcu.view(), lv, ov, s); };
      in_place();
      check_same("in_place");
      time_it("in_place", in_place);
      if (comm.rank() == 0) {
        std::lock_guard lock(m);
        notes.push_back(std::to_string(sh.tokens) + " x " + std::to_string(sh.width) + ": " + std::to_string(p.sequences()) +
                        " sequences, in-place messages of " +
                        std::to_string(cp::cuda::in_place_message_bytes(p, row) >> 20) + " MiB on average");
      }
      stream.synchronize();
    }
  });
  return results;
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
  for (auto const& c : o.cases) {
    bool known = false;
    for (auto const& sh : shapes)
      for (int cp_size : {2, 8})
        known = known || c == std::string(sh.op) + ':' + std::to_string(sh.tokens) + ':' + std::to_string(sh.width) + ':' +
                                 std::to_string(cp_size);
    expects(known, "bench_cp_bandwidth: --case ", c, " names no row (expected OP:TOKENS:WIDTH:CP of the table, e.g. split:16384:4096:8)");
  }
  std::vector<shape> chosen;  // (op, tokens, width) with cp in the width's place below
  std::vector<int> chosen_cp;
  std::vector<std::string> skipped;
  for (auto const& sh : shapes) {
    for (int cp_size : {2, 8}) {
      std::ostringstream name;
      name << sh.op << ':' << sh.tokens << ':' << sh.width << ':' << cp_size;
      if (!o.cases.empty() && std::find(o.cases.begin(), o.cases.end(), name.str()) == o.cases.end()) continue;
      std::size_t const row = static_cast<std::size_t>(sh.width) * sizeof(bf16);
      std::size_t const in_bytes = static_cast<std::size_t>(sh.tokens) * row;
      std::size_t const out_bytes = std::string(sh.op) == "split" ? in_bytes / static_cast<std::size_t>(cp_size) : in_bytes;
      std::size_t const need =
          static_cast<std::size_t>(rotation_sets(2 * out_bytes)) * (in_bytes + out_bytes) + (std::size_t{1} << 30);
      std::size_t free_b = 0, total_b = 0;
      HEADROOM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
      if (need > free_b) {
        std::ostringstream why;
        why << sh.op << " " << sh.tokens << "x" << sh.width << " cp " << cp_size << ": needs " << (need >> 30)
            << " GiB, " << (free_b >> 30) << " GiB free";
        skipped.push_back(why.str());
        continue;
      }
      chosen.push_back(sh);
      chosen_cp.push_back(cp_size);
    }
  }
  std::vector<std::vector<result>> runs_of(chosen.size());  // per row, one result per repetition
  for (int rep = 0; rep < o.repeat; ++rep)
    for (std::size_t i = 0; i < chosen.size(); ++i)
      runs_of[i].push_back(run_case(chosen[i].op, chosen[i].tokens, chosen[i].width, chosen_cp[i], o, stream));

  auto print_table = [&](std::vector<result> const& rows, char const* what) {
    std::printf("cp bandwidth on %s (%d SMs); %s; GB/s = (read + written) / time\n", prop.name,
                prop.multiProcessorCount, what);
    std::printf("%-8s %7s %7s %3s %10s %4s %5s | %9s %8s | %9s %8s | %9s %8s | %7s %13s %7s\n", "op", "tokens", "width",
                "cp", "out MiB", "sets", "kern", "ours us", "GB/s", "memcpy us", "GB/s", "index us", "GB/s", "vs cpy",
                "range", "vs idx");
    for (auto const& r : rows)
      std::printf("%-8s %7lld %7lld %3d %10.1f %4d %5s | %9.1f %8.0f | %9.1f %8.0f | %9.1f %8.0f | %6.1f%% %5.1f..%5.1f%% "
                  "%6.2fx\n",
                  r.op.c_str(), static_cast<long long>(r.tokens), static_cast<long long>(r.width), r.cp,
                  static_cast<double>(r.bytes_out) / (1 << 20), r.sets, r.kernel.c_str(), 1e3 * r.ours_ms,
                  r.gbps(r.ours_ms), 1e3 * r.memcpy_ms, r.gbps(r.memcpy_ms), 1e3 * r.indexed_ms, r.gbps(r.indexed_ms),
                  100.0 * r.fraction, 100.0 * r.fraction_min, 100.0 * r.fraction_max, r.indexed_ms / r.ours_ms);
  };
  std::vector<result> results;  // per row: medians over the repetitions
  for (auto const& reps : runs_of) {
    result m = reps.front();
    std::vector<double> ours, memcpy_ms, indexed, fraction;
    for (auto const& r : reps) {
      ours.push_back(r.ours_ms);
      memcpy_ms.push_back(r.memcpy_ms);
      indexed.push_back(r.indexed_ms);
      fraction.push_back(r.fraction);
    }
    m.ours_ms = median_of(ours);
    m.memcpy_ms = median_of(memcpy_ms);
    m.indexed_ms = median_of(indexed);
    m.fraction = median_of(fraction);
    m.fraction_min = *std::min_element(fraction.begin(), fraction.end());
    m.fraction_max = *std::max_element(fraction.begin(), fraction.end());
    for (std::size_t g = 0; g < m.grids.size(); ++g) {
      std::vector<double> t, c;
      for (auto const& r : reps) {
        t.push_back(r.grids[g].ms);
        c.push_back(r.grids[g].memcpy_ms);
      }
      m.grids[g].ms = median_of(t);
      m.grids[g].memcpy_ms = median_of(c);
    }
    results.push_back(std::move(m));
  }
  if (o.repeat > 1)
    for (int rep = 0; rep < o.repeat; ++rep) {
      std::vector<result> one;
      for (auto const& reps : runs_of) one.push_back(reps[static_cast<std::size_t>(rep)]);
      std::ostringstream what;
      what << "repetition " << rep + 1 << " of " << o.repeat << ": medians of " << o.iterations << " runs after "
           << o.warmup << " warm-up, interleaved with memcpy and the index kernel";
      print_table(one, what.str().c_str());
    }
  {
    std::ostringstream what;
    if (o.repeat > 1)
      what << "MEDIANS over " << o.repeat << " repetitions (range: the repetitions' % of memcpy)";
    else
      what << "medians of " << o.iterations << " runs after " << o.warmup << " warm-up, interleaved with memcpy and the index kernel";
    print_table(results, what.str().c_str());
  }
  for (auto const& s : skipped) std::printf("skipped: %s\n", s.c_str());
  double worst = 1e9;
  std::string worst_row;
  for (auto const& r : results)
    if (r.fraction < worst) {
      worst = r.fraction;
      worst_row = r.op + " " + std::to_string(r.tokens) + "x" + std::to_string(r.width) + " cp " + std::to_string(r.cp);
    }
  if (!results.empty())
    std::printf("target >= 90%% of memcpy on every row (medians over %d repetition(s)): worst %.1f%% (%s): %s\n",
                o.repeat, 100.0 * worst, worst_row.c_str(), worst >= 0.9 ? "met" : "NOT met");
  bool any_grid = false;
  for (auto const& r : results)
    for (auto const& g : r.grids) {
      if (!any_grid) {
        std::printf("\nruns kernel grids (--runs-grid; each timed beside memcpy; medians over the repetitions)\n");
        std::printf("%-8s %7s %7s %3s | %-15s %7s | %9s %9s %7s\n", "op", "tokens", "width", "cp", "grid", "blocks",
                    "runs us", "memcpy us", "vs cpy");
        any_grid = true;
      }
      std::printf("%-8s %7lld %7lld %3d | %-15s %7lld | %9.1f %9.1f %6.1f%%\n", r.op.c_str(),
                  static_cast<long long>(r.tokens), static_cast<long long>(r.width), r.cp, g.grid.c_str(),
                  static_cast<long long>(g.blocks), 1e3 * g.ms, 1e3 * g.memcpy_ms, 100.0 * g.memcpy_ms / g.ms);
    }

  std::vector<gather_result> gathers;
  std::string gather_device;
  std::vector<std::string> notes;
  if (o.gather && headroom::cuda::device_count() >= 2) {
    gathers = gather_on_two_gpus(o, gather_device, notes);
    std::printf("\ncp gather on 2 GPUs (%s), cp = 2, bf16; medians of %d runs; x = time / bare all_gather\n",
                gather_device.c_str(), o.iterations);
    std::printf("%7s %7s %-18s %9s %7s\n", "tokens", "width", "method", "ms", "x");
    for (auto const& g : gathers) {
      double floor = 0;
      for (auto const& h : gathers)
        if (h.tokens == g.tokens && h.width == g.width && h.method == "all_gather") floor = h.ms;
      std::printf("%7lld %7lld %-18s %9.3f %7.3f\n", static_cast<long long>(g.tokens), static_cast<long long>(g.width),
                  g.method.c_str(), g.ms, g.ms / floor);
    }
    for (auto const& n : notes) std::printf("batch %s\n", n.c_str());
  } else {
    std::printf("\ncp gather on 2 GPUs: skipped (%d GPU(s)%s)\n", headroom::cuda::device_count(), o.gather ? "" : ", --no-gather");
  }

  std::ostringstream js;
  js << "{\"bench\":\"cp_bandwidth\",\"device\":\"" << prop.name << "\",\"iterations\":" << o.iterations
     << ",\"warmup\":" << o.warmup << ",\"repeat\":" << o.repeat << ",\"dtype\":\"bfloat16\",\"results\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto const& r = results[i];
    js << (i ? "," : "") << "{\"op\":\"" << r.op << "\",\"tokens\":" << r.tokens << ",\"width\":" << r.width
       << ",\"cp\":" << r.cp << ",\"bytes_out\":" << r.bytes_out << ",\"ours_ms\":" << r.ours_ms
       << ",\"sets\":" << r.sets << ",\"memcpy_ms\":" << r.memcpy_ms << ",\"indexed_ms\":" << r.indexed_ms << ",\"ours_gbps\":" << r.gbps(r.ours_ms)
       << ",\"memcpy_gbps\":" << r.gbps(r.memcpy_ms) << ",\"fraction_of_memcpy\":" << r.fraction
       << ",\"fraction_min\":" << r.fraction_min << ",\"fraction_max\":" << r.fraction_max << ",\"kernel\":\""
       << r.kernel << "\",\"runs_grids\":[";
    for (std::size_t g = 0; g < r.grids.size(); ++g)
      js << (g ? "," : "") << "{\"grid\":\"" << r.grids[g].grid << "\",\"blocks\":" << r.grids[g].blocks
         << ",\"ms\":" << r.grids[g].ms << ",\"memcpy_ms\":" << r.grids[g].memcpy_ms << "}";
    js << "]}";
  }
  js << "],\"skipped\":" << skipped.size() << ",\"gather_2gpu\":[";
  for (std::size_t i = 0; i < gathers.size(); ++i)
    js << (i ? "," : "") << "{\"method\":\"" << gathers[i].method << "\",\"tokens\":" << gathers[i].tokens
       << ",\"width\":" << gathers[i].width << ",\"ms\":" << gathers[i].ms << "}";
  js << "]}";
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "bench_cp_bandwidth: %s\n", e.what());
  return 1;
}
