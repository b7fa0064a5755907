// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Planning a recorded lease trace: one fixed arena offset per bucket such that buckets whose
// leases overlap in time (across every recorded step) never share a byte.
//
//   auto const trace = pool::parse_lease_trace(text);       // or recorded by learning_arena
//   auto const p = pool::plan_lifetimes(trace, {.alignment = 256});
//   p.offsets.at(bucket); p.arena_bytes; p.bound; p.winner; p.ratio_to_bound();
//
// Three candidates, the smallest feasible one wins (ties: max, then by_bytes, then packing):
//   packing   pack_lifetimes on the buckets' leases (exact up to 12 buckets);
//   max       Megatron-FSDP's MaxPool replayed on the trace (detail/maxpool_replay.hpp): the
//             arena Megatron holds for this run, byte for byte, each bucket at its pinned slot;
//   by_bytes  the same replay ranking bytes, one slot list for every dtype.
// A candidate is feasible when no two overlapping leases share a byte at its offsets (max and
// by_bytes are not when Megatron moved a bucket away from its pinned buffer group); packing always
// is. So the plan is never larger than a feasible `max`. With `follow_moves` (a caller that serves
// a replay's buckets where MaxPool moved them, lifetime_plan::alternatives) an infeasible replay
// is a candidate too, so the plan is never larger than `max` (ties: a feasible candidate first).
// `planner` = max or by_bytes plans that
// replay alone (feasible or not: a lease that meets a live one is then refused at run time); an
// infeasible replay's arena also covers each bucket's largest request at its pinned offset.
//
// Buckets planned: those inside a unit (declared with one) and acquired at least once; each
// takes its largest request, aligned. `bound` is the max load: the largest sum of those aligned
// bytes over the buckets alive at one instant; no fixed-offset plan of the trace is smaller.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/detail/maxpool_replay.hpp"
#include "headroom/pool/fingerprint.hpp"
#include "headroom/pool/lease_trace.hpp"
#include "headroom/pool/lifetime_pack.hpp"

namespace headroom::pool {

/// The planners of plan_lifetimes and learning_arena.
inline constexpr std::string_view lifetime_planners[] = {"interval", "max", "by_bytes"};

struct lifetime_plan_options {
  std::size_t alignment = default_alignment;
  std::string planner = "interval";  ///< interval: the best candidate; max / by_bytes: that replay
  /// The caller serves a max / by_bytes winner at its alternatives when its own slot is busy, as
  /// MaxPool does (learning_arena): interval then takes an infeasible replay too (header comment).
  bool follow_moves = false;
};

struct plan_candidate {
  std::string name;  ///< packing, max, by_bytes
  std::uint64_t arena_bytes = 0;
  bool feasible = true;
  friend bool operator==(plan_candidate const&, plan_candidate const&) = default;
};

struct lifetime_plan {
  std::string planner;
  std::string winner;
  std::size_t alignment = default_alignment;
  std::map<std::uint64_t, std::uint64_t> offsets;  ///< bucket -> bytes from the arena base
  std::map<std::uint64_t, std::uint64_t> bytes;    ///< bucket -> planned bytes (its largest request)
  /// max / by_bytes winners: the bucket's slot in the other buffer groups (offset, slot bytes), in
  /// group order, for when its own is busy (Megatron's MaxPool serves it there); empty otherwise.
  std::map<std::uint64_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> alternatives;
  std::uint64_t arena_bytes = 0;
  std::uint64_t bound = 0;
  std::vector<plan_candidate> candidates;
  std::size_t steps = 0;   ///< step boundaries of the trace planned
  std::size_t events = 0;  ///< events of the trace planned

  [[nodiscard]] double ratio_to_bound() const noexcept {
    return bound == 0 ? 1.0 : static_cast<double>(arena_bytes) / static_cast<double>(bound);
  }
  /// The bytes of candidate `name`, or nothing.
  [[nodiscard]] std::optional<std::uint64_t> candidate_bytes(std::string_view name) const {
    for (auto const& c : candidates)
      if (c.name == name) return c.arena_bytes;
    return std::nullopt;
  }
  /// FNV-1a 64 over planner, winner, alignment, offsets, bytes and arena (fingerprint.hpp's hash):
  /// ranks compare it to agree on the layout.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept {
    detail::fnv1a64 h;
    h.add(planner);
    h.add(winner);
    h.add(alignment);
    h.add(offsets.size());
    for (auto const& [b, o] : offsets) {
      h.add(b);
      h.add(o);
      h.add(bytes.at(b));
      auto const alt = alternatives.find(b);
      h.add(alt == alternatives.end() ? 0 : alt->second.size());
      if (alt != alternatives.end())
        for (auto const& [offset, n] : alt->second) {
          h.add(offset);
          h.add(n);
        }
    }
    h.add(arena_bytes);
    return h.value();
  }
  friend std::ostream& operator<<(std::ostream& os, lifetime_plan const& p) {
    os << "lifetime plan: planner=" << p.planner << " winner=" << p.winner << " arena " << p.arena_bytes << " B ("
       << format_bytes(p.arena_bytes) << "), bound " << p.bound << " B, ratio " << p.ratio_to_bound() << ", "
       << p.offsets.size() << " buckets, " << p.steps << " steps; candidates";
    for (auto const& c : p.candidates) os << " " << c.name << "=" << c.arena_bytes << (c.feasible ? "" : " (infeasible)");
    return os;
  }
  [[nodiscard]] std::string to_string() const {
    std::ostringstream os;
    os << *this;
    return os.str();
  }
  friend bool operator==(lifetime_plan const&, lifetime_plan const&) = default;
};

namespace detail {

struct trace_lifetimes {
  std::vector<std::uint64_t> ids;      // planned buckets, by id
  std::vector<lifetime_item> items;    // same order
};

inline trace_lifetimes lifetimes_of(lease_trace const& t) {
  std::map<std::uint64_t, std::size_t> index;
  trace_lifetimes out;
  for (auto const& b : t.buckets())
    if (b.unit != no_trace_unit) index[b.id] = 0;
  std::map<std::uint64_t, std::uint64_t> open;
  std::map<std::uint64_t, lifetime_item> items;
  auto const& ev = t.events();
  for (std::size_t i = 0; i < ev.size(); ++i) {
    auto const& e = ev[i];
    if (e.kind == lease_event_kind::step || !index.contains(e.bucket)) continue;
    if (e.kind == lease_event_kind::acquire) {
      open[e.bucket] = i;
      auto& it = items[e.bucket];
      it.bytes = std::max(it.bytes, e.bytes);
    } else {
      items[e.bucket].alive.push_back({open.at(e.bucket), i});
      open.erase(e.bucket);
    }
  }
  for (auto const& [b, start] : open) items[b].alive.push_back({start, ev.size()});  // held at the end
  for (auto& [b, it] : items) {
    out.ids.push_back(b);
    out.items.push_back(std::move(it));
  }
  return out;
}

}  // namespace detail

/// Plans `trace` (header comment). Throws invalid_argument for an alignment that is not a power of
/// two or a planner other than interval, max and by_bytes.
[[nodiscard]] inline lifetime_plan plan_lifetimes(lease_trace const& trace, lifetime_plan_options const& options = {}) {
  expects(is_power_of_two(options.alignment), "pool::plan_lifetimes: alignment ", options.alignment,
          " is not a power of two");
  expects(std::find(std::begin(lifetime_planners), std::end(lifetime_planners), options.planner) !=
              std::end(lifetime_planners),
          "pool::plan_lifetimes: planner '", options.planner, "'; expected interval, max or by_bytes");
  auto const lt = detail::lifetimes_of(trace);
  lifetime_plan p;
  p.planner = options.planner;
  p.alignment = options.alignment;
  p.steps = trace.steps();
  p.events = trace.events().size();
  for (std::size_t i = 0; i < lt.ids.size(); ++i) p.bytes[lt.ids[i]] = lt.items[i].bytes;

  std::vector<std::pair<plan_candidate, std::vector<std::uint64_t>>> all;
  std::map<std::string, decltype(p.alternatives)> alternatives;
  auto const feasible = [&](std::vector<std::uint64_t> const& offsets) {
    return !find_overlap(lt.items, offsets, options.alignment).has_value();
  };
  for (bool by_bytes : {false, true}) {
    std::string_view const name = by_bytes ? "by_bytes" : "max";
    if (options.planner != "interval" && options.planner != name) continue;
    auto const r = detail::replay_maxpool(trace, by_bytes, options.alignment);
    std::vector<std::uint64_t> offsets;
    // A bucket whose largest request was made away from its pinned slot (only when it moved, so
    // the candidate is infeasible) may reach past that slot: the arena covers it.
    std::uint64_t arena = r.arena;
    for (std::size_t i = 0; i < lt.ids.size(); ++i) {
      offsets.push_back(r.offset.at(lt.ids[i]));
      arena = std::max(arena, offsets.back() + align_up(lt.items[i].bytes, options.alignment));
    }
    bool const ok = feasible(offsets);
    for (auto b : lt.ids) alternatives[std::string(name)][b] = r.alternatives.at(b);
    all.push_back({{std::string(name), arena, ok}, std::move(offsets)});
  }
  if (options.planner == "interval") {
    auto const packed = pack_lifetimes(lt.items, {.alignment = options.alignment});
    p.bound = packed.bound;
    all.push_back({{"packing", packed.arena_bytes, true}, packed.offsets});
  } else {
    p.bound = detail::make_pack_problem(lt.items, options.alignment).bound;
  }

  std::size_t best = 0;  // max / by_bytes alone: the only candidate, feasible or not
  if (options.planner == "interval") {
    auto const usable = [&](plan_candidate const& c) { return c.feasible || options.follow_moves; };
    auto const better = [&](plan_candidate const& c, plan_candidate const& than) {
      if (!usable(c)) return false;
      if (!usable(than) || c.arena_bytes < than.arena_bytes) return true;
      return c.arena_bytes == than.arena_bytes && c.feasible && !than.feasible;  // ties: fixed offsets
    };
    for (std::size_t i = 0; i < all.size(); ++i)
      if (better(all[i].first, all[best].first)) best = i;
  }
  p.winner = all[best].first.name;
  p.arena_bytes = all[best].first.arena_bytes;
  for (std::size_t i = 0; i < lt.ids.size(); ++i) p.offsets[lt.ids[i]] = all[best].second[i];
  if (p.winner != "packing") p.alternatives = std::move(alternatives[p.winner]);
  for (auto& c : all) p.candidates.push_back(std::move(c.first));
  return p;
}

}  // namespace headroom::pool
