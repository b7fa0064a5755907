// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// workspace<Resource, Stream>: bytes from any stream_resource for the lifetime of a scope,
// freed in stream order. The reducers' staging buffer is one (query its size from the staging
// policy, then allocate it once and reuse it every step).
//
// Construction and destruction are the resource's allocate / deallocate. With
// cuda::device_resource or cuda::pinned_resource those are cudaMalloc / cudaMallocHost and
// cudaStreamSynchronize + cudaFree / cudaFreeHost, which synchronise the device (and, under
// NCCL's peer mappings, can wait for the peers' devices). Where one process drives several GPUs
// from threads, make the workspace before the ranks' collectives begin and destroy it after
// every rank has finished them: one rank inside cudaFree while a peer's NCCL kernel waits for
// that rank's next collective is a deadlock (tests/nccl/scale_validation.cu, docs/scale.md).
#include <cstddef>
#include <span>
#include <utility>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"

namespace headroom::stats {

template <class Resource, class Stream>
  requires stream_resource<Resource, Stream>
class workspace {
 public:
  workspace(Resource resource, Stream s, std::size_t bytes)
      : resource_(std::move(resource)), stream_(s), bytes_(bytes),
        data_(bytes == 0 ? nullptr : resource_.allocate(stream_, bytes, default_alignment)) {}
  workspace(workspace const&) = delete;
  workspace& operator=(workspace const&) = delete;
  /// Frees on the stream it was allocated on: work queued there before the end of scope may still use it.
  ~workspace() {
    if (data_ != nullptr) resource_.deallocate(stream_, data_, bytes_, default_alignment);
  }

  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(data_), bytes_}; }
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  Resource resource_;
  Stream stream_;
  std::size_t bytes_;
  void* data_;
};

}  // namespace headroom::stats
