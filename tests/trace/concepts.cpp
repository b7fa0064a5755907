// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Compile-time checks: what the trace adaptors and hooks accept, and what they refuse.
#include <cstddef>
#include <span>
#include <vector>

#include "headroom/host.hpp"
#include "headroom/trace.hpp"

using namespace headroom;
namespace tr = headroom::trace;

namespace {
struct no_hooks {
  static constexpr bool records = true;
};
struct no_records_flag {
  void alloc(void const*, std::size_t, std::uint64_t, tr::category, tr::frame) {}
};
struct half_lease {
  std::size_t size() const { return 1; }
};
struct bad_policy {};
}  // namespace

static_assert(tr::event_sink<tr::recorder<tr::single_thread>>);
static_assert(tr::event_sink<tr::recorder<tr::shared>>);
static_assert(tr::event_sink<tr::recorder<tr::off>>);
static_assert(!tr::event_sink<no_hooks>);
static_assert(!tr::event_sink<no_records_flag>);
static_assert(!tr::event_sink<int>);

static_assert(tr::recording_policy<tr::off>);
static_assert(!tr::recording_policy<bad_policy>);

static_assert(tr::buffer_like<std::span<std::byte>>);
static_assert(tr::buffer_like<std::vector<std::byte>>);
static_assert(!tr::buffer_like<int>);
static_assert(!tr::lease_like<half_lease>);
static_assert(!tr::lease_like<std::span<std::byte>>);

using traced = tr::recording_resource<host::aligned_resource, tr::recorder<>>;
using off_traced = tr::recording_resource<host::aligned_resource, tr::recorder<tr::off>>;
static_assert(stream_resource_with<traced, host::inline_stream, host_accessible>);
static_assert(stream_resource_with<off_traced, host::inline_stream, host_accessible>);
static_assert(!has_property<traced, device_accessible>);
static_assert(std::is_empty_v<tr::recorder<tr::off>>);

TEST_CASE("trace::off recorders are empty and constant-evaluable") {
  constexpr auto noop = [] {
    tr::recorder<tr::off> r;
    r.alloc(nullptr, 1, 0);
    r.start();
    return r.recording();
  }();
  CHECK_FALSE(noop);
}
