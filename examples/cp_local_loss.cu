// SPDX-License-Identifier: Apache-2.0
// CP-local loss on a packed batch (the path AReaL PR #1223 took to stop gathering logits), with
// headroom::cp:
//   1. pad the raw packed batch for the CP layout (query first: print the padding/partition),
//   2. build this rank's input ids, next-token labels and loss mask straight from the raw,
//      unpadded tensors (one fused pad+split launch each; labels and mask use shift = 1),
//   3. run a "model" on the local shard only and take a per-token cross-entropy there,
//   4. normalise over CP x DP in one collective (cp::cuda::normalize_loss), never gathering
//      [T, V] logits.
// The result is checked against a host computation of the token-mean loss over the whole
// batch. Runs with cp = number of GPUs (1 or 2) in one process, one thread per GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

#include <headroom/cp/cuda.cuh>
#include <headroom/cuda.hpp>
#include <headroom/nccl.hpp>

using namespace headroom;
using i64 = std::int64_t;

namespace {

constexpr int vocab = 509;

// Toy model: logits of a token depend on the token id only (a fixed "embedding x unembedding").
__host__ __device__ inline float toy_logit(std::int32_t id, int v) {
  return 0.5f * cosf(0.37f * static_cast<float>((id * 7 + v * 13) % 101)) + 0.001f * static_cast<float>(v % 17);
}

__global__ void toy_model_kernel(std::int32_t const* ids, float* logits, i64 rows) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < rows * vocab;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    logits[i] = toy_logit(ids[i / vocab], static_cast<int>(i % vocab));
}

// Per-token cross-entropy on the local shard, accumulated into stats = {loss sum, tokens}.
__global__ void local_loss_kernel(float const* logits, std::int32_t const* labels, std::uint8_t const* mask, i64 rows,
                                  double* stats) {
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < rows; t += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!mask[t]) continue;
    float const* row = logits + t * vocab;
    float m = row[0];
    for (int v = 1; v < vocab; ++v) m = fmaxf(m, row[v]);
    float s = 0;
    for (int v = 0; v < vocab; ++v) s += expf(row[v] - m);
    atomicAdd(&stats[0], static_cast<double>(m + logf(s) - row[labels[t]]));
    atomicAdd(&stats[1], 1.0);
  }
}

template <class T>
T* upload(std::vector<T> const& h, headroom::cuda::stream_view s) {
  void* p = nullptr;
  HEADROOM_CUDA_TRY(cudaMallocAsync(&p, h.size() * sizeof(T) + 1, s.get()));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  return static_cast<T*>(p);
}

}  // namespace

int main() try {
  // A raw packed batch: 5 sequences of odd lengths, token ids, and a loss mask (prompt = 0).
  std::vector<std::int32_t> const raw_cu{0, 37, 40, 151, 228, 300};
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  for (std::size_t s = 0; s + 1 < raw_cu.size(); ++s)
    for (std::int32_t i = 0; i < raw_cu[s + 1] - raw_cu[s]; ++i) {
      ids.push_back(static_cast<std::int32_t>((s * 131 + static_cast<std::size_t>(i) * 29) % vocab));
      mask.push_back(i >= 5 ? 1 : 0);  // 5 prompt tokens per sequence
    }

  // Host reference: token-mean next-token loss over the whole batch.
  double ref_sum = 0, ref_tokens = 0;
  for (std::size_t s = 0; s + 1 < raw_cu.size(); ++s)
    for (std::int32_t i = raw_cu[s]; i + 1 < raw_cu[s + 1]; ++i) {
      if (!mask[static_cast<std::size_t>(i) + 1]) continue;
      double m = -1e30, z = 0;
      for (int v = 0; v < vocab; ++v) m = std::fmax(m, toy_logit(ids[static_cast<std::size_t>(i)], v));
      for (int v = 0; v < vocab; ++v) z += std::exp(toy_logit(ids[static_cast<std::size_t>(i)], v) - m);
      ref_sum += m + std::log(z) - toy_logit(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(i) + 1]);
      ref_tokens += 1;
    }

  int const gpus = headroom::cuda::device_count() >= 2 ? 2 : 1;
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(d);
  std::mutex print;
  bool ok = true;
  nccl::launch_per_device(devices, [&](nccl::communicator& comm) {
    int const cp_size = comm.size();  // here the whole group is one CP group (dp = 1)
    headroom::cuda::stream s;
    cp::padding pad(raw_cu, cp::alignment_for<cp::dual_chunk>(cp_size));
    cp::partition<> part(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
    auto const plan_none = cp::plan_output<cp::gather_output::none>(part, vocab, sizeof(float));
    auto const plan_full = cp::plan_output<cp::gather_output::full>(part, vocab, sizeof(float));
    {
      std::lock_guard lock(print);
      std::printf("rank %d: %s\n         %s\n         local loss keeps %s; gathering logits would add %s\n", comm.rank(),
                  pad.describe().c_str(), part.describe().c_str(), plan_none.describe().c_str(),
                  format_bytes(plan_full.extra_bytes()).c_str());
    }
    // Device copies of the raw tensors and of both boundary arrays.
    auto* d_ids = upload(ids, s);
    auto* d_mask = upload(mask, s);
    auto* d_raw_cu = upload(raw_cu, s);
    cp::cuda::device_cu_seqlens d_padded_cu(pad.padded_cu_seqlens(), s);
    cp::cuda::device_cu<std::int32_t> const raw_cu_view{d_raw_cu, static_cast<i64>(raw_cu.size())};
    i64 const n = part.local_rows();
    std::int32_t *l_ids = nullptr, *l_labels = nullptr;
    std::uint8_t* l_mask = nullptr;
    float* logits = nullptr;
    double* stats = nullptr;
    HEADROOM_CUDA_TRY(cudaMallocAsync(&l_ids, n * sizeof(std::int32_t) + 1, s.get()));
    HEADROOM_CUDA_TRY(cudaMallocAsync(&l_labels, n * sizeof(std::int32_t) + 1, s.get()));
    HEADROOM_CUDA_TRY(cudaMallocAsync(&l_mask, n + 1, s.get()));
    HEADROOM_CUDA_TRY(cudaMallocAsync(&logits, n * vocab * sizeof(float) + 1, s.get()));
    HEADROOM_CUDA_TRY(cudaMallocAsync(&stats, 4 * sizeof(double), s.get()));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(stats, 0, 4 * sizeof(double), s.get()));
    auto raw_i32 = [&](std::int32_t const* p) { return cp::matrix_view<std::int32_t const>(p, pad.raw_rows(), 1); };
    // Inputs (shift 0), next-token labels and loss mask (shift 1), all from raw tensors.
    cp::cuda::pad_split(pad, part, raw_cu_view, d_padded_cu.view(), raw_i32(d_ids), cp::matrix_view<std::int32_t>(l_ids, n, 1),
                        std::int32_t{0}, s);
    cp::cuda::pad_split(pad, part, raw_cu_view, d_padded_cu.view(), raw_i32(d_ids),
                        cp::matrix_view<std::int32_t>(l_labels, n, 1), std::int32_t{0}, s, 1);
    cp::cuda::pad_split(pad, part, raw_cu_view, d_padded_cu.view(),
                        cp::matrix_view<std::uint8_t const>(d_mask, pad.raw_rows(), 1), cp::matrix_view<std::uint8_t>(l_mask, n, 1),
                        std::uint8_t{0}, s, 1);
    toy_model_kernel<<<128, 256, 0, s.get()>>>(l_ids, logits, n);
    local_loss_kernel<<<32, 128, 0, s.get()>>>(logits, l_labels, l_mask, n, stats);
    HEADROOM_CUDA_CHECK_LAST();
    // One collective over CP x DP: both the loss sum and the token count are CP-local.
    cp::cuda::normalize_loss<cp::loss_placement::cp_local>(comm, std::span<double>(stats, 4), cp_size, s);
    double result[4] = {};
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(result, stats, sizeof result, cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    for (void* p : {static_cast<void*>(d_ids), static_cast<void*>(d_mask), static_cast<void*>(d_raw_cu),
                    static_cast<void*>(l_ids), static_cast<void*>(l_labels), static_cast<void*>(l_mask),
                    static_cast<void*>(logits), static_cast<void*>(stats)})
      HEADROOM_CUDA_TRY(cudaFreeAsync(p, s.get()));
    s.synchronize();
    bool const match = result[1] == ref_tokens && std::fabs(result[2] - ref_sum / ref_tokens) < 1e-4;
    std::lock_guard lock(print);
    std::printf("rank %d: loss sum %.6f over %.0f tokens, mean %.6f, grad_scale %.3g (host reference: mean %.6f over %.0f) %s\n",
                comm.rank(), result[0], result[1], result[2], result[3], ref_sum / ref_tokens, ref_tokens,
                match ? "ok" : "MISMATCH");
    ok = ok && match;
  });
  return ok ? 0 : 1;
} catch (std::exception const& e) {
  std::fprintf(stderr, "example_cp_local_loss: %s\n", e.what());
  return 1;
}
