// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Lease traces of a modelled Megatron-FSDP run (ZeRO-3, double buffer), for planning before a
// run and for tests: the same requests a real run's allocator records, in a simple execution model.
//
//   auto t = pool::models::declare_fsdp_buckets(w);                     // bucket ids: units in order
//   pool::models::record_fsdp_step(t, w, pool::models::fsdp_buffer::params, {.micro_batches = 2});
//   auto const p = pool::plan_lifetimes(t);
//
// Execution model. A pass visits units in order (forward 0 .. n-1; backward n-1 .. 0); at the
// compute of entry k the entries up to k + prefetch are acquired (prefetch stops at a unit that is
// still held), and entry k's unit is released after its compute. params: every micro-batch runs a
// forward and a backward pass (with recompute, each backward entry is preceded by a recompute
// entry of the same unit: two leases); an eval step runs one forward pass. grads: during the
// backward pass, a unit's gradient buckets are acquired at its backward compute and released
// `grad_depth` backward computes later (the reduce-scatter that reads them is done), the rest at
// the end of the pass. Buckets outside every unit (the embedding and output layer) are held for
// the whole micro-batch. Requests are the declared bytes rounded up to `request_multiple`
// (Megatron pads buckets to the data-parallel size). This is a model: a real run's trace
// (PoolAllocator.trace in headroom.torch.megatron_fsdp) is what to plan where it differs.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/lease_trace.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool::models {

enum class fsdp_buffer : std::uint8_t { params, grads };

struct fsdp_step {
  bool train = true;               ///< false: an eval step (forward only; no gradients)
  std::size_t micro_batches = 1;   ///< gradient accumulation: forward + backward per micro-batch
  bool recompute = false;          ///< activation recompute: a second parameter lease per backward unit
  std::size_t prefetch = 1;        ///< units acquired ahead of the one computed (1: double buffer)
  std::size_t grad_depth = 1;      ///< backward computes a gradient bucket outlives its own
  std::uint64_t request_multiple = 4096;
};

/// A trace declaring every bucket of `w`: unit u's buckets, then the non-unit ones (unit none),
/// ids from 0 in that order, each with its dtype name and bytes; group 0.
[[nodiscard]] inline lease_trace declare_fsdp_buckets(workload const& w) {
  validate(w);
  lease_trace t;
  std::uint64_t id = 0;
  for (std::size_t u = 0; u < w.units.size(); ++u)
    for (auto const& b : w.units[u].buckets) t.declare({id++, u, 0, std::string(name_of(b.type)), b.bytes});
  for (auto const& b : w.non_unit) t.declare({id++, no_trace_unit, 0, std::string(name_of(b.type)), b.bytes});
  return t;
}

namespace detail {

struct fsdp_ids {
  std::vector<std::vector<std::uint64_t>> unit;  // bucket ids of each unit
  std::vector<std::uint64_t> non_unit;
};

inline fsdp_ids ids_of(workload const& w) {
  fsdp_ids out;
  std::uint64_t id = 0;
  for (auto const& u : w.units) {
    auto& v = out.unit.emplace_back();
    for (std::size_t b = 0; b < u.buckets.size(); ++b) v.push_back(id++);
  }
  for (std::size_t b = 0; b < w.non_unit.size(); ++b) out.non_unit.push_back(id++);
  return out;
}

// One pass over `order` with prefetch; on_compute(k) runs at each entry's compute.
template <class Acquire, class Release, class Compute>
void fsdp_pass(std::vector<std::size_t> const& order, std::size_t prefetch, Acquire&& acquire, Release&& release,
               Compute&& on_compute) {
  std::set<std::size_t> held;
  std::size_t next = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    while (next < order.size() && next <= k + prefetch && !held.contains(order[next])) {
      acquire(order[next]);
      held.insert(order[next++]);
    }
    on_compute(k);
    release(order[k]);
    held.erase(order[k]);
  }
}

}  // namespace detail

/// Records one step of `what` (header comment) and its step boundary. The trace must declare
/// `w`'s buckets as declare_fsdp_buckets does. Throws invalid_argument for micro_batches = 0 or
/// request_multiple = 0.
inline void record_fsdp_step(lease_trace& t, workload const& w, fsdp_buffer what, fsdp_step const& s = {}) {
  expects(s.micro_batches >= 1, "pool::models::record_fsdp_step: micro_batches = 0; expected >= 1");
  expects(s.request_multiple >= 1, "pool::models::record_fsdp_step: request_multiple = 0; expected >= 1");
  auto const ids = detail::ids_of(w);
  auto const request = [&](std::uint64_t id) { return round_up(t.find(id)->bytes, s.request_multiple); };
  auto const take = [&](std::size_t u) {
    for (auto id : ids.unit[u]) t.acquire(id, request(id));
  };
  auto const give = [&](std::size_t u) {
    for (auto id : ids.unit[u]) t.release(id);
  };
  std::size_t const n = w.units.size();
  std::vector<std::size_t> forward, backward;
  for (std::size_t u = 0; u < n; ++u) forward.push_back(u);
  for (std::size_t u = n; u-- > 0;) {
    if (s.recompute) backward.push_back(u);
    backward.push_back(u);
  }
  for (std::size_t mb = 0; mb < (s.train ? s.micro_batches : 1); ++mb) {
    if (what == fsdp_buffer::params)
      for (auto id : ids.non_unit) t.acquire(id, request(id));
    if (what == fsdp_buffer::params) {
      detail::fsdp_pass(forward, s.prefetch, take, give, [](std::size_t) {});
      if (s.train) detail::fsdp_pass(backward, s.prefetch, take, give, [](std::size_t) {});
    } else if (s.train) {
      // Gradients: the backward computes (the second entry of a unit when recomputing).
      std::deque<std::size_t> pending;
      for (std::size_t k = 0; k < backward.size(); ++k) {
        if (s.recompute && (k % 2 == 0)) continue;
        take(backward[k]);
        pending.push_back(backward[k]);
        if (pending.size() > s.grad_depth) {
          give(pending.front());
          pending.pop_front();
        }
      }
      for (auto u : pending) give(u);
    }
    if (what == fsdp_buffer::params)
      for (auto id : ids.non_unit) t.release(id);
  }
  t.end_step();
}

}  // namespace headroom::pool::models
