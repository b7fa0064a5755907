#pragma once
// recorder<Policy>: the allocation history of one device. Hooks (alloc, free_requested,
// free_completed, segment_alloc, segment_free) append events to a preallocated ring while
// recording is on, and always keep the table of live blocks and segments, so a snapshot taken
// at the end of a step also shows what was live when the step began.
//
//   trace::recorder<> rec({.max_entries = 100'000});
//   rec.start();
//   rec.alloc(p, bytes, trace::stream_id(s), trace::categories::activation);
//   rec.free_completed(p, bytes, trace::stream_id(s));
//
// The recording path allocates nothing; under single_thread it takes no lock either. Reading
// the history (events(), live()) needs the recorders' threads to be quiet, as a snapshot is
// taken between steps.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "headroom/core/error.hpp"
#include "headroom/trace/event.hpp"
#include "headroom/trace/live_table.hpp"
#include "headroom/trace/policy.hpp"
#include "headroom/trace/ring.hpp"

namespace headroom::trace {

struct recorder_options {
  std::size_t max_entries = 100'000;  ///< events kept per recording (the newest win)
  std::size_t max_live = 1u << 15;    ///< blocks + segments tracked at once
  int device = 0;                     ///< index in the snapshot's device_traces
  /// Stamp events with the steady clock (time_us in the snapshot). Without it, events carry
  /// their sequence number instead: the viewer orders by event index and never reads time_us,
  /// and a clock read is most of an event's cost where clock_gettime is slow (some VMs).
  bool timestamps = true;
};

template <class Policy = single_thread>
  requires recording_policy<Policy>
class recorder {
 public:
  using policy_type = Policy;
  static constexpr bool records = true;

  explicit recorder(recorder_options const& o = {})
      : ring_(checked(o).max_entries), live_(o.max_live), device_(o.device), timestamps_(o.timestamps) {}

  recorder(recorder const&) = delete;
  recorder& operator=(recorder const&) = delete;

  /// Events are appended from now on (the live table is kept up to date regardless).
  void start() noexcept {
    std::lock_guard lock(mutex_);
    recording_ = true;
  }
  void stop() noexcept {
    std::lock_guard lock(mutex_);
    recording_ = false;
  }
  [[nodiscard]] bool recording() const noexcept {
    std::lock_guard lock(mutex_);
    return recording_;
  }
  /// Forgets the recorded events (not the live table).
  void clear_events() noexcept {
    std::lock_guard lock(mutex_);
    ring_.clear();
  }

  void alloc(void const* p, std::size_t bytes, std::uint64_t stream, category c = {}, frame f = {}) noexcept {
    record(action::alloc, p, bytes, stream, c, f);
  }
  /// The block's owner released it but its memory is not reusable yet (a deferred free).
  void free_requested(void const* p, std::size_t bytes, std::uint64_t stream, category c = {}, frame f = {}) noexcept {
    record(action::free_requested, p, bytes, stream, c, f);
  }
  /// The memory is back in the allocator.
  void free_completed(void const* p, std::size_t bytes, std::uint64_t stream, category c = {}, frame f = {}) noexcept {
    record(action::free_completed, p, bytes, stream, c, f);
  }
  /// A region that later blocks live in (a pool arena, a cudaMalloc'ed segment).
  void segment_alloc(void const* p, std::size_t bytes, std::uint64_t stream, category c = {}, frame f = {}) noexcept {
    record(action::segment_alloc, p, bytes, stream, c, f);
  }
  void segment_free(void const* p, std::size_t bytes, std::uint64_t stream, category c = {}, frame f = {}) noexcept {
    record(action::segment_free, p, bytes, stream, c, f);
  }

  /// The single recording path. A null pointer is ignored (freeing null frees nothing). A
  /// free that names no category takes the one its block was allocated with.
  void record(action a, void const* p, std::size_t bytes, std::uint64_t stream, category c, frame f) noexcept {
    if (p == nullptr) return;
    auto const addr = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
    event e{addr, bytes, stream, 0, c, f, a};
    std::lock_guard lock(mutex_);
    bool const is_segment = a == action::segment_alloc || a == action::segment_free;
    switch (a) {
      case action::alloc:
      case action::segment_alloc:
        live_.insert({addr, bytes, stream, c, f, is_segment, false});
        break;
      case action::free_requested:
        if (live_entry* b = live_.find(addr, false)) {
          b->pending_free = true;
          if (!c.given()) e.what = b->what;
        }
        break;
      case action::free_completed:
      case action::segment_free: {
        live_entry gone;
        if (live_.erase(addr, is_segment, &gone) && !c.given()) e.what = gone.what;
        break;
      }
    }
    if (recording_) {
      e.time_ns = timestamps_ ? now_ns() : static_cast<std::int64_t>(++sequence_) * 1000;
      ring_.push(e);
    }
  }

  [[nodiscard]] event_ring const& events() const noexcept { return ring_; }
  [[nodiscard]] live_table const& live() const noexcept { return live_; }
  /// Events lost to the ring's wrap-around in this recording.
  [[nodiscard]] std::uint64_t dropped() const noexcept { return ring_.dropped(); }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  static recorder_options const& checked(recorder_options const& o) {
    expects(o.max_entries > 0, "trace::recorder: max_entries is 0; expected at least 1 event");
    expects(o.max_live > 0, "trace::recorder: max_live is 0; expected at least 1 live block");
    expects(o.device >= 0, "trace::recorder: device ", o.device, " is negative; expected a device ordinal >= 0");
    return o;
  }

  event_ring ring_;
  live_table live_;
  int device_;
  bool timestamps_;
  bool recording_ = false;
  std::uint64_t sequence_ = 0;
  [[no_unique_address]] mutable typename Policy::mutex_type mutex_;
};

/// Records nothing and holds nothing: every hook is an empty inline function.
template <>
class recorder<off> {
 public:
  using policy_type = off;
  static constexpr bool records = false;

  constexpr explicit recorder(recorder_options const& = {}) noexcept {}
  constexpr void start() noexcept {}
  constexpr void stop() noexcept {}
  [[nodiscard]] constexpr bool recording() const noexcept { return false; }
  constexpr void clear_events() noexcept {}
  constexpr void alloc(void const*, std::size_t, std::uint64_t, category = {}, frame = {}) noexcept {}
  constexpr void free_requested(void const*, std::size_t, std::uint64_t, category = {}, frame = {}) noexcept {}
  constexpr void free_completed(void const*, std::size_t, std::uint64_t, category = {}, frame = {}) noexcept {}
  constexpr void segment_alloc(void const*, std::size_t, std::uint64_t, category = {}, frame = {}) noexcept {}
  constexpr void segment_free(void const*, std::size_t, std::uint64_t, category = {}, frame = {}) noexcept {}
  constexpr void record(action, void const*, std::size_t, std::uint64_t, category, frame) noexcept {}
  [[nodiscard]] constexpr std::uint64_t dropped() const noexcept { return 0; }
};

/// A recorder the adaptors and hooks accept: recorder<single_thread|shared|off> or a user type
/// with the same hooks.
template <class R>
concept event_sink = requires(R& r, void const* p, std::size_t n, std::uint64_t s, category c, frame f) {
  { R::records } -> std::convertible_to<bool>;
  r.alloc(p, n, s, c, f);
  r.free_requested(p, n, s, c, f);
  r.free_completed(p, n, s, c, f);
  r.segment_alloc(p, n, s, c, f);
  r.segment_free(p, n, s, c, f);
};
static_assert(event_sink<recorder<single_thread>>);
static_assert(event_sink<recorder<shared>>);
static_assert(event_sink<recorder<off>>);
static_assert(std::is_empty_v<recorder<off>>);

}  // namespace headroom::trace
