// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Threading policies of the recorder, as tags (CUTLASS-style):
//   single_thread  one thread records: no lock, no atomic read-modify-write on the recording path
//   shared         any number of threads record: each thread appends to its own event buffer
//                  (merged in time order at snapshot time); the table of live blocks is split in
//                  `shards` parts by 64 KiB address region, each behind a spin lock, so threads
//                  allocating from different regions rarely meet
//   off            nothing is recorded; a recorder<off> is empty and its calls compile away
#include <atomic>
#include <concepts>
#include <cstddef>
#include <thread>

namespace headroom::trace {

namespace detail {
/// A test-and-test-and-set lock: an uncontended lock / unlock is one exchange and one store,
/// cheaper than a futex-backed mutex for critical sections of a few tens of instructions.
class spin_lock {
 public:
  void lock() noexcept {
    for (unsigned spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        // The holder may have been descheduled (machines with fewer cores than threads).
        if (++spins % 64 == 0) std::this_thread::yield();
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct no_lock {
  void lock() noexcept {}
  void unlock() noexcept {}
};
}  // namespace detail

struct single_thread {
  static constexpr bool records = true;
  static constexpr bool per_thread_buffers = false;
  static constexpr std::size_t shards = 1;
  using mutex_type = detail::no_lock;
};

struct shared {
  static constexpr bool records = true;
  static constexpr bool per_thread_buffers = true;
  static constexpr std::size_t shards = 16;
  using mutex_type = detail::spin_lock;
};

struct off {
  static constexpr bool records = false;
};

template <class P>
concept recording_policy = requires {
  { P::records } -> std::convertible_to<bool>;
} && (!P::records || requires(typename P::mutex_type& m) {
  { P::per_thread_buffers } -> std::convertible_to<bool>;
  { P::shards } -> std::convertible_to<std::size_t>;
  m.lock();
  m.unlock();
});

static_assert(recording_policy<single_thread>);
static_assert(recording_policy<shared>);
static_assert(recording_policy<off>);

}  // namespace headroom::trace
