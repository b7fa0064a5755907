// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The steps of take_snapshot: the final segments from the live table, and the trace from the
// recorded events (untracked blocks left out, synthetic allocs for blocks live at the start,
// ordinary frees as free_requested + free_completed, segments around lone blocks).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "headroom/trace/event.hpp"
#include "headroom/trace/live_table.hpp"
#include "headroom/trace/snapshot.hpp"

namespace headroom::trace::detail {

inline snapshot_block as_block(live_entry const& e) {
  return {e.addr, e.size, e.pending_free ? block_state::active_pending_free : block_state::active_allocated, e.what,
          e.where};
}

template <class Live>
std::vector<snapshot_segment> final_segments(Live const& live, std::uint64_t& overlapping) {
  std::vector<snapshot_segment> segments;
  std::vector<live_entry> blocks;
  live.for_each([&](live_entry const& e) {
    if (e.segment) {
      segments.push_back({e.addr, e.size, e.stream, e.what, e.where, {}});
    } else {
      blocks.push_back(e);
    }
  });
  std::ranges::sort(segments, {}, &snapshot_segment::addr);
  std::ranges::sort(blocks, {}, &live_entry::addr);
  std::vector<snapshot_segment> own;  // blocks outside every segment
  for (auto const& b : blocks) {
    auto it = std::ranges::upper_bound(segments, b.addr, {}, &snapshot_segment::addr);
    bool inside = false;
    if (it != segments.begin()) {
      auto& s = *std::prev(it);
      if (b.addr + b.size <= s.addr + s.size) {
        inside = true;
        std::uint64_t const end = s.blocks.empty() ? s.addr : s.blocks.back().addr + s.blocks.back().size;
        if (b.addr < end) {
          ++overlapping;
          continue;
        }
        if (b.addr > end) s.blocks.push_back({end, b.addr - end, block_state::inactive, {}, {}});
        s.blocks.push_back(as_block(b));
      } else if (b.addr < s.addr + s.size) {
        ++overlapping;  // straddles a segment's end
        continue;
      }
    }
    if (!inside) {
      if (!own.empty() && b.addr < own.back().addr + own.back().size) {
        ++overlapping;
        continue;
      }
      own.push_back({b.addr, b.size, b.stream, b.what, b.where, {as_block(b)}});
    }
  }
  for (auto& s : segments) {
    std::uint64_t const end = s.blocks.empty() ? s.addr : s.blocks.back().addr + s.blocks.back().size;
    if (end < s.addr + s.size) s.blocks.push_back({end, s.addr + s.size - end, block_state::inactive, {}, {}});
  }
  segments.insert(segments.end(), own.begin(), own.end());
  std::ranges::sort(segments, {}, &snapshot_segment::addr);
  return segments;
}

[[nodiscard]] constexpr bool is_block_event(action a) noexcept {
  return a == action::alloc || a == action::free_requested || a == action::free_completed;
}

/// Leaves out the blocks (and segments) the full live table did not hold: their alloc and every
/// later event of the address until it is freed. What is left is consistent with `segments`.
inline std::vector<event> without_untracked(std::vector<event> const& events) {
  std::unordered_set<std::uint64_t> blocks, segments;
  std::vector<event> out;
  out.reserve(events.size());
  for (auto const& e : events) {
    bool const seg = !is_block_event(e.kind);
    auto& gone = seg ? segments : blocks;
    if ((e.kind == action::alloc || e.kind == action::segment_alloc) && (e.flags & event::untracked) != 0) {
      gone.insert(e.addr);
      continue;
    }
    if (gone.contains(e.addr)) {
      if (e.kind == action::free_completed || e.kind == action::segment_free) gone.erase(e.addr);
      continue;
    }
    out.push_back(e);
  }
  return out;
}

/// Synthetic allocs for what was live before the first event: segment_allocs (address order),
/// then block allocs (address order). Live before means: the first event of the address is a
/// free, or it is live now and no event mentions it. Each carries its size, stream, category
/// and frame; `time` is the first event's.
template <class Live>
std::vector<event> allocs_live_at_start(std::vector<event> const& events, Live const& live, std::int64_t time) {
  std::unordered_map<std::uint64_t, bool> first_is_alloc[2];  // [0] blocks, [1] segments
  std::map<std::uint64_t, event> start[2];
  for (auto const& e : events) {
    int const seg = is_block_event(e.kind) ? 0 : 1;
    bool const alloc = e.kind == action::alloc || e.kind == action::segment_alloc;
    auto const [it, first] = first_is_alloc[seg].try_emplace(e.addr, alloc);
    if (first && !it->second) start[seg].emplace(e.addr, e);
  }
  live.for_each([&](live_entry const& b) {
    int const seg = b.segment ? 1 : 0;
    if (!first_is_alloc[seg].contains(b.addr)) {
      start[seg].emplace(b.addr, event{b.addr, b.size, b.stream, 0, b.what, b.where.filename, b.where.function,
                                       b.where.line, action::alloc, 0});
    }
  });
  std::vector<event> out;
  out.reserve(start[0].size() + start[1].size());
  for (int seg : {1, 0}) {
    for (auto [addr, e] : start[seg]) {
      e.kind = seg == 1 ? action::segment_alloc : action::alloc;
      e.flags = event::synthetic;
      e.time = time;
      out.push_back(e);
    }
  }
  return out;
}

/// Every free_completed that was not deferred gets the free_requested PyTorch writes just before
/// it; the viewer merges the pair into one `free`. A lone free_completed (the owner let go
/// earlier) shows the block as pending until then.
inline std::vector<event> with_free_requests(std::vector<event> const& events) {
  std::unordered_set<std::uint64_t> requested;
  std::vector<event> out;
  out.reserve(events.size() + events.size() / 2);
  for (auto const& e : events) {
    if (e.kind == action::free_requested) requested.insert(e.addr);
    if (e.kind == action::free_completed) {
      bool const deferred = (e.flags & event::deferred) != 0 || requested.erase(e.addr) > 0;
      if (!deferred) {
        event r = e;
        r.kind = action::free_requested;
        out.push_back(r);
      }
    }
    out.push_back(e);
  }
  return out;
}

/// Replays the events with the segments known at each one and adds segment_alloc /
/// segment_free around blocks that lie in no segment.
template <class Live>
std::vector<event> with_segments(std::vector<event> const& events, Live const& live) {
  // Segments live when the trace starts: those whose first event is a free, and those live now
  // that the trace never mentions.
  std::map<std::uint64_t, action> first;
  for (auto const& e : events) {
    if (e.kind == action::segment_alloc || e.kind == action::segment_free) first.try_emplace(e.addr, e.kind);
  }
  struct seg {
    std::uint64_t size;
    bool own;  // added by this replay for a lone block
  };
  using seg_map = std::map<std::uint64_t, seg>;
  seg_map segs;
  for (auto const& e : events) {
    if (e.kind == action::segment_free && first.at(e.addr) == action::segment_free && !segs.contains(e.addr)) {
      segs[e.addr] = {e.size, false};
    }
  }
  live.for_each([&](live_entry const& e) {
    if (e.segment && !first.contains(e.addr)) segs[e.addr] = {e.size, false};
  });
  auto containing = [&](std::uint64_t addr) -> typename seg_map::iterator {
    auto it = segs.upper_bound(addr);
    if (it == segs.begin()) return segs.end();
    --it;
    return addr < it->first + it->second.size ? it : segs.end();
  };

  std::vector<event> out;
  out.reserve(events.size() + events.size() / 2);
  for (auto const& e : events) {
    switch (e.kind) {
      case action::segment_alloc:
        segs[e.addr] = {e.size, false};
        out.push_back(e);
        break;
      case action::segment_free:
        segs.erase(e.addr);
        out.push_back(e);
        break;
      case action::alloc:
        if (containing(e.addr) == segs.end()) {
          event s = e;
          s.kind = action::segment_alloc;
          out.push_back(s);
          segs[e.addr] = {e.size, true};
        }
        out.push_back(e);
        break;
      case action::free_requested:
        out.push_back(e);
        break;
      case action::free_completed: {
        out.push_back(e);
        auto it = containing(e.addr);
        if (it == segs.end() || (it->second.own && it->first == e.addr)) {
          event s = e;
          s.kind = action::segment_free;
          if (it != segs.end()) {
            s.size = it->second.size;
            segs.erase(it);
          }
          out.push_back(s);
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace headroom::trace::detail
