#pragma once
// snapshot: what a recorder knows at the end of a step, in the shape memory_viz reads.
//   segments  every live segment with its blocks in address order, gaps filled by inactive
//             blocks so block sizes sum to the segment size; a live block outside every
//             recorded segment gets a segment of its own (as cudaMalloc'ed memory would)
//   trace     the recorded events, with segment_alloc / segment_free added around blocks that
//             lie in no segment, so that every block lies in a segment at every event (the
//             viewer's segment views need that)
// Blocks live when recording began appear in `segments` as active blocks, or, when freed
// during the step, as frees without an alloc: the viewer draws both as "initially allocated".
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string_view>
#include <vector>

#include "headroom/trace/event.hpp"
#include "headroom/trace/live_table.hpp"
#include "headroom/trace/ring.hpp"

namespace headroom::trace {

enum class block_state : std::uint8_t { active_allocated, active_pending_free, inactive };

[[nodiscard]] constexpr std::string_view block_state_name(block_state s) noexcept {
  switch (s) {
    case block_state::active_allocated: return "active_allocated";
    case block_state::active_pending_free: return "active_pending_free";
    case block_state::inactive: return "inactive";
  }
  return "inactive";
}

struct snapshot_block {
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  block_state state = block_state::inactive;
  category what{};
  frame where{};
};

struct snapshot_segment {
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  category what{};
  frame where{};
  std::vector<snapshot_block> blocks;  ///< contiguous from addr, sizes sum to size

  [[nodiscard]] std::uint64_t active_bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto const& b : blocks) n += b.state == block_state::inactive ? 0 : b.size;
    return n;
  }
};

struct snapshot {
  int device = 0;
  std::vector<event> trace;
  std::vector<snapshot_segment> segments;  ///< in address order
  std::uint64_t dropped = 0;     ///< events lost to the ring's wrap-around
  std::uint64_t untracked = 0;   ///< allocations the live table had no room for
  std::uint64_t overlapping = 0; ///< live blocks left out because they overlap another

  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto const& s : segments) n += s.size;
    return n;
  }
  [[nodiscard]] std::uint64_t active_bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto const& s : segments) n += s.active_bytes();
    return n;
  }
};

namespace detail {

inline snapshot_block as_block(live_entry const& e) {
  return {e.addr, e.size, e.pending_free ? block_state::active_pending_free : block_state::active_allocated, e.what,
          e.where};
}

inline std::vector<snapshot_segment> final_segments(live_table const& live, std::uint64_t& overlapping) {
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

// Replays the ring with the segments known at each event and adds the segment events of
// blocks that lie in no segment.
inline std::vector<event> trace_with_segments(event_ring const& ring, live_table const& live) {
  // Segments live when the ring starts: those whose first event in the ring is a free, and
  // those live now that the ring never mentions.
  std::map<std::uint64_t, action> first;
  ring.for_each([&](event const& e) {
    if (e.kind == action::segment_alloc || e.kind == action::segment_free) first.try_emplace(e.addr, e.kind);
  });
  struct seg {
    std::uint64_t size;
    bool own;  // added by this replay for a lone block
  };
  std::map<std::uint64_t, seg> segs;
  for (auto const& [addr, kind] : first) {
    if (kind == action::segment_free) segs[addr] = {0, false};  // size set when freed; never contains by 0
  }
  ring.for_each([&](event const& e) {
    if (e.kind == action::segment_free && segs.contains(e.addr) && segs[e.addr].size == 0) segs[e.addr].size = e.size;
  });
  live.for_each([&](live_entry const& e) {
    if (e.segment && !first.contains(e.addr)) segs[e.addr] = {e.size, false};
  });
  auto containing = [&](std::uint64_t addr) -> std::map<std::uint64_t, seg>::iterator {
    auto it = segs.upper_bound(addr);
    if (it == segs.begin()) return segs.end();
    --it;
    return addr < it->first + it->second.size ? it : segs.end();
  };

  std::vector<event> out;
  out.reserve(ring.size() + ring.size() / 2);
  ring.for_each([&](event const& e) {
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
  });
  return out;
}

}  // namespace detail

/// The snapshot of `rec` now (a recorder<single_thread|shared>). Call it while no thread records.
template <class Recorder>
[[nodiscard]] snapshot take_snapshot(Recorder const& rec) {
  snapshot s;
  s.device = rec.device();
  s.segments = detail::final_segments(rec.live(), s.overlapping);
  s.trace = detail::trace_with_segments(rec.events(), rec.live());
  s.dropped = rec.dropped();
  s.untracked = rec.live().untracked();
  return s;
}

}  // namespace headroom::trace
