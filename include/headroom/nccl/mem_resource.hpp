// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// ncclMemAlloc / ncclMemFree as a stream_resource: memory that NCCL can register for its
// zero-copy and NVLink SHARP paths (allocated with the cuMem* APIs at NCCL's granularity).
#include <nccl.h>

#include <cstddef>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/detail/allocation.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/check.hpp"

namespace headroom::nccl {

/// Allocates on the device current at the time of the call. Stateless: all instances compare equal.
class nccl_mem_resource {
 public:
  static constexpr std::size_t max_alignment = 256;

  /// Returns `bytes` bytes of device memory (zero bytes gives nullptr); alignment a power of
  /// two <= 256. Throws nccl_error when NCCL cannot allocate.
  [[nodiscard]] void* allocate(cuda::stream_view const&, std::size_t bytes, std::size_t alignment = default_alignment) {
    cuda::detail::check_alignment("nccl::nccl_mem_resource::allocate", alignment, max_alignment);
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    HEADROOM_NCCL_TRY(ncclMemAlloc(&p, bytes));
    cuda::detail::check_returned_alignment("nccl::nccl_mem_resource::allocate", p, alignment,
                                           [](void* q) { HEADROOM_NCCL_TRY_NOTHROW(ncclMemFree(q)); });
    return p;
  }

  /// Synchronises `stream` (work queued on it that uses the block completes), then ncclMemFree.
  /// Deregister the buffer from every communicator first.
  void deallocate(cuda::stream_view const& stream, void* p, std::size_t, std::size_t = default_alignment) noexcept {
    if (p == nullptr) return;
    HEADROOM_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream.get()));
    HEADROOM_NCCL_TRY_NOTHROW(ncclMemFree(p));
  }

  friend bool operator==(nccl_mem_resource const&, nccl_mem_resource const&) noexcept { return true; }
  friend void get_property(nccl_mem_resource const&, device_accessible) noexcept {}
};
static_assert(stream_resource_with<nccl_mem_resource, cuda::stream_view, device_accessible>);
static_assert(!has_property<nccl_mem_resource, host_accessible>);

}  // namespace headroom::nccl
