// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// guard: a move-only owner of one allocation from a stream_resource, made on an owner stream.
//
//   auto g = lifetime::make_guard<lifetime::stream_ordered>(pool, compute, bytes);
//   launch_producer(g.data(), compute);
//   g.use_on(comm);                 // records an event on `comm` after the work that reads g
//   g.release();                    // compute waits on that event on the device, then frees
//
// Streams. The block is freed on the owner stream, so work on the owner stream needs no event;
// every other stream that touches the block must be named with use_on() after that work has
// been issued. The guard keeps an event per use and never issues work on a use stream (it keeps
// its handle only to compare), so a use stream may be destroyed after use_on() (except under
// `deferred`, which records on the use streams at release, as record_stream does). The owner
// stream must outlive the guard's release (under `deferred`, until the reclaimer has freed the
// block, which it does on the owner stream): move ownership
// to a stream that lives long enough with set_owner() before destroying it. If the owner stream
// is gone anyway, the release fails in the substrate; the guard reports it and leaks the block
// rather than free memory that work may still read (see docs/lifetime.md).
//
// Destroying a live guard releases it with its policy (it must not throw from a destructor, so
// a failure is reported to stderr and the block is leaked). Releasing twice, or using an empty
// (moved-from or default-constructed) guard, throws logic_error.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <ostream>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/lifetime/policy.hpp"

namespace headroom::lifetime {

/// The event type a substrate pairs with its stream type; specialised next to each substrate
/// (lifetime/host.hpp, lifetime/manual.hpp, lifetime/cuda/guard.hpp).
template <class Stream>
struct event_type_for;

template <class Stream>
using event_type_for_t = typename event_type_for<Stream>::type;

enum class guard_state : std::uint8_t { empty, live, released };

[[nodiscard]] constexpr std::string_view name_of(guard_state s) noexcept {
  switch (s) {
    case guard_state::empty: return "empty";
    case guard_state::live: return "live";
    case guard_state::released: return "released";
  }
  return "?";
}

// The policy is checked by static_asserts rather than the requires clause, so that a policy the
// resource cannot serve stops at a sentence naming what it needs.
template <class Resource, class Stream, class Event, class Policy = stream_ordered>
  requires stream_resource<Resource, Stream> && event<Event, Stream> && std::default_initializable<Event> &&
           std::movable<Event>
class guard {
  static_assert(!std::same_as<Policy, deferred> || quarantining_resource<Resource, Stream, Event>,
                "lifetime::guard<Resource, Stream, Event, lifetime::deferred>: the deferred policy quarantines "
                "released blocks, so Resource must be a lifetime::quarantining_resource: use "
                "lifetime::deferred_reclaimer<Resource, Stream, Event> (lifetime::host_deferred_guard on the host), "
                "or the stream_ordered / blocking policy on a plain resource");
  static_assert(std::same_as<Policy, deferred> || release_policy_for<Policy, Resource, Stream, Event>,
                "lifetime::guard<Resource, Stream, Event, Policy>: Policy is not a lifetime::release_policy_for "
                "this resource (an empty tag with a static name and a static release(resource, stream, block, "
                "uses)); use lifetime::stream_ordered, lifetime::blocking or lifetime::deferred");

 public:
  using resource_type = Resource;
  using stream_type = Stream;
  using event_type = Event;
  using policy_type = Policy;

  /// An empty guard: owns nothing; may be assigned a live one.
  guard() noexcept(std::is_nothrow_default_constructible_v<Stream>)
    requires std::default_initializable<Stream>
      : owner_{} {}

  /// Allocates `bytes` from `resource`, ordered on `owner` (which later frees it).
  /// `resource` must outlive the guard.
  guard(Resource& resource, Stream const& owner, std::size_t bytes, std::size_t alignment = default_alignment)
      : resource_(&resource), owner_(owner) {
    expects(is_power_of_two(alignment), "lifetime::guard: alignment ", alignment, " is not a power of two");
    block_ = {resource.allocate(owner, bytes, alignment), bytes, alignment};
    state_ = guard_state::live;
  }

  guard(guard const&) = delete;
  guard& operator=(guard const&) = delete;

  guard(guard&& other) noexcept(std::is_nothrow_move_constructible_v<Stream>)
      : resource_(std::exchange(other.resource_, nullptr)),
        owner_(other.owner_),
        block_(std::exchange(other.block_, {})),
        uses_(std::move(other.uses_)),
        state_(std::exchange(other.state_, guard_state::empty)) {
    other.uses_.clear();
  }

  /// Releases this guard's own block (with its policy) before taking `other`'s.
  guard& operator=(guard&& other) noexcept {
    if (this != &other) {
      release_from_destructor();
      resource_ = std::exchange(other.resource_, nullptr);
      owner_ = other.owner_;
      block_ = std::exchange(other.block_, {});
      uses_ = std::move(other.uses_);
      other.uses_.clear();
      state_ = std::exchange(other.state_, guard_state::empty);
    }
    return *this;
  }

  ~guard() { release_from_destructor(); }

  /// Records that work issued to `s` so far may use the block. Call it after issuing that work.
  /// Use on the owner stream needs no event. A later use on the same stream re-records that
  /// stream's event once it has completed, and adds one otherwise, so no use is ever forgotten
  /// (even when a destroyed stream's handle comes back for a new stream).
  void use_on(Stream const& s) {
    require_live("use_on");
    if (s == owner_) return;
    for (auto& use : uses_) {
      if (use.stream == s && use.event.ready()) {
        use.event.record(s);
        return;
      }
    }
    Event e;
    e.record(s);
    uses_.push_back({s, std::move(e)});
  }

  /// Makes `s` the stream that frees the block (RMM's set_stream). Work already issued to the
  /// old owner is remembered with an event, so the release still waits for it.
  void set_owner(Stream const& s) {
    require_live("set_owner");
    if (s == owner_) return;
    Event e;
    e.record(owner_);
    uses_.push_back({owner_, std::move(e)});
    owner_ = s;
  }

  /// Returns the block according to the policy. Throws logic_error if the guard is empty or
  /// was released already; if the policy throws, the guard still owns the block.
  void release() {
    expects<logic_error>(state_ != guard_state::released, "lifetime::guard<", Policy::name,
                         ">::release: the guard of ", block_.bytes, " bytes was released already; a block is "
                         "released exactly once");
    require_live("release");
    Policy::release(*resource_, owner_, block_, uses_);
    block_.pointer = nullptr;  // keep the size for the message of a second release
    state_ = guard_state::released;
  }

  [[nodiscard]] void* data() const noexcept { return state_ == guard_state::live ? block_.pointer : nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return state_ == guard_state::live ? block_.bytes : 0; }
  [[nodiscard]] std::size_t alignment() const noexcept { return block_.alignment; }
  [[nodiscard]] Stream const& owner() const noexcept { return owner_; }
  [[nodiscard]] Resource* resource() const noexcept { return resource_; }
  [[nodiscard]] guard_state state() const noexcept { return state_; }
  [[nodiscard]] bool live() const noexcept { return state_ == guard_state::live; }
  explicit operator bool() const noexcept { return live(); }
  /// Events held: one per use stream (more while an earlier use on a stream is in flight).
  [[nodiscard]] std::size_t use_count() const noexcept { return uses_.size(); }
  [[nodiscard]] std::vector<stream_use<Stream, Event>> const& uses() const noexcept { return uses_; }

  /// The block as elements of `T`. Throws invalid_argument unless the size is a multiple of
  /// sizeof(T) and the alignment suits T; logic_error on an empty or released guard.
  template <class T>
  [[nodiscard]] std::span<T> as_span() const {
    require_live("as_span");
    expects(block_.bytes % sizeof(T) == 0, "lifetime::guard::as_span: ", block_.bytes,
            " bytes is not a multiple of the element size ", sizeof(T));
    expects(block_.alignment >= alignof(T), "lifetime::guard::as_span: alignment ", block_.alignment,
            " is less than the element alignment ", alignof(T));
    return {static_cast<T*>(block_.pointer), block_.bytes / sizeof(T)};
  }

  friend std::ostream& operator<<(std::ostream& os, guard const& g) {
    os << "guard<" << Policy::name << ">{" << name_of(g.state_);
    if (g.state_ == guard_state::live) os << ", " << g.block_ << ", " << g.uses_.size() << " use event(s)";
    return os << "}";
  }

 private:
  void require_live(char const* what) const {
    expects<logic_error>(state_ != guard_state::empty, "lifetime::guard<", Policy::name, ">::", what,
                         ": the guard is empty (moved-from or default-constructed)");
    expects<logic_error>(state_ != guard_state::released, "lifetime::guard<", Policy::name, ">::", what,
                         ": the guard of ", block_.bytes, " bytes was released already");
  }

  void release_from_destructor() noexcept {
    if (state_ != guard_state::live) return;
    try {
      release();
    } catch (std::exception const& e) {
      // Freeing now could hand out memory that work still reads: leak it, and say so.
      std::fprintf(stderr, "headroom: lifetime::guard<%.*s> leaks %zu bytes at %p: release failed: %s\n",
                   static_cast<int>(Policy::name.size()), Policy::name.data(), block_.bytes, block_.pointer,
                   e.what());
      state_ = guard_state::released;
    }
  }

  Resource* resource_ = nullptr;
  Stream owner_;
  block block_{};
  std::vector<stream_use<Stream, Event>> uses_;
  guard_state state_ = guard_state::empty;
};

/// `guard<R, S, event_type_for_t<S>, Policy>` allocated from `resource` on `owner`.
template <class Policy = stream_ordered, class Resource, class Stream>
[[nodiscard]] auto make_guard(Resource& resource, Stream const& owner, std::size_t bytes,
                              std::size_t alignment = default_alignment) {
  return guard<Resource, Stream, event_type_for_t<Stream>, Policy>(resource, owner, bytes, alignment);
}

/// True for every specialisation of guard.
template <class G>
inline constexpr bool is_guard_v = false;
template <class R, class S, class E, class P>
inline constexpr bool is_guard_v<guard<R, S, E, P>> = true;

}  // namespace headroom::lifetime
