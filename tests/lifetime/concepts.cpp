// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <concepts>
#include <type_traits>

#include "headroom/host/thread_group.hpp"
#include "headroom/lifetime/host.hpp"
#include "headroom/lifetime/manual.hpp"
#include "headroom/lifetime/work.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace negative {

template <class R, class S, class E, class P>
concept guard_instantiable = requires { typename guard<R, S, E, P>; };

using host_s = host::inline_stream;
using host_e = host::inline_event;

// An event that cannot be created without arguments: the guard needs to make one per use.
struct argument_event {
  explicit argument_event(int) {}
  void record(host_s const&) {}
  bool ready() const { return true; }
  void wait_on(host_s const&) const {}
  void synchronize() const {}
};
static_assert(event<argument_event, host_s>);

// A policy with state: policies are tags, their release is a static function.
struct stateful_policy {
  int x = 0;
  static constexpr std::string_view name = "stateful";
  template <class R, class S, class E>
  static void release(R&, S const&, block, std::vector<stream_use<S, E>>&) {}
};
// A tag without a release function.
struct no_release {
  static constexpr std::string_view name = "no_release";
};

// A communicator whose stream type differs from the guard's.
struct manual_comm_mismatch {};

}  // namespace negative
using namespace negative;

// Policies.
static_assert(release_policy_for<stream_ordered, host::aligned_resource, host_s, host_e>);
static_assert(release_policy_for<blocking, host::aligned_resource, host_s, host_e>);
static_assert(!release_policy_for<deferred, host::aligned_resource, host_s, host_e>,
              "deferred needs a resource with a quarantine");
static_assert(release_policy_for<deferred, host_reclaimer, host_s, host_e>);
static_assert(!release_policy_for<stateful_policy, host::aligned_resource, host_s, host_e>);
static_assert(!release_policy_for<no_release, host::aligned_resource, host_s, host_e>);
static_assert(std::is_empty_v<stream_ordered> && std::is_empty_v<deferred> && std::is_empty_v<blocking>);

// Which guards exist.
static_assert(guard_instantiable<host::aligned_resource, host_s, host_e, stream_ordered>);
static_assert(guard_instantiable<host_reclaimer, host_s, host_e, deferred>);
static_assert(!guard_instantiable<host::aligned_resource, host_s, argument_event, stream_ordered>);
static_assert(!guard_instantiable<host::aligned_resource, manual::stream, manual::event, stream_ordered>,
              "a resource of another substrate's stream");
static_assert(!guard_instantiable<int, host_s, host_e, stream_ordered>);
// A policy the resource cannot serve (deferred on a plain resource, a tag without release) is a
// static_assert with a sentence, so it is a hard error: tests/lifetime/compile_fail/guard_*.cpp.

// Guards are move-only owners.
static_assert(!std::copy_constructible<host_guard<>>);
static_assert(!std::is_copy_assignable_v<host_guard<>>);
static_assert(std::is_nothrow_move_constructible_v<host_guard<>>);
static_assert(std::is_nothrow_move_assignable_v<host_guard<>>);
static_assert(std::default_initializable<host_guard<>>);
static_assert(!std::is_constructible_v<bool, host_guard<> const&> || !std::is_convertible_v<host_guard<>, bool>,
              "operator bool is explicit");
static_assert(is_guard_v<host_guard<blocking>> && !is_guard_v<host::aligned_resource>);
static_assert(std::same_as<event_type_for_t<host_s>, host_e>);
static_assert(std::same_as<event_type_for_t<manual::stream>, manual::event>);

// The reclaimer is a resource of its upstream's substrate, with the upstream's properties.
static_assert(stream_resource<host_reclaimer, host_s>);
static_assert(stream_resource_with<host_reclaimer, host_s, host_accessible>);
static_assert(!has_property<host_reclaimer, device_accessible>);
static_assert(quarantining_resource<host_reclaimer, host_s, host_e>);
static_assert(!quarantining_resource<host::aligned_resource, host_s, host_e>);
static_assert(!std::copy_constructible<host_reclaimer> && !std::move_constructible<host_reclaimer>);

// The manual substrate models the core concepts.
static_assert(stream<manual::stream>);
static_assert(event<manual::event, manual::stream>);
static_assert(stream_resource_with<manual::resource, manual::stream, host_accessible>);
static_assert(!stream_resource<manual::resource, host_s>);

// Work handles.
static_assert(!std::copy_constructible<collective_work<host_guard<>>>);
static_assert(std::move_constructible<collective_work<host_guard<>>>);

template <class C, class G>
concept can_all_reduce_async = requires(C& c, G& g, typename G::stream_type const& s) {
  all_reduce_async<float>(c, g, reduce_op::sum, s, s);
};
static_assert(can_all_reduce_async<host::thread_communicator, host_guard<>>);
static_assert(!can_all_reduce_async<host::thread_communicator, guard<manual::resource, manual::stream, manual::event>>,
              "the guard's stream type must be the communicator's");
static_assert(!can_all_reduce_async<manual_comm_mismatch, host_guard<>>, "not a communicator");

TEST_CASE("the compile-time checks above hold") { CHECK(guard_instantiable<host_reclaimer, host_s, host_e, deferred>); }
