// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The user's side of the executor: one object per rank that computes its chunks.
//
//   struct my_stage {
//     void forward(pipeline::forward_args<S> const& a);        // read a.input, write a.output and a.stash
//     double loss(pipeline::loss_args<S> const& a);            // last stage: reduce a.output to a value
//     void backward(pipeline::backward_args<S> const& a);      // write a.grad_input, accumulate weight grads
//                                                              // (not needed for forward-only schedules)
//     // zero-bubble schedules also need the two halves of backward:
//     void backward_input(pipeline::backward_args<S> const& a);  // a.grad_input; save into a.weight_stash
//     void backward_weight(pipeline::weight_args<S> const& a);   // weight grads from a.weight_stash
//     // optional, for overlapped actions (DualPipeV): a forward and another micro-batch's backward
//     void overlapped(pipeline::forward_args<S> const& f, pipeline::backward_args<S> const& b);
//   };
//
// Buffers are the executor's, allocated from its resource on the compute stream with the sizes
// of stage_bytes; spans are empty where a buffer does not exist (no input on stage 0, no output
// gradient on the last stage: its backward starts from what the loss left in the stash). All
// work must be issued on `stream` (the executor's compute stream); a callback must not block the
// host on it. loss() returns whatever "reduced value" suits the caller (a double, a device
// scalar handle); the executor keeps or drops it according to the output retention.
#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

namespace headroom::pipeline {

template <class Stream>
struct forward_args {
  int microbatch;
  int stage;  // virtual stage
  int chunk;  // this rank's chunk holding the stage (stage / p under the interleaved placement)
  std::span<std::byte const> input;
  std::span<std::byte> output;
  std::span<std::byte> stash;  // kept until the backward (or its input half)
  Stream const& stream;
};

template <class Stream>
struct loss_args {
  int microbatch;
  int stage;
  std::span<std::byte const> output;
  std::span<std::byte> stash;  // the last stage's stash, e.g. to leave dL/d(output) for backward
  Stream const& stream;
};

template <class Stream>
struct backward_args {
  int microbatch;
  int stage;
  int chunk;
  std::span<std::byte const> input;        // the forward's input (empty on stage 0)
  std::span<std::byte const> grad_output;  // empty on the last stage
  std::span<std::byte> grad_input;         // empty on stage 0
  std::span<std::byte> stash;
  std::span<std::byte> weight_stash;  // backward_input only: what backward_weight will need
  Stream const& stream;
};

template <class Stream>
struct weight_args {
  int microbatch;
  int stage;
  int chunk;
  std::span<std::byte> weight_stash;
  Stream const& stream;
};

/// What an evaluation (forward-only) step needs: forward and loss.
template <class T, class Stream>
concept forward_stage = requires(T& t, forward_args<Stream> const& f, loss_args<Stream> const& l) {
  t.forward(f);
  requires !std::is_void_v<decltype(t.loss(l))>;
  requires std::movable<std::remove_cvref_t<decltype(t.loss(l))>>;
};

/// What a training step needs: forward, loss and backward.
template <class T, class Stream>
concept pipeline_stage = forward_stage<T, Stream> && requires(T& t, backward_args<Stream> const& b) { t.backward(b); };

template <class T, class Stream>
concept split_backward_stage = pipeline_stage<T, Stream> && requires(T& t, backward_args<Stream> const& b,
                                                                     weight_args<Stream> const& w) {
  t.backward_input(b);
  t.backward_weight(w);
};

/// A stage that runs an overlapped action's forward and backward in one call (DualPipeV: one
/// micro-batch's forward computes while another's backward communicates). Without it, the
/// executor calls forward, then backward.
template <class T, class Stream>
concept overlapping_stage = pipeline_stage<T, Stream> && requires(T& t, forward_args<Stream> const& f,
                                                                  backward_args<Stream> const& b) {
  t.overlapped(f, b);
};

/// The type a stage's loss() returns.
template <class T, class Stream>
  requires forward_stage<T, Stream>
using loss_t = std::remove_cvref_t<decltype(std::declval<T&>().loss(std::declval<loss_args<Stream> const&>()))>;

}  // namespace headroom::pipeline
