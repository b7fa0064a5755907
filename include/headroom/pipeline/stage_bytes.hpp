// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// What one micro-batch costs on each virtual stage, in bytes: the input of the memory model
// and the buffer sizes the executor allocates. One entry per virtual stage s in [0, p·v).
//
//   activations   the stash a forward keeps for its backward (saved tensors)
//   output        the forward's output: the next stage's input, the logits on the last stage;
//                 its gradient has the same size. The input of stage s is stage s − 1's output
//                 (stage 0 reads its own data: no input buffer)
//   weight_stash  what a split backward keeps from its input half (I) to its weight half (W);
//                 only zero-bubble schedules allocate it
//   parameters    weights, gradients and optimizer state of the chunk: constant over the step,
//                 owned by the caller, added to the prediction but never allocated by the executor
//   workspace     what one computation of the stage allocates and frees within itself (a
//                 framework's temporaries: the loss's softmax gradient, kernel workspaces): never
//                 held, added to the live bytes while the computation runs; 0 for headroom's
//                 executor, which allocates none
//   kept_for_weight  the part of `activations` a split backward keeps from its input half (I) to
//                 its weight half (W) rather than releasing it at I: a framework's autograd
//                 graph, which the weight gradients read (PyTorch's stage_backward_input retains
//                 the graph below the weight nodes; its stage 0 runs the whole backward at W, so
//                 there it is all of `activations`). At most `activations`; counted by
//                 predict_memory, 0 for headroom's executor, whose I releases the whole stash
//   input_workspace, weight_workspace  the workspace of a split backward's input half (I) and
//                 weight half (W): what each allocates and frees within itself beyond what the
//                 model holds (I: beyond grad_input and weight_stash); `workspace` is every other
//                 computation's. A framework's (PyTorch: I's loss-softmax gradient, W's weight-
//                 gradient temporaries; its W on stage 0 is the whole backward); 0 for the executor
#include <cstddef>
#include <ostream>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/shape.hpp"

namespace headroom::pipeline {

struct stage_bytes {
  std::size_t activations = 0;
  std::size_t output = 0;
  std::size_t weight_stash = 0;
  std::size_t parameters = 0;
  std::size_t workspace = 0;
  std::size_t kept_for_weight = 0;
  std::size_t input_workspace = 0;
  std::size_t weight_workspace = 0;

  friend constexpr bool operator==(stage_bytes const&, stage_bytes const&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& os, stage_bytes const& b) {
    os << "{activations " << b.activations << ", output " << b.output << ", weight_stash " << b.weight_stash
       << ", parameters " << b.parameters;
    if (b.workspace != 0) os << ", workspace " << b.workspace;
    if (b.kept_for_weight != 0) os << ", kept_for_weight " << b.kept_for_weight;
    if (b.input_workspace != 0) os << ", input_workspace " << b.input_workspace;
    if (b.weight_workspace != 0) os << ", weight_workspace " << b.weight_workspace;
    return os << "}";
  }
};

/// Per-virtual-stage costs of a model split into p·v stages: the same for every micro-batch, or
/// per micro-batch (packed sequences give every micro-batch its own token count).
class model_bytes {
 public:
  /// `stages[s]` for every virtual stage s, the same for every micro-batch.
  explicit model_bytes(std::vector<stage_bytes> stages) : stages_(std::move(stages)), stage_count_(stages_.size()) {
    expects(!stages_.empty(), "pipeline::model_bytes: no stages, expected one entry per virtual stage");
    for (std::size_t i = 0; i < stages_.size(); ++i)
      expects(stages_[i].kept_for_weight <= stages_[i].activations, "pipeline::model_bytes: entry ", i,
              " (micro-batch-major when per micro-batch) keeps kept_for_weight = ", stages_[i].kept_for_weight, " bytes for the weight half, expected at most its activations (",
              stages_[i].activations, "): the part of the stash a split backward keeps");
  }
  /// The same costs on each of the shape's p·v virtual stages.
  [[nodiscard]] static model_bytes uniform(pipeline_shape const& shape, stage_bytes each) {
    shape.check("pipeline::model_bytes::uniform");
    return model_bytes(std::vector<stage_bytes>(static_cast<std::size_t>(shape.virtual_stages()), each));
  }
  /// `sizes[k][s]`: micro-batch k's costs on virtual stage s. Every micro-batch lists every
  /// stage, and a stage's parameters are the same for all micro-batches (they do not move).
  [[nodiscard]] static model_bytes per_microbatch(std::vector<std::vector<stage_bytes>> const& sizes) {
    expects(!sizes.empty(), "pipeline::model_bytes::per_microbatch: no micro-batches, expected one list per micro-batch");
    std::size_t const n = sizes.front().size();
    std::vector<stage_bytes> flat;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      expects(sizes[k].size() == n, "pipeline::model_bytes::per_microbatch: micro-batch ", k, " lists ", sizes[k].size(),
              " stages, micro-batch 0 lists ", n, "; expected the same for all");
      for (std::size_t st = 0; st < n; ++st)
        expects(sizes[k][st].parameters == sizes[0][st].parameters, "pipeline::model_bytes::per_microbatch: stage ", st,
                " has parameters ", sizes[k][st].parameters, " for micro-batch ", k, " and ", sizes[0][st].parameters,
                " for micro-batch 0; expected the same (parameters do not depend on the micro-batch)");
      flat.insert(flat.end(), sizes[k].begin(), sizes[k].end());
    }
    model_bytes out(std::move(flat));
    out.stage_count_ = n;
    out.microbatches_ = static_cast<int>(sizes.size());
    return out;
  }

  /// Virtual stages.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(stage_count_); }
  /// Micro-batches with their own sizes; 0 when the sizes are the same for all.
  [[nodiscard]] int microbatches() const noexcept { return microbatches_; }
  /// Micro-batch `microbatch`'s costs on `stage`.
  [[nodiscard]] stage_bytes const& at(int stage, int microbatch) const {
    expects(stage >= 0 && stage < size(), "pipeline::model_bytes: virtual stage ", stage, " out of range [0, ", size(), ")");
    expects(microbatches_ == 0 || (microbatch >= 0 && microbatch < microbatches_), "pipeline::model_bytes: micro-batch ",
            microbatch, " out of range [0, ", microbatches_, ")");
    std::size_t const row = microbatches_ == 0 ? 0 : static_cast<std::size_t>(microbatch);
    return stages_[row * stage_count_ + static_cast<std::size_t>(stage)];
  }
  /// Stage `stage`'s costs of micro-batch 0 (of every micro-batch when they are the same).
  [[nodiscard]] stage_bytes const& operator[](int stage) const { return at(stage, 0); }
  /// Bytes of stage s's input (the previous stage's output; 0 for stage 0).
  [[nodiscard]] std::size_t input(int stage, int microbatch = 0) const {
    return stage == 0 ? 0 : at(stage - 1, microbatch).output;
  }

  /// Throws invalid_argument unless there is one entry per virtual stage of `shape` (and one
  /// list per micro-batch when the sizes are per micro-batch).
  void check(pipeline_shape const& shape, char const* who) const {
    expects(size() == shape.virtual_stages(), who, ": model_bytes has ", size(), " stages, expected p·v = ",
            shape.virtual_stages(), " (", shape, ")");
    expects(microbatches_ == 0 || microbatches_ == shape.microbatches, who, ": model_bytes has sizes for ", microbatches_,
            " micro-batches, expected m = ", shape.microbatches, " (", shape, ")");
  }

 private:
  std::vector<stage_bytes> stages_;  // micro-batch-major when per micro-batch
  std::size_t stage_count_;
  int microbatches_ = 0;
};

}  // namespace headroom::pipeline
