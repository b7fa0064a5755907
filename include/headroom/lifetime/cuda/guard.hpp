// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Lifetime guards on the CUDA substrate: cuda::stream_view paired with cuda::event, and short
// names for guards over stream-ordered device memory (cuda::async_resource by default).
//
//   cuda::async_resource pool(device);
//   lifetime::device_guard<> activations(pool, compute, bytes);           // stream_ordered
//   lifetime::device_reclaimer<> quarantine(pool);                        // record_stream model
//   lifetime::device_deferred_guard<> stashed(quarantine, compute, bytes);
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/deferred_reclaimer.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/policy.hpp"

namespace headroom::lifetime {

template <>
struct event_type_for<cuda::stream_view> {
  using type = cuda::event;  // timing disabled: cheapest to record and wait on
};

template <class Policy = stream_ordered, class Resource = cuda::async_resource>
using device_guard = guard<Resource, cuda::stream_view, cuda::event, Policy>;

template <class Upstream = cuda::async_resource>
using device_reclaimer = deferred_reclaimer<Upstream, cuda::stream_view, cuda::event>;

template <class Upstream = cuda::async_resource>
using device_deferred_guard = guard<device_reclaimer<Upstream>, cuda::stream_view, cuda::event, deferred>;

static_assert(release_policy_for<stream_ordered, cuda::async_resource, cuda::stream_view, cuda::event>);
static_assert(release_policy_for<deferred, device_reclaimer<>, cuda::stream_view, cuda::event>);
static_assert(!release_policy_for<deferred, cuda::async_resource, cuda::stream_view, cuda::event>);
static_assert(stream_resource_with<device_reclaimer<>, cuda::stream_view, device_accessible>);

}  // namespace headroom::lifetime
