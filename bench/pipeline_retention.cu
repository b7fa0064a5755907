// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// A GPU reproduction of the torchtitan field report (discuss.pytorch.org, "Question about GPU
// memory usage when using pipeline parallelism training under larger micro-batch count",
// linked from PyTorch issue #159251): a toy LM split over 2 GPUs, 1F1B, fixed global batch, and
// what the last stage holds under each output retention policy as the micro-batch count m grows.
//
// Model (bf16 weights and activations, fp32 accumulation, cuBLAS GEMMs):
//   stage 0  input [T x H] made on the device, 2 x (GEMM H x H, ReLU)         -> [T x H] to stage 1
//   stage 1  1 x (GEMM H x H, ReLU), LM head GEMM H x V -> logits [T x V] bf16, cross-entropy
//            (one kernel: loss and dL/dlogits, scaled by 1 / global tokens like PyTorch's mean
//            loss with scale_grads)
// H = 4096, V = 131072, m in {2, 4, 8, 16}, two series:
//   global      a fixed global batch of 16384 tokens, T = 16384 / m tokens per
//               micro-batch (what `all` keeps adds up to the same 16384 x V whatever m)
//   microbatch  the field report's growth: T = 2048 tokens per micro-batch, global batch m x T
// bench/pipeline_retention_torch.py runs the `global` shapes with PyTorch's Schedule1F1B.
//
// One process drives both GPUs (one thread each, NCCL). Per (retention, m) and stage, after one
// warm-up step:
//   predicted  executor::plan(R).rank(r).total(): the memory model's peak of the executor's
//              buffers plus the stage's persistent bytes (weights, gradients, cuBLAS workspace,
//              backward scratch, targets, loss slots), all from the same pool
//   measured   the pool's used-memory high-water mark over one step (cudaMemPoolAttrUsedMemHigh,
//              reset at the step's start): what torch.cuda.max_memory_allocated() measures
//   step ms    median host wall time of a step (both streams drained), max over the stages
// Output: a table, the targets (docs/pipeline.md), then one JSON line.
//
//   bench_pipeline_retention [--tokens 16384] [--microbatch-tokens 2048] [--microbatches 2,4,8,16]
//                            [--steps 3] [--hidden 4096] [--vocab 131072]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <cub/block/block_reduce.cuh>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/pipeline/cuda.hpp"
#include "headroom/stats/cuda/sources.hpp"

namespace cu = headroom::cuda;
namespace hp = headroom::pipeline;
namespace nc = headroom::nccl;
namespace lt = headroom::lifetime;
using bf16 = __nv_bfloat16;
using headroom::expects;

namespace {

struct options {
  int hidden = 4096;
  int vocab = 131072;
  int tokens = 16384;            // global batch of the `global` series
  int microbatch_tokens = 2048;  // micro-batch of the `microbatch` series
  int steps = 3;
  int stage0_layers = 2;
  int stage1_layers = 1;
  std::vector<int> microbatches{2, 4, 8, 16};
};

int positive(std::string_view flag, std::string_view text) {
  char* end = nullptr;
  std::string const s(text);
  long const v = std::strtol(s.c_str(), &end, 10);
  expects(end != s.c_str() && *end == '\0' && v > 0 && v < (1L << 30), "bench_pipeline_retention: ", flag,
          " expects a positive integer, got '", text, "'");
  return static_cast<int>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    expects(i + 1 < argc, "bench_pipeline_retention: ", a, " needs a value");
    std::string_view const v = argv[++i];
    if (a == "--tokens") o.tokens = positive(a, v);
    else if (a == "--microbatch-tokens") o.microbatch_tokens = positive(a, v);
    else if (a == "--steps") o.steps = positive(a, v);
    else if (a == "--hidden") o.hidden = positive(a, v);
    else if (a == "--vocab") o.vocab = positive(a, v);
    else if (a == "--microbatches") {
      o.microbatches.clear();
      std::stringstream list{std::string(v)};
      for (std::string item; std::getline(list, item, ',');) o.microbatches.push_back(positive(a, item));
    } else {
      throw headroom::invalid_argument(std::string("bench_pipeline_retention: unknown option ") + std::string(a) +
                                       "; expected --tokens, --microbatch-tokens, --microbatches, --steps, --hidden or --vocab");
    }
  }
  expects(!o.microbatches.empty(), "bench_pipeline_retention: --microbatches is empty");
  for (int m : o.microbatches)
    expects(o.tokens % m == 0, "bench_pipeline_retention: m = ", m, " does not divide the global batch of ", o.tokens,
            " tokens; expected a fixed global batch split into equal micro-batches");
  return o;
}

/// One step's batch: T tokens per micro-batch, m micro-batches.
struct batch_shape {
  char const* series;
  int m;
  int tokens;  // T
  [[nodiscard]] int global() const { return m * tokens; }
};

std::vector<batch_shape> shapes(options const& o) {
  std::vector<batch_shape> out;
  for (int m : o.microbatches) out.push_back({"global", m, o.tokens / m});
  for (int m : o.microbatches) out.push_back({"microbatch", m, o.microbatch_tokens});
  return out;
}

void cublas_check(cublasStatus_t s, char const* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw headroom::cuda_error(std::string("bench_pipeline_retention: ") + what + ": " + cublasGetStatusName(s));
}

// ---- kernels ---------------------------------------------------------------------------------

// A counter-based hash in [-1, 1): inputs and weights without a random-number library.
__device__ float hashed(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = seed * 0xD1B54A32D192ED03ull + i;
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}
__global__ void fill(bf16* p, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16(scale * hashed(seed, i));
}
__global__ void fill_targets(int* t, std::size_t n, int vocab) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    t[i] = static_cast<int>((hashed(77, i) * 0.5f + 0.5f) * static_cast<float>(vocab - 1));
}
__global__ void relu(bf16* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    if (__bfloat162float(y[i]) < 0.0f) y[i] = __float2bfloat16(0.0f);
}
// out = (y > 0) ? g : 0; out may alias y (elementwise).
__global__ void relu_backward(bf16 const* g, bf16 const* y, bf16* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat162float(y[i]) > 0.0f ? g[i] : __float2bfloat16(0.0f);
}

constexpr int loss_threads = 1024;
// One block per row of logits: loss += scale * (logsumexp - logit[target]) and
// dlogits = scale * (softmax - onehot(target)).
__global__ void __launch_bounds__(loss_threads)
    cross_entropy(bf16 const* logits, int const* target, int vocab, float scale, bf16* dlogits, float* loss) {
  using reduce = cub::BlockReduce<float, loss_threads>;
  __shared__ typename reduce::TempStorage scratch;
  __shared__ float row_max, row_sum;
  std::size_t const row = blockIdx.x;
  bf16 const* x = logits + row * static_cast<std::size_t>(vocab);
  bf16* dx = dlogits + row * static_cast<std::size_t>(vocab);
  float m = -INFINITY;
  for (int j = static_cast<int>(threadIdx.x); j < vocab; j += loss_threads) m = fmaxf(m, __bfloat162float(x[j]));
  m = reduce(scratch).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) row_max = m;
  __syncthreads();
  float s = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < vocab; j += loss_threads) s += __expf(__bfloat162float(x[j]) - row_max);
  s = reduce(scratch).Sum(s);
  if (threadIdx.x == 0) row_sum = s;
  __syncthreads();
  int const t = target[row];
  float const inv = 1.0f / row_sum;
  for (int j = static_cast<int>(threadIdx.x); j < vocab; j += loss_threads) {
    float const p = __expf(__bfloat162float(x[j]) - row_max) * inv;
    dx[j] = __float2bfloat16(scale * (p - (j == t ? 1.0f : 0.0f)));
  }
  if (threadIdx.x == 0) atomicAdd(loss, scale * (logf(row_sum) + row_max - __bfloat162float(x[t])));
}

constexpr unsigned grid = 1024;
constexpr unsigned block = 256;

// ---- one rank's part of the model --------------------------------------------------------------

using guard = lt::device_guard<lt::stream_ordered, cu::async_resource>;
constexpr std::size_t workspace_bytes = std::size_t{32} << 20;

bf16* as_bf16(std::span<std::byte> b) { return reinterpret_cast<bf16*>(b.data()); }
bf16 const* as_bf16(std::span<std::byte const> b) { return reinterpret_cast<bf16 const*>(b.data()); }

class lm_stage {
 public:
  lm_stage(options const& o, int rank, cu::async_resource& memory, cu::stream_view s)
      : o_(o), last_(rank == 1), layers_(last_ ? o.stage1_layers : o.stage0_layers), memory_(&memory), stream_(s),
        losses_(memory, s, *std::max_element(o.microbatches.begin(), o.microbatches.end())) {
    std::size_t const hh = std::size_t(o.hidden) * std::size_t(o.hidden);
    for (int l = 0; l < layers_; ++l) {
      weights_.push_back(persistent(hh * sizeof(bf16)));
      grads_.push_back(persistent(hh * sizeof(bf16)));
      fill<<<grid, block, 0, s.get()>>>(ptr(weights_.back()), hh, 100 + 10 * rank + l, 1.0f / std::sqrt(float(o.hidden)));
    }
    if (last_) {
      std::size_t const hv = std::size_t(o.hidden) * std::size_t(o.vocab);
      weights_.push_back(persistent(hv * sizeof(bf16)));
      grads_.push_back(persistent(hv * sizeof(bf16)));
      fill<<<grid, block, 0, s.get()>>>(ptr(weights_.back()), hv, 999, 1.0f / std::sqrt(float(o.hidden)));
      targets_.emplace(persistent(std::size_t(most(o, &batch_shape::global)) * sizeof(int)));
      fill_targets<<<grid, block, 0, s.get()>>>(static_cast<int*>(targets_->data()), std::size_t(most(o, &batch_shape::global)),
                                                o.vocab);
    }
    for (auto& g : grads_) HEADROOM_CUDA_TRY(cudaMemsetAsync(g.data(), 0, g.size(), s.get()));
    scratch_.emplace(persistent(std::size_t(most(o, &batch_shape::tokens)) * std::size_t(o.hidden) * sizeof(bf16)));
    workspace_.emplace(persistent(workspace_bytes));
    HEADROOM_CUDA_CHECK_LAST();
    cublas_check(cublasCreate(&handle_), "cublasCreate");
    cublas_check(cublasSetStream(handle_, s.get()), "cublasSetStream");
    cublas_check(cublasSetWorkspace(handle_, workspace_->data(), workspace_bytes), "cublasSetWorkspace");
    persistent_bytes_ += losses_.device_span().size_bytes();
  }
  lm_stage(lm_stage const&) = delete;
  lm_stage& operator=(lm_stage const&) = delete;
  ~lm_stage() { cublasDestroy(handle_); }

  /// The batch of the next step.
  void set_shape(batch_shape b) {
    tokens_ = b.tokens;
    global_ = b.global();
  }

  /// What one micro-batch of `tokens` tokens costs on stage 0 (`last` false) or stage 1: the
  /// memory model's input. `persistent` goes into parameters: every byte a stage keeps from the
  /// pool outside the executor.
  [[nodiscard]] static hp::stage_bytes cost_of(options const& o, bool last, int tokens, std::size_t persistent) {
    std::size_t const th = std::size_t(tokens) * std::size_t(o.hidden) * sizeof(bf16);
    if (!last) return {.activations = std::size_t(o.stage0_layers + 1) * th, .output = th, .weight_stash = 0, .parameters = persistent};
    std::size_t const tv = std::size_t(tokens) * std::size_t(o.vocab) * sizeof(bf16);
    return {.activations = std::size_t(o.stage1_layers) * th + tv, .output = tv, .weight_stash = 0, .parameters = persistent};
  }
  [[nodiscard]] hp::stage_bytes cost() const { return cost_of(o_, last_, tokens_, persistent_bytes_); }
  [[nodiscard]] std::size_t persistent_bytes() const noexcept { return persistent_bytes_; }
  [[nodiscard]] hp::cuda::device_values<float>& losses() noexcept { return losses_; }

  // Stash: stage 0 [a_0 | a_1 | ... | a_L], stage 1 [a_1 | ... | a_L | dlogits]; a_0 of stage 1 is
  // the received input, which the executor keeps until the backward.
  void forward(hp::forward_args<cu::stream_view> const& a) {
    std::size_t const n = elems();
    bf16* stash = as_bf16(a.stash);
    bf16 const* x = nullptr;
    if (!last_) {
      fill<<<grid, block, 0, a.stream.get()>>>(stash, n, 5000 + std::uint64_t(a.microbatch), 1.0f);
      x = stash;
      stash += n;
    } else {
      x = as_bf16(a.input);
    }
    for (int l = 0; l < layers_; ++l) {
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, o_.hidden, tokens_, o_.hidden, ptr(weights_[l]), o_.hidden, x, o_.hidden, stash + n * l,
           o_.hidden, 0.0f);
      relu<<<grid, block, 0, a.stream.get()>>>(stash + n * l, n);
      x = stash + n * l;
    }
    if (last_) {
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, o_.vocab, tokens_, o_.hidden, ptr(weights_.back()), o_.vocab, x, o_.hidden,
           as_bf16(a.output), o_.vocab, 0.0f);
    } else {
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(a.output.data(), x, n * sizeof(bf16), cudaMemcpyDeviceToDevice, a.stream.get()));
    }
    HEADROOM_CUDA_CHECK_LAST();
  }

  float* loss(hp::loss_args<cu::stream_view> const& a) {
    float* slot = losses_.at(a.microbatch);
    bf16* dlogits = as_bf16(a.stash) + elems() * std::size_t(layers_);
    cross_entropy<<<unsigned(tokens_), loss_threads, 0, a.stream.get()>>>(
        as_bf16(a.output), static_cast<int const*>(targets_->data()) + std::size_t(a.microbatch) * std::size_t(tokens_),
        o_.vocab, 1.0f / float(global_), dlogits, slot);
    HEADROOM_CUDA_CHECK_LAST();
    return slot;
  }

  // Layer l's input is a_l, its output a_{l+1}. The gradient flows through the scratch buffer;
  // the masked gradient of layer l overwrites a_{l+1}, which nothing needs afterwards.
  void backward(hp::backward_args<cu::stream_view> const& a) {
    std::size_t const n = elems();
    bf16* stash = as_bf16(a.stash);
    bf16* scratch = ptr(*scratch_);
    auto const stashed = [&](int i) { return stash + n * std::size_t(last_ ? i - 1 : i); };  // a_i, i >= 1 on stage 1
    auto const act = [&](int i) -> bf16 const* { return last_ && i == 0 ? as_bf16(a.input) : stashed(i); };
    bf16 const* g = nullptr;  // gradient of a_{layers}, before the ReLU mask
    if (last_) {
      bf16 const* dlogits = stash + n * std::size_t(layers_);
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, o_.vocab, o_.hidden, tokens_, dlogits, o_.vocab, act(layers_), o_.hidden,
           ptr(grads_.back()), o_.vocab, 1.0f);
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, o_.hidden, tokens_, o_.vocab, ptr(weights_.back()), o_.vocab, dlogits, o_.vocab,
           scratch, o_.hidden, 0.0f);
      g = scratch;
    } else {
      g = as_bf16(a.grad_output);
    }
    for (int l = layers_ - 1; l >= 0; --l) {
      bf16* gz = stashed(l + 1);
      relu_backward<<<grid, block, 0, a.stream.get()>>>(g, gz, gz, n);
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, o_.hidden, o_.hidden, tokens_, gz, o_.hidden, act(l), o_.hidden, ptr(grads_[l]),
           o_.hidden, 1.0f);
      bool const to_input = l == 0;
      if (to_input && a.grad_input.empty()) break;  // stage 0 needs no gradient of its data
      bf16* next = to_input ? as_bf16(a.grad_input) : scratch;
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, o_.hidden, tokens_, o_.hidden, ptr(weights_[l]), o_.hidden, gz, o_.hidden, next,
           o_.hidden, 0.0f);
      g = next;
    }
    HEADROOM_CUDA_CHECK_LAST();
  }

 private:
  template <class F>
  static int most(options const& o, F field) {
    int best = 0;
    for (auto const& b : shapes(o)) {
      if constexpr (std::is_member_function_pointer_v<F>) best = std::max(best, (b.*field)());
      else best = std::max(best, b.*field);
    }
    return best;
  }
  [[nodiscard]] std::size_t elems() const { return std::size_t(tokens_) * std::size_t(o_.hidden); }
  static bf16* ptr(guard const& g) { return static_cast<bf16*>(g.data()); }

  guard persistent(std::size_t bytes) {
    persistent_bytes_ += bytes;
    return guard(*memory_, stream_, bytes);
  }
  // Row-major C[rows x cols] from column-major cuBLAS: C^T = op(A) op(B) with the arguments as given.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, bf16 const* A, int lda, bf16 const* B, int ldb,
            bf16* C, int ldc, float beta) {
    float const alpha = 1.0f;
    cublas_check(cublasGemmEx(handle_, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                              CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }

  options o_;
  bool last_;
  int layers_;
  cu::async_resource* memory_;
  cu::stream_view stream_;
  std::size_t persistent_bytes_ = 0;
  std::vector<guard> weights_, grads_;
  std::optional<guard> targets_, scratch_, workspace_;
  hp::cuda::device_values<float> losses_;
  cublasHandle_t handle_ = nullptr;
  int tokens_ = 0;
  int global_ = 0;
};
static_assert(hp::pipeline_stage<lm_stage, cu::stream_view>);

// ---- the run ---------------------------------------------------------------------------------

struct row {
  std::string series;
  std::string policy;
  int m = 0;
  int stage = 0;
  std::int64_t predicted = 0;
  std::int64_t measured = 0;
  std::int64_t reserved = 0;
  int tokens = 0;                 // T: tokens per micro-batch
  std::int64_t output_bytes = 0;  // one micro-batch's output on this stage
  double step_ms = 0;
  float loss = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The other rank's stage.persistent_bytes(), through one all_gather of both ranks' values.
std::size_t other_rank_persistent(nc::communicator& comm, cu::async_resource& memory, lm_stage const& stage, cu::stream_view s) {
  std::uint64_t const mine = stage.persistent_bytes();
  std::array<std::uint64_t, 2> both{};
  guard buffer(memory, s, 3 * sizeof(std::uint64_t));
  auto* d = static_cast<std::uint64_t*>(buffer.data());
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(d, &mine, sizeof mine, cudaMemcpyHostToDevice, s.get()));
  comm.all_gather(std::span<std::uint64_t const>(d, 1), std::span<std::uint64_t>(d + 1, 2), s);
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(both.data(), d + 1, sizeof both, cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  return static_cast<std::size_t>(both[std::size_t(1 - comm.rank())]);
}

template <class R>
row run_config(options const& o, batch_shape shape_of_batch, nc::communicator& comm, cu::async_resource& memory, lm_stage& stage,
               std::size_t other_rank_parameters, cu::stream_view compute, cu::stream_view transfer) {
  int const rank = comm.rank();
  int const m = shape_of_batch.m;
  stage.set_shape(shape_of_batch);
  hp::pipeline_shape const shape{.stages = 2, .microbatches = m};
  // Every rank's executor holds the whole model, both stages with their parameters (its
  // constructor checks that the ranks agree), so each rank's parameter bytes go to the other.
  hp::stage_bytes const mine = stage.cost();
  std::vector<hp::stage_bytes> costs{mine, mine};
  costs[std::size_t(1 - rank)] = lm_stage::cost_of(o, rank == 0, shape_of_batch.tokens, other_rank_parameters);
  hp::cuda::nccl_executor<> exec(comm, memory, hp::make_schedule<hp::one_f_one_b>(shape), hp::model_bytes(costs), compute,
                                 transfer);
  auto const predicted = exec.plan(R{}).rank(rank).total();
  std::vector<double> times;
  std::int64_t measured = 0, reserved = 0;
  float loss = 0;
  for (int step = 0; step <= o.steps; ++step) {
    HEADROOM_CUDA_TRY(cudaMemsetAsync(stage.losses().device_span().data(), 0, stage.losses().device_span().size_bytes(), compute.get()));
    comm.barrier(compute);
    compute.synchronize();
    headroom::stats::cuda::reset_mem_pool_peaks(memory.pool());
    auto const t0 = std::chrono::steady_clock::now();
    {
      auto result = exec.step(stage, R{});
      compute.synchronize();
      transfer.synchronize();
      auto const t1 = std::chrono::steady_clock::now();
      auto const pool = headroom::stats::cuda::mem_pool_stats(memory);
      if (step > 0) {
        times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        measured = std::max(measured, pool.get<"allocated_bytes.all.peak">());
        reserved = std::max(reserved, pool.get<"reserved_bytes.all.peak">());
      }
    }  // retention::all: the kept outputs go back to the pool here
    if (rank == 1) {
      std::vector<float> host(stage.losses().device_span().size());
      stage.losses().copy_to(host, compute);
      compute.synchronize();
      loss = 0;
      for (int k = 0; k < m; ++k) loss += host[std::size_t(k)];
    }
  }
  return {.series = shape_of_batch.series, .policy = std::string(R::name), .m = m, .stage = rank, .predicted = predicted, .measured = measured,
          .reserved = reserved, .tokens = shape_of_batch.tokens, .output_bytes = static_cast<std::int64_t>(mine.output), .step_ms = median(times), .loss = loss};
}

}  // namespace

int main(int argc, char** argv) try {
  options const o = parse(argc, argv);
  expects(cu::device_count() >= 2, "bench_pipeline_retention: needs 2 GPUs (one per stage), found ", cu::device_count());
  std::vector<row> rows;
  std::mutex mutex;
  std::string device_name;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    cudaDeviceProp prop{};
    HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
    cu::async_resource memory(comm.device());  // keeps what it reserves: no cudaMalloc in the timed steps
    cu::stream compute;
    cu::stream transfer;
    lm_stage stage(o, comm.rank(), memory, compute);
    std::size_t const other = other_rank_persistent(comm, memory, stage, compute);
    std::vector<row> mine;
    for (batch_shape const b : shapes(o)) {
      mine.push_back(run_config<hp::retention::all>(o, b, comm, memory, stage, other, compute, transfer));
      mine.push_back(run_config<hp::retention::reduced>(o, b, comm, memory, stage, other, compute, transfer));
      mine.push_back(run_config<hp::retention::none>(o, b, comm, memory, stage, other, compute, transfer));
    }
    compute.synchronize();
    std::lock_guard lock(mutex);
    rows.insert(rows.end(), mine.begin(), mine.end());
    device_name = prop.name;
  });
  std::sort(rows.begin(), rows.end(), [](row const& a, row const& b) {
    return std::tie(a.series, a.policy, a.m, a.stage) < std::tie(b.series, b.policy, b.m, b.stage);
  });

  auto const gib = [](std::int64_t b) { return double(b) / double(std::int64_t{1} << 30); };
  std::printf("bench_pipeline_retention: toy LM on 2 x %s, hidden %d, vocab %d, bf16, 1F1B; series global: %d tokens "
              "per step, series microbatch: %d tokens per micro-batch\n",
              device_name.c_str(), o.hidden, o.vocab, o.tokens, o.microbatch_tokens);
  std::printf("%-10s %-8s %3s %6s %5s %13s %13s %7s %13s %9s %9s\n", "series", "policy", "m", "T", "stage", "predicted GiB",
              "measured GiB", "error%", "reserved GiB", "step ms", "loss");
  double worst = 0;
  for (auto const& r : rows) {
    double const err = 100.0 * (double(r.measured) - double(r.predicted)) / double(r.predicted);
    worst = std::max(worst, std::fabs(err));
    std::printf("%-10s %-8s %3d %6d %5d %13.3f %13.3f %7.2f %13.3f %9.1f %9.4f\n", r.series.c_str(), r.policy.c_str(), r.m,
                r.tokens, r.stage, gib(r.predicted), gib(r.measured), err, gib(r.reserved), r.step_ms,
                r.stage == 1 ? double(r.loss) : 0.0);
  }
  // The targets of docs/pipeline.md, from the rows above.
  auto const find = [&](std::string_view series, std::string_view policy, int m, int stage) -> row const& {
    return *std::find_if(rows.begin(), rows.end(), [&](row const& r) {
      return r.series == series && r.policy == policy && r.m == m && r.stage == stage;
    });
  };
  int const lo = *std::min_element(o.microbatches.begin(), o.microbatches.end());
  int const hi = *std::max_element(o.microbatches.begin(), o.microbatches.end());
  std::printf("targets:\n  model within 5%% of measured on every row: worst %.2f%% -> %s\n", worst, worst <= 5.0 ? "met" : "MISSED");
  for (std::string_view series : {"global", "microbatch"})
    for (std::string_view policy : {"reduced", "none", "all"}) {
      row const& x = find(series, policy, lo, 1);
      row const& y = find(series, policy, hi, 1);
      std::int64_t const one_output = std::max(x.output_bytes, y.output_bytes);
      std::printf("  %-10s last stage, %-7s: m=%d %.3f GiB -> m=%d %.3f GiB, growth %+.3f GiB = %+.2f micro-batch outputs%s\n",
                  std::string(series).c_str(), std::string(policy).c_str(), lo, gib(x.measured), hi, gib(y.measured),
                  gib(y.measured - x.measured), double(y.measured - x.measured) / double(one_output),
                  policy == "all" ? "" : (y.measured - x.measured <= one_output ? " (<= 1: met)" : " (> 1: MISSED)"));
    }
  std::printf("  (PyTorch rows: python3 bench/pipeline_retention_torch.py, the global series' shapes)\n");

  std::ostringstream json;
  json << R"({"bench":"pipeline_retention","device":")" << device_name << R"(","gpus":2,"hidden":)" << o.hidden
       << R"(,"vocab":)" << o.vocab << R"(,"tokens":)" << o.tokens << R"(,"microbatch_tokens":)" << o.microbatch_tokens << R"(,"schedule":"1f1b","unit":"bytes","worst_error_pct":)"
       << worst << R"(,"rows":[)";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& r = rows[i];
    json << (i ? "," : "") << R"({"series":")" << r.series << R"(","policy":")" << r.policy << R"(","m":)" << r.m
         << R"(,"tokens_per_microbatch":)" << r.tokens << R"(,"stage":)" << r.stage
         << R"(,"predicted":)" << r.predicted << R"(,"measured":)" << r.measured << R"(,"reserved":)" << r.reserved
         << R"(,"step_ms":)" << r.step_ms << "}";
  }
  json << "]}";
  std::printf("%s\n", json.str().c_str());
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "failed: %s\n", e.what());
  return 1;
}
