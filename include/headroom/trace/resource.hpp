// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// recording_resource<Upstream, Recorder, Events>: a stream_resource adaptor that reports every
// allocation and deallocation of Upstream to a recorder. Events is a tag:
//   block_events    allocations are blocks (alloc / free_completed): activations, workspaces
//   segment_events  allocations are segments (segment_alloc / segment_free): the arena a pool
//                   takes from it, in which the pool's leases are recorded as blocks
// Over recorder<off> the adaptor holds only Upstream and forwards each call unchanged.
//
//   trace::recorder<> rec;
//   trace::recording_resource traced(host::aligned_resource{}, rec, trace::categories::activation);
//   void* p = traced.allocate(stream, 1 << 20);   // alloc event, frame = this line
#include <cstddef>
#include <type_traits>
#include <utility>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/trace/event.hpp"
#include "headroom/trace/recorder.hpp"

namespace headroom::trace {

struct block_events {};
struct segment_events {};

// Checked by static_asserts rather than a requires clause, so a wrong argument stops at a sentence.
template <class Upstream, class Recorder, class Events = block_events>
class recording_resource {
  static_assert(event_sink<Recorder>,
                "trace::recording_resource<Upstream, Recorder>: Recorder is not a trace::event_sink (a static "
                "records flag and the alloc / free_requested / free_completed / segment_alloc / segment_free "
                "hooks); use trace::recorder<trace::single_thread>, trace::recorder<trace::shared> or "
                "trace::recorder<trace::off>");
  static_assert(std::same_as<Events, block_events> || std::same_as<Events, segment_events>,
                "trace::recording_resource<Upstream, Recorder, Events>: Events must be trace::block_events or "
                "trace::segment_events");

  // Distinct empty types, so that both members take no room under recorder<off>.
  template <int>
  struct nothing {
    friend constexpr bool operator==(nothing, nothing) noexcept { return true; }
  };
  using recorder_ref = std::conditional_t<Recorder::records, Recorder*, nothing<0>>;
  using category_ref = std::conditional_t<Recorder::records, category, nothing<1>>;

 public:
  using upstream_type = Upstream;
  using recorder_type = Recorder;

  /// `recorder` must outlive the adaptor and its copies (which share it).
  recording_resource(Upstream upstream, Recorder& recorder, category what = {})
      : upstream_(std::move(upstream)) {
    if constexpr (Recorder::records) {
      recorder_ = &recorder;
      what_ = what;
    } else {
      (void)recorder;
      (void)what;
    }
  }

  /// Allocates from Upstream, then records the block (or segment) with the caller's location.
  template <stream S>
    requires stream_resource<Upstream, S> && Recorder::records
  [[nodiscard]] void* allocate(S const& s, std::size_t bytes, std::size_t alignment = default_alignment,
                               frame const where = frame::current()) {
    void* p = upstream_.allocate(s, bytes, alignment);
    if constexpr (std::same_as<Events, segment_events>) {
      recorder_->segment_alloc(p, bytes, stream_id(s), what_, where);
    } else {
      recorder_->alloc(p, bytes, stream_id(s), what_, where);
    }
    return p;
  }
  template <stream S>
    requires stream_resource<Upstream, S> && (!Recorder::records)
  [[nodiscard]] void* allocate(S const& s, std::size_t bytes, std::size_t alignment = default_alignment) {
    return upstream_.allocate(s, bytes, alignment);
  }

  /// Records free_completed (segment_free), then returns the memory to Upstream in stream
  /// order, under Upstream's contract. Recording first keeps the order of events right when
  /// another thread gets the same address back at once.
  template <stream S>
    requires stream_resource<Upstream, S>
  void deallocate(S const& s, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    if constexpr (Recorder::records) {
      if constexpr (std::same_as<Events, segment_events>) {
        recorder_->segment_free(p, bytes, stream_id(s), what_);
      } else {
        recorder_->free_completed(p, bytes, stream_id(s), what_);
      }
    }
    upstream_.deallocate(s, p, bytes, alignment);
  }

  [[nodiscard]] Upstream const& upstream() const noexcept { return upstream_; }
  [[nodiscard]] Upstream& upstream() noexcept { return upstream_; }
  [[nodiscard]] category what() const noexcept {
    if constexpr (Recorder::records) {
      return what_;
    } else {
      return {};
    }
  }

  friend bool operator==(recording_resource const& a, recording_resource const& b) noexcept {
    return a.upstream_ == b.upstream_ && a.recorder_ == b.recorder_;
  }
  template <class P>
    requires has_property<Upstream, P>
  friend void get_property(recording_resource const&, P) noexcept {}

 private:
  Upstream upstream_;
  [[no_unique_address]] recorder_ref recorder_{};
  [[no_unique_address]] category_ref what_{};
};

}  // namespace headroom::trace
