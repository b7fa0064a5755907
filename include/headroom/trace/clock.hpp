// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The recorder's time source: the CPU's own counter (x86: rdtsc, when the TSC is invariant;
// aarch64: cntvct_el0), a few nanoseconds to read where clock_gettime costs tens on some VMs.
// Elsewhere, and on x86 without an invariant TSC, the steady clock in nanoseconds.
//
// Ticks become wall-clock time through a time_base: one (ticks, system_clock) pair taken at the
// first use in the process, with the tick rate measured against the steady clock over the
// time since then (at least a few milliseconds), so snapshots carry Unix-epoch microseconds
// as PyTorch's do, and ranks can be lined up in time.
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace headroom::trace {

namespace detail {
[[nodiscard]] inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
[[nodiscard]] inline std::int64_t system_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

#if defined(__x86_64__) || defined(__i386__)
/// CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every C/P-state and is
/// synchronised across cores, so it can order events of different threads.
[[nodiscard]] inline bool invariant_tsc() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
}
inline bool const use_tsc = invariant_tsc();
#endif
}  // namespace detail

/// What ticks() reads on this machine: "tsc", "cntvct_el0" or "steady_clock".
[[nodiscard]] inline char const* tick_source() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return detail::use_tsc ? "tsc" : "steady_clock";
#elif defined(__aarch64__)
  return "cntvct_el0";
#else
  return "steady_clock";
#endif
}

/// The counter now. Monotonic, and comparable between threads (see tick_source()).
[[nodiscard]] inline std::int64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (detail::use_tsc) [[likely]] return static_cast<std::int64_t>(__rdtsc());
  return detail::steady_ns();
#elif defined(__aarch64__)
  std::uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return static_cast<std::int64_t>(v);
#else
  return detail::steady_ns();
#endif
}

/// ticks(), read only after every earlier instruction has completed: a time taken inside a
/// lock is later than the time its previous holder took (the shared policy orders threads so).
[[nodiscard]] inline std::int64_t ordered_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_lfence();
#elif defined(__aarch64__)
  asm volatile("isb" ::: "memory");
#endif
  return ticks();
}

/// Converts ticks to Unix-epoch nanoseconds.
class time_base {
 public:
  /// The process's base: its origin is taken at the first call (a recorder's construction), its
  /// rate is measured against the steady clock from then to now (refined on every call).
  [[nodiscard]] static time_base now() noexcept {
    static origin const o = take_origin();
    std::int64_t const t = ticks(), s = detail::steady_ns();
    time_base b;
    b.ticks0_ = o.ticks;
    b.epoch_ns0_ = o.system_ns;
    if (t - o.ticks > 0 && s - o.steady_ns >= 1'000'000) {
      b.ns_per_tick_ = static_cast<double>(s - o.steady_ns) / static_cast<double>(t - o.ticks);
    } else {
      b.ns_per_tick_ = o.ns_per_tick;
    }
    return b;
  }

  [[nodiscard]] std::int64_t epoch_ns(std::int64_t t) const noexcept {
    return epoch_ns0_ + static_cast<std::int64_t>(static_cast<double>(t - ticks0_) * ns_per_tick_);
  }
  [[nodiscard]] double ns_per_tick() const noexcept { return ns_per_tick_; }

 private:
  struct origin {
    std::int64_t ticks, steady_ns, system_ns;
    double ns_per_tick;
  };
  static origin take_origin() noexcept {
    origin o{ticks(), detail::steady_ns(), detail::system_ns(), 1.0};
    // A first rate over 2 ms, for snapshots taken sooner than that after the origin.
    std::int64_t t = o.ticks, s = o.steady_ns;
    while (s - o.steady_ns < 2'000'000) {
      t = ticks();
      s = detail::steady_ns();
    }
    if (t > o.ticks) o.ns_per_tick = static_cast<double>(s - o.steady_ns) / static_cast<double>(t - o.ticks);
    return o;
  }

  std::int64_t ticks0_ = 0;
  std::int64_t epoch_ns0_ = 0;
  double ns_per_tick_ = 1.0;
};

}  // namespace headroom::trace
