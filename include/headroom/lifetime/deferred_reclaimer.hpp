// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// deferred_reclaimer: the record_stream model of PyTorch's caching allocator, as a resource
// adaptor that guards with the `deferred` policy allocate from and release into.
//
// A released block that other streams used is not freed: it waits in a quarantine with the use
// events. Only when the host next asks the reclaimer for memory (allocate, or poll()) does it
// query the events, and blocks whose events have all completed go back to the upstream resource
// on their owner stream. So the longer the host runs ahead of the device, the more memory sits
// in quarantine (c10/cuda/CUDACachingAllocator.cpp: insert_events / process_events). When the
// upstream resource runs out, the reclaimer waits on the host for every quarantined block, frees
// them and retries once (synchronize_and_free_events, counted like num_sync_all_streams).
//
// It is kept to measure against stream_ordered, not to recommend. Not copyable or movable:
// guards point at it. Its destructor waits for and frees every quarantined block, so it must
// outlive its guards and the upstream resource must outlive it. A quarantined block is freed on
// its owner stream, so that stream must stay alive until the block has left the quarantine
// (poll() saw it done, synchronize_and_free(), or the destructor): declare the streams before the
// reclaimer, or call synchronize_and_free() before destroying them. (CUDA does not detect a
// destroyed stream here: cudaFreeAsync on its handle is undefined and crashes.) Thread-safe.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <ostream>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/lifetime/policy.hpp"

namespace headroom::lifetime {

/// Counters of a deferred_reclaimer (bytes are request sizes).
struct reclaimer_stats {
  std::size_t quarantined_blocks = 0;
  std::size_t quarantined_bytes = 0;
  std::size_t peak_quarantined_bytes = 0;
  std::size_t blocks_deferred = 0;       // released with pending uses, so quarantined
  std::size_t blocks_freed_by_poll = 0;  // freed once the host saw their events complete
  std::size_t synchronize_all_count = 0;  // host waited on every quarantined block (out of memory)

  friend bool operator==(reclaimer_stats const&, reclaimer_stats const&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& os, reclaimer_stats const& s) {
    return os << "quarantine: " << s.quarantined_blocks << " blocks, " << format_bytes(s.quarantined_bytes)
              << " (peak " << format_bytes(s.peak_quarantined_bytes) << "); deferred " << s.blocks_deferred
              << ", freed by poll " << s.blocks_freed_by_poll << ", synchronize-all " << s.synchronize_all_count;
  }
};

template <class Upstream, class Stream, class Event>
  requires stream_resource<Upstream, Stream> && event<Event, Stream>
class deferred_reclaimer {
 public:
  using upstream_type = Upstream;
  using stream_type = Stream;
  using event_type = Event;

  /// `upstream` must outlive the reclaimer.
  explicit deferred_reclaimer(Upstream& upstream) noexcept : upstream_(&upstream) {}
  deferred_reclaimer(deferred_reclaimer const&) = delete;
  deferred_reclaimer& operator=(deferred_reclaimer const&) = delete;

  /// Waits on the host for every quarantined block and frees it.
  ~deferred_reclaimer() {
    try {
      synchronize_and_free();
    } catch (...) {
      // An event query failed (a sticky device error): nothing can be freed safely any more.
    }
  }

  /// Polls the quarantine, then allocates from upstream. On capacity_error or bad_alloc with
  /// blocks in quarantine, waits for all of them, frees them and retries once.
  [[nodiscard]] void* allocate(Stream const& s, std::size_t bytes, std::size_t alignment = default_alignment) {
    poll();
    try {
      return upstream_->allocate(s, bytes, alignment);
    } catch (capacity_error const&) {
      if (!synchronize_and_free()) throw;
    } catch (std::bad_alloc const&) {
      if (!synchronize_and_free()) throw;
    }
    return upstream_->allocate(s, bytes, alignment);
  }

  /// Frees at once into upstream (a block nobody else used; same contract as upstream's).
  void deallocate(Stream const& s, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    upstream_->deallocate(s, p, bytes, alignment);
  }

  /// Takes `b`, released on `owner`, out of circulation until every event in `uses` has
  /// completed. With no uses it is freed at once. Used by the `deferred` policy.
  void quarantine(Stream const& owner, block b, std::vector<stream_use<Stream, Event>>&& uses) {
    if (uses.empty()) {
      upstream_->deallocate(owner, b.pointer, b.bytes, b.alignment);
      return;
    }
    std::lock_guard lock(mutex_);
    entries_.reserve(entries_.size() + 1);  // may throw: then `uses` is untouched, the guard keeps them
    entries_.push_back({owner, b, std::move(uses)});
    stats_.quarantined_blocks += 1;
    stats_.quarantined_bytes += b.bytes;
    stats_.peak_quarantined_bytes = std::max(stats_.peak_quarantined_bytes, stats_.quarantined_bytes);
    stats_.blocks_deferred += 1;
  }

  /// Frees every quarantined block whose events the host sees complete. Returns how many.
  std::size_t poll() {
    std::lock_guard lock(mutex_);
    std::size_t freed = 0;
    for (std::size_t i = 0; i < entries_.size();) {
      auto& entry = entries_[i];
      bool const done =
          std::all_of(entry.uses.begin(), entry.uses.end(), [](auto const& u) { return bool(u.event.ready()); });
      if (!done) {
        ++i;
        continue;
      }
      free_entry(entry);
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      ++freed;
    }
    stats_.blocks_freed_by_poll += freed;
    return freed;
  }

  /// The host waits for the events of every quarantined block, then frees them all. Returns
  /// whether anything was freed (counted in synchronize_all_count when so).
  bool synchronize_and_free() {
    std::lock_guard lock(mutex_);
    if (entries_.empty()) return false;
    for (auto& entry : entries_)
      for (auto const& u : entry.uses) u.event.synchronize();
    for (auto& entry : entries_) free_entry(entry);
    entries_.clear();
    stats_.synchronize_all_count += 1;
    return true;
  }

  [[nodiscard]] reclaimer_stats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  [[nodiscard]] Upstream& upstream() const noexcept { return *upstream_; }

  /// Equal only to itself: a block must go back to the quarantine that handed it out.
  friend bool operator==(deferred_reclaimer const& a, deferred_reclaimer const& b) noexcept { return &a == &b; }

  template <class Property>
    requires has_property<Upstream, Property>
  friend void get_property(deferred_reclaimer const&, Property) noexcept {}

 private:
  struct entry {
    Stream owner;
    block b;
    std::vector<stream_use<Stream, Event>> uses;
  };

  // Caller holds the lock.
  void free_entry(entry& e) noexcept {
    upstream_->deallocate(e.owner, e.b.pointer, e.b.bytes, e.b.alignment);
    stats_.quarantined_blocks -= 1;
    stats_.quarantined_bytes -= e.b.bytes;
  }

  Upstream* upstream_;
  mutable std::mutex mutex_;
  std::vector<entry> entries_;
  reclaimer_stats stats_{};
};

}  // namespace headroom::lifetime
