// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// What memory_plan and buffer_plan share: the schedule they were made for, its shape, the policy
// names (retention, output lifetime, transfer grouping) and one `Rank` record per pipeline rank,
// looked up by rank with a range check that names the caller (`what`).
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/pipeline/shape.hpp"

namespace headroom::pipeline::detail {

template <class Rank>
class per_rank_plan {
 public:
  per_rank_plan(char const* what, std::string schedule_name, pipeline_shape shape, std::string_view retention,
                std::string_view lifetime, std::string_view grouping, std::vector<Rank> ranks)
      : what_(what),
        schedule_(std::move(schedule_name)),
        shape_(shape),
        retention_(retention),
        lifetime_(lifetime),
        grouping_(grouping),
        ranks_(std::move(ranks)) {}

  /// Throws invalid_argument naming `what` when r is not a rank of the shape.
  [[nodiscard]] Rank const& rank(int r) const {
    shape_.check_rank(r, what_);
    return ranks_[static_cast<std::size_t>(r)];
  }
  [[nodiscard]] std::vector<Rank> const& ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::string const& schedule_name() const noexcept { return schedule_; }
  [[nodiscard]] pipeline_shape const& shape() const noexcept { return shape_; }
  [[nodiscard]] std::string_view retention() const noexcept { return retention_; }
  [[nodiscard]] std::string_view lifetime() const noexcept { return lifetime_; }
  /// How runs of consecutive transfers were counted: "one_by_one" or "grouped".
  [[nodiscard]] std::string_view transfers() const noexcept { return grouping_; }

 private:
  char const* what_;
  std::string schedule_;
  pipeline_shape shape_;
  std::string_view retention_;
  std::string_view lifetime_;
  std::string_view grouping_;
  std::vector<Rank> ranks_;
};

}  // namespace headroom::pipeline::detail
