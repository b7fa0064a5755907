// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The stream order of a unit_pool's slots: for every free slot, the release it must follow (the
// releasing stream and one event per release), and the device-side waits an acquire on another
// stream issues for it. The host never blocks.
//
//   release(lease, s):  begin_release(s, record_now) -> event; free_slot(slot, event) per slot;
//                       end_release(event, slots freed)
//   acquire(u, s):      wait_for(slot, s, ...) per slot it may take; take(slot) per slot it takes;
//                       issue_waits(s, ...) last (throws: untake each slot, in reverse, and
//                       unmark what wait_for<true> marked)
//
// One wait per releasing stream, not per slot: releases on one stream are ordered by it, so the
// latest-recorded event of that stream covers every earlier one (a unit of two buckets whose
// slots two releases on the compute stream freed waits once, on the later release).
//
// An event not recorded at release (the release order policy deferred it) is recorded on the
// releasing stream by the first wait that needs it: the waiter then follows everything issued
// to that stream up to the wait, a superset of the release (never unsafe).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "headroom/pool/detail/release_events.hpp"

namespace headroom::pool::detail {

template <class Stream, class Event>
class stream_order {
 public:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  stream_order() : events_(0) {}
  /// An event is busy while a free slot still refers to it, so there are never more busy events
  /// than slots, and a release always finds a free one (release_events keeps a few more).
  explicit stream_order(std::size_t slots)
      : slots_(slots), events_(slots) {}

  /// The event of one release on `s`, recorded now when `record_now` (may throw a CUDA error:
  /// nothing has changed then).
  [[nodiscard]] std::uint32_t begin_release(Stream const& s, bool record_now) {
    std::uint32_t const e = events_.next();
    auto& re = events_[e];
    if (record_now) re.event.record(s);
    re.stamp = record_now ? ++clock_ : 0;
    re.stream = s;
    events_.claim();
    return e;
  }
  /// Slot `i` is free after the release `e` (end_release counts the slots on `e`).
  void free_slot(std::uint32_t i, std::uint32_t e) noexcept {
    auto& sl = slots_[i];
    sl.waited = false;
    sl.event = e;
  }
  /// The release `e` freed `freed` slots; if none, its event is free again.
  void end_release(std::uint32_t e, std::uint32_t freed) noexcept {
    if (freed != 0)
      events_.hold(e, freed);
    else
      events_.unclaim_if_unheld(e);
  }

  /// Notes that `s` must follow the release of slot `i`, unless `s` is the releasing stream or
  /// already follows it. `waited[0, waits)` keeps one event per releasing stream, the one that
  /// covers the others: an event not yet recorded (recorded by issue_waits, it follows everything
  /// on that stream), else the latest recorded. Issues nothing (issue_waits does).
  /// `Mark`: remember that `s` follows the release (interval plans, where an acquire looks at
  /// slots it does not take); a slot that is taken right after needs no mark.
  template <bool Mark>
  void wait_for(std::uint32_t i, Stream const& s, std::uint32_t* waited, std::uint64_t& waits) noexcept {
    auto& sl = slots_[i];
    std::uint32_t const e = sl.event;
    if (e == none) return;  // not pending
    auto const& re = events_[e];
    if (re.stream == s) return;
    if constexpr (Mark) {
      if (sl.waited && sl.waited_by == s) return;
      sl.waited = true;  // s is ordered after the release from here on (stream order)
      sl.waited_by = s;
    }
    for (std::uint64_t k = 0; k < waits; ++k) {
      std::uint32_t& w = waited[k];
      auto const& rw = events_[w];
      if (!(rw.stream == re.stream)) continue;
      if (w != e && rw.stamp != 0 && (re.stamp == 0 || re.stamp > rw.stamp)) w = e;  // e covers w
      return;
    }
    waited[waits++] = e;
  }
  /// Undoes a mark of wait_for<true> on slot `i` by `s` (its waits failed to issue). A mark made
  /// before is dropped too: that costs one extra wait later, never a missing one.
  void unmark(std::uint32_t i, Stream const& s) noexcept {
    auto& sl = slots_[i];
    if (sl.waited && sl.waited_by == s) sl.waited = false;
  }
  /// Orders `s` after the events wait_for kept, on the device: records those the releases
  /// deferred (on their releasing streams, counting them in `recorded`), then one wait each. May
  /// throw (a CUDA error): extra records and waits are harmless; the marks wait_for<true> made
  /// stay (the caller unmarks them).
  void issue_waits(Stream const& s, std::uint32_t const* waited, std::uint64_t waits, std::uint64_t& recorded) {
    for (std::uint64_t k = 0; k < waits; ++k) {
      std::uint32_t const e = waited[k];
      auto& re = events_[e];
      if (re.stamp == 0) [[unlikely]] {
        re.event.record(re.stream);
        re.stamp = ++clock_;
        ++recorded;
      }
      re.event.wait_on(s);
    }
  }
  /// Slot `i` is taken: it no longer follows its release (its event is free once no slot does).
  /// Returns the release it followed (none if none), for untake.
  std::uint32_t take(std::uint32_t i) noexcept {
    auto& sl = slots_[i];
    std::uint32_t const e = sl.event;
    if (e == none) return none;
    events_.drop(e);
    sl.event = none;
    return e;
  }
  /// Undoes take(i) (its result `e`): call in the reverse order of the takes, with nothing else
  /// between them but issue_waits (an acquire whose waits failed gives its slots back).
  void untake(std::uint32_t i, std::uint32_t e) noexcept {
    if (e == none) return;
    events_.undrop(e);
    slots_[i].event = e;
  }

  /// Forgets every release (the host synchronized the streams, or around a graph capture).
  void clear() noexcept {
    for (auto& sl : slots_) sl.event = none;
    events_.reset();
  }
  [[nodiscard]] std::size_t pending() const noexcept {
    std::size_t n = 0;
    for (auto const& sl : slots_) n += sl.event != none ? 1 : 0;
    return n;
  }
  [[nodiscard]] std::size_t busy() const noexcept { return events_.busy(); }

  /// Makes `home` wait for every pending release on another stream (the pool is about to free
  /// its memory on `home`); if a wait fails, the host waits for the releases instead.
  void drain(Stream const& home) noexcept {
    // One wait per distinct event, found without allocating: a slot waits unless an earlier
    // pending slot holds the same event. Quadratic in the slots, once, at destruction.
    auto const waits = [&](std::size_t i) {
      auto const e = slots_[i].event;
      if (e == none || events_[e].stream == home) return false;
      for (std::size_t j = 0; j < i; ++j)
        if (slots_[j].event == e) return false;  // same event, so same stream
      return true;
    };
    try {
      for (std::size_t i = 0; i < slots_.size(); ++i)
        if (waits(i)) {
          auto& re = events_[slots_[i].event];
          if (re.stamp == 0) {
            re.event.record(re.stream);
            re.stamp = ++clock_;
          }
          re.event.wait_on(home);
        }
    } catch (...) {
      for (auto const& sl : slots_)
        if (sl.event != none && events_[sl.event].stamp != 0) {
          try {
            events_[sl.event].event.synchronize();
          } catch (...) {
          }
        }
    }
  }

 private:
  // A slot is pending (released, and not taken since) while it has an event; the releasing
  // stream is the event's.
  struct slot_release {
    std::uint32_t event = none;  // that release's event (shared by every slot it freed)
    bool waited = false;         // `waited_by` already follows the release (interval plans: shared bytes)
    Stream waited_by{};
  };
  std::vector<slot_release> slots_;
  release_events<Stream, Event> events_;  // per event: its release's stream and record stamp
  std::uint64_t clock_ = 0;
};

}  // namespace headroom::pool::detail
