// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Placement of virtual stages on ranks (interleaved, V, a user's table), local hand-offs in the
// lowering and the validator, the V-shape generators zbv and dualpipe_v against orders computed
// as PyTorch's ScheduleZBVZeroBubble / ScheduleDualPipeV compute them, the overlapped action,
// and the placement in the ranks' agreement words and the PyTorch format.
#include <algorithm>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using headroom::invalid_argument;
using hp::action_kind;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (invalid_argument const& e) {
    return e.what();
  }
  return "(no invalid_argument)";
}
bool contains(std::string const& text, std::string const& part) { return text.find(part) != std::string::npos; }

// PyTorch's _Action as (stage, type, micro-batch) text: "0F1", "3I0", "(1F2;2B0)OVERLAP_F_B".
using row = std::vector<std::string>;
std::string act(int stage, char type, int mb) { return std::to_string(stage) + type + std::to_string(mb); }

row compute_row(hp::schedule const& s, int r) {
  row out;
  for (auto const& a : s.actions(r))
    if (hp::is_compute(a.kind)) out.push_back(hp::pytorch::to_string(a));
  return out;
}

// ScheduleZBVZeroBubble._calculate_single_rank_operations, step by step as PyTorch writes it:
// counters per chunk, the order built for max(2p - 1, m) micro-batches, then the actions of
// micro-batches >= m dropped (PyTorch turns them into bubbles).
row torch_zbv(int p, int m, int rank) {
  int const count = std::max(2 * p - 1, m);
  int const num_stages = 2 * p;
  std::vector<std::tuple<int, char, int>> actions;
  int fwd0 = 0, fwd1 = 0, bwd0 = 0, bwd1 = 0;
  int const chunk0 = rank, chunk1 = num_stages - 1 - rank;
  for (int i = 0; i < 2 * (p - rank) - 1; ++i) actions.emplace_back(chunk0, 'F', fwd0++);
  for (int i = 0; i < rank; ++i) {
    actions.emplace_back(chunk1, 'F', fwd1++);
    actions.emplace_back(chunk0, 'F', fwd0++);
  }
  for (int i = 0; i < p - rank; ++i) {
    actions.emplace_back(chunk1, 'F', fwd1++);
    actions.emplace_back(chunk1, 'I', bwd1);
    actions.emplace_back(chunk1, 'W', bwd1++);
  }
  while (fwd1 < fwd0 || fwd0 < count) {
    if (fwd0 < count) actions.emplace_back(chunk0, 'F', fwd0++);
    actions.emplace_back(chunk0, 'I', bwd0);
    actions.emplace_back(chunk0, 'W', bwd0++);
    actions.emplace_back(chunk1, 'F', fwd1++);
    actions.emplace_back(chunk1, 'I', bwd1);
    actions.emplace_back(chunk1, 'W', bwd1++);
  }
  int wgt0 = bwd0, wgt1 = bwd1;
  for (int i = 0; i < rank; ++i) {
    actions.emplace_back(chunk0, 'I', bwd0++);
    actions.emplace_back(chunk1, 'I', bwd1++);
  }
  for (int i = 0; i < p - rank; ++i) {
    actions.emplace_back(chunk0, 'I', bwd0++);
    actions.emplace_back(chunk0, 'W', wgt0++);
  }
  while (wgt1 < bwd1) actions.emplace_back(chunk1, 'W', wgt1++);
  while (wgt0 < bwd0) actions.emplace_back(chunk0, 'W', wgt0++);
  REQUIRE((wgt0 == bwd0 && bwd0 == fwd0 && wgt1 == bwd1 && bwd1 == fwd1));  // PyTorch's own assertion
  row out;
  for (auto const& [st, type, mb] : actions)
    if (mb < m) out.push_back(act(st, type, mb));
  return out;
}

// ScheduleDualPipeV._calculate_single_rank_operations: counters per (stage, type), a full
// backward counting as an I and a W, a FIFO of pending weight gradients.
row torch_dualpipe_v(int p, int m, int rank) {
  std::map<std::pair<int, char>, int> counters;
  std::deque<std::pair<int, int>> weight_queue;
  row out;
  int const stage0 = rank, stage1 = 2 * p - 1 - rank;
  auto const bump_backward = [&](int st) {
    ++counters[{st, 'I'}];
    ++counters[{st, 'W'}];
  };
  auto const add = [&](int st, char type) {  // type: F, I or B (full backward)
    int const mb = counters[{st, type == 'B' ? 'I' : type}];
    out.push_back(act(st, type, mb));
    if (type == 'B') {
      bump_backward(st);
      return;
    }
    if (type == 'I') weight_queue.emplace_back(st, mb);
    counters[{st, type}] = mb + 1;
  };
  auto const add_weight = [&] {
    if (weight_queue.empty()) return;
    auto const [st, mb] = weight_queue.front();
    weight_queue.pop_front();
    out.push_back(act(st, 'W', mb));
    ++counters[{st, 'W'}];
  };
  auto const add_overlap = [&](int fst, int bst) {
    int const fmb = counters[{fst, 'F'}];
    int const bmb = counters[{bst, 'I'}];
    out.push_back("(" + act(fst, 'F', fmb) + ";" + act(bst, 'B', bmb) + ")OVERLAP_F_B");
    counters[{fst, 'F'}] = fmb + 1;
    bump_backward(bst);
  };
  for (int i = 0; i < (p - rank - 1) * 2; ++i) add(stage0, 'F');
  for (int i = 0; i < rank + 1; ++i) {
    add(stage0, 'F');
    add(stage1, 'F');
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    add(stage1, 'I');
    add_weight();
    add(stage1, 'F');
  }
  for (int i = 0; i < m - p * 2 + rank + 1; ++i) {
    if (i == 0 && rank == p - 1) {
      add(stage0, 'F');
      add(stage1, 'B');
    } else {
      add_overlap(stage0, stage1);
    }
    add_overlap(stage1, stage0);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    add(stage1, 'B');
    add_overlap(stage1, stage0);
  }
  int const step6 = rank + 1;
  bool zb = false;
  for (int i = 0; i < step6; ++i) {
    if (i == step6 / 2 && rank % 2 == 1) zb = true;
    add(stage1, zb ? 'I' : 'B');
    if (i == step6 / 2 && rank % 2 == 0) zb = true;
    add(stage0, zb ? 'I' : 'B');
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    add_weight();
    add(stage0, zb ? 'I' : 'B');
  }
  for (int i = 0; i < rank + 1; ++i) add_weight();
  return out;
}

}  // namespace

TEST_CASE("placement: interleaved is the shape's map; the V puts the first and last stage on rank 0") {
  for (int p : {1, 2, 3, 4})
    for (int v : {1, 2, 3}) {
      hp::pipeline_shape const shape{.stages = p, .microbatches = 1, .chunks = v};
      auto const pl = hp::placement::interleaved(shape);
      for (int s = 0; s < p * v; ++s) {
        CHECK(pl.rank_of(s) == shape.rank_of(s));
        CHECK(pl.chunk_of(s) == shape.chunk_of(s));
        CHECK(pl.virtual_stage(pl.rank_of(s), pl.chunk_of(s)) == s);
      }
    }
  auto const v = hp::placement::v_shape(4, 2);
  CHECK(v.kind() == hp::placement::style::v_shape);
  for (int r = 0; r < 4; ++r) {
    CHECK(v.virtual_stage(r, 0) == r);
    CHECK(v.virtual_stage(r, 1) == 7 - r);
  }
  CHECK(v.rank_of(0) == 0);
  CHECK(v.rank_of(7) == 0);
  CHECK(v.same_rank(3, 4));  // the turn of the V: a local hand-off on rank 3
  CHECK(!v.same_rank(2, 3));
  auto const zigzag = hp::placement::v_shape(2, 3);  // chunk 2 goes down again
  CHECK(zigzag.virtual_stage(0, 2) == 4);
  CHECK(zigzag.virtual_stage(1, 2) == 5);
  CHECK(hp::placement::v_shape(3, 1) == hp::placement::interleaved(3, 1));  // one chunk: the same map
}

TEST_CASE("placement::from_table: a user's map, validated; the standard maps are recognised") {
  auto const custom = hp::placement::from_table({{0, 5}, {2, 3}, {1, 4}});
  CHECK(custom.kind() == hp::placement::style::custom);
  CHECK(custom.rank_of(1) == 2);
  CHECK(custom.chunk_of(5) == 1);
  std::ostringstream os;
  os << custom;
  CHECK(os.str() == "custom [[0, 5], [2, 3], [1, 4]]");
  CHECK(hp::placement::from_table({{0, 3}, {1, 2}}).kind() == hp::placement::style::v_shape);
  CHECK(hp::placement::from_table({{0, 2}, {1, 3}}) == hp::placement::interleaved(2, 2));

  CHECK(contains(error_of([] { (void)hp::placement::from_table({{0, 3}, {1}}); }),
                 "pipeline::placement::from_table: rank 1 holds 1 chunks, expected every rank to hold v = 2"));
  CHECK(contains(error_of([] { (void)hp::placement::from_table({{0, 4}, {1, 2}}); }),
                 "rank 0 chunk 1 is virtual stage 4, expected one in [0, 4) for p = 2, v = 2"));
  CHECK(contains(error_of([] { (void)hp::placement::from_table({{0, 1}, {1, 2}}); }),
                 "virtual stage 1 is on rank 0 chunk 1 and again on rank 1 chunk 0, expected every virtual stage on exactly one rank"));
  CHECK(contains(error_of([] { (void)hp::placement::from_table({}); }), "0 ranks"));
  CHECK(contains(error_of([] { (void)hp::placement::from_table({{}, {}}); }), "rank 0 holds 0 chunks"));
  CHECK(contains(error_of([] { (void)hp::placement::v_shape(0, 2); }), "pipeline::placement::v_shape: stages (p) = 0"));
  CHECK(contains(error_of([] { (void)hp::place_transfers("x", {.stages = 2, .microbatches = 1, .chunks = 2}, hp::placement::interleaved(2, 1), {{}, {}}); }),
                 "pipeline::place_transfers: placement interleaved is for p = 2, v = 1, expected the shape's p = 2, v = 2"));
  // a schedule refuses a placement of another size
  CHECK(contains(error_of([] { (void)hp::schedule("x", {.stages = 2, .microbatches = 1, .chunks = 2}, hp::placement::v_shape(2, 1), {{}, {}}); }),
                 "pipeline::schedule 'x': placement v_shape is for p = 2, v = 1, expected the shape's p = 2, v = 2"));
}

TEST_CASE("every generator keeps the interleaved placement; printing is unchanged for it") {
  auto const s = hp::make_schedule<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2});
  CHECK(s.placement() == hp::placement::interleaved(2, 2));
  std::ostringstream os;
  os << s;
  CHECK(!contains(os.str(), "placement"));
  std::ostringstream ov;
  ov << hp::make_schedule<hp::zbv>({.stages = 2, .microbatches = 2, .chunks = 2});
  CHECK(contains(ov.str(), "schedule zbv (p=2 m=2 v=2 g=2, placement v_shape)"));
}

TEST_CASE("zbv: every rank's order is PyTorch's ScheduleZBVZeroBubble order") {
  for (int p : {2, 3, 4, 5, 8})
    for (int m : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16}) {
      CAPTURE(p);
      CAPTURE(m);
      auto const s = hp::make_schedule<hp::zbv>({.stages = p, .microbatches = m, .chunks = 2});
      CHECK(s.placement() == hp::placement::v_shape(p, 2));
      CHECK(hp::find_problem(s).empty());
      for (int r = 0; r < p; ++r) {
        CAPTURE(r);
        CHECK(compute_row(s, r) == torch_zbv(p, m, r));
      }
    }
}

TEST_CASE("zbv: the turn of the V is a local hand-off, the ends are on rank 0") {
  int const p = 4, m = 8;
  auto const s = hp::make_schedule<hp::zbv>({.stages = p, .microbatches = m, .chunks = 2});
  for (int r = 0; r < p; ++r)
    for (auto const& a : s.actions(r)) {
      if (hp::is_compute(a.kind)) continue;
      int const other = (a.kind == action_kind::send_forward || a.kind == action_kind::recv_backward) ? a.stage + 1 : a.stage - 1;
      CHECK(s.placement().rank_of(other) != r);  // no transfer joins two stages of one rank
      CHECK(a.peer == s.placement().rank_of(other));
    }
  auto const count = [&](int r, action_kind k) {
    return std::count_if(s.actions(r).begin(), s.actions(r).end(), [&](hp::action const& a) { return a.kind == k; });
  };
  // rank p - 1 receives only chunk 0's inputs and chunk 1's... nothing: its chunk 1 input is local
  CHECK(count(p - 1, action_kind::recv_forward) == m);
  CHECK(count(p - 1, action_kind::send_forward) == m);
  CHECK(count(0, action_kind::recv_forward) == m);  // stage 2p - 1's input from rank 1
  CHECK(count(0, action_kind::send_backward) == m);
  auto const text = hp::timeline(s);
  CHECK(contains(text, "rank 0 |"));
}

TEST_CASE("dualpipe_v: every rank's order is PyTorch's ScheduleDualPipeV order, overlapped F+B included") {
  for (int p : {2, 3, 4, 5, 8})
    for (int m : {2 * p, 2 * p + 1, 2 * p + 4, 3 * p + 2}) {
      CAPTURE(p);
      CAPTURE(m);
      auto const s = hp::make_schedule<hp::dualpipe_v>({.stages = p, .microbatches = m, .chunks = 2});
      CHECK(hp::find_problem(s).empty());
      int overlapped = 0;
      for (int r = 0; r < p; ++r) {
        CAPTURE(r);
        CHECK(compute_row(s, r) == torch_dualpipe_v(p, m, r));
        for (auto const& a : s.actions(r)) overlapped += a.kind == action_kind::overlapped;
      }
      CHECK(overlapped > 0);
    }
  CHECK(contains(error_of([] { (void)hp::make_schedule<hp::dualpipe_v>({.stages = 4, .microbatches = 7, .chunks = 2}); }),
                 "pipeline::dualpipe_v: microbatches (m) = 7 < 2p = 8 virtual stages, expected m >= 2p"));
  CHECK(contains(error_of([] { (void)hp::make_schedule<hp::zbv>({.stages = 4, .microbatches = 8, .chunks = 3}); }),
                 "pipeline::zbv: chunks (v) = 3, expected 2"));
  CHECK(contains(error_of([] { (void)hp::make_schedule<hp::zbv>({.stages = 4, .microbatches = 8, .chunks = 2, .group = 4}); }),
                 "pipeline::zbv: group (g) = 4, expected 0"));
}

// Chunk forwards whose input gradient has not run yet, at most, on rank r (an overlapped action's
// forward counts before its backward's release).
int in_flight(hp::schedule const& s, int r) {
  int live = 0, peak = 0;
  for (auto const& a : s.actions(r)) {
    if (a.kind == action_kind::forward || a.kind == action_kind::overlapped) peak = std::max(peak, ++live);
    if (a.kind == action_kind::backward || a.kind == action_kind::backward_input || a.kind == action_kind::overlapped) --live;
  }
  return peak;
}

TEST_CASE("V schedules hold 2p chunk forwards on every rank (2p + 1 with DualPipeV's overlap)") {
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 3 * p + 1, 4 * p}) {
      CAPTURE(p);
      CAPTURE(m);
      auto const z = hp::make_schedule<hp::zbv>({.stages = p, .microbatches = m, .chunks = 2});
      auto const d = hp::make_schedule<hp::dualpipe_v>({.stages = p, .microbatches = m, .chunks = 2});
      for (int r = 0; r < p; ++r) {
        CHECK(in_flight(z, r) == 2 * p);
        CHECK(in_flight(d, r) == 2 * p + 1);
      }
    }
}

TEST_CASE("validate: local hand-offs and overlapped actions") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 1, .chunks = 2};
  auto const v = hp::placement::v_shape(2, 2);  // rank 0: stages 0, 3; rank 1: stages 1, 2
  auto const c = [](action_kind k, int mb, int st) { return hp::action{k, mb, st, -1}; };
  std::vector<std::vector<hp::action>> const order{
      {c(action_kind::forward, 0, 0), c(action_kind::forward, 0, 3), c(action_kind::backward, 0, 3), c(action_kind::backward, 0, 0)},
      {c(action_kind::forward, 0, 1), c(action_kind::forward, 0, 2), c(action_kind::backward, 0, 2), c(action_kind::backward, 0, 1)}};
  auto const good = hp::place_transfers("v", shape, v, order);
  CHECK(hp::find_problem(good).empty());
  // no send/recv between stages 1 and 2 (both on rank 1)
  for (auto const& a : good.actions(1)) CHECK(!(a.kind == action_kind::send_forward && a.stage == 1));

  // a transfer between two stages of one rank is refused
  auto lists = good.ranks();
  lists[1].insert(lists[1].begin() + 2, hp::action{action_kind::send_forward, 0, 1, 1});
  CHECK(contains(hp::find_problem(hp::schedule("bad", shape, v, lists)),
                 "a transfer between two stages of this rank, expected a local hand-off (no send or recv) under placement v_shape"));
  // the consumer's forward before the producer's on the same rank
  lists = good.ranks();
  std::swap(lists[1][1], lists[1][2]);  // F0@s1 is after its recv; swap F0@s1 and F0@s2
  auto const swapped = hp::find_problem(hp::schedule("order", shape, v, lists));
  CHECK(contains(swapped, "before the forward of stage 1 on this rank"));
  // the backward before the next chunk's backward that makes its gradient
  lists = good.ranks();
  auto& r1 = lists[1];
  auto const b2 = std::find(r1.begin(), r1.end(), c(action_kind::backward, 0, 2));
  auto const b1 = std::find(r1.begin(), r1.end(), c(action_kind::backward, 0, 1));
  std::iter_swap(b2, b1);
  CHECK(contains(hp::find_problem(hp::schedule("order", shape, v, lists)), "before the backward of stage 2 on this rank"));

  // overlapped: parts on this rank, different pairs, counted as a forward and a backward
  lists = good.ranks();
  CHECK(contains(hp::find_problem(hp::schedule("ov", shape, v, {{hp::overlap(0, 0, 0, 1)}, {}})),
                 "backward virtual stage 1 lives on rank 1, not on this one"));
  CHECK(contains(hp::find_problem(hp::schedule("ov", shape, v, {{hp::overlap(0, 0, 0, 0)}, {}})),
                 "with its own forward, expected the forward and the backward of two different pairs"));
  CHECK(contains(hp::find_problem(hp::schedule("ov", shape, v, {{hp::overlap(0, 0, 3, 3)}, {}})),
                 "backward micro-batch 3 out of range [0, 1)"));
  CHECK(contains(hp::find_problem(hp::schedule("ov", shape, v, {{hp::action{action_kind::forward, 0, 0, -1, 0, 3}}, {}})),
                 "backward_microbatch 0 and backward_stage 3, expected -1 outside an overlapped action"));
  CHECK(contains(hp::find_problem(hp::schedule("ov", shape, v, {{hp::overlap(0, 0, 0, 3)}, {}}, hp::step_kind::evaluation)),
                 "a gradient action in a forward-only (evaluation) schedule"));
  // an overlapped B whose forward is the overlapped F's successor can never run: refused when lowering
  CHECK(contains(error_of([&] {
                   (void)hp::place_transfers("ov", shape, v,
                                             {{c(action_kind::forward, 0, 0), hp::overlap(0, 3, 0, 0), c(action_kind::backward, 0, 3)},
                                              order[1]});
                 }),
                 "the compute orders wait on each other"));
  CHECK(contains(error_of([&] { (void)hp::place_transfers("ov", shape, v, {{hp::overlap(0, 0, 0, 1)}, {}}); }),
                 "pipeline::place_transfers: rank 0 has F0@s0+B0@s1, expected a computation"));
}

TEST_CASE("the ranks' agreement words hold the placement") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 1, .chunks = 2};
  auto const c = [](action_kind k, int mb, int st) { return hp::action{k, mb, st, -1}; };
  auto const bytes = hp::model_bytes::uniform(shape, {.activations = 8, .output = 4});
  // The same compute order under two placements that both hold it: rank 0 {0, 3}, rank 1 {1, 2}
  // (the V), and the same stages written as a user's table in the other chunk order.
  std::vector<std::vector<hp::action>> const order{
      {c(action_kind::forward, 0, 0), c(action_kind::forward, 0, 3), c(action_kind::backward, 0, 3), c(action_kind::backward, 0, 0)},
      {c(action_kind::forward, 0, 1), c(action_kind::forward, 0, 2), c(action_kind::backward, 0, 2), c(action_kind::backward, 0, 1)}};
  auto const a = hp::place_transfers("a", shape, hp::placement::v_shape(2, 2), order);
  auto const b = hp::place_transfers("b", shape, hp::placement::from_table({{3, 0}, {2, 1}}), order);
  CHECK(a.ranks() == b.ranks());
  auto const wa = hp::fingerprint(a, bytes), wb = hp::fingerprint(b, bytes);
  CHECK(wa != wb);
  std::vector<std::int64_t> all(wa.begin(), wa.end());
  all.insert(all.end(), wb.begin(), wb.end());
  CHECK(contains(hp::detail::disagreement(all, 2, "pipeline::executor"),
                 "rank 1 differs from rank 0 in the placement of virtual stages on ranks"));
  CHECK(hp::fingerprint(a, bytes) == hp::fingerprint(hp::place_transfers("c", shape, hp::placement::v_shape(2, 2), order), bytes));
}

TEST_CASE("PyTorch format: V-shape rows import as the V, overlapped actions as OVERLAP_F_B both ways") {
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    auto const z = hp::make_schedule<hp::zbv>({.stages = p, .microbatches = 2 * p, .chunks = 2});
    CHECK(hp::pytorch::from_csv(hp::pytorch::to_csv(z), "zbv") == z);
    CHECK(hp::pytorch::from_csv(hp::pytorch::to_csv(z, hp::pytorch::content::compute_only), "zbv") == z);
    auto const d = hp::make_schedule<hp::dualpipe_v>({.stages = p, .microbatches = 2 * p + 1, .chunks = 2});
    auto const rows = hp::pytorch::export_actions(d, hp::pytorch::content::compute_only);
    CHECK(rows[0] == torch_dualpipe_v(p, 2 * p + 1, 0));
    CHECK(hp::pytorch::import_actions(rows, "dualpipe_v") == d);
    CHECK(hp::pytorch::from_csv(hp::pytorch::to_csv(d), "dualpipe_v") == d);
  }
  // a user's map must be passed: rows never imply one
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 1, .chunks = 2};
  auto const table = hp::placement::from_table({{0, 1}, {2, 3}});  // two consecutive stages per rank
  CHECK(table.kind() == hp::placement::style::custom);
  auto const c = [](action_kind k, int mb, int st) { return hp::action{k, mb, st, -1}; };
  auto const s = hp::place_transfers("t", shape, table,
                                     {{c(action_kind::forward, 0, 0), c(action_kind::forward, 0, 1), c(action_kind::backward, 0, 1), c(action_kind::backward, 0, 0)},
                                      {c(action_kind::forward, 0, 2), c(action_kind::forward, 0, 3), c(action_kind::backward, 0, 3), c(action_kind::backward, 0, 2)}});
  CHECK(s.actions(0).size() == 6);  // one send and one recv: only stages 1 and 2 are on different ranks
  auto const csv = hp::pytorch::to_csv(s);
  CHECK(hp::pytorch::from_csv(csv, "t", std::nullopt, table) == s);
  CHECK(contains(error_of([&] { (void)hp::pytorch::from_csv(csv, "t"); }),
                 "rank 0 action 1F0 is on stage 1, which lives on rank 1 under placement interleaved; expected stage s on rank s mod p "
                 "or the V-shape (pass a placement for another map)"));
  CHECK(contains(error_of([&] { (void)hp::pytorch::from_csv(csv, "t", std::nullopt, hp::placement::v_shape(2, 1)); }),
                 "pipeline::pytorch::import_actions: placement v_shape is for p = 2, v = 1"));
}
