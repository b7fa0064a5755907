// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The executor on thread ranks: gradients and losses bit-equal to a single-rank run of the same
// model for every schedule; bad inputs rejected before any transfer.
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/lifetime/host.hpp"
#include "headroom/pipeline.hpp"
#include "custom_placement.hpp"
#include "toy_model.hpp"

namespace hp = headroom::pipeline;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;
using stage_t = toy::stage<inline_stream>;

namespace {

bool bit_equal(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct run_output {
  std::map<int, toy::params> params;  // virtual stage -> parameters after the step
  std::vector<double> losses;
  std::vector<int> loss_microbatches;
  std::map<int, std::vector<int>> weight_grad_order;  // rank -> stage*1000+k as taken
};

template <class G, class O = hp::outputs::freed_when_sent, class T = hp::transfers::one_by_one>
run_output run_pipeline(hp::pipeline_shape const& shape, toy::dims d) {
  auto const sched = hp::make_schedule<G>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  run_output out;
  std::mutex mutex;
  headroom::host::launch(shape.stages, [&](thread_communicator& comm) {
    aligned_resource resource;
    hp::executor exec(comm, resource, sched, bytes);
    stage_t stage{.d = d, .chunks = {}, .backward_order = {}};
    for (int c = 0; c < shape.chunks; ++c) {
      int const s = sched.placement().virtual_stage(comm.rank(), c);
      stage.chunks.emplace(s, toy::make_params(d, s));
    }
    auto result = exec.step(stage, hp::retention::reduced{}, O{}, T{});
    CHECK(exec.statistics().bytes().value == 0);  // nothing held after the step
    CHECK(exec.statistics().bytes().peak == exec.plan(hp::retention::reduced{}, O{}, T{}).rank(comm.rank()).peak);
    std::lock_guard lock(mutex);
    for (auto& [s, p] : stage.chunks) out.params[s] = p;
    out.weight_grad_order[comm.rank()] = stage.backward_order;
    if (comm.rank() == sched.placement().rank_of(shape.virtual_stages() - 1)) {
      out.losses = result.losses;
      out.loss_microbatches = result.microbatches;
    }
  });
  return out;
}

template <class G, class O = hp::outputs::freed_when_sent, class T = hp::transfers::one_by_one>
void check_against_reference(hp::pipeline_shape const& shape) {
  CAPTURE(shape);
  CAPTURE(T::name);
  toy::dims const d{.width = 6, .rows = 3};
  auto const got = run_pipeline<G, O, T>(shape, d);
  // The reference adds each stage's weight gradients in the schedule's order (micro-batch
  // order, except GPipe with v > 1, which runs backwards from the last one), and the stages
  // took them in that order.
  auto const order = toy::weight_order(hp::make_schedule<G>(shape));
  std::vector<std::vector<int>> taken(order.size());
  for (auto const& entry : got.weight_grad_order)
    for (int const code : entry.second) taken[static_cast<std::size_t>(code / 1000)].push_back(code % 1000);
  CHECK(taken == order);
  auto const ref = toy::run_reference(d, shape.virtual_stages(), shape.microbatches, order);
  REQUIRE(got.params.size() == ref.stages.size());
  for (int s = 0; s < shape.virtual_stages(); ++s) {
    CAPTURE(s);
    auto const& p = got.params.at(s);
    auto const& r = ref.stages[static_cast<std::size_t>(s)];
    CHECK(bit_equal(p.dw, r.dw));
    CHECK(bit_equal(p.db, r.db));
    CHECK(std::any_of(p.dw.begin(), p.dw.end(), [](float g) { return g != 0.0f; }));  // gradients did flow
  }
  std::vector<int> in_order(static_cast<std::size_t>(shape.microbatches));
  for (int k = 0; k < shape.microbatches; ++k) in_order[static_cast<std::size_t>(k)] = k;
  CHECK(got.loss_microbatches == in_order);
  REQUIRE(got.losses.size() == ref.losses.size());
  for (std::size_t k = 0; k < ref.losses.size(); ++k) CHECK(std::memcmp(&got.losses[k], &ref.losses[k], sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("gradients and losses bit-equal to a single-rank run, every schedule") {
  for (int p : {1, 2, 3, 4})
    for (int m : {1, 2, 5, 8}) {
      check_against_reference<hp::gpipe>({.stages = p, .microbatches = m});
      check_against_reference<hp::one_f_one_b>({.stages = p, .microbatches = m});
      check_against_reference<hp::zb_h1>({.stages = p, .microbatches = m});
    }
  for (int p : {2, 4})
    for (int v : {1, 2, 3}) {
      check_against_reference<hp::gpipe>({.stages = p, .microbatches = 5, .chunks = v});
      for (int m : {p, 2 * p}) check_against_reference<hp::interleaved_1f1b>({.stages = p, .microbatches = m, .chunks = v});
    }
  check_against_reference<hp::interleaved_1f1b>({.stages = 2, .microbatches = 12, .chunks = 2, .group = 3});
  check_against_reference<hp::interleaved_1f1b>({.stages = 4, .microbatches = 14, .chunks = 2, .group = 5});  // tail group
  for (int p : {2, 4})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 3}) check_against_reference<hp::interleaved_zb>({.stages = p, .microbatches = m, .chunks = v});
}

TEST_CASE("V-shape and user placements: gradients and losses bit-equal to a single-rank run (local hand-offs, overlapped F+B)") {
  for (int p : {2, 3, 4})
    for (int m : {1, 2, 5, 8}) check_against_reference<hp::zbv>({.stages = p, .microbatches = m, .chunks = 2});
  for (int p : {2, 3, 4})
    for (int m : {2 * p, 2 * p + 3}) check_against_reference<hp::dualpipe_v>({.stages = p, .microbatches = m, .chunks = 2});
  // a user's placement: blocks of consecutive stages per rank, hand-offs inside a block local
  for (int p : {2, 3})
    for (int v : {2, 3}) check_against_reference<test_placement::block_gpipe>({.stages = p, .microbatches = 4, .chunks = v});
  check_against_reference<test_placement::block_gpipe, hp::outputs::kept_until_backward>({.stages = 2, .microbatches = 3, .chunks = 3});
  // PyTorch's output lifetime: the next chunk on the same rank reads the kept output in place
  check_against_reference<hp::zbv, hp::outputs::kept_until_backward>({.stages = 3, .microbatches = 5, .chunks = 2});
  check_against_reference<hp::dualpipe_v, hp::outputs::kept_until_backward>({.stages = 2, .microbatches = 5, .chunks = 2});
}
TEST_CASE("grouped transfers (one batch per run of sends and receives): bit-equal, model == measured") {
  using grouped = hp::transfers::grouped;
  using freed = hp::outputs::freed_when_sent;
  for (int p : {2, 3, 4})
    for (int m : {1, 2, 5, 8}) {
      check_against_reference<hp::one_f_one_b, freed, grouped>({.stages = p, .microbatches = m});
      check_against_reference<hp::zb_h1, freed, grouped>({.stages = p, .microbatches = m});
      check_against_reference<hp::gpipe, freed, grouped>({.stages = p, .microbatches = m});
    }
  for (int p : {2, 4})
    for (int v : {2, 3}) {
      check_against_reference<hp::interleaved_1f1b, freed, grouped>({.stages = p, .microbatches = 2 * p, .chunks = v});
      check_against_reference<hp::interleaved_zb, freed, grouped>({.stages = p, .microbatches = p, .chunks = v});
    }
  check_against_reference<hp::zbv, freed, grouped>({.stages = 3, .microbatches = 5, .chunks = 2});
  check_against_reference<hp::dualpipe_v, hp::outputs::kept_until_backward, grouped>({.stages = 2, .microbatches = 5, .chunks = 2});
  check_against_reference<hp::one_f_one_b, hp::outputs::kept_until_backward, grouped>({.stages = 4, .microbatches = 6});
}


namespace {
// A stage with its own overlapped member: the executor calls it instead of forward + backward.
struct own_overlap_stage {
  stage_t inner;
  int overlapped_calls = 0;
  void forward(hp::forward_args<inline_stream> const& a) { inner.forward(a); }
  double loss(hp::loss_args<inline_stream> const& a) { return inner.loss(a); }
  void backward(hp::backward_args<inline_stream> const& a) { inner.backward(a); }
  void backward_input(hp::backward_args<inline_stream> const& a) { inner.backward_input(a); }
  void backward_weight(hp::weight_args<inline_stream> const& a) { inner.backward_weight(a); }
  void overlapped(hp::forward_args<inline_stream> const& f, hp::backward_args<inline_stream> const& b) {
    ++overlapped_calls;
    CHECK(f.chunk != b.chunk);  // DualPipeV overlaps the two chunks of a rank
    inner.forward(f);
    inner.backward(b);
  }
};
static_assert(hp::overlapping_stage<own_overlap_stage, inline_stream> && !hp::overlapping_stage<stage_t, inline_stream>);
}  // namespace

TEST_CASE("dualpipe_v: the stage's overlapped member runs each overlapped action, losses as the reference's") {
  hp::pipeline_shape const shape{.stages = 3, .microbatches = 8, .chunks = 2};
  auto const sched = hp::make_schedule<hp::dualpipe_v>(shape);
  toy::dims const d{.width = 6, .rows = 3};
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  std::vector<int> calls(3, 0), expected(3, 0);
  for (int r = 0; r < 3; ++r)
    for (auto const& a : sched.actions(r)) expected[static_cast<std::size_t>(r)] += a.kind == hp::action_kind::overlapped;
  std::vector<double> losses;
  headroom::host::launch(shape.stages, [&](thread_communicator& comm) {
    aligned_resource resource;
    hp::executor exec(comm, resource, sched, bytes);
    own_overlap_stage stage{.inner = {.d = d, .chunks = {}, .backward_order = {}}};
    for (int c = 0; c < 2; ++c) {
      int const s = sched.placement().virtual_stage(comm.rank(), c);
      stage.inner.chunks.emplace(s, toy::make_params(d, s));
    }
    auto result = exec.step(stage, hp::retention::reduced{});
    calls[static_cast<std::size_t>(comm.rank())] = stage.overlapped_calls;
    if (comm.rank() == 0) losses = result.losses;  // the last stage is on rank 0 in a V
  });
  CHECK(calls == expected);
  CHECK(expected[0] > 0);
  auto const ref = toy::run_reference(d, shape.virtual_stages(), shape.microbatches, toy::weight_order(sched));
  REQUIRE(losses.size() == ref.losses.size());
  for (std::size_t k = 0; k < losses.size(); ++k) CHECK(std::memcmp(&losses[k], &ref.losses[k], sizeof(double)) == 0);
}

namespace {
// Only what evaluation needs: no backward member.
struct eval_stage {
  stage_t inner;
  void forward(hp::forward_args<inline_stream> const& a) { inner.forward(a); }
  double loss(hp::loss_args<inline_stream> const& a) { return inner.loss(a); }
};
static_assert(hp::forward_stage<eval_stage, inline_stream> && !hp::pipeline_stage<eval_stage, inline_stream>);
}  // namespace

TEST_CASE("forward-only steps: losses bit-equal to a single-rank run, nothing held, no backward needed") {
  toy::dims const d{.width = 6, .rows = 3};
  for (int p : {1, 2, 4})
    for (int v : {1, 2})
      for (int m : {1, 3, 8}) {
        if (p == 1 && v > 1) continue;
        hp::pipeline_shape const shape{.stages = p, .microbatches = m, .chunks = v};
        CAPTURE(shape);
        auto const ref = toy::run_reference(d, shape.virtual_stages(), m);
        auto const sched = hp::make_schedule<hp::forward_only>(shape);
        auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
        std::vector<double> losses;
        std::vector<int> order;
        headroom::host::launch(p, [&](thread_communicator& comm) {
          aligned_resource resource;
          hp::executor exec(comm, resource, sched, bytes);
          eval_stage stage{{.d = d, .chunks = {}, .backward_order = {}}};
          for (int c = 0; c < v; ++c) {
            int const s = shape.virtual_stage(comm.rank(), c);
            stage.inner.chunks.emplace(s, toy::make_params(d, s));
          }
          auto result = exec.step(stage, hp::retention::reduced{});
          CHECK(exec.statistics().bytes().value == 0);
          CHECK(exec.statistics().bytes().peak == exec.plan(hp::retention::reduced{}).rank(comm.rank()).peak);
          if (comm.rank() == sched.placement().rank_of(shape.virtual_stages() - 1)) {
            losses = result.losses;
            order = result.microbatches;
          }
        });
        REQUIRE(losses.size() == ref.losses.size());
        for (std::size_t i = 0; i < losses.size(); ++i) {
          auto const k = static_cast<std::size_t>(order[i]);
          CHECK(std::memcmp(&losses[i], &ref.losses[k], sizeof(double)) == 0);
        }
      }
}
