// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// cudaMalloc / cudaFree as a stream_resource. Not stream-ordered: use it as the upstream of a
// pool, or where allocations are rare; async_resource is the stream-ordered one.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/detail/allocation.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cuda {

/// Allocates on the device current at the time of the call. Stateless: all instances compare equal.
class device_resource {
 public:
  /// cudaMalloc guarantees 256-byte alignment, the most this resource can promise.
  static constexpr std::size_t max_alignment = 256;

  /// Returns `bytes` bytes of device memory aligned to `alignment` (a power of two <= 256);
  /// zero bytes gives nullptr. The memory is usable by any stream at once. Throws
  /// invalid_argument for an unsupported alignment, capacity_error when the device is full.
  [[nodiscard]] void* allocate(stream_view const&, std::size_t bytes, std::size_t alignment = default_alignment) {
    detail::check_alignment("cuda::device_resource::allocate", alignment, max_alignment);
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    HEADROOM_CUDA_ALLOC_TRY("cuda::device_resource::allocate", bytes, cudaMalloc(&p, bytes));
    return p;
  }

  /// Synchronises `stream` (so work queued on it that uses the block has completed), then
  /// cudaFree. Per the resource contract, other streams that used the block were already
  /// ordered before `stream` by the caller.
  void deallocate(stream_view const& stream, void* p, std::size_t, std::size_t = default_alignment) noexcept {
    if (p == nullptr) return;
    HEADROOM_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream.get()));
    HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p));
  }

  friend bool operator==(device_resource const&, device_resource const&) noexcept { return true; }
  friend void get_property(device_resource const&, device_accessible) noexcept {}
};
static_assert(stream_resource_with<device_resource, stream_view, device_accessible>);
static_assert(!has_property<device_resource, host_accessible>);

}  // namespace headroom::cuda
