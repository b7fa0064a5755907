// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Stream-ordered memory resources: the shape of CCCL >= 3.1 `cuda::mr::resource`, with the
// stream type as a parameter so host and CUDA substrates satisfy one concept.
//
// Contract of deallocate(stream, p, bytes, alignment): the memory may be reused by work
// ordered after `stream`; the caller guarantees no other stream still uses it (or has made
// `stream` wait for those uses). `bytes` and `alignment` must match the allocation.
#include <concepts>
#include <cstddef>
#include <type_traits>

#include "headroom/core/stream.hpp"

namespace headroom {

template <class R, class S>
concept stream_resource = stream<S> && std::equality_comparable<R> &&
    requires(R& r, S const& s, void* p, std::size_t n, std::size_t a) {
      { r.allocate(s, n, a) } -> std::same_as<void*>;
      { r.deallocate(s, p, n, a) } noexcept;
    };

// Properties are empty tags found by ADL `get_property(resource, tag)`, as in CCCL.
struct host_accessible {};
struct device_accessible {};

template <class R, class P>
concept has_property = requires(R const& r) { get_property(r, P{}); };

template <class R, class S, class... Ps>
concept stream_resource_with = stream_resource<R, S> && (has_property<R, Ps> && ...);

}  // namespace headroom
