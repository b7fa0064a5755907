// SPDX-License-Identifier: Apache-2.0
#pragma once
// The toy MLP of toy_model.hpp on the GPU, for the NCCL and MPI executor tests: the same stage
// functions, buffer layout and stage_cost, computed by small kernels that round every product and
// sum on their own (__fmul_rn, __fadd_rn: no FMA contraction) in the host loops' order. Only tanh
// differs from the host (CUDA's tanhf vs glibc's), so a pipelined run is compared bit for bit with
// a single-GPU run of the same kernels (device_reference) and within a tolerance with the host
// reference. Inputs and targets are made on the host (toy::data, toy::target) and uploaded.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <map>
#include <span>
#include <vector>

#include "common/device_vector.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/pipeline/cuda.hpp"
#include "toy_model.hpp"

namespace device_toy {

using headroom::cuda::stream_view;
using headroom_test::device_vector;
namespace hp = headroom::pipeline;

// y[r, o] = tanh(b[o] + sum_i x[r, i] w[o, i]), the host loop's order.
__global__ void forward_kernel(int rows, int n, float const* x, float const* w, float const* b, float* y) {
  int const t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= rows * n) return;
  int const r = t / n;
  int const o = t % n;
  float z = b[o];
  for (int i = 0; i < n; ++i) z = __fadd_rn(z, __fmul_rn(x[r * n + i], w[o * n + i]));
  y[t] = tanhf(z);
}
// dy = y - t; loss = sum 0.5 dy^2 in double, sequentially (the host's order).
__global__ void loss_kernel(int count, float const* y, float const* target, float* dy, double* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double l = 0;
  for (int i = 0; i < count; ++i) {
    float const d = __fsub_rn(y[i], target[i]);
    dy[i] = d;
    l += 0.5 * static_cast<double>(d) * static_cast<double>(d);
  }
  *loss = l;
}
// dz = dy (1 - y^2)
__global__ void dz_kernel(int count, float const* y, float const* dy, float* dz) {
  int const t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t < count) dz[t] = __fmul_rn(dy[t], __fsub_rn(1.0f, __fmul_rn(y[t], y[t])));
}
// dx[r, i] = sum_o dz[r, o] w[o, i]
__global__ void dx_kernel(int rows, int n, float const* dz, float const* w, float* dx) {
  int const t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= rows * n) return;
  int const r = t / n;
  int const i = t % n;
  float g = 0;
  for (int o = 0; o < n; ++o) g = __fadd_rn(g, __fmul_rn(dz[r * n + o], w[o * n + i]));
  dx[t] = g;
}
// dw[o, i] += dz[r, o] x[r, i] over r in order; db[o] += dz[r, o] (thread o of the first n).
__global__ void weight_grad_kernel(int rows, int n, float const* x, float const* dz, float* dw, float* db) {
  int const t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= n * n) return;
  int const o = t / n;
  int const i = t % n;
  float acc = dw[t];
  for (int r = 0; r < rows; ++r) acc = __fadd_rn(acc, __fmul_rn(dz[r * n + o], x[r * n + i]));
  dw[t] = acc;
  if (i == 0) {
    float s = db[o];
    for (int r = 0; r < rows; ++r) s = __fadd_rn(s, dz[r * n + o]);
    db[o] = s;
  }
}

inline unsigned blocks(std::size_t threads) { return static_cast<unsigned>((threads + 127) / 128); }

/// One virtual stage's parameters and gradients in device memory.
struct device_params {
  device_vector<float> w, b, dw, db;
  explicit device_params(toy::params const& p)
      : w(p.w), b(p.b), dw(std::vector<float>(p.dw.size(), 0.0f)), db(std::vector<float>(p.db.size(), 0.0f)) {}
  [[nodiscard]] toy::params download() const { return {w.download(), b.download(), dw.download(), db.download()}; }
};

/// Inputs and targets of every micro-batch, uploaded once (each rank keeps its own copy).
struct batch {
  device_vector<float> data, targets;
  batch(toy::dims d, int microbatches)
      : data(host_values(d, microbatches, false)), targets(host_values(d, microbatches, true)) {}
  static std::vector<float> host_values(toy::dims d, int microbatches, bool targets) {
    std::vector<float> v(d.floats() * static_cast<std::size_t>(microbatches));
    for (int k = 0; k < microbatches; ++k) {
      std::span<float> row(v.data() + d.floats() * static_cast<std::size_t>(k), d.floats());
      if (targets) {
        for (std::size_t i = 0; i < d.floats(); ++i) row[i] = toy::target(k, i);
      } else {
        toy::data(d, k, row);
      }
    }
    return v;
  }
  [[nodiscard]] float const* x(toy::dims d, int k) const { return data.data() + d.floats() * static_cast<std::size_t>(k); }
  [[nodiscard]] float const* t(toy::dims d, int k) const { return targets.data() + d.floats() * static_cast<std::size_t>(k); }
};

// The math of one stage, shared by the executor's stage and the reference.
inline void forward(toy::dims d, device_params const& p, float const* x, float* y, stream_view s) {
  forward_kernel<<<blocks(d.floats()), 128, 0, s.get()>>>(d.rows, d.width, x, p.w.data(), p.b.data(), y);
  HEADROOM_CUDA_TRY(cudaGetLastError());
}
inline void input_grad(toy::dims d, device_params const& p, float const* y, float const* dy, float* dz, float* dx,
                       stream_view s) {
  dz_kernel<<<blocks(d.floats()), 128, 0, s.get()>>>(static_cast<int>(d.floats()), y, dy, dz);
  if (dx != nullptr) dx_kernel<<<blocks(d.floats()), 128, 0, s.get()>>>(d.rows, d.width, dz, p.w.data(), dx);
  HEADROOM_CUDA_TRY(cudaGetLastError());
}
inline void weight_grad(toy::dims d, device_params& p, float const* x, float const* dz, stream_view s) {
  auto const n = static_cast<std::size_t>(d.width);
  weight_grad_kernel<<<blocks(n * n), 128, 0, s.get()>>>(d.rows, d.width, x, dz, p.dw.data(), p.db.data());
  HEADROOM_CUDA_TRY(cudaGetLastError());
}

inline float* floats(std::span<std::byte> b) { return reinterpret_cast<float*>(b.data()); }
inline float const* floats(std::span<std::byte const> b) { return reinterpret_cast<float const*>(b.data()); }

/// One rank's chunks as executor callbacks on the executor's buffers (stash = [y | dy],
/// weight stash = [x | dz], as toy::stage). loss() returns the device slot it wrote.
struct stage {
  toy::dims d;
  batch const* inputs;
  hp::cuda::device_values<double>* losses;
  std::map<int, device_params> chunks;
  device_vector<float> dz;  // backward scratch: every use is ordered on the one compute stream

  stage(toy::dims dims, batch const& b, hp::cuda::device_values<double>& l) : d(dims), inputs(&b), losses(&l), dz(dims.floats()) {}

  [[nodiscard]] float const* x_of(int stage_index, int k, std::span<std::byte const> input) const {
    return stage_index == 0 ? inputs->x(d, k) : floats(input);
  }
  void forward(hp::forward_args<stream_view> const& a) {
    float* y = floats(a.stash);
    device_toy::forward(d, chunks.at(a.stage), x_of(a.stage, a.microbatch, a.input), y, a.stream);
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(a.output.data(), y, d.bytes(), cudaMemcpyDeviceToDevice, a.stream.get()));
  }
  double* loss(hp::loss_args<stream_view> const& a) {
    double* slot = losses->at(a.microbatch);
    loss_kernel<<<1, 1, 0, a.stream.get()>>>(static_cast<int>(d.floats()), floats(a.output), inputs->t(d, a.microbatch),
                                            floats(a.stash) + d.floats(), slot);
    HEADROOM_CUDA_TRY(cudaGetLastError());
    return slot;
  }
  void input_half(hp::backward_args<stream_view> const& a, float* dz_out) {
    float const* y = floats(a.stash);
    float const* dy = a.grad_output.empty() ? y + d.floats() : floats(a.grad_output);
    input_grad(d, chunks.at(a.stage), y, dy, dz_out, a.grad_input.empty() ? nullptr : floats(a.grad_input), a.stream);
  }
  void backward(hp::backward_args<stream_view> const& a) {
    input_half(a, dz.data());
    weight_grad(d, chunks.at(a.stage), x_of(a.stage, a.microbatch, a.input), dz.data(), a.stream);
  }
  void backward_input(hp::backward_args<stream_view> const& a) {
    float* ws = floats(a.weight_stash);
    input_half(a, ws + d.floats());
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(ws, x_of(a.stage, a.microbatch, a.input), d.bytes(), cudaMemcpyDeviceToDevice,
                                      a.stream.get()));
  }
  void backward_weight(hp::weight_args<stream_view> const& a) {
    float* ws = floats(a.weight_stash);
    weight_grad(d, chunks.at(a.stage), ws, ws + d.floats(), a.stream);
  }
};
static_assert(hp::split_backward_stage<stage, stream_view>);

/// One rank's part of the toy on its GPU: inputs, loss slots, and the stage with the rank's chunks,
/// the virtual stages the schedule's placement puts on `rank` (the V of zbv / dualpipe_v is not
/// the shape's interleaved placement).
struct rank_model {
  batch inputs;
  hp::cuda::device_values<double> losses;
  device_toy::stage stage;

  rank_model(toy::dims d, hp::schedule const& sched, int rank, headroom::cuda::async_resource& memory, stream_view s)
      : inputs(d, sched.shape().microbatches), losses(memory, s, sched.shape().microbatches), stage(d, inputs, losses) {
    for (int c = 0; c < sched.shape().chunks; ++c) {
      int const v = sched.placement().virtual_stage(rank, c);
      stage.chunks.emplace(v, device_params(toy::make_params(d, v)));
    }
  }
  rank_model(rank_model const&) = delete;  // the stage points at the inputs and slots
  rank_model& operator=(rank_model const&) = delete;
};

/// The whole model on the current GPU, micro-batch after micro-batch, with the same kernels,
/// taking the micro-batches in `order` (0, 1, ... when empty): the order in which every stage
/// of the pipeline adds its weight gradients (reversed for PyTorch's ScheduleLoopedBFS).
struct reference {
  std::vector<toy::params> stages;
  std::vector<double> losses;
};
inline reference run_reference(toy::dims d, int virtual_stages, int microbatches, stream_view s,
                               std::vector<int> const& order = {}) {
  auto const vs = static_cast<std::size_t>(virtual_stages);
  batch const in(d, microbatches);
  std::vector<device_params> params;
  for (int v = 0; v < virtual_stages; ++v) params.emplace_back(toy::make_params(d, v));
  device_vector<float> ys(d.floats() * vs), dy(d.floats()), dz(d.floats()), dx(d.floats());
  device_vector<double> losses(static_cast<std::size_t>(microbatches));
  auto y = [&](std::size_t v) { return ys.data() + d.floats() * v; };
  for (int i = 0; i < microbatches; ++i) {
    int const k = order.empty() ? i : order[static_cast<std::size_t>(i)];
    for (std::size_t v = 0; v < vs; ++v) forward(d, params[v], v == 0 ? in.x(d, k) : y(v - 1), y(v), s);
    loss_kernel<<<1, 1, 0, s.get()>>>(static_cast<int>(d.floats()), y(vs - 1), in.t(d, k), dy.data(), losses.data() + k);
    HEADROOM_CUDA_TRY(cudaGetLastError());
    for (std::size_t v = vs; v-- > 0;) {
      input_grad(d, params[v], y(v), dy.data(), dz.data(), v > 0 ? dx.data() : nullptr, s);
      weight_grad(d, params[v], v == 0 ? in.x(d, k) : y(v - 1), dz.data(), s);
      if (v > 0) HEADROOM_CUDA_TRY(cudaMemcpyAsync(dy.data(), dx.data(), d.bytes(), cudaMemcpyDeviceToDevice, s.get()));
    }
  }
  s.synchronize();
  reference ref;
  for (auto const& p : params) ref.stages.push_back(p.download());
  ref.losses = losses.download();
  return ref;
}

/// |a - b| <= tol * (1 + |b|) everywhere.
inline bool close(std::vector<float> const& a, std::vector<float> const& b, float tol = 1e-4f) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol * (1.0f + std::fabs(b[i])))) return false;
  return true;
}

}  // namespace device_toy
