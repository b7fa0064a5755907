// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Policy tags of the stats module (CUTLASS style: empty structs passed as template arguments).
//
//   maximum / minimum            how a typed report's field combines across ranks
//   propagate_nan / ignore_nan   what a NaN does in a reduction of doubles
//   join_when_empty / skip_when_empty   whether a rank with an empty dynamic report still joins
#include <concepts>
#include <string_view>

#include "headroom/core/communicator.hpp"

namespace headroom::stats {

/// A field reduced with max across ranks (the default: peaks, retries, OOM counts).
struct maximum {
  static constexpr reduce_op op = reduce_op::max;
  static constexpr std::string_view name = "max";
};
/// A field reduced with min across ranks (free memory: the tightest rank matters).
struct minimum {
  static constexpr reduce_op op = reduce_op::min;
  static constexpr std::string_view name = "min";
};

template <class P>
concept reduction_policy = std::same_as<P, maximum> || std::same_as<P, minimum>;

/// Any NaN wins: max and min are NaN when one rank reports NaN (a broken stat stays visible).
struct propagate_nan {
  static constexpr bool propagates = true;
};
/// NaN loses to every number; the result is NaN only when every rank reports NaN.
struct ignore_nan {
  static constexpr bool propagates = false;
};

template <class P>
concept nan_policy = std::same_as<P, propagate_nan> || std::same_as<P, ignore_nan>;

/// An empty dynamic report still takes part in the one collective, so a rank whose report is
/// empty while others are not gets the schema error with everyone instead of leaving them
/// waiting (the hang of Megatron-Bridge PR #3645). When every rank is empty, the result is
/// empty. The default.
struct join_when_empty {
  static constexpr bool skips = false;
};
/// An empty report returns at once without a collective, as PR #3645 does. Only safe when every
/// rank's report is empty together (keys fixed by one config); otherwise the other ranks wait.
struct skip_when_empty {
  static constexpr bool skips = true;
};

template <class P>
concept empty_policy = std::same_as<P, join_when_empty> || std::same_as<P, skip_when_empty>;

}  // namespace headroom::stats
