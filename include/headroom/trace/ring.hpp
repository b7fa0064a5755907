#pragma once
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
        capacity_(max_entries) {}

  void push(event const& e) noexcept {
    events_[next_] = e;
    if (++next_ == capacity_) next_ = 0;
    if (size_ < capacity_) {
      ++size_;
    } else {
      ++dropped_;
    }
  }

  /// Forgets every event (the dropped count too); keeps the storage.
  void clear() noexcept {
    next_ = 0;
    size_ = 0;
    dropped_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// Events overwritten because the ring was full, since the last clear().
  [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_; }

  /// The i-th oldest event still held (i < size()).
  [[nodiscard]] event const& operator[](std::size_t i) const noexcept {
    std::size_t const first = size_ < capacity_ ? 0 : next_;
    std::size_t const at = first + i;
    return events_[at < capacity_ ? at : at - capacity_];
  }

  /// Calls f(event) from the oldest to the newest.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < size_; ++i) f((*this)[i]);
  }

 private:
  std::unique_ptr<event[]> events_;
  std::size_t capacity_;
  std::size_t next_ = 0;
  std::size_t size_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace headroom::trace
