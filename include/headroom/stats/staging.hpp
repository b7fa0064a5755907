// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Staging policies: how the reducers' packed int64 words reach the communicator.
//
// The reducers pack on the host (reports are host values). A staging policy runs the one
// collective on those host words and leaves the result in host memory:
//   host_staging                         the communicator takes host buffers (thread_group, MPI);
//                                        no workspace
//   cuda::blocking_device_staging        copies through a small caller-provided device workspace
//   (stats/cuda/staging.hpp)             for NCCL, and blocks the host until the result is back
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "headroom/core/communicator.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/stats/plan.hpp"

namespace headroom::stats {

/// A communicator whose collectives take host memory: the host substrate's stream type, or a
/// type that says so with `static constexpr bool accepts_host_buffers = true`.
template <class C>
concept host_buffer_communicator = communicator<C> && (std::same_as<typename C::stream_type, host::inline_stream> ||
                                                       requires { requires C::accepts_host_buffers; });

/// St can run the reducers' collectives on communicator C.
template <class St, class C>
concept staging_for = communicator<C> && requires(St& st, C& c, typename C::stream_type const& s,
                                                  std::span<std::int64_t const> in, std::span<std::int64_t> out) {
  st.all_reduce_max(c, in, out, s);
  st.all_gather(c, in, out, s);
};

/// The communicator reads and writes host memory: call it directly, then wait for the stream.
struct host_staging {
  template <host_buffer_communicator C>
  void all_reduce_max(C& comm, std::span<std::int64_t const> in, std::span<std::int64_t> out,
                      typename C::stream_type const& s) const {
    comm.all_reduce(in, out, reduce_op::max, s);
    s.synchronize();
  }
  template <host_buffer_communicator C>
  void all_gather(C& comm, std::span<std::int64_t const> in, std::span<std::int64_t> out,
                  typename C::stream_type const& s) const {
    comm.all_gather(in, out, s);
    s.synchronize();
  }
};

}  // namespace headroom::stats
