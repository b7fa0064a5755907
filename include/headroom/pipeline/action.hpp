// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// One step of a pipeline schedule on one rank: a computation (forward, backward, or the two
// halves of a split backward) or a point-to-point transfer of an activation or a gradient.
//
// Stages are *virtual* stages s = 0 .. p·v − 1 (p ranks, v model chunks per rank); the schedule's
// placement (placement.hpp) says which rank holds s as which chunk: by default rank s mod p as
// chunk s / p, the placement of Megatron's interleaved schedule. With v = 1 the virtual stage is
// the rank. A transfer names the virtual stage whose data it
// moves, on the side that executes it:
//
//   send_forward(k, s)   output of forward(k, s) to the rank of s + 1
//   recv_forward(k, s)   input of forward(k, s) from the rank of s − 1
//   send_backward(k, s)  gradient of the input of stage s to the rank of s − 1
//   recv_backward(k, s)  gradient of the output of stage s from the rank of s + 1
//
// so a send and the recv that matches it differ by one in `stage` (send_forward(k, s) meets
// recv_forward(k, s + 1)). `peer` is the rank at the other end (−1 for computations).
//
// An overlapped action (DualPipeV, PyTorch's OVERLAP_F_B) runs the forward of (microbatch,
// stage) and the whole backward of (backward_microbatch, backward_stage) together, so that one's
// communication hides behind the other's compute; the two fields are −1 in every other action.
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace headroom::pipeline {

enum class action_kind : std::uint8_t {
  forward,          // F: run chunk forward on micro-batch k, keep its stash for backward
  backward,         // B: gradients of inputs and weights at once
  backward_input,   // B of a split backward (zero-bubble): gradient of the input only
  backward_weight,  // W of a split backward: gradient of the weights, may run later
  send_forward,
  recv_forward,
  send_backward,
  recv_backward,
  overlapped,  // F of (microbatch, stage) together with B of (backward_microbatch, backward_stage)
};

[[nodiscard]] constexpr std::string_view name_of(action_kind k) noexcept {
  switch (k) {
    case action_kind::forward: return "forward";
    case action_kind::backward: return "backward";
    case action_kind::backward_input: return "backward_input";
    case action_kind::backward_weight: return "backward_weight";
    case action_kind::send_forward: return "send_forward";
    case action_kind::recv_forward: return "recv_forward";
    case action_kind::send_backward: return "send_backward";
    case action_kind::recv_backward: return "recv_backward";
    case action_kind::overlapped: return "overlapped";
  }
  return "?";
}

/// The one-letter code of a computation in timelines: F, B, I (input half of B), W.
[[nodiscard]] constexpr char letter_of(action_kind k) noexcept {
  switch (k) {
    case action_kind::forward: return 'F';
    case action_kind::backward: return 'B';
    case action_kind::backward_input: return 'I';
    case action_kind::backward_weight: return 'W';
    case action_kind::overlapped: return 'X';
    default: return '?';
  }
}

[[nodiscard]] constexpr bool is_compute(action_kind k) noexcept {
  return k == action_kind::forward || k == action_kind::backward || k == action_kind::backward_input ||
         k == action_kind::backward_weight || k == action_kind::overlapped;
}
[[nodiscard]] constexpr bool is_send(action_kind k) noexcept {
  return k == action_kind::send_forward || k == action_kind::send_backward;
}
[[nodiscard]] constexpr bool is_recv(action_kind k) noexcept {
  return k == action_kind::recv_forward || k == action_kind::recv_backward;
}
[[nodiscard]] constexpr bool is_transfer(action_kind k) noexcept { return is_send(k) || is_recv(k); }

struct action {
  action_kind kind = action_kind::forward;
  int microbatch = 0;  // k in [0, m)
  int stage = 0;       // virtual stage in [0, p·v)
  int peer = -1;       // the other rank of a transfer; −1 for a computation
  int backward_microbatch = -1;  // overlapped only: the backward's micro-batch and virtual stage
  int backward_stage = -1;

  friend constexpr bool operator==(action const&, action const&) noexcept = default;

  /// "F3@s1", "send_forward F3@s1 -> rank 2", "recv_backward B3@s1 <- rank 2", "F3@s1+B0@s2".
  friend std::ostream& operator<<(std::ostream& os, action const& a) {
    if (a.kind == action_kind::overlapped)
      return os << 'F' << a.microbatch << "@s" << a.stage << "+B" << a.backward_microbatch << "@s" << a.backward_stage;
    if (is_compute(a.kind)) return os << letter_of(a.kind) << a.microbatch << "@s" << a.stage;
    bool const fwd = a.kind == action_kind::send_forward || a.kind == action_kind::recv_forward;
    return os << name_of(a.kind) << ' ' << (fwd ? 'F' : 'B') << a.microbatch << "@s" << a.stage
              << (is_send(a.kind) ? " -> rank " : " <- rank ") << a.peer;
  }
};

/// The forward and the backward an overlapped action runs together.
[[nodiscard]] constexpr action overlap(int forward_microbatch, int forward_stage, int backward_microbatch,
                                       int backward_stage) noexcept {
  return {action_kind::overlapped, forward_microbatch, forward_stage, -1, backward_microbatch, backward_stage};
}
[[nodiscard]] constexpr action forward_part(action const& a) noexcept { return {action_kind::forward, a.microbatch, a.stage, -1}; }
[[nodiscard]] constexpr action backward_part(action const& a) noexcept {
  return {action_kind::backward, a.backward_microbatch, a.backward_stage, -1};
}

}  // namespace headroom::pipeline
