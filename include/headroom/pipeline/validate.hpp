// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// validate(schedule): proves a schedule correct before it runs, or throws invalid_argument
// naming the rank, the action and the rule it breaks.
//
//   1. every action is in range: micro-batch in [0, m), its virtual stage lives on this rank
//      (under the schedule's placement), a transfer names the rank of the neighbouring stage as
//      its peer, and no transfer joins two stages of one rank (those hand over locally);
//   2. every (micro-batch, stage) of a rank runs forward exactly once and then either one
//      backward or one backward_input followed by one backward_weight; in an evaluation
//      (forward-only) schedule, forward only, and no action computes or moves a gradient;
//   3. data flows: the input arrives (recv_forward) before the forward that reads it, the output
//      leaves (send_forward) after the forward that makes it, and the same for gradients; a
//      neighbour on the same rank runs its forward before ours and our backward after its;
//   4. played against each other under blocking send/recv (a send completes only with its
//      recv), the ranks finish: every send meets the recv of the same tensor, nothing deadlocks.
//
// find_problem() returns the first problem as text (empty when the schedule is valid).
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/detail/simulate.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/schedule.hpp"

namespace headroom::pipeline {

namespace detail {

// The peer a transfer must name, or −1 when the transfer cannot exist at that stage.
[[nodiscard]] inline int expected_peer(pipeline_shape const& shape, placement const& where, action const& a) {
  int const last = shape.virtual_stages() - 1;
  switch (a.kind) {
    case action_kind::send_forward:
    case action_kind::recv_backward: return a.stage < last ? where.rank_of(a.stage + 1) : -1;
    case action_kind::recv_forward:
    case action_kind::send_backward: return a.stage > 0 ? where.rank_of(a.stage - 1) : -1;
    default: return -1;
  }
}

[[nodiscard]] inline std::string check_rank_list(schedule const& s, int rank) {
  using headroom::detail::concat;
  auto const& shape = s.shape();
  auto const& where = s.placement();
  auto const list = s.actions(rank);
  int const vs = shape.virtual_stages();
  std::string const head = concat("pipeline::validate(", s.name(), ", ", shape, "): rank ", rank, ' ');
  bool const eval = s.forward_only();
  constexpr std::size_t kinds = 8;
  // One slot per (micro-batch, chunk of this rank): every action marked is on this rank (checked
  // first), so the table is m·v, not m·p·v, and validating all ranks takes time linear in m·p·v.
  auto const chunks = static_cast<std::size_t>(shape.chunks);
  auto const slot_index = [&](int microbatch, int stage) {
    return static_cast<std::size_t>(microbatch) * chunks + static_cast<std::size_t>(where.chunk_of(stage));
  };
  std::vector<std::array<long, kinds>> at(static_cast<std::size_t>(shape.microbatches) * chunks);
  for (auto& row : at) row.fill(-1);

  for (std::size_t i = 0; i < list.size(); ++i) {
    action const& a = list[i];
    auto const bad = [&](auto const&... why) { return concat(head, "action ", i, " (", a, "): ", why...); };
    if (a.microbatch < 0 || a.microbatch >= shape.microbatches)
      return bad("micro-batch ", a.microbatch, " out of range [0, ", shape.microbatches, ")");
    if (a.stage < 0 || a.stage >= vs) return bad("virtual stage ", a.stage, " out of range [0, ", vs, ")");
    if (eval && a.kind != action_kind::forward && a.kind != action_kind::send_forward && a.kind != action_kind::recv_forward)
      return bad("a gradient action in a forward-only (evaluation) schedule");
    if (where.rank_of(a.stage) != rank)
      return bad("virtual stage ", a.stage, " lives on rank ", where.rank_of(a.stage), ", not on this one");
    if (is_compute(a.kind) && a.peer != -1) return bad("a computation has peer ", a.peer, ", expected -1");
    bool const ov = a.kind == action_kind::overlapped;
    if (!ov && (a.backward_microbatch != -1 || a.backward_stage != -1))
      return bad("backward_microbatch ", a.backward_microbatch, " and backward_stage ", a.backward_stage,
                 ", expected -1 outside an overlapped action");
    if (ov) {
      if (a.backward_microbatch < 0 || a.backward_microbatch >= shape.microbatches)
        return bad("backward micro-batch ", a.backward_microbatch, " out of range [0, ", shape.microbatches, ")");
      if (a.backward_stage < 0 || a.backward_stage >= vs)
        return bad("backward virtual stage ", a.backward_stage, " out of range [0, ", vs, ")");
      if (where.rank_of(a.backward_stage) != rank)
        return bad("backward virtual stage ", a.backward_stage, " lives on rank ", where.rank_of(a.backward_stage),
                   ", not on this one");
      if (a.backward_microbatch == a.microbatch && a.backward_stage == a.stage)
        return bad("overlaps the backward of micro-batch ", a.microbatch, " stage ", a.stage,
                   " with its own forward, expected the forward and the backward of two different pairs");
    }
    if (!is_compute(a.kind)) {
      int const want = expected_peer(shape, where, a);
      if (want < 0) return bad("stage ", a.stage, " has no neighbour in that direction");
      if (want == rank && where.kind() == placement::style::interleaved)
        return bad("a transfer to its own rank (p = 1 needs v = 1)");
      if (want == rank)
        return bad("a transfer between two stages of this rank, expected a local hand-off (no send or recv) under placement ",
                   where.name());
      if (a.peer != want) return bad("peer ", a.peer, ", expected rank ", want);
    }
    // An overlapped action counts as its forward and its backward, both at index i.
    for (action const& part : ov ? std::array{forward_part(a), backward_part(a)} : std::array{a, a}) {
      auto& mark = at[slot_index(part.microbatch, part.stage)][static_cast<std::size_t>(part.kind)];
      if (mark >= 0 && mark != static_cast<long>(i))
        return bad("repeats action ", mark, "; each action runs once per micro-batch and stage");
      mark = static_cast<long>(i);
    }
  }

  for (int k = 0; k < shape.microbatches; ++k) {
    for (int c = 0; c < shape.chunks; ++c) {
      int const st = where.virtual_stage(rank, c);
      auto const slot_of = [&](int stage) -> auto const& {
        return at[slot_index(k, stage)];  // called for this rank's stages only
      };
      auto const& slot = slot_of(st);
      auto const when = [&](action_kind kind) { return slot[static_cast<std::size_t>(kind)]; };
      // A neighbour on this rank hands its output over locally: the order of the two
      // computations in this list is the dataflow (its forward first; our backward after its).
      bool const local_prev = st > 0 && where.rank_of(st - 1) == rank;
      bool const local_next = st < vs - 1 && where.rank_of(st + 1) == rank;
      auto const prev_forward = [&] { return slot_of(st - 1)[static_cast<std::size_t>(action_kind::forward)]; };
      auto const next_input_grad = [&] {
        auto const& n = slot_of(st + 1);
        long const nb = n[static_cast<std::size_t>(action_kind::backward)];
        return nb >= 0 ? nb : n[static_cast<std::size_t>(action_kind::backward_input)];
      };
      auto const bad = [&](auto const&... why) { return concat(head, "micro-batch ", k, " stage ", st, ": ", why...); };
      long const f = when(action_kind::forward);
      long const b = when(action_kind::backward);
      long const bi = when(action_kind::backward_input);
      long const bw = when(action_kind::backward_weight);
      long const input_grad = b >= 0 ? b : bi;
      if (f < 0) return bad("no forward");
      if (local_prev && prev_forward() > f)
        return bad("forward at action ", f, " before the forward of stage ", st - 1, " on this rank at action ", prev_forward(),
                   " that makes its input");
      if (eval) {
        bool const first = st == 0;
        bool const last = st == vs - 1;
        long const rf = when(action_kind::recv_forward);
        long const sf = when(action_kind::send_forward);
        if (!first && !local_prev && rf < 0) return bad("no recv_forward");
        if (!first && !local_prev && rf > f)
          return bad("recv_forward at action ", rf, " after the computation at action ", f, " that needs it");
        if (!last && !local_next && sf < 0) return bad("no send_forward");
        if (!last && !local_next && sf < f) return bad("send_forward at action ", sf, " before the computation at action ", f, " that makes it");
        continue;
      }
      if (b >= 0 && (bi >= 0 || bw >= 0)) return bad("both a backward and a split backward");
      if (b < 0 && (bi < 0 || bw < 0)) return bad("no backward (or a split backward without both halves)");
      if (input_grad < f) return bad("backward at action ", input_grad, " before its forward at action ", f);
      if (bw >= 0 && bw < bi) return bad("backward_weight at action ", bw, " before backward_input at action ", bi);
      if (local_next && next_input_grad() > input_grad)
        return bad("backward at action ", input_grad, " before the backward of stage ", st + 1, " on this rank at action ",
                   next_input_grad(), " that makes its output's gradient");
      struct need {
        action_kind kind;
        bool present;
        long before;  // the computation it must precede, or -1
        long after;   // the computation it must follow, or -1
      };
      bool const first = st == 0;
      bool const last = st == vs - 1;
      need const needs[] = {
          {action_kind::recv_forward, !first && !local_prev, f, -1},
          {action_kind::send_forward, !last && !local_next, -1, f},
          {action_kind::recv_backward, !last && !local_next, input_grad, -1},
          {action_kind::send_backward, !first && !local_prev, -1, input_grad},
      };
      for (need const& n : needs) {
        if (!n.present) continue;
        long const t = when(n.kind);
        if (t < 0) return bad("no ", name_of(n.kind));
        if (n.before >= 0 && t > n.before)
          return bad(name_of(n.kind), " at action ", t, " after the computation at action ", n.before, " that needs it");
        if (n.after >= 0 && t < n.after)
          return bad(name_of(n.kind), " at action ", t, " before the computation at action ", n.after, " that makes it");
      }
    }
  }
  return {};
}

}  // namespace detail

/// The first reason `s` cannot run, or an empty string when it is valid.
[[nodiscard]] inline std::string find_problem(schedule const& s) {
  for (int r = 0; r < s.shape().stages; ++r)
    if (auto problem = detail::check_rank_list(s, r); !problem.empty()) return problem;
  auto const sim = detail::simulate(s);
  if (!sim.completed) return "pipeline::validate(" + s.name() + "): " + sim.problem;
  return {};
}

/// Throws invalid_argument with find_problem()'s text unless `s` is valid.
inline void validate(schedule const& s) {
  auto const problem = find_problem(s);
  expects(problem.empty(), problem);
}

}  // namespace headroom::pipeline
