// SPDX-License-Identifier: Apache-2.0
#pragma once
// Stream-ordered device buffers for the GPU tests: memory from a cuda::async_resource, filled,
// uploaded, downloaded and freed in the order of one stream. Unlike device_vector (legacy
// stream, see device_vector.hpp), nothing here waits for the device except download().
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom_test {

/// `n` elements of T from `mr`, used and freed on stream `s`.
template <class T>
class stream_buffer {
 public:
  stream_buffer(headroom::cuda::async_resource& mr, headroom::cuda::stream_view s, std::size_t n)
      : mr_(&mr), s_(s), n_(n), p_(static_cast<T*>(mr.allocate(s, bytes()))) {}
  stream_buffer(stream_buffer const&) = delete;
  stream_buffer& operator=(stream_buffer const&) = delete;
  ~stream_buffer() { mr_->deallocate(s_, p_, bytes()); }

  [[nodiscard]] std::span<T> span() const { return {p_, n_}; }
  [[nodiscard]] T* data() const { return p_; }
  /// Enqueued on the stream. A copy from pageable memory returns once `host` has been staged,
  /// so `host` may be a temporary.
  void upload(std::vector<T> const& host) {
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemcpyAsync(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, s_.get()));
  }
  void fill_byte(int value) { HEADROOM_CUDA_TRY(cudaMemsetAsync(p_, value, bytes(), s_.get())); }
  /// Waits for the stream: the result reflects all work enqueued on it before the call.
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost, s_.get()));
    s_.synchronize();
    return host;
  }

 private:
  [[nodiscard]] std::size_t bytes() const { return std::max<std::size_t>(n_, 1) * sizeof(T); }  // never null
  headroom::cuda::async_resource* mr_;
  headroom::cuda::stream_view s_;
  std::size_t n_;
  T* p_;
};

}  // namespace headroom_test
