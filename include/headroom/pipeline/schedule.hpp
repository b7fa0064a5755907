// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A schedule: the action list of every rank of a pipeline, for one training step.
//
// Schedules are plain values: deterministic (the same shape gives the same lists on every rank
// and every run), printable, comparable, and checked by validate() before anything runs. The
// generators in schedules.hpp build them; a hand-written list is accepted too, as long as it
// validates.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/shape.hpp"

namespace headroom::pipeline {

/// What one step does: train (forwards and backwards) or evaluate (forwards only).
enum class step_kind : std::uint8_t { training, evaluation };

class schedule {
 public:
  /// `ranks[r]` is rank r's action list; there must be one list per rank of `shape`. An
  /// evaluation schedule runs forwards only (validate() refuses any gradient action in it).
  /// Virtual stages are placed as `pipeline::placement::interleaved` (stage s on rank s mod p).
  schedule(std::string name, pipeline_shape shape, std::vector<std::vector<action>> ranks,
           step_kind kind = step_kind::training)
      : name_(std::move(name)), shape_(shape), ranks_(std::move(ranks)), kind_(kind) {
    shape_.check("pipeline::schedule");
    placement_ = pipeline::placement::interleaved(shape_);
    check_lists();
  }
  /// Virtual stages placed by `where`, which must be for the shape's p and v.
  schedule(std::string name, pipeline_shape shape, pipeline::placement where, std::vector<std::vector<action>> ranks,
           step_kind kind = step_kind::training)
      : name_(std::move(name)), shape_(shape), placement_(std::move(where)), ranks_(std::move(ranks)), kind_(kind) {
    shape_.check("pipeline::schedule");
    placement_.check(shape_, "pipeline::schedule '" + name_ + "'");
    check_lists();
  }

  [[nodiscard]] std::string const& name() const noexcept { return name_; }
  [[nodiscard]] pipeline_shape const& shape() const noexcept { return shape_; }
  /// Which rank holds each virtual stage, as which chunk.
  [[nodiscard]] pipeline::placement const& placement() const noexcept { return placement_; }

  /// Rank `stage`'s actions in execution order. Throws invalid_argument unless 0 <= stage < p.
  [[nodiscard]] std::span<action const> actions(int stage) const {
    shape_.check_rank(stage, "pipeline::schedule::actions");
    return ranks_[static_cast<std::size_t>(stage)];
  }
  [[nodiscard]] std::vector<std::vector<action>> const& ranks() const noexcept { return ranks_; }

  /// True when the backward is split into backward_input and backward_weight (zero-bubble).
  [[nodiscard]] bool splits_backward() const noexcept {
    for (auto const& list : ranks_)
      for (auto const& a : list)
        if (a.kind == action_kind::backward_input || a.kind == action_kind::backward_weight) return true;
    return false;
  }

  /// True for an evaluation schedule: forwards only, no gradient computed or moved.
  [[nodiscard]] bool forward_only() const noexcept { return kind_ == step_kind::evaluation; }
  [[nodiscard]] step_kind kind() const noexcept { return kind_; }

  friend bool operator==(schedule const&, schedule const&) = default;

  /// One line per rank: "rank 0: F0@s0 | send_forward F0@s0 -> rank 1 | ...".
  friend std::ostream& operator<<(std::ostream& os, schedule const& s) {
    os << "schedule " << s.name_ << " (" << s.shape_;
    if (s.placement_.kind() != pipeline::placement::style::interleaved) os << ", placement " << s.placement_;
    os << (s.forward_only() ? ", forward only" : "") << ")\n";
    for (std::size_t r = 0; r < s.ranks_.size(); ++r) {
      os << "  rank " << r << ":";
      char const* sep = " ";
      for (auto const& a : s.ranks_[r]) {
        os << sep << a;
        sep = " | ";
      }
      os << '\n';
    }
    return os;
  }

 private:
  void check_lists() const {
    expects(ranks_.size() == static_cast<std::size_t>(shape_.stages), "pipeline::schedule '", name_, "': ",
            ranks_.size(), " action lists for p = ", shape_.stages, " ranks, expected one list per rank");
  }

  std::string name_;
  pipeline_shape shape_;
  pipeline::placement placement_;
  std::vector<std::vector<action>> ranks_;
  step_kind kind_ = step_kind::training;
};

}  // namespace headroom::pipeline
