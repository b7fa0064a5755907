// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Execution orders: the sequence in which an engine acquires the units of a workload.
//
// With N resident units (prefetch depth + 1), the units alive at once are N consecutive entries
// of an order. Training visits u0 .. u(n-1) forward, then u(n-1) .. u0 backward; evaluation
// visits the forward half only; an engine may register any other order (pipeline schedules,
// recomputation). The interval planner (interval.hpp) plans for the union of the registered
// orders, so interleaving them (evaluation between training steps) stays inside the plan.
//
//   std::vector<pool::execution_order> orders{pool::training_order(w), pool::evaluation_order(w)};
#include <algorithm>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool {

struct execution_order {
  std::string name;
  std::vector<std::size_t> units;  ///< unit indices of the workload, in acquisition order

  friend bool operator==(execution_order const&, execution_order const&) = default;
};

/// Most units an order lists (each index is 8 bytes; a training order lists every unit twice).
inline constexpr std::size_t max_order_units = std::size_t{1} << 32;

/// Forward then backward: u0 .. u(n-1), u(n-1) .. u0 (the last unit is visited twice in a row).
/// Throws capacity_error for more than max_order_units units.
[[nodiscard]] inline execution_order training_order(std::size_t units, std::string name = "train") {
  expects<capacity_error>(units <= max_order_units, "pool::training_order: ", units, " units, expected <= ",
                          max_order_units, " (2^32)");
  execution_order o{std::move(name), {}};
  o.units.reserve(2 * units);
  for (std::size_t u = 0; u < units; ++u) o.units.push_back(u);
  for (std::size_t u = units; u-- > 0;) o.units.push_back(u);
  return o;
}
[[nodiscard]] inline execution_order training_order(workload const& w, std::string name = "train") {
  return training_order(w.units.size(), std::move(name));
}

/// Forward only: u0 .. u(n-1). Throws capacity_error for more than max_order_units units.
[[nodiscard]] inline execution_order evaluation_order(std::size_t units, std::string name = "eval") {
  expects<capacity_error>(units <= max_order_units, "pool::evaluation_order: ", units, " units, expected <= ",
                          max_order_units, " (2^32)");
  execution_order o{std::move(name), {}};
  o.units.reserve(units);
  for (std::size_t u = 0; u < units; ++u) o.units.push_back(u);
  return o;
}
[[nodiscard]] inline execution_order evaluation_order(workload const& w, std::string name = "eval") {
  return evaluation_order(w.units.size(), std::move(name));
}

/// Throws invalid_argument naming the first problem: no orders, fewer than 2 resident units, an
/// empty order, an order naming a unit the workload
/// does not have, or a unit no order visits (it would get no place in the arena).
inline void validate_orders(std::size_t unit_count, std::span<execution_order const> orders, std::size_t resident) {
  expects(resident >= 2, "pool: resident units N = ", resident,
          "; expected N >= 2 (the unit computed now and at least one prefetched)");
  expects(!orders.empty(), "pool: no execution order registered; expected at least one (e.g. training_order(w))");
  // The first unit missing from every order is at most the number of entries (they cannot name
  // more distinct units), so a table that long finds it: never unit_count bytes for a huge count.
  // A resident count N beyond the longest order is not an error: every window is then the whole
  // order (the planner plans every unit alive together).
  std::size_t entries = 0;
  for (auto const& o : orders) entries += o.units.size();
  std::size_t const tracked = std::min(unit_count, entries + 1);
  std::vector<char> seen(tracked, 0);
  for (auto const& o : orders) {
    expects(!o.units.empty(), "pool: execution order '", o.name, "' is empty; expected at least one unit");
    for (std::size_t i = 0; i < o.units.size(); ++i) {
      expects(o.units[i] < unit_count, "pool: execution order '", o.name, "' names unit ", o.units[i],
              " at position ", i, "; expected a unit index below ", unit_count);
      if (o.units[i] < tracked) seen[o.units[i]] = 1;
    }
  }
  for (std::size_t u = 0; u < tracked; ++u)
    expects(seen[u] != 0, "pool: unit ", u, " is missing from every execution order; expected each of the ",
            unit_count, " units in at least one order");
}

namespace detail {

/// One past the last entry of the window of `resident` entries starting at `first` (the end of
/// the order when it is shorter); never wraps, whatever `resident` is.
[[nodiscard]] inline std::size_t window_end(std::size_t first, std::size_t resident, std::size_t n) noexcept {
  return first + std::min(resident, n - first);
}

/// Calls f(a, b) for every pair of distinct units within `resident` consecutive entries of `o`
/// (each pair possibly more than once).
template <class F>
void for_each_resident_pair(execution_order const& o, std::size_t resident, F&& f) {
  std::size_t const n = o.units.size();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1, end = window_end(i, resident, n); j < end; ++j)
      if (o.units[i] != o.units[j]) f(o.units[i], o.units[j]);
}

/// Calls f(first, last) for every window of `resident` consecutive entries (the whole order
/// when it is shorter).
template <class F>
void for_each_window(execution_order const& o, std::size_t resident, F&& f) {
  std::size_t const n = o.units.size();
  if (n <= resident) {
    f(std::size_t{0}, n);
    return;
  }
  for (std::size_t i = 0; i + resident <= n; ++i) f(i, i + resident);
}

/// The N the planners work with: beyond the longest order (at least 2) every window is the whole
/// order, so a larger N means the same ("every unit alive together") and is planned as that.
[[nodiscard]] inline std::size_t effective_resident(std::span<execution_order const> orders, std::size_t resident) {
  std::size_t longest = 2;
  for (auto const& o : orders) longest = std::max(longest, o.units.size());
  return std::min(resident, longest);
}

}  // namespace detail
}  // namespace headroom::pool
