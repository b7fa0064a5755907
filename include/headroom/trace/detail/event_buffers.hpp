// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Where a recorder's events go. event_buffers<false>: one ring (single_thread). event_buffers<true>:
// one ring per recording thread (shared), so threads never write the same cache lines; the
// rings are merged in time order when the history is read, between steps.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "headroom/trace/event.hpp"
#include "headroom/trace/ring.hpp"

namespace headroom::trace::detail {

/// The events kept, oldest first, and how many were lost.
struct history {
  std::vector<event> events;
  std::uint64_t dropped = 0;
};

/// Rings each in time order, merged: only the window in which no ring has lost an event (so
/// the merged trace is a suffix of what happened), then the newest `max_entries` of it.
/// Equal times keep the rings' order.
inline history merge_rings(std::vector<event_ring const*> const& rings, std::size_t max_entries, std::uint64_t lost) {
  history h;
  h.dropped = lost;
  std::int64_t cut = 0;
  bool cutting = false;
  std::size_t total = 0;
  for (auto const* r : rings) {
    h.dropped += r->dropped();
    total += r->size();
    if (r->dropped() > 0 && r->size() > 0 && (!cutting || (*r)[0].time > cut)) {
      cut = (*r)[0].time;
      cutting = true;
    }
  }
  h.events.reserve(total);
  for (auto const* r : rings) {
    r->for_each([&](event const& e) {
      if (cutting && e.time < cut) {
        ++h.dropped;
      } else {
        h.events.push_back(e);
      }
    });
  }
  if (rings.size() > 1) std::ranges::stable_sort(h.events, {}, &event::time);
  if (h.events.size() > max_entries) {
    auto const excess = h.events.size() - max_entries;
    h.events.erase(h.events.begin(), h.events.begin() + static_cast<std::ptrdiff_t>(excess));
    h.dropped += excess;
  }
  return h;
}

template <bool PerThread>
class event_buffers;

template <>
class event_buffers<false> {
 public:
  explicit event_buffers(std::size_t max_entries) : ring_(max_entries) {}
  [[nodiscard]] event_ring* local() noexcept { return &ring_; }
  void clear() noexcept { ring_.clear(); }
  [[nodiscard]] history merged() const { return merge_rings({&ring_}, ring_.capacity(), 0); }
  [[nodiscard]] std::uint64_t dropped() const noexcept { return ring_.dropped(); }
  [[nodiscard]] std::size_t size() const noexcept { return ring_.size(); }

 private:
  event_ring ring_;
};

/// A thread's last few (recorder, ring) pairs: the lookup on the recording path is a scan of
/// four entries in thread-local storage.
struct ring_cache {
  struct entry {
    std::uint64_t owner = 0;
    event_ring* ring = nullptr;
  };
  entry entries[4]{};
  unsigned next = 0;
};
inline thread_local constinit ring_cache thread_rings{};
inline std::atomic<std::uint64_t> next_buffers_id{1};

template <>
class event_buffers<true> {
 public:
  explicit event_buffers(std::size_t max_entries)
      : max_entries_(max_entries), id_(next_buffers_id.fetch_add(1, std::memory_order_relaxed)) {}

  /// This thread's ring; its first call from a thread allocates the ring (null, and the event
  /// counted as lost, when that allocation fails).
  [[nodiscard]] event_ring* local() noexcept {
    for (auto const& e : thread_rings.entries) {
      if (e.owner == id_) return e.ring;
    }
    return register_thread();
  }
  void lost() noexcept { lost_.fetch_add(1, std::memory_order_relaxed); }

  void clear() noexcept {
    std::lock_guard lock(mutex_);
    for (auto& [who, ring] : rings_) ring->clear();
    lost_.store(0, std::memory_order_relaxed);
  }
  [[nodiscard]] history merged() const {
    std::lock_guard lock(mutex_);
    std::vector<event_ring const*> rings;
    for (auto const& [who, ring] : rings_) rings.push_back(ring.get());
    return merge_rings(rings, max_entries_, lost_.load(std::memory_order_relaxed));
  }

 private:
  event_ring* register_thread() noexcept {
    event_ring* ring = nullptr;
    try {
      std::lock_guard lock(mutex_);
      auto const me = std::this_thread::get_id();
      for (auto const& [who, r] : rings_) {
        if (who == me) ring = r.get();
      }
      if (ring == nullptr) {
        rings_.emplace_back(me, std::make_unique<event_ring>(max_entries_));
        ring = rings_.back().second.get();
      }
    } catch (std::bad_alloc const&) {
      return nullptr;
    }
    auto& slot = thread_rings.entries[thread_rings.next++ % 4];
    slot = {id_, ring};
    return ring;
  }

  std::size_t max_entries_;
  std::uint64_t id_;  // never reused, so a stale cache entry of a destroyed recorder never matches
  mutable std::mutex mutex_;
  std::vector<std::pair<std::thread::id, std::unique_ptr<event_ring>>> rings_;
  std::atomic<std::uint64_t> lost_{0};
};

}  // namespace headroom::trace::detail
