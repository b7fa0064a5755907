// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Placing byte ranges around already placed neighbours (a conflict graph as sorted neighbour
// lists): the lowest fit, the highest fit under a limit, and placement in a sequence with two
// sides (one from the bottom, one from the top of a limit), exact for bipartite graphs at the
// bound. Used by the interval planner (units) and pack_lifetimes (buffers).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace headroom::pool::detail {

struct byte_range {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// Lowest offset at which `size` bytes avoid every range.
inline std::uint64_t lowest_fit(std::vector<byte_range>& taken, std::uint64_t size) {
  std::sort(taken.begin(), taken.end(), [](auto const& a, auto const& b) { return a.begin < b.begin; });
  std::uint64_t cursor = 0;
  for (auto const& r : taken) {
    if (cursor + size <= r.begin) break;
    cursor = std::max(cursor, r.end);
  }
  return cursor;
}

// Highest offset at which `size` bytes end at or below `limit` and avoid every range.
inline std::optional<std::uint64_t> highest_fit(std::vector<byte_range>& taken, std::uint64_t size, std::uint64_t limit) {
  if (size > limit) return std::nullopt;
  std::sort(taken.begin(), taken.end(), [](auto const& a, auto const& b) { return a.end > b.end; });
  std::uint64_t top = limit;
  for (auto const& r : taken) {
    if (r.end <= top - size) break;
    if (r.begin < top) top = r.begin;
    if (top < size) return std::nullopt;
  }
  return top - size;
}

struct placement {
  std::vector<std::uint64_t> offset;
  std::uint64_t arena = 0;
};

// Places units in `sequence`; a unit on side 0 takes the lowest free range, on side 1 the
// highest range ending at or below `limit`; when its side has no room below `limit` it tries
// the other side, then the lowest range above everything.
inline placement place(std::span<std::uint64_t const> bytes, std::vector<std::vector<std::uint32_t>> const& adj,
                       std::span<std::size_t const> sequence, std::span<char const> side, std::uint64_t limit) {
  placement p;
  p.offset.assign(bytes.size(), UINT64_MAX);
  std::vector<byte_range> taken;
  for (std::size_t u : sequence) {
    taken.clear();
    for (auto v : adj[u])
      if (p.offset[v] != UINT64_MAX) taken.push_back({p.offset[v], p.offset[v] + bytes[v]});
    std::uint64_t const low = lowest_fit(taken, bytes[u]);
    std::optional<std::uint64_t> const high = highest_fit(taken, bytes[u], limit);
    std::uint64_t o = low;
    if (side[u] != 0 && high) o = *high;
    else if (low + bytes[u] > limit && high) o = *high;
    p.offset[u] = o;
    p.arena = std::max(p.arena, o + bytes[u]);
  }
  return p;
}

// Two-colouring by breadth-first search (parity of the distance); exact for bipartite graphs.
inline std::vector<char> two_sides(std::vector<std::vector<std::uint32_t>> const& adj) {
  std::vector<char> side(adj.size(), 2);
  std::vector<std::size_t> queue;
  for (std::size_t s = 0; s < adj.size(); ++s) {
    if (side[s] != 2) continue;
    side[s] = 0;
    queue.assign(1, s);
    for (std::size_t q = 0; q < queue.size(); ++q)
      for (auto v : adj[queue[q]])
        if (side[v] == 2) {
          side[v] = static_cast<char>(1 - side[queue[q]]);
          queue.push_back(v);
        }
  }
  return side;
}

}  // namespace headroom::pool::detail
