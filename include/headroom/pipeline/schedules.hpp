// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Schedule generators, as policy tags: `make_schedule<one_f_one_b>({.stages = 4, .microbatches = 8})`.
//
//   gpipe             all forwards, then all backwards (fill-drain; Huang et al. 2019). With v > 1
//                     chunks per rank it runs chunk by chunk, backwards from the last chunk and the
//                     last micro-batch down (PyTorch's ScheduleLoopedBFS).
//   one_f_one_b       PipeDream-Flush / Megatron's non-interleaved schedule: rank r runs
//                     min(p − r − 1, m) warm-up forwards, then alternates one forward and one
//                     backward, then drains; at most min(m, p − r) micro-batches in flight.
//   interleaved_1f1b  Megatron's interleaved schedule: v chunks per rank, micro-batches taken in
//                     groups of g (default p) per chunk, the last group holding the m mod g left
//                     over (Megatron's get_schedule_table), warm-up 2(p − r − 1) + (v − 1)·g
//                     forwards (capped at m·v). Needs p <= g <= m and m mod g = 0 or >= p; m < p
//                     runs with g = m (one group, as PyTorch's ScheduleInterleaved1F1B does).
//   zb_h1             zero-bubble ZB-H1 (Qi et al. 2023): 1F1B's warm-up and in-flight bound, the
//                     backward split into I (input gradient, on the critical path) and W (weight
//                     gradient); rank r runs each W r backwards late, so later ranks fill the
//                     drain with weight gradients while input gradients travel to rank 0: up to
//                     r + 1 W pending on rank r.
//
//   interleaved_zb    PyTorch's ScheduleInterleavedZeroBubble (ZB1P): interleaved chunks with the
//                     backward split into I and W, W deferred by r on rank r; zb_h1 when v = 1.
//   forward_only      evaluation: forwards only, in the interleaved forward order.
//
// All of them place virtual stages as placement::interleaved; the generators on the V
// (zbv, dualpipe_v) are in v_schedules.hpp.
//
// g (shape.group) shapes interleaved_1f1b and forward_only; the others refuse a g other than 0.
//
// Every generator checks its shape and throws invalid_argument naming the value and the rule,
// and returns a schedule that validate() accepts (the tests check this over a grid of shapes).
// place_transfers() turns any per-rank compute order into a schedule the same way.
#include <algorithm>
#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/detail/lower.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/shape.hpp"
#include "headroom/pipeline/validate.hpp"

namespace headroom::pipeline {

/// A schedule generator: a tag with a name and a static generate(shape).
template <class G>
concept schedule_generator = requires(pipeline_shape const& shape) {
  { G::name } -> std::convertible_to<std::string_view>;
  { G::generate(shape) } -> std::same_as<schedule>;
};

namespace detail {
inline void check_common(pipeline_shape const& shape, std::string_view name) {
  std::string const who = "pipeline::" + std::string(name);
  shape.check(who.c_str());
  expects(shape.stages >= 2 || shape.chunks == 1, who, ": chunks (v) = ", shape.chunks,
          " with stages (p) = 1, expected v = 1: a single rank holds the whole model in one chunk");
}
inline void check_one_chunk(pipeline_shape const& shape, std::string_view name) {
  expects(shape.chunks == 1, "pipeline::", name, ": chunks (v) = ", shape.chunks,
          ", expected 1 (one model chunk per rank; use interleaved_1f1b for v > 1)");
}
// A group size a generator does not use is refused rather than silently ignored.
inline void check_no_group(pipeline_shape const& shape, std::string_view name) {
  expects(shape.group == 0, "pipeline::", name, ": group (g) = ", shape.group,
          ", expected 0: only interleaved_1f1b and forward_only take micro-batches in groups");
}
}  // namespace detail

/// A schedule from per-rank compute orders (forward, backward, backward_input, backward_weight,
/// overlapped only), virtual stages placed by `where`: the transfers are placed as the generators place
/// theirs (detail/lower.hpp), so the lists cannot deadlock under blocking send/recv, and two
/// stages of one rank hand over locally. Throws invalid_argument for an action that is not a
/// computation, out of range or on the wrong rank, for orders that wait on each other, and for
/// anything validate() rejects (a missing backward, a repeated forward).
[[nodiscard]] inline schedule place_transfers(std::string name, pipeline_shape const& shape, placement const& where,
                                              std::vector<std::vector<action>> const& compute_order) {
  shape.check("pipeline::place_transfers");
  where.check(shape, "pipeline::place_transfers");
  expects(compute_order.size() == static_cast<std::size_t>(shape.stages), "pipeline::place_transfers: ",
          compute_order.size(), " compute orders for p = ", shape.stages, ", expected one per rank");
  expects(shape.stages >= 2 || shape.chunks == 1, "pipeline::place_transfers: chunks (v) = ", shape.chunks,
          " with stages (p) = 1, expected v = 1");
  auto const placed = [&](int microbatch, int stage, std::size_t r) {
    return microbatch >= 0 && microbatch < shape.microbatches && stage >= 0 && stage < shape.virtual_stages() &&
           where.rank_of(stage) == static_cast<int>(r);
  };
  for (std::size_t r = 0; r < compute_order.size(); ++r)
    for (action const& a : compute_order[r]) {
      bool const ov = a.kind == action_kind::overlapped;
      expects(is_compute(a.kind) && a.peer == -1 && placed(a.microbatch, a.stage, r) &&
                  (ov ? placed(a.backward_microbatch, a.backward_stage, r) : a.backward_microbatch == -1 && a.backward_stage == -1),
              "pipeline::place_transfers: rank ", r, " has ", a, ", expected a computation (peer -1) of a micro-batch in [0, ",
              shape.microbatches, ") on one of this rank's virtual stages");
    }
  auto s = detail::lower(std::move(name), shape, where, compute_order);
  validate(s);
  return s;
}
/// The same with the interleaved placement (virtual stage s on rank s mod p).
[[nodiscard]] inline schedule place_transfers(std::string name, pipeline_shape const& shape,
                                              std::vector<std::vector<action>> const& compute_order) {
  shape.check("pipeline::place_transfers");
  return place_transfers(std::move(name), shape, placement::interleaved(shape), compute_order);
}

struct gpipe {
  static constexpr std::string_view name = "gpipe";
  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_common(shape, name);
    detail::check_no_group(shape, name);
    int const m = shape.microbatches;
    bool const looped = shape.chunks > 1;  // ScheduleLoopedBFS: backwards from the last micro-batch
    std::vector<std::vector<action>> order(static_cast<std::size_t>(shape.stages));
    for (int r = 0; r < shape.stages; ++r) {
      auto& o = order[static_cast<std::size_t>(r)];
      for (int c = 0; c < shape.chunks; ++c)
        for (int k = 0; k < m; ++k) o.push_back(detail::compute(action_kind::forward, k, shape.virtual_stage(r, c)));
      for (int c = shape.chunks - 1; c >= 0; --c)
        for (int i = 0; i < m; ++i)
          o.push_back(detail::compute(action_kind::backward, looped ? m - 1 - i : i, shape.virtual_stage(r, c)));
    }
    return detail::lower(std::string(name), shape, order);
  }
};
static_assert(schedule_generator<gpipe>);

struct one_f_one_b {
  static constexpr std::string_view name = "1f1b";

  /// Rank r's 1F1B order: min(p - r - 1, m) warm-up forwards, then one forward and one
  /// backward at a time, then the remaining backwards; `backward(i, order)` appends the
  /// backward of micro-batch i (whole, or split as zb_h1 does).
  template <class Backward>
  static void order(pipeline_shape const& shape, int r, std::vector<action>& o, Backward&& backward) {
    int const m = shape.microbatches;
    int const warmup = std::min(shape.stages - r - 1, m);
    for (int k = 0; k < warmup; ++k) o.push_back(detail::compute(action_kind::forward, k, r));
    for (int i = 0; i < m - warmup; ++i) {
      o.push_back(detail::compute(action_kind::forward, warmup + i, r));
      backward(i, o);
    }
    for (int i = m - warmup; i < m; ++i) backward(i, o);
  }

  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_common(shape, name);
    detail::check_one_chunk(shape, name);
    detail::check_no_group(shape, name);
    std::vector<std::vector<action>> order(static_cast<std::size_t>(shape.stages));
    for (int r = 0; r < shape.stages; ++r)
      one_f_one_b::order(shape, r, order[static_cast<std::size_t>(r)],
                         [r](int i, std::vector<action>& o) { o.push_back(detail::compute(action_kind::backward, i, r)); });
    return detail::lower(std::string(name), shape, order);
  }
};
static_assert(schedule_generator<one_f_one_b>);

struct interleaved_1f1b {
  static constexpr std::string_view name = "interleaved_1f1b";

  /// Megatron's get_schedule_table and get_model_chunk_id: the chunk and micro-batch of the
  /// i-th forward (or backward) of a rank. Micro-batches are taken g at a time per chunk; when
  /// g does not divide m, the last group holds the m mod g left over.
  struct slot {
    int chunk;
    int microbatch;
  };
  [[nodiscard]] static constexpr slot nth(pipeline_shape const& shape, int i, bool forward) noexcept {
    int const g = shape.group_size();
    int const v = shape.chunks;
    int const full_groups = shape.microbatches / g;  // the tail group (m mod g) comes after them
    int chunk = 0;
    int microbatch = 0;
    if (i < full_groups * g * v) {
      int const in_group = i % (g * v);
      chunk = in_group / g;
      microbatch = (i / (g * v)) * g + in_group % g;
    } else {
      int const tail = shape.microbatches - full_groups * g;
      int const j = i - full_groups * g * v;
      chunk = j / tail;
      microbatch = full_groups * g + j % tail;
    }
    return {forward ? chunk : v - 1 - chunk, microbatch};
  }
  /// Forwards rank `rank` runs before its first backward.
  [[nodiscard]] static constexpr int warmup(pipeline_shape const& shape, int rank) noexcept {
    int const total = shape.microbatches * shape.chunks;
    return std::min(2 * (shape.stages - rank - 1) + (shape.chunks - 1) * shape.group_size(), total);
  }

  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_common(shape, name);
    int const p = shape.stages;
    int const m = shape.microbatches;
    int const g = shape.group_size();
    // m < p runs as one group of all m micro-batches (PyTorch's ScheduleInterleaved1F1B does).
    bool const one_group = m < p && g == m;
    expects(m >= p || one_group, "pipeline::interleaved_1f1b: microbatches (m) = ", m, " < stages (p) = ", p,
            " with group (g) = ", g, ", expected m >= p, or g = m: one group of all m micro-batches, as PyTorch's "
            "ScheduleInterleaved1F1B runs m < p");
    expects(g >= p || one_group, "pipeline::interleaved_1f1b: group (g) = ", g, " < stages (p) = ", p,
            ", expected a micro-batch group of at least p (Megatron's microbatch_group_size_per_vp_stage), or g = m < p");
    expects(g <= m, "pipeline::interleaved_1f1b: group (g) = ", g, " > microbatches (m) = ", m,
            ", expected p <= g <= m");
    expects(m % g == 0 || m % g >= p, "pipeline::interleaved_1f1b: microbatches (m) = ", m, " leaves a last group of m mod g = ",
            m % g, " micro-batches for g = ", g, ", expected 0 or at least p = ", p,
            " (a smaller last group waits on itself, as Megatron refuses)");
    int const total = m * shape.chunks;
    std::vector<std::vector<action>> order(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      auto& o = order[static_cast<std::size_t>(r)];
      auto const add = [&](int i, bool forward) {
        slot const s = nth(shape, i, forward);
        o.push_back(detail::compute(forward ? action_kind::forward : action_kind::backward, s.microbatch,
                                    shape.virtual_stage(r, s.chunk)));
      };
      int const w = warmup(shape, r);
      for (int i = 0; i < w; ++i) add(i, true);
      for (int i = 0; i < total - w; ++i) {
        add(w + i, true);
        add(i, false);
      }
      for (int i = total - w; i < total; ++i) add(i, false);
    }
    return detail::lower(std::string(name), shape, order);
  }
};
static_assert(schedule_generator<interleaved_1f1b>);

struct zb_h1 {
  static constexpr std::string_view name = "zb_h1";
  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_common(shape, name);
    detail::check_one_chunk(shape, name);
    detail::check_no_group(shape, name);
    std::vector<std::vector<action>> order(static_cast<std::size_t>(shape.stages));
    for (int r = 0; r < shape.stages; ++r) {
      auto& o = order[static_cast<std::size_t>(r)];
      int const delay = r;  // W of micro-batch i runs after I of micro-batch i + delay
      int weights = 0;
      one_f_one_b::order(shape, r, o, [&](int i, std::vector<action>& list) {
        list.push_back(detail::compute(action_kind::backward_input, i, r));
        if (i - delay >= 0) list.push_back(detail::compute(action_kind::backward_weight, weights++, r));
      });
      while (weights < shape.microbatches) o.push_back(detail::compute(action_kind::backward_weight, weights++, r));
    }
    return detail::lower(std::string(name), shape, order);
  }
};
static_assert(schedule_generator<zb_h1>);

/// Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble, the ZB1P schedule of Qi et
/// al. 2024): v chunks per rank, the backward split into I and W. Micro-batches go in rounds of
/// m / max(1, m / p) per chunk; rank r runs (v - 1) * round + p - 1 - r warm-up forwards (capped
/// at m·v), then one forward and one input gradient at a time, each followed, from the (r + 1)-th
/// on, by the oldest pending weight gradient; the input gradients left, then the weight gradients
/// left. With v = 1 it is zb_h1. Needs m a multiple of its number of rounds, as PyTorch does.
struct interleaved_zb {
  static constexpr std::string_view name = "interleaved_zb";
  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_common(shape, name);
    detail::check_no_group(shape, name);
    int const p = shape.stages, m = shape.microbatches, v = shape.chunks;
    int const rounds = std::max(1, m / p);
    expects(m % rounds == 0, "pipeline::interleaved_zb: microbatches (m) = ", m, " is not a multiple of its ", rounds,
            " rounds (max(1, m / p) for p = ", p, "), expected m % rounds == 0 (PyTorch's rule)");
    int const per_round = m / rounds;
    int const total = m * v;
    std::vector<std::vector<action>> order(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      auto& o = order[static_cast<std::size_t>(r)];
      int const warmup = std::min((v - 1) * per_round + p - 1 - r, total);
      auto const fwd_stage = [&](int op) { return shape.virtual_stage(r, (op / per_round) % v); };
      auto const bwd_stage = [&](int op) { return shape.virtual_stage(r, v - 1 - ((op - warmup) / per_round) % v); };
      std::vector<int> fwd_next(static_cast<std::size_t>(shape.virtual_stages()), 0);
      std::vector<int> bwd_next(fwd_next), w_next(fwd_next);
      std::vector<int> backward_stages;  // the stage of each input gradient, in order
      std::size_t weights = 0;
      auto const forward = [&](int op) {
        int const st = fwd_stage(op);
        o.push_back(detail::compute(action_kind::forward, fwd_next[static_cast<std::size_t>(st)]++, st));
      };
      auto const input = [&](int op) {
        int const st = bwd_stage(op);
        o.push_back(detail::compute(action_kind::backward_input, bwd_next[static_cast<std::size_t>(st)]++, st));
        backward_stages.push_back(st);
      };
      auto const weight = [&] {
        int const st = backward_stages[weights++];
        o.push_back(detail::compute(action_kind::backward_weight, w_next[static_cast<std::size_t>(st)]++, st));
      };
      for (int op = 0; op < warmup; ++op) forward(op);
      for (int op = warmup; op < total; ++op) {  // one forward, one input gradient
        forward(op);
        input(op);
        if (op - warmup >= r) weight();
      }
      for (int op = total; op < total + warmup; ++op) {  // cool-down: the input gradients left
        input(op);
        if (op - warmup >= r) weight();
      }
      while (weights < backward_stages.size()) weight();
    }
    return detail::lower(std::string(name), shape, order);
  }
};
static_assert(schedule_generator<interleaved_zb>);

/// Evaluation: forwards only (Megatron's forward_only, PyTorch's eval()), in the interleaved
/// forward order (g micro-batches per chunk at a time, the last group taking what is left; with
/// v = 1 simply micro-batch order). No micro-batch waits for a backward, so any m and any g >= 0
/// run; the executor frees a forward's input and stash right after it.
struct forward_only {
  static constexpr std::string_view name = "forward_only";
  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_common(shape, name);
    int const total = shape.microbatches * shape.chunks;
    std::vector<std::vector<action>> order(static_cast<std::size_t>(shape.stages));
    for (int r = 0; r < shape.stages; ++r)
      for (int i = 0; i < total; ++i) {
        auto const s = interleaved_1f1b::nth(shape, i, true);
        order[static_cast<std::size_t>(r)].push_back(
            detail::compute(action_kind::forward, s.microbatch, shape.virtual_stage(r, s.chunk)));
      }
    return detail::lower(std::string(name), shape, order, step_kind::evaluation);
  }
};
static_assert(schedule_generator<forward_only>);

/// Builds the schedule of generator G for `shape`.
template <schedule_generator G>
[[nodiscard]] schedule make_schedule(pipeline_shape const& shape) {
  return G::generate(shape);
}

}  // namespace headroom::pipeline
