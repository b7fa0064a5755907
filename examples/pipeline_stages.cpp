// SPDX-License-Identifier: Apache-2.0
// A model's pipeline stages on thread ranks with the host executor: four ranks each hold one
// dense + tanh layer, eight micro-batches go through them per step, and a few SGD steps train
// the model. The executor allocates every activation, stash and gradient from the resource it
// is given and counts them, so each rank's measured peak can be set against predict_memory's.
//
//   example_pipeline_stages   prints the 1F1B schedule, the loss of each step, and per rank the
//                             peak bytes held under GPipe and 1F1B, measured and predicted;
//                             exits 1 if a measured peak differs from the prediction or the
//                             loss does not fall
//
// The stage is the part to copy: forward / loss / backward read and write the executor's
// buffers (input, output, stash, gradients) and nothing else; stage_bytes() tells the executor
// and the memory model how large they are.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <headroom/core/bytes.hpp>
#include <headroom/host/aligned_resource.hpp>
#include <headroom/host/thread_group.hpp>
#include <headroom/pipeline.hpp>

namespace pp = headroom::pipeline;
using headroom::host::inline_stream;

namespace {

constexpr int ranks = 4;
constexpr int microbatches = 8;
constexpr std::size_t width = 16;  // features per row
constexpr std::size_t rows = 4;    // rows per micro-batch
constexpr std::size_t floats = width * rows;
constexpr float learning_rate = 0.1f;

// Deterministic inputs and targets: the model learns y = 0.5 sin(x) through four layers.
float input_value(int microbatch, std::size_t i) {
  return std::sin(0.37f * static_cast<float>(microbatch) + 0.61f * static_cast<float>(i));
}
float target_value(int microbatch, std::size_t i) { return 0.5f * std::sin(input_value(microbatch, i)); }

std::span<float> as_floats(std::span<std::byte> b) { return {reinterpret_cast<float*>(b.data()), b.size() / sizeof(float)}; }
std::span<float const> as_floats(std::span<std::byte const> b) {
  return {reinterpret_cast<float const*>(b.data()), b.size() / sizeof(float)};
}

// One rank's layer: y = tanh(x W^T + b). The stash keeps x and y for the backward, and on the
// last stage dL/dy, which loss() leaves there.
class dense_tanh_stage {
 public:
  explicit dense_tanh_stage(int stage) : w_(width * width), b_(width, 0.0f), dw_(width * width, 0.0f), db_(width, 0.0f) {
    for (std::size_t i = 0; i < w_.size(); ++i)
      w_[i] = 0.25f * std::sin(1.7f * static_cast<float>(stage) + 0.9f * static_cast<float>(i));
  }

  static pp::stage_bytes bytes() {
    return {.activations = 3 * floats * sizeof(float),                     // stash: x, y, dL/dy
            .output = floats * sizeof(float),                              // y, sent to the next rank
            .parameters = 2 * (width * width + width) * sizeof(float)};    // W, b and their gradients
  }

  void forward(pp::forward_args<inline_stream> const& a) {
    auto const stash = as_floats(a.stash);
    auto const x = stash.first(floats);
    auto const y = stash.subspan(floats, floats);
    for (std::size_t i = 0; i < floats; ++i) x[i] = a.stage == 0 ? input_value(a.microbatch, i) : as_floats(a.input)[i];
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < width; ++o) {
        float z = b_[o];
        for (std::size_t i = 0; i < width; ++i) z += x[r * width + i] * w_[o * width + i];
        y[r * width + o] = std::tanh(z);
      }
    std::copy(y.begin(), y.end(), as_floats(a.output).begin());
  }

  double loss(pp::loss_args<inline_stream> const& a) {
    auto const y = as_floats(a.output);
    auto const dy = as_floats(a.stash).subspan(2 * floats, floats);
    double l = 0;
    for (std::size_t i = 0; i < floats; ++i) {
      dy[i] = y[i] - target_value(a.microbatch, i);
      l += 0.5 * static_cast<double>(dy[i]) * static_cast<double>(dy[i]);
    }
    return l;
  }

  void backward(pp::backward_args<inline_stream> const& a) {
    auto const stash = as_floats(a.stash);
    auto const x = stash.first(floats);
    auto const y = stash.subspan(floats, floats);
    auto const dy = a.grad_output.empty() ? std::span<float const>(stash.subspan(2 * floats, floats)) : as_floats(a.grad_output);
    auto const dx = as_floats(a.grad_input);  // empty on stage 0
    std::vector<float> dz(floats);
    for (std::size_t i = 0; i < floats; ++i) dz[i] = dy[i] * (1.0f - y[i] * y[i]);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < width; ++o) {
        db_[o] += dz[r * width + o];
        for (std::size_t i = 0; i < width; ++i) dw_[o * width + i] += dz[r * width + o] * x[r * width + i];
      }
    if (dx.empty()) return;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < width; ++i) {
        float g = 0;
        for (std::size_t o = 0; o < width; ++o) g += dz[r * width + o] * w_[o * width + i];
        dx[r * width + i] = g;
      }
  }

  // Plain SGD on the gradients the step accumulated (a sum over micro-batches).
  void sgd(float lr) {
    for (std::size_t i = 0; i < w_.size(); ++i) w_[i] -= lr * dw_[i] / microbatches;
    for (std::size_t i = 0; i < b_.size(); ++i) b_[i] -= lr * db_[i] / microbatches;
    std::fill(dw_.begin(), dw_.end(), 0.0f);
    std::fill(db_.begin(), db_.end(), 0.0f);
  }

 private:
  std::vector<float> w_, b_, dw_, db_;
};
static_assert(pp::pipeline_stage<dense_tanh_stage, inline_stream>);

struct run {
  std::vector<double> step_loss;            // mean loss of each step
  std::vector<std::int64_t> measured_peak;  // per rank: most bytes the executor held
};

// `steps` training steps of schedule `sched`, one thread per rank.
run train(pp::schedule const& sched, pp::model_bytes const& bytes, int steps) {
  run out{std::vector<double>(static_cast<std::size_t>(steps)), std::vector<std::int64_t>(ranks)};
  std::mutex m;
  headroom::host::launch(ranks, [&](headroom::host::thread_communicator& comm) {
    headroom::host::aligned_resource memory;  // an engine passes its own allocator here
    pp::executor exec(comm, memory, sched, bytes);
    dense_tanh_stage stage(comm.rank());
    for (int step = 0; step < steps; ++step) {
      auto const result = exec.step(stage, pp::retention::reduced{});  // the last rank gets the losses
      stage.sgd(learning_rate);
      if (result.losses.empty()) continue;
      double sum = 0;
      for (double const l : result.losses) sum += l;
      out.step_loss[static_cast<std::size_t>(step)] = sum / microbatches;
    }
    std::lock_guard lock(m);
    out.measured_peak[static_cast<std::size_t>(comm.rank())] = exec.statistics().bytes().peak;
  });
  return out;
}

}  // namespace

int main() {
  pp::pipeline_shape const shape{.stages = ranks, .microbatches = microbatches};
  auto const one_f_one_b = pp::make_schedule<pp::one_f_one_b>(shape);
  auto const gpipe = pp::make_schedule<pp::gpipe>(shape);
  auto const bytes = pp::model_bytes::uniform(shape, dense_tanh_stage::bytes());  // every stage alike
  std::printf("%d ranks (threads), %d micro-batches of %zu x %zu floats, one dense + tanh layer per rank\n\n", ranks,
              microbatches, rows, width);
  std::printf("1F1B, one column per unit of work (F forward, B backward, number = micro-batch):\n%s\n",
              pp::timeline(one_f_one_b).c_str());

  int constexpr steps = 8;
  auto const trained = train(one_f_one_b, bytes, steps);
  std::printf("training with 1F1B, SGD (lr %.2g), mean loss per micro-batch:\n", static_cast<double>(learning_rate));
  for (int s = 0; s < steps; ++s) std::printf("  step %d  %.6f\n", s + 1, trained.step_loss[static_cast<std::size_t>(s)]);
  bool const learned = trained.step_loss.back() < 0.5 * trained.step_loss.front();

  auto const under_gpipe = train(gpipe, bytes, 1);
  auto const plan_1f1b = pp::predict_memory(one_f_one_b, bytes, pp::retention::reduced{});
  auto const plan_gpipe = pp::predict_memory(gpipe, bytes, pp::retention::reduced{});
  std::printf("\npeak bytes the executor held per rank, measured / predicted by predict_memory (parameters not included):\n");
  std::printf("  rank   GPipe                   1F1B\n");
  bool exact = true;
  for (int r = 0; r < ranks; ++r) {
    auto const g = under_gpipe.measured_peak[static_cast<std::size_t>(r)];
    auto const o = trained.measured_peak[static_cast<std::size_t>(r)];
    exact = exact && g == plan_gpipe.rank(r).peak && o == plan_1f1b.rank(r).peak;
    std::printf("  %d      %-9s / %-9s   %-9s / %-9s\n", r, headroom::format_bytes(static_cast<std::uint64_t>(g)).c_str(),
                headroom::format_bytes(static_cast<std::uint64_t>(plan_gpipe.rank(r).peak)).c_str(),
                headroom::format_bytes(static_cast<std::uint64_t>(o)).c_str(),
                headroom::format_bytes(static_cast<std::uint64_t>(plan_1f1b.rank(r).peak)).c_str());
  }
  std::printf("\nGPipe keeps all %d micro-batches' stashes on every rank; 1F1B keeps at most p - r on rank r.\n",
              microbatches);
  std::printf("%s\n", exact && learned ? "ok: every peak as predicted, loss fell by more than half"
                                       : "FAILED: a peak differs from the prediction, or the loss did not fall");
  return exact && learned ? 0 : 1;
}
