// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The pipeline executor on GPUs: the generic executor (pipeline/executor.hpp) instantiated for
// CUDA streams and events, so that what it allocates comes from a stream-ordered device resource
// and what it sends is released without the host waiting.
//
//   cuda::async_resource memory(comm.device());
//   cuda::stream compute, transfer;                                      // on comm.device()
//   pipeline::cuda::device_executor<nccl::communicator> exec(comm, memory, sched, bytes, compute, transfer);
//   auto result = exec.step(my_stage, pipeline::retention::none{});     // returns without a sync
//
// What the GPU path adds to the generic one is only the pairing of types; the behaviour it relies
// on is the guard's stream_ordered policy (lifetime/policy.hpp):
//   - a sent output (or input gradient) is a lifetime::guard handed to the transfer stream right
//     after its send (set_owner: the transfer stream waits for the compute work that wrote it) and
//     released there: the block is freed on the transfer stream after the send (cudaFreeAsync for
//     async_resource), so the compute stream does not wait for the send, and the allocator gives
//     the bytes to later compute allocations only in stream order (cudaMallocAsync's default
//     reuse policy may reuse the block early by making compute wait for the transfer stream).
//     This is Megatron's deallocate_output_tensor without replacing tensor storage by hand, and
//     without PyTorch's record_stream quarantine. The host never blocks;
//   - with one stream for both (the default constructor argument pair), no event is needed at all:
//     the free is ordered after the send on the same stream;
//   - NCCL send/recv block on the device until the peer posts its half; the schedules are lowered
//     so that every rank's list is a projection of one global order (validate() proves it), so one
//     host thread per GPU, or one process per GPU, issues them without deadlock.
#include <cuda_runtime_api.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"  // event_type_for<cuda::stream_view>
#include "headroom/pipeline/executor.hpp"

namespace headroom::pipeline::cuda {

/// A communicator whose transfers are ordered on CUDA streams (nccl::communicator).
template <class C>
concept device_transport = byte_transport<C> && std::same_as<typename C::stream_type, headroom::cuda::stream_view>;

}  // namespace headroom::pipeline::cuda

namespace headroom::pipeline {

/// Device communicators: transfers in list order (NCCL's issue order must match across ranks;
/// the host never waits on them); the executor's check collective goes through a few bytes of
/// device memory from the caller's resource, once, when the executor is built. A failure aborts
/// the communicator (ncclCommAbort): peers in the same process are aborted with it by
/// nccl::launch_per_device; peers in other processes see it only as NCCL reports the broken
/// connection (check_async()).
template <class Comm>
  requires cuda::device_transport<Comm>
class transport<Comm> : public detail::in_order_transport<Comm> {
 public:
  using detail::in_order_transport<Comm>::in_order_transport;

  template <class Resource>
  void all_gather(std::span<std::int64_t const> in, std::span<std::int64_t> out, headroom::cuda::stream_view s,
                  Resource& resource) {
    std::size_t const bytes = (in.size() + out.size()) * sizeof(std::int64_t);
    void* block = resource.allocate(s, bytes);
    auto* d_in = static_cast<std::int64_t*>(block);
    auto* d_out = d_in + in.size();
    try {
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(d_in, in.data(), in.size_bytes(), cudaMemcpyHostToDevice, s.get()));
      this->comm().all_gather(std::span<std::int64_t const>(d_in, in.size()), std::span<std::int64_t>(d_out, out.size()), s);
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(out.data(), d_out, out.size_bytes(), cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();
    } catch (...) {
      resource.deallocate(s, block, bytes);
      throw;
    }
    resource.deallocate(s, block, bytes);
  }

  /// NCCL sets up a point-to-point connection lazily, at the first transfer with a peer, in a
  /// handshake both sides must make alike: a group that holds a send and a receive to a peer
  /// connects both directions at once, and a peer that posts its half alone answers for one
  /// direction; NCCL 2.28 fails that pairing ("Message truncated", seen on 2x H100 with
  /// transfers::grouped, 1F1B p = 2, m = 1). The executor therefore connects every peer of its
  /// schedule when it is built: one group of a one-byte send and receive per peer, on every rank.
  /// Each message has a slot of its own of `connect_slot_bytes`: NCCL's send kernel loads more
  /// than the byte it sends (a 4-byte read of a 1-byte message, compute-sanitizer memcheck,
  /// NCCL 2.28, 2x H200), past the end of a block sized to the messages.
  static constexpr std::size_t connect_slot_bytes = 128;

  template <class Resource>
  void connect(std::span<int const> peers, headroom::cuda::stream_view s, Resource& resource) {
    if constexpr (requires { typename Comm::group_type; }) {
      if (peers.empty()) return;
      std::size_t const bytes = 2 * peers.size() * connect_slot_bytes;
      auto* block = static_cast<std::byte*>(resource.allocate(s, bytes));
      try {
        HEADROOM_CUDA_TRY(cudaMemsetAsync(block, 0, bytes, s.get()));
        typename Comm::group_type group;
        for (std::size_t i = 0; i < peers.size(); ++i) {
          std::byte* const slot = block + 2 * i * connect_slot_bytes;
          this->comm().send(std::span<std::byte const>(slot, 1), peers[i], s);
          this->comm().recv(std::span<std::byte>(slot + connect_slot_bytes, 1), peers[i], s);
        }
        group.end();
      } catch (...) {
        resource.deallocate(s, block, bytes);
        throw;
      }
      resource.deallocate(s, block, bytes);  // stream-ordered after the group
    }
  }
};

}  // namespace headroom::pipeline

namespace headroom::pipeline::cuda {

/// The executor over device memory from `Resource` (cuda::async_resource by default, or any
/// stream_resource on cuda::stream_view, e.g. a stats or trace adaptor), CUDA events for the
/// stream-ordered releases.
template <device_transport Comm, class Resource = headroom::cuda::async_resource>
  requires stream_resource<Resource, headroom::cuda::stream_view>
using device_executor = executor<Comm, Resource, headroom::cuda::stream_view, headroom::cuda::event>;

/// The buffers a device_executor hands to callbacks and keeps under retention::all.
template <device_transport Comm, class Resource = headroom::cuda::async_resource>
using device_buffer = typename device_executor<Comm, Resource>::buffer;

static_assert(std::same_as<lifetime::event_type_for_t<headroom::cuda::stream_view>, headroom::cuda::event>);

}  // namespace headroom::pipeline::cuda
