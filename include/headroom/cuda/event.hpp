// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// An owning CUDA event. Timing is disabled by default (cheaper to record and wait on); ask for
// it by name with event_options{.timing = true} to use elapsed_ms.
#include <cuda_runtime_api.h>

#include <utility>

#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cuda {

struct event_options {
  /// Record timestamps, so that elapsed_ms works.
  bool timing = false;
  /// synchronize() yields the CPU (cudaEventBlockingSync) instead of spinning.
  bool blocking_sync = false;
};

/// Owns a cudaEvent_t. Move-only; a moved-from event may only be destroyed or assigned.
class event {
 public:
  explicit event(event_options options = {}) : timing_(options.timing) {
    unsigned flags = options.timing ? cudaEventDefault : cudaEventDisableTiming;
    if (options.blocking_sync) flags |= cudaEventBlockingSync;
    HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&handle_, flags));
  }
  event(event const&) = delete;
  event& operator=(event const&) = delete;
  event(event&& o) noexcept
      : handle_(std::exchange(o.handle_, nullptr)), timing_(o.timing_), recorded_(std::exchange(o.recorded_, false)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      destroy();
      handle_ = std::exchange(o.handle_, nullptr);
      timing_ = o.timing_;
      recorded_ = std::exchange(o.recorded_, false);
    }
    return *this;
  }
  ~event() { destroy(); }

  /// Marks the current end of `s`; later record() calls move the mark.
  void record(stream_view const& s) {
    check_valid("record");
    HEADROOM_CUDA_TRY(cudaEventRecord(handle_, s.get()));
    recorded_ = true;
  }
  /// Host poll: has the work before the mark completed? An event never recorded is ready.
  [[nodiscard]] bool ready() const {
    check_valid("ready");
    cudaError_t const status = cudaEventQuery(handle_);
    if (status == cudaErrorNotReady) return false;
    HEADROOM_CUDA_TRY(status);
    return true;
  }
  /// Work issued to `s` after this call waits (on the device) for the marked work. The host
  /// does not block. Waiting on an event never recorded is a no-op, as in CUDA.
  void wait_on(stream_view const& s) const {
    check_valid("wait_on");
    HEADROOM_CUDA_TRY(cudaStreamWaitEvent(s.get(), handle_, 0));
  }
  /// Host waits for the marked work.
  void synchronize() const {
    check_valid("synchronize");
    HEADROOM_CUDA_TRY(cudaEventSynchronize(handle_));
  }

  /// Milliseconds between `start` and `stop` (both timing events, both recorded, `stop`
  /// completed). Resolution is about half a microsecond.
  [[nodiscard]] friend float elapsed_ms(event const& start, event const& stop) {
    start.check_valid("elapsed_ms");
    stop.check_valid("elapsed_ms");
    expects<logic_error>(start.timing_ && stop.timing_, "cuda::elapsed_ms: both events need timing enabled (start ",
                         start.timing_ ? "has" : "lacks", " it, stop ", stop.timing_ ? "has" : "lacks",
                         " it); create them with event_options{.timing = true}");
    expects<logic_error>(start.recorded_ && stop.recorded_, "cuda::elapsed_ms: both events must be recorded (start ",
                         start.recorded_ ? "is" : "is not", ", stop ", stop.recorded_ ? "is" : "is not", ")");
    float ms = 0.0f;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&ms, start.handle_, stop.handle_));
    return ms;
  }

  [[nodiscard]] cudaEvent_t get() const noexcept { return handle_; }
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }
  [[nodiscard]] bool timing() const noexcept { return timing_; }
  [[nodiscard]] bool recorded() const noexcept { return recorded_; }

 private:
  void check_valid(char const* what) const {
    expects<logic_error>(handle_ != nullptr, "cuda::event::", what, " on a moved-from event");
  }
  void destroy() noexcept {
    if (handle_ != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaEventDestroy(handle_));
    handle_ = nullptr;
  }

  cudaEvent_t handle_ = nullptr;
  bool timing_ = false;
  bool recorded_ = false;
};
static_assert(headroom::event<event, stream_view>);

}  // namespace headroom::cuda
