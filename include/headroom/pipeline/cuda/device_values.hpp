// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// device_values<T>: one slot per micro-batch in device memory, for what a last stage's loss()
// reduces its output to. The loss kernel writes slot k; loss() returns at(k), a device pointer,
// so the executor keeps (retention::reduced, ::all) or drops (::none) a handle and the host never
// waits for a value in the middle of a step. One copy after the step brings all of them back.
//
//   pipeline::cuda::device_values<float> losses(memory, stream, m);   // zeroed on `stream`
//   float* loss(loss_args<cuda::stream_view> const& a) { my_loss<<<..., a.stream.get()>>>(..., losses.at(a.microbatch)); return losses.at(a.microbatch); }
//   ...
//   std::vector<float> host(m);
//   losses.copy_to(host, stream);  stream.synchronize();
//
// The slots are a lifetime guard over `Resource`, allocated and freed on the stream given at
// construction (which must outlive the object, like the guard's owner stream).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <type_traits>

#include "headroom/core/error.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/lifetime/cuda/guard.hpp"

namespace headroom::pipeline::cuda {

template <class T, class Resource = headroom::cuda::async_resource>
  requires std::is_trivially_copyable_v<T> && stream_resource<Resource, headroom::cuda::stream_view>
class device_values {
 public:
  /// `count` zeroed slots of T from `resource`, ordered on `stream`. Throws invalid_argument
  /// unless count >= 1 and `stream` is a created stream.
  device_values(Resource& resource, headroom::cuda::stream_view stream, int count)
      : slots_(allocate(resource, stream, count)), count_(count) {
    HEADROOM_CUDA_TRY(cudaMemsetAsync(slots_.data(), 0, slots_.size(), stream.get()));
  }

  [[nodiscard]] int size() const noexcept { return count_; }

  /// Device address of slot k. Throws invalid_argument unless 0 <= k < size().
  [[nodiscard]] T* at(int k) const {
    expects(k >= 0 && k < count_, "pipeline::cuda::device_values::at: slot ", k, " out of range [0, ", count_,
            "): one slot per micro-batch");
    return static_cast<T*>(slots_.data()) + k;
  }
  /// All slots, in device memory.
  [[nodiscard]] std::span<T> device_span() const noexcept { return {static_cast<T*>(slots_.data()), static_cast<std::size_t>(count_)}; }

  /// Enqueues the copy of every slot into `host` on `stream` (ordered after the work that wrote
  /// them on that stream); synchronize the stream before reading `host`. Throws invalid_argument
  /// unless host.size() == size().
  void copy_to(std::span<T> host, headroom::cuda::stream_view stream) const {
    expects(host.size() == static_cast<std::size_t>(count_), "pipeline::cuda::device_values::copy_to: host span has ",
            host.size(), " elements, expected size() = ", count_);
    headroom::cuda::require_stream(stream, "pipeline::cuda::device_values::copy_to");
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), slots_.data(), host.size_bytes(), cudaMemcpyDeviceToHost, stream.get()));
  }

 private:
  using guard_type = lifetime::guard<Resource, headroom::cuda::stream_view, headroom::cuda::event, lifetime::stream_ordered>;
  static guard_type allocate(Resource& resource, headroom::cuda::stream_view stream, int count) {
    expects(count >= 1, "pipeline::cuda::device_values: count ", count, ", expected >= 1 slot (one per micro-batch)");
    headroom::cuda::require_stream(stream, "pipeline::cuda::device_values");
    return guard_type(resource, stream, static_cast<std::size_t>(count) * sizeof(T), alignof(T) < 16 ? 16 : alignof(T));
  }
  guard_type slots_;
  int count_;
};

}  // namespace headroom::pipeline::cuda
