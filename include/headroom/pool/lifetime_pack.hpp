// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Packing buffers by lifetime: one fixed offset per buffer such that buffers alive at the same
// time never share a byte, in an arena as small as the search finds. Generic: the pool plans
// fixed-address buckets with it (plan_lifetimes), a pipeline its receive buffers.
//
//   std::vector<pool::lifetime_item> items{{.bytes = 1000, .alive = {{0, 4}}},
//                                          {.bytes = 3000, .alive = {{2, 6}, {9, 12}}}};
//   auto const packed = pool::pack_lifetimes(items, {.alignment = 256});
//   packed.offsets[1]       // bytes from the arena base, a multiple of the alignment
//   packed.arena_bytes      // >= packed.bound: the most aligned bytes alive at one instant
//
// Lifetimes are half-open intervals [begin, end) on any clock (event indices, time stamps): an
// item released at t and another acquired at t do not overlap. An item may be alive in several
// intervals (a buffer acquired in the forward and again in the backward pass keeps one offset);
// overlapping intervals of one item are merged. Sizes are rounded up to the alignment.
//
// Guarantees: no two items with overlapping lifetimes share a byte; `bound` (max load) <=
// arena_bytes; with at most `exact_items` items (default 12) the arena is the optimum unless the
// search ran out of its node budget (`optimal` says which); deterministic (the same on every rank
// and standard library). Larger inputs: the best of greedy first-fit and best-fit placements over
// several orders (size, lifetime length, left edge, area, conflicting bytes), compacted and
// locally searched (detail/lifetime_pack.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/detail/lifetime_pack.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool {

/// [begin, end) on the caller's clock.
struct lifetime {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  friend bool operator==(lifetime const&, lifetime const&) = default;
};

struct lifetime_item {
  std::uint64_t bytes = 0;       ///< 0: takes no space (offset 0)
  std::vector<lifetime> alive;   ///< at least one interval, each begin < end
};

struct pack_options {
  std::size_t alignment = default_alignment;  ///< power of two; offsets and sizes are multiples
  std::size_t exact_items = 12;               ///< exact search up to this many items (with bytes)
  std::uint64_t node_limit = 2'000'000;       ///< search nodes before the exact search gives up
};

struct lifetime_packing {
  std::vector<std::uint64_t> offsets;  ///< per item, in input order
  std::uint64_t arena_bytes = 0;       ///< max over items of offset + aligned bytes
  std::uint64_t bound = 0;             ///< max load: most aligned bytes alive at one instant
  std::string method;                  ///< "exact", or the greedy order that won ("size", "left-edge", ...)
  bool optimal = false;                ///< arena_bytes is proven minimal (at the bound, or exact search done)

  [[nodiscard]] double ratio_to_bound() const noexcept {
    return bound == 0 ? 1.0 : static_cast<double>(arena_bytes) / static_cast<double>(bound);
  }
};

namespace detail {

struct pack_event {
  std::uint64_t time;
  bool begins;  // ends sort first at equal time: [a, t) and [t, b) do not overlap
  std::uint32_t item;
  friend bool operator<(pack_event const& a, pack_event const& b) {
    return a.time != b.time ? a.time < b.time : (a.begins < b.begins || (a.begins == b.begins && a.item < b.item));
  }
};

inline pack_problem make_pack_problem(std::span<lifetime_item const> items, std::size_t alignment) {
  expects(is_power_of_two(alignment), "pool::pack_lifetimes: alignment ", alignment, " is not a power of two");
  std::size_t const n = items.size();
  expects(n < UINT32_MAX, "pool::pack_lifetimes: ", n, " items; expected fewer than 2^32");
  pack_problem p;
  p.alignment = alignment;
  p.size.resize(n);
  p.conflicts.resize(n);
  p.first_begin.assign(n, UINT64_MAX);
  p.alive_time.assign(n, 0);
  std::vector<pack_event> events;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto const& it = items[i];
    expects(!it.alive.empty(), "pool::pack_lifetimes: item ", i, " (", it.bytes,
            " bytes) has no lifetime; expected at least one [begin, end)");
    expects<capacity_error>(it.bytes <= max_workload_bytes - total, "pool::pack_lifetimes: item ", i, " (", it.bytes,
                            " bytes) takes the items beyond 2^62 bytes (", total, " before it)");
    p.size[i] = align_up(it.bytes, alignment);
    total += p.size[i];
    std::vector<lifetime> alive = it.alive;
    for (std::size_t k = 0; k < alive.size(); ++k)
      expects(alive[k].begin < alive[k].end, "pool::pack_lifetimes: item ", i, " lifetime ", k, " is [",
              alive[k].begin, ", ", alive[k].end, "); expected begin < end");
    std::sort(alive.begin(), alive.end(), [](auto a, auto b) { return a.begin < b.begin; });
    std::vector<lifetime> merged;
    for (auto const& l : alive) {
      if (!merged.empty() && l.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, l.end);
      else merged.push_back(l);
    }
    p.first_begin[i] = merged.front().begin;
    auto& lives = p.lives.emplace_back();
    for (auto const& l : merged) lives.emplace_back(l.begin, l.end);
    for (auto const& l : merged) {
      p.alive_time[i] += l.end - l.begin;
      events.push_back({l.begin, true, static_cast<std::uint32_t>(i)});
      events.push_back({l.end, false, static_cast<std::uint32_t>(i)});
    }
  }
  std::sort(events.begin(), events.end());
  // Sweep: the load, and each begin conflicts with every item alive at that instant.
  std::vector<std::uint32_t> live;
  std::vector<std::uint32_t> where(n, UINT32_MAX);
  std::uint64_t load = 0;
  for (auto const& e : events) {
    if (!e.begins) {
      load -= p.size[e.item];
      std::uint32_t const at = where[e.item];
      where[live.back()] = at;
      live[at] = live.back();
      live.pop_back();
      where[e.item] = UINT32_MAX;
      continue;
    }
    if (p.size[e.item] > 0)
      for (auto j : live)
        if (p.size[j] > 0) {
          p.conflicts[e.item].push_back(j);
          p.conflicts[j].push_back(e.item);
        }
    where[e.item] = static_cast<std::uint32_t>(live.size());
    live.push_back(e.item);
    load += p.size[e.item];
    p.bound = std::max(p.bound, load);
  }
  for (auto& c : p.conflicts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  return p;
}

}  // namespace detail

/// Packs `items` (see the header comment). Throws invalid_argument for an alignment that is not a
/// power of two, an item without a lifetime or a lifetime with begin >= end; capacity_error when
/// the aligned sizes together exceed 2^62 bytes.
[[nodiscard]] inline lifetime_packing pack_lifetimes(std::span<lifetime_item const> items,
                                                     pack_options const& options = {}) {
  auto const problem = detail::make_pack_problem(items, options.alignment);
  std::size_t sized = 0;
  for (auto s : problem.size) sized += s > 0 ? 1 : 0;
  auto r = detail::pack(problem, sized <= options.exact_items ? items.size() : 0, options.node_limit);
  lifetime_packing out;
  out.offsets = std::move(r.offset);
  for (std::size_t i = 0; i < items.size(); ++i)
    if (problem.size[i] == 0) out.offsets[i] = 0;
  out.arena_bytes = r.arena;
  out.bound = problem.bound;
  out.method = std::string(r.method);
  out.optimal = r.optimal;
  return out;
}
[[nodiscard]] inline lifetime_packing pack_lifetimes(std::vector<lifetime_item> const& items,
                                                     pack_options const& options = {}) {
  return pack_lifetimes(std::span<lifetime_item const>(items), options);
}

/// The first pair of items whose lifetimes overlap and whose byte ranges [offset, offset + aligned
/// bytes) intersect, or nothing: a checker for any placement (tests, plans from elsewhere).
[[nodiscard]] inline std::optional<std::pair<std::size_t, std::size_t>> find_overlap(
    std::span<lifetime_item const> items, std::span<std::uint64_t const> offsets, std::size_t alignment) {
  expects(offsets.size() == items.size(), "pool::find_overlap: ", offsets.size(), " offsets for ", items.size(),
          " items; expected one per item");
  auto const p = detail::make_pack_problem(items, alignment);
  for (std::size_t i = 0; i < items.size(); ++i)
    for (auto j : p.conflicts[i])
      if (j > i && offsets[i] < offsets[j] + p.size[j] && offsets[j] < offsets[i] + p.size[i])
        return std::pair<std::size_t, std::size_t>{i, j};
  return std::nullopt;
}

}  // namespace headroom::pool
