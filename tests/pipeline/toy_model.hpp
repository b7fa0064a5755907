// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small MLP split into virtual stages, for the executor tests: stage s computes
// y = tanh(x W_s^T + b_s) on micro-batches of `rows` x `width` floats, the last stage's loss is
// 0.5 |y - t_k|^2. The same functions serve the pipelined stage (through the executor's buffers)
// and the single-rank reference, so the two runs do the same float operations in the same order
// when the pipeline accumulates weight gradients in micro-batch order.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <span>
#include <vector>

#include "headroom/pipeline.hpp"

namespace toy {

struct dims {
  int width = 8;
  int rows = 2;
  [[nodiscard]] std::size_t floats() const { return static_cast<std::size_t>(width) * static_cast<std::size_t>(rows); }
  [[nodiscard]] std::size_t bytes() const { return floats() * sizeof(float); }
};

struct params {
  std::vector<float> w, b, dw, db;
};

// Deterministic, irregular values (no RNG state shared between ranks).
inline float value(int a, int b, int c) {
  return static_cast<float>(std::sin(0.7 * a + 1.3 * b + 2.1 * c + 0.5)) * 0.5f;
}

inline params make_params(dims d, int stage) {
  params p;
  auto const n = static_cast<std::size_t>(d.width);
  p.w.resize(n * n);
  p.b.resize(n);
  p.dw.assign(n * n, 0.0f);
  p.db.assign(n, 0.0f);
  for (std::size_t i = 0; i < n * n; ++i) p.w[i] = value(stage, static_cast<int>(i), 1);
  for (std::size_t i = 0; i < n; ++i) p.b[i] = value(stage, static_cast<int>(i), 2);
  return p;
}
inline void data(dims d, int microbatch, std::span<float> x) {
  for (std::size_t i = 0; i < d.floats(); ++i) x[i] = value(microbatch, static_cast<int>(i), 3);
}
inline float target(int microbatch, std::size_t i) { return value(microbatch, static_cast<int>(i), 4); }

inline void forward(dims d, params const& p, std::span<float const> x, std::span<float> y) {
  auto const n = static_cast<std::size_t>(d.width);
  for (std::size_t r = 0; r < static_cast<std::size_t>(d.rows); ++r)
    for (std::size_t o = 0; o < n; ++o) {
      float z = p.b[o];
      for (std::size_t i = 0; i < n; ++i) z += x[r * n + i] * p.w[o * n + i];
      y[r * n + o] = std::tanh(z);
    }
}
// Loss of one micro-batch and dL/dy.
inline double loss(dims d, int microbatch, std::span<float const> y, std::span<float> dy) {
  double l = 0;
  for (std::size_t i = 0; i < d.floats(); ++i) {
    dy[i] = y[i] - target(microbatch, i);
    l += 0.5 * static_cast<double>(dy[i]) * static_cast<double>(dy[i]);
  }
  return l;
}
// dz = dy (1 - y^2); dx = dz W (when dx is not empty).
inline void input_grad(dims d, params const& p, std::span<float const> y, std::span<float const> dy, std::span<float> dz,
                       std::span<float> dx) {
  auto const n = static_cast<std::size_t>(d.width);
  for (std::size_t i = 0; i < d.floats(); ++i) dz[i] = dy[i] * (1.0f - y[i] * y[i]);
  if (dx.empty()) return;
  for (std::size_t r = 0; r < static_cast<std::size_t>(d.rows); ++r)
    for (std::size_t i = 0; i < n; ++i) {
      float g = 0;
      for (std::size_t o = 0; o < n; ++o) g += dz[r * n + o] * p.w[o * n + i];
      dx[r * n + i] = g;
    }
}
// dW += dz^T x; db += sum over rows of dz.
inline void weight_grad(dims d, params& p, std::span<float const> x, std::span<float const> dz) {
  auto const n = static_cast<std::size_t>(d.width);
  for (std::size_t r = 0; r < static_cast<std::size_t>(d.rows); ++r)
    for (std::size_t o = 0; o < n; ++o) {
      for (std::size_t i = 0; i < n; ++i) p.dw[o * n + i] += dz[r * n + o] * x[r * n + i];
      p.db[o] += dz[r * n + o];
    }
}

/// Per-stage costs of this model: stash = y and dL/dy (2 tensors), output = y, weight stash =
/// x and dz, parameters = W, b and their gradients.
inline headroom::pipeline::stage_bytes stage_cost(dims d) {
  std::size_t const t = d.bytes();
  std::size_t const param_floats = static_cast<std::size_t>(d.width) * static_cast<std::size_t>(d.width + 1);
  return {.activations = 2 * t, .output = t, .weight_stash = 2 * t, .parameters = 2 * param_floats * sizeof(float)};
}

template <class T>
std::span<T> floats(std::span<std::byte> b) {
  return {reinterpret_cast<T*>(b.data()), b.size() / sizeof(float)};
}
inline std::span<float const> cfloats(std::span<std::byte const> b) {
  return {reinterpret_cast<float const*>(b.data()), b.size() / sizeof(float)};
}

/// One rank's chunks of the toy model, as executor callbacks.
template <class Stream>
struct stage {
  dims d;
  std::map<int, params> chunks;  // virtual stage -> its parameters
  std::vector<int> backward_order;  // (stage, micro-batch) pairs as weight gradients were taken, flattened

  std::vector<float> x_of(int stage_index, int microbatch, std::span<std::byte const> input) const {
    std::vector<float> x(d.floats());
    if (stage_index == 0) data(d, microbatch, x);
    else std::memcpy(x.data(), input.data(), d.bytes());
    return x;
  }

  void forward(headroom::pipeline::forward_args<Stream> const& a) {
    auto const x = x_of(a.stage, a.microbatch, a.input);
    auto y = floats<float>(a.stash).first(d.floats());
    toy::forward(d, chunks.at(a.stage), x, y);
    std::memcpy(a.output.data(), y.data(), d.bytes());
  }
  double loss(headroom::pipeline::loss_args<Stream> const& a) {
    auto const st = floats<float>(a.stash);
    return toy::loss(d, a.microbatch, cfloats(a.output), st.subspan(d.floats()));
  }
  // dz into `dz`, dx into a.grad_input; returns x for the weight gradient.
  std::vector<float> input_half(headroom::pipeline::backward_args<Stream> const& a, std::span<float> dz) {
    auto const st = floats<float>(a.stash);
    auto const y = st.first(d.floats());
    std::span<float const> dy = a.grad_output.empty() ? std::span<float const>(st.subspan(d.floats())) : cfloats(a.grad_output);
    toy::input_grad(d, chunks.at(a.stage), y, dy, dz, floats<float>(a.grad_input));
    return x_of(a.stage, a.microbatch, a.input);
  }
  void backward(headroom::pipeline::backward_args<Stream> const& a) {
    std::vector<float> dz(d.floats());
    auto const x = input_half(a, dz);
    toy::weight_grad(d, chunks.at(a.stage), x, dz);
    backward_order.push_back(a.stage * 1000 + a.microbatch);
  }
  void backward_input(headroom::pipeline::backward_args<Stream> const& a) {
    auto ws = floats<float>(a.weight_stash);
    auto const x = input_half(a, ws.subspan(d.floats(), d.floats()));
    std::memcpy(ws.data(), x.data(), d.bytes());
  }
  void backward_weight(headroom::pipeline::weight_args<Stream> const& a) {
    auto ws = floats<float>(a.weight_stash);
    toy::weight_grad(d, chunks.at(a.stage), ws.first(d.floats()), ws.subspan(d.floats(), d.floats()));
    backward_order.push_back(a.stage * 1000 + a.microbatch);
  }
};

/// The micro-batch order in which each virtual stage of `s` takes its weight gradients (its
/// backward, or backward_weight, actions in list order).
inline std::vector<std::vector<int>> weight_order(headroom::pipeline::schedule const& s) {
  using headroom::pipeline::action_kind;
  std::vector<std::vector<int>> order(static_cast<std::size_t>(s.shape().virtual_stages()));
  for (auto const& list : s.ranks())
    for (auto const& a : list)
      if (a.kind == action_kind::backward || a.kind == action_kind::backward_weight)
        order[static_cast<std::size_t>(a.stage)].push_back(a.microbatch);
      else if (a.kind == action_kind::overlapped)  // its backward is whole: it takes the weight gradient
        order[static_cast<std::size_t>(a.backward_stage)].push_back(a.backward_microbatch);
  return order;
}

/// The whole model on one rank, micro-batch after micro-batch: the reference. Stage s adds its
/// micro-batches' weight gradients in the order `order[s]` (micro-batch order when absent), as
/// a pipeline that runs backwards in another order does (PyTorch's ScheduleLoopedBFS).
struct reference {
  std::vector<params> stages;
  std::vector<double> losses;
};
inline reference run_reference(dims d, int virtual_stages, int microbatches, std::vector<std::vector<int>> const& order = {}) {
  auto const vs = static_cast<std::size_t>(virtual_stages);
  auto const m = static_cast<std::size_t>(microbatches);
  reference ref;
  for (int s = 0; s < virtual_stages; ++s) ref.stages.push_back(make_params(d, s));
  // x and dz of every (stage, micro-batch): the weight gradients' inputs.
  std::vector<std::vector<float>> xs_of(vs * m), dz_of(vs * m);
  for (std::size_t k = 0; k < m; ++k) {
    std::vector<std::vector<float>> xs(vs + 1, std::vector<float>(d.floats()));
    data(d, static_cast<int>(k), xs[0]);
    for (std::size_t s = 0; s < vs; ++s) forward(d, ref.stages[s], xs[s], xs[s + 1]);
    std::vector<float> dy(d.floats()), dz(d.floats()), dx(d.floats());
    ref.losses.push_back(loss(d, static_cast<int>(k), xs.back(), dy));
    for (std::size_t s = vs; s-- > 0;) {
      input_grad(d, ref.stages[s], xs[s + 1], dy, dz, s > 0 ? std::span<float>(dx) : std::span<float>());
      xs_of[s * m + k] = xs[s];
      dz_of[s * m + k] = dz;
      dy = dx;
    }
  }
  for (std::size_t s = 0; s < vs; ++s)
    for (std::size_t i = 0; i < m; ++i) {
      std::size_t const k = s < order.size() && !order[s].empty() ? static_cast<std::size_t>(order[s][i]) : i;
      weight_grad(d, ref.stages[s], xs_of[s * m + k], dz_of[s * m + k]);
    }
  return ref;
}

}  // namespace toy
