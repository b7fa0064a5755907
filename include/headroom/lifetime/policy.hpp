// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Release policies of a lifetime guard: what happens to a block when its owner lets it go while
// other streams may still be using it. Each policy is an empty tag with one static function,
//
//   P::release(resource, owner_stream, block, uses)
//
// where `uses` holds one recorded event per stream that used the block (never the owner: work on
// the owner stream is ordered before the free anyway). A policy either frees the block (calling
// `resource.deallocate(owner, ...)`) or hands it to someone who will, and throws without freeing
// anything when it cannot order the free: the guard then keeps the block.
//
//   stream_ordered  owner stream waits on every use event on the device, then frees on the owner
//                   stream. The host never blocks; the memory is reusable at once by work ordered
//                   after the owner stream (RMM device_buffer, PyTorch's stashing since #150398).
//   deferred        the record_stream behaviour of PyTorch's caching allocator, kept to compare:
//                   an event is recorded on every use stream at the time of the free, and the
//                   block is quarantined until the host sees them all complete, which it checks
//                   only when the resource is next asked for memory (deferred_reclaimer).
//   blocking        the host waits for every use event, then frees on the owner stream.
#include <concepts>
#include <cstddef>
#include <ostream>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"

namespace headroom::lifetime {

/// A block of memory as a resource handed it out: pointer, size and alignment of the request.
struct block {
  void* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;

  friend bool operator==(block const&, block const&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& os, block const& b) {
    return os << b.bytes << " bytes at " << b.pointer << " (alignment " << b.alignment << ")";
  }
};

/// The mark a guard keeps for one stream that used its block.
template <class Stream, class Event>
struct stream_use {
  Stream stream;
  Event event;
};

/// A resource that can take a block out of circulation until its use events complete.
template <class R, class S, class E>
concept quarantining_resource = stream_resource<R, S> && event<E, S> &&
    requires(R& r, S const& s, block b, std::vector<stream_use<S, E>>&& uses) { r.quarantine(s, b, std::move(uses)); };

struct stream_ordered {
  static constexpr std::string_view name = "stream_ordered";

  template <class R, class S, class E>
    requires stream_resource<R, S> && event<E, S>
  static void release(R& resource, S const& owner, block b, std::vector<stream_use<S, E>>& uses) {
    for (auto const& use : uses) use.event.wait_on(owner);  // device-side; may throw before any free
    resource.deallocate(owner, b.pointer, b.bytes, b.alignment);
    uses.clear();  // the waits are enqueued; CUDA lets an event go once a stream waits on it
  }
};

struct deferred {
  static constexpr std::string_view name = "deferred";

  template <class R, class S, class E>
    requires quarantining_resource<R, S, E>
  static void release(R& resource, S const& owner, block b, std::vector<stream_use<S, E>>& uses) {
    // Like insert_events: the marks move to the end of each use stream at the time of the free,
    // so the block also waits for whatever those streams were given since (use streams must
    // therefore be alive at release under this policy, as under record_stream).
    for (auto& use : uses) use.event.record(use.stream);
    resource.quarantine(owner, b, std::move(uses));
    uses.clear();
  }
};

struct blocking {
  static constexpr std::string_view name = "blocking";

  template <class R, class S, class E>
    requires stream_resource<R, S> && event<E, S>
  static void release(R& resource, S const& owner, block b, std::vector<stream_use<S, E>>& uses) {
    for (auto const& use : uses) use.event.synchronize();  // the host waits here, by name
    resource.deallocate(owner, b.pointer, b.bytes, b.alignment);
    uses.clear();
  }
};

/// `P` can release blocks of resource `R` used on streams `S` marked by events `E`.
template <class P, class R, class S, class E>
concept release_policy_for = std::is_empty_v<P> &&
    requires(R& r, S const& s, block b, std::vector<stream_use<S, E>>& uses) {
      { P::name } -> std::convertible_to<std::string_view>;
      P::release(r, s, b, uses);
    };

}  // namespace headroom::lifetime
