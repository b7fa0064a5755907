// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Generators on the V-shape placement (placement::v_shape, v = 2): rank r holds virtual stages
// r (chunk 0) and 2p − 1 − r (chunk 1), so a micro-batch goes down the ranks and back up, the
// first and the last stage are on rank 0 and the turn (stages p − 1 and p) is a local hand-off
// on rank p − 1.
//
//   zbv         PyTorch's ScheduleZBVZeroBubble (the ZB-V schedule of Qi et al. 2024): split
//               backward, every W right after its I until the drain, where rank r defers r of
//               them. Any m >= 1 (PyTorch computes the order for max(m, 2p − 1) micro-batches and
//               drops the ones past m).
//   dualpipe_v  PyTorch's ScheduleDualPipeV (DeepSeek's DualPipe cut to one V): in its steady
//               state every action is an overlapped forward + backward of two micro-batches on
//               the two chunks (action_kind::overlapped), so one's transfers hide behind the
//               other's compute; the drain switches to split backwards on half the ranks. Needs
//               m >= 2p (PyTorch's rule).
//
// Both take shape {p, m, v = 2, g = 0} and return a validated schedule placed as v_shape.
#include <algorithm>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/schedules.hpp"
#include "headroom/pipeline/shape.hpp"

namespace headroom::pipeline {

namespace detail {
inline void check_v(pipeline_shape const& shape, std::string_view name) {
  check_common(shape, name);
  check_no_group(shape, name);
  expects(shape.chunks == 2, "pipeline::", name, ": chunks (v) = ", shape.chunks,
          ", expected 2 (the V-shape: rank r holds stages r and 2p - 1 - r)");
}
}  // namespace detail

struct zbv {
  static constexpr std::string_view name = "zbv";

  /// Rank r's compute order.
  [[nodiscard]] static std::vector<action> order(pipeline_shape const& shape, int r) {
    int const p = shape.stages, m = shape.microbatches;
    int const count = std::max(2 * p - 1, m);  // PyTorch's order is built for this many, then cut at m
    int const s0 = r, s1 = 2 * p - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<action> o;
    auto const add = [&](action_kind kind, int mb, int st) {
      if (mb < m) o.push_back(detail::compute(kind, mb, st));
    };
    auto const f = [&](int st, int& next) { add(action_kind::forward, next++, st); };
    auto const iw = [&](int st, int& next) {  // I and its W at once
      add(action_kind::backward_input, next, st);
      add(action_kind::backward_weight, next++, st);
    };
    for (int i = 0; i < 2 * (p - r) - 1; ++i) f(s0, f0);  // fill chunk 0 down the V
    for (int i = 0; i < r; ++i) {
      f(s1, f1);
      f(s0, f0);
    }
    for (int i = 0; i < p - r; ++i) {
      f(s1, f1);
      iw(s1, b1);
    }
    while (f1 < f0 || f0 < count) {  // steady state: both chunks, one F and one I+W each
      if (f0 < count) f(s0, f0);
      iw(s0, b0);
      f(s1, f1);
      iw(s1, b1);
    }
    int w0 = b0, w1 = b1;  // the drain: r deferred weight gradients per chunk
    for (int i = 0; i < r; ++i) {
      add(action_kind::backward_input, b0++, s0);
      add(action_kind::backward_input, b1++, s1);
    }
    for (int i = 0; i < p - r; ++i) {
      add(action_kind::backward_input, b0++, s0);
      add(action_kind::backward_weight, w0++, s0);
    }
    while (w1 < b1) add(action_kind::backward_weight, w1++, s1);
    while (w0 < b0) add(action_kind::backward_weight, w0++, s0);
    return o;
  }

  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_v(shape, name);
    std::vector<std::vector<action>> orders;
    for (int r = 0; r < shape.stages; ++r) orders.push_back(order(shape, r));
    return place_transfers(std::string(name), shape, placement::v_shape(shape), orders);
  }
};
static_assert(schedule_generator<zbv>);

struct dualpipe_v {
  static constexpr std::string_view name = "dualpipe_v";

  /// Rank r's compute order. A whole backward (B) counts as an I and a W of its pair for the
  /// micro-batch counters, as PyTorch counts it.
  [[nodiscard]] static std::vector<action> order(pipeline_shape const& shape, int r) {
    int const p = shape.stages, m = shape.microbatches;
    int const s0 = r, s1 = 2 * p - 1 - r;
    std::vector<action> o;
    // next micro-batch of each (chunk, F / I / W); the stage of a chunk is s0 or s1
    int next_f[2] = {0, 0}, next_i[2] = {0, 0}, next_w[2] = {0, 0};
    std::deque<std::pair<int, int>> pending_w;  // (chunk, micro-batch) of each I not yet weighed
    auto const stage_of = [&](int c) { return c == 0 ? s0 : s1; };
    auto const forward = [&](int c) { o.push_back(detail::compute(action_kind::forward, next_f[c]++, stage_of(c))); };
    auto const full_backward = [&](int c) {
      o.push_back(detail::compute(action_kind::backward, next_i[c]++, stage_of(c)));
      ++next_w[c];
    };
    auto const input = [&](int c) {
      pending_w.emplace_back(c, next_i[c]);
      o.push_back(detail::compute(action_kind::backward_input, next_i[c]++, stage_of(c)));
    };
    auto const weight_if_pending = [&] {
      if (pending_w.empty()) return;
      auto const [c, mb] = pending_w.front();
      pending_w.pop_front();
      o.push_back(detail::compute(action_kind::backward_weight, mb, stage_of(c)));
      ++next_w[c];
    };
    auto const overlapped = [&](int fc, int bc) {
      o.push_back(overlap(next_f[fc]++, stage_of(fc), next_i[bc]++, stage_of(bc)));
      ++next_w[bc];
    };
    for (int i = 0; i < 2 * (p - r - 1); ++i) forward(0);
    for (int i = 0; i < r + 1; ++i) {
      forward(0);
      forward(1);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      input(1);
      weight_if_pending();
      forward(1);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {  // steady state: overlapped F + B on both chunks
      if (i == 0 && r == p - 1) {  // the turn of the V: chunk 1's backward needs chunk 0's forward first
        forward(0);
        full_backward(1);
      } else {
        overlapped(0, 1);
      }
      overlapped(1, 0);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      full_backward(1);
      overlapped(1, 0);
    }
    bool zero_bubble = false;  // the second half of the drain splits the backward
    int const tail = r + 1;
    auto const backward = [&](int c) { zero_bubble ? input(c) : full_backward(c); };
    for (int i = 0; i < tail; ++i) {
      if (i == tail / 2 && r % 2 == 1) zero_bubble = true;
      backward(1);
      if (i == tail / 2 && r % 2 == 0) zero_bubble = true;
      backward(0);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      weight_if_pending();
      backward(0);
    }
    for (int i = 0; i < r + 1; ++i) weight_if_pending();
    return o;
  }

  [[nodiscard]] static schedule generate(pipeline_shape const& shape) {
    detail::check_v(shape, name);
    expects(shape.microbatches >= 2 * shape.stages, "pipeline::dualpipe_v: microbatches (m) = ", shape.microbatches,
            " < 2p = ", 2 * shape.stages, " virtual stages, expected m >= 2p (PyTorch's rule)");
    std::vector<std::vector<action>> orders;
    for (int r = 0; r < shape.stages; ++r) orders.push_back(order(shape, r));
    return place_transfers(std::string(name), shape, placement::v_shape(shape), orders);
  }
};
static_assert(schedule_generator<dualpipe_v>);

}  // namespace headroom::pipeline
