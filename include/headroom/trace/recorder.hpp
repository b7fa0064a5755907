// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
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
// The recording path allocates nothing (under shared, a thread's first event allocates its
// buffer); under single_thread it takes no lock either. Reading the history (history(),
// events(), live()) needs the recording threads to be quiet, as a snapshot is taken between
// steps.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/trace/clock.hpp"
#include "headroom/trace/detail/event_buffers.hpp"
#include "headroom/trace/event.hpp"
#include "headroom/trace/live_table.hpp"
#include "headroom/trace/policy.hpp"
#include "headroom/trace/ring.hpp"

namespace headroom::trace {

/// The most events a recorder's ring takes (each ~64 bytes, allocated at construction).
inline constexpr std::size_t max_entries_limit = std::size_t{1} << 32;

struct recorder_options {
  std::size_t max_entries = 100'000;  ///< events kept per recording (the newest win)
  std::size_t max_live = 1u << 15;    ///< blocks + segments tracked at once
  int device = 0;                     ///< index in the snapshot's device_traces
  /// Stamp events with ticks() (time_us in the snapshot, as Unix-epoch microseconds). Without
  /// it, events carry sequence numbers and the snapshot gives every event the time recording
  /// started: the viewer orders events by index and never reads time_us.
  bool timestamps = true;
};

// Checked by a static_assert rather than a requires clause, so a wrong policy stops at a sentence.
template <class Policy = single_thread>
class recorder {
  static_assert(recording_policy<Policy>,
                "trace::recorder<Policy>: Policy is not a trace::recording_policy (records, and when it records: "
                "per_thread_buffers, shards and a lockable mutex_type); use trace::single_thread, trace::shared "
                "or trace::off");

 public:
  using policy_type = Policy;
  using live_table_type = sharded_live_table<typename Policy::mutex_type, Policy::shards>;
  static constexpr bool records = true;

  explicit recorder(recorder_options const& o = {})
      : options_(checked(o)), live_(o.max_live), buffers_(o.max_entries) {
    (void)time_base::now();  // the process's clock origin, before the first event
  }

  recorder(recorder const&) = delete;
  recorder& operator=(recorder const&) = delete;

  /// Events are appended from now on (the live table is kept up to date regardless).
  void start() noexcept {
    start_ticks_.store(ticks(), std::memory_order_relaxed);
    recording_.store(true, std::memory_order_release);
  }
  void stop() noexcept { recording_.store(false, std::memory_order_release); }
  [[nodiscard]] bool recording() const noexcept { return recording_.load(std::memory_order_acquire); }
  /// Forgets the recorded events (not the live table). Call it while no thread records.
  void clear_events() noexcept { buffers_.clear(); }

  [[gnu::always_inline]] void alloc(void const* p, std::size_t bytes, std::uint64_t stream, category c = {},
             frame f = frame::current()) noexcept {
    record(action::alloc, p, bytes, stream, c, f);
  }
  /// The block's owner released it but its memory is not reusable yet (a deferred free).
  [[gnu::always_inline]] void free_requested(void const* p, std::size_t bytes, std::uint64_t stream, category c = {},
                      frame f = frame::current()) noexcept {
    record(action::free_requested, p, bytes, stream, c, f);
  }
  /// The memory is back in the allocator.
  [[gnu::always_inline]] void free_completed(void const* p, std::size_t bytes, std::uint64_t stream, category c = {},
                      frame f = frame::current()) noexcept {
    record(action::free_completed, p, bytes, stream, c, f);
  }
  /// A region that later blocks live in (a pool arena, a cudaMalloc'ed segment).
  [[gnu::always_inline]] void segment_alloc(void const* p, std::size_t bytes, std::uint64_t stream, category c = {},
                     frame f = frame::current()) noexcept {
    record(action::segment_alloc, p, bytes, stream, c, f);
  }
  [[gnu::always_inline]] void segment_free(void const* p, std::size_t bytes, std::uint64_t stream, category c = {},
                    frame f = frame::current()) noexcept {
    record(action::segment_free, p, bytes, stream, c, f);
  }

  /// The single recording path. A null pointer is ignored (freeing null frees nothing). A free
  /// of a known block carries the frame its block was allocated with (as PyTorch's do: the
  /// viewer shows a block's stack from its free event) and, unless it names one, its category.
  // Inlined into the hooks, and they into their callers: the frame then stays in registers and
  // the action's switch folds away (a call costs about a third of the event).
  [[gnu::always_inline]] void record(action a, void const* p, std::size_t bytes, std::uint64_t stream, category c,
                                     frame f) noexcept {
    if (p == nullptr) return;
    auto const addr = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
    bool const is_segment = a == action::segment_alloc || a == action::segment_free;
    auto& shard = live_.shard_of(addr);
    event* e = nullptr;
    if (recording_.load(std::memory_order_relaxed)) {
      if constexpr (Policy::per_thread_buffers) {
        if (event_ring* ring = buffers_.local()) [[likely]] {
          e = &ring->claim();
        } else {
          buffers_.lost();
        }
      } else {
        e = &buffers_.local()->claim();
      }
      // The slot is this thread's alone: written outside the shard's lock. The time and what
      // the live table knows come below.
      if (e != nullptr) *e = {addr, bytes, stream, 0, c, f.filename, f.function, f.line, a, 0};
      if constexpr (!Policy::per_thread_buffers) {
        // One thread: program order is time order, so no fence. The counter is read after the
        // stores above are issued and with the table's slot already on its way: on x86 it
        // waits for loads in flight, not for prefetches.
        shard.table.prefetch(addr, is_segment);
        if (options_.timestamps) {
          e->time = ticks();
        } else {
          e->time = sequence_.load(std::memory_order_relaxed);
          sequence_.store(e->time + 1, std::memory_order_relaxed);
        }
      }
    }
    // Two copies of the update, so that the one outside a profiled step tests nothing per field.
    if (e != nullptr) {
      update<true>(shard, a, is_segment, addr, bytes, stream, c, f, e);
    } else {
      update<false>(shard, a, is_segment, addr, bytes, stream, c, f, nullptr);
    }
  }

  /// The events kept, oldest first (merged over the recording threads), and how many were lost.
  /// Call it while no thread records.
  [[nodiscard]] detail::history history() const { return buffers_.merged(); }
  /// history().events.
  [[nodiscard]] std::vector<event> events() const { return history().events; }
  /// Events lost to the ring's wrap-around in this recording.
  [[nodiscard]] std::uint64_t dropped() const { return history().dropped; }
  /// The blocks and segments live now (kept even when not recording).
  [[nodiscard]] live_table_type const& live() const noexcept { return live_; }
  [[nodiscard]] int device() const noexcept { return options_.device; }
  [[nodiscard]] recorder_options const& options() const noexcept { return options_; }
  /// ticks() when start() was last called.
  [[nodiscard]] std::int64_t start_ticks() const noexcept { return start_ticks_.load(std::memory_order_relaxed); }

 private:
  static recorder_options const& checked(recorder_options const& o) {
    expects(o.max_entries > 0, "trace::recorder: max_entries is 0; expected at least 1 event");
    expects<capacity_error>(o.max_entries <= max_entries_limit, "trace::recorder: max_entries = ", o.max_entries,
                            "; expected at most 2^32 (", max_entries_limit, ") events");
    expects<capacity_error>(o.max_live <= max_live_limit, "trace::recorder: max_live = ", o.max_live,
                            "; expected at most 2^32 (", max_live_limit, ") live blocks");
    expects(o.max_live > 0, "trace::recorder: max_live is 0; expected at least 1 live block");
    expects(o.device >= 0, "trace::recorder: device ", o.device, " is negative; expected a device ordinal >= 0");
    return o;
  }
  using shard_type = typename live_table_type::shard;

  /// Updates the live table and, when Keep, completes `*e` (its ring slot) from it.
  template <bool Keep>
  void update(shard_type& shard, action a, bool is_segment, std::uint64_t addr, std::size_t bytes,
              std::uint64_t stream, category c, frame f, event* e) noexcept {
    std::lock_guard lock(shard.lock);
    switch (a) {
      case action::alloc:
      case action::segment_alloc:
        if (!shard.table.insert({addr, bytes, stream, c, f, is_segment, false})) {
          if constexpr (Keep) e->flags = event::untracked;
        }
        break;
      case action::free_requested:
        if (live_entry* b = shard.table.find(addr, false)) {
          b->pending_free = true;
          if constexpr (Keep) inherit(*e, *b);
        }
        break;
      case action::free_completed:
      case action::segment_free:
        shard.table.erase(addr, is_segment, [e](live_entry const& gone) {
          if constexpr (Keep) {
            inherit(*e, gone);
            if (gone.pending_free) e->flags = event::deferred;
          } else {
            (void)e;
            (void)gone;
          }
        });
        break;
    }
    if constexpr (Keep && Policy::per_thread_buffers) {
      // Inside the shard's lock, after every earlier instruction, so that the events of one
      // block are ordered by time across threads.
      e->time = options_.timestamps ? ordered_ticks() : sequence_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  static void inherit(event& e, live_entry const& b) noexcept {
    if (!e.what.given()) e.what = b.what;
    if (!b.where.empty()) e.set_where(b.where);
  }

  recorder_options options_;
  live_table_type live_;
  detail::event_buffers<Policy::per_thread_buffers> buffers_;
  std::atomic<bool> recording_{false};
  std::atomic<std::int64_t> start_ticks_{0};
  std::atomic<std::int64_t> sequence_{0};
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
