// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Output lifetime: how long a stage keeps a forward's output once it has been used (sent to the
// next stage, or reduced to the loss on the last stage).
//
//   freed_when_sent       freed right after send_forward (Megatron's deallocate_output_tensor),
//                         and on the last stage right after the loss unless the retention keeps
//                         it: the default, and what the memory model has always counted
//   kept_until_backward   held until the backward of the same micro-batch and stage: PyTorch's
//                         PipelineStage, whose forward cache keeps every output for autograd
//                         (no deallocate_output_tensor), so each in-flight micro-batch costs one
//                         output more on every stage than the Megatron-style count
//
// Under retention::all the last stage's outputs go to the caller either way.
// Policies are empty tags passed to executor::step, executor::plan and predict_memory.
#include <concepts>
#include <string_view>

namespace headroom::pipeline {

template <class P>
concept output_lifetime = std::default_initializable<P> && requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::until_backward } -> std::convertible_to<bool>;
};

namespace outputs {
struct freed_when_sent {
  static constexpr std::string_view name = "freed_when_sent";
  static constexpr bool until_backward = false;
};
struct kept_until_backward {
  static constexpr std::string_view name = "kept_until_backward";
  static constexpr bool until_backward = true;
};
}  // namespace outputs

static_assert(output_lifetime<outputs::freed_when_sent>);
static_assert(output_lifetime<outputs::kept_until_backward>);

}  // namespace headroom::pipeline
