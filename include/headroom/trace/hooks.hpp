// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Hooks for memory that does not pass through a recording_resource: a pool's leases (blocks
// inside the arena segment), a lifetime guard's deferred release, a workspace carved out of a
// caller-owned buffer. They only need the shapes below, not the modules' headers.
//
//   auto lease = pool.acquire(u, s);
//   trace::lease_acquired(rec, lease, trace::stream_id(s));        // one alloc per bucket
//   trace::lease_released(rec, lease, trace::stream_id(s));        // before pool.release(lease, s)
//   pool.release(lease, s);
//
//   trace::free_requested(rec, guard, trace::stream_id(comm));     // then guard.release(): the
//   guard.release();                                               // resource records the free
//
//   trace::scoped_block ws(rec, workspace_span, trace::stream_id(s), trace::categories::cp_logits);
#include <cstddef>
#include <cstdint>

#include "headroom/trace/event.hpp"
#include "headroom/trace/recorder.hpp"

namespace headroom::trace {

/// A pool lease: size() buckets, bucket b at bytes(b) (pool::unit_pool::lease).
template <class L>
concept lease_like = requires(L const& l, std::size_t b) {
  { l.size() } -> std::convertible_to<std::size_t>;
  { l.bytes(b).data() };
  { l.bytes(b).size() } -> std::convertible_to<std::size_t>;
};

/// Contiguous memory with data() and size() in bytes (a lifetime guard, a std::span<std::byte>).
template <class B>
concept buffer_like = requires(B const& b) {
  { b.data() };
  { b.size() } -> std::convertible_to<std::size_t>;
};

/// Records an alloc for each bucket of a lease just acquired (category pool by default).
template <event_sink R, lease_like L>
void lease_acquired(R& rec, L const& lease, std::uint64_t stream, category what = categories::pool,
                    frame const where = frame::current()) {
  for (std::size_t b = 0; b < lease.size(); ++b) {
    auto const span = lease.bytes(b);
    rec.alloc(span.data(), span.size(), stream, what, where);
  }
}

/// Records free_completed for each bucket: call it before pool.release(lease, s), while the
/// lease still names its buffers (a stream-ordered release makes them reusable at once).
template <event_sink R, lease_like L>
void lease_released(R& rec, L const& lease, std::uint64_t stream, category what = {},
                    frame const where = frame::current()) {
  for (std::size_t b = 0; b < lease.size(); ++b) {
    auto const span = lease.bytes(b);
    rec.free_completed(span.data(), span.size(), stream, what, where);
  }
}

/// The owner let go of `buffer`, but its memory is not reusable yet: call it just before a
/// guard's release. Under a deferred policy the block shows as pending until the resource
/// underneath records free_completed.
template <event_sink R, buffer_like B>
void free_requested(R& rec, B const& buffer, std::uint64_t stream, category what = {},
                    frame const where = frame::current()) {
  rec.free_requested(buffer.data(), buffer.size(), stream, what, where);
}

/// A block recorded for its scope: alloc at construction, free_completed at destruction. For
/// workspaces carved out of memory the recorder does not see allocated (cp gather buffers).
template <event_sink R>
class scoped_block {
 public:
  template <buffer_like B>
  scoped_block(R& rec, B const& buffer, std::uint64_t stream, category what,
               frame const where = frame::current())
      : rec_(&rec), data_(buffer.data()), bytes_(buffer.size()), stream_(stream), what_(what), where_(where) {
    rec_->alloc(data_, bytes_, stream_, what_, where_);
  }
  scoped_block(scoped_block const&) = delete;
  scoped_block& operator=(scoped_block const&) = delete;
  ~scoped_block() { rec_->free_completed(data_, bytes_, stream_, what_, where_); }

 private:
  R* rec_;
  void const* data_;
  std::size_t bytes_;
  std::uint64_t stream_;
  category what_;
  frame where_;
};

}  // namespace headroom::trace
