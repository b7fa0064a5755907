// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Megatron-FSDP 0.6.1's MaxPoolAllocator replayed on a lease trace (plan_lifetimes' `max` and
// `by_bytes` candidates).
//
// Planning (_build_fixed_max_pool): units in order of their first bucket id; per unit and key (the
// dtype for `max`, one key "bytes" for `by_bytes`; each trace group has its own keys, as one
// allocator each), the unit's buckets sorted by (declared bytes, bucket id) descending; the i-th
// takes offset i of its key. Run time (allocate / free): a bucket takes its pinned buffer group's
// slot (group, key, offset) when idle, else the lowest idle group (pinning it there at its first
// allocation only); free makes the slot idle. Megatron allocates a slot's buffer lazily at its
// largest request, so a slot holds the largest request made of it. Megatron has `size` groups and
// asserts when none is idle; the replay opens one more group instead (the lowest idle group is the
// same whenever Megatron's groups suffice). The arena lays slots out group-major, keys in
// first-appearance order, offsets in order, each aligned.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/pool/lease_trace.hpp"

namespace headroom::pool::detail {

struct replay_result {
  std::map<std::uint64_t, std::uint64_t> offset;  // bucket -> its pinned slot's arena offset
  // bucket -> its slot in the other groups (offset, bytes), in group order: where Megatron serves
  // it when its pinned slot is busy.
  std::map<std::uint64_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> alternatives;
  std::uint64_t arena = 0;
  std::size_t groups = 0;                          // buffer groups used
  std::size_t moved = 0;                           // acquires served away from the pinned group
};

inline replay_result replay_maxpool(lease_trace const& t, bool by_bytes, std::size_t alignment) {
  // Keys: (trace group, dtype or "bytes"), in first-appearance order.
  std::vector<std::pair<std::uint64_t, std::string>> keys;
  auto key_of = [&](trace_bucket const& b) {
    std::pair<std::uint64_t, std::string> k{b.group, by_bytes ? std::string("bytes") : b.dtype};
    auto it = std::find(keys.begin(), keys.end(), k);
    if (it == keys.end()) it = keys.insert(keys.end(), std::move(k));
    return static_cast<std::size_t>(it - keys.begin());
  };
  std::vector<trace_bucket const*> by_id;
  for (auto const& b : t.buckets())
    if (b.unit != no_trace_unit) by_id.push_back(&b);
  std::sort(by_id.begin(), by_id.end(), [](auto a, auto b) { return a->id < b->id; });
  std::vector<std::uint64_t> unit_order;
  std::map<std::uint64_t, std::vector<trace_bucket const*>> unit_buckets;
  for (auto const* b : by_id) {
    if (!unit_buckets.contains(b->unit)) unit_order.push_back(b->unit);
    unit_buckets[b->unit].push_back(b);
  }
  struct position {
    std::size_t key;
    std::size_t ordinal;
  };
  std::map<std::uint64_t, position> pos;
  std::vector<std::size_t> slots_of_key;
  for (auto u : unit_order) {
    std::vector<std::size_t> unit_keys;
    std::map<std::size_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> per_key;
    for (auto const* b : unit_buckets[u]) {
      std::size_t const k = key_of(*b);
      if (!per_key.contains(k)) unit_keys.push_back(k);
      per_key[k].emplace_back(b->bytes, b->id);
    }
    for (auto k : unit_keys) {
      auto& list = per_key[k];
      std::sort(list.begin(), list.end(), [](auto const& a, auto const& b) { return a > b; });
      if (slots_of_key.size() <= k) slots_of_key.resize(k + 1, 0);
      slots_of_key[k] = std::max(slots_of_key[k], list.size());
      for (std::size_t i = 0; i < list.size(); ++i) pos[list[i].second] = {k, i};
    }
  }
  // Run time. Slot (group, key, ordinal): idle flag and largest request.
  struct slot_state {
    bool busy = false;
    std::uint64_t bytes = 0;
  };
  std::vector<std::map<std::pair<std::size_t, std::size_t>, slot_state>> group_slots;
  std::map<std::uint64_t, std::size_t> pinned, held;
  replay_result r;
  for (auto const& e : t.events()) {
    if (e.kind == lease_event_kind::step) continue;
    auto const p = pos.find(e.bucket);
    if (p == pos.end()) continue;  // outside every unit: Megatron's backup allocator serves it
    std::pair<std::size_t, std::size_t> const at{p->second.key, p->second.ordinal};
    if (e.kind == lease_event_kind::release) {
      group_slots[held.at(e.bucket)][at].busy = false;
      held.erase(e.bucket);
      continue;
    }
    auto const pin = pinned.find(e.bucket);
    std::size_t g = 0;
    if (pin != pinned.end() && !group_slots[pin->second][at].busy) {
      g = pin->second;
    } else {
      while (g < group_slots.size() && group_slots[g][at].busy) ++g;
      if (g == group_slots.size()) group_slots.emplace_back();
      if (pin == pinned.end()) pinned[e.bucket] = g;
      else ++r.moved;
    }
    auto& s = group_slots[g][at];
    s.busy = true;
    s.bytes = std::max(s.bytes, e.bytes);
    held[e.bucket] = g;
  }
  // Layout, group-major.
  r.groups = group_slots.size();
  std::map<std::tuple<std::size_t, std::size_t, std::size_t>, std::pair<std::uint64_t, std::uint64_t>> where;
  std::uint64_t cursor = 0;
  for (std::size_t g = 0; g < group_slots.size(); ++g)
    for (std::size_t k = 0; k < slots_of_key.size(); ++k)
      for (std::size_t i = 0; i < slots_of_key[k]; ++i) {
        auto const s = group_slots[g].find({k, i});
        std::uint64_t const bytes = s == group_slots[g].end() ? 0 : s->second.bytes;
        cursor = align_up(cursor, alignment);
        where[{g, k, i}] = {cursor, bytes};
        cursor += bytes;
      }
  r.arena = align_up(cursor, alignment);
  for (auto const& [b, g] : pinned) {
    auto const [k, i] = pos.at(b);
    r.offset[b] = where.at({g, k, i}).first;
    auto& alt = r.alternatives[b];
    for (std::size_t other = 0; other < group_slots.size(); ++other)
      if (other != g && where.at({other, k, i}).second > 0) alt.push_back(where.at({other, k, i}));
  }
  return r;
}

}  // namespace headroom::pool::detail
