// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Lifetime packing, the algorithms behind pool::pack_lifetimes (pool/lifetime_pack.hpp).
//
// Items have aligned sizes and a set of half-open lifetimes on one clock; two items conflict when
// any of their lifetimes overlap. A placement gives every item one offset such that conflicting
// items never share a byte (dynamic storage allocation with fixed offsets, NP-hard in general).
//
// Greedy: place items one by one, in an order, at the lowest (first fit) or the tightest (best
// fit) offset free of their already placed conflicts; several orders are tried, then the best is
// compacted (replayed in order of its offsets, which never raises an offset) and perturbed.
// Exact: any optimal placement is reached by placing items in some order at the lowest feasible
// offset, and (compacting until nothing moves) by one in which those offsets never decrease, ties
// in item order. The search enumerates only such orders, pruned by the best arena so far and by
// max(bound, each unplaced item's lowest feasible offset + its size).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/pool/detail/placement.hpp"

namespace headroom::pool::detail {

struct pack_problem {
  std::vector<std::uint64_t> size;                  // aligned bytes
  std::vector<std::vector<std::uint32_t>> conflicts;  // sorted neighbour lists
  std::vector<std::uint64_t> first_begin;           // earliest lifetime start (left-edge order)
  std::vector<std::uint64_t> alive_time;            // total length of the lifetimes
  std::uint64_t bound = 0;                           // max load
  std::uint64_t alignment = 1;                       // of every size (and so of every offset)
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> lives;  // merged lifetimes
};

struct pack_result {
  std::vector<std::uint64_t> offset;
  std::uint64_t arena = UINT64_MAX;
  std::string_view method;
  bool optimal = false;
};

inline constexpr std::uint64_t unplaced = UINT64_MAX;

// The placed conflicts of item i as byte ranges, sorted by begin.
inline void placed_ranges(pack_problem const& p, std::vector<std::uint64_t> const& offset, std::size_t i,
                          std::vector<byte_range>& out) {
  out.clear();
  for (auto j : p.conflicts[i])
    if (offset[j] != unplaced && p.size[j] > 0) out.push_back({offset[j], offset[j] + p.size[j]});
  std::sort(out.begin(), out.end(), [](byte_range a, byte_range b) { return a.begin < b.begin; });
}

// The smallest gap between ranges (sorted by begin) below `top` that holds `size`; first fit when
// none does. Ties: the lowest gap.
inline std::uint64_t best_fit(std::vector<byte_range>& taken, std::uint64_t size, std::uint64_t top) {
  std::uint64_t cursor = 0;
  std::uint64_t best = unplaced;
  std::uint64_t best_gap = UINT64_MAX;
  for (auto const& r : taken) {
    if (r.begin > cursor) {
      std::uint64_t const gap = r.begin - cursor;
      if (gap >= size && gap < best_gap) {
        best = cursor;
        best_gap = gap;
      }
    }
    cursor = std::max(cursor, r.end);
  }
  if (cursor < top && top - cursor >= size && top - cursor < best_gap) best = cursor;
  return best != unplaced ? best : lowest_fit(taken, size);
}

inline pack_result place_in_order(pack_problem const& p, std::span<std::uint32_t const> order, bool best,
                                  std::string_view method) {
  pack_result r;
  r.offset.assign(p.size.size(), unplaced);
  r.arena = 0;
  r.method = method;
  std::vector<byte_range> taken;
  for (auto i : order) {
    placed_ranges(p, r.offset, i, taken);
    std::uint64_t const o = best ? best_fit(taken, p.size[i], r.arena) : lowest_fit(taken, p.size[i]);
    r.offset[i] = o;
    r.arena = std::max(r.arena, o + p.size[i]);
  }
  return r;
}

// Replays `r` in order of its offsets (ties: item order) at the lowest feasible offset until no
// offset moves; never raises an offset (pack_lifetimes' header explains why).
inline void compact(pack_problem const& p, pack_result& r) {
  std::vector<std::uint32_t> order(p.size.size());
  for (int round = 0; round < 64; ++round) {
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return r.offset[a] < r.offset[b]; });
    pack_result next = place_in_order(p, order, false, r.method);
    bool const moved = next.offset != r.offset;
    next.optimal = r.optimal;
    r = std::move(next);
    if (!moved) return;
  }
}

class exact_search {
 public:
  exact_search(pack_problem const& p, pack_result& best, std::uint64_t node_limit)
      : p_(p), best_(best), limit_(node_limit), offset_(p.size.size(), unplaced) {
    if (p.size.size() > 32) return;  // bitmask cliques: the search is for small inputs
    std::vector<std::uint32_t> adj(p.size.size(), 0);
    for (std::size_t i = 0; i < adj.size(); ++i)
      for (auto j : p.conflicts[i]) adj[i] |= std::uint32_t{1} << j;
    std::uint32_t const all = p.size.size() == 32 ? UINT32_MAX : (std::uint32_t{1} << p.size.size()) - 1;
    maximal_cliques(adj, 0, all, 0);
  }

  // The heaviest clique of conflicts: a lower bound at least the max load (items alive at one
  // instant are a clique), higher when lifetimes of several intervals close cycles.
  [[nodiscard]] std::uint64_t clique_bound() const {
    std::uint64_t out = p_.bound;
    for (auto const& c : cliques_) {
      std::uint64_t sum = 0;
      for (auto i : c) sum += p_.size[i];
      out = std::max(out, sum);
    }
    return out;
  }

  // True when the search finished (best_ is then optimal). Items of 0 bytes stay at offset 0.
  bool run() {
    std::size_t placed = 0;
    for (std::size_t i = 0; i < offset_.size(); ++i)
      if (p_.size[i] == 0) {
        offset_[i] = 0;
        ++placed;
      }
    floor_ = clique_bound();
    dfs(placed, 0, none, 0);
    return !stopped_;
  }

 private:
  // Bron-Kerbosch with pivoting on bitmasks.
  void maximal_cliques(std::vector<std::uint32_t> const& adj, std::uint32_t r, std::uint32_t candidates,
                       std::uint32_t excluded) {
    if (candidates == 0 && excluded == 0) {
      auto& c = cliques_.emplace_back();
      for (std::uint32_t i = 0; i < 32; ++i)
        if (r >> i & 1u) c.push_back(i);
      return;
    }
    std::uint32_t const pivot = static_cast<std::uint32_t>(std::countr_zero(candidates | excluded));
    for (std::uint32_t rest = candidates & ~adj[pivot]; rest != 0; rest &= rest - 1) {
      std::uint32_t const v = static_cast<std::uint32_t>(std::countr_zero(rest));
      std::uint32_t const bit = std::uint32_t{1} << v;
      maximal_cliques(adj, r | bit, candidates & adj[v], excluded & adj[v]);
      candidates &= ~bit;
      excluded |= bit;
    }
  }

  void dfs(std::size_t placed, std::uint64_t last_offset, std::uint32_t last_item, std::uint64_t top) {
    if (stopped_ || best_.arena <= floor_) return;
    if (++nodes_ > limit_) {
      stopped_ = true;
      return;
    }
    std::size_t const n = p_.size.size();
    if (placed == n) {
      if (top < best_.arena) {
        best_.offset = offset_;
        best_.arena = top;
        best_.method = "exact";
      }
      return;
    }
    // Lowest feasible offset of every unplaced item; prune on the lower bound they give.
    std::vector<std::pair<std::uint64_t, std::uint32_t>> next;
    std::uint64_t lower = std::max(top, floor_);
    std::vector<byte_range> taken;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (offset_[i] != unplaced) continue;
      placed_ranges(p_, offset_, i, taken);
      std::uint64_t const o = lowest_fit(taken, p_.size[i]);
      lower = std::max(lower, std::max(o, last_offset) + p_.size[i]);
      if (o > last_offset || (o == last_offset && (last_item == none || i > last_item))) next.emplace_back(o, i);
    }
    if (lower >= best_.arena) return;
    // Every unplaced item lands at or above last_offset: in each clique of conflicts, the
    // unplaced items and the parts above last_offset of the placed ones are stacked above it.
    for (auto const& seg : cliques_) {
      std::uint64_t above = last_offset;
      for (auto i : seg)
        above += offset_[i] == unplaced ? p_.size[i]
                                        : (offset_[i] + p_.size[i] > last_offset
                                               ? offset_[i] + p_.size[i] - std::max(offset_[i], last_offset)
                                               : 0);
      if (above >= best_.arena) return;
    }
    // Larger items first at equal offset: good placements are found early.
    std::sort(next.begin(), next.end(), [&](auto const& a, auto const& b) {
      if (a.first != b.first) return a.first < b.first;
      return p_.size[a.second] > p_.size[b.second];
    });
    for (auto [o, i] : next) {
      offset_[i] = o;
      dfs(placed + 1, o, i, std::max(top, o + p_.size[i]));
      offset_[i] = unplaced;
      if (stopped_) return;
    }
  }

  static constexpr std::uint32_t none = UINT32_MAX;
  pack_problem const& p_;
  pack_result& best_;
  std::uint64_t limit_;
  std::uint64_t nodes_ = 0;
  bool stopped_ = false;
  std::vector<std::uint64_t> offset_;
  std::vector<std::vector<std::uint32_t>> cliques_;
  std::uint64_t floor_ = 0;
};

// Two-sided placement (placement.hpp) of blocks: items with the same lifetimes stacked into one
// block (they are always alive together), blocks two-coloured and placed from the bottom and the
// top of a limit rising from the bound. Exact at the bound when the blocks' conflicts are
// bipartite (a double buffer: unit i meets units i - 1 and i + 1 only).
template <class Consider>
void pack_sided(pack_problem const& p, bool merge, Consider&& consider) {
  std::size_t const n = p.size.size();
  std::vector<std::size_t> block_of(n);
  std::vector<std::vector<std::uint32_t>> members;
  {
    std::map<std::vector<std::pair<std::uint64_t, std::uint64_t>>, std::size_t> seen;
    std::vector<std::uint32_t> by_size(n);
    std::iota(by_size.begin(), by_size.end(), 0u);
    std::stable_sort(by_size.begin(), by_size.end(), [&](auto a, auto b) { return p.size[a] > p.size[b]; });
    for (auto i : by_size) {
      auto const [it, fresh] = seen.try_emplace(merge ? p.lives[i] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{i, i}}, members.size());
      if (fresh) members.emplace_back();
      block_of[i] = it->second;
      members[it->second].push_back(i);
    }
  }
  std::size_t const m = members.size();
  std::vector<std::uint64_t> bytes(m, 0), begin(m, 0);
  std::vector<std::vector<std::uint32_t>> adj(m);
  for (std::size_t b = 0; b < m; ++b) {
    begin[b] = p.first_begin[members[b].front()];
    for (auto i : members[b]) {
      bytes[b] += p.size[i];
      for (auto j : p.conflicts[i])
        if (block_of[j] != b) adj[b].push_back(static_cast<std::uint32_t>(block_of[j]));
    }
    std::sort(adj[b].begin(), adj[b].end());
    adj[b].erase(std::unique(adj[b].begin(), adj[b].end()), adj[b].end());
  }
  std::vector<std::size_t> by_begin(m), by_bytes(m);
  std::iota(by_begin.begin(), by_begin.end(), std::size_t{0});
  by_bytes = by_begin;
  std::stable_sort(by_begin.begin(), by_begin.end(), [&](auto a, auto b) { return begin[a] < begin[b]; });
  std::stable_sort(by_bytes.begin(), by_bytes.end(), [&](auto a, auto b) { return bytes[a] > bytes[b]; });
  std::vector<char> const sides = two_sides(adj);
  std::vector<char> const bottom(m, 0);
  auto expand = [&](placement const& pl) {
    pack_result r;
    r.offset.assign(n, 0);
    r.arena = pl.arena;
    r.method = merge ? "two-sided blocks" : "two-sided";
    for (std::size_t b = 0; b < m; ++b) {
      std::uint64_t o = pl.offset[b];
      for (auto i : members[b]) {
        r.offset[i] = o;
        o += p.size[i];
      }
    }
    return r;
  };
  for (std::uint64_t k = 0; k <= 8; ++k) {
    std::uint64_t const step = p.bound / 16 * k;
    std::uint64_t const limit = p.bound + (step + p.alignment - 1) / p.alignment * p.alignment;
    for (auto const* seq : {&by_begin, &by_bytes})
      for (auto const* side : {&sides, &bottom})
        if (consider(expand(place(bytes, adj, *seq, *side, limit)))) return;
  }
}

// Greedy over several orders, compaction, then (above the bound) a bounded number of random
// perturbations of the best order; exact search when there are at most `exact_items` items.
inline pack_result pack(pack_problem const& p, std::size_t exact_items, std::uint64_t node_limit) {
  std::size_t const n = p.size.size();
  pack_result best;
  if (n == 0) {
    best.arena = 0;
    best.method = "empty";
    best.optimal = true;
    return best;
  }
  std::vector<std::uint64_t> conflict_bytes(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (auto j : p.conflicts[i]) conflict_bytes[i] += p.size[j];
  std::vector<std::uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  auto sorted = [&](auto key) {
    std::vector<std::uint32_t> o = ids;
    std::stable_sort(o.begin(), o.end(), [&](auto a, auto b) { return key(a) > key(b); });
    return o;
  };
  struct named_order {
    std::string_view name;
    std::vector<std::uint32_t> order;
  };
  named_order const orders[] = {
      {"size", sorted([&](auto i) { return std::pair{p.size[i], p.alive_time[i]}; })},
      {"lifetime", sorted([&](auto i) { return std::pair{p.alive_time[i], p.size[i]}; })},
      {"left-edge", sorted([&](auto i) { return std::pair{UINT64_MAX - p.first_begin[i], p.size[i]}; })},
      {"area", sorted([&](auto i) {
         return static_cast<double>(p.size[i]) * static_cast<double>(p.alive_time[i]);
       })},
      {"conflicts", sorted([&](auto i) { return std::pair{conflict_bytes[i] + p.size[i], p.size[i]}; })},
  };
  std::vector<std::uint32_t> best_order;
  auto consider = [&](pack_result&& r, std::vector<std::uint32_t> const& order) {
    if (r.arena < best.arena) {
      best = std::move(r);
      best_order = order;
    }
  };
  for (auto const& o : orders) {
    consider(place_in_order(p, o.order, false, o.name), o.order);
    if (best.arena > p.bound) consider(place_in_order(p, o.order, true, o.name), o.order);
  }
  auto const take = [&](pack_result&& r) {
    if (r.arena < best.arena) {
      best = std::move(r);
      best_order.clear();
    }
    return best.arena <= p.bound;
  };
  if (best.arena > p.bound) pack_sided(p, true, take);
  if (best.arena > p.bound) pack_sided(p, false, take);
  if (best_order.empty()) {  // the best came from a placement: its offsets give an order
    best_order = ids;
    std::stable_sort(best_order.begin(), best_order.end(), [&](auto a, auto b) { return best.offset[a] < best.offset[b]; });
  }
  if (best.arena > p.bound) compact(p, best);
  // Local search: swap two items of the best order (a fixed generator: the same on every rank).
  std::mt19937_64 gen(0x9E3779B97F4A7C15ull);
  std::uint64_t const budget = n > 1 ? std::min<std::uint64_t>(4096, 2'000'000 / (n * n)) : 0;
  std::vector<std::uint32_t> trial = best_order;
  for (std::uint64_t t = 0; t < budget && best.arena > p.bound; ++t) {
    trial = best_order;
    std::swap(trial[gen() % n], trial[gen() % n]);
    consider(place_in_order(p, trial, false, best.method), trial);
  }
  if (best.arena <= p.bound) {
    best.optimal = true;
    return best;
  }
  if (n <= exact_items) best.optimal = exact_search(p, best, node_limit).run();
  return best;
}

}  // namespace headroom::pool::detail
