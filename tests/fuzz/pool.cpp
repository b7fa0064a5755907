// SPDX-License-Identifier: Apache-2.0
// Fuzz target: pool planners on arbitrary workloads, then a random acquire / release /
// can_acquire sequence on the host pool.
//
// Plans (every planner x category x padding policy) either throw a headroom::error or satisfy:
//   - slots = buffers x shapes, group-major; offsets aligned; slots never overlap and lie in
//     the arena, whose size is aligned;
//   - every bucket of a pooled unit fits its shape, the shape's category is the bucket's,
//     two buckets of one unit never share a shape; padded sizes >= requested;
//   - max pools every unit; fixed pools exactly the units of one class, the commonest;
//   - the same input gives the same plan.
// Interval plans (execution orders: training, evaluation, or arbitrary, N resident units):
//   - one group; every bucket has its own aligned slot inside the arena, fitting it;
//   - units resident together in a window of N entries of any registered order never share a
//     byte (checked from the slots, and find_conflict agrees); the same input, the same plan;
//   - a pool following a registered order never refuses an acquire and never hands out bytes
//     a held unit owns; an acquire off the orders is a logic_error (reject_off_trace) or an
//     upstream buffer (fallback_off_trace), and the pool is unchanged after a refusal.
// Pool operations (when the arena is small): a held lease's buffers have the planned size,
// pooled ones sit inside the arena; the buffers of different held units never overlap (a
// byte pattern written at acquire is intact at release); can_acquire predicts acquire
// exactly, and a refused acquire changes nothing; misuse (unknown unit, double release,
// foreign lease, use after move, move-assign over a held lease) is an error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../common/error_of.hpp"
#include "fuzz_input.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool.hpp"

namespace {

using headroom_test::throws;

namespace pool = headroom::pool;
using headroom::dtype;
using headroom::host::inline_stream;

constexpr dtype types[] = {dtype::bf16, dtype::f32, dtype::u8, dtype::f16, dtype::f64};

pool::bucket draw_bucket(fuzz::input& in) {
  pool::bucket b;
  b.type = types[in.in<std::size_t>(0, std::size(types) - 1)];
  switch (in.in<int>(0, 15)) {
    case 0: b.bytes = 0; break;                                      // must be rejected
    case 1: b.bytes = in.take<std::uint64_t>(); break;               // anything, 2^62 included
    case 2: b.bytes = std::uint64_t{1} << in.in<int>(40, 63); break;  // huge powers of two
    default: b.bytes = in.in<std::uint64_t>(1, 3000) * headroom::size_of(b.type); break;
  }
  return b;
}

pool::workload draw_workload(fuzz::input& in) {
  pool::workload w;
  w.name = "fuzz";
  std::size_t const units = in.in<std::size_t>(0, 8);
  // A few shapes reused across units, so the fixed planner sees classes.
  std::vector<std::vector<pool::bucket>> shapes(in.in<std::size_t>(1, 3));
  for (auto& s : shapes) {
    s.resize(in.in<std::size_t>(in.in<int>(0, 31) == 0 ? 0 : 1, 4));
    for (auto& b : s) b = draw_bucket(in);
  }
  for (std::size_t u = 0; u < units; ++u) w.units.push_back({"u" + std::to_string(u), shapes[in.in<std::size_t>(0, shapes.size() - 1)]});
  w.non_unit.resize(in.in<std::size_t>(0, 2));
  for (auto& b : w.non_unit) b = draw_bucket(in);
  return w;
}

template <class Category, class Padding>
void check_plan(pool::plan const& p, pool::workload const& w, pool::plan_options const& o, Padding const& pad,
                bool is_max) {
  FUZZ_CHECK(p.buffers == o.buffers && p.alignment == o.alignment);
  FUZZ_CHECK(p.slots.size() == p.buffers * p.shapes.size() && !p.shapes.empty());
  FUZZ_CHECK(p.arena_bytes % p.alignment == 0);
  std::vector<pool::slot> sorted = p.slots;
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    auto const& s = p.slots[i];
    FUZZ_CHECK(p.slot_index(s.group, s.shape) == i && s.bytes == p.shapes[s.shape].bytes);
    FUZZ_CHECK(s.offset % p.alignment == 0 && s.bytes <= p.arena_bytes && s.offset <= p.arena_bytes - s.bytes);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto const& a, auto const& b) { return a.offset < b.offset; });
  for (std::size_t i = 1; i < sorted.size(); ++i) FUZZ_CHECK(sorted[i - 1].offset + sorted[i - 1].bytes <= sorted[i].offset);

  FUZZ_CHECK(p.unit_count() == w.units.size());
  std::size_t pooled = 0;
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    std::vector<std::uint32_t> used;
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b) {
      std::uint64_t const padded = p.bucket_bytes[u][b];
      FUZZ_CHECK(padded >= w.units[u].buckets[b].bytes && padded == pad.padded_bytes(w.units[u].buckets[b]));
      std::uint32_t const shape = p.bucket_shape[u][b];
      FUZZ_CHECK((shape == pool::no_shape) == !p.pooled[u]);
      if (shape == pool::no_shape) continue;
      FUZZ_CHECK(shape < p.shapes.size() && padded <= p.shapes[shape].bytes);
      FUZZ_CHECK(p.shapes[shape].category == Category::category_of(w.units[u].buckets[b]));
      FUZZ_CHECK(std::find(used.begin(), used.end(), shape) == used.end());  // one bucket per slot
      used.push_back(shape);
      FUZZ_CHECK(p.candidate_slots(u, b).size() == p.buffers);
    }
    pooled += p.pooled[u] ? 1 : 0;
  }
  if (is_max) {
    FUZZ_CHECK(pooled == w.units.size());
  } else {
    // fixed: the pooled units are one class, and no class has more units.
    FUZZ_CHECK(pooled >= 1);
    std::map<std::vector<std::pair<std::uint32_t, std::uint64_t>>, std::size_t> classes;
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      std::vector<std::pair<std::uint32_t, std::uint64_t>> key;
      for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b)
        key.emplace_back(Category::category_of(w.units[u].buckets[b]), p.bucket_bytes[u][b]);
      ++classes[key];
    }
    for (auto const& [key, count] : classes) FUZZ_CHECK(count <= pooled);
  }
}

template <class Pool>
void exercise_pool(pool::plan const& p, fuzz::input& in) {
  inline_stream const s{};
  Pool pl(p, {}, s);
  std::optional<Pool> other;  // a second pool, for foreign leases
  if (in.flag()) other.emplace(p, headroom::host::aligned_resource{}, s);
  struct held {
    typename Pool::lease lease;
    std::size_t unit;
    std::uint8_t tag;
  };
  std::vector<held> leases;
  std::vector<typename Pool::lease> spent;  // released or moved-from
  std::byte const* arena = pl.arena();
  std::uint8_t next_tag = 1;

  auto fill = [](typename Pool::lease const& l, std::uint8_t tag) {
    for (std::size_t b = 0; b < l.size(); ++b) {
      auto const span = l.bytes(b);
      std::memset(span.data(), tag, span.size());
    }
  };
  auto intact = [](typename Pool::lease const& l, std::uint8_t tag) {
    for (std::size_t b = 0; b < l.size(); ++b)
      for (std::byte x : l.bytes(b))
        if (x != std::byte{tag}) return false;
    return true;
  };

  for (int step = 0, steps = in.in<int>(1, 48); step < steps && !in.empty(); ++step) {
    switch (in.in<int>(0, 7)) {
      case 0:
      case 1:
      case 2: {  // acquire, predicted by can_acquire
        std::size_t const u = in.in<std::size_t>(0, p.unit_count());  // == unit_count: unknown unit
        if (u == p.unit_count()) {
          FUZZ_CHECK(throws([&] { (void)pl.acquire(u, s); }) && throws([&] { (void)pl.can_acquire({u}); }));
          break;
        }
        bool const predicted = pl.can_acquire({u});
        auto const before = pl.stats().slots_in_use;
        std::uint32_t const holders = pl.holders(u);
        try {
          auto l = pl.acquire(u, s);
          FUZZ_CHECK(predicted && l.valid() && l.index() == u && l.size() == p.bucket_bytes[u].size());
          for (std::size_t b = 0; b < l.size(); ++b) {
            auto const span = l.bytes(b);
            FUZZ_CHECK(span.size() == p.bucket_bytes[u][b]);
            if (l.slot(b) != std::numeric_limits<std::size_t>::max()) {
              auto const& sl = p.slots[l.slot(b)];
              FUZZ_CHECK(span.data() == arena + sl.offset && span.size() <= sl.bytes);
            }
          }
          std::uint8_t tag = next_tag;
          if (holders == 0) {
            tag = next_tag++;
            if (next_tag == 0) next_tag = 1;
            fill(l, tag);
          } else {
            auto const same = std::find_if(leases.begin(), leases.end(), [&](held const& h) { return h.unit == u; });
            FUZZ_CHECK(same != leases.end() && l.bytes(0).data() == same->lease.bytes(0).data());
            tag = same->tag;
          }
          leases.push_back({std::move(l), u, tag});
        } catch (headroom::capacity_error const&) {
          FUZZ_CHECK(!predicted && pl.stats().slots_in_use == before && pl.holders(u) == holders);
        }
        break;
      }
      case 3:
      case 4: {  // release a held lease, checking no other unit wrote into it
        if (leases.empty()) break;
        std::size_t const i = in.in<std::size_t>(0, leases.size() - 1);
        bool const last_holder = pl.holders(leases[i].unit) == 1;
        if (last_holder) FUZZ_CHECK(intact(leases[i].lease, leases[i].tag));
        if (other) FUZZ_CHECK(throws([&] { other->release(leases[i].lease, s); }) && leases[i].lease.valid());
        pl.release(leases[i].lease, s);
        FUZZ_CHECK(!leases[i].lease.valid());
        spent.push_back(std::move(leases[i].lease));
        leases.erase(leases.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      case 5: {  // misuse of spent leases: double release, use after release / move
        if (spent.empty()) break;
        auto& l = spent[in.in<std::size_t>(0, spent.size() - 1)];
        FUZZ_CHECK(throws([&] { pl.release(l, s); }) && throws([&] { (void)l.bytes(0); }) &&
                   throws([&] { (void)l.size(); }));
        break;
      }
      case 6: {  // moves: the source is empty, overwriting a held lease is refused
        if (leases.empty()) break;
        auto& h = leases[in.in<std::size_t>(0, leases.size() - 1)];
        typename Pool::lease moved(std::move(h.lease));
        FUZZ_CHECK(!h.lease.valid() && moved.valid());
        if (leases.size() > 1) {
          auto& g = leases[(static_cast<std::size_t>(&h - leases.data()) + 1) % leases.size()];
          FUZZ_CHECK(throws([&] { g.lease = std::move(moved); }) && moved.valid() && g.lease.valid());
        }
        h.lease = std::move(moved);
        FUZZ_CHECK(h.lease.valid() && !moved.valid());
        break;
      }
      case 7: {  // can_acquire of a set, with releasable units
        std::vector<std::size_t> want, rel;
        for (int k = in.in<int>(0, 3); k > 0; --k) want.push_back(in.in<std::size_t>(0, p.unit_count() - 1));
        for (int k = in.in<int>(0, 2); k > 0 && !leases.empty(); --k) rel.push_back(leases[in.in<std::size_t>(0, leases.size() - 1)].unit);
        (void)pl.can_acquire(want, rel);  // must not throw for known units
        break;
      }
    }
    // Held units never share bytes.
    std::vector<std::pair<std::byte const*, std::byte const*>> spans;
    std::vector<std::size_t> units;
    for (auto const& h : leases) {
      if (std::find(units.begin(), units.end(), h.unit) != units.end()) continue;
      units.push_back(h.unit);
      for (std::size_t b = 0; b < h.lease.size(); ++b) {
        auto const sp = h.lease.bytes(b);
        spans.emplace_back(sp.data(), sp.data() + sp.size());
      }
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) FUZZ_CHECK(spans[i - 1].second <= spans[i].first);
  }
  for (auto& h : leases)
    if (h.lease.valid()) pl.release(h.lease, s);
  FUZZ_CHECK(pl.stats().slots_in_use == 0);
}

template <class Planner, class Category, class Padding>
void run(pool::workload const& w, pool::plan_options const& o, Padding const& pad, fuzz::input& in) {
  std::optional<pool::plan> p;
  try {
    p.emplace(pool::make_plan<Planner, Category>(w, o, pad));
  } catch (headroom::error const&) {
    // Deterministic refusal too.
    FUZZ_CHECK(throws([&] { (void)pool::make_plan<Planner, Category>(w, o, pad); }));
    return;
  }
  FUZZ_CHECK(o.buffers >= 2 && o.buffers <= pool::max_buffers && headroom::is_power_of_two(o.alignment));
  check_plan<Category>(*p, w, o, pad, std::same_as<Planner, pool::max>);
  FUZZ_CHECK(*p == pool::make_plan<Planner, Category>(w, o, pad));
  FUZZ_CHECK(!p->to_string().empty());
  // Pool phase only when every allocation is small (bucket by bucket: plan::fallback_bytes()
  // is a plain sum and wraps for 2^63-byte buckets).
  constexpr std::uint64_t small = std::uint64_t{1} << 20;
  if (p->arena_bytes > small) return;
  for (std::size_t u = 0; u < p->unit_count(); ++u)
    for (auto b : p->bucket_bytes[u])
      if (b > small) return;
  for (auto b : p->non_unit_bytes)
    if (b > small) return;
  if (in.flag())
    exercise_pool<pool::host_unit_pool<pool::strict, pool::dynamic>>(*p, in);
  else
    exercise_pool<pool::host_unit_pool<pool::first_free, pool::persistent>>(*p, in);
}

template <class Category, class Padding>
void run_planners(pool::workload const& w, pool::plan_options const& o, Padding const& pad, fuzz::input& in) {
  if (in.flag())
    run<pool::max, Category>(w, o, pad, in);
  else
    run<pool::fixed, Category>(w, o, pad, in);
}

template <class Padding>
void run_categories(pool::workload const& w, pool::plan_options const& o, Padding const& pad, fuzz::input& in) {
  if (in.flag())
    run_planners<pool::by_dtype>(w, o, pad, in);
  else
    run_planners<pool::by_bytes>(w, o, pad, in);
}

// ---- interval plans -----------------------------------------------------------------------

pool::execution_order draw_order(fuzz::input& in, std::size_t units) {
  switch (in.in<int>(0, 3)) {
    case 0: return pool::training_order(units);
    case 1: return pool::evaluation_order(units);
    default: {
      pool::execution_order o{"random", {}};
      for (int k = in.in<int>(0, 12); k > 0; --k) o.units.push_back(in.in<std::size_t>(0, units));  // == units: unknown
      return o;
    }
  }
}

// Byte extent [first, last) of each unit's slots.
std::vector<std::pair<std::uint64_t, std::uint64_t>> extents(pool::plan const& p) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out(p.unit_count(), {UINT64_MAX, 0});
  for (std::size_t u = 0; u < p.unit_count(); ++u)
    for (std::size_t b = 0; b < p.bucket_shape[u].size(); ++b) {
      auto const& sl = p.slots[p.slot_index(0, p.bucket_shape[u][b])];
      out[u].first = std::min(out[u].first, sl.offset);
      out[u].second = std::max(out[u].second, sl.offset + sl.bytes);
    }
  return out;
}

void check_interval_plan(pool::plan const& p, pool::workload const& w, std::vector<pool::execution_order> const& orders,
                         std::size_t resident, std::size_t alignment) {
  FUZZ_CHECK(p.buffers == 1 && p.resident == resident && p.orders == orders && p.alignment == alignment);
  FUZZ_CHECK(p.arena_bytes % alignment == 0 && p.pooled_units() == w.units.size());
  for (std::size_t u = 0; u < w.units.size(); ++u)
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b) {
      std::uint32_t const shape = p.bucket_shape[u][b];
      FUZZ_CHECK(shape < p.shapes.size());
      auto const& sl = p.slots[p.slot_index(0, shape)];
      FUZZ_CHECK(sl.offset % alignment == 0 && sl.bytes >= p.bucket_bytes[u][b] && sl.bytes <= p.arena_bytes &&
                 sl.offset <= p.arena_bytes - sl.bytes);
      for (std::size_t c = 0; c < b; ++c) {  // buckets of one unit never overlap
        auto const& other = p.slots[p.slot_index(0, p.bucket_shape[u][c])];
        FUZZ_CHECK(sl.offset + sl.bytes <= other.offset || other.offset + other.bytes <= sl.offset);
      }
    }
  auto const ext = extents(p);
  for (auto const& o : orders) {
    for (std::size_t i = 0; i < o.units.size(); ++i)
      for (std::size_t j = i + 1; j < o.units.size() && j < i + resident; ++j) {
        std::size_t const a = o.units[i], b = o.units[j];
        if (a == b) continue;
        FUZZ_CHECK(ext[a].second <= ext[b].first || ext[b].second <= ext[a].first);
      }
    FUZZ_CHECK(!pool::find_conflict(p, o).has_value());
  }
}

// Follows order `o` with `resident` units alive, writing a tag into each unit's bytes and
// checking it before release; then one acquire off the orders.
template <class Pool>
void follow_order(pool::plan const& p, pool::execution_order const& o, std::size_t resident, fuzz::input& in) {
  inline_stream const s{};
  Pool pl(p, {}, s);
  struct held {
    typename Pool::lease lease;
    std::size_t unit;
  };
  std::vector<held> window;
  auto tag_of = [](std::size_t u) { return static_cast<std::byte>(0x40 + u % 150); };
  auto check_tag = [&](held const& h) {
    for (std::size_t b = 0; b < h.lease.size(); ++b)
      for (std::byte x : h.lease.bytes(b)) FUZZ_CHECK(x == tag_of(h.unit));
  };
  for (std::size_t u : o.units) {
    while (window.size() > resident - 1) {  // N - 1 held while acquiring the next: N alive
      check_tag(window.front());
      pl.release(window.front().lease, s);
      window.erase(window.begin());
    }
    bool const held_already = std::any_of(window.begin(), window.end(), [&](held const& h) { return h.unit == u; });
    auto l = pl.acquire(u, s);  // a registered order never conflicts
    if (!held_already)
      for (std::size_t b = 0; b < l.size(); ++b) std::memset(l.bytes(b).data(), static_cast<int>(tag_of(u)), l.bytes(b).size());
    window.push_back({std::move(l), u});
    for (auto const& h : window) check_tag(h);
  }
  // Off the orders: any unit now, the pool either serves it or refuses with nothing changed.
  std::size_t const u = in.in<std::size_t>(0, p.unit_count() - 1);
  auto const before = pl.stats().slots_in_use;
  try {
    auto l = pl.acquire(u, s);
    pl.release(l, s);
  } catch (headroom::logic_error const&) {
    FUZZ_CHECK(!Pool::off_trace_type::fallback && pl.stats().slots_in_use == before);
  }
  for (auto& h : window)
    if (h.lease.valid()) pl.release(h.lease, s);
  FUZZ_CHECK(pl.stats().slots_in_use == 0);
}

template <class Padding>
void run_interval(pool::workload const& w, Padding const& pad, fuzz::input& in) {
  // Buckets of any size: beyond 2^62 bytes in all the planner refuses the workload
  // (capacity_error), below it the plan's offsets and arena are checked exactly.
  std::vector<pool::execution_order> orders;
  for (int k = in.in<int>(0, 2); k >= 0; --k) orders.push_back(draw_order(in, w.units.size()));
  if (in.in<int>(0, 15) == 0) orders.clear();
  pool::interval_options o;
  o.resident = in.in<std::size_t>(0, 4);
  o.alignment = in.in<int>(0, 15) == 0 ? in.take<std::size_t>() : std::size_t{1} << in.in<int>(0, 10);
  std::optional<pool::plan> p;
  try {
    p.emplace(pool::make_interval_plan(w, std::span<pool::execution_order const>(orders), o, pad));
  } catch (headroom::error const&) {
    FUZZ_CHECK(throws([&] { (void)pool::make_interval_plan(w, std::span<pool::execution_order const>(orders), o, pad); }));
    return;
  }
  std::size_t longest = 0;
  for (auto const& order : orders) longest = std::max(longest, order.units.size());
  FUZZ_CHECK(o.resident >= 2 && !orders.empty() && headroom::is_power_of_two(o.alignment));
  // N beyond the longest order: every unit of it alive together, planned as N = its length.
  std::size_t const resident = std::min(o.resident, std::max<std::size_t>(longest, 2));
  check_interval_plan(*p, w, orders, resident, o.alignment);
  FUZZ_CHECK(*p == pool::make_interval_plan(w, std::span<pool::execution_order const>(orders), o, pad));
  if (p->arena_bytes > (std::uint64_t{1} << 20)) return;
  for (auto const& n : w.non_unit)
    if (pad.padded_bytes(n) > (std::uint64_t{1} << 20)) return;
  auto const& order = orders[in.in<std::size_t>(0, orders.size() - 1)];
  if (in.flag())
    follow_order<pool::host_unit_pool<pool::strict, pool::dynamic, pool::record_at_release, pool::reject_off_trace>>(*p, order, resident, in);
  else
    follow_order<pool::host_unit_pool<pool::first_free, pool::dynamic, pool::record_at_release, pool::fallback_off_trace>>(*p, order, resident, in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  fuzz::input in(data, size);
  pool::workload const w = draw_workload(in);
  pool::plan_options o;
  o.buffers = in.in<int>(0, 15) == 0 ? in.take<std::size_t>() : in.in<std::size_t>(2, 4);
  o.alignment = in.in<int>(0, 15) == 0 ? in.take<std::size_t>() : std::size_t{1} << in.in<int>(0, 12);
  if (in.in<int>(0, 3) == 0) {  // the execution-order (interval) planner
    run_interval(w, pool::no_padding{}, in);
    return 0;
  }
  switch (in.in<int>(0, 2)) {
    case 0: run_categories(w, o, pool::no_padding{}, in); break;
    case 1: run_categories(w, o, pool::pad_elements{in.in<int>(0, 7) == 0 ? in.take<std::uint64_t>() : in.in<std::uint64_t>(1, 64)}, in); break;
    default: run_categories(w, o, pool::align_bytes<256>{}, in); break;
  }
  return 0;
}
