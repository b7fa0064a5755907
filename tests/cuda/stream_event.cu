// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "common/device_vector.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"

namespace cu = headroom::cuda;

namespace {

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` nanoseconds of wall time, then writes `value` (if `out` is not null).
__global__ void spin_then_write(std::uint64_t ns, int* out, int value) {
  std::uint64_t const start = global_ns();
  while (global_ns() - start < ns) {
  }
  if (out != nullptr) *static_cast<int volatile*>(out) = value;
}

__global__ void copy_int(int const* src, int* dst) { *dst = *static_cast<int const volatile*>(src); }

constexpr std::uint64_t ms = 1000000;

void require_gpu() { REQUIRE_MESSAGE(cu::device_count() >= 1, "this test needs a CUDA device"); }

}  // namespace

TEST_CASE("stream_view: default is the legacy stream, require_stream rejects it by name") {
  require_gpu();
  cu::stream_view const v;
  CHECK(v.get() == nullptr);
  CHECK(v.is_legacy_default());
  CHECK(v.is_default());
  CHECK(cu::stream_view::legacy_default().is_legacy_default());
  CHECK(cu::stream_view::per_thread_default().is_default());
  CHECK_FALSE(cu::stream_view::per_thread_default().is_legacy_default());
  CHECK_THROWS_WITH_AS(cu::require_stream(v, "my_collective"),
                       doctest::Contains("my_collective: needs a created CUDA stream, got cudaStream_t 0"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(cu::require_stream(cu::stream_view::legacy_default(), "f"), doctest::Contains("cudaStreamLegacy"),
                       headroom::invalid_argument);
  CHECK_NOTHROW(cu::require_stream(cu::stream_view::per_thread_default(), "f"));
  cu::stream s;
  CHECK_NOTHROW(cu::require_stream(s, "f"));
  std::ostringstream os;
  os << s.view();
  CHECK(os.str().find("cudaStream_t 0x") == 0);
  // The default stream can still be synchronised and queried.
  CHECK_NOTHROW(v.synchronize());
  CHECK(v.ready());
}

TEST_CASE("stream_view compares by handle and converts to cudaStream_t") {
  require_gpu();
  static_assert(headroom::stream<cu::stream_view>);
  static_assert(std::is_trivially_copyable_v<cu::stream_view>);
  static_assert(!std::is_constructible_v<cu::stream_view, int>);
  static_assert(!std::is_constructible_v<cu::stream_view, std::nullptr_t>);
  cu::stream a;
  cu::stream b;
  cu::stream_view const va = a;
  CHECK(va == a.view());
  CHECK(va != b.view());
  cudaStream_t const raw = va;
  CHECK(raw == a.get());
  CHECK(cu::stream_view(raw) == va);
}

TEST_CASE("stream: non-blocking by default, blocking and priority on request, move-only") {
  require_gpu();
  static_assert(!std::is_copy_constructible_v<cu::stream>);
  static_assert(std::is_nothrow_move_constructible_v<cu::stream>);
  cu::stream s;
  unsigned flags = 0;
  HEADROOM_CUDA_TRY(cudaStreamGetFlags(s.get(), &flags));
  CHECK((flags & cudaStreamNonBlocking) != 0);
  CHECK(s.non_blocking());
  CHECK(s.device() == cu::current_device());

  cu::stream blocking({.non_blocking = false});
  HEADROOM_CUDA_TRY(cudaStreamGetFlags(blocking.get(), &flags));
  CHECK((flags & cudaStreamNonBlocking) == 0);

  int least = 0;
  int greatest = 0;
  HEADROOM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cu::stream urgent({.priority = greatest});
  int p = 1234;
  HEADROOM_CUDA_TRY(cudaStreamGetPriority(urgent.get(), &p));
  CHECK(p == greatest);
  CHECK(urgent.priority() == greatest);
  std::string const expected = "priority " + std::to_string(greatest - 1) + " outside the device's range";
  CHECK_THROWS_WITH_AS(cu::stream({.priority = greatest - 1}), doctest::Contains(expected.c_str()),
                       headroom::invalid_argument);
  CHECK_THROWS_AS(cu::stream({.priority = least + 1}), headroom::invalid_argument);

  cu::stream moved = std::move(s);
  CHECK(moved.valid());
  CHECK_FALSE(s.valid());  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_AS(s.synchronize(), headroom::logic_error);
  s = std::move(moved);
  CHECK(s.valid());
  CHECK_NOTHROW(s.synchronize());
}

TEST_CASE("stream ready() reflects queued work; synchronize waits for it") {
  require_gpu();
  cu::stream s;
  CHECK(s.ready());
  spin_then_write<<<1, 1, 0, s.get()>>>(50 * ms, nullptr, 0);
  HEADROOM_CUDA_CHECK_LAST();
  CHECK_FALSE(s.ready());
  s.synchronize();
  CHECK(s.ready());
}

TEST_CASE("event: record, ready, synchronize") {
  require_gpu();
  static_assert(headroom::event<cu::event, cu::stream_view>);
  static_assert(!std::is_copy_constructible_v<cu::event>);
  cu::stream s;
  cu::event e;
  CHECK_FALSE(e.timing());
  CHECK_FALSE(e.recorded());
  CHECK(e.ready());  // never recorded: nothing to wait for
  CHECK_NOTHROW(e.wait_on(s));  // a no-op, as in CUDA
  spin_then_write<<<1, 1, 0, s.get()>>>(50 * ms, nullptr, 0);
  e.record(s);
  CHECK(e.recorded());
  CHECK_FALSE(e.ready());
  e.synchronize();
  CHECK(e.ready());
}

TEST_CASE("event::wait_on orders another stream after the marked work, without blocking the host") {
  require_gpu();
  cu::stream producer;
  cu::stream consumer;
  headroom_test::device_vector<int> buf(2, 0);  // zeroed before the streams start
  int* const d = buf.data();
  cu::event done;
  spin_then_write<<<1, 1, 0, producer.get()>>>(100 * ms, d, 42);
  done.record(producer);
  done.wait_on(consumer);
  copy_int<<<1, 1, 0, consumer.get()>>>(d, d + 1);
  HEADROOM_CUDA_CHECK_LAST();
  CHECK_FALSE(consumer.ready());  // the host was not blocked: the copy is still waiting
  consumer.synchronize();
  auto const got = buf.download();
  CHECK(got[0] == 42);
  CHECK(got[1] == 42);  // the consumer ran after the producer's write
}

TEST_CASE("timing events measure elapsed time; non-timing events refuse by name") {
  require_gpu();
  cu::stream s;
  cu::event start({.timing = true});
  cu::event stop({.timing = true, .blocking_sync = true});
  CHECK(start.timing());
  CHECK_THROWS_WITH_AS(static_cast<void>(elapsed_ms(start, stop)), doctest::Contains("must be recorded"),
                       headroom::logic_error);
  start.record(s);
  spin_then_write<<<1, 1, 0, s.get()>>>(20 * ms, nullptr, 0);
  stop.record(s);
  stop.synchronize();
  float const t = elapsed_ms(start, stop);
  CHECK(t >= 19.0f);
  CHECK(t < 2000.0f);

  cu::event plain;
  plain.record(s);
  s.synchronize();
  CHECK_THROWS_WITH_AS(static_cast<void>(elapsed_ms(start, plain)), doctest::Contains("timing enabled"),
                       headroom::logic_error);

  cu::event moved = std::move(plain);
  CHECK(moved.valid());
  CHECK_FALSE(plain.valid());  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_AS(plain.record(s), headroom::logic_error);
}
