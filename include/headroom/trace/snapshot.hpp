// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// snapshot: what a recorder knows at the end of a step, in the shape memory_viz reads
// (take_snapshot.hpp makes one).
//   segments  every live segment with its blocks in address order, gaps filled by inactive
//             blocks so block sizes sum to the segment size; a live block outside every
//             recorded segment gets a segment of its own (as cudaMalloc'ed memory would)
//   trace     the recorded events, with segment_alloc / segment_free added around blocks that
//             lie in no segment, so that every block lies in a segment at every event (the
//             viewer's segment views need that)
// Segments and blocks live when recording began get a synthetic segment_alloc / alloc at the
// start of the trace, carrying the category and frame they were allocated with (the viewer
// colours and labels blocks from their alloc event only); an ordinary free is written free_requested + free_completed, as
// PyTorch writes it; blocks the live table had no room for are left out, and counted.
#include <cstdint>
#include <string_view>
#include <vector>

#include "headroom/trace/event.hpp"

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
  std::vector<event> trace;                ///< times in Unix-epoch nanoseconds
  std::vector<snapshot_segment> segments;  ///< in address order
  std::uint64_t dropped = 0;     ///< events lost to the ring's wrap-around
  std::uint64_t untracked = 0;   ///< allocations the live table had no room for (left out)
  std::uint64_t overlapping = 0; ///< live blocks left out because they overlap another
  std::uint64_t synthetic = 0;   ///< allocs added at the start for blocks live before it
  std::uint64_t max_entries = 0; ///< the recorder's ring size (trace_alloc_max_entries)

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

}  // namespace headroom::trace
