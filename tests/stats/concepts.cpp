// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Compile-time positive and negative checks of the stats module's concepts and constraints.
#include <cstdint>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/stats.hpp"

namespace hs = headroom::stats;

template <class T>
concept can_set = requires(hs::dynamic_report& r, T v) { r.set("k", v); };
template <auto Name, class T, class Op = hs::maximum>
concept valid_field = requires { typename hs::field<Name, T, Op>; };
template <class... F>
concept valid_report = requires { typename hs::report<F...>; };
template <class R, auto Name>
concept has_get = requires(R r) { r.template get<Name>(); };
template <class R>
concept can_reduce = requires(hs::reducer<>& red, R const& r, headroom::host::thread_communicator& c) { red.max(r, c); };

struct fake_device_comm {  // a communicator whose buffers must be device memory
  struct stream_type {
    void synchronize() const {}
    friend bool operator==(stream_type, stream_type) = default;
  };
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier(stream_type const&) {}
  template <class T> void all_reduce(std::span<T const>, std::span<T>, headroom::reduce_op, stream_type const&) {}
  template <class T> void all_gather(std::span<T const>, std::span<T>, stream_type const&) {}
  template <class T> void reduce_scatter(std::span<T const>, std::span<T>, headroom::reduce_op, stream_type const&) {}
  template <class T> void broadcast(std::span<T>, int, stream_type const&) {}
  template <class T> void send(std::span<T const>, int, stream_type const&) {}
  template <class T> void recv(std::span<T>, int, stream_type const&) {}
};

// element types: int64 and double only
static_assert(hs::stat_value<std::int64_t> && hs::stat_value<double>);
static_assert(!hs::stat_value<float> && !hs::stat_value<int> && !hs::stat_value<bool> && !hs::stat_value<std::uint64_t>);
static_assert(valid_field<hs::fixed_string("a"), std::int64_t>);
static_assert(valid_field<hs::fixed_string("a"), double, hs::minimum>);
// Other element types (float, bool, int), other ops and empty names stop at a sentence, a hard
// error: tests/stats/compile_fail/field_*.cpp.

// typed reports: distinct names, fields only
using fa = hs::field<"a", std::int64_t>;
using fb = hs::field<"b", double>;
static_assert(valid_report<fa, fb> && valid_report<>);
// Duplicate names and non-fields stop at a sentence: tests/stats/compile_fail/report_*.cpp.
static_assert(has_get<hs::report<fa, fb>, hs::fixed_string("b")>);
// An unknown key is a compile error with a sentence (tests/stats/compile_fail/report_unknown_key.cpp).
static_assert(hs::typed_report<hs::report<fa>> && !hs::typed_report<hs::dynamic_report>);

// dynamic reports: integers and floating point, not bool or chars
static_assert(can_set<int> && can_set<std::int64_t> && can_set<std::uint32_t> && can_set<float> && can_set<double>);
static_assert(!can_set<bool> && !can_set<char> && !can_set<char8_t> && !can_set<char const*>);

// policies
static_assert(hs::reduction_policy<hs::maximum> && hs::reduction_policy<hs::minimum> && !hs::reduction_policy<int>);
static_assert(hs::nan_policy<hs::propagate_nan> && hs::nan_policy<hs::ignore_nan> && !hs::nan_policy<hs::maximum>);
static_assert(hs::empty_policy<hs::join_when_empty> && !hs::empty_policy<hs::ignore_nan>);
template <class N>
concept valid_nan = requires { typename hs::reducer<hs::host_staging, N>; };
static_assert(valid_nan<hs::ignore_nan> && !valid_nan<hs::minimum>);

// reducers: reports and communicators
static_assert(can_reduce<hs::dynamic_report> && can_reduce<hs::memory_report>);
// Other arguments stop at a sentence, a hard error: tests/stats/compile_fail/reducer_*.cpp.
static_assert(headroom::communicator<fake_device_comm>);
static_assert(!hs::host_buffer_communicator<fake_device_comm>);  // host staging refuses device communicators
static_assert(!hs::staging_for<hs::host_staging, fake_device_comm>);
static_assert(hs::host_buffer_communicator<headroom::host::thread_communicator>);
static_assert(headroom::communicator<hs::counting_communicator<headroom::host::thread_communicator>>);
static_assert(hs::host_buffer_communicator<hs::counting_communicator<headroom::host::thread_communicator>>);
static_assert(!hs::host_buffer_communicator<hs::counting_communicator<fake_device_comm>>);

// resources
static_assert(headroom::stream_resource<hs::statistics_resource<headroom::host::aligned_resource>, headroom::host::inline_stream>);
static_assert(!headroom::stream_resource<hs::statistics_resource<headroom::host::aligned_resource>, fake_device_comm::stream_type>);

TEST_CASE("stats concepts: the static_asserts above compiled") {
  CHECK(hs::reduce_plan::for_report<hs::memory_report>().capacity() == hs::memory_report::size());
}
