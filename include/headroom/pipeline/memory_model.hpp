// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Query-first memory model: each rank's peak, predicted from the schedule and the per-stage
// byte costs before a byte is allocated.
//
//   auto plan = pipeline::predict_memory(sched, bytes, pipeline::retention::none{});
//   plan.rank(0).peak      // bytes the executor will have live at once on rank 0 (exact)
//   plan.rank(0).total()   // that plus the stage's parameter bytes
//
// The model walks every rank's actions with the executor's buffer rules (detail/buffer_walk.hpp:
// the buffers, with an identity and a lifetime, that plan_buffers also places), so it is exact for
// the bytes the executor allocates (tests/pipeline/memory_model.cpp checks it against the executor's
// own counters over schedules x p x m x v):
//
//   recv_forward     + input                      send_forward     − output
//   forward          + output + activations; on the last stage the output goes to the loss and,
//                    unless the retention keeps outputs, − output right after
//   recv_backward    + output (its gradient)      send_backward    − input (its gradient)
//   backward         + input (gradient of the input, not on stage 0), then − gradient of the
//                    output − activations − input
//   backward_input   as backward, plus + weight_stash
//   backward_weight  − weight_stash
//
// A split backward in a framework keeps part of the stash to its weight half
// (stage_bytes::kept_for_weight, PyTorch's retained autograd graph): backward_input then releases
// activations − kept_for_weight and backward_weight the rest. Under outputs::kept_until_backward
// the input half also keeps the input, the output and its gradient for the weight half (PyTorch's
// backward_state), except the last stage's output, which goes at the input half.
//   overlapped       the allocations of its forward and its backward, then the releases of both
//
// Within one action every allocation happens before any release, so the peak counts them
// together; a computation's workspace (a framework's temporaries, stage_bytes::workspace) is
// live while it runs, on top of them, and never held after (a split backward's halves have their
// own: stage_bytes::input_workspace, weight_workspace). Outputs kept under retention::all are still held at the end of the step.
//
// Under transfers::grouped a run of consecutive transfers is one batch: all its receive
// allocations, then all its sends' releases (transfer_grouping.hpp); the run's peak is reported
// at its first action.
//
// Under outputs::kept_until_backward (PyTorch's PipelineStage) send_forward frees nothing, the
// last stage keeps its output past the loss, and each backward also frees its stage's output.
// In a forward-only schedule a forward frees its stash and input right after it (there is no
// backward to keep them for), and outputs go as under freed_when_sent.
//
// Between two stages of one rank (placement::v_shape) nothing is sent: the output becomes the
// next chunk's input and the input gradient the previous chunk's output gradient, without a
// copy, so they are counted once, allocated by their producer and freed by their consumer (under
// kept_until_backward the output stays the producer's and its backward frees it).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/detail/buffer_walk.hpp"
#include "headroom/pipeline/detail/per_rank_plan.hpp"
#include "headroom/pipeline/output_lifetime.hpp"
#include "headroom/pipeline/retention.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/stage_bytes.hpp"
#include "headroom/pipeline/transfer_grouping.hpp"
#include "headroom/pipeline/validate.hpp"

namespace headroom::pipeline {

struct rank_memory {
  int rank = 0;
  std::int64_t peak = 0;         // most bytes the executor holds at once during the step
  std::size_t peak_action = 0;   // index of the first action at which the peak is reached
  std::int64_t held_at_end = 0;  // bytes still held when the step returns (kept outputs)
  std::int64_t parameters = 0;   // sum of the rank's chunks' parameter bytes

  [[nodiscard]] std::int64_t total() const noexcept { return peak + parameters; }
  friend bool operator==(rank_memory const&, rank_memory const&) = default;
};

class memory_plan : public detail::per_rank_plan<rank_memory> {
 public:
  memory_plan(std::string schedule_name, pipeline_shape shape, std::string_view retention, std::vector<rank_memory> ranks,
              std::string_view lifetime = outputs::freed_when_sent::name,
              std::string_view grouping = transfers::one_by_one::name)
      : per_rank_plan("pipeline::memory_plan::rank", std::move(schedule_name), shape, retention, lifetime, grouping,
                      std::move(ranks)) {}

  /// The rank with the highest total (the one a dashboard must show).
  [[nodiscard]] rank_memory const& max_rank() const {
    return *std::max_element(ranks().begin(), ranks().end(),
                             [](rank_memory const& a, rank_memory const& b) { return a.total() < b.total(); });
  }

  friend std::ostream& operator<<(std::ostream& os, memory_plan const& m) {
    os << "memory plan " << m.schedule_name() << " (" << m.shape() << ", retention " << m.retention();
    if (m.lifetime() != outputs::freed_when_sent::name) os << ", outputs " << m.lifetime();
    if (m.transfers() != transfers::one_by_one::name) os << ", transfers " << m.transfers();
    os << ")\n";
    for (auto const& r : m.ranks())
      os << "  rank " << r.rank << ": peak " << format_bytes(static_cast<std::uint64_t>(r.peak)) << " at action "
         << r.peak_action << ", held at end " << format_bytes(static_cast<std::uint64_t>(r.held_at_end)) << ", parameters "
         << format_bytes(static_cast<std::uint64_t>(r.parameters)) << ", total " << format_bytes(static_cast<std::uint64_t>(r.total()))
         << '\n';
    return os;
  }
};

/// Predicts every rank's peak for one step of `s` with costs `bytes`, retention R, output
/// lifetime O and transfer grouping T. Validates the schedule first; throws invalid_argument
/// when `bytes` does not have p·v stages, and capacity_error when a size or a rank's sum of
/// sizes does not fit a 64-bit count.
template <output_retention R, output_lifetime O = outputs::freed_when_sent, transfer_grouping T = transfers::one_by_one>
[[nodiscard]] memory_plan predict_memory(schedule const& s, model_bytes const& bytes, R = {}, O = {}, T = {}) {
  validate(s);
  auto const& shape = s.shape();
  bytes.check(shape, "pipeline::predict_memory");
  auto const as_int = [](std::size_t n) {
    expects<capacity_error>(n <= detail::max_walk_bytes, "pipeline::predict_memory: a size of ", n,
                            " bytes is too large to count, expected <= ", detail::max_walk_bytes);
    return static_cast<std::int64_t>(n);
  };
  // Sums of sizes (each <= 2^61) are checked: many kept outputs could still wrap the count.
  auto const sum = [](std::int64_t a, std::int64_t b, int rank, char const* what) {
    expects<capacity_error>(b <= INT64_MAX - a, "pipeline::predict_memory: rank ", rank, ": ", what, " ", a, " + ", b,
                            " bytes overflows a 64-bit count");
    return a + b;
  };
  auto const& where = s.placement();
  std::vector<rank_memory> out;
  for (int r = 0; r < shape.stages; ++r) {
    rank_memory m{.rank = r};
    for (int c = 0; c < shape.chunks; ++c)
      m.parameters = sum(m.parameters, as_int(bytes[where.virtual_stage(r, c)].parameters), r, "parameters");
    // The walk's buffers, summed per point: a point's allocations, then its releases.
    auto const w = detail::walk_rank<R, O, T>(s, bytes, r, "pipeline::predict_memory");
    std::vector<std::int64_t> grow(w.points.size() + 1, 0), shrink(w.points.size() + 1, 0);
    for (auto const& b : w.buffers) {
      auto const n = static_cast<std::int64_t>(b.bytes);
      grow[b.allocated_at] = sum(grow[b.allocated_at], n, r, "live bytes");
      shrink[b.released_at] = sum(shrink[b.released_at], n, r, "live bytes");
    }
    auto const list = s.actions(r);
    // kept_for_weight: that part of a stash goes at the weight half instead of the input half
    // (a framework's autograd graph: no buffer of the walk, like a workspace).
    std::vector<std::size_t> point_of(list.size(), 0);
    for (std::size_t t = 0; t < w.points.size(); ++t) point_of[w.points[t].action] = t;
    for (std::size_t i = 0; i < list.size(); ++i) {
      action const& in = list[i];
      if (in.kind != action_kind::backward_input) continue;
      auto const kept = as_int(bytes.at(in.stage, in.microbatch).kept_for_weight);
      for (std::size_t j = i + 1; kept != 0 && j < list.size(); ++j)
        if (list[j].kind == action_kind::backward_weight && list[j].stage == in.stage && list[j].microbatch == in.microbatch) {
          shrink[point_of[i]] -= kept;  // <= the stash released there (model_bytes checks it)
          shrink[point_of[j]] = sum(shrink[point_of[j]], kept, r, "released bytes");
          break;
        }
    }
    std::int64_t live = 0;
    for (std::size_t t = 0; t < w.points.size(); ++t) {
      live = sum(live, grow[t], r, "live bytes");
      // A computation's own temporaries (workspace) are live only while it runs (a point of
      // transfers has none).
      action const& a = list[w.points[t].action];
      std::int64_t transient = 0;
      for (action const& part : a.kind == action_kind::overlapped ? std::array{forward_part(a), backward_part(a)}
                                                                   : std::array{a, a})
        if (is_compute(part.kind)) {
          auto const& b = bytes.at(part.stage, part.microbatch);
          transient = std::max(transient, as_int(part.kind == action_kind::backward_input    ? b.input_workspace
                                                 : part.kind == action_kind::backward_weight ? b.weight_workspace
                                                                                             : b.workspace));
        }
      if (std::int64_t const during = sum(live, transient, r, "live bytes"); during > m.peak) {
        m.peak = during;
        m.peak_action = w.points[t].action;
      }
      live -= shrink[t];
    }
    m.held_at_end = live;
    out.push_back(m);
  }
  return memory_plan(s.name(), shape, R::name, std::move(out), O::name, T::name);
}

}  // namespace headroom::pipeline
