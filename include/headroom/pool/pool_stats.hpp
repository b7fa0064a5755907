// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// What a unit_pool counts (pool_stats) and what a lease covers (target_kind).
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"

namespace headroom::pool {

namespace detail {
/// Throws E with the concatenated parts. For hot paths: `if (!ok) [[unlikely]] fail<E>(...)`
/// keeps the message arguments out of the common path.
template <class E, class... Parts>
[[noreturn]] void fail(Parts const&... parts) {
  throw E(headroom::detail::concat(parts...));
}
}  // namespace detail

struct pool_stats {
  std::size_t slots_total = 0;
  std::size_t slots_in_use = 0;
  std::size_t slots_in_use_peak = 0;
  std::uint64_t arena_bytes = 0;
  std::uint64_t persistent_bytes = 0;    ///< persistent buffers of buckets without a slot
  std::uint64_t bytes_reserved = 0;      ///< arena + persistent
  std::uint64_t fallback_bytes_in_use = 0;  ///< dynamic buffers held now
  std::uint64_t fallback_bytes_peak = 0;
  std::uint64_t acquisitions = 0;        ///< acquire calls that took slots or buffers (not re-fetches)
  std::uint64_t refetches = 0;           ///< acquire calls on a unit already held
  std::uint64_t releases = 0;
  std::uint64_t moves = 0;               ///< strict: buckets that could not take their pinned group
  std::uint64_t cross_stream_waits = 0;  ///< device-side waits issued at acquire
  std::uint64_t fallback_allocations = 0;
  std::uint64_t off_trace_fallbacks = 0;  ///< interval plans: acquires served outside the arena
  std::uint64_t release_events = 0;       ///< events recorded at release (at most one per release)
  std::uint64_t reuse_events = 0;         ///< events a release deferred, recorded by a reuse on another stream

  friend std::ostream& operator<<(std::ostream& os, pool_stats const& s) {
    return os << "slots " << s.slots_in_use << "/" << s.slots_total << " (peak " << s.slots_in_use_peak
              << "), reserved " << format_bytes(s.bytes_reserved) << " (arena " << format_bytes(s.arena_bytes)
              << ", persistent " << format_bytes(s.persistent_bytes) << "), fallback in use "
              << format_bytes(s.fallback_bytes_in_use) << " (peak " << format_bytes(s.fallback_bytes_peak)
              << "), acquisitions " << s.acquisitions << ", refetches " << s.refetches << ", releases "
              << s.releases << ", moves " << s.moves << ", cross-stream waits " << s.cross_stream_waits
              << ", fallback allocations " << s.fallback_allocations << ", off-trace fallbacks "
              << s.off_trace_fallbacks << ", release events " << s.release_events << ", reuse events " << s.reuse_events;
  }
};

/// What a lease covers: a unit of the plan, or a non-unit bucket.
enum class target_kind : std::uint8_t { unit, non_unit };

}  // namespace headroom::pool
