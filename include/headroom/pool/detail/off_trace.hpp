// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Off-trace acquires on interval plans (unit_pool): units that are never resident together in a
// registered order share arena bytes, so acquiring a unit whose bytes a held unit occupies is an
// order the plan was not made for. byte_sharing knows, per unit, the units sharing its bytes; the
// pool then rejects the acquire (reject_off_trace: off_trace_error names both units and where the
// orders visit them) or serves it from the upstream (fallback_off_trace). Overlapping memory is
// never handed out.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/interval.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/pool_stats.hpp"

namespace headroom::pool::detail {

class byte_sharing {
 public:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  byte_sharing() = default;
  /// `bucket_count(u)`: buckets of unit u. Empty (nothing shares bytes) for fixed / max plans.
  template <class BucketCount>
  byte_sharing(plan const& p, BucketCount&& bucket_count) {
    if (p.resident == 0) return;
    sharing_ = units_sharing_bytes(p);
    wait_slots_.assign(sharing_.size(), 0);
    for (std::uint32_t u = 0; u < sharing_.size(); ++u) {
      wait_slots_[u] = bucket_count(u);
      for (auto v : sharing_[u]) wait_slots_[u] += bucket_count(v);
    }
  }

  [[nodiscard]] bool active() const noexcept { return !sharing_.empty(); }
  /// Units whose bytes overlap unit `u`'s.
  [[nodiscard]] std::span<std::uint32_t const> sharing(std::uint32_t u) const noexcept { return sharing_[u]; }
  /// Slots an acquire of `u` may wait on: its own and those of the units sharing its bytes.
  [[nodiscard]] std::size_t wait_slots(std::uint32_t u) const noexcept { return wait_slots_[u]; }
  /// The first unit sharing `u`'s bytes for which `in_arena(v)` holds (held in its slots), or none.
  template <class InArena>
  [[nodiscard]] std::uint32_t held_sharer(std::uint32_t u, InArena&& in_arena) const {
    for (auto v : sharing_[u])
      if (in_arena(v)) return v;
    return none;
  }

 private:
  std::vector<std::vector<std::uint32_t>> sharing_;
  std::vector<std::size_t> wait_slots_;
};

/// reject_off_trace: unit `u` shares arena bytes with `held`, which is held.
template <class Name>
[[noreturn]] void off_trace_error(plan const& p, std::uint32_t u, Name const& u_name, std::uint32_t held,
                                  Name const& held_name, std::uint64_t acquisition) {
  fail<logic_error>("unit_pool::acquire: ", u_name, " (", order_positions(p, u), ") shares arena bytes with ", held_name,
                    " (", order_positions(p, held), "), which is held, at acquisition ", acquisition, " of plan '",
                    p.workload_name, "'; no registered order has them within ", p.resident,
                    " consecutive units. Release it first, plan for this order, or use fallback_off_trace");
}

}  // namespace headroom::pool::detail
