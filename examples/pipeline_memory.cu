// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// pipeline_memory: every pipeline stage reports its device memory; the writer (the last stage, as
// in Megatron) logs the max across the pipeline group, gathered in ONE collective.
//
// Under 1F1B the first stage holds p micro-batches' activations and the last stage one, so the
// peak sits on stage 0 while dashboards are written by the last rank (docs/stats.md). Here 2
// stages run on 2 GPUs (one thread each, NCCL) with the pipeline executor; each stage's memory
// comes from its own cudaMemPool_t (weights and the executor's buffers alike), reported under
// torch.cuda.memory_stats() key names by stats::cuda::mem_pool_stats. After the step every stage
// joins one all_gather; the writer prints, per key, the max, the stage that holds it and what it
// saw itself, next to the memory model's prediction for each stage.
//
// The model is deliberately small arithmetic (each stage: `layers` elementwise scalings, the
// saved inputs of each layer kept for the backward, a sum as the loss): the memory pattern is
// the one of a real model with these per-micro-batch sizes.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include <headroom/nccl.hpp>
#include <headroom/pipeline/cuda.hpp>
#include <headroom/stats/cuda.hpp>

namespace cu = headroom::cuda;
namespace hp = headroom::pipeline;
namespace hs = headroom::stats;
namespace nc = headroom::nccl;

namespace {

constexpr std::size_t elements = std::size_t{8} << 20;  // 32 MiB of floats per tensor
constexpr int microbatches = 8;

__global__ void scale(float* y, float const* x, float w, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    y[i] = x == nullptr ? w : w * x[i];
}
__global__ void sum(float const* x, std::size_t n, float* out) {
  float s = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) s += x[i];
  atomicAdd(out, s);
}

float* floats(std::span<std::byte> b) { return reinterpret_cast<float*>(b.data()); }
float const* floats(std::span<std::byte const> b) { return reinterpret_cast<float const*>(b.data()); }

// `layers` scalings y = w x; the stash holds each layer's input for the backward.
struct scaling_stage {
  int layers;
  float w;
  hp::cuda::device_values<float>* losses;

  void forward(hp::forward_args<cu::stream_view> const& a) {
    float* saved = floats(a.stash);
    float const* x = a.input.empty() ? nullptr : floats(a.input);  // stage 0 makes its input
    for (int l = 0; l < layers; ++l) {
      float* y = l + 1 < layers ? saved + elements * std::size_t(l + 1) : floats(a.output);
      if (l == 0) scale<<<256, 256, 0, a.stream.get()>>>(saved, x, x == nullptr ? float(a.microbatch + 1) : 1.0f, elements);
      scale<<<256, 256, 0, a.stream.get()>>>(y, saved + elements * std::size_t(l), w, elements);
    }
  }
  float* loss(hp::loss_args<cu::stream_view> const& a) {
    float* slot = losses->at(a.microbatch);
    sum<<<256, 256, 0, a.stream.get()>>>(floats(a.output), elements, slot);
    return slot;
  }
  void backward(hp::backward_args<cu::stream_view> const& a) {
    if (a.grad_input.empty()) return;  // stage 0: no gradient of the data
    float wl = 1.0f;
    for (int l = 0; l < layers; ++l) wl *= w;
    // d(sum)/dy = 1 on the last stage; otherwise the received gradient.
    scale<<<256, 256, 0, a.stream.get()>>>(floats(a.grad_input), a.grad_output.empty() ? nullptr : floats(a.grad_output), wl,
                                           elements);
  }
};

}  // namespace

int main() try {
  int const stages = 2;
  int const writer = stages - 1;  // Megatron writes from the last rank
  hp::pipeline_shape const shape{.stages = stages, .microbatches = microbatches};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  std::size_t const tensor = elements * sizeof(float);
  std::size_t const weights = std::size_t{64} << 20;
  // Stage 0 runs 3 layers (3 saved inputs), stage 1 one layer; both send or return one tensor.
  hp::model_bytes const bytes({{.activations = 3 * tensor, .output = tensor, .weight_stash = 0, .parameters = weights},
                               {.activations = 1 * tensor, .output = tensor, .weight_stash = 0, .parameters = weights}});
  auto const plan = hp::predict_memory(sched, bytes, hp::retention::reduced{});
  std::ostringstream text;
  text << plan;
  std::printf("%s", text.str().c_str());

  nc::launch_per_device(nc::first_devices(stages), [&](nc::communicator& pp) {
    cu::async_resource memory(pp.device());
    cu::stream s;
    void* params = memory.allocate(s, weights);  // the stage's weights: held across steps
    hp::cuda::device_values<float> losses(memory, s, microbatches);
    scaling_stage stage{.layers = pp.rank() == 0 ? 3 : 1, .w = 0.5f, .losses = &losses};
    hp::cuda::nccl_executor<> exec(pp, memory, sched, bytes, s, s);

    // The reducer and its device workspace are made once, before the steps (query first).
    auto const reduce_plan = hs::reduce_plan::for_report<hs::cuda::mem_pool_report>();
    hs::workspace ws(cu::async_resource::device_default(pp.device()), s.view(),
                     hs::cuda::blocking_device_staging::workspace_bytes(reduce_plan, pp.size()));
    hs::reducer<hs::cuda::blocking_device_staging> reduce(reduce_plan, hs::cuda::blocking_device_staging(ws.bytes()));

    s.synchronize();
    hs::cuda::reset_mem_pool_peaks(memory.pool());  // a new logging window
    exec.step(stage, hp::retention::reduced{});
    s.synchronize();
    auto const local = hs::cuda::mem_pool_stats(memory);

    // Every stage calls this: one all_gather; only the writer gets the table.
    if (auto const table = reduce.gather_to(writer, local, pp, s.view())) {
      std::printf("step memory, written by stage %d (max over the %d stages in one collective)\n", pp.rank(), pp.size());
      std::printf("  %-28s %12s %6s %14s\n", "stat", "max", "stage", "writer's own");
      for (auto const& row : *table)
        std::printf("  %-28s %12s %6d %14s\n", row.name.c_str(),
                    headroom::format_bytes(static_cast<std::uint64_t>(std::get<0>(row.max))).c_str(), row.argmax,
                    headroom::format_bytes(static_cast<std::uint64_t>(std::get<0>(row.per_rank[std::size_t(writer)]))).c_str());
      auto const& peak = table->at("allocated_bytes.all.peak");
      for (int r = 0; r < stages; ++r)
        std::printf("  stage %d: measured peak %s, memory model %s (+ the loss slots)\n", r,
                    headroom::format_bytes(static_cast<std::uint64_t>(std::get<0>(peak.per_rank[std::size_t(r)]))).c_str(),
                    headroom::format_bytes(static_cast<std::uint64_t>(plan.rank(r).total())).c_str());
      int const predicted = plan.max_rank().rank;
      std::printf("  peak on stage %d (the model says stage %d); the writer alone would have logged %s\n", peak.argmax,
                  predicted, headroom::format_bytes(static_cast<std::uint64_t>(std::get<0>(peak.per_rank[std::size_t(writer)]))).c_str());
      if (peak.argmax != predicted)
        throw headroom::logic_error("pipeline_memory: the measured peak is not on the stage the memory model predicts");
    }
    memory.deallocate(s, params, weights);
    s.synchronize();
  });
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "pipeline_memory: %s\n", e.what());
  return 1;
}
