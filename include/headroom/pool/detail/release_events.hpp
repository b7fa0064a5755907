// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// One event per release (unit_pool): a fixed set of events, each busy while a free slot still
// waits on it. A release takes a free event, records it and every slot it frees holds it; an
// acquire that takes the slot drops it; the event is free again when no slot holds it. Busy
// events never outnumber free slots, so with one event per slot a release always finds one.
//
// Free events are reused first in, first out, from a set `spare` larger than the slots: a
// release re-records the event that has been idle longest, not the one another stream waited on
// a moment ago (as a bare loop over per-unit events does).
//
// Each event's entry holds everything a release and the acquires after it touch (the release's
// stream, its record stamp, the slots holding it, the event itself): one array, one cache line
// or two per event on the hot path.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace headroom::pool::detail {

template <class Stream, class Event>
class release_events {
 public:
  static constexpr std::size_t spare = 16;

  struct entry {
    std::uint64_t stamp = 0;  // when recorded (stream_order's clock, to find the latest per stream); 0 = not yet
    Stream stream{};          // the release's stream
    std::uint32_t holds = 0;  // free slots still waiting on it
    Event event;
  };

  /// Events for `slots` slots (none when there are no slots).
  explicit release_events(std::size_t slots)
      : entries_(slots == 0 ? 0 : slots + spare),
        ring_(std::bit_ceil(entries_.size()), 0),
        count_(static_cast<std::uint32_t>(entries_.size())),
        mask_(static_cast<std::uint32_t>(ring_.size()) - 1) {
    reset();
  }

  /// The event the next release takes (record it, then claim it: recording may throw).
  [[nodiscard]] std::uint32_t next() const noexcept { return ring_[head_]; }
  void claim() noexcept {
    head_ = (head_ + 1) & mask_;
    --free_;
  }
  /// A claimed event that no slot came to hold is free again.
  void unclaim_if_unheld(std::uint32_t e) noexcept {
    if (entries_[e].holds == 0) push(e);
  }
  void hold(std::uint32_t e, std::uint32_t slots) noexcept { entries_[e].holds += slots; }
  void drop(std::uint32_t e) noexcept {
    if (--entries_[e].holds == 0) push(e);
  }
  /// Undoes the last drop(e) (drops undone last first: a drop that freed `e` pushed it last).
  void undrop(std::uint32_t e) noexcept {
    if (entries_[e].holds++ == 0) --free_;  // the newest free event is `e`: take it back
  }
  /// Every event free (after clear_release_events).
  void reset() noexcept {
    for (auto& en : entries_) en.holds = 0;
    for (std::uint32_t e = 0; e < count_; ++e) ring_[e] = e;
    head_ = 0;
    free_ = count_;
  }

  [[nodiscard]] entry& operator[](std::uint32_t e) noexcept { return entries_[e]; }
  [[nodiscard]] entry const& operator[](std::uint32_t e) const noexcept { return entries_[e]; }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::size_t busy() const noexcept { return entries_.size() - free_; }

 private:
  void push(std::uint32_t e) noexcept {
    ring_[(head_ + free_) & mask_] = e;
    ++free_;
  }
  std::vector<entry> entries_;
  // Free events from ring_[head_], oldest first (FIFO); a power of two long, so indices wrap
  // with a mask.
  std::vector<std::uint32_t> ring_;
  std::uint32_t count_ = 0;  // entries_.size()
  std::uint32_t mask_ = 0;   // ring_.size() - 1
  std::uint32_t head_ = 0;
  std::uint32_t free_ = 0;
};

}  // namespace headroom::pool::detail
