// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Turns per-rank compute orders (F, B, I, W and overlapped F+B only) into full action lists with their transfers.
//
// The ranks are played against each other in ticks: every rank whose next computation has its
// inputs runs it; then each output made in that tick is handed over at once (send on the
// producer, recv on the consumer, appended to both lists at the same point of one global
// sequence). Every rank's list is thus a projection of one global order in which a transfer is
// a single event, so the lists cannot deadlock even when a send blocks until its recv is posted,
// and a sent output is freed as early as the producer can free it (Megatron's
// deallocate_output_tensor point).
#include <cstddef>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/shape.hpp"

namespace headroom::pipeline::detail {

[[nodiscard]] inline action compute(action_kind kind, int microbatch, int stage) { return {kind, microbatch, stage, -1}; }

// An output whose consumer is on the producer's own rank (two stages of a V on one rank) is
// handed over locally: it is ready for the consumer at once and gets no send/recv.
[[nodiscard]] inline schedule lower(std::string name, pipeline_shape const& shape, placement const& where,
                                    std::vector<std::vector<action>> const& compute_order,
                                    step_kind kind = step_kind::training) {
  auto const p = static_cast<std::size_t>(shape.stages);
  auto const m = static_cast<std::size_t>(shape.microbatches);
  auto const vs = static_cast<std::size_t>(shape.virtual_stages());
  auto const idx = [&](int k, int s) { return static_cast<std::size_t>(k) * vs + static_cast<std::size_t>(s); };
  std::vector<char> input_here(m * vs, 0), grad_here(m * vs, 0), forward_done(m * vs, 0), input_grad_done(m * vs, 0);
  std::vector<std::size_t> next(p, 0);
  std::vector<std::vector<action>> lists(p);

  auto const ready_one = [&](action const& a) {
    auto const i = idx(a.microbatch, a.stage);
    switch (a.kind) {
      case action_kind::forward: return a.stage == 0 || input_here[i] != 0;
      case action_kind::backward:
      case action_kind::backward_input: return forward_done[i] != 0 && (shape.is_last(a.stage) || grad_here[i] != 0);
      case action_kind::backward_weight: return input_grad_done[i] != 0;
      default: return false;
    }
  };
  auto const ready = [&](action const& a) {
    return a.kind == action_kind::overlapped ? ready_one(forward_part(a)) && ready_one(backward_part(a)) : ready_one(a);
  };

  for (;;) {
    std::vector<std::size_t> runners;
    bool all_done = true;
    for (std::size_t r = 0; r < p; ++r) {
      if (next[r] == compute_order[r].size()) continue;
      all_done = false;
      if (ready(compute_order[r][next[r]])) runners.push_back(r);
    }
    if (all_done) break;
    if (runners.empty()) {
      std::ostringstream os;
      os << "pipeline::schedule '" << name << "' (" << shape << "): the compute orders wait on each other:";
      for (std::size_t r = 0; r < p; ++r)
        if (next[r] < compute_order[r].size()) os << " rank " << r << " at " << compute_order[r][next[r]] << ';';
      throw invalid_argument(os.str());
    }
    std::vector<std::pair<std::size_t, action>> outputs;  // (producer rank, computation) to hand over
    for (std::size_t const r : runners) {
      action const a = compute_order[r][next[r]++];
      lists[r].push_back(a);
      auto const done = [&](action const& c) {
        auto const i = idx(c.microbatch, c.stage);
        if (c.kind == action_kind::forward) forward_done[i] = 1;
        if (c.kind == action_kind::backward || c.kind == action_kind::backward_input) input_grad_done[i] = 1;
        bool const sends_forward = c.kind == action_kind::forward && !shape.is_last(c.stage);
        bool const sends_backward = (c.kind == action_kind::backward || c.kind == action_kind::backward_input) && c.stage > 0;
        if (sends_forward || sends_backward) outputs.emplace_back(r, c);
      };
      if (a.kind == action_kind::overlapped) {
        done(forward_part(a));
        done(backward_part(a));
      } else {
        done(a);
      }
    }
    for (auto const& [r, a] : outputs) {
      bool const fwd = a.kind == action_kind::forward;
      int const to_stage = fwd ? a.stage + 1 : a.stage - 1;
      auto const q = static_cast<std::size_t>(where.rank_of(to_stage));
      (fwd ? input_here : grad_here)[idx(a.microbatch, to_stage)] = 1;
      if (q == r) continue;  // local hand-off
      lists[r].push_back({fwd ? action_kind::send_forward : action_kind::send_backward, a.microbatch, a.stage, static_cast<int>(q)});
      lists[q].push_back({fwd ? action_kind::recv_forward : action_kind::recv_backward, a.microbatch, to_stage, static_cast<int>(r)});
    }
  }
  return schedule(std::move(name), shape, where, std::move(lists), kind);
}

[[nodiscard]] inline schedule lower(std::string name, pipeline_shape const& shape,
                                    std::vector<std::vector<action>> const& compute_order,
                                    step_kind kind = step_kind::training) {
  return lower(std::move(name), shape, placement::interleaved(shape), compute_order, kind);
}

}  // namespace headroom::pipeline::detail
