// SPDX-License-Identifier: Apache-2.0
#pragma once
// The optimum of a small lifetime packing by exhaustive search, independent of pack_lifetimes'
// argument: every assignment of aligned offsets below the best arena so far, item by item,
// conflicts checked directly. For tests of pack_lifetimes and plan_lifetimes (<= ~8 items).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/pool/lifetime_pack.hpp"

namespace pool_test {

inline bool lifetimes_overlap(headroom::pool::lifetime_item const& a, headroom::pool::lifetime_item const& b) {
  for (auto const& x : a.alive)
    for (auto const& y : b.alive)
      if (x.begin < y.end && y.begin < x.end) return true;
  return false;
}

struct brute_force {
  std::vector<headroom::pool::lifetime_item> const& items;
  std::size_t A;
  std::vector<std::uint64_t> size;
  std::vector<std::uint64_t> off;
  std::uint64_t best = UINT64_MAX;

  brute_force(std::vector<headroom::pool::lifetime_item> const& it, std::size_t alignment)
      : items(it), A(alignment), off(it.size()) {
    for (auto const& i : it) size.push_back(headroom::align_up(i.bytes, A));
  }
  std::uint64_t solve() {
    std::uint64_t total = 0;
    for (auto s : size) total += s;
    best = total;  // stacking everything is always valid
    go(0, 0);
    return best;
  }
  void go(std::size_t i, std::uint64_t top) {
    if (top >= best) return;
    if (i == items.size()) {
      best = top;
      return;
    }
    for (std::uint64_t o = 0; o + size[i] < best; o += A) {
      bool ok = true;
      for (std::size_t j = 0; j < i && ok; ++j)
        if (lifetimes_overlap(items[i], items[j]) && o < off[j] + size[j] && off[j] < o + size[i]) ok = false;
      if (!ok) continue;
      off[i] = o;
      go(i + 1, std::max(top, o + size[i]));
    }
  }
};

}  // namespace pool_test
