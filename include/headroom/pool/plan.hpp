// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Plans: what a pool will allocate, computed and printable before a byte is allocated.
//
// A plan has `buffers` buffer groups. Each group has the same list of slot *shapes*
// (category, ordinal within the category, bytes, the unit/bucket that defined the size).
// A slot is one shape materialised in one group, at a fixed arena offset. Every bucket of a
// pooled unit has one shape, so its candidate slots are that shape in each group.
//
//   auto p = pool::make_plan<pool::max>(workload, {.buffers = 2});
//   std::cout << p;                       // slots, offsets, definers, fallback bytes
//   p.arena_bytes                          // what the pool will ask its upstream for
//
// Plans are deterministic: the same workload and options give the same plan on every rank.
// The arena is laid out group-major, shapes in plan order, each slot aligned to `alignment`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/execution_order.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool {

inline constexpr std::uint32_t no_shape = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::size_t no_unit = std::numeric_limits<std::size_t>::max();
/// Most buffer groups a plan may have (a pool tracks free groups of a shape in one 64-bit mask).
inline constexpr std::size_t max_buffers = 64;

struct plan_options {
  std::size_t buffers = 2;                    ///< N >= 2 copies of every slot (double buffering)
  std::size_t alignment = default_alignment;  ///< arena offset alignment of every slot
};

struct slot_shape {
  category_id category = 0;
  std::string category_name;
  std::uint32_t ordinal = 0;  ///< position within its category (Megatron's slot offset)
  std::uint64_t bytes = 0;
  std::size_t defining_unit = 0;  ///< first unit whose bucket reached this size
  std::size_t defining_bucket = 0;
};

struct slot {
  std::uint32_t group = 0;
  std::uint32_t shape = 0;
  std::uint64_t offset = 0;  ///< from the arena base
  std::uint64_t bytes = 0;
};

/// The slots of one category, in plan order (Megatron's per-dtype slot list).
struct category_slots {
  category_id category = 0;
  std::string name;
  std::vector<std::uint32_t> shapes;
};

struct plan {
  std::string workload_name;
  std::string planner;
  std::string category_policy;
  std::string padding;
  /// fixed / max: N copies of every slot. interval: 1 (every bucket owns its slot; units that
  /// are never resident together share bytes instead).
  std::size_t buffers = 2;
  std::size_t alignment = default_alignment;
  /// interval plans: N units resident together, and the orders the plan is valid for. 0 / empty
  /// for fixed and max plans (valid for any order that holds at most `buffers` units of a shape).
  std::size_t resident = 0;
  std::vector<execution_order> orders;
  /// fixed plans: the first unit of the chosen class (the slots are its buckets); no_unit otherwise.
  std::size_t representative_unit = no_unit;

  std::vector<slot_shape> shapes;  ///< one buffer group's layout
  std::vector<slot> slots;         ///< group-major: slot index = group * shapes.size() + shape
  std::uint64_t arena_bytes = 0;

  std::vector<std::string> unit_names;
  std::vector<char> pooled;                              ///< per unit: has slots (char: no vector<bool>)
  std::vector<std::vector<std::uint64_t>> bucket_bytes;  ///< [unit][bucket] padded request bytes
  std::vector<std::vector<std::uint32_t>> bucket_shape;  ///< [unit][bucket] shape, no_shape if not pooled
  std::vector<std::uint64_t> non_unit_bytes;             ///< padded

  [[nodiscard]] std::size_t unit_count() const noexcept { return unit_names.size(); }
  [[nodiscard]] std::size_t slot_index(std::uint32_t group, std::uint32_t shape) const noexcept {
    return static_cast<std::size_t>(group) * shapes.size() + shape;
  }
  /// The slots bucket `b` of unit `u` may take (one per group); empty if the unit is not pooled.
  [[nodiscard]] std::vector<std::size_t> candidate_slots(std::size_t u, std::size_t b) const {
    expects(u < unit_count(), "plan::candidate_slots: unit ", u, " out of range [0, ", unit_count(), ")");
    expects(b < bucket_shape[u].size(), "plan::candidate_slots: bucket ", b, " out of range [0, ",
            bucket_shape[u].size(), ") of unit ", u, " '", unit_names[u], "'");
    std::vector<std::size_t> out;
    if (bucket_shape[u][b] == no_shape) return out;
    for (std::uint32_t g = 0; g < buffers; ++g) out.push_back(slot_index(g, bucket_shape[u][b]));
    return out;
  }
  /// fixed plans: the units of the chosen class (they share the slots); empty for other planners.
  [[nodiscard]] std::vector<std::size_t> chosen_class() const {
    std::vector<std::size_t> out;
    if (representative_unit == no_unit) return out;
    for (std::size_t u = 0; u < unit_count(); ++u)
      if (pooled[u]) out.push_back(u);
    return out;
  }
  /// Shapes grouped by category, categories in first-appearance order.
  [[nodiscard]] std::vector<category_slots> categories() const {
    std::vector<category_slots> out;
    for (std::uint32_t s = 0; s < shapes.size(); ++s) {
      auto it = std::find_if(out.begin(), out.end(), [&](auto const& c) { return c.category == shapes[s].category; });
      if (it == out.end()) it = out.insert(out.end(), category_slots{shapes[s].category, shapes[s].category_name, {}});
      it->shapes.push_back(s);
    }
    return out;
  }
  [[nodiscard]] std::size_t pooled_units() const noexcept {
    return static_cast<std::size_t>(std::count(pooled.begin(), pooled.end(), char{1}));
  }
  /// Bytes of unit buckets that get no slot (fixed planner: units outside the dominant shape).
  [[nodiscard]] std::uint64_t unpooled_unit_bytes() const noexcept {
    std::uint64_t sum = 0;
    for (std::size_t u = 0; u < unit_count(); ++u)
      if (!pooled[u])
        for (auto b : bucket_bytes[u]) sum += b;
    return sum;
  }
  [[nodiscard]] std::uint64_t non_unit_total_bytes() const noexcept {
    std::uint64_t sum = 0;
    for (auto b : non_unit_bytes) sum += b;
    return sum;
  }
  /// Everything left to the non-unit policy (dynamic allocations or persistent buffers).
  [[nodiscard]] std::uint64_t fallback_bytes() const noexcept { return unpooled_unit_bytes() + non_unit_total_bytes(); }
  /// Slot bytes of one buffer group (without alignment gaps).
  [[nodiscard]] std::uint64_t group_bytes() const noexcept {
    std::uint64_t sum = 0;
    for (auto const& s : shapes) sum += s.bytes;
    return sum;
  }

  friend std::ostream& operator<<(std::ostream& os, plan const& p) {
    os << "plan '" << p.workload_name << "': planner=" << p.planner << " category=" << p.category_policy
       << " padding=" << p.padding << " buffers=" << p.buffers << " alignment=" << p.alignment;
    if (p.resident > 0) {
      os << " resident=" << p.resident << " orders=";
      for (std::size_t i = 0; i < p.orders.size(); ++i)
        os << (i ? "," : "") << p.orders[i].name << "(" << p.orders[i].units.size() << ")";
    }
    if (p.representative_unit != no_unit)
      os << " class=" << p.pooled_units() << " units like unit " << p.representative_unit << " '"
         << p.unit_names[p.representative_unit] << "'";
    os << "\n";
    os << "  arena " << p.arena_bytes << " B (" << format_bytes(p.arena_bytes) << "), " << p.slots.size()
       << " slots; units pooled " << p.pooled_units() << "/" << p.unit_count() << "; fallback "
       << p.fallback_bytes() << " B (" << format_bytes(p.fallback_bytes()) << ") = unpooled units "
       << format_bytes(p.unpooled_unit_bytes()) << " + non-unit " << format_bytes(p.non_unit_total_bytes()) << "\n";
    for (std::size_t s = 0; s < p.shapes.size(); ++s) {
      auto const& sh = p.shapes[s];
      os << "  shape " << s << ": " << sh.category_name << "#" << sh.ordinal << " " << sh.bytes << " B ("
         << format_bytes(sh.bytes) << ") defined by unit " << sh.defining_unit << " '"
         << p.unit_names[sh.defining_unit] << "' bucket " << sh.defining_bucket << "; offsets";
      for (std::uint32_t g = 0; g < p.buffers; ++g)
        os << " g" << g << "@" << p.slots[p.slot_index(g, static_cast<std::uint32_t>(s))].offset;
      os << "\n";
    }
    return os;
  }
  [[nodiscard]] std::string to_string() const {
    std::ostringstream os;
    os << *this;
    return os.str();
  }
  /// Per unit: "unit 3 'layer.3 (M)': bucket 0 -> shape 0 (slots 0, 2)"; long, for debugging.
  [[nodiscard]] std::string describe_units() const {
    std::ostringstream os;
    for (std::size_t u = 0; u < unit_count(); ++u) {
      os << "unit " << u << " '" << unit_names[u] << "':";
      if (!pooled[u]) os << " not pooled (fallback)";
      for (std::size_t b = 0; b < bucket_shape[u].size(); ++b) {
        os << " [b" << b << " " << bucket_bytes[u][b] << " B";
        if (bucket_shape[u][b] != no_shape) {
          os << " -> shape " << bucket_shape[u][b] << " slots";
          for (auto s : candidate_slots(u, b)) os << " " << s;
        }
        os << "]";
      }
      os << "\n";
    }
    return os.str();
  }

  friend bool operator==(plan const& a, plan const& b) {
    auto shape_key = [](slot_shape const& s) {
      return std::tie(s.category, s.category_name, s.ordinal, s.bytes, s.defining_unit, s.defining_bucket);
    };
    auto slot_key = [](slot const& s) { return std::tie(s.group, s.shape, s.offset, s.bytes); };
    if (a.shapes.size() != b.shapes.size() || a.slots.size() != b.slots.size()) return false;
    for (std::size_t i = 0; i < a.shapes.size(); ++i)
      if (shape_key(a.shapes[i]) != shape_key(b.shapes[i])) return false;
    for (std::size_t i = 0; i < a.slots.size(); ++i)
      if (slot_key(a.slots[i]) != slot_key(b.slots[i])) return false;
    return a.workload_name == b.workload_name && a.planner == b.planner && a.category_policy == b.category_policy &&
           a.padding == b.padding && a.buffers == b.buffers && a.alignment == b.alignment &&
           a.arena_bytes == b.arena_bytes && a.resident == b.resident && a.orders == b.orders &&
           a.representative_unit == b.representative_unit && a.unit_names == b.unit_names && a.pooled == b.pooled &&
           a.bucket_bytes == b.bucket_bytes && a.bucket_shape == b.bucket_shape && a.non_unit_bytes == b.non_unit_bytes;
  }
};

namespace detail {

template <class Category, class Padding>
void fill_common(plan& p, workload const& w, plan_options const& o, Padding const& pad, std::string_view planner) {
  p.workload_name = w.name;
  p.planner = std::string(planner);
  p.category_policy = std::string(Category::name);
  p.padding = pad.describe();
  p.buffers = o.buffers;
  p.alignment = o.alignment;
  p.unit_names.reserve(w.units.size());
  std::uint64_t total = 0;  // every padded bucket: bounds plan::fallback_bytes() and the other sums
  for (auto const& u : w.units) {
    p.unit_names.push_back(u.name);
    auto& bytes = p.bucket_bytes.emplace_back();
    for (auto const& b : u.buckets) {
      std::uint64_t const padded = pad.padded_bytes(b);
      expects(padded >= b.bytes, "pool: padding policy '", pad.describe(), "' shrank a bucket of unit '", u.name,
              "' from ", b.bytes, " to ", padded, " bytes; expected padded >= original");
      detail::add_planned_bytes(total, padded, w, "pool::make_plan");
      bytes.push_back(padded);
    }
    p.bucket_shape.emplace_back(u.buckets.size(), no_shape);
  }
  p.pooled.assign(w.units.size(), 0);
  for (auto const& b : w.non_unit) {
    p.non_unit_bytes.push_back(pad.padded_bytes(b));
    detail::add_planned_bytes(total, p.non_unit_bytes.back(), w, "pool::make_plan");
  }
}

// Megatron FixedPool: the class (ordered (category, padded bytes) list) with the most units;
// the first class in unit order wins ties. Slots are keyed by ordinal in the unit.
template <class Category>
void plan_fixed(plan& p, workload const& w) {
  using key = std::vector<std::pair<category_id, std::uint64_t>>;
  auto key_of = [&](std::size_t u) {
    key k;
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b)
      k.emplace_back(Category::category_of(w.units[u].buckets[b]), p.bucket_bytes[u][b]);
    return k;
  };
  std::vector<key> keys;
  for (std::size_t u = 0; u < w.units.size(); ++u) keys.push_back(key_of(u));
  std::map<key, std::size_t> class_size;  // O(n log n): counting each unit's class by scanning was O(n^2)
  for (auto const& k : keys) ++class_size[k];
  std::size_t best = 0;
  std::size_t best_count = 0;
  for (std::size_t u = 0; u < keys.size(); ++u) {
    auto const count = class_size[keys[u]];
    if (count > best_count) {  // strictly more: the first class wins ties
      best = u;
      best_count = count;
    }
  }
  p.representative_unit = best;
  std::map<category_id, std::uint32_t> ordinals;
  for (std::size_t b = 0; b < keys[best].size(); ++b) {
    category_id const c = keys[best][b].first;
    p.shapes.push_back({c, Category::category_name(c), ordinals[c]++, keys[best][b].second, best, b});
  }
  for (std::size_t u = 0; u < keys.size(); ++u) {
    if (keys[u] != keys[best]) continue;
    p.pooled[u] = 1;
    for (std::size_t b = 0; b < keys[u].size(); ++b) p.bucket_shape[u][b] = static_cast<std::uint32_t>(b);
  }
}

// Megatron MaxPool: per category, sort a unit's buckets by (bytes, index) descending (equal
// sizes: the later bucket first), match the i-th largest to slot i, grow slot i to the max.
// Categories keep first-appearance order; slots in a category stay non-increasing.
template <class Category>
void plan_max(plan& p, workload const& w) {
  std::vector<category_id> order;                           // categories, first-appearance order
  std::map<category_id, std::vector<slot_shape>> per_category;
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    std::vector<category_id> unit_order;
    std::map<category_id, std::vector<std::pair<std::uint64_t, std::size_t>>> mine;
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b) {
      category_id const c = Category::category_of(w.units[u].buckets[b]);
      if (!mine.contains(c)) unit_order.push_back(c);
      mine[c].emplace_back(p.bucket_bytes[u][b], b);
    }
    for (category_id c : unit_order) {
      auto& list = mine[c];
      std::sort(list.begin(), list.end(), [](auto const& a, auto const& b) { return a > b; });
      if (!per_category.contains(c)) order.push_back(c);
      auto& pool = per_category[c];
      while (pool.size() < list.size())
        pool.push_back({c, Category::category_name(c), static_cast<std::uint32_t>(pool.size()), 0, u, 0});
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (list[i].first > pool[i].bytes) {  // strictly larger: the first unit to reach the max defines it
          pool[i].bytes = list[i].first;
          pool[i].defining_unit = u;
          pool[i].defining_bucket = list[i].second;
        }
      }
    }
    p.pooled[u] = 1;
  }
  std::map<std::pair<category_id, std::uint32_t>, std::uint32_t> index;
  for (category_id c : order)
    for (auto const& s : per_category[c]) {
      index[{c, s.ordinal}] = static_cast<std::uint32_t>(p.shapes.size());
      p.shapes.push_back(s);
    }
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    std::map<category_id, std::vector<std::pair<std::uint64_t, std::size_t>>> mine;
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b)
      mine[Category::category_of(w.units[u].buckets[b])].emplace_back(p.bucket_bytes[u][b], b);
    for (auto& [c, list] : mine) {
      std::sort(list.begin(), list.end(), [](auto const& a, auto const& b) { return a > b; });
      for (std::size_t i = 0; i < list.size(); ++i)
        p.bucket_shape[u][list[i].second] = index.at({c, static_cast<std::uint32_t>(i)});
    }
  }
}

inline void lay_out(plan& p) {
  std::uint64_t cursor = 0;
  p.slots.clear();
  p.slots.reserve(p.buffers * p.shapes.size());
  for (std::uint32_t g = 0; g < p.buffers; ++g)
    for (std::uint32_t s = 0; s < p.shapes.size(); ++s) {
      std::uint64_t const offset = align_up(cursor, p.alignment);
      expects<capacity_error>(p.shapes[s].bytes <= UINT64_MAX - offset, "pool: arena of plan '", p.workload_name,
                              "' overflows 64-bit offsets at group ", g, " shape ", s);
      p.slots.push_back({g, s, offset, p.shapes[s].bytes});
      cursor = offset + p.shapes[s].bytes;
    }
  p.arena_bytes = align_up(cursor, p.alignment);
}

}  // namespace detail

/// Plans a pool for `w`. Throws invalid_argument for an invalid workload (see validate), a
/// buffer count outside [2, 64] or an alignment that is not a power of two.
/// Unconstrained so that a wrong policy stops at one of these sentences (docs/errors.md).
template <class Planner, class Category = by_dtype, class Padding = no_padding>
[[nodiscard]] plan make_plan(workload const& w, plan_options const& options = {}, Padding const& padding = {}) {
  static_assert(planner_policy<Planner>,
                "pool::make_plan<Planner>: Planner must be pool::fixed or pool::max; for pool::interval call "
                "pool::make_interval_plan(workload, orders), which needs the execution order");
  static_assert(category_policy<Category>,
                "pool::make_plan<Planner, Category>: Category is not a pool::category_policy (static name, "
                "category_of(bucket) and category_name(id)); use pool::by_dtype or pool::by_bytes");
  static_assert(padding_policy<Padding>,
                "pool::make_plan<Planner, Category, Padding>: Padding is not a pool::padding_policy (copyable, "
                "padded_bytes(bucket) and describe()); use pool::no_padding, pool::pad_elements or pool::align_bytes<N>");
  validate(w);
  expects(options.buffers >= 2 && options.buffers <= max_buffers, "pool::make_plan: buffers = ", options.buffers,
          "; expected 2 <= buffers <= ", max_buffers, " (double buffering needs at least 2)");
  expects(is_power_of_two(options.alignment), "pool::make_plan: alignment ", options.alignment,
          " is not a power of two");
  plan p;
  detail::fill_common<Category>(p, w, options, padding, Planner::name);
  if constexpr (std::same_as<Planner, fixed>)
    detail::plan_fixed<Category>(p, w);
  else
    detail::plan_max<Category>(p, w);
  detail::lay_out(p);
  return p;
}

}  // namespace headroom::pool
