// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "headroom/core/communicator.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/event.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/host/thread_group.hpp"

// Compile-time positive and negative checks of the core concepts, with tiny types that each
// get one thing right or wrong. A failing check here fails the build. (A named namespace:
// clang warns about unused friends of types with internal linkage.)
namespace concepts_test {

// ---- stream ---------------------------------------------------------------------------------
struct good_stream {
  void synchronize() const {}
  friend bool operator==(good_stream, good_stream) = default;
};
struct stream_without_synchronize {
  friend bool operator==(stream_without_synchronize, stream_without_synchronize) = default;
};
struct stream_with_mutating_synchronize {  // synchronize() must be callable on a const view
  void synchronize() {}
  friend bool operator==(stream_with_mutating_synchronize, stream_with_mutating_synchronize) = default;
};
struct stream_not_comparable {
  void synchronize() const {}
};
struct stream_not_copyable {
  stream_not_copyable() = default;
  stream_not_copyable(stream_not_copyable const&) = delete;
  stream_not_copyable& operator=(stream_not_copyable const&) = delete;
  void synchronize() const {}
  friend bool operator==(stream_not_copyable const&, stream_not_copyable const&) { return true; }
};

static_assert(headroom::stream<good_stream>);
static_assert(headroom::stream<headroom::host::inline_stream>);
static_assert(!headroom::stream<stream_without_synchronize>);
static_assert(!headroom::stream<stream_with_mutating_synchronize>);
static_assert(!headroom::stream<stream_not_comparable>);
static_assert(!headroom::stream<stream_not_copyable>);
static_assert(!headroom::stream<int>);

// ---- event ----------------------------------------------------------------------------------
struct good_event {
  void record(good_stream const&) {}
  bool ready() const { return true; }
  void wait_on(good_stream const&) const {}
  void synchronize() const {}
};
struct event_without_record {
  bool ready() const { return true; }
  void wait_on(good_stream const&) const {}
  void synchronize() const {}
};
struct event_ready_not_bool {
  void record(good_stream const&) {}
  void ready() const {}
  void wait_on(good_stream const&) const {}
  void synchronize() const {}
};
struct event_without_wait_on {
  void record(good_stream const&) {}
  bool ready() const { return true; }
  void synchronize() const {}
};
struct event_for_other_stream {  // records on a different stream type
  void record(headroom::host::inline_stream const&) {}
  bool ready() const { return true; }
  void wait_on(headroom::host::inline_stream const&) const {}
  void synchronize() const {}
};

static_assert(headroom::event<good_event, good_stream>);
static_assert(headroom::event<headroom::host::inline_event, headroom::host::inline_stream>);
static_assert(!headroom::event<event_without_record, good_stream>);
static_assert(!headroom::event<event_ready_not_bool, good_stream>);
static_assert(!headroom::event<event_without_wait_on, good_stream>);
static_assert(!headroom::event<event_for_other_stream, good_stream>);
static_assert(!headroom::event<good_event, stream_not_comparable>);  // S must be a stream

// ---- stream_resource and properties ---------------------------------------------------------
struct good_resource {
  void* allocate(good_stream const&, std::size_t, std::size_t) { return nullptr; }
  void deallocate(good_stream const&, void*, std::size_t, std::size_t) noexcept {}
  friend bool operator==(good_resource const&, good_resource const&) = default;
  friend void get_property(good_resource const&, headroom::device_accessible) noexcept {}
};
struct resource_throwing_deallocate {
  void* allocate(good_stream const&, std::size_t, std::size_t) { return nullptr; }
  void deallocate(good_stream const&, void*, std::size_t, std::size_t) {}
  friend bool operator==(resource_throwing_deallocate const&, resource_throwing_deallocate const&) = default;
};
struct resource_typed_allocate {
  int* allocate(good_stream const&, std::size_t, std::size_t) { return nullptr; }
  void deallocate(good_stream const&, void*, std::size_t, std::size_t) noexcept {}
  friend bool operator==(resource_typed_allocate const&, resource_typed_allocate const&) = default;
};
struct resource_without_stream {
  void* allocate(std::size_t, std::size_t) { return nullptr; }
  void deallocate(void*, std::size_t, std::size_t) noexcept {}
  friend bool operator==(resource_without_stream const&, resource_without_stream const&) = default;
};
struct resource_not_comparable {
  void* allocate(good_stream const&, std::size_t, std::size_t) { return nullptr; }
  void deallocate(good_stream const&, void*, std::size_t, std::size_t) noexcept {}
};

static_assert(headroom::stream_resource<good_resource, good_stream>);
static_assert(!headroom::stream_resource<good_resource, headroom::host::inline_stream>);
static_assert(!headroom::stream_resource<resource_throwing_deallocate, good_stream>);
static_assert(!headroom::stream_resource<resource_typed_allocate, good_stream>);
static_assert(!headroom::stream_resource<resource_without_stream, good_stream>);
static_assert(!headroom::stream_resource<resource_not_comparable, good_stream>);

static_assert(headroom::has_property<good_resource, headroom::device_accessible>);
static_assert(!headroom::has_property<good_resource, headroom::host_accessible>);
static_assert(!headroom::has_property<resource_not_comparable, headroom::device_accessible>);
static_assert(headroom::stream_resource_with<good_resource, good_stream, headroom::device_accessible>);
static_assert(!headroom::stream_resource_with<good_resource, good_stream, headroom::host_accessible>);
static_assert(!headroom::stream_resource_with<good_resource, good_stream, headroom::device_accessible,
                                              headroom::host_accessible>);
static_assert(headroom::stream_resource_with<headroom::host::aligned_resource, headroom::host::inline_stream,
                                             headroom::host_accessible>);
static_assert(!headroom::has_property<headroom::host::aligned_resource, headroom::device_accessible>);

// ---- communicator ---------------------------------------------------------------------------
// A single-rank communicator with the full shape: collectives copy in to out.
struct solo_communicator {
  using stream_type = good_stream;
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier(good_stream const&) {}
  template <class T> void all_reduce(std::span<T const> in, std::span<T> out, headroom::reduce_op, good_stream const&) {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = in[i];
  }
  template <class T> void all_gather(std::span<T const> in, std::span<T> out, good_stream const&) {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = in[i];
  }
  template <class T> void reduce_scatter(std::span<T const> in, std::span<T> out, headroom::reduce_op, good_stream const&) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = in[i];
  }
  template <class T> void broadcast(std::span<T>, int, good_stream const&) {}
  template <class T> void send(std::span<T const>, int, good_stream const&) {}
  template <class T> void recv(std::span<T>, int, good_stream const&) {}
};

struct communicator_without_barrier {
  using stream_type = good_stream;
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class T> void all_reduce(std::span<T const>, std::span<T>, headroom::reduce_op, good_stream const&) {}
  template <class T> void all_gather(std::span<T const>, std::span<T>, good_stream const&) {}
  template <class T> void reduce_scatter(std::span<T const>, std::span<T>, headroom::reduce_op, good_stream const&) {}
  template <class T> void broadcast(std::span<T>, int, good_stream const&) {}
  template <class T> void send(std::span<T const>, int, good_stream const&) {}
  template <class T> void recv(std::span<T>, int, good_stream const&) {}
};

// Handles only float: the concept asks for int32, int64, float and double.
struct float_only_communicator {
  using stream_type = good_stream;
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier(good_stream const&) {}
  void all_reduce(std::span<float const>, std::span<float>, headroom::reduce_op, good_stream const&) {}
  void all_gather(std::span<float const>, std::span<float>, good_stream const&) {}
  void reduce_scatter(std::span<float const>, std::span<float>, headroom::reduce_op, good_stream const&) {}
  void broadcast(std::span<float>, int, good_stream const&) {}
  void send(std::span<float const>, int, good_stream const&) {}
  void recv(std::span<float>, int, good_stream const&) {}
};

// rank() is not const.
struct communicator_mutating_rank : solo_communicator {
  int rank() { return 0; }
};

struct communicator_without_stream_type {
  int rank() const { return 0; }
  int size() const { return 1; }
};

// Its stream_type is not a stream.
struct communicator_with_bad_stream : solo_communicator {
  using stream_type = stream_not_comparable;
};

static_assert(headroom::communicator<solo_communicator>);
static_assert(headroom::communicator<headroom::host::thread_communicator>);
static_assert(!headroom::communicator<communicator_without_barrier>);
static_assert(!headroom::communicator<float_only_communicator>);
static_assert(!headroom::communicator<communicator_mutating_rank>);
static_assert(!headroom::communicator<communicator_without_stream_type>);
static_assert(!headroom::communicator<communicator_with_bad_stream>);

// ---- dtype ----------------------------------------------------------------------------------
struct opaque {};
static_assert(headroom::has_dtype<float>);
static_assert(headroom::has_dtype<std::int64_t const>);
static_assert(!headroom::has_dtype<opaque>);
static_assert(!headroom::has_dtype<long double>);
static_assert(headroom::dtype_v<std::uint8_t> == headroom::dtype::u8);
static_assert(headroom::size_of(headroom::dtype_v<double>) == sizeof(double));

// Generic code written against the concepts: a stream-ordered round trip.
template <class R, class S>
  requires headroom::stream_resource<R, S>
bool allocate_and_free(R& r, S const& s) {
  void* p = r.allocate(s, 64, 16);
  r.deallocate(s, p, 64, 16);
  return true;
}

template <headroom::communicator C>
double sum_of_ones(C& comm) {
  double const one[1] = {1.0};
  double out[1] = {0.0};
  comm.all_reduce(std::span<double const>(one), std::span<double>(out), headroom::reduce_op::sum,
                  typename C::stream_type{});
  return out[0];
}

}  // namespace concepts_test

using namespace concepts_test;

TEST_CASE("types that model the concepts work through generic code") {
  good_resource r;
  CHECK(allocate_and_free(r, good_stream{}));
  headroom::host::aligned_resource host_r;
  CHECK(allocate_and_free(host_r, headroom::host::inline_stream{}));

  solo_communicator solo;
  CHECK(sum_of_ones(solo) == 1.0);
  double total = 0;
  headroom::host::launch(3, [&](headroom::host::thread_communicator& c) {
    double const s = sum_of_ones(c);
    if (c.rank() == 0) total = s;
  });
  CHECK(total == 3.0);
}

TEST_CASE("reduce_op names") {
  CHECK(headroom::name_of(headroom::reduce_op::sum) == "sum");
  CHECK(headroom::name_of(headroom::reduce_op::max) == "max");
  CHECK(headroom::name_of(headroom::reduce_op::min) == "min");
}
