// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// One allocator event, as PyTorch's memory_viz trace has them: alloc, free_requested,
// free_completed, segment_alloc, segment_free. Events are trivially copyable and hold only
// pointers to strings of static storage (literals, std::source_location), so recording one
// copies a few words and allocates nothing.
#include <chrono>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace headroom::trace {

enum class action : std::uint8_t { alloc, free_requested, free_completed, segment_alloc, segment_free };

/// The name memory_viz uses for `a`.
[[nodiscard]] constexpr std::string_view action_name(action a) noexcept {
  switch (a) {
    case action::alloc: return "alloc";
    case action::free_requested: return "free_requested";
    case action::free_completed: return "free_completed";
    case action::segment_alloc: return "segment_alloc";
    case action::segment_free: return "segment_free";
  }
  return "unknown";
}

/// What a block is for, shown as the colour of the Active Memory Timeline. The name must have
/// static storage duration (a literal): events keep the pointer, never a copy. A default
/// category is "not given": a free without one takes its block's, and it is written "unknown".
struct category {
  char const* name = nullptr;

  [[nodiscard]] constexpr bool given() const noexcept { return name != nullptr; }
  [[nodiscard]] constexpr std::string_view view() const noexcept { return name != nullptr ? name : "unknown"; }
  friend constexpr bool operator==(category a, category b) noexcept {
    return a.name == b.name || a.view() == b.view();
  }
};

/// Categories the library's modules use; any other literal works too.
namespace categories {
inline constexpr category unknown{"unknown"};
inline constexpr category pool{"pool"};
inline constexpr category activation{"activation"};
inline constexpr category communication{"communication"};
inline constexpr category workspace{"workspace"};
inline constexpr category cp_logits{"cp.logits"};
}  // namespace categories

/// The place that caused an event (memory_viz `frames`, one frame). Empty when line == 0.
struct frame {
  char const* filename = "";
  char const* function = "";
  std::uint32_t line = 0;

  /// The caller's place, as a default argument: `frame where = frame::current()`. Built on the
  /// compiler builtins rather than std::source_location, which clang 14 with libstdc++ lacks.
  [[nodiscard]] static constexpr frame current(char const* file = __builtin_FILE(),
                                               char const* function = __builtin_FUNCTION(),
                                               unsigned line = __builtin_LINE()) noexcept {
    return {file, function, line};
  }
  [[nodiscard]] constexpr bool empty() const noexcept { return line == 0; }
};

/// One event, one cache line. The frame is stored flat (where() rebuilds it) so that the
/// action and flags fit in the frame's padding.
struct alignas(64) event {
  /// flags: what the recorder knew when it recorded the event.
  static constexpr std::uint8_t deferred = 1;   ///< free_completed of a block whose free was requested earlier
  static constexpr std::uint8_t untracked = 2;  ///< alloc the full live table could not hold
  static constexpr std::uint8_t synthetic = 4;  ///< added by take_snapshot: a block live when the step began

  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;  ///< 0 = default stream; else the stream handle's bits
  /// Recorded: ticks() (or a sequence number without timestamps); in a snapshot: Unix-epoch ns.
  std::int64_t time = 0;
  category what{};
  char const* filename = "";
  char const* function = "";
  std::uint32_t line = 0;
  action kind = action::alloc;
  std::uint8_t flags = 0;

  [[nodiscard]] constexpr frame where() const noexcept { return {filename, function, line}; }
  constexpr void set_where(frame const& f) noexcept {
    filename = f.filename;
    function = f.function;
    line = f.line;
  }
};
static_assert(std::is_trivially_copyable_v<event>);
static_assert(sizeof(event) == 64);

/// Nanoseconds on the steady clock (unique names for files and directories).
[[nodiscard]] inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class T>
concept pointer_handle = std::is_pointer_v<T>;

/// A stream's id in events: the handle's bits for streams with a pointer-like get() (CUDA
/// stream views), 0 for streams that have no handle (the host's inline stream).
template <class S>
[[nodiscard]] std::uint64_t stream_id(S const& s) noexcept {
  if constexpr (requires {
                  { s.get() } -> pointer_handle;
                }) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(s.get()));
  } else {
    (void)s;
    return 0;
  }
}

}  // namespace headroom::trace
