// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Page-locked host memory (cudaMallocHost / cudaFreeHost): host- and device-accessible, the
// staging buffer for asynchronous copies.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/detail/allocation.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cuda {

/// Stateless: all instances compare equal.
class pinned_resource {
 public:
  /// cudaMallocHost returns page-aligned blocks; 256 is what every headroom resource promises.
  static constexpr std::size_t max_alignment = 256;

  /// Returns `bytes` bytes of pinned host memory; zero bytes gives nullptr. Throws
  /// invalid_argument for an unsupported alignment, capacity_error when pinning fails.
  [[nodiscard]] void* allocate(stream_view const&, std::size_t bytes, std::size_t alignment = default_alignment) {
    detail::check_alignment("cuda::pinned_resource::allocate", alignment, max_alignment);
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    HEADROOM_CUDA_ALLOC_TRY("cuda::pinned_resource::allocate", bytes, cudaMallocHost(&p, bytes));
    detail::check_returned_alignment("cuda::pinned_resource::allocate", p, alignment,
                                     [](void* q) { HEADROOM_CUDA_TRY_NOTHROW(cudaFreeHost(q)); });
    return p;
  }

  /// Synchronises `stream` (work queued on it that uses the block completes), then cudaFreeHost.
  void deallocate(stream_view const& stream, void* p, std::size_t, std::size_t = default_alignment) noexcept {
    if (p == nullptr) return;
    HEADROOM_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream.get()));
    HEADROOM_CUDA_TRY_NOTHROW(cudaFreeHost(p));
  }

  friend bool operator==(pinned_resource const&, pinned_resource const&) noexcept { return true; }
  friend void get_property(pinned_resource const&, host_accessible) noexcept {}
  friend void get_property(pinned_resource const&, device_accessible) noexcept {}
};
static_assert(stream_resource_with<pinned_resource, stream_view, host_accessible, device_accessible>);

}  // namespace headroom::cuda
