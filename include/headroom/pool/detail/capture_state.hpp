// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// What a unit_pool's open capture scope (capture.hpp) remembers of the pool at its start: per
// target (unit or non-unit bucket), the acquisition it was held under and how many leases held
// it. A lease held then belongs to the work before the capture: releasing it inside would make
// the graph free a slot it never took. Everything acquired inside must be released inside.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/pool_stats.hpp"

namespace headroom::pool::detail {

struct capture_state {
  std::vector<std::uint64_t> epoch;     // per target: its acquisition at the scope's start
  std::vector<std::uint32_t> holders;   // per target: leases held at the scope's start

  /// A release of target `t` (now under acquisition `now_epoch`, held by `now_holders` leases)
  /// inside the scope: throws logic_error when it would drop a lease held before the scope.
  template <class Name>
  void check_release(std::uint32_t t, std::uint64_t now_epoch, std::uint32_t now_holders, Name const& name) const {
    if (now_epoch != epoch[t] || now_holders > holders[t]) return;
    fail<logic_error>("unit_pool::release: ", name, " was acquired before the capture scope opened (", holders[t],
                      " lease(s) held then) and is released inside it; a captured graph must release only what it "
                      "acquired. Release it before the scope, or acquire it inside");
  }
  /// Whether target `t`, now under acquisition `now_epoch` with `now_holders` leases, is as the
  /// scope requires at its end: acquired inside and released, or as it was at the start.
  [[nodiscard]] bool balanced(std::uint32_t t, std::uint64_t now_epoch, std::uint32_t now_holders) const noexcept {
    return now_epoch == epoch[t] ? now_holders == holders[t] : now_holders == 0;
  }
};

}  // namespace headroom::pool::detail
