// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Schedules: every generator over a grid of shapes gives lists that validate() accepts, with the
// in-flight bounds the literature states; hand-made broken lists are rejected with the rule.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using hp::action;
using hp::action_kind;

namespace {

// Most micro-batches of one rank that ran forward and not yet their (input) backward.
int max_in_flight(hp::schedule const& s, int rank) {
  int live = 0;
  int peak = 0;
  for (action const& a : s.actions(rank)) {
    if (a.kind == action_kind::forward) peak = std::max(peak, ++live);
    if (a.kind == action_kind::backward || a.kind == action_kind::backward_input) --live;
  }
  return peak;
}

int count(hp::schedule const& s, int rank, action_kind kind) {
  auto const list = s.actions(rank);
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](action const& a) { return a.kind == kind; }));
}

template <class G>
void check_grid(std::vector<int> const& chunk_counts) {
  for (int p : {1, 2, 3, 4, 8})
    for (int v : chunk_counts)
      for (int m = 1; m <= 32; ++m) {
        hp::pipeline_shape const shape{.stages = p, .microbatches = m, .chunks = v};
        if (p == 1 && v > 1) continue;
        if (std::is_same_v<G, hp::interleaved_1f1b> && (m < p || m % p != 0)) continue;
        if (std::is_same_v<G, hp::interleaved_zb> && m % std::max(1, m / p) != 0) continue;
        CAPTURE(shape);
        auto const s = hp::make_schedule<G>(shape);
        CHECK(hp::find_problem(s) == "");
        CHECK(s == hp::make_schedule<G>(shape));  // deterministic
        for (int r = 0; r < p; ++r) CHECK(count(s, r, action_kind::forward) == m * v);
      }
}

}  // namespace

TEST_CASE("every generator validates over p x m x v, deterministically") {
  check_grid<hp::gpipe>({1, 2, 4});
  check_grid<hp::one_f_one_b>({1});
  check_grid<hp::interleaved_1f1b>({1, 2, 4});
  check_grid<hp::zb_h1>({1});
  check_grid<hp::forward_only>({1, 2, 4});
  check_grid<hp::interleaved_zb>({1, 2, 4});
}

TEST_CASE("micro-batches in flight follow the published formulas") {
  for (int p : {2, 4, 8})
    for (int m : {1, 3, 8, 16}) {
      CAPTURE(p);
      CAPTURE(m);
      auto const g = hp::make_schedule<hp::gpipe>({.stages = p, .microbatches = m});
      auto const f = hp::make_schedule<hp::one_f_one_b>({.stages = p, .microbatches = m});
      auto const z = hp::make_schedule<hp::zb_h1>({.stages = p, .microbatches = m});
      for (int r = 0; r < p; ++r) {
        CHECK(max_in_flight(g, r) == m);                       // fill-drain: every stage holds all m
        CHECK(max_in_flight(f, r) == std::min(m, p - r));      // 1F1B: warm-up p - r - 1, plus one
        CHECK(max_in_flight(z, r) == std::min(m, p - r));      // ZB-H1 keeps 1F1B's bound
      }
    }
  // Interleaved: warm-up 2(p - r - 1) + (v - 1) g, plus one, capped at m v (Megatron).
  for (int p : {2, 4})
    for (int v : {2, 4})
      for (int m : {p, 2 * p, 4 * p}) {
        hp::pipeline_shape const shape{.stages = p, .microbatches = m, .chunks = v};
        CAPTURE(shape);
        auto const s = hp::make_schedule<hp::interleaved_1f1b>(shape);
        for (int r = 0; r < p; ++r)
          CHECK(max_in_flight(s, r) == std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v));
      }
}

TEST_CASE("1F1B on two ranks, written out") {
  auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = 2, .microbatches = 3});
  using K = action_kind;
  std::vector<action> const rank0{
      {K::forward, 0, 0, -1},      {K::send_forward, 0, 0, 1},  {K::forward, 1, 0, -1},       {K::send_forward, 1, 0, 1},
      {K::recv_backward, 0, 0, 1}, {K::backward, 0, 0, -1},     {K::forward, 2, 0, -1},       {K::send_forward, 2, 0, 1},
      {K::recv_backward, 1, 0, 1}, {K::backward, 1, 0, -1},     {K::recv_backward, 2, 0, 1},  {K::backward, 2, 0, -1}};
  // Rank 1 takes micro-batch 2 as soon as rank 0 made it: the recv sits before the send of B1
  // because rank 0 produced F2 in the same tick as rank 1 produced B1, and rank 0 comes first.
  std::vector<action> const rank1{
      {K::recv_forward, 0, 1, 0},  {K::forward, 0, 1, -1},     {K::recv_forward, 1, 1, 0},   {K::backward, 0, 1, -1},
      {K::send_backward, 0, 1, 0}, {K::forward, 1, 1, -1},     {K::backward, 1, 1, -1},      {K::recv_forward, 2, 1, 0},
      {K::send_backward, 1, 1, 0}, {K::forward, 2, 1, -1},     {K::backward, 2, 1, -1},      {K::send_backward, 2, 1, 0}};
  std::ostringstream os;
  os << s;
  CAPTURE(os.str());
  CHECK(std::vector<action>(s.actions(0).begin(), s.actions(0).end()) == rank0);
  CHECK(std::vector<action>(s.actions(1).begin(), s.actions(1).end()) == rank1);
  CHECK(hp::timeline(s) == "rank 0 | F0 F1 .  B0 F2 B1 .  B2\n"
                           "rank 1 | .  F0 B0 F1 B1 F2 B2 . \n");
  CHECK(hp::ticks(s) == 8);
}

TEST_CASE("place_transfers: generated compute orders give back the generated schedules; custom orders run") {
  auto const compute_only = [](hp::schedule const& s) {
    std::vector<std::vector<action>> order;
    for (auto const& list : s.ranks()) {
      order.emplace_back();
      for (action const& a : list)
        if (hp::is_compute(a.kind)) order.back().push_back(a);
    }
    return order;
  };
  for (auto const& s : {hp::make_schedule<hp::gpipe>({.stages = 3, .microbatches = 5, .chunks = 2}),
                        hp::make_schedule<hp::one_f_one_b>({.stages = 4, .microbatches = 7}),
                        hp::make_schedule<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 3}),
                        hp::make_schedule<hp::zb_h1>({.stages = 4, .microbatches = 9})}) {
    CAPTURE(s.name());
    CHECK(hp::place_transfers(s.name(), s.shape(), compute_only(s)) == s);
  }
  // GPipe with the backwards in reverse micro-batch order (the last forward is the first backward).
  hp::pipeline_shape const shape{.stages = 3, .microbatches = 4};
  std::vector<std::vector<action>> order(3);
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 4; ++k) order[static_cast<std::size_t>(r)].push_back({action_kind::forward, k, r, -1});
    for (int k = 3; k >= 0; --k) order[static_cast<std::size_t>(r)].push_back({action_kind::backward, k, r, -1});
  }
  auto const reversed = hp::place_transfers("gpipe_reversed", shape, order);
  CHECK(hp::find_problem(reversed).empty());
  CHECK(hp::timeline(reversed) == "rank 0 | F0 F1 F2 F3 .  .  .  .  B3 B2 B1 B0\n"
                                  "rank 1 | .  F0 F1 F2 F3 .  .  B3 B2 B1 B0 . \n"
                                  "rank 2 | .  .  F0 F1 F2 F3 B3 B2 B1 B0 .  . \n");
}

namespace {

std::vector<action> computations(hp::schedule const& s, int rank) {
  std::vector<action> out;
  for (action const& a : s.actions(rank))
    if (hp::is_compute(a.kind)) out.push_back(a);
  return out;
}

// Megatron-Core's interleaved order, built the way its get_schedule_table / get_model_chunk_id
// build it (a lookup table of (micro-batch, chunk) per virtual micro-batch, the last group
// holding what is left), then laid out as warm-up, 1F1B and cool-down.
std::vector<action> megatron_interleaved(hp::pipeline_shape const& shape, int rank) {
  int const m = shape.microbatches, v = shape.chunks, g = shape.group_size(), p = shape.stages;
  std::vector<std::pair<int, int>> table;  // (micro-batch, chunk)
  for (int first = 0; first < m; first += g) {
    int const end = first + g >= m ? m : first + g;
    for (int c = 0; c < v; ++c)
      for (int k = first; k < end; ++k) table.emplace_back(k, c);
  }
  int const total = m * v;
  int const warmup = std::min(2 * (p - rank - 1) + (v - 1) * g, total);
  std::vector<action> out;
  auto const fwd = [&](int i) { out.push_back({action_kind::forward, table[static_cast<std::size_t>(i)].first, table[static_cast<std::size_t>(i)].second * p + rank, -1}); };
  auto const bwd = [&](int i) { out.push_back({action_kind::backward, table[static_cast<std::size_t>(i)].first, (v - 1 - table[static_cast<std::size_t>(i)].second) * p + rank, -1}); };
  for (int i = 0; i < warmup; ++i) fwd(i);
  for (int i = 0; i < total - warmup; ++i) {
    fwd(warmup + i);
    bwd(i);
  }
  for (int i = total - warmup; i < total; ++i) bwd(i);
  return out;
}

}  // namespace

TEST_CASE("interleaved 1F1B equals Megatron's order, tail groups included") {
  std::vector<hp::pipeline_shape> const shapes{
      {.stages = 4, .microbatches = 14, .chunks = 2, .group = 5},  // groups 5, 5, 4: Megatron accepts it
      {.stages = 4, .microbatches = 14, .chunks = 3, .group = 5},
      {.stages = 2, .microbatches = 7, .chunks = 2, .group = 5},   // 5, 2
      {.stages = 4, .microbatches = 8, .chunks = 2},               // g = p, no tail
      {.stages = 3, .microbatches = 11, .chunks = 2, .group = 4},  // 4, 7
      {.stages = 4, .microbatches = 12, .chunks = 2, .group = 8},  // 8, 4
  };
  for (auto const& shape : shapes) {
    CAPTURE(shape);
    auto const s = hp::make_schedule<hp::interleaved_1f1b>(shape);
    CHECK(hp::find_problem(s).empty());
    for (int r = 0; r < shape.stages; ++r) {
      CAPTURE(r);
      CHECK(computations(s, r) == megatron_interleaved(shape, r));
      CHECK(max_in_flight(s, r) == std::min(2 * (shape.stages - r - 1) + (shape.chunks - 1) * shape.group_size() + 1,
                                            shape.microbatches * shape.chunks));
    }
  }
}

TEST_CASE("GPipe with v > 1 is PyTorch's ScheduleLoopedBFS: backwards from the last chunk and micro-batch") {
  for (int v : {2, 3}) {
    hp::pipeline_shape const shape{.stages = 3, .microbatches = 4, .chunks = v};
    CAPTURE(shape);
    auto const s = hp::make_schedule<hp::gpipe>(shape);
    for (int r = 0; r < shape.stages; ++r) {
      std::vector<action> want;
      for (int c = 0; c < v; ++c)
        for (int k = 0; k < 4; ++k) want.push_back({action_kind::forward, k, c * 3 + r, -1});
      for (int c = v - 1; c >= 0; --c)
        for (int k = 3; k >= 0; --k) want.push_back({action_kind::backward, k, c * 3 + r, -1});
      CHECK(computations(s, r) == want);
    }
  }
  // v = 1 stays PyTorch's ScheduleGPipe: backwards in micro-batch order.
  auto const plain = hp::make_schedule<hp::gpipe>({.stages = 2, .microbatches = 3});
  CHECK(hp::timeline(plain) == "rank 0 | F0 F1 F2 .  .  B0 B1 B2\n"
                               "rank 1 | .  F0 F1 F2 B0 B1 B2 . \n");
}

TEST_CASE("ZB-H1 holds up to r + 1 weight gradients pending on rank r") {
  for (int p : {2, 4, 8})
    for (int m : {1, 3, 8, 16}) {
      CAPTURE(p);
      CAPTURE(m);
      auto const s = hp::make_schedule<hp::zb_h1>({.stages = p, .microbatches = m});
      for (int r = 0; r < p; ++r) {
        int pending = 0, most = 0;
        for (action const& a : s.actions(r)) {
          if (a.kind == action_kind::backward_input) most = std::max(most, ++pending);
          if (a.kind == action_kind::backward_weight) --pending;
        }
        CHECK(most == std::min(r + 1, m));
      }
    }
}

TEST_CASE("forward-only schedules: forwards in the interleaved order, transfers placed, nothing else") {
  for (int p : {1, 2, 4})
    for (int v : {1, 2, 3})
      for (int m : {1, 3, 8, 14})
        for (int g : {0, 5}) {
          if (p == 1 && v > 1) continue;
          hp::pipeline_shape const shape{.stages = p, .microbatches = m, .chunks = v, .group = g};
          CAPTURE(shape);
          auto const s = hp::make_schedule<hp::forward_only>(shape);
          CHECK(s.forward_only());
          CHECK(hp::find_problem(s).empty());
          for (int r = 0; r < p; ++r) {
            std::vector<action> want;
            for (int i = 0; i < m * v; ++i) {
              auto const slot = hp::interleaved_1f1b::nth(shape, i, true);
              want.push_back({action_kind::forward, slot.microbatch, shape.virtual_stage(r, slot.chunk), -1});
            }
            CHECK(computations(s, r) == want);
            for (action const& a : s.actions(r))
              CHECK((a.kind == action_kind::forward || a.kind == action_kind::send_forward || a.kind == action_kind::recv_forward));
          }
          if (v == 1) {  // plain micro-batch order
            auto const c = computations(s, 0);
            for (int k = 0; k < m; ++k) CHECK(c[static_cast<std::size_t>(k)].microbatch == k);
          }
        }
  // A training generator's schedule is not forward-only, and prints so.
  CHECK_FALSE(hp::make_schedule<hp::gpipe>({.stages = 2, .microbatches = 2}).forward_only());
  std::ostringstream os;
  os << hp::make_schedule<hp::forward_only>({.stages = 2, .microbatches = 1});
  CHECK(os.str() == "schedule forward_only (p=2 m=1 v=1, forward only)\n"
                    "  rank 0: F0@s0 | send_forward F0@s0 -> rank 1\n"
                    "  rank 1: recv_forward F0@s1 <- rank 0 | F0@s1\n");
}

TEST_CASE("interleaved zero bubble: zb_h1 when v = 1; W at most r + 1 behind on rank r; v chunks in rounds") {
  for (int p : {2, 3, 4, 8})
    for (int m : {1, 2, 5, 8, 16}) {
      if (m % std::max(1, m / p) != 0) continue;
      hp::pipeline_shape const shape{.stages = p, .microbatches = m};
      CAPTURE(shape);
      CHECK(hp::make_schedule<hp::interleaved_zb>(shape).ranks() == hp::make_schedule<hp::zb_h1>(shape).ranks());
    }
  for (int p : {2, 4})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 3 * p}) {
        hp::pipeline_shape const shape{.stages = p, .microbatches = m, .chunks = v};
        CAPTURE(shape);
        auto const s = hp::make_schedule<hp::interleaved_zb>(shape);
        CHECK(s.splits_backward());
        for (int r = 0; r < p; ++r) {
          int pending = 0, most = 0, in_flight = 0, most_in_flight = 0;
          for (action const& a : s.actions(r)) {
            if (a.kind == action_kind::forward) most_in_flight = std::max(most_in_flight, ++in_flight);
            if (a.kind == action_kind::backward_input) {
              --in_flight;
              most = std::max(most, ++pending);
            }
            if (a.kind == action_kind::backward_weight) --pending;
          }
          CHECK(most == std::min(r + 1, m * v));
          // PyTorch's warm-up: (v - 1) per round + p - 1 - r forwards, one more before the first I.
          CHECK(most_in_flight == std::min((v - 1) * m / std::max(1, m / p) + p - r, m * v));
        }
      }
  CHECK_THROWS_WITH_AS(static_cast<void>(hp::make_schedule<hp::interleaved_zb>({.stages = 4, .microbatches = 9, .chunks = 2})),
                       doctest::Contains("microbatches (m) = 9 is not a multiple of its 2 rounds"), headroom::invalid_argument);
}
