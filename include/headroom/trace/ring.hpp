// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// event_ring: the preallocated ring of `max_entries` events. push() never allocates; when the
// ring is full it overwrites the oldest event and counts it as dropped, so a long step keeps
// its newest history (PyTorch's RingBuffer does the same).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "headroom/core/error.hpp"
#include "headroom/trace/event.hpp"

namespace headroom::trace {

class event_ring {
 public:
  /// Allocates room for `max_entries` events now; recording never allocates again.
  explicit event_ring(std::size_t max_entries)
      : events_((expects(max_entries > 0, "trace::event_ring: max_entries is 0; expected at least 1 event"),
                 std::make_unique_for_overwrite<event[]>(max_entries))),
        capacity_(max_entries),
        next_(events_.get()),
        end_(events_.get() + max_entries) {}

  void push(event const& e) noexcept { claim() = e; }

  /// The slot of the next event, counted as written: the recorder fills it in place, so an
  /// event is written once, straight into the ring. One compare and one store an event; the
  /// counts are derived from the cursor and the number of wraps.
  [[nodiscard]] event& claim() noexcept {
    event& slot = *next_;
    if (++next_ == end_) [[unlikely]] {
      next_ = events_.get();
      ++wraps_;
    }
    return slot;
  }

  /// Forgets every event (the dropped count too); keeps the storage.
  void clear() noexcept {
    next_ = events_.get();
    wraps_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return wraps_ > 0 ? capacity_ : cursor(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// Events overwritten because the ring was full, since the last clear().
  [[nodiscard]] std::uint64_t dropped() const noexcept {
    return wraps_ > 0 ? (wraps_ - 1) * capacity_ + cursor() : 0;
  }

  /// The i-th oldest event still held (i < size()).
  [[nodiscard]] event const& operator[](std::size_t i) const noexcept {
    std::size_t const at = (wraps_ > 0 ? cursor() : 0) + i;
    return events_[at < capacity_ ? at : at - capacity_];
  }

  /// Calls f(event) from the oldest to the newest.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0, n = size(); i < n; ++i) f((*this)[i]);
  }

 private:
  [[nodiscard]] std::size_t cursor() const noexcept { return static_cast<std::size_t>(next_ - events_.get()); }

  std::unique_ptr<event[]> events_;
  std::size_t capacity_;
  event* next_;           ///< the slot the next event goes to
  event* end_;
  std::uint64_t wraps_ = 0;  ///< times next_ went round since the last clear()
};

}  // namespace headroom::trace
