// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// buffer_arena: a stream_resource that serves one rank's executor step from a buffer plan
// (buffer_plan.hpp): one upstream allocation, made at construction, and no allocation during a
// step.
//
//   auto plan = pipeline::plan_buffers(sched, bytes, pipeline::retention::reduced{});
//   pipeline::buffer_arena<Stream, Event, Upstream> arena(plan, rank, upstream, home_stream);
//   pipeline::executor exec(comm, arena, sched, bytes, ...);   // its setup collectives: upstream
//   exec.step(stage, pipeline::retention::reduced{});          // every buffer at its planned offset
//
// Between steps a request goes to the upstream (the executor's construction check). The executor
// opens and closes each step (begin_step / end_step, or abandon_step when the step fails); inside
// one, the k-th request is the plan's k-th buffer: the same bytes, handed out at its offset through
// a pool::unit_pool over the plan (one unit per buffer, sharing bytes as the plan lets them), so a
// reuse on another stream waits on the device for the release (the pool's stream order) and a
// buffer whose bytes are still held (an output kept from the previous step, retention::all) is
// refused, naming both, instead of handed out twice. A request the plan does not have, a step
// under other policies than the plan's, or a step that ends before its last buffer throws
// logic_error. A capture scope (pipeline/capture.hpp) also refuses requests outside a step.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/pipeline/buffer_plan.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/policies.hpp"
#include "headroom/pool/unit_pool.hpp"

namespace headroom::pipeline {

/// The pool plan of one rank's buffers: one unit (one bucket, one slot) per buffer, at its
/// planned offset; an interval plan, so units whose bytes overlap are never held together.
[[nodiscard]] inline pool::plan pool_plan_of(buffer_plan const& bp, int rank) {
  auto const& rb = bp.rank(rank);
  pool::plan p;
  p.workload_name = headroom::detail::concat(bp.schedule_name(), " rank ", rank, " buffers");
  p.planner = "pipeline::plan_buffers";
  p.category_policy = "bytes";
  p.padding = "none";
  p.buffers = 1;
  p.resident = 2;  // an interval plan: byte ranges shared by buffers never live together
  p.alignment = bp.alignment();
  p.arena_bytes = rb.arena_bytes;
  for (std::size_t k = 0; k < rb.buffers.size(); ++k) {
    auto const& b = rb.buffers[k];
    auto const shape = static_cast<std::uint32_t>(k);
    p.shapes.push_back({0, "bytes", shape, b.bytes, k, 0});
    p.slots.push_back({0, shape, b.offset, b.bytes});
    p.unit_names.push_back(headroom::detail::concat(b));
    p.pooled.push_back(1);
    p.bucket_bytes.push_back({b.bytes});
    p.bucket_shape.push_back({shape});
  }
  return p;
}

template <class Stream, class Event, class Upstream>
  requires stream<Stream> && event<Event, Stream> && std::default_initializable<Event> &&
           stream_resource<Upstream, Stream>
class buffer_arena {
 public:
  using pool_type = pool::unit_pool<Stream, Event, Upstream, pool::first_free, pool::persistent,
                                    pool::record_if_cross_stream, pool::reject_off_trace>;

  /// Allocates rank `rank`'s arena of `plan` from `upstream` on `home` (returned there at the end).
  buffer_arena(buffer_plan const& plan, int rank, Upstream upstream, Stream const& home)
      : retention_(plan.retention()),
        lifetime_(plan.lifetime()),
        grouping_(plan.transfers()),
        upstream_(upstream),
        pool_(pool_plan_of(plan, rank), std::move(upstream), home),
        leases_(pool_.get_plan().unit_count()) {
    live_.reserve(leases_.size());
  }
  buffer_arena(buffer_arena const&) = delete;
  buffer_arena& operator=(buffer_arena const&) = delete;

  // ---- stream_resource ----
  [[nodiscard]] void* allocate(Stream const& s, std::size_t bytes, std::size_t alignment = default_alignment) {
    if (!in_step_) {
      expects<logic_error>(!capturing_, "pipeline::buffer_arena: a request of ", bytes,
                           " bytes outside a step, inside a capture scope: it would allocate from the upstream");
      ++unplanned_allocations_;
      return upstream_.allocate(s, bytes, alignment);
    }
    auto const& plan = pool_.get_plan();
    std::size_t const k = next_;
    expects<logic_error>(k < leases_.size(), "pipeline::buffer_arena: request ", k + 1, " of the step (", bytes,
                         " bytes), but plan '", plan.workload_name, "' has ", leases_.size(), " buffers");
    expects<logic_error>(bytes == plan.bucket_bytes[k][0], "pipeline::buffer_arena: request ", k + 1, " of the step is ",
                         bytes, " bytes; the plan's buffer ", k, " is the ", plan.unit_names[k],
                         ": the step does not follow the plan (other sizes or schedule)");
    expects<logic_error>(alignment <= plan.alignment, "pipeline::buffer_arena: alignment ", alignment,
                         " is above the plan's ", plan.alignment);
    expects<logic_error>(pool_.holders(k) == 0, "pipeline::buffer_arena: the plan's buffer ", k, " (",
                         plan.unit_names[k], ") from the previous step is still held; drop the step's result "
                         "(kept outputs) before the next step");
    leases_[k] = pool_.acquire(k, s);  // refuses bytes still held by another buffer
    live_.push_back(static_cast<std::uint32_t>(k));
    ++next_;
    return leases_[k].bytes(0).data();
  }
  void deallocate(Stream const& s, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    for (std::size_t i = 0; i < live_.size(); ++i) {
      auto const k = live_[i];
      if (leases_[k].bytes(0).data() != p) continue;
      try {
        pool_.release(leases_[k], s);
      } catch (std::exception const& e) {  // not from a noexcept free: told at end_step
        if (failure_.empty()) failure_ = e.what();
        return;
      }
      live_[i] = live_.back();
      live_.pop_back();
      return;
    }
    upstream_.deallocate(s, p, bytes, alignment);  // a request made outside a step
  }
  friend bool operator==(buffer_arena const& a, buffer_arena const& b) noexcept { return &a == &b; }

  // ---- step protocol (called by the executor) ----
  void begin_step(std::string_view retention, std::string_view lifetime, std::string_view grouping) {
    expects<logic_error>(!in_step_, "pipeline::buffer_arena::begin_step: a step is already running");
    expects<logic_error>(retention == retention_ && lifetime == lifetime_ && grouping == grouping_,
                         "pipeline::buffer_arena: the step runs retention ", retention, ", outputs ", lifetime,
                         ", transfers ", grouping, "; the buffer plan was made for retention ", retention_,
                         ", outputs ", lifetime_, ", transfers ", grouping_);
    in_step_ = true;
    next_ = 0;
  }
  void end_step() {
    in_step_ = false;
    if (!failure_.empty()) throw logic_error(std::exchange(failure_, std::string()));
    expects<logic_error>(next_ == leases_.size(), "pipeline::buffer_arena::end_step: the step made ", next_,
                         " requests; the plan has ", leases_.size(), " buffers");
  }
  void abandon_step() noexcept { in_step_ = false; }

  [[nodiscard]] pool_type& pool() noexcept { return pool_; }
  [[nodiscard]] pool_type const& pool() const noexcept { return pool_; }
  /// Requests served by the upstream (outside steps).
  [[nodiscard]] std::uint64_t unplanned_allocations() const noexcept { return unplanned_allocations_; }
  /// Planned buffers held now.
  [[nodiscard]] std::size_t live() const noexcept { return live_.size(); }
  [[nodiscard]] bool in_step() const noexcept { return in_step_; }

 private:
  template <class Arena>
  friend class capture_scope;
  std::string_view retention_, lifetime_, grouping_;
  Upstream upstream_;
  pool_type pool_;
  std::vector<typename pool_type::lease> leases_;  // per buffer, while held
  std::vector<std::uint32_t> live_;                // buffers held now
  std::size_t next_ = 0;
  bool in_step_ = false;
  bool capturing_ = false;
  std::uint64_t unplanned_allocations_ = 0;
  std::string failure_;
};

}  // namespace headroom::pipeline
