// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Loss normalisation over CP x DP in one collective.
//
// The global token mean is sum(loss) / count(valid tokens) over every token of the step, each
// counted once. Which group each statistic is reduced over depends on where the loss lives:
//
//   loss_placement::cp_local       each CP rank's (loss sum, count) covers only its shard
//                                  (gather_output::none). Sums and counts are disjoint across CP:
//                                  reduce BOTH over DP x CP. Reducing the count over DP only
//                                  under-counts by cp (AReaL #1242, verl #5983).
//   loss_placement::cp_replicated  every CP rank computed the same loss over whole sequences
//                                  (gather_output::full / per_token). Reducing over DP x CP counts
//                                  each token cp times; the returned sums are divided by cp, and the
//                                  gradient scale keeps the cp: gather's backward (reduce-scatter)
//                                  sums cp identical gradients, and 1 / (cp * count) cancels it
//                                  (AReaL #1249). Per-rank stats that are already identical on
//                                  every CP rank (ratios of replicated values) go over DP only,
//                                  or they are inflated by cp (SkyRL #1420).
//
// Either way one all_reduce(sum) of {loss sum, count, error flag} over the DP x CP communicator does it. Backward:
// scale this rank's local loss sum by grad_scale; the data-parallel gradient reduction must then
// SUM over DP x CP (if it averages, as Megatron DDP does by 1/|dp x cp|, multiply by that size).
// A group with no valid token gives mean 0 and grad_scale 0 instead of NaN (a CP rank can hold
// none, as in docs/cp.md's worked example; AReaL adds 1e-5 to the denominator for that).
#include <array>
#include <cmath>
#include <concepts>
#include <ostream>
#include <span>
#include <string_view>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cp/detail/config.hpp"

namespace headroom::cp {

namespace loss_placement {
struct cp_local {
  static constexpr std::string_view name = "cp_local";
};
struct cp_replicated {
  static constexpr std::string_view name = "cp_replicated";
};
}  // namespace loss_placement

template <class P>
concept loss_placement_policy = std::same_as<P, loss_placement::cp_local> || std::same_as<P, loss_placement::cp_replicated>;
static_assert(loss_placement_policy<loss_placement::cp_local> && loss_placement_policy<loss_placement::cp_replicated>);

struct token_mean {
  double loss_sum = 0;    // over the DP x CP group, every token once
  double tokens = 0;      // valid tokens over the group, every token once
  double mean = 0;        // loss_sum / tokens, 0 when tokens == 0
  double grad_scale = 0;  // d(mean) / d(this rank's local loss sum)

  friend std::ostream& operator<<(std::ostream& os, token_mean const& m) {
    return os << "token_mean{loss_sum " << m.loss_sum << ", tokens " << m.tokens << ", mean " << m.mean
              << ", grad_scale " << m.grad_scale << "}";
  }
};

namespace detail {
/// Shared by host and device paths: turns the group sums into the token mean.
[[nodiscard]] HEADROOM_CP_HD constexpr token_mean finish_token_mean(double group_loss_sum, double group_tokens, int cp_size,
                                                     bool replicated) noexcept {
  double const dup = replicated ? static_cast<double>(cp_size) : 1.0;
  token_mean m{group_loss_sum / dup, group_tokens / dup, 0, 0};
  if (group_tokens > 0) {
    m.mean = group_loss_sum / group_tokens;
    m.grad_scale = 1.0 / group_tokens;
  }
  return m;
}

inline void check_group(int group_size, int cp_size, char const* op) {
  expects(cp_size >= 1, op, ": cp_size = ", cp_size, ", expected >= 1");
  expects(group_size % cp_size == 0, op, ": the DP x CP communicator has ", group_size,
          " ranks, not a multiple of cp_size = ", cp_size);
}
[[nodiscard]] inline bool valid_token_count(double n) noexcept { return std::isfinite(n) && n >= 0; }
}  // namespace detail

/// `dp_cp`: the communicator over data-parallel x context-parallel ranks (Megatron's
/// get_data_parallel_group(with_context_parallel=True)). Host-memory communicators.
template <loss_placement_policy Placement = loss_placement::cp_local, communicator C>
[[nodiscard]] token_mean normalize_loss(C& dp_cp, double local_loss_sum, double local_tokens, int cp_size,
                                        typename C::stream_type const& s = {}) {
  char const* op = "cp::normalize_loss";
  detail::check_group(dp_cp.size(), cp_size, op);  // the same on every rank
  // A bad count on one rank travels in the same collective as a flag, so every rank throws.
  bool const ok = detail::valid_token_count(local_tokens);
  std::array<double, 3> const in{local_loss_sum, ok ? local_tokens : 0.0, ok ? 0.0 : 1.0};
  std::array<double, 3> out{};
  dp_cp.all_reduce(std::span<double const>(in), std::span<double>(out), reduce_op::sum, s);
  expects(ok, op, ": local token count ", local_tokens, " on rank ", dp_cp.rank(), ", expected a finite count >= 0");
  expects<collective_mismatch>(out[2] == 0, op, " on rank ", dp_cp.rank(), ": ", out[2],
                               " other rank(s) passed an invalid token count");
  return detail::finish_token_mean(out[0], out[1], cp_size, std::same_as<Placement, loss_placement::cp_replicated>);
}

}  // namespace headroom::cp
