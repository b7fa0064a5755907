// SPDX-License-Identifier: Apache-2.0
// Communication buffers that do not hold memory back: the PyTorch forum's tensor-parallel model
// (dev-discuss.pytorch.org, "FSDP & CUDACachingAllocator: an outsider newb perspective") written
// with lifetime guards. Copy the loop in
// `forward` into your engine.
//
// Each layer computes y = x @ W on the compute stream, all-reduces y on a communication stream,
// and the next layer reads y. The old activation x must not be freed while the all-reduce that
// read it (the previous layer's) may still run. With record_stream that free is deferred until
// the host sees the comm stream's event complete, so memory grows while the host runs ahead. With
// a stream_ordered guard the compute stream waits for the comm stream on the device and frees at
// once: the next layer reuses the same block, and the host never blocks.
//
// Runs on every visible GPU (one thread each, NCCL). Weights are identities, inputs small
// integers, so the result after L layers on R ranks is exactly x * R^L: the example checks it,
// and checks that the pool never held more than the weights, the input and two activations.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <optional>
#include <vector>

#include <headroom/cuda.hpp>
#include <headroom/lifetime/cuda.hpp>
#include <headroom/nccl.hpp>

using namespace headroom;
// headroom::cuda is spelled out: a code base that uses CCCL, CUB or Thrust has a global ::cuda.
using bf16 = __nv_bfloat16;
using buffer = lifetime::device_guard<lifetime::stream_ordered>;  // weights and activations

namespace {

constexpr int hidden = 1024, batch = 512, layers = 4, steps = 3;
constexpr std::size_t act_bytes = std::size_t{batch} * hidden * sizeof(bf16);
constexpr std::size_t weight_bytes = std::size_t{hidden} * hidden * sizeof(bf16);

void cublas_try(cublasStatus_t s, char const* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw cuda_error(std::string(what) + " failed: " + cublasGetStatusString(s));
}

__global__ void fill_identity(bf16* w, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * n; i += gridDim.x * blockDim.x)
    w[i] = __float2bfloat16(i / n == i % n ? 1.0f : 0.0f);
}

float input_value(std::size_t i) { return static_cast<float>(static_cast<int>(i % 5) - 2); }  // -2 .. 2

// One forward pass. Returns the last activation; every other one was released as soon as the
// next layer had been issued, ordered after the all-reduce that read it.
buffer forward(nccl::communicator& comm, headroom::cuda::async_resource& pool, cublasHandle_t blas,
              std::vector<buffer> const& weights, buffer const& input,
              headroom::cuda::stream_view compute, headroom::cuda::stream_view comm_stream) {
  std::optional<buffer> x;
  for (int l = 0; l < layers; ++l) {
    buffer y(pool, compute, act_bytes, alignof(bf16));
    float const one = 1.0f, zero = 0.0f;
    auto const* in = static_cast<bf16 const*>(x ? x->data() : input.data());
    cublas_try(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, hidden, batch, hidden, &one, weights[l].data(), CUDA_R_16BF,
                            hidden, in, CUDA_R_16BF, hidden, &zero, y.data(), CUDA_R_16BF, hidden, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
    // The comm stream waits for the GEMM, all-reduces y, and y records that use.
    auto work = lifetime::all_reduce_async<bf16>(comm, y, reduce_op::sum, compute, comm_stream);
    work.wait(compute);  // the next layer (on compute) reads the reduced y
    x = std::move(y);    // the old x: compute waits for its all-reduce on the device, then frees it
  }
  return std::move(*x);
}

}  // namespace

int main() try {
  int const n = headroom::cuda::device_count();
  expects(n >= 1, "example_comm_buffer_lifetime needs a CUDA device, found none");
  std::mutex print;
  nccl::launch_per_device(nccl::first_devices(n), [&](nccl::communicator& comm) {
    headroom::cuda::async_resource pool(comm.device());
    headroom::cuda::stream compute, comm_stream;
    cublasHandle_t blas = nullptr;
    cublas_try(cublasCreate(&blas), "cublasCreate");
    cublas_try(cublasSetStream(blas, compute.get()), "cublasSetStream");

    std::vector<buffer> weights;
    for (int l = 0; l < layers; ++l) {
      weights.emplace_back(pool, compute, weight_bytes, alignof(bf16));
      fill_identity<<<256, 256, 0, compute.get()>>>(static_cast<bf16*>(weights.back().data()), hidden);
      HEADROOM_CUDA_CHECK_LAST();
    }
    buffer input(pool, compute, act_bytes, alignof(bf16));
    std::vector<bf16> host(act_bytes / sizeof(bf16));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = __float2bfloat16(input_value(i));
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(input.data(), host.data(), act_bytes, cudaMemcpyHostToDevice, compute.get()));
    compute.synchronize();
    pool.reset_high_water_marks();

    std::size_t wrong = 0;
    for (int step = 0; step < steps; ++step) {
      buffer out = forward(comm, pool, blas, weights, input, compute, comm_stream);
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), out.data(), act_bytes, cudaMemcpyDeviceToHost, compute.get()));
      compute.synchronize();
      float scale = 1.0f;
      for (int l = 0; l < layers; ++l) scale *= static_cast<float>(comm.size());
      for (std::size_t i = 0; i < host.size(); ++i) wrong += __bfloat162float(host[i]) != input_value(i) * scale;
    }
    std::uint64_t const peak = pool.used_bytes_high();
    std::uint64_t const bound = layers * weight_bytes + 3 * act_bytes;  // weights, input, x and y
    cublasDestroy(blas);
    std::lock_guard lock(print);
    std::printf("rank %d/%d: %d steps x %d layers, peak pool use %s (weights + input + 2 activations = %s), "
                "wrong values %zu\n",
                comm.rank(), comm.size(), steps, layers, format_bytes(peak).c_str(), format_bytes(bound).c_str(), wrong);
    expects<logic_error>(wrong == 0, "rank ", comm.rank(), ": ", wrong, " values differ from x * ranks^layers");
    expects<logic_error>(peak <= bound, "rank ", comm.rank(), ": peak pool use ", peak, " exceeds ", bound,
                         ": an activation was kept beyond its last use");
  });
  std::printf("comm_buffer_lifetime: OK\n");
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "comm_buffer_lifetime failed: %s\n", e.what());
  return 1;
}
