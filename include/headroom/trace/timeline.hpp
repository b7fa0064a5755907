// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// active_timeline: the bytes held by live blocks after each alloc / free of a snapshot's trace,
// per category, as the viewer's "Active Memory Timeline" stacks them (x = the index of the
// alloc / free event). Blocks live before the trace began ("initially allocated") are counted
// from the first point on. With `max_categories`, the categories past the first
// max_categories - 1 share one last entry, "other" (a table of points x categories stays small
// whatever the trace names).
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "headroom/trace/snapshot.hpp"

namespace headroom::trace {

struct active_timeline {
  /// In the viewer's order (first appearance among all events, "unknown" included), so that
  /// category i has the viewer's colour i.
  std::vector<std::string_view> categories;
  std::vector<std::vector<std::uint64_t>> bytes;  ///< bytes[point][category]
  std::uint64_t peak = 0;                         ///< largest total over the points
  std::size_t merged = 0;  ///< categories counted in the last entry, "other" (0: none merged)

  [[nodiscard]] std::uint64_t total(std::size_t point) const noexcept {
    std::uint64_t n = 0;
    for (auto b : bytes[point]) n += b;
    return n;
  }
};

[[nodiscard]] inline active_timeline make_active_timeline(snapshot const& s, std::size_t max_categories = SIZE_MAX) {
  active_timeline t;
  max_categories = std::max<std::size_t>(max_categories, 1);
  std::unordered_map<std::string_view, std::size_t> index;
  auto index_of = [&](category c) {
    std::string_view const name = c.view();
    if (auto it = index.find(name); it != index.end()) return it->second;
    std::size_t i = t.categories.size();
    if (i + 1 < max_categories) {
      t.categories.push_back(name);
    } else {  // past the limit: the last entry, "other"
      if (t.merged == 0) t.categories.push_back("other");
      i = max_categories - 1;
      ++t.merged;
    }
    index.emplace(name, i);
    return i;
  };
  struct held {
    std::uint64_t size;
    std::size_t cat;
  };
  std::map<std::uint64_t, held> live;     // allocated in the trace, not freed yet
  std::set<std::uint64_t> allocated;      // addresses with an alloc in the trace
  std::vector<std::uint64_t> now;
  for (auto const& e : s.trace) (void)index_of(e.what);
  auto add = [&](std::size_t cat, std::uint64_t n, bool plus) {
    if (now.size() <= cat) now.resize(cat + 1, 0);
    now[cat] = plus ? now[cat] + n : (now[cat] >= n ? now[cat] - n : 0);
  };
  // Initially allocated: frees without an earlier alloc, and active blocks never allocated.
  for (auto const& e : s.trace) {
    if (e.kind == action::alloc) allocated.insert(e.addr);
    if (e.kind == action::free_completed && !allocated.contains(e.addr)) add(index_of(e.what), e.size, true);
  }
  for (auto const& seg : s.segments) {
    for (auto const& b : seg.blocks) {
      if (b.state == block_state::active_allocated && !allocated.contains(b.addr)) add(index_of(b.what), b.size, true);
    }
  }
  allocated.clear();
  auto push = [&] {
    now.resize(t.categories.size(), 0);
    t.bytes.push_back(now);
    t.peak = std::max(t.peak, t.total(t.bytes.size() - 1));
  };
  push();
  for (auto const& e : s.trace) {
    if (e.kind == action::alloc) {
      auto const cat = index_of(e.what);
      live[e.addr] = {e.size, cat};
      add(cat, e.size, true);
      push();
    } else if (e.kind == action::free_completed) {
      if (auto it = live.find(e.addr); it != live.end()) {
        add(it->second.cat, it->second.size, false);
        live.erase(it);
      } else {
        add(index_of(e.what), e.size, false);
      }
      push();
    }
  }
  for (auto& row : t.bytes) row.resize(t.categories.size(), 0);  // categories seen later count 0 before
  return t;
}

}  // namespace headroom::trace
