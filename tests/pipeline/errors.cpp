// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Bad input: every rule a generator, the validator, the memory model and the executor enforce,
// with a message that names the value and the rule.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using doctest::Contains;
using headroom::invalid_argument;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;
using hp::action;
using hp::action_kind;

namespace {

using lists = std::vector<std::vector<action>>;

hp::schedule edited(hp::schedule const& s, auto&& edit) {
  lists l = s.ranks();
  edit(l);
  return hp::schedule(s.name() + " (edited)", s.shape(), std::move(l));
}
std::size_t find(std::vector<action> const& l, action const& a) {
  auto const it = std::find(l.begin(), l.end(), a);
  REQUIRE(it != l.end());
  return static_cast<std::size_t>(it - l.begin());
}

template <class G>
void generate(hp::pipeline_shape const& shape) {
  static_cast<void>(hp::make_schedule<G>(shape));
}

struct plain_stage {
  void forward(hp::forward_args<inline_stream> const&) {}
  double loss(hp::loss_args<inline_stream> const&) { return 0; }
  void backward(hp::backward_args<inline_stream> const&) {}
};

}  // namespace

TEST_CASE("generators reject bad shapes, naming the value and the rule") {
  CHECK_THROWS_WITH_AS(generate<hp::gpipe>({.stages = 0, .microbatches = 4}), Contains("stages (p) = 0, expected >= 1"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::one_f_one_b>({.stages = 2, .microbatches = 0}), Contains("microbatches (m) = 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::gpipe>({.stages = 2, .microbatches = 4, .chunks = 0}), Contains("chunks (v) = 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 0}), Contains("chunks (v) = 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::gpipe>({.stages = 1, .microbatches = 4, .chunks = 2}), Contains("with stages (p) = 1, expected v = 1"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::one_f_one_b>({.stages = 2, .microbatches = 4, .chunks = 2}), Contains("use interleaved_1f1b for v > 1"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::zb_h1>({.stages = 2, .microbatches = 4, .chunks = 4}), Contains("chunks (v) = 4, expected 1"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 4, .microbatches = 2, .chunks = 2}), Contains("microbatches (m) = 2 < stages (p) = 4 with group (g) = 4, expected m >= p, or g = m"), invalid_argument);
  CHECK_NOTHROW(hp::validate(hp::make_schedule<hp::interleaved_1f1b>({.stages = 4, .microbatches = 2, .chunks = 2, .group = 2})));
  CHECK_NOTHROW(hp::validate(hp::make_schedule<hp::interleaved_1f1b>({.stages = 8, .microbatches = 3, .chunks = 3, .group = 3})));
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 4, .microbatches = 6, .chunks = 2}), Contains("microbatches (m) = 6 leaves a last group of m mod g = 2 micro-batches for g = 4, expected 0 or at least p = 4"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 4, .microbatches = 10, .chunks = 2, .group = 8}), Contains("m mod g = 2 micro-batches for g = 8"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 4, .microbatches = 8, .chunks = 2, .group = 9}), Contains("group (g) = 9 > microbatches (m) = 8, expected p <= g <= m"), invalid_argument);
  // Megatron's tail groups: m mod g >= p is accepted (p = 4, m = 14, g = 5 leaves a group of 4).
  CHECK_NOTHROW(hp::validate(hp::make_schedule<hp::interleaved_1f1b>({.stages = 4, .microbatches = 14, .chunks = 2, .group = 5})));
  // A group size is refused, not ignored, by the generators that do not use it.
  CHECK_THROWS_WITH_AS(generate<hp::gpipe>({.stages = 2, .microbatches = 4, .group = 2}), Contains("pipeline::gpipe: group (g) = 2, expected 0: only interleaved_1f1b"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::one_f_one_b>({.stages = 2, .microbatches = 4, .group = 4}), Contains("pipeline::1f1b: group (g) = 4, expected 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::zb_h1>({.stages = 2, .microbatches = 4, .group = 2}), Contains("pipeline::zb_h1: group (g) = 2, expected 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 4, .microbatches = 8, .chunks = 2, .group = 2}), Contains("group (g) = 2 < stages (p) = 4"), invalid_argument);
  CHECK_THROWS_WITH_AS(generate<hp::interleaved_1f1b>({.stages = 4, .microbatches = 8, .chunks = 2, .group = -1}), Contains("group (g) = -1"), invalid_argument);
  // 1F1B, GPipe and ZB-H1 run with fewer micro-batches than stages (the warm-up is capped).
  CHECK_NOTHROW(hp::validate(hp::make_schedule<hp::one_f_one_b>({.stages = 8, .microbatches = 3})));
  CHECK_NOTHROW(hp::validate(hp::make_schedule<hp::zb_h1>({.stages = 8, .microbatches = 3})));
}

TEST_CASE("size products are checked in 64 bits, at their edges, naming the operands") {
  using headroom::capacity_error;
  auto const check = [](hp::pipeline_shape const& shape) { shape.check("test"); };
  // p·v: 65536 · 65536 wrapped an int to 0 virtual stages; now it is refused by name.
  CHECK_THROWS_WITH_AS(check({.stages = 65536, .microbatches = 1, .chunks = 65536}), Contains("test: p·v = 65536 · 65536 = 4294967296 virtual stages, expected <= 1048576"), capacity_error);
  CHECK_THROWS_WITH_AS(generate<hp::gpipe>({.stages = 65536, .microbatches = 1, .chunks = 65536}), Contains("pipeline::gpipe: p·v = 65536 · 65536"), capacity_error);
  CHECK_THROWS_WITH_AS(hp::schedule("x", {.stages = 65536, .microbatches = 1, .chunks = 65536}, lists(65536)), Contains("pipeline::schedule: p·v"), capacity_error);
  // m·v: 2^23 · 2^8 overflowed an int.
  CHECK_THROWS_WITH_AS(check({.stages = 1, .microbatches = 1 << 23, .chunks = 1 << 8}), Contains("m·v = 8388608 · 256 = 2147483648 micro-batch slots per rank, expected <= 16777216"), capacity_error);
  // m·p·v: each factor and pairwise product within bounds, the whole step is not.
  CHECK_THROWS_WITH_AS(check({.stages = 1 << 12, .microbatches = 1 << 13, .chunks = 1}), Contains("m·p·v = 8192 · 4096 · 1 = 33554432 (micro-batch, virtual stage) pairs, expected <= 16777216"), capacity_error);
  // At the edges: exactly the limits pass, one more fails.
  CHECK_NOTHROW(check({.stages = 1 << 12, .microbatches = 16, .chunks = 1 << 8}));    // p·v = 2^20, m·p·v = 2^24
  CHECK_NOTHROW(check({.stages = 1, .microbatches = 1 << 16, .chunks = 1 << 8}));     // m·v = 2^24
  CHECK_THROWS_AS(check({.stages = (1 << 12) + 1, .microbatches = 1, .chunks = 1 << 8}), capacity_error);
  CHECK_THROWS_AS(check({.stages = 1 << 12, .microbatches = 17, .chunks = 1 << 8}), capacity_error);
  CHECK_THROWS_AS(check({.stages = 1, .microbatches = (1 << 16) + 1, .chunks = 1 << 8}), capacity_error);
  CHECK_THROWS_WITH_AS(check({.stages = 1, .microbatches = (1 << 24) + 1, .chunks = 1}), Contains("m·v = 16777217 · 1 = 16777217 micro-batch slots per rank"), capacity_error);
  // p·(m·v + p): ranks times ticks, what building, validating and simulating a step cost.
  CHECK_NOTHROW(check({.stages = 4096, .microbatches = 4096, .chunks = 1}));  // 2^25 exactly
  CHECK_THROWS_WITH_AS(check({.stages = 5793, .microbatches = 1, .chunks = 1}), Contains("test: p·(m·v + p) = 5793 · (1 · 1 + 5793) = 33564642 rank-ticks, expected <= 33554432 (2^25"), capacity_error);
  CHECK_THROWS_WITH_AS(generate<hp::gpipe>({.stages = 16384, .microbatches = 1}), Contains("pipeline::gpipe: p·(m·v + p)"), capacity_error);
  // Byte counts: a size over 2^61, and a sum of kept outputs that would wrap 64 bits.
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 8});
  std::size_t const huge = (std::size_t{1} << 61) - 1;  // the largest size counted
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::predict_memory(s, hp::model_bytes::uniform(s.shape(), {.output = huge + 1}), hp::retention::none{})),
                       Contains("a size of 2305843009213693952 bytes is too large to count, expected <= 2305843009213693951"), capacity_error);
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::predict_memory(s, hp::model_bytes::uniform(s.shape(), {.output = huge}), hp::retention::all{})),
                       Contains("rank 1: live bytes"), capacity_error);
  CHECK_NOTHROW(static_cast<void>(hp::predict_memory(s, hp::model_bytes::uniform(s.shape(), {.output = huge / 8}), hp::retention::all{})));
}

TEST_CASE("stage and rank indices out of range") {
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 4, .microbatches = 4});
  CHECK_THROWS_WITH_AS(static_cast<void>(s.actions(4)), Contains("stage 4 out of range [0, 4)"), invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(s.actions(-1)), Contains("stage -1 out of range"), invalid_argument);
  auto const bytes = hp::model_bytes::uniform(s.shape(), {.activations = 8, .output = 8});
  auto const plan = hp::predict_memory(s, bytes, hp::retention::none{});
  CHECK_THROWS_WITH_AS(static_cast<void>(plan.rank(4)), Contains("stage 4 out of range [0, 4)"), invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(bytes[4]), Contains("virtual stage 4 out of range [0, 4)"), invalid_argument);
  CHECK_THROWS_WITH_AS(hp::schedule("x", {.stages = 3, .microbatches = 1}, lists(2)), Contains("2 action lists for p = 3"), invalid_argument);
  CHECK_THROWS_WITH_AS(hp::model_bytes(std::vector<hp::stage_bytes>{}), Contains("no stages"), invalid_argument);
  CHECK_THROWS_WITH_AS(hp::model_bytes(std::vector<hp::stage_bytes>{{.activations = 4, .kept_for_weight = 5}}),
                       Contains("keeps kept_for_weight = 5 bytes for the weight half, expected at most its activations (4)"),
                       invalid_argument);
  auto const two = hp::model_bytes::uniform({.stages = 2, .microbatches = 1}, {});
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::predict_memory(s, two, hp::retention::all{})), Contains("model_bytes has 2 stages, expected p·v = 4"), invalid_argument);
}

TEST_CASE("sizes per micro-batch: shape errors name the value") {
  hp::stage_bytes const b{.activations = 8, .output = 8, .parameters = 4};
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::model_bytes::per_microbatch({})), Contains("no micro-batches"), invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::model_bytes::per_microbatch({{b, b}, {b}})), Contains("micro-batch 1 lists 1 stages, micro-batch 0 lists 2"), invalid_argument);
  auto heavier = b;
  heavier.parameters = 5;
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::model_bytes::per_microbatch({{b, b}, {b, heavier}})), Contains("stage 1 has parameters 5 for micro-batch 1 and 4 for micro-batch 0"), invalid_argument);
  auto const three = hp::model_bytes::per_microbatch({{b, b}, {b, b}, {b, b}});
  CHECK(three.microbatches() == 3);
  CHECK_THROWS_WITH_AS(static_cast<void>(three.at(0, 3)), Contains("micro-batch 3 out of range [0, 3)"), invalid_argument);
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 4});
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::predict_memory(s, three, hp::retention::none{})), Contains("model_bytes has sizes for 3 micro-batches, expected m = 4"), invalid_argument);
}

TEST_CASE("validate rejects broken action lists with the rule they break") {
  auto const base = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 3});
  using K = action_kind;

  // Receiving micro-batch 1 after sending B0 on rank 1, while rank 0 sends F1 before receiving
  // B0: both block in a send under rendezvous semantics.
  auto const deadlock = edited(base, [](lists& l) {
    auto& r1 = l[1];
    auto const recv = find(r1, {K::recv_forward, 1, 1, 0});
    action const a = r1[recv];
    r1.erase(r1.begin() + static_cast<long>(recv));
    r1.insert(r1.begin() + static_cast<long>(find(r1, {K::send_backward, 0, 1, 0}) + 1), a);
  });
  CHECK_THROWS_WITH_AS(hp::validate(deadlock), Contains("deadlock under blocking send/recv"), invalid_argument);
  CHECK(hp::find_problem(deadlock).find("rank 0 waits at action 3 (send_forward F1@s0 -> rank 1)") != std::string::npos);

  auto const swapped = edited(base, [](lists& l) {  // backward of micro-batch 0 before its forward
    auto& r0 = l[0];
    std::swap(r0[find(r0, {K::forward, 0, 0, -1})], r0[find(r0, {K::backward, 0, 0, -1})]);
  });
  CHECK_THROWS_WITH_AS(hp::validate(swapped), Contains("micro-batch 0 stage 0: backward at action 0 before its forward"), invalid_argument);

  auto const no_recv = edited(base, [](lists& l) { l[1].erase(l[1].begin() + static_cast<long>(find(l[1], {K::recv_forward, 2, 1, 0}))); });
  CHECK_THROWS_WITH_AS(hp::validate(no_recv), Contains("micro-batch 2 stage 1: no recv_forward"), invalid_argument);

  auto const late_recv = edited(base, [](lists& l) {
    auto& r1 = l[1];
    std::swap(r1[find(r1, {K::recv_forward, 0, 1, 0})], r1[find(r1, {K::forward, 0, 1, -1})]);
  });
  CHECK_THROWS_WITH_AS(hp::validate(late_recv), Contains("recv_forward at action 1 after the computation at action 0 that needs it"), invalid_argument);

  auto const early_send = edited(base, [](lists& l) {
    auto& r0 = l[0];
    std::swap(r0[find(r0, {K::send_forward, 0, 0, 1})], r0[find(r0, {K::forward, 0, 0, -1})]);
  });
  CHECK_THROWS_WITH_AS(hp::validate(early_send), Contains("send_forward at action 0 before the computation at action 1 that makes it"), invalid_argument);

  auto const wrong_peer = edited(base, [](lists& l) { l[0][1].peer = 0; });
  CHECK_THROWS_WITH_AS(hp::validate(wrong_peer), Contains("peer 0, expected rank 1"), invalid_argument);

  auto const bad_microbatch = edited(base, [](lists& l) { l[0][0].microbatch = 3; });
  CHECK_THROWS_WITH_AS(hp::validate(bad_microbatch), Contains("micro-batch 3 out of range [0, 3)"), invalid_argument);

  auto const wrong_rank = edited(base, [](lists& l) { l[0][0].stage = 1; });
  CHECK_THROWS_WITH_AS(hp::validate(wrong_rank), Contains("virtual stage 1 lives on rank 1"), invalid_argument);

  auto const repeated = edited(base, [](lists& l) { l[0].push_back(l[0][0]); });
  CHECK_THROWS_WITH_AS(hp::validate(repeated), Contains("repeats action 0"), invalid_argument);

  auto const no_neighbour = edited(base, [](lists& l) { l[1].push_back({K::send_forward, 0, 1, 0}); });
  CHECK_THROWS_WITH_AS(hp::validate(no_neighbour), Contains("stage 1 has no neighbour in that direction"), invalid_argument);

  // Two activations delivered in the other order: the recv would take the wrong tensor.
  auto const gp = hp::make_schedule<hp::gpipe>({.stages = 2, .microbatches = 2});
  auto const crossed = edited(gp, [](lists& l) {
    auto& r1 = l[1];
    lists::value_type reordered;
    reordered.push_back({K::recv_forward, 1, 1, 0});
    reordered.push_back({K::recv_forward, 0, 1, 0});
    for (auto const& a : r1)
      if (a.kind != K::recv_forward) reordered.push_back(a);
    r1 = reordered;
  });
  CHECK_THROWS_WITH_AS(hp::validate(crossed), Contains("would get the wrong tensor"), invalid_argument);

  // Split and whole backward of one micro-batch.
  auto const zb = hp::make_schedule<hp::zb_h1>({.stages = 2, .microbatches = 2});
  auto const mixed = edited(zb, [](lists& l) { l[0].push_back({K::backward, 0, 0, -1}); });
  CHECK_THROWS_WITH_AS(hp::validate(mixed), Contains("both a backward and a split backward"), invalid_argument);
  auto const half = edited(zb, [](lists& l) { l[0].erase(l[0].begin() + static_cast<long>(find(l[0], {K::backward_weight, 1, 0, -1}))); });
  CHECK_THROWS_WITH_AS(hp::validate(half), Contains("split backward without both halves"), invalid_argument);
  // Generated lists survive the same checks, and timelines refuse invalid ones.
  CHECK(hp::find_problem(base).empty());
  CHECK_THROWS_AS(static_cast<void>(hp::timeline(deadlock)), invalid_argument);
}

TEST_CASE("the executor checks its inputs before any transfer") {
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 2});
  auto const bytes = hp::model_bytes::uniform(s.shape(), {.activations = 8, .output = 8});
  aligned_resource resource;
  headroom::host::launch(3, [&](thread_communicator& comm) {
    CHECK_THROWS_WITH_AS(hp::executor(comm, resource, s, bytes), Contains("the communicator has 3 ranks, the schedule '1f1b' needs p = 2"), invalid_argument);
  });
  headroom::host::launch(2, [&](thread_communicator& comm) {
    auto const four = hp::model_bytes::uniform({.stages = 4, .microbatches = 1}, {});
    CHECK_THROWS_WITH_AS(hp::executor(comm, resource, s, four), Contains("model_bytes has 4 stages, expected p·v = 2"), invalid_argument);
    auto const zb = hp::make_schedule<hp::zb_h1>(s.shape());
    hp::executor exec(comm, resource, zb, bytes);
    plain_stage stage;
    CHECK_THROWS_WITH_AS(exec.step(stage), Contains("splits the backward into backward_input and backward_weight"), invalid_argument);
    CHECK(exec.statistics().bytes().total == 0);  // nothing was allocated or sent
    auto broken = s.ranks();
    broken[1].pop_back();
    CHECK_THROWS_WITH_AS(hp::executor(comm, resource, hp::schedule("broken", s.shape(), broken), bytes), Contains("no send_backward"), invalid_argument);
  });
}

TEST_CASE("forward-only: gradient actions and training schedules are refused by name") {
  auto const eval = hp::make_schedule<hp::forward_only>({.stages = 2, .microbatches = 2});
  auto lists_with_grad = eval.ranks();
  lists_with_grad[0].push_back({action_kind::backward, 0, 0, -1});
  hp::schedule const bad("eval+grad", eval.shape(), lists_with_grad, hp::step_kind::evaluation);
  CHECK_THROWS_WITH_AS(hp::validate(bad), Contains("rank 0 action 4 (B0@s0): a gradient action in a forward-only (evaluation) schedule"), invalid_argument);
  // The same lists marked as training miss their backwards.
  CHECK_THROWS_WITH_AS(hp::validate(hp::schedule("train", eval.shape(), eval.ranks())), Contains("no backward"), invalid_argument);
  struct forward_only_stage {
    void forward(hp::forward_args<inline_stream> const&) {}
    double loss(hp::loss_args<inline_stream> const&) { return 0; }
  };
  auto const train = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 2});
  auto const bytes = hp::model_bytes::uniform(train.shape(), {.activations = 8, .output = 8});
  headroom::host::launch(2, [&](thread_communicator& comm) {
    aligned_resource resource;
    hp::executor exec(comm, resource, train, bytes);
    forward_only_stage stage;
    CHECK_THROWS_WITH_AS(exec.step(stage), Contains("schedule '1f1b' trains (it has backwards); the stage has no backward member"), invalid_argument);
  });
}

TEST_CASE("place_transfers rejects orders it cannot turn into a schedule") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 1};
  using K = action_kind;
  lists const good{{{K::forward, 0, 0, -1}, {K::backward, 0, 0, -1}}, {{K::forward, 0, 1, -1}, {K::backward, 0, 1, -1}}};
  CHECK_NOTHROW(static_cast<void>(hp::place_transfers("ok", shape, good)));
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::place_transfers("x", shape, lists(3))), Contains("3 compute orders for p = 2"), invalid_argument);
  auto transfer = good;
  transfer[0].push_back({K::send_forward, 0, 0, 1});
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::place_transfers("x", shape, transfer)), Contains("rank 0 has send_forward F0@s0 -> rank 1, expected a computation"), invalid_argument);
  auto elsewhere = good;
  elsewhere[0][0].stage = 1;
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::place_transfers("x", shape, elsewhere)), Contains("rank 0 has F0@s1"), invalid_argument);
  auto beyond = good;
  beyond[1][1].microbatch = 1;
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::place_transfers("x", shape, beyond)), Contains("micro-batch in [0, 1)"), invalid_argument);
  // Rank 1 runs its backward before its forward: the orders wait on each other.
  lists const stuck{{{K::forward, 0, 0, -1}, {K::backward, 0, 0, -1}}, {{K::backward, 0, 1, -1}, {K::forward, 0, 1, -1}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::place_transfers("stuck", shape, stuck)), Contains("the compute orders wait on each other: rank 0 at B0@s0; rank 1 at B0@s1;"), invalid_argument);
  lists const no_backward{{{K::forward, 0, 0, -1}}, {{K::forward, 0, 1, -1}, {K::backward, 0, 1, -1}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::place_transfers("x", shape, no_backward)), Contains("micro-batch 0 stage 0: no backward"), invalid_argument);
}
