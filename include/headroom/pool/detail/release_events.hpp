#pragma once
// One event per release (unit_pool): a fixed set of events, each busy while a free slot still
// waits on it. A release takes a free event, records it and every slot it frees holds it; an
// acquire that takes the slot drops it; the event is free again when no slot holds it. Busy
// events never outnumber free slots, so with one event per slot a release always finds one.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace headroom::pool::detail {

template <class Event>
class release_events {
 public:
  explicit release_events(std::size_t count) : events_(count), holds_(count, 0) {
    free_.reserve(count);  // drop() and unclaim_if_unheld() never allocate
    reset();
  }

  /// The event the next release takes (record it, then claim it: recording may throw).
  [[nodiscard]] std::uint32_t next() const noexcept { return free_.back(); }
  void claim() noexcept { free_.pop_back(); }
  /// A claimed event that no slot came to hold is free again.
  void unclaim_if_unheld(std::uint32_t e) noexcept {
    if (holds_[e] == 0) free_.push_back(e);
  }
  void hold(std::uint32_t e) noexcept { ++holds_[e]; }
  void drop(std::uint32_t e) noexcept {
    if (--holds_[e] == 0) free_.push_back(e);
  }
  /// Every event free (after clear_release_events).
  void reset() noexcept {
    std::fill(holds_.begin(), holds_.end(), 0);
    free_.clear();
    for (auto e = static_cast<std::uint32_t>(events_.size()); e-- > 0;) free_.push_back(e);
  }

  [[nodiscard]] Event& operator[](std::uint32_t e) noexcept { return events_[e]; }
  [[nodiscard]] std::size_t size() const noexcept { return events_.size(); }
  [[nodiscard]] std::size_t busy() const noexcept { return events_.size() - free_.size(); }

 private:
  std::vector<Event> events_;
  std::vector<std::uint32_t> holds_;  // per event: free slots still waiting on it
  std::vector<std::uint32_t> free_;   // events no slot holds, the next one at the back
};

}  // namespace headroom::pool::detail
