// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Output retention on the last stage: what is returned, and what is *held*. The caller's own
// resource is a stats::statistics_resource, so the bytes are counted outside the executor too.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"
#include "headroom/stats/statistics_resource.hpp"

namespace hp = headroom::pipeline;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;
using counted = headroom::stats::statistics_resource<aligned_resource>;

namespace {

constexpr std::size_t logits_bytes = 4096;  // the last stage's output, large next to the rest
constexpr std::size_t hidden_bytes = 64;

// Writes the micro-batch number into every output; the loss is the first byte seen.
struct tagging_stage {
  void forward(hp::forward_args<inline_stream> const& a) {
    std::memset(a.output.data(), a.microbatch + 1, a.output.size());
  }
  int loss(hp::loss_args<inline_stream> const& a) { return static_cast<int>(a.output[0]) * 10; }
  void backward(hp::backward_args<inline_stream> const&) {}
};

struct observed {
  std::int64_t last_peak = 0, last_held = 0, given_back_on_drop = 0, first_peak = 0;
  std::size_t outputs = 0, losses = 0, microbatches = 0;
  bool outputs_intact = true;
  std::vector<int> loss_values;
  bool non_last_empty = true;
};

template <class R>
observed run(int p, int m) {
  hp::pipeline_shape const shape{.stages = p, .microbatches = m};
  std::vector<hp::stage_bytes> costs(static_cast<std::size_t>(p), {.activations = 128, .output = hidden_bytes});
  costs.back().output = logits_bytes;
  hp::model_bytes const bytes(costs);
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  observed o;
  std::mutex mutex;
  headroom::host::launch(p, [&](thread_communicator& comm) {
    counted resource;  // the caller's view of its own memory
    hp::executor exec(comm, resource, sched, bytes);
    tagging_stage stage;
    auto result = exec.step(stage, R{});
    std::lock_guard lock(mutex);
    if (comm.rank() == 0) o.first_peak = resource.bytes().peak;
    if (comm.rank() != p - 1) {
      o.non_last_empty = o.non_last_empty && result.outputs.empty() && result.losses.empty();
      return;
    }
    o.last_peak = resource.bytes().peak;
    o.last_held = resource.bytes().value;
    o.outputs = result.outputs.size();
    o.losses = result.losses.size();
    o.microbatches = result.microbatches.size();
    o.loss_values = result.losses;
    for (std::size_t i = 0; i < result.outputs.size(); ++i) {
      auto const* data = static_cast<unsigned char const*>(result.outputs[i].data());
      o.outputs_intact = o.outputs_intact && result.outputs[i].size() == logits_bytes;
      for (std::size_t b = 0; b < logits_bytes; ++b) o.outputs_intact = o.outputs_intact && data[b] == i + 1;
    }
    result.outputs.clear();
    o.given_back_on_drop = o.last_held - resource.bytes().value;
  });
  return o;
}

}  // namespace

TEST_CASE("retention::all returns every output and holds them: memory grows with m") {
  for (int p : {2, 4}) {
    std::map<int, observed> by_m;
    for (int m : {2, 4, 8, 16}) by_m[m] = run<hp::retention::all>(p, m);
    for (auto const& entry : by_m) {
      int const m = entry.first;
      observed const& o = entry.second;
      CAPTURE(p);
      CAPTURE(m);
      CHECK(o.outputs == static_cast<std::size_t>(m));
      CHECK(o.losses == static_cast<std::size_t>(m));
      CHECK(o.outputs_intact);
      CHECK(o.last_held == static_cast<std::int64_t>(m * logits_bytes));  // held until the caller drops them
      CHECK(o.given_back_on_drop == o.last_held);
      CHECK(o.non_last_empty);
      // One more output held per extra micro-batch, exactly (PyTorch's default behaviour).
      CHECK(o.last_peak - by_m[2].last_peak == static_cast<std::int64_t>((m - 2) * logits_bytes));
    }
  }
}

TEST_CASE("retention::reduced keeps the loss values only; retention::none keeps nothing") {
  for (int p : {2, 4}) {
    std::int64_t reduced_peak = -1;
    for (int m : {2, 4, 8, 16, 32}) {
      CAPTURE(p);
      CAPTURE(m);
      auto const r = run<hp::retention::reduced>(p, m);
      auto const n = run<hp::retention::none>(p, m);
      CHECK(r.outputs == 0);
      CHECK(r.losses == static_cast<std::size_t>(m));
      CHECK(r.microbatches == static_cast<std::size_t>(m));
      std::vector<int> want;
      for (int k = 0; k < m; ++k) want.push_back((k + 1) * 10);
      CHECK(r.loss_values == want);
      CHECK((n.outputs == 0 && n.losses == 0 && n.microbatches == 0));
      // Nothing *held*: the last stage's memory does not depend on m.
      CHECK(r.last_held == 0);
      CHECK(n.last_held == 0);
      if (reduced_peak < 0) reduced_peak = r.last_peak;
      CHECK(r.last_peak == reduced_peak);
      CHECK(n.last_peak == reduced_peak);
      // The first stage does not care what the last one keeps.
      CHECK(r.first_peak == run<hp::retention::all>(p, m).first_peak);
    }
  }
}

TEST_CASE("kept outputs count against the next step until the caller drops them") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 4};
  std::vector<hp::stage_bytes> costs(2, {.activations = 128, .output = hidden_bytes});
  costs.back().output = logits_bytes;
  hp::model_bytes const bytes(costs);
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  std::int64_t first = 0, second_holding = 0, third_dropped = 0, predicted = 0;
  headroom::host::launch(2, [&](thread_communicator& comm) {
    counted resource;
    hp::executor exec(comm, resource, sched, bytes);
    tagging_stage stage;
    auto kept = exec.step(stage, hp::retention::all{});
    auto const p1 = exec.statistics().bytes().peak;
    exec.statistics().reset_peaks();  // a new window per step, as a trainer logs them
    auto next = exec.step(stage, hp::retention::all{});  // step 1's outputs are still alive
    auto const p2 = exec.statistics().bytes().peak;
    kept.outputs.clear();
    next.outputs.clear();
    exec.statistics().reset_peaks();
    auto last = exec.step(stage, hp::retention::all{});
    if (comm.rank() == 1) {
      first = p1;
      second_holding = p2;
      third_dropped = exec.statistics().bytes().peak;
      predicted = exec.plan(hp::retention::all{}).rank(1).peak;
    }
  });
  CHECK(first == predicted);
  CHECK(second_holding == predicted + static_cast<std::int64_t>(4 * logits_bytes));  // PyTorch's "until the next step"
  CHECK(third_dropped == predicted);
}

TEST_CASE("kept outputs stay valid when the executor is moved") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 3};
  hp::model_bytes const bytes(std::vector<hp::stage_bytes>(2, {.activations = 16, .output = 32}));
  auto const sched = hp::make_schedule<hp::gpipe>(shape);
  headroom::host::launch(2, [&](thread_communicator& comm) {
    counted resource;
    std::vector<hp::executor<thread_communicator, counted>> executors;
    executors.emplace_back(comm, resource, sched, bytes);
    tagging_stage stage;
    auto result = executors.back().step(stage, hp::retention::all{});
    auto moved = std::move(executors.back());
    executors.clear();
    CHECK(moved.statistics().bytes().value == (comm.rank() == 1 ? 3 * 32 : 0));
    result.outputs.clear();  // released through the moved executor's counters
    CHECK(moved.statistics().bytes().value == 0);
    CHECK(resource.bytes().value == 0);
  });
}

TEST_CASE("kept outputs outlive a temporary executor: the result owns what it holds") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 3};
  hp::model_bytes const bytes(std::vector<hp::stage_bytes>(2, {.activations = 16, .output = 32}));
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  headroom::host::launch(2, [&](thread_communicator& comm) {
    counted resource;
    tagging_stage stage;
    // The executor is a temporary: it is destroyed at the end of this full expression.
    auto result = hp::executor(comm, resource, sched, bytes).step(stage, hp::retention::all{});
    bool const last = comm.rank() == 1;
    REQUIRE(result.outputs.size() == (last ? 3U : 0U));
    CHECK(resource.bytes().value == (last ? 3 * 32 : 0));
    for (std::size_t i = 0; i < result.outputs.size(); ++i) {  // still readable (ASan checks the accesses)
      auto const* data = static_cast<unsigned char const*>(result.outputs[i].data());
      CHECK(std::all_of(data, data + 32, [&](unsigned char c) { return c == i + 1; }));
      CHECK(result.outputs[i].resource() != nullptr);
      CHECK(result.outputs[i].resource()->bytes().value == static_cast<std::int64_t>(3 * 32));  // the executor's counters live on
    }
    // The outputs may leave the result too: each one holds its share of the counting resource.
    auto outputs = std::move(result.outputs);
    result = {};
    if (last) {
      outputs[0] = std::move(outputs[2]);  // output 0 is given back before its share is dropped
      CHECK(resource.bytes().value == 2 * 32);
      CHECK(static_cast<unsigned char const*>(outputs[0].data())[0] == 3);
      outputs[1].release();
      CHECK(resource.bytes().value == 32);
    }
    outputs.clear();
    CHECK(resource.bytes().value == 0);
  });
}
