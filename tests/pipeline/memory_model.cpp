// SPDX-License-Identifier: Apache-2.0
// headroom: optimised under sanitizers (a property grid: its runtime, not its compile time, is the cost)
#include <doctest/doctest.h>

// The memory model against the executor's own counters: over schedules x p in {2, 4, 8} x
// m in 1..32 x v in {1, 2, 4} x every retention (and PyTorch's output lifetime under all and
// none, sizes that differ per micro-batch, and grouped transfers), on thread ranks, the predicted peak and the
// bytes held at the end equal what the executor allocated, to the byte. Buffers are small and
// of different sizes per stage (so an input mistaken for an output shows), and the callbacks
// check the spans they get.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"
#include "common/sanitized.hpp"
#include "custom_placement.hpp"

namespace hp = headroom::pipeline;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;

namespace {

hp::stage_bytes cost_of(int s) {
  auto const u = static_cast<std::size_t>(s);
  return {.activations = 64 + 16 * u, .output = 32 + 8 * u, .weight_stash = 24 + 4 * u, .parameters = 1000 + u};
}
hp::model_bytes costs(hp::pipeline_shape const& shape) {
  std::vector<hp::stage_bytes> v;
  for (int s = 0; s < shape.virtual_stages(); ++s) v.push_back(cost_of(s));
  return hp::model_bytes(v);
}

// Touches every buffer it gets and counts spans of the wrong size.
struct probe_stage {
  hp::model_bytes const* bytes;
  int wrong = 0;
  void touch(std::span<std::byte> b) {
    for (auto& x : b) x = std::byte{1};
  }
  void expect(std::size_t got, std::size_t want) { wrong += got != want ? 1 : 0; }
  void forward(hp::forward_args<inline_stream> const& a) {
    expect(a.input.size(), bytes->input(a.stage, a.microbatch));
    expect(a.output.size(), bytes->at(a.stage, a.microbatch).output);
    expect(a.stash.size(), bytes->at(a.stage, a.microbatch).activations);
    touch(a.output);
    touch(a.stash);
  }
  int loss(hp::loss_args<inline_stream> const& a) { return static_cast<int>(a.output.size()); }
  void backward(hp::backward_args<inline_stream> const& a) {
    expect(a.grad_input.size(), bytes->input(a.stage, a.microbatch));
    expect(a.grad_output.size(), a.stage + 1 == bytes->size() ? 0 : bytes->at(a.stage, a.microbatch).output);
    touch(a.grad_input);
  }
  void backward_input(hp::backward_args<inline_stream> const& a) {
    backward(a);
    expect(a.weight_stash.size(), bytes->at(a.stage, a.microbatch).weight_stash);
    touch(a.weight_stash);
  }
  void backward_weight(hp::weight_args<inline_stream> const& a) {
    expect(a.weight_stash.size(), bytes->at(a.stage, a.microbatch).weight_stash);
  }
};

struct tally {
  int configs = 0;
  int mismatches = 0;
  std::string first;
};

// Packed sequences: every micro-batch has its own token count, so its own sizes on every stage.
hp::model_bytes varying_costs(hp::pipeline_shape const& shape) {
  std::vector<std::vector<hp::stage_bytes>> sizes;
  for (int k = 0; k < shape.microbatches; ++k) {
    auto const tokens = static_cast<std::size_t>(1 + (k * 7) % 5);  // 1 .. 5, irregular
    sizes.emplace_back();
    for (int s = 0; s < shape.virtual_stages(); ++s) {
      auto b = cost_of(s);
      b.activations *= tokens;
      b.output *= tokens;
      b.weight_stash *= tokens;
      sizes.back().push_back(b);
    }
  }
  return hp::model_bytes::per_microbatch(sizes);
}

// One instantiation per policy triple, whatever the schedule (the schedule is a value): the grid
// below compiles 9 executor steps, not 9 per schedule generator.
template <class R, class O = hp::outputs::freed_when_sent, class T = hp::transfers::one_by_one>
void compare(thread_communicator& comm, hp::schedule const& sched, std::string_view generator,
             hp::pipeline_shape const& shape, tally& t, bool varying = false) {
  auto const bytes = varying ? varying_costs(shape) : costs(shape);
  aligned_resource resource;
  hp::executor exec(comm, resource, sched, bytes);
  auto const predicted = exec.plan(R{}, O{}, T{}).rank(comm.rank());
  probe_stage stage{&bytes};
  auto result = exec.step(stage, R{}, O{}, T{});
  auto const measured = exec.statistics().bytes();
  bool const ok = measured.peak == predicted.peak && measured.value == predicted.held_at_end && stage.wrong == 0;
  ++t.configs;
  if (!ok && t.mismatches++ == 0)
    t.first = std::string(generator) + " " + std::string(R::name) + " " + std::string(O::name) + " " + std::string(T::name) + " p=" + std::to_string(shape.stages) + " m=" +
              std::to_string(shape.microbatches) + " v=" + std::to_string(shape.chunks) + " rank " +
              std::to_string(comm.rank()) + ": predicted peak " + std::to_string(predicted.peak) + " held " +
              std::to_string(predicted.held_at_end) + ", measured peak " + std::to_string(measured.peak) + " held " +
              std::to_string(measured.value) + ", wrong spans " + std::to_string(stage.wrong);
  result.outputs.clear();  // the kept outputs go back to the resource...
  if (exec.statistics().bytes().value != 0 && t.mismatches++ == 0) t.first = "bytes held after the outputs were dropped";
}

template <class G>
tally run_grid(int p, std::vector<int> const& chunk_counts) {
  std::vector<tally> per_rank(static_cast<std::size_t>(p));
  bool const sampled = headroom_test::sanitized();
  headroom::host::launch(p, [&](thread_communicator& comm) {
    auto& t = per_rank[static_cast<std::size_t>(comm.rank())];
    for (int v : chunk_counts)
      for (int m = 1; m <= 32; ++m) {
        if (std::is_same_v<G, hp::interleaved_1f1b> && (m < p || m % p != 0)) continue;
        if (std::is_same_v<G, hp::interleaved_zb> && m % std::max(1, m / p) != 0) continue;
        if (std::is_same_v<G, hp::dualpipe_v> && m < 2 * p) continue;
        if (sampled && m % 7 != 1 && m != 32 && m != p) continue;  // sanitizers: m in {1, 8, 15, 22, 29, p, 32}
        hp::pipeline_shape const shape{.stages = p, .microbatches = m, .chunks = v};
        auto const sched = hp::make_schedule<G>(shape);
        compare<hp::retention::all>(comm, sched, G::name, shape, t);
        compare<hp::retention::reduced>(comm, sched, G::name, shape, t);
        compare<hp::retention::none>(comm, sched, G::name, shape, t);
        compare<hp::retention::all, hp::outputs::kept_until_backward>(comm, sched, G::name, shape, t);
        compare<hp::retention::none, hp::outputs::kept_until_backward>(comm, sched, G::name, shape, t);
        compare<hp::retention::all>(comm, sched, G::name, shape, t, true);  // sizes per micro-batch
        compare<hp::retention::none, hp::outputs::kept_until_backward>(comm, sched, G::name, shape, t, true);
        compare<hp::retention::reduced, hp::outputs::freed_when_sent, hp::transfers::grouped>(comm, sched, G::name, shape, t);
        compare<hp::retention::all, hp::outputs::kept_until_backward, hp::transfers::grouped>(comm, sched, G::name, shape, t, true);
      }
  });
  tally total;
  for (auto const& t : per_rank) {
    total.configs += t.configs;
    total.mismatches += t.mismatches;
    if (total.first.empty()) total.first = t.first;
  }
  return total;
}

template <class G>
void check_grid(std::vector<int> const& chunk_counts) {
  for (int p : {2, 4, 8}) {
    auto const t = run_grid<G>(p, chunk_counts);
    CAPTURE(G::name);
    CAPTURE(p);
    CAPTURE(t.first);
    CHECK(t.configs > 0);
    CHECK(t.mismatches == 0);
  }
}

}  // namespace

TEST_CASE("model == measured: gpipe") { check_grid<hp::gpipe>({1, 2, 4}); }
TEST_CASE("model == measured: 1f1b") { check_grid<hp::one_f_one_b>({1}); }
TEST_CASE("model == measured: interleaved_1f1b") { check_grid<hp::interleaved_1f1b>({1, 2, 4}); }
TEST_CASE("model == measured: zb_h1") { check_grid<hp::zb_h1>({1}); }
TEST_CASE("model == measured: forward_only") { check_grid<hp::forward_only>({1, 2, 4}); }
TEST_CASE("model == measured: interleaved_zb") { check_grid<hp::interleaved_zb>({1, 2, 4}); }
// The V: local hand-offs between the two chunks of rank p - 1 (and, in dualpipe_v, overlapped
// F+B actions that allocate for both halves before releasing either).
TEST_CASE("model == measured: zbv") { check_grid<hp::zbv>({2}); }
TEST_CASE("model == measured: dualpipe_v") { check_grid<hp::dualpipe_v>({2}); }
TEST_CASE("model == measured: a user's placement (blocks of stages per rank)") { check_grid<test_placement::block_gpipe>({1, 2, 4}); }

TEST_CASE("the model on 1F1B, p = 2, m = 2, by hand") {
  // activations 100, hidden output 10, logits 1000 on the last stage, parameters 7 and 9.
  hp::model_bytes const bytes({{.activations = 100, .output = 10, .parameters = 7}, {.activations = 100, .output = 1000, .parameters = 9}});
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 2});
  // rank 0: F0 +110 | send -10 | F1 +110 (peak 210) | recv B0 +10 | B0 -110 | recv B1 +10 | B1 -110
  // rank 1: recv F0 +10 | F0 +1100 (peak 1110 with the logits) | ... the logits go right after the loss
  auto const none = hp::predict_memory(s, bytes, hp::retention::none{});
  CHECK(none.rank(0).peak == 210);
  CHECK(none.rank(0).total() == 217);
  CHECK(none.rank(1).peak == 1110);
  CHECK(none.rank(1).held_at_end == 0);
  // Kept logits: recv F1 (1120), B0 allocates the input gradient (1130), F1 adds 1100 (2110 + the
  // kept 0), B1's input gradient on top of both logits: 2120; 2000 still held at the end.
  auto const all = hp::predict_memory(s, bytes, hp::retention::all{});
  CHECK(all.rank(1).peak == 2120);
  CHECK(all.rank(1).held_at_end == 2000);
  CHECK(all.rank(0) == none.rank(0));
  CHECK(all.max_rank().rank == 1);
  std::ostringstream os;
  os << all;
  CHECK(os.str() == "memory plan 1f1b (p=2 m=2 v=1, retention all)\n"
                    "  rank 0: peak 210 B at action 2, held at end 0 B, parameters 7 B, total 217 B\n"
                    "  rank 1: peak 2.07 KiB at action 6, held at end 1.95 KiB, parameters 9 B, total 2.08 KiB\n");
}

TEST_CASE("grouped transfers, by hand: a run's receives are live before its sends are freed") {
  hp::model_bytes const bytes({{.activations = 100, .output = 10, .parameters = 7}, {.activations = 100, .output = 1000, .parameters = 9}});
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 2});
  // rank 0: F0 | SEND_F0 | F1 | SEND_F1 RECV_B0 | B0 | RECV_B1 | B1. One by one the send of F1's
  // output (-10) comes before B0's gradient (+10): peak 210 at F1. As one batch the gradient is
  // allocated first: 210 + 10 = 220, at the batch's first action (3).
  auto const one = hp::predict_memory(s, bytes, hp::retention::none{});
  auto const grouped = hp::predict_memory(s, bytes, hp::retention::none{}, hp::outputs::freed_when_sent{}, hp::transfers::grouped{});
  CHECK(one.transfers() == "one_by_one");
  CHECK(grouped.transfers() == "grouped");
  CHECK(one.rank(0).peak == 210);
  CHECK(grouped.rank(0).peak == 220);
  CHECK(grouped.rank(0).peak_action == 3);
  CHECK(grouped.rank(1) == one.rank(1));  // rank 1 has no run of two transfers
  std::ostringstream os;
  os << grouped;
  CHECK(os.str().starts_with("memory plan 1f1b (p=2 m=2 v=1, retention none, transfers grouped)\n"));
  // Grouping never lowers a peak, and raises it by at most what a run sends (one output here).
  for (int p : {2, 4})
    for (int m : {1, 4, 9}) {
      hp::pipeline_shape const shape{.stages = p, .microbatches = m};
      auto const b = hp::model_bytes::uniform(shape, {.activations = 100, .output = 10});
      for (auto const& sched : {hp::make_schedule<hp::one_f_one_b>(shape), hp::make_schedule<hp::zb_h1>(shape)}) {
        auto const a = hp::predict_memory(sched, b, hp::retention::reduced{});
        auto const g = hp::predict_memory(sched, b, hp::retention::reduced{}, hp::outputs::freed_when_sent{}, hp::transfers::grouped{});
        for (int r = 0; r < p; ++r) {
          CHECK(g.rank(r).peak >= a.rank(r).peak);
          CHECK(g.rank(r).peak <= a.rank(r).peak + 10);
        }
      }
    }
}

namespace {
// PyTorch's own per-rank orders, as torch.distributed.pipelining writes them: Schedule1F1B runs
// min(m, p - r) forwards, then a backward and a forward at a time, then the backwards left;
// ScheduleGPipe all forwards, then all backwards in micro-batch order.
std::vector<std::vector<hp::action>> torch_1f1b(hp::pipeline_shape const& shape) {
  std::vector<std::vector<hp::action>> order(static_cast<std::size_t>(shape.stages));
  int const m = shape.microbatches;
  for (int r = 0; r < shape.stages; ++r) {
    auto& o = order[static_cast<std::size_t>(r)];
    int const warmup = std::min(m, shape.stages - r);
    int f = 0, b = 0;
    while (f < warmup) o.push_back({hp::action_kind::forward, f++, r, -1});
    while (b < m) {
      o.push_back({hp::action_kind::backward, b++, r, -1});
      if (f < m) o.push_back({hp::action_kind::forward, f++, r, -1});
    }
  }
  return order;
}
std::vector<std::vector<hp::action>> torch_gpipe(hp::pipeline_shape const& shape) {
  std::vector<std::vector<hp::action>> order(static_cast<std::size_t>(shape.stages));
  for (int r = 0; r < shape.stages; ++r) {
    for (int k = 0; k < shape.microbatches; ++k) order[static_cast<std::size_t>(r)].push_back({hp::action_kind::forward, k, r, -1});
    for (int k = 0; k < shape.microbatches; ++k) order[static_cast<std::size_t>(r)].push_back({hp::action_kind::backward, k, r, -1});
  }
  return order;
}
int in_flight(hp::schedule const& s, int rank) {
  int live = 0, most = 0;
  for (auto const& a : s.actions(rank)) {
    if (a.kind == hp::action_kind::forward) most = std::max(most, ++live);
    if (a.kind == hp::action_kind::backward) --live;
  }
  return most;
}
}  // namespace

TEST_CASE("PyTorch's PipelineStage keeps every output until its backward: in-flight x output more, measured") {
  constexpr std::size_t output = 10;
  for (int p : {2, 4})
    for (int m : {1, 3, 4, 8}) {
      hp::pipeline_shape const shape{.stages = p, .microbatches = m};
      CAPTURE(shape);
      auto const one_f = hp::place_transfers("torch 1f1b", shape, torch_1f1b(shape));
      auto const gpipe = hp::place_transfers("torch gpipe", shape, torch_gpipe(shape));
      // Our generators give PyTorch's orders, transfers included.
      CHECK(one_f.ranks() == hp::make_schedule<hp::one_f_one_b>(shape).ranks());
      CHECK(gpipe.ranks() == hp::make_schedule<hp::gpipe>(shape).ranks());
      auto const bytes = hp::model_bytes::uniform(shape, {.activations = 100, .output = output});
      for (auto const* s : {&one_f, &gpipe}) {
        CAPTURE(s->name());
        auto const megatron = hp::predict_memory(*s, bytes, hp::retention::reduced{});
        auto const torch = hp::predict_memory(*s, bytes, hp::retention::reduced{}, hp::outputs::kept_until_backward{});
        CHECK(torch.lifetime() == "kept_until_backward");
        for (int r = 0; r < p; ++r) {
          CAPTURE(r);
          CHECK(torch.rank(r).peak - megatron.rank(r).peak == static_cast<std::int64_t>(in_flight(*s, r) * output));
          CHECK(torch.rank(r).held_at_end == 0);
        }
        // ... and the executor, told to keep outputs the same way, holds exactly that.
        std::vector<std::int64_t> measured(static_cast<std::size_t>(p));
        headroom::host::launch(p, [&](thread_communicator& comm) {
          aligned_resource resource;
          hp::executor exec(comm, resource, *s, bytes);
          probe_stage stage{&bytes};
          static_cast<void>(exec.step(stage, hp::retention::reduced{}, hp::outputs::kept_until_backward{}));
          measured[static_cast<std::size_t>(comm.rank())] = exec.statistics().bytes().peak;
          CHECK(exec.statistics().bytes().value == 0);
        });
        for (int r = 0; r < p; ++r) CHECK(measured[static_cast<std::size_t>(r)] == torch.rank(r).peak);
      }
    }
}

TEST_CASE("sizes per micro-batch: the model follows each micro-batch's own sizes") {
  // p = 2, GPipe, m = 2: micro-batch 1 is three times micro-batch 0 (packed sequences).
  hp::model_bytes const bytes = hp::model_bytes::per_microbatch({
      {{.activations = 100, .output = 10, .parameters = 5}, {.activations = 100, .output = 1000, .parameters = 6}},
      {{.activations = 300, .output = 30, .parameters = 5}, {.activations = 300, .output = 3000, .parameters = 6}},
  });
  auto const s = hp::make_schedule<hp::gpipe>({.stages = 2, .microbatches = 2});
  auto const plan = hp::predict_memory(s, bytes, hp::retention::none{});
  // rank 0: F0 +110, send -10, F1 +330 (peak 430), send -30, then the backwards free it all.
  CHECK(plan.rank(0).peak == 100 + 330);
  CHECK(plan.rank(0).parameters == 5);
  // rank 1: recv 10, F0 +1100 (1110), loss -1000, recv 30 (140), F1 +3300: 3440.
  CHECK(plan.rank(1).peak == 10 + 100 + 30 + 3300);
  auto const all = hp::predict_memory(s, bytes, hp::retention::all{});
  CHECK(all.rank(1).held_at_end == 4000);
  // The same model with micro-batch 0's sizes for both would predict less: the sizes are used.
  hp::model_bytes const first({{.activations = 100, .output = 10, .parameters = 5}, {.activations = 100, .output = 1000, .parameters = 6}});
  CHECK(hp::predict_memory(s, first, hp::retention::none{}).rank(1).peak < plan.rank(1).peak);
}
