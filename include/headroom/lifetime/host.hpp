// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The host substrate's pairing for lifetime guards: inline_stream with inline_event, and short
// names for guards over host::aligned_resource. On the host every use has completed when it is
// recorded, so all three policies free at once; lifetime/manual.hpp has a substrate whose work
// completes only when told, for tests that need to see the difference.
#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/event.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/lifetime/deferred_reclaimer.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/policy.hpp"

namespace headroom::lifetime {

template <>
struct event_type_for<host::inline_stream> {
  using type = host::inline_event;
};

/// A guard over host::aligned_resource (stream_ordered or blocking).
template <class Policy = stream_ordered>
using host_guard = guard<host::aligned_resource, host::inline_stream, host::inline_event, Policy>;

/// The quarantine that deferred host guards allocate from and release into.
using host_reclaimer = deferred_reclaimer<host::aligned_resource, host::inline_stream, host::inline_event>;
using host_deferred_guard = guard<host_reclaimer, host::inline_stream, host::inline_event, deferred>;

}  // namespace headroom::lifetime
