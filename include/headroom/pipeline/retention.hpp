// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Output retention: what the last pipeline stage keeps of each micro-batch's output (the logits
// of an LM head, [tokens x vocab] per micro-batch) once its loss has been computed.
//
//   all      keep every output until the caller drops the step's result, and return them
//            (PyTorch pipelining's default, step(return_outputs=True)): memory grows with m
//   reduced  keep only the loss callback's small result (Megatron's forward_data_store,
//            DeepSpeed's loss.detach()); the output is freed right after the loss
//   none     keep nothing, not even the loss result (PyTorch step(return_outputs=False) with no
//            losses list); the output is freed right after the loss
//
// Policies are empty tags passed to executor::step and predict_memory.
#include <concepts>
#include <string_view>

namespace headroom::pipeline {

template <class P>
concept output_retention = std::default_initializable<P> && requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::keeps_outputs } -> std::convertible_to<bool>;
  { P::keeps_losses } -> std::convertible_to<bool>;
};

namespace retention {
struct all {
  static constexpr std::string_view name = "all";
  static constexpr bool keeps_outputs = true;
  static constexpr bool keeps_losses = true;
};
struct reduced {
  static constexpr std::string_view name = "reduced";
  static constexpr bool keeps_outputs = false;
  static constexpr bool keeps_losses = true;
};
struct none {
  static constexpr std::string_view name = "none";
  static constexpr bool keeps_outputs = false;
  static constexpr bool keeps_losses = false;
};
}  // namespace retention

static_assert(output_retention<retention::all>);
static_assert(output_retention<retention::reduced>);
static_assert(output_retention<retention::none>);

}  // namespace headroom::pipeline
