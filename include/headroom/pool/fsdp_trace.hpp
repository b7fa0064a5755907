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
// Or, for buckets an adapter declared itself (its own ids, several a unit, requests it padded):
//   pool::models::fsdp_requests const r{.units = {{{7, 4352}, {9, 512}}, {{3, 4352}}}};  // (bucket, bytes)
//   pool::models::record_fsdp_step(t, r, pool::models::fsdp_buffer::grads, {.request_multiple = 1});
//
// Execution model. A pass visits units in order (forward 0 .. n-1; backward n-1 .. 0); at the
// compute of entry k the entries up to k + prefetch are acquired (prefetch stops at a unit that is
// still held), and entry k's unit is released after its compute. params: every micro-batch runs a
// forward and a backward pass (with recompute, each backward entry is preceded by a recompute
// entry of the same unit: two leases); an eval step runs one forward pass. grads: during the
// backward pass, a unit's gradient buckets are acquired at its backward compute and released
// `grad_depth` backward computes later (the reduce-scatter that reads them is done), the rest at
// the end of the pass. Buckets outside every unit (the embedding and output layer) are held for
// the whole micro-batch. Within a unit, buckets are acquired and released in the order listed.
// Requests are the bucket's bytes (the workload's, or the ones listed) rounded up to
// `request_multiple` (Megatron pads buckets to the data-parallel size; 1: as given). With the
// defaults (prefetch 1, grad_depth 1) this is Megatron-FSDP's ParamAndGradBuffer with overlapped
// communication: weights all-gathered one unit ahead, released after the unit's forward and again
// after its backward; a unit's gradient buckets held from its backward until two units later
// (GradReducePipeline's double-buffer limit), the last two released at the end of the pass.
// This is a model: a real run's trace (PoolAllocator.trace in headroom.torch.megatron_fsdp) is
// what to plan where it differs.
//
// Bad input is refused before anything is recorded (the trace is left as it was), with an
// invalid_argument naming the value: micro_batches or request_multiple 0; no units, a unit
// without buckets, a bucket listed twice (in one unit or two, or also outside every unit), a
// bucket the trace never declared, 0 bytes, a request beyond 2^62. logic_error when the trace
// holds a bucket (a step is recorded whole, from a step boundary).
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

/// One bucket of a step: its id in the trace and its bytes (rounded up to request_multiple for
/// each acquire).
struct fsdp_request {
  std::uint64_t bucket = 0;
  std::uint64_t bytes = 0;

  friend bool operator==(fsdp_request const&, fsdp_request const&) = default;
};

/// The buckets of a step, by unit.
struct fsdp_requests {
  std::vector<std::vector<fsdp_request>> units{};  ///< each unit's buckets, units in forward order
  std::vector<fsdp_request> non_unit{};          ///< held for every micro-batch (params only)
};

namespace detail {

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

// The header comment's checks, before anything is recorded.
inline void check_fsdp_step(lease_trace const& t, fsdp_requests const& r, fsdp_step const& s) {
  constexpr char const* where = "pool::models::record_fsdp_step: ";
  expects(s.micro_batches >= 1, where, "micro_batches = ", s.micro_batches, "; expected >= 1");
  expects(s.request_multiple >= 1, where, "request_multiple = ", s.request_multiple, "; expected >= 1");
  expects(!r.units.empty(), where, "no units; expected at least one unit of (bucket, bytes)");
  expects<logic_error>(t.held().empty(), where, "the trace holds ", t.held().size(), " bucket(s) (first: ",
                       t.held().empty() ? 0 : *t.held().begin(), "); expected a step boundary before a step");
  std::set<std::uint64_t> seen;
  auto const check = [&](fsdp_request const& q, auto const&... at) {
    expects(seen.insert(q.bucket).second, where, "bucket ", q.bucket, " is listed twice (again ", at...,
            "); expected each bucket once");
    expects(t.find(q.bucket) != nullptr, where, "bucket ", q.bucket, " (", at...,
            ") was never declared in the trace; expected a declared bucket");
    expects(q.bytes > 0, where, "bucket ", q.bucket, " (", at..., ") has 0 bytes; expected > 0");
    expects(q.bytes <= max_workload_bytes && round_up(q.bytes, s.request_multiple) <= max_workload_bytes, where, "bucket ", q.bucket, " (", at...,
            ") asks ", q.bytes, " bytes, rounded up to a multiple of ", s.request_multiple,
            "; expected at most 2^62");
  };
  for (std::size_t u = 0; u < r.units.size(); ++u) {
    expects(!r.units[u].empty(), where, "unit ", u, " has no buckets; expected at least one (bucket, bytes)");
    for (auto const& q : r.units[u]) check(q, "in unit ", u);
  }
  for (auto const& q : r.non_unit) check(q, "outside every unit");
}

}  // namespace detail

/// Records one step of `what` (header comment) over buckets the trace declares, and its step
/// boundary. Throws as the header comment says, recording nothing.
inline void record_fsdp_step(lease_trace& t, fsdp_requests const& r, fsdp_buffer what, fsdp_step const& s = {}) {
  detail::check_fsdp_step(t, r, s);
  auto const take_all = [&](std::vector<fsdp_request> const& v) {
    for (auto const& q : v) t.acquire(q.bucket, round_up(q.bytes, s.request_multiple));
  };
  auto const give_all = [&](std::vector<fsdp_request> const& v) {
    for (auto const& q : v) t.release(q.bucket);
  };
  auto const take = [&](std::size_t u) { take_all(r.units[u]); };
  auto const give = [&](std::size_t u) { give_all(r.units[u]); };
  std::size_t const n = r.units.size();
  std::vector<std::size_t> forward, backward;
  for (std::size_t u = 0; u < n; ++u) forward.push_back(u);
  for (std::size_t u = n; u-- > 0;) {
    if (s.recompute) backward.push_back(u);
    backward.push_back(u);
  }
  for (std::size_t mb = 0; mb < (s.train ? s.micro_batches : 1); ++mb) {
    if (what == fsdp_buffer::params) {
      take_all(r.non_unit);
      detail::fsdp_pass(forward, s.prefetch, take, give, [](std::size_t) {});
      if (s.train) detail::fsdp_pass(backward, s.prefetch, take, give, [](std::size_t) {});
      give_all(r.non_unit);
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
  }
  t.end_step();
}

/// Records one step of `what` for `w` (header comment) and its step boundary. The trace must
/// declare `w`'s buckets as declare_fsdp_buckets does. Throws as the overload above, and for a
/// workload validate() refuses.
inline void record_fsdp_step(lease_trace& t, workload const& w, fsdp_buffer what, fsdp_step const& s = {}) {
  validate(w);
  fsdp_requests r;
  std::uint64_t id = 0;
  for (auto const& u : w.units) {
    auto& v = r.units.emplace_back();
    for (auto const& b : u.buckets) v.push_back({id++, b.bytes});
  }
  for (auto const& b : w.non_unit) r.non_unit.push_back({id++, b.bytes});
  record_fsdp_step(t, r, what, s);
}

}  // namespace headroom::pool::models
