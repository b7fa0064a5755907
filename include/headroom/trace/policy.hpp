#pragma once
// Threading policies of the recorder, as tags (CUTLASS-style):
//   single_thread  one thread records: no lock, no atomic on the recording path
//   shared         any number of threads record: one mutex around each event
//   off            nothing is recorded; a recorder<off> is empty and its calls compile away
#include <concepts>
#include <mutex>

namespace headroom::trace {

struct single_thread {
  static constexpr bool records = true;
  struct mutex_type {
    void lock() noexcept {}
    void unlock() noexcept {}
  };
};

struct shared {
  static constexpr bool records = true;
  using mutex_type = std::mutex;
};

struct off {
  static constexpr bool records = false;
};

template <class P>
concept recording_policy = requires {
  { P::records } -> std::convertible_to<bool>;
} && (!P::records || requires(typename P::mutex_type& m) {
  m.lock();
  m.unlock();
});

static_assert(recording_policy<single_thread>);
static_assert(recording_policy<shared>);
static_assert(recording_policy<off>);

}  // namespace headroom::trace
