#pragma once
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

  friend constexpr bool operator==(stage_bytes const&, stage_bytes const&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& os, stage_bytes const& b) {
    return os << "{activations " << b.activations << ", output " << b.output << ", weight_stash " << b.weight_stash
              << ", parameters " << b.parameters << "}";
  }
};

/// Per-virtual-stage costs of a model split into p·v stages.
class model_bytes {
 public:
  /// `stages[s]` for every virtual stage s.
  explicit model_bytes(std::vector<stage_bytes> stages) : stages_(std::move(stages)) {
    expects(!stages_.empty(), "pipeline::model_bytes: no stages, expected one entry per virtual stage");
  }
  /// The same costs on each of the shape's p·v virtual stages.
  [[nodiscard]] static model_bytes uniform(pipeline_shape const& shape, stage_bytes each) {
    shape.check("pipeline::model_bytes::uniform");
    return model_bytes(std::vector<stage_bytes>(static_cast<std::size_t>(shape.virtual_stages()), each));
  }

  [[nodiscard]] int size() const noexcept { return static_cast<int>(stages_.size()); }
  [[nodiscard]] stage_bytes const& operator[](int stage) const {
    expects(stage >= 0 && stage < size(), "pipeline::model_bytes: virtual stage ", stage, " out of range [0, ", size(), ")");
    return stages_[static_cast<std::size_t>(stage)];
  }
  /// Bytes of stage s's input (the previous stage's output; 0 for stage 0).
  [[nodiscard]] std::size_t input(int stage) const { return stage == 0 ? 0 : (*this)[stage - 1].output; }

  /// Throws invalid_argument unless there is one entry per virtual stage of `shape`.
  void check(pipeline_shape const& shape, char const* who) const {
    expects(size() == shape.virtual_stages(), who, ": model_bytes has ", size(), " stages, expected p·v = ",
            shape.virtual_stages(), " (", shape, ")");
  }

 private:
  std::vector<stage_bytes> stages_;
};

}  // namespace headroom::pipeline
