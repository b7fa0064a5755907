// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// unit_pool: fixed-address buffers for the units of a plan, in one arena.
//
//   auto plan = pool::make_plan<pool::max>(workload, {.buffers = 2});
//   pool::unit_pool<stream_view, cuda::event, cuda::device_resource> pool(plan, resource, stream);
//   auto lease = pool.acquire(unit, all_gather_stream);   // spans at fixed addresses
//   ... all-gather into lease.bytes(0), compute ...
//   pool.release(lease, compute_stream);                  // stream-ordered, host never blocks
//
// The arena is one upstream allocation of plan.arena_bytes, made at construction (so it can be
// registered with NCCL once and captured in CUDA graphs). Buckets of units the plan leaves out,
// and non-unit buckets, follow the NonUnit policy (dynamic: upstream allocate/deallocate at each
// acquire/release; persistent: one buffer each, allocated at construction in plan order).
//
// Stream order: a release on s is followed by one event on s, whatever the unit's bucket count;
// every slot it frees remembers that event. The next acquire of such a slot on another stream
// makes that stream wait for the event on the device, once per distinct event however many of
// its slots it takes; on s itself nothing is needed. The host never blocks. ReleaseOrder says
// when the event is recorded (policies.hpp): by default at release when the lease was acquired
// on another stream (FSDP: prefetch on a collective stream, release on the compute stream), and
// otherwise only if another stream reuses the slot, at that reuse.
//
// Interval plans (make_interval_plan: one slot per bucket, units that are never resident
// together share bytes): acquiring a unit whose bytes a held unit occupies follows OffTrace
// (reject_off_trace throws naming both units; fallback_off_trace takes upstream buffers and
// counts them). Overlapping memory is never handed out. An acquire there waits on the releases
// of the units sharing its bytes, except those its stream already waits on.
//
// Holding: acquiring a unit that is already held returns another lease on the same slots
// (Megatron's re-fetch); the slots are freed when the last lease is released.
//
// Failure: an acquire that throws (no free slot, a CUDA error in a wait, upstream's error) leaves
// the pool as it was, and its retry waits as the first attempt would have; a release whose
// event record throws leaves the lease held.
//
// Not thread-safe: one host thread drives a pool (as one rank's FSDP engine does).
//
// Synchronising calls: construction and destruction call the upstream (cuda::device_resource:
// cudaMalloc / cudaFree; nccl::nccl_mem_resource: ncclMemAlloc / ncclMemFree; both deallocate
// after cudaStreamSynchronize). Under NonUnit = dynamic, so do acquire and release of a target
// with buckets outside the arena (units the plan leaves out, non-unit buckets, and under
// fallback_off_trace an off-trace acquire, whatever NonUnit is): there the host
// does block, and in a process that drives several GPUs from threads such a call between
// collectives can deadlock against a peer's NCCL kernel waiting for this rank. Build the pool
// before the collectives and destroy it after; between collectives, acquire only pooled units,
// or use NonUnit = persistent.
#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/pool/detail/capture_state.hpp"
#include "headroom/pool/detail/off_trace.hpp"
#include "headroom/pool/detail/stream_order.hpp"
#include "headroom/pool/interval.hpp"
#include "headroom/pool/lease.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/pool_stats.hpp"

namespace headroom::pool {

template <class Stream, class Event, class Upstream, class Assignment = strict, class NonUnit = dynamic,
          class ReleaseOrder = record_if_cross_stream, class OffTrace = reject_off_trace>
  requires stream<Stream> && event<Event, Stream> && std::default_initializable<Event> &&
           stream_resource<Upstream, Stream>
class unit_pool {
  // The policies are positional tags, easy to put in the wrong slot: static_asserts, so such a
  // mistake stops at a sentence naming the slot and its choices (the substrate types above keep
  // their requires clause: the concept that fails names what is wrong).
  static_assert(assignment_policy<Assignment>,
                "pool::unit_pool<Stream, Event, Upstream, Assignment>: Assignment is not a pool::assignment_policy; "
                "use pool::strict or pool::first_free (NonUnit, ReleaseOrder and OffTrace come after it)");
  static_assert(non_unit_policy<NonUnit>,
                "pool::unit_pool<Stream, Event, Upstream, Assignment, NonUnit>: NonUnit is not a "
                "pool::non_unit_policy; use pool::dynamic or pool::persistent");
  static_assert(release_order_policy<ReleaseOrder>,
                "pool::unit_pool<Stream, Event, Upstream, Assignment, NonUnit, ReleaseOrder>: ReleaseOrder is not a "
                "pool::release_order_policy; use pool::record_if_cross_stream, pool::record_at_release or "
                "pool::record_at_reuse");
  static_assert(off_trace_policy<OffTrace>,
                "pool::unit_pool<Stream, Event, Upstream, Assignment, NonUnit, ReleaseOrder, OffTrace>: OffTrace is "
                "not a pool::off_trace_policy; use pool::reject_off_trace or pool::fallback_off_trace");

  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

 public:
  using stream_type = Stream;
  using event_type = Event;
  using upstream_type = Upstream;
  using assignment_type = Assignment;
  using non_unit_type = NonUnit;
  using release_order_type = ReleaseOrder;
  using off_trace_type = OffTrace;

  /// A unit's (or non-unit bucket's) buffers while held (lease.hpp). Move-only; release it
  /// through the pool.
  using lease = unit_lease<unit_pool>;
  friend lease;
  template <class Pool>
  friend class capture_scope;  // capture.hpp

  /// Allocates the arena (and persistent buffers) from `upstream` on `stream`, which is also
  /// the stream the memory is returned on when the pool dies.
  unit_pool(plan p, Upstream upstream, Stream const& stream, Assignment assignment = {})
      : plan_(std::move(p)), upstream_(std::move(upstream)), home_(stream), assignment_(std::move(assignment)) {
    bool const grid = plan_.resident == 0 && plan_.buffers >= 2 && plan_.buffers <= max_buffers;
    bool const intervals = plan_.resident >= 2 && plan_.buffers == 1;
    expects(!plan_.shapes.empty() && (grid || intervals) && plan_.slots.size() == plan_.buffers * plan_.shapes.size(),
            "unit_pool: plan '", plan_.workload_name, "' is not a plan made by make_plan or make_interval_plan (",
            plan_.shapes.size(), " shapes, ", plan_.buffers, " buffers, resident ", plan_.resident, ", ",
            plan_.slots.size(), " slots)");
    build_targets();
    arena_ = static_cast<std::byte*>(upstream_.allocate(home_, static_cast<std::size_t>(plan_.arena_bytes),
                                                        plan_.alignment));
    stats_.slots_total = plan_.slots.size();
    stats_.arena_bytes = plan_.arena_bytes;
    if constexpr (NonUnit::persistent_buffers) {
      try {
        for (std::uint32_t t = 0; t < targets_.size(); ++t)
          for (std::uint32_t b = 0; b < targets_[t].bucket_count; ++b) {
            auto& st = buckets_[targets_[t].first_bucket + b];
            if (st.shape != no_shape) continue;
            buf(st).data = static_cast<std::byte*>(
                upstream_.allocate(home_, static_cast<std::size_t>(buf(st).bytes), plan_.alignment));
            stats_.persistent_bytes += buf(st).bytes;
          }
      } catch (...) {
        free_all();
        throw;
      }
    }
    stats_.bytes_reserved = stats_.arena_bytes + stats_.persistent_bytes;
  }

  unit_pool(unit_pool const&) = delete;
  unit_pool& operator=(unit_pool const&) = delete;
  unit_pool(unit_pool&&) = delete;  // leases point at the pool
  unit_pool& operator=(unit_pool&&) = delete;

  /// Returns the memory on the construction stream after making it wait (on the device) for
  /// every release recorded on other streams. Leases still held are abandoned.
  ~unit_pool() { free_all(); }

  [[nodiscard]] plan const& get_plan() const noexcept { return plan_; }
  [[nodiscard]] pool_stats const& stats() const noexcept { return stats_; }
  [[nodiscard]] std::byte* arena() const noexcept { return arena_; }
  [[nodiscard]] std::uint64_t arena_bytes() const noexcept { return plan_.arena_bytes; }
  [[nodiscard]] Upstream const& upstream() const noexcept { return upstream_; }
  [[nodiscard]] Assignment const& assignment() const noexcept { return assignment_; }

  /// Leases the buckets of unit `u` for use on `s`. Throws invalid_argument for an unknown
  /// unit and capacity_error when a bucket finds every candidate slot held (naming them and
  /// their holders); nothing changes when it throws.
  [[nodiscard]] lease acquire(std::size_t u, Stream const& s) {
    if (u >= unit_count_) [[unlikely]]
      detail::fail<invalid_argument>("unit_pool::acquire: unit ", u, " out of range [0, ", unit_count_, ") of plan '",
                                     plan_.workload_name, "'");
    return acquire_target(static_cast<std::uint32_t>(u), s);
  }
  /// Leases non-unit bucket `b` (always served by the NonUnit policy).
  [[nodiscard]] lease acquire_non_unit(std::size_t b, Stream const& s) {
    expects(b < plan_.non_unit_bytes.size(), "unit_pool::acquire_non_unit: non-unit bucket ", b,
            " out of range [0, ", plan_.non_unit_bytes.size(), ") of plan '", plan_.workload_name, "'");
    return acquire_target(static_cast<std::uint32_t>(unit_count_ + b), s);
  }

  /// Stream-ordered release: work issued to `s` before this call is the last use; the slots
  /// are reusable by work ordered after it (other streams wait on the device). Every other
  /// stream that used the lease must already be ordered before `s`. Empties `l`.
  /// Throws logic_error for an empty lease (double release), invalid_argument for a lease of
  /// another pool.
  void release(lease& l, Stream const& s) {
    if (l.pool_ == nullptr) [[unlikely]]
      detail::fail<logic_error>("unit_pool::release: lease is empty (already released or moved from)");
    if (l.pool_ != this) [[unlikely]]
      detail::fail<invalid_argument>("unit_pool::release: lease of ", l.pool_->describe_target(l.target_),
                                     " belongs to another pool (plan '", l.pool_->plan_.workload_name,
                                     "'), not to this pool (plan '", plan_.workload_name, "')");
    auto& t = targets_[l.target_];
    if (t.holders == 0 || t.epoch != l.epoch_) [[unlikely]]
      detail::fail<logic_error>("unit_pool::release: lease of ", describe_target(l.target_), " from acquisition ",
                                l.epoch_, " was already released (current acquisition ", t.epoch, ", holders ",
                                t.holders, ")");
    if (capture_ != nullptr) [[unlikely]]
      capture_->check_release(l.target_, t.epoch, t.holders, describe_target(l.target_));
    // One event for every slot this release frees: the point after which they may be reused.
    // Recorded first (may throw a CUDA error): the lease stays valid when it does.
    std::uint32_t event = none;
    if (t.holders == 1 && t.in_arena) {
      bool const record_now = ReleaseOrder::records_at_release(!(t.acquired_on == s));
      event = order_.begin_release(s, record_now);
      if (record_now) ++stats_.release_events;
    }
    l.pool_ = nullptr;
    if (--t.holders > 0) return;
    ++stats_.releases;
    std::uint32_t const count = t.bucket_count;
    bucket_state* const bs = buckets_.data() + t.first_bucket;
    std::uint32_t freed = 0;
    for (std::uint32_t b = 0; b < count; ++b) {
      auto& st = bs[b];
      if (st.slot != none) {
        order_.free_slot(st.slot, event);
        free_mask_[st.shape] |= std::uint64_t{1} << st.group;
        st.slot = none;
        ++freed;
      } else if (buf(st).data != nullptr && (st.shape != no_shape || !NonUnit::persistent_buffers)) [[unlikely]] {
        // a dynamic buffer: of a bucket without a slot, or of an off-trace acquire
        upstream_.deallocate(s, buf(st).data, static_cast<std::size_t>(buf(st).bytes), plan_.alignment);
        buf(st).data = nullptr;
        stats_.fallback_bytes_in_use -= buf(st).bytes;
      }
    }
    stats_.slots_in_use -= freed;
    if (event != none) order_.end_release(event, freed);  // frees the event if nothing pooled was freed
    t.in_arena = false;
  }

  /// Megatron's can_allocate: would acquiring every unit of `units` succeed now, if the units
  /// in `releasable` were released first? Units already held need nothing; units without slots
  /// need nothing from the arena. Counts free groups per slot shape. Throws invalid_argument
  /// for an unknown unit in either list.
  [[nodiscard]] bool can_acquire(std::span<std::size_t const> units, std::span<std::size_t const> releasable = {}) const {
    std::vector<std::uint32_t> demand(plan_.shapes.size(), 0);
    std::vector<std::uint32_t> supply(plan_.shapes.size(), 0);
    std::vector<char> seen(unit_count_, 0);
    for (std::size_t u : units) {
      expects(u < unit_count_, "unit_pool::can_acquire: unit ", u, " out of range [0, ", unit_count_, ")");
      if (seen[u] || targets_[u].holders > 0) continue;
      seen[u] = 1;
      for (std::uint32_t b = 0; b < targets_[u].bucket_count; ++b) {
        auto const shape = buckets_[targets_[u].first_bucket + b].shape;
        if (shape != no_shape) ++demand[shape];
      }
    }
    for (std::size_t s = 0; s < supply.size(); ++s) supply[s] = static_cast<std::uint32_t>(std::popcount(free_mask_[s]));
    std::vector<char> counted(unit_count_, 0);
    for (std::size_t u : releasable) {
      expects(u < unit_count_, "unit_pool::can_acquire: releasable unit ", u, " out of range [0, ", unit_count_, ")");
      if (counted[u] || targets_[u].holders == 0) continue;  // not held: frees nothing
      counted[u] = 1;
      for (std::uint32_t b = 0; b < targets_[u].bucket_count; ++b) {
        auto const& st = buckets_[targets_[u].first_bucket + b];
        if (st.slot != none) ++supply[plan_.slots[st.slot].shape];
      }
    }
    for (std::size_t s = 0; s < demand.size(); ++s)
      if (demand[s] > supply[s]) return false;
    if (plan_.resident > 0) {  // interval plans: no two units sharing bytes may be held together
      std::vector<char> held(unit_count_, 0);
      for (std::size_t u = 0; u < unit_count_; ++u) held[u] = targets_[u].holders > 0 && targets_[u].in_arena && !counted[u];
      for (std::size_t u = 0; u < unit_count_; ++u)
        if (seen[u])
          for (auto v : sharing_.sharing(static_cast<std::uint32_t>(u)))
            if (held[v] || seen[v]) return false;
    }
    return true;
  }
  [[nodiscard]] bool can_acquire(std::initializer_list<std::size_t> units,
                                 std::initializer_list<std::size_t> releasable = {}) const {
    return can_acquire(std::span<std::size_t const>(units.begin(), units.size()),
                       std::span<std::size_t const>(releasable.begin(), releasable.size()));
  }

  /// Forgets the release events of free slots, so the next acquire of each waits on nothing.
  /// Call it (1) after the host synchronized every stream that released slots, and (2) around
  /// a CUDA graph capture: CUDA forbids waiting inside a capture on an event recorded outside
  /// it, and waiting outside on an event recorded inside it (the graph carries that order).
  void clear_release_events() noexcept { order_.clear(); }
  /// Free slots whose release event has not been waited on yet.
  [[nodiscard]] std::size_t pending_release_events() const noexcept { return order_.pending(); }
  /// Distinct release events some free slot still waits on (one per release, however many
  /// slots it freed).
  [[nodiscard]] std::size_t busy_release_events() const noexcept { return order_.busy(); }

  /// Leases held on unit `u` now (0: free).
  [[nodiscard]] std::uint32_t holders(std::size_t u) const {
    expects(u < unit_count_, "unit_pool::holders: unit ", u, " out of range [0, ", unit_count_, ")");
    return targets_[u].holders;
  }
  /// The unit holding slot `s`, or max size_t when it is free (a scan of the buckets: for
  /// diagnostics, not for a hot path).
  [[nodiscard]] std::size_t slot_holder(std::size_t s) const {
    expects(s < plan_.slots.size(), "unit_pool::slot_holder: slot ", s, " out of range [0, ", plan_.slots.size(), ")");
    auto const t = holder_of(static_cast<std::uint32_t>(s));
    return t == none ? std::numeric_limits<std::size_t>::max() : t;
  }
  /// Strict assignment: the group bucket `b` of unit `u` is pinned to, or max size_t if none yet.
  [[nodiscard]] std::size_t pinned_group(std::size_t u, std::size_t b) const {
    expects(u < unit_count_ && b < targets_[u].bucket_count, "unit_pool::pinned_group: (unit ", u, ", bucket ", b,
            ") out of range");
    auto const g = buckets_[targets_[u].first_bucket + b].pinned;
    return g == none ? std::numeric_limits<std::size_t>::max() : g;
  }

 private:
  struct target_state {
    std::uint32_t first_bucket = 0;
    std::uint32_t bucket_count = 0;
    std::uint32_t holders = 0;
    std::uint32_t dynamic_buckets = 0;  // buckets an acquire on the trace serves from upstream
    std::uint64_t epoch = 0;
    bool in_arena = false;  // held, and its pooled buckets are in their slots (not off-trace buffers)
    Stream acquired_on{};   // the stream of the acquire that took the slots (release order policy)
  };
  // A bucket's state in two parts: what acquire and release read for every pooled bucket (16
  // bytes: four a cache line), and its size and upstream buffer (buffers_, same index), read only
  // for buckets served upstream and in messages.
  struct bucket_state {
    std::uint32_t shape = no_shape;  // no_shape: served by the NonUnit policy
    std::uint32_t slot = none;       // slot while held
    std::uint32_t pinned = none;     // strict: pinned group
    std::uint32_t group = none;      // the slot's group while held (slot = plan.slot_index(group, shape))
  };
  struct bucket_buffer {
    std::uint64_t bytes = 0;    // padded request
    std::byte* data = nullptr;  // fallback buffer (dynamic while held, or persistent)
  };
  [[nodiscard]] bucket_buffer& buf(bucket_state const& st) noexcept {
    return buffers_[static_cast<std::size_t>(&st - buckets_.data())];
  }
  [[nodiscard]] bucket_buffer const& buf(bucket_state const& st) const noexcept {
    return buffers_[static_cast<std::size_t>(&st - buckets_.data())];
  }

  [[nodiscard]] bool is_unit(std::uint32_t t) const noexcept { return t < unit_count_; }
  [[nodiscard]] std::size_t external_index(std::uint32_t t) const noexcept {
    return is_unit(t) ? t : t - unit_count_;
  }
  [[nodiscard]] std::size_t bucket_count(std::uint32_t t) const noexcept { return targets_[t].bucket_count; }
  // Printable names, formatted only when an error message is built (expects evaluates its
  // arguments on every call, so the hot path must not build strings).
  // (Members, not friends, do the printing: a nested class may access the pool's internals,
  // a friend of the nested class may not.)
  struct target_name {
    unit_pool const* pool;
    std::uint32_t t;
    void print(std::ostream& os) const {
      if (pool->is_unit(t))
        os << "unit " << t << " '" << pool->plan_.unit_names[t] << "'";
      else
        os << "non-unit bucket " << t - pool->unit_count_;
    }
    friend std::ostream& operator<<(std::ostream& os, target_name const& n) {
      n.print(os);
      return os;
    }
  };
  struct shape_holders {
    unit_pool const* pool;
    std::uint32_t shape;
    void print(std::ostream& os) const {
      auto const& p = *pool;
      for (std::uint32_t g = 0; g < p.plan_.buffers; ++g) {
        auto const s = p.plan_.slot_index(g, shape);
        os << (g ? ", " : "") << "slot " << s << " (group " << g << ") held by ";
        auto const t = p.holder_of(s);
        if (t == none)
          os << "nobody";
        else
          os << target_name{&p, t};
      }
    }
    friend std::ostream& operator<<(std::ostream& os, shape_holders const& h) {
      h.print(os);
      return os;
    }
  };
  [[nodiscard]] target_name describe_target(std::uint32_t t) const noexcept { return {this, t}; }
  // plan::slot_index with the shape count kept as a 32-bit member (the hot path's index).
  [[nodiscard]] std::uint32_t slot_index(std::uint32_t group, std::uint32_t shape) const noexcept {
    return group * shape_count_ + shape;
  }
  // The target holding slot `s`, or none: a scan of the buckets (messages and diagnostics only;
  // the hot path keeps no per-slot holder, one array fewer to touch a pair).
  [[nodiscard]] std::uint32_t holder_of(std::uint32_t s) const noexcept {
    for (std::uint32_t t = 0; t < targets_.size(); ++t)
      for (std::uint32_t b = 0; b < targets_[t].bucket_count; ++b)
        if (buckets_[targets_[t].first_bucket + b].slot == s) return t;
    return none;
  }
  [[noreturn]] void no_free_slot(std::uint32_t t, std::uint32_t b, bucket_state const& st) const {
    detail::fail<capacity_error>("unit_pool::acquire: no free slot for bucket ", b, " (",
                                 plan_.shapes[st.shape].category_name, ", ", buf(st).bytes, " bytes) of ",
                                 describe_target(t), " in plan '", plan_.workload_name, "': shape ", st.shape, " (",
                                 plan_.shapes[st.shape].category_name, "#", plan_.shapes[st.shape].ordinal,
                                 ") has ", plan_.buffers, " slots, all held: ", shape_holders{this, st.shape},
                                 ". Release a unit first, or plan more buffers");
  }
  [[nodiscard]] std::size_t slot_of(std::uint32_t t, std::size_t b) const {
    expects(b < targets_[t].bucket_count, "unit_pool::lease: bucket ", b, " out of range [0, ",
            targets_[t].bucket_count, ") of ", describe_target(t));
    auto const s = buckets_[targets_[t].first_bucket + b].slot;
    return s == none ? std::numeric_limits<std::size_t>::max() : s;
  }
  [[nodiscard]] std::span<std::byte> buffer(std::uint32_t t, std::size_t b) const {
    expects(b < targets_[t].bucket_count, "unit_pool::lease: bucket ", b, " out of range [0, ",
            targets_[t].bucket_count, ") of ", describe_target(t));
    auto const& st = buckets_[targets_[t].first_bucket + b];
    std::byte* base = st.slot != none ? arena_ + plan_.slots[st.slot].offset : buf(st).data;
    return {base, static_cast<std::size_t>(buf(st).bytes)};
  }

  void build_targets() {
    unit_count_ = plan_.unit_count();
    shape_count_ = static_cast<std::uint32_t>(plan_.shapes.size());
    targets_.reserve(unit_count_ + plan_.non_unit_bytes.size());
    for (std::size_t u = 0; u < unit_count_; ++u) {
      targets_.push_back({static_cast<std::uint32_t>(buckets_.size()),
                          static_cast<std::uint32_t>(plan_.bucket_bytes[u].size()), 0, 0});
      for (std::size_t b = 0; b < plan_.bucket_bytes[u].size(); ++b) {
        bucket_state st;
        st.shape = plan_.bucket_shape[u][b];
        std::uint64_t const bytes = plan_.bucket_bytes[u][b];
        expects(st.shape == no_shape || (st.shape < plan_.shapes.size() && bytes <= plan_.shapes[st.shape].bytes),
                "unit_pool: plan '", plan_.workload_name, "' puts unit ", u, " bucket ", b, " (", bytes,
                " bytes) in a shape that cannot hold it");
        if (st.shape == no_shape && !NonUnit::persistent_buffers) ++targets_.back().dynamic_buckets;
        buckets_.push_back(st);
        buffers_.push_back({bytes, nullptr});
      }
    }
    for (auto bytes : plan_.non_unit_bytes) {
      targets_.push_back({static_cast<std::uint32_t>(buckets_.size()), 1, 0, NonUnit::persistent_buffers ? 0u : 1u});
      buckets_.push_back({});
      buffers_.push_back({bytes, nullptr});
    }
    order_ = detail::stream_order<Stream, Event>(plan_.slots.size());
    sharing_ = detail::byte_sharing(plan_, [&](std::uint32_t u) { return targets_[u].bucket_count; });
    interval_ = sharing_.active();
    std::uint64_t const all = plan_.buffers == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << plan_.buffers) - 1;
    free_mask_.assign(plan_.shapes.size(), all);
  }

  // Re-fetches and scratch space; the work is acquire_slots, compiled apart for interval plans
  // (fixed and max plans have no byte sharing, no off-trace acquires).
  lease acquire_target(std::uint32_t t, Stream const& s) {
    if (capture_ != nullptr) [[unlikely]]
      capture_check_acquire(t);
    auto& tg = targets_[t];
    if (tg.holders > 0) {  // re-fetch: same slots, no state change
      ++tg.holders;
      ++stats_.refetches;
      return lease(this, t, tg.epoch);
    }
    // Per bucket the chosen group, then (phase 2) the events waited on, at most one per slot
    // looked at; on the stack for small units.
    constexpr std::uint32_t max_inline = 16;
    bool const shares = interval_ && is_unit(t);
    std::size_t const looked_at = shares ? sharing_.wait_slots(t) : tg.bucket_count;
    if (tg.bucket_count <= max_inline && looked_at <= max_inline) [[likely]] {
      std::uint32_t scratch[2 * max_inline];
      return shares ? acquire_slots<true>(t, s, scratch, scratch + max_inline)
                    : acquire_slots<false>(t, s, scratch, scratch + max_inline);
    }
    std::vector<std::uint32_t> scratch(tg.bucket_count + looked_at);
    std::uint32_t* const waited = scratch.data() + tg.bucket_count;
    return shares ? acquire_slots<true>(t, s, scratch.data(), waited) : acquire_slots<false>(t, s, scratch.data(), waited);
  }

  // `Interval`: `t` is a unit of an interval plan (its bytes may be shared).
  template <bool Interval>
  lease acquire_slots(std::uint32_t t, Stream const& s, std::uint32_t* chosen, std::uint32_t* waited) {
    auto& tg = targets_[t];
    // Locals: the stores below (of 32-bit indices) would otherwise make the compiler reload them.
    std::uint32_t const count = tg.bucket_count;
    bucket_state* const bs = buckets_.data() + tg.first_bucket;
    bool const off_trace = Interval && is_off_trace(t);  // the unit's bytes are held by a sharer
    // Phase 1: choose a group per pooled bucket (distinct shapes: the choices cannot collide) and
    // the releases to wait for, one per releasing stream (its latest release covers the others);
    // throw before touching any state. On fixed and max plans every slot looked at is taken:
    // waits are collected with the choices, unmarked.
    std::uint64_t waits = 0;
    bool pin_work = false;  // strict: a bucket is not in its pinned group (the first acquire pins)
    for (std::uint32_t b = 0; b < count && !off_trace; ++b) {
      auto const& st = bs[b];
      if (st.shape == no_shape) continue;
      std::uint64_t const mask = free_mask_[st.shape];
      std::uint32_t g;
      if (Assignment::pins && st.pinned != none && (mask >> st.pinned & 1u)) {
        g = st.pinned;
      } else {
        if (mask == 0) [[unlikely]]
          no_free_slot(t, b, st);
        g = static_cast<std::uint32_t>(std::countr_zero(mask));
      }
      if constexpr (Assignment::pins) pin_work |= st.pinned != g;
      chosen[b] = g;
      if constexpr (!Interval) order_.template wait_for<false>(slot_index(g, st.shape), s, waited, waits);
    }
    if (Interval && !off_trace) interval_waits(t, chosen, s, waited, waits);
    // Phase 2, where the acquire takes upstream buffers (buckets without a slot, or every bucket
    // of an off-trace acquire): the waits, then the buffers; either may throw (a CUDA error, or
    // upstream's), leaving the state as it was (extra waits are harmless).
    bool const dynamic = off_trace || tg.dynamic_buckets != 0;
    if (dynamic) [[unlikely]] {
      try {
        order_.issue_waits(s, waited, waits, stats_.reuse_events);
      } catch (...) {
        if (Interval && !off_trace) interval_unmark(t, [&](std::uint32_t b) { return chosen[b]; }, s);
        throw;
      }
      take_buffers(bs, count, s, off_trace);
    }
    // Phase 3: commit (nothing here throws); `chosen[b]` becomes the release the slot followed.
    std::uint32_t taken = 0;
    for (std::uint32_t b = 0; b < count && !off_trace; ++b) {
      auto& st = bs[b];
      if (st.shape == no_shape) continue;
      std::uint32_t const g = chosen[b];
      std::uint32_t const index = slot_index(g, st.shape);
      chosen[b] = order_.take(index);
      free_mask_[st.shape] &= ~(std::uint64_t{1} << g);
      st.slot = index;
      st.group = g;
      ++taken;
    }
    stats_.slots_in_use += taken;
    stats_.cross_stream_waits += waits;
    ++stats_.acquisitions;
    if (off_trace) ++stats_.off_trace_fallbacks;
    tg.in_arena = taken != 0;
    tg.holders = 1;
    tg.acquired_on = s;
    ++tg.epoch;
    // Phase 4, the common case: the waits, the acquire's one driver call, last, so the host's
    // work for it is one piece (the driver's code between two pieces evicts the pool's cache
    // lines; bench_pool_acquire). If they throw, the commit is undone: the state is as it was.
    if (!dynamic) [[likely]] {
      try {
        order_.issue_waits(s, waited, waits, stats_.reuse_events);
      } catch (...) {
        if constexpr (Interval) interval_unmark(t, [&](std::uint32_t b) { return bs[b].group; }, s);
        for (std::uint32_t b = count; b-- > 0;) {
          auto& st = bs[b];
          if (st.shape == no_shape) continue;
          order_.untake(st.slot, chosen[b]);
          free_mask_[st.shape] |= std::uint64_t{1} << st.group;
          st.slot = none;
        }
        stats_.slots_in_use -= taken;
        stats_.cross_stream_waits -= waits;
        --stats_.acquisitions;
        tg.in_arena = false;
        tg.holders = 0;  // (acquired_on means nothing while not held)
        --tg.epoch;
        throw;
      }
    }
    if (stats_.slots_in_use > stats_.slots_in_use_peak) stats_.slots_in_use_peak = stats_.slots_in_use;
    lease l(this, t, tg.epoch);
    // Strict: the first acquire pins each bucket to its group; a later one that took another
    // group moved (reported, not re-pinned).
    if constexpr (Assignment::pins)
      if (pin_work) [[unlikely]]
        pin_or_report(l, bs, count, s);
    return l;
  }

  // Under a capture scope (capture.hpp): an acquire that would take upstream memory (dynamic
  // buckets, or an off-trace fallback) throws before anything changes.
  void capture_check_acquire(std::uint32_t t) const {
    auto const& tg = targets_[t];
    if (tg.holders > 0) return;  // a re-fetch takes nothing
    if (tg.dynamic_buckets != 0)
      detail::fail<logic_error>("unit_pool::acquire: ", describe_target(t), " of plan '", plan_.workload_name, "' has ",
                                tg.dynamic_buckets, " bucket(s) outside the arena, served from the upstream at each "
                                "acquire (NonUnit = dynamic), inside a capture scope: an allocation there synchronises "
                                "or breaks the graph. Plan the unit, or use NonUnit = persistent");
    if (interval_ && is_unit(t)) {
      auto const held = sharing_.held_sharer(t, [&](std::uint32_t v) { return targets_[v].holders > 0 && targets_[v].in_arena; });
      if (held != none)
        detail::fail<logic_error>("unit_pool::acquire: ", describe_target(t), " shares arena bytes with ",
                                  describe_target(held), ", which is held, inside a capture scope of plan '",
                                  plan_.workload_name, "': an off-trace acquire cannot be captured (it would take "
                                  "upstream memory or fail in the graph). Release ", describe_target(held), " first");
    }
  }

  // Interval plans: a unit sharing `t`'s bytes is held in its slots (reject_off_trace throws).
  [[nodiscard]] bool is_off_trace(std::uint32_t t) const {
    auto const held = sharing_.held_sharer(t, [&](std::uint32_t v) { return targets_[v].holders > 0 && targets_[v].in_arena; });
    if (held == none) return false;
    if constexpr (!OffTrace::fallback)
      detail::off_trace_error(plan_, t, describe_target(t), held, describe_target(held), stats_.acquisitions + 1);
    return true;
  }

  // Interval plans: the chosen slots may be looked at again by units sharing their bytes, so the
  // waits are marked; the bytes were last used by the units sharing them, whose releases stay
  // pending (a unit sharing bytes with them later must wait too) until they are re-acquired.
  void interval_waits(std::uint32_t t, std::uint32_t const* chosen, Stream const& s, std::uint32_t* waited,
                      std::uint64_t& waits) noexcept {
    interval_slots(t, [&](std::uint32_t b) { return chosen[b]; },
                   [&](std::uint32_t slot) { order_.template wait_for<true>(slot, s, waited, waits); });
  }
  // Their waits failed to issue: the marks go (else a retry on `s` would skip its waits).
  template <class Group>
  void interval_unmark(std::uint32_t t, Group group_of, Stream const& s) noexcept {
    interval_slots(t, group_of, [&](std::uint32_t slot) { order_.unmark(slot, s); });
  }
  // The slots an acquire of `t` on an interval plan looks at: its buckets' (group_of(b)), and those
  // of the units sharing its bytes.
  template <class Group, class Fn>
  void interval_slots(std::uint32_t t, Group group_of, Fn fn) const {
    auto const& tg = targets_[t];
    for (std::uint32_t b = 0; b < tg.bucket_count; ++b) {
      auto const shape = buckets_[tg.first_bucket + b].shape;
      if (shape != no_shape) fn(slot_index(group_of(b), shape));
    }
    for (auto v : sharing_.sharing(t))
      for (std::uint32_t b = 0; b < targets_[v].bucket_count; ++b) {
        auto const shape = buckets_[targets_[v].first_bucket + b].shape;
        if (shape != no_shape) fn(slot_index(0, shape));
      }
  }

  // Upstream buffers for the buckets without a slot, or every bucket of an off-trace acquire; if
  // upstream throws, undo them.
  void take_buffers(bucket_state* bs, std::uint32_t count, Stream const& s, bool off_trace) {
    auto const needs_buffer = [&](bucket_state const& st) {
      return off_trace || (st.shape == no_shape && !NonUnit::persistent_buffers);
    };
    std::uint32_t done = 0;
    try {
      for (; done < count; ++done) {
        auto& st = bs[done];
        if (!needs_buffer(st)) continue;
        buf(st).data = static_cast<std::byte*>(upstream_.allocate(s, static_cast<std::size_t>(buf(st).bytes), plan_.alignment));
        stats_.fallback_bytes_in_use += buf(st).bytes;
        ++stats_.fallback_allocations;
      }
    } catch (...) {
      for (std::uint32_t b = 0; b < done; ++b) {
        auto& st = bs[b];
        if (!needs_buffer(st) || buf(st).data == nullptr) continue;
        upstream_.deallocate(s, buf(st).data, static_cast<std::size_t>(buf(st).bytes), plan_.alignment);
        buf(st).data = nullptr;
        stats_.fallback_bytes_in_use -= buf(st).bytes;
      }
      throw;
    }
    if (stats_.fallback_bytes_in_use > stats_.fallback_bytes_peak) stats_.fallback_bytes_peak = stats_.fallback_bytes_in_use;
  }

  // Strict assignment: pins the buckets not pinned yet to the groups they took; reports those
  // that took a group other than their pin (moved).
  void pin_or_report(lease& l, bucket_state* bs, std::uint32_t count, Stream const& s) {
    std::uint32_t moved = 0;  // bit b: bucket b left its pinned group
    for (std::uint32_t b = 0; b < count; ++b) {
      auto& st = bs[b];
      if (st.shape == no_shape || st.pinned == st.group) continue;
      if (st.pinned == none) {
        st.pinned = st.group;
      } else {
        ++stats_.moves;
        if (b < 32) moved |= 1u << b;
      }
    }
    if (moved == 0) return;
    try {  // the logger is the user's code: if it throws, give the slots back first
      for (std::uint32_t b = 0; b < count && b < 32; ++b)
        if (moved >> b & 1u) report_move(l.target_, b, bs[b], bs[b].group);
    } catch (...) {
      release(l, s);
      throw;
    }
  }

  void report_move(std::uint32_t t, std::uint32_t b, bucket_state const& st, std::uint32_t g) const {
    auto const pinned_slot = plan_.slot_index(st.pinned, st.shape);
    std::uint32_t const holder = holder_of(static_cast<std::uint32_t>(pinned_slot));
    std::string const msg = headroom::detail::concat(
        "unit_pool[", plan_.workload_name, "]: bucket ", b, " of ", describe_target(t), " is pinned to group ",
        st.pinned, " but its slot ", pinned_slot, " is held by ",
        holder == none ? std::string("nobody") : headroom::detail::concat(describe_target(holder)), "; took group ", g,
        " (not re-pinned). Under CUDA graph capture this orphans the captured address");
    move_event const e{t, plan_.unit_names[t], b, st.pinned, g, holder, msg};
    assignment_.report(e);
  }

  void free_all() noexcept {
    // Persistent buffers, and dynamic ones of leases never released, go back on the home stream.
    for (auto& st : buckets_)
      if (buf(st).data != nullptr) {
        upstream_.deallocate(home_, buf(st).data, static_cast<std::size_t>(buf(st).bytes), plan_.alignment);
        buf(st).data = nullptr;
      }
    if (arena_ == nullptr) return;
    order_.drain(home_);
    upstream_.deallocate(home_, arena_, static_cast<std::size_t>(plan_.arena_bytes), plan_.alignment);
    arena_ = nullptr;
  }

  // What every acquire and release reads or writes comes first, together (fewer cache lines
  // for the host to bring back after the CUDA calls between them); then the rest.
  std::vector<target_state> targets_;  // units, then non-unit buckets
  std::vector<bucket_state> buckets_;
  std::vector<std::uint64_t> free_mask_;  // per shape: bit g set = group g free
  detail::stream_order<Stream, Event> order_;  // per slot: the release a reuse must follow
  detail::capture_state* capture_ = nullptr;   // the open capture scope's state (capture.hpp)
  std::size_t unit_count_ = 0;
  std::uint32_t shape_count_ = 0;  // plan_.shapes.size()
  bool interval_ = false;          // sharing_.active(): an interval plan
  pool_stats stats_;
  std::vector<bucket_buffer> buffers_;  // per bucket (buckets_'s index): size and upstream buffer
  plan plan_;
  Upstream upstream_;
  Stream home_;
  Assignment assignment_;
  std::byte* arena_ = nullptr;
  detail::byte_sharing sharing_;  // interval plans: units sharing bytes
};

}  // namespace headroom::pool
