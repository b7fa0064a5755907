// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The interval planner: slots placed by execution order, at the memory lower bound.
//
// MaxPool sizes slots by rank (the i-th largest bucket of every unit), whatever the order the
// units run in. But with N resident units (prefetch depth + 1) only N consecutive entries of an
// execution order are alive at once, so a unit needs to avoid only the units it can meet in
// such a window. The interval planner gives every unit one fixed byte range in the arena (its
// buckets back to back, any dtype: bytes are shared as by_bytes does) such that units that can
// be resident together never overlap, for every registered order.
//
//   std::vector<pool::execution_order> orders{pool::training_order(w), pool::evaluation_order(w)};
//   auto p = pool::make_interval_plan(w, orders, {.resident = 2});
//   pool::lower_bound(w, orders, 2) <= p.arena_bytes      // equal on every model of models.hpp
//   pool::validate(p, some_order);                          // throws if the order breaks the plan
//
// Lower bound: no fixed-address plan can use less than the largest sum of the bytes of the
// distinct units in one window (they are alive together). Bytes are counted as the plan lays
// them out: padded, each bucket aligned. With N = 2 and orders whose residency graph is
// bipartite (training, evaluation and their union are paths), placing one side from the bottom
// and the other from the top of an arena of exactly the bound is valid, so the plan meets it.
// For N >= 3 several greedy placements are tried and the smallest kept, among them N lanes as
// large as their largest unit (never above MaxPool with N buffers when the orders allow lanes,
// as training and evaluation do). N >= 3 cannot always meet the bound: with alternating unit
// sizes a < b the optimum is 3b against a bound of 2b + a (docs/pool.md).
//
// The plan has buffers = 1 (one slot per bucket) and resident = N; unit_pool checks at acquire
// that no unit sharing bytes with the acquired one is held (see OffTrace in policies.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/detail/placement.hpp"
#include "headroom/pool/execution_order.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool {

/// Planner tag of interval plans (plan.planner == interval::name).
struct interval {
  static constexpr std::string_view name = "interval";
};

struct interval_options {
  std::size_t resident = 2;                   ///< N >= 2 units alive at once (prefetch depth + 1)
  std::size_t alignment = default_alignment;  ///< arena offset alignment of every bucket
};

namespace detail {

// Bytes each unit takes in the arena: its padded buckets, each rounded up to the alignment.
template <class Padding>
std::vector<std::uint64_t> unit_footprints(workload const& w, std::size_t alignment, Padding const& pad) {
  std::vector<std::uint64_t> out;
  out.reserve(w.units.size());
  std::uint64_t total = 0;  // all units: bounds every offset and arena the planner computes
  for (auto const& u : w.units) {
    std::uint64_t sum = 0;
    for (auto const& b : u.buckets) {
      std::uint64_t const a = align_up(pad.padded_bytes(b), alignment);
      headroom::pool::detail::add_planned_bytes(total, a, w, "pool::make_interval_plan");
      sum += a;
    }
    out.push_back(sum);
  }
  return out;
}

inline std::uint64_t window_bound(std::span<std::uint64_t const> bytes, std::span<execution_order const> orders,
                                  std::size_t resident) {
  std::uint64_t best = 0;
  std::vector<std::size_t> last_seen(bytes.size(), SIZE_MAX);
  std::size_t stamp = 0;
  for (auto const& o : orders)
    for_each_window(o, resident, [&](std::size_t first, std::size_t last) {
      ++stamp;
      std::uint64_t sum = 0;
      for (std::size_t i = first; i < last; ++i)
        if (last_seen[o.units[i]] != stamp) {
          last_seen[o.units[i]] = stamp;
          sum += bytes[o.units[i]];
        }
      best = std::max(best, sum);
    });
  return best;
}

/// Sorted, duplicate-free neighbour lists: units that can be resident together.
inline std::vector<std::vector<std::uint32_t>> residency_graph(std::size_t units, std::span<execution_order const> orders,
                                                               std::size_t resident) {
  std::vector<std::vector<std::uint32_t>> adj(units);
  for (auto const& o : orders)
    for_each_resident_pair(o, resident, [&](std::size_t a, std::size_t b) {
      adj[a].push_back(static_cast<std::uint32_t>(b));
      adj[b].push_back(static_cast<std::uint32_t>(a));
    });
  for (auto& l : adj) {
    std::sort(l.begin(), l.end());
    l.erase(std::unique(l.begin(), l.end()), l.end());
  }
  return adj;
}

// Lanes: unit at position i of the first order visiting it takes lane i mod N, lanes stacked,
// each as large as its largest unit (N slots, as MaxPool by bytes). Valid only when no two
// units of a lane can be resident together (true for training and evaluation orders).
inline std::optional<placement> lanes(std::span<std::uint64_t const> bytes,
                                      std::vector<std::vector<std::uint32_t>> const& adj,
                                      std::span<execution_order const> orders, std::size_t resident) {
  std::vector<std::size_t> lane(bytes.size(), SIZE_MAX);
  for (auto const& o : orders)
    for (std::size_t i = 0; i < o.units.size(); ++i)
      if (lane[o.units[i]] == SIZE_MAX) lane[o.units[i]] = i % resident;
  for (std::size_t u = 0; u < adj.size(); ++u)
    for (auto v : adj[u])
      if (lane[v] == lane[u]) return std::nullopt;
  std::vector<std::uint64_t> size(resident, 0);
  for (std::size_t u = 0; u < bytes.size(); ++u) size[lane[u]] = std::max(size[lane[u]], bytes[u]);
  std::vector<std::uint64_t> base(resident, 0);
  for (std::size_t k = 1; k < resident; ++k) base[k] = base[k - 1] + size[k - 1];
  placement p;
  for (std::size_t u = 0; u < bytes.size(); ++u) p.offset.push_back(base[lane[u]]);
  p.arena = base[resident - 1] + size[resident - 1];
  return p;
}

inline placement best_placement(std::span<std::uint64_t const> bytes, std::vector<std::vector<std::uint32_t>> const& adj,
                                std::span<execution_order const> orders, std::size_t resident, std::uint64_t bound,
                                std::size_t alignment) {
  std::size_t const n = bytes.size();
  std::vector<std::size_t> in_order(n);
  for (std::size_t u = 0; u < n; ++u) in_order[u] = u;
  std::vector<std::size_t> by_size = in_order;
  std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) { return bytes[a] > bytes[b]; });
  std::vector<char> const sides = two_sides(adj);
  std::vector<char> const bottom(n, 0);

  placement best;
  best.arena = UINT64_MAX;
  auto consider = [&](placement&& p) {
    if (p.arena < best.arena) best = std::move(p);
  };
  if (auto l = lanes(bytes, adj, orders, resident)) consider(std::move(*l));
  for (std::uint64_t k = 0; k <= 8 && best.arena > bound; ++k) {
    std::uint64_t const limit = align_up(bound + bound / 16 * k, alignment);
    for (auto const* seq : {&in_order, &by_size}) {
      consider(place(bytes, adj, *seq, sides, limit));
      consider(place(bytes, adj, *seq, bottom, limit));
    }
  }
  // Still above the bound: more placement orders, shuffled by a fixed generator (the same
  // sequence on every rank and standard library: Fisher-Yates on raw mt19937_64 output).
  std::mt19937_64 gen(0x9E3779B97F4A7C15ull);
  std::vector<std::size_t> seq = in_order;
  for (int trial = 0; trial < 256 && best.arena > bound; ++trial) {
    for (std::size_t i = n; i > 1; --i) std::swap(seq[i - 1], seq[gen() % i]);
    std::uint64_t const limit = align_up(best.arena - alignment, alignment);
    consider(place(bytes, adj, seq, sides, std::max(limit, bound)));
    consider(place(bytes, adj, seq, bottom, std::max(limit, bound)));
  }
  return best;
}

}  // namespace detail

/// The largest sum of the bytes of the distinct units in any window of `resident` consecutive
/// entries of any order: no fixed-address plan of these orders fits in less. Bytes as the plan
/// lays them out (padded; each bucket aligned to `alignment`). Throws invalid_argument for an
/// invalid workload or orders (see validate_orders).
template <padding_policy Padding = no_padding>
[[nodiscard]] std::uint64_t lower_bound(workload const& w, std::span<execution_order const> orders, std::size_t resident,
                                        std::size_t alignment = default_alignment, Padding const& padding = {}) {
  validate(w);
  validate_orders(w.units.size(), orders, resident);
  expects(is_power_of_two(alignment), "pool::lower_bound: alignment ", alignment, " is not a power of two");
  auto const bytes = detail::unit_footprints(w, alignment, padding);
  return detail::window_bound(bytes, orders, detail::effective_resident(orders, resident));
}

/// Plans a fixed byte range for every unit such that units that can be resident together in
/// any of `orders` never overlap. Deterministic. N beyond the longest order means every unit of
/// it resident together and is planned so (plan.resident is then the longest order's length). Throws invalid_argument for an invalid
/// workload, invalid orders (N < 2, empty order, unknown unit, a unit no order visits) or an
/// alignment that is not a power of two.
template <padding_policy Padding = no_padding>
[[nodiscard]] plan make_interval_plan(workload const& w, std::span<execution_order const> orders,
                                      interval_options const& options = {}, Padding const& padding = {}) {
  validate(w);
  validate_orders(w.units.size(), orders, options.resident);
  expects(is_power_of_two(options.alignment), "pool::make_interval_plan: alignment ", options.alignment,
          " is not a power of two");
  std::size_t const resident = detail::effective_resident(orders, options.resident);
  plan p;
  detail::fill_common<by_bytes>(p, w, plan_options{2, options.alignment}, padding, interval::name);
  p.buffers = 1;
  p.resident = resident;
  p.orders.assign(orders.begin(), orders.end());

  auto const bytes = detail::unit_footprints(w, options.alignment, padding);
  auto const adj = detail::residency_graph(w.units.size(), orders, resident);
  auto const bound = detail::window_bound(bytes, orders, resident);
  auto const placed = detail::best_placement(bytes, adj, orders, resident, bound, options.alignment);

  for (std::size_t u = 0; u < w.units.size(); ++u) {
    p.pooled[u] = 1;
    std::uint64_t offset = placed.offset[u];
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b) {
      auto const s = static_cast<std::uint32_t>(p.shapes.size());
      p.shapes.push_back({0, by_bytes::category_name(0), s, p.bucket_bytes[u][b], u, b});
      p.slots.push_back({0, s, offset, p.bucket_bytes[u][b]});
      p.bucket_shape[u][b] = s;
      offset += align_up(p.bucket_bytes[u][b], options.alignment);
    }
  }
  p.arena_bytes = align_up(placed.arena, options.alignment);
  return p;
}
template <padding_policy Padding = no_padding>
[[nodiscard]] plan make_interval_plan(workload const& w, std::initializer_list<execution_order> orders,
                                      interval_options const& options = {}, Padding const& padding = {}) {
  return make_interval_plan(w, std::span<execution_order const>(orders.begin(), orders.size()), options, padding);
}

/// Pairs units_sharing_bytes returns at most (each listed twice, 4 bytes an entry: 2 GiB).
inline constexpr std::size_t max_sharing_pairs = std::size_t{1} << 28;

/// For every unit of an interval plan, the units whose byte range (first bucket to last)
/// overlaps its own: the units that must never be held together with it. Empty lists for
/// fixed / max plans (their units never share a slot at once). A sweep over the ranges sorted
/// by start: O(n log n + pairs). Throws capacity_error past max_sharing_pairs pairs.
[[nodiscard]] inline std::vector<std::vector<std::uint32_t>> units_sharing_bytes(plan const& p) {
  std::size_t const n = p.unit_count();
  std::vector<std::vector<std::uint32_t>> out(n);
  if (p.resident == 0) return out;
  std::vector<detail::byte_range> extent(n, {UINT64_MAX, 0});
  for (std::size_t u = 0; u < n; ++u)
    for (auto shape : p.bucket_shape[u]) {
      if (shape == no_shape) continue;
      auto const& sl = p.slots[shape];
      extent[u].begin = std::min(extent[u].begin, sl.offset);
      extent[u].end = std::max(extent[u].end, sl.offset + sl.bytes);
    }
  std::vector<std::uint32_t> by_begin;
  for (std::uint32_t u = 0; u < n; ++u)
    if (extent[u].begin != UINT64_MAX) by_begin.push_back(u);
  std::sort(by_begin.begin(), by_begin.end(),
            [&](std::uint32_t a, std::uint32_t b) { return extent[a].begin < extent[b].begin; });
  std::size_t pairs = 0;
  for (std::size_t i = 0; i < by_begin.size(); ++i) {
    std::uint32_t const u = by_begin[i];
    for (std::size_t j = i + 1; j < by_begin.size() && extent[by_begin[j]].begin < extent[u].end; ++j) {
      std::uint32_t const v = by_begin[j];
      if (extent[v].end <= extent[u].begin) continue;  // v empty, at u's start
      expects<capacity_error>(++pairs <= max_sharing_pairs, "pool::units_sharing_bytes: plan '", p.workload_name,
                              "' has more than ", max_sharing_pairs, " pairs of ", n,
                              " units sharing bytes; expected at most 2^28 (the lists would take over 2 GiB)");
      out[u].push_back(v);
      out[v].push_back(u);
    }
  }
  for (auto& l : out) std::sort(l.begin(), l.end());
  return out;
}

/// "train@3,172; eval@3": where unit `u` appears in the plan's orders (for messages).
[[nodiscard]] inline std::string order_positions(plan const& p, std::size_t u) {
  std::string out;
  for (auto const& o : p.orders) {
    std::string here;
    for (std::size_t i = 0; i < o.units.size() && here.size() < 40; ++i)
      if (o.units[i] == u) {
        // Appended piece by piece: g++ 12 at -O3 warns (-Wrestrict) on "lit" + std::string&&.
        if (!here.empty()) here += ',';
        here += std::to_string(i);
      }
    if (here.empty()) continue;
    if (!out.empty()) out += "; ";
    out += o.name;
    out += '@';
    out += here;
  }
  return out;
}

/// Where an order breaks a plan: two units resident together (within `resident` consecutive
/// entries starting at `position`) whose buckets share bytes (interval plans) or whose demand
/// for one slot shape exceeds its buffers (fixed / max plans).
struct residency_conflict {
  std::size_t position = 0;  ///< first entry of the window
  std::size_t first_unit = 0;
  std::size_t second_unit = 0;
  std::string message;
};

/// Checks plan `p` against `order` with `resident` units alive at once (0: the plan's own N;
/// fixed / max plans need it given; any N from the order's length on is the whole order). Returns
/// the first conflict, or nothing when the order fits.
/// Throws invalid_argument for N < 2, an empty order or a unit the plan does not have.
[[nodiscard]] inline std::optional<residency_conflict> find_conflict(plan const& p, execution_order const& order,
                                                                     std::size_t resident = 0) {
  if (resident == 0) resident = p.resident;
  expects(resident >= 2, "pool::validate: resident units N = ", resident, " for plan '", p.workload_name,
          "'; expected N >= 2");
  expects(!order.units.empty(), "pool::validate: execution order '", order.name, "' is empty");
  for (std::size_t i = 0; i < order.units.size(); ++i)
    expects(order.units[i] < p.unit_count(), "pool::validate: execution order '", order.name, "' names unit ",
            order.units[i], " at position ", i, "; plan '", p.workload_name, "' has ", p.unit_count(), " units");
  std::size_t const n = order.units.size();
  auto const window = [&](std::size_t i) {
    return headroom::detail::concat("positions ", i, "..", detail::window_end(i, resident, n) - 1, " of order '",
                                    order.name, "' (N = ", resident, ")");
  };
  auto const unit = [&](std::size_t u) { return headroom::detail::concat("unit ", u, " '", p.unit_names[u], "'"); };
  if (p.resident > 0) {  // fixed byte ranges: distinct residents must not share a byte
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1, end = detail::window_end(i, resident, n); j < end; ++j) {
        std::size_t const a = order.units[i];
        std::size_t const b = order.units[j];
        if (a == b) continue;
        for (auto sa : p.bucket_shape[a])
          for (auto sb : p.bucket_shape[b]) {
            if (sa == no_shape || sb == no_shape) continue;
            auto const& x = p.slots[sa];
            auto const& y = p.slots[sb];
            if (x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes)
              return residency_conflict{
                  i, a, b,
                  headroom::detail::concat("pool::validate: ", unit(a), " and ", unit(b), " are resident together at ",
                                           window(i), " but share arena bytes [", std::max(x.offset, y.offset), ", ",
                                           std::min(x.offset + x.bytes, y.offset + y.bytes), ") in plan '",
                                           p.workload_name, "'")};
          }
      }
    return std::nullopt;
  }
  // Slot groups: the distinct residents of a window must not need more slots of a shape than
  // there are buffers.
  std::vector<std::uint32_t> demand(p.shapes.size(), 0);
  std::vector<std::size_t> first_user(p.shapes.size(), no_unit);
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i + (n < resident ? n : resident) <= n; ++i) {
    std::size_t const last = detail::window_end(i, resident, n);
    members.assign(order.units.begin() + static_cast<std::ptrdiff_t>(i),
                   order.units.begin() + static_cast<std::ptrdiff_t>(last));
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    std::fill(demand.begin(), demand.end(), 0);
    std::fill(first_user.begin(), first_user.end(), no_unit);
    for (std::size_t u : members)
      for (auto s : p.bucket_shape[u]) {
        if (s == no_shape) continue;
        if (first_user[s] == no_unit) first_user[s] = u;
        if (++demand[s] > p.buffers)
          return residency_conflict{
              i, first_user[s], u,
              headroom::detail::concat("pool::validate: ", unit(first_user[s]), " and ", unit(u), " are among ",
                                       demand[s], " residents at ", window(i), " that need shape ", s, " (",
                                       p.shapes[s].category_name, "#", p.shapes[s].ordinal, ") of which plan '",
                                       p.workload_name, "' has ", p.buffers, " buffers")};
      }
    if (last == n) break;
  }
  return std::nullopt;
}

/// Throws logic_error with the message of find_conflict when `order` breaks plan `p`.
inline void validate(plan const& p, execution_order const& order, std::size_t resident = 0) {
  if (auto c = find_conflict(p, order, resident)) throw logic_error(std::move(c->message));
}

}  // namespace headroom::pool
