// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// plan_buffers: every buffer one rank's step needs, as fixed offsets in one arena, planned before
// a byte is allocated.
//
//   auto plan = pipeline::plan_buffers(sched, bytes, pipeline::retention::reduced{});
//   plan.rank(r).arena_bytes      // one allocation holds the whole step of rank r
//   plan.rank(r).bound            // most (aligned) bytes live at once: the lower bound
//   plan.rank(r).peak             // predict_memory's peak (== bound when sizes are aligned)
//   plan.rank(r).buffers[k]       // the k-th buffer the executor allocates: role, micro-batch,
//                                 // stage, bytes, lifetime (points), offset
//
// The buffers and their lifetimes are the memory model's own (detail/buffer_walk.hpp: received
// activations and gradients, outputs, stashes, input gradients, weight stashes, and the outputs
// the retention keeps until the end), in the order the executor allocates them. A buffer is live
// from the point that allocates it through the point that releases it (a point is an action, or
// a grouped run of transfers: its allocations come before its releases). The offsets come from
// pool::pack_lifetimes (its greedy placements, then, when they miss the bound, its exact search
// over all the rank's buffers within a node budget): buffers live at the same point never share a
// byte; `optimal` says the arena is at its minimum (at the bound, or proven by exact search).
//
// Receive slots, the count PyTorch's receive-buffer pools report (#196465): the received buffers
// (activations of recv_forward, gradients of recv_backward) of a rank, with one pool per stage
// and direction (`receive_slots_separate`) or one pool per rank (`receive_slots_shared`); a pool
// needs, per payload size, as many slots as buffers of that size are live at once.
//
// pipeline/buffer_arena.hpp runs the executor on such a plan with no allocation during a step.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pipeline/detail/buffer_walk.hpp"
#include "headroom/pipeline/detail/per_rank_plan.hpp"
#include "headroom/pipeline/memory_model.hpp"
#include "headroom/pipeline/output_lifetime.hpp"
#include "headroom/pipeline/retention.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/stage_bytes.hpp"
#include "headroom/pipeline/transfer_grouping.hpp"
#include "headroom/pool/lifetime_pack.hpp"

namespace headroom::pipeline {

struct buffer_plan_options {
  std::size_t alignment = default_alignment;  ///< arena offset alignment (sizes are rounded up to it)
  /// When the greedy packings miss the bound, an exact search over every buffer of the rank, for
  /// at most this many nodes (pool::pack_options::node_limit; 0: keep the greedy packing).
  std::uint64_t exact_nodes = 20'000;
};

struct planned_buffer {
  buffer_role role = buffer_role::input;
  int microbatch = 0;
  int stage = 0;                 ///< virtual stage of the action that allocates it
  std::uint64_t bytes = 0;       ///< what the executor asks for
  std::size_t allocated_at = 0;  ///< point (see above)
  std::size_t released_at = 0;   ///< point; == points when held at the end of the step
  std::uint64_t offset = 0;      ///< from the arena base, a multiple of the alignment
  bool held_at_end = false;      ///< kept output (retention::all): returned with the step's result

  friend bool operator==(planned_buffer const&, planned_buffer const&) = default;
  friend std::ostream& operator<<(std::ostream& os, planned_buffer const& b) {
    return os << name_of(b.role) << " of micro-batch " << b.microbatch << " stage " << b.stage << " (" << b.bytes
              << " bytes at " << b.offset << ", points " << b.allocated_at << ".."
              << (b.held_at_end ? std::string("end") : std::to_string(b.released_at)) << ")";
  }
};

struct rank_buffers {
  int rank = 0;
  std::vector<planned_buffer> buffers;  ///< in the executor's allocation order
  std::size_t points = 0;               ///< points of the rank's step
  std::uint64_t arena_bytes = 0;
  std::uint64_t bound = 0;              ///< most aligned bytes live at one point
  std::int64_t peak = 0;                ///< predict_memory's peak for the same policies
  std::string method;                   ///< the packing that won (pool::lifetime_packing::method)
  bool optimal = false;                 ///< arena_bytes proven minimal
  std::size_t receive_slots_separate = 0;  ///< one pool per (stage, direction)
  std::size_t receive_slots_shared = 0;    ///< one pool per rank

  /// [allocated_at, released_at + 1): the lifetime pack_lifetimes placed.
  [[nodiscard]] pool::lifetime lifetime_of(std::size_t k) const {
    expects(k < buffers.size(), "pipeline::rank_buffers::lifetime_of: buffer ", k, " out of range [0, ", buffers.size(), ")");
    return {buffers[k].allocated_at, buffers[k].released_at + 1};
  }
};

class buffer_plan : public detail::per_rank_plan<rank_buffers> {
 public:
  buffer_plan(std::string schedule_name, pipeline_shape shape, std::string_view retention, std::string_view lifetime,
              std::string_view grouping, std::size_t alignment, std::vector<rank_buffers> ranks)
      : per_rank_plan("pipeline::buffer_plan::rank", std::move(schedule_name), shape, retention, lifetime, grouping,
                      std::move(ranks)),
        alignment_(alignment) {}

  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }

  friend std::ostream& operator<<(std::ostream& os, buffer_plan const& p) {
    os << "buffer plan " << p.schedule_name() << " (" << p.shape() << ", retention " << p.retention() << ", outputs "
       << p.lifetime() << ", transfers " << p.transfers() << ", alignment " << p.alignment_ << ")\n";
    for (auto const& r : p.ranks())
      os << "  rank " << r.rank << ": " << r.buffers.size() << " buffers, arena " << format_bytes(r.arena_bytes)
         << " (bound " << format_bytes(r.bound) << ", peak " << format_bytes(static_cast<std::uint64_t>(r.peak)) << ", "
         << r.method << (r.optimal ? ", optimal" : "") << "), receive slots " << r.receive_slots_separate
         << " separate / " << r.receive_slots_shared << " shared\n";
    return os;
  }

 private:
  std::size_t alignment_;
};

namespace detail {

// Slots a pool of received buffers needs: per payload size, the most buffers of that size live at
// one point; `key` says which pool a buffer goes to.
template <class Key>
std::size_t receive_slots(rank_walk const& w, schedule const& s, Key&& key) {
  using pool_key = std::tuple<int, int, std::uint64_t>;  // pool, direction-or-0, size
  std::map<pool_key, std::vector<std::pair<std::size_t, int>>> events;  // point, +1 / -1 (ends first)
  for (auto const& b : w.buffers) {
    if (b.role != buffer_role::input && b.role != buffer_role::grad_output) continue;  // received only
    auto& e = events[key(b, s)];
    e.push_back({b.allocated_at, +1});
    e.push_back({b.released_at + 1, -1});
  }
  std::size_t total = 0;
  for (auto& [k, e] : events) {
    std::sort(e.begin(), e.end());  // at equal points -1 sorts first: [a, t) and [t, b) do not meet
    int live = 0, most = 0;
    for (auto const& [t, d] : e) most = std::max(most, live += d);
    total += static_cast<std::size_t>(most);
  }
  return total;
}

}  // namespace detail

/// Plans every rank's buffers for one step of `s` with costs `bytes` under retention R, output
/// lifetime O and transfer grouping T. Validates like predict_memory (invalid_argument,
/// capacity_error); invalid_argument for an alignment that is not a power of two.
template <output_retention R, output_lifetime O = outputs::freed_when_sent, transfer_grouping T = transfers::one_by_one>
[[nodiscard]] buffer_plan plan_buffers(schedule const& s, model_bytes const& bytes, R r = {}, O o = {}, T t = {},
                                       buffer_plan_options const& options = {}) {
  expects(is_power_of_two(options.alignment), "pipeline::plan_buffers: alignment ", options.alignment,
          " is not a power of two");
  auto const memory = predict_memory(s, bytes, r, o, t);  // validates s and bytes
  auto const& where = s.placement();
  std::vector<rank_buffers> out;
  for (int rank = 0; rank < s.shape().stages; ++rank) {
    auto const w = detail::walk_rank<R, O, T>(s, bytes, rank, "pipeline::plan_buffers");
    rank_buffers rb;
    rb.rank = rank;
    rb.points = w.points.size();
    rb.peak = memory.rank(rank).peak;
    std::vector<pool::lifetime_item> items;
    items.reserve(w.buffers.size());
    for (auto const& b : w.buffers) {
      rb.buffers.push_back({b.role, b.microbatch, b.stage, b.bytes, b.allocated_at, b.released_at, 0, w.held_at_end(b)});
      items.push_back({b.bytes, {{b.allocated_at, b.released_at + 1}}});
    }
    if (!items.empty()) {
      auto packed = pool::pack_lifetimes(items, {.alignment = options.alignment});
      if (!packed.optimal && options.exact_nodes > 0) {  // the greedy placements missed: search
        auto exact = pool::pack_lifetimes(
            items, {.alignment = options.alignment, .exact_items = items.size(), .node_limit = options.exact_nodes});
        if (exact.arena_bytes < packed.arena_bytes) packed = std::move(exact);
      }
      for (std::size_t k = 0; k < items.size(); ++k) rb.buffers[k].offset = packed.offsets[k];
      rb.arena_bytes = packed.arena_bytes;
      rb.bound = packed.bound;
      rb.method = packed.method;
      rb.optimal = packed.optimal;
    } else {
      rb.method = "empty";
      rb.optimal = true;
    }
    rb.receive_slots_separate = detail::receive_slots(w, s, [&](detail::walk_buffer const& b, schedule const&) {
      return std::tuple<int, int, std::uint64_t>{where.chunk_of(b.stage), static_cast<int>(b.role), b.bytes};
    });
    rb.receive_slots_shared = detail::receive_slots(w, s, [](detail::walk_buffer const& b, schedule const&) {
      return std::tuple<int, int, std::uint64_t>{0, 0, b.bytes};
    });
    out.push_back(std::move(rb));
  }
  return buffer_plan(s.name(), s.shape(), R::name, O::name, T::name, options.alignment, std::move(out));
}

}  // namespace headroom::pipeline
