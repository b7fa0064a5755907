// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// CUDA streams: `stream_view` is the substrate's stream type (a copyable, non-owning handle);
// `stream` owns a cudaStream_t and hands out views.
//
// A default-constructed view is the legacy default stream (handle 0). It is representable
// because CUDA APIs accept it, but it synchronises with every blocking stream of the device,
// so headroom functions that enqueue communication or stream-ordered frees reject it through
// `require_stream`, naming the handle. `cudaStreamPerThread` is a real stream and accepted.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <utility>

#include "headroom/core/error.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/cuda/check.hpp"

namespace headroom::cuda {

class stream_view {
 public:
  using value_type = cudaStream_t;

  /// The legacy default stream (handle 0).
  constexpr stream_view() noexcept = default;
  /// Views `s`; it must outlive the view.
  constexpr stream_view(cudaStream_t s) noexcept : handle_(s) {}  // NOLINT(google-explicit-constructor)
  // An integer or nullptr is almost always a mistake for "the default stream"; say stream_view{}.
  stream_view(int) = delete;
  stream_view(std::nullptr_t) = delete;

  [[nodiscard]] static stream_view legacy_default() noexcept { return stream_view(cudaStreamLegacy); }
  [[nodiscard]] static stream_view per_thread_default() noexcept { return stream_view(cudaStreamPerThread); }

  [[nodiscard]] constexpr cudaStream_t get() const noexcept { return handle_; }
  constexpr operator cudaStream_t() const noexcept { return handle_; }  // NOLINT: for <<<..., s>>>

  /// True for the legacy default stream, spelled as 0 or as cudaStreamLegacy.
  [[nodiscard]] bool is_legacy_default() const noexcept { return handle_ == nullptr || handle_ == cudaStreamLegacy; }
  /// True for any default stream: legacy or per-thread.
  [[nodiscard]] bool is_default() const noexcept { return is_legacy_default() || handle_ == cudaStreamPerThread; }

  /// Host waits until all work issued to the stream so far has completed.
  void synchronize() const { HEADROOM_CUDA_TRY(cudaStreamSynchronize(handle_)); }
  /// Host poll: has all work issued so far completed? (cudaStreamQuery)
  [[nodiscard]] bool ready() const {
    cudaError_t const status = cudaStreamQuery(handle_);
    if (status == cudaErrorNotReady) return false;
    HEADROOM_CUDA_TRY(status);
    return true;
  }

  friend constexpr bool operator==(stream_view, stream_view) noexcept = default;

  friend std::ostream& operator<<(std::ostream& os, stream_view s) {
    if (s.handle_ == nullptr) return os << "cudaStream_t 0 (legacy default stream)";
    if (s.handle_ == cudaStreamLegacy) return os << "cudaStreamLegacy (legacy default stream)";
    if (s.handle_ == cudaStreamPerThread) return os << "cudaStreamPerThread";
    return os << "cudaStream_t " << static_cast<void const*>(s.handle_);
  }

 private:
  cudaStream_t handle_ = nullptr;
};
static_assert(stream<stream_view>);

/// Throws invalid_argument unless `s` is a real (created or per-thread) stream: the legacy
/// default stream would serialise with every other blocking stream. `what` names the caller.
inline void require_stream(stream_view s, char const* what) {
  expects(!s.is_legacy_default(), what, ": needs a created CUDA stream, got ", s,
          "; it synchronises with every blocking stream of the device");
}

struct stream_options {
  /// cudaStreamNonBlocking: no implicit synchronisation with the legacy default stream.
  bool non_blocking = true;
  /// Lower numbers are higher priorities; must lie in cudaDeviceGetStreamPriorityRange.
  int priority = 0;
};

/// Owns a stream on the device current at construction. Move-only.
class stream {
 public:
  explicit stream(stream_options options = {}) : non_blocking_(options.non_blocking), priority_(options.priority) {
    int least = 0;
    int greatest = 0;
    HEADROOM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    expects(options.priority <= least && options.priority >= greatest, "cuda::stream: priority ", options.priority,
            " outside the device's range [", greatest, " (highest), ", least, " (lowest)]");
    HEADROOM_CUDA_TRY(cudaGetDevice(&device_));
    unsigned const flags = options.non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
    HEADROOM_CUDA_TRY(cudaStreamCreateWithPriority(&handle_, flags, options.priority));
  }
  stream(stream const&) = delete;
  stream& operator=(stream const&) = delete;
  stream(stream&& o) noexcept
      : handle_(std::exchange(o.handle_, nullptr)), device_(o.device_), non_blocking_(o.non_blocking_),
        priority_(o.priority_) {}
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      destroy();
      handle_ = std::exchange(o.handle_, nullptr);
      device_ = o.device_;
      non_blocking_ = o.non_blocking_;
      priority_ = o.priority_;
    }
    return *this;
  }
  ~stream() { destroy(); }

  [[nodiscard]] stream_view view() const noexcept { return stream_view(handle_); }
  operator stream_view() const noexcept { return view(); }  // NOLINT(google-explicit-constructor)
  [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }
  /// False after the stream was moved from.
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] bool non_blocking() const noexcept { return non_blocking_; }
  [[nodiscard]] int priority() const noexcept { return priority_; }

  void synchronize() const {
    expects<logic_error>(valid(), "cuda::stream::synchronize on a moved-from stream");
    view().synchronize();
  }
  [[nodiscard]] bool ready() const {
    expects<logic_error>(valid(), "cuda::stream::ready on a moved-from stream");
    return view().ready();
  }

 private:
  void destroy() noexcept {
    // cudaStreamDestroy returns at once; work already queued still runs to completion.
    if (handle_ != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaStreamDestroy(handle_));
    handle_ = nullptr;
  }

  cudaStream_t handle_ = nullptr;
  int device_ = 0;
  bool non_blocking_ = true;
  int priority_ = 0;
};
static_assert(!headroom::stream<stream>, "an owning stream is not a copyable view");

}  // namespace headroom::cuda
