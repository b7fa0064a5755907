// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The memory model's walk (memory_model.hpp): one rank's actions under the executor's buffer
// rules, as buffers with an identity, in the order the executor allocates them. A *point* is one
// action, or under transfers::grouped one run of consecutive transfers: every allocation of a
// point happens before any of its releases. predict_memory sums this walk into peaks;
// plan_buffers (buffer_plan.hpp) gives every buffer a fixed offset from it.
//
// Per (micro-batch, chunk) the walk holds what the executor's slot holds (executor.hpp): input,
// output, activations (the stash), grad_output, grad_input, weight_stash. A local hand-off
// between two chunks of one rank moves the buffer (the output becomes the next chunk's input,
// the input gradient the previous chunk's output gradient); under kept_until_backward the
// consumer reads the producer's output, which the producer's backward frees. Buffers of 0 bytes
// are not allocated.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/stage_bytes.hpp"

namespace headroom::pipeline {

/// What a buffer holds (its first owner's view: a handed-off output keeps the role output).
enum class buffer_role : std::uint8_t { input, output, activations, grad_output, grad_input, weight_stash };

[[nodiscard]] constexpr std::string_view name_of(buffer_role r) noexcept {
  switch (r) {
    case buffer_role::input: return "input";
    case buffer_role::output: return "output";
    case buffer_role::activations: return "activations";
    case buffer_role::grad_output: return "grad_output";
    case buffer_role::grad_input: return "grad_input";
    case buffer_role::weight_stash: return "weight_stash";
  }
  return "?";
}

namespace detail {

struct walk_buffer {
  buffer_role role = buffer_role::input;
  int microbatch = 0;
  int stage = 0;  // virtual stage of the action that allocated it
  std::uint64_t bytes = 0;
  std::size_t allocated_at = 0;  // point
  std::size_t released_at = 0;   // point (live through it); points.size() when held at the end
};

struct walk_point {
  std::size_t action = 0;  // index in the rank's list of its first action
};

struct rank_walk {
  std::vector<walk_buffer> buffers;  // in allocation order
  std::vector<walk_point> points;
  [[nodiscard]] bool held_at_end(walk_buffer const& b) const noexcept { return b.released_at == points.size(); }
};

inline constexpr std::uint64_t max_walk_bytes = static_cast<std::uint64_t>(INT64_MAX / 4);

// The releases after a backward, one rule for the walk and the executor (whose slots hold buffer
// ids and buffers): the stash, then what the backward reads besides it (its input, its output's
// gradient, and under kept_until_backward its output). Under kept_until_backward a split
// backward's input half keeps those for its weight half (PyTorch's backward_state holds the
// input, the output and its gradient), except the last stage's output, which goes at the input
// half; backward_weight then calls release_read.
template <class O, class Slot, class Release>
void release_read(Slot& sl, Release&& release) {
  release(sl.grad_output);
  release(sl.input);
  if constexpr (O::until_backward) release(sl.output);
}
template <class O, class Slot, class Release>
void release_after_backward(Slot& sl, action_kind kind, bool last_stage, Release&& release) {
  release(sl.stash);
  if (O::until_backward && kind == action_kind::backward_input) {
    if (last_stage) release(sl.output);
  } else {
    release_read<O>(sl, release);
  }
}

template <class R, class O, class T>
[[nodiscard]] rank_walk walk_rank(schedule const& s, model_bytes const& bytes, int r, char const* who) {
  auto const& shape = s.shape();
  auto const& where = s.placement();
  bool const eval = s.forward_only();
  rank_walk w;
  using id = std::optional<std::size_t>;
  struct slot {
    id input, output, stash, grad_output, grad_input, weight_stash;
  };
  std::vector<slot> slots(static_cast<std::size_t>(shape.microbatches) * static_cast<std::size_t>(shape.chunks));
  auto const slot_of = [&](int mb, int stage) -> slot& {
    return slots[static_cast<std::size_t>(mb) * static_cast<std::size_t>(shape.chunks) +
                 static_cast<std::size_t>(where.chunk_of(stage))];
  };
  std::size_t point = 0;
  auto const allocate = [&](buffer_role role, action const& a, std::size_t n) -> id {
    expects<capacity_error>(n <= max_walk_bytes, who, ": a size of ", n, " bytes is too large to count, expected <= ",
                            max_walk_bytes);
    if (n == 0) return std::nullopt;
    w.buffers.push_back({role, a.microbatch, a.stage, n, point, 0});
    return w.buffers.size() - 1;
  };
  auto const release = [&](id& b) {
    if (b) w.buffers[*b].released_at = point;
    b.reset();
  };
  auto const forward_prepare = [&](action const& a) {
    slot& sl = slot_of(a.microbatch, a.stage);
    if (a.stage > 0 && where.rank_of(a.stage - 1) == r && !(O::until_backward && !eval)) {
      slot& prev = slot_of(a.microbatch, a.stage - 1);  // local hand-off: the block moves
      sl.input = prev.output;
      prev.output.reset();
    }
    auto const& b = bytes.at(a.stage, a.microbatch);
    sl.output = allocate(buffer_role::output, a, b.output);
    sl.stash = allocate(buffer_role::activations, a, b.activations);
  };
  std::vector<std::size_t> kept;  // outputs the retention keeps: held at the end
  auto const forward_finish = [&](action const& a) {
    slot& sl = slot_of(a.microbatch, a.stage);
    if (shape.is_last(a.stage)) {
      if constexpr (R::keeps_outputs) {
        if (sl.output) kept.push_back(*sl.output);
        sl.output.reset();
      } else if (!O::until_backward || eval) {
        release(sl.output);
      }
    }
    if (eval) {
      release(sl.stash);
      release(sl.input);
    }
  };
  auto const backward_prepare = [&](action const& a) {
    slot& sl = slot_of(a.microbatch, a.stage);
    if (!shape.is_last(a.stage) && where.rank_of(a.stage + 1) == r) {
      slot& next = slot_of(a.microbatch, a.stage + 1);
      sl.grad_output = next.grad_input;
      next.grad_input.reset();
    }
    sl.grad_input = allocate(buffer_role::grad_input, a, bytes.input(a.stage, a.microbatch));
    if (a.kind == action_kind::backward_input)
      sl.weight_stash = allocate(buffer_role::weight_stash, a, bytes.at(a.stage, a.microbatch).weight_stash);
  };
  auto const backward_finish = [&](action const& a) {
    release_after_backward<O>(slot_of(a.microbatch, a.stage), a.kind, shape.is_last(a.stage), release);
  };

  auto const list = s.actions(r);
  for (std::size_t i = 0; i < list.size(); ++point) {
    action const& a = list[i];
    w.points.push_back({i});
    if (is_transfer(a.kind)) {
      std::size_t n = 1;
      if constexpr (T::batched)
        while (i + n < list.size() && is_transfer(list[i + n].kind)) ++n;
      auto const run = list.subspan(i, n);
      for (action const& t : run) {
        slot& sl = slot_of(t.microbatch, t.stage);
        if (t.kind == action_kind::recv_forward)
          sl.input = allocate(buffer_role::input, t, bytes.input(t.stage, t.microbatch));
        if (t.kind == action_kind::recv_backward)
          sl.grad_output = allocate(buffer_role::grad_output, t, bytes.at(t.stage, t.microbatch).output);
      }
      for (action const& t : run) {
        slot& sl = slot_of(t.microbatch, t.stage);
        if (t.kind == action_kind::send_forward && (!O::until_backward || eval)) release(sl.output);
        if (t.kind == action_kind::send_backward) release(sl.grad_input);
      }
      i += n;
      continue;
    }
    switch (a.kind) {
      case action_kind::forward:
        forward_prepare(a);
        forward_finish(a);
        break;
      case action_kind::backward:
      case action_kind::backward_input:
        backward_prepare(a);
        backward_finish(a);
        break;
      case action_kind::backward_weight: {
        slot& sl = slot_of(a.microbatch, a.stage);
        release(sl.weight_stash);
        release_read<O>(sl, release);  // held since the input half under kept_until_backward, else already gone
        break;
      }
      case action_kind::overlapped: {
        action const f = forward_part(a), bw = backward_part(a);
        forward_prepare(f);
        backward_prepare(bw);
        forward_finish(f);
        backward_finish(bw);
        break;
      }
      default: break;  // transfers: above
    }
    ++i;
  }
  // Still held when the step returns: kept outputs (and anything a schedule leaves behind).
  for (auto const& sl : slots)
    for (id const* b : {&sl.input, &sl.output, &sl.stash, &sl.grad_output, &sl.grad_input, &sl.weight_stash})
      if (*b) w.buffers[**b].released_at = w.points.size();
  for (auto k : kept) w.buffers[k].released_at = w.points.size();
  return w;
}

}  // namespace detail
}  // namespace headroom::pipeline
