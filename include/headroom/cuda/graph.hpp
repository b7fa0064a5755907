// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// CUDA graphs, owned: stream_capture begins a capture on a stream and ends it exactly once, and
// graph holds the captured graph and its executable form.
//
//   cuda::stream_capture capture(stream);     // cudaStreamBeginCapture (thread-local mode)
//   ... work issued to `stream` (and streams forked from it by events) ...
//   cuda::graph g = capture.end();            // cudaStreamEndCapture + cudaGraphInstantiate
//   g.launch(stream);                         // replay
//
// A capture destroyed without end() (an exception left it) ends the capture and discards the
// graph, so the stream is usable again. Capture mode: thread-local by default (a call that is
// unsafe under capture, e.g. cudaMalloc, fails only for the capturing thread).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cuda {

/// An instantiated graph: the captured cudaGraph_t and its cudaGraphExec_t. Move-only.
class graph {
 public:
  /// Takes ownership of `g` and instantiates it (throws cuda_error; `g` is destroyed then).
  explicit graph(cudaGraph_t g) : graph_(g) {
    if (cudaError_t const status = cudaGraphInstantiate(&exec_, graph_, 0); status != cudaSuccess) {
      cudaGraphDestroy(graph_);
      graph_ = nullptr;
      HEADROOM_CUDA_TRY(status);
    }
  }
  graph(graph&& o) noexcept : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
  graph& operator=(graph&& o) noexcept {
    if (this != &o) {
      reset();
      graph_ = std::exchange(o.graph_, nullptr);
      exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
  }
  graph(graph const&) = delete;
  graph& operator=(graph const&) = delete;
  ~graph() { reset(); }

  /// Replays the graph on `s` (stream-ordered; the host does not wait).
  void launch(stream_view s) const {
    expects<logic_error>(exec_ != nullptr, "cuda::graph::launch: the graph is empty (moved from)");
    HEADROOM_CUDA_TRY(cudaGraphLaunch(exec_, s.get()));
  }
  [[nodiscard]] cudaGraph_t get() const noexcept { return graph_; }
  [[nodiscard]] cudaGraphExec_t exec() const noexcept { return exec_; }
  /// Nodes in the captured graph.
  [[nodiscard]] std::size_t nodes() const {
    std::size_t n = 0;
    HEADROOM_CUDA_TRY(cudaGraphGetNodes(graph_, nullptr, &n));
    return n;
  }

 private:
  void reset() noexcept {
    if (exec_ != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaGraphExecDestroy(exec_));
    if (graph_ != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaGraphDestroy(graph_));
    exec_ = nullptr;
    graph_ = nullptr;
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// A stream capture, begun at construction and ended exactly once.
class stream_capture {
 public:
  explicit stream_capture(stream_view s, cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal) : stream_(s) {
    HEADROOM_CUDA_TRY(cudaStreamBeginCapture(s.get(), mode));
    open_ = true;
  }
  stream_capture(stream_capture const&) = delete;
  stream_capture& operator=(stream_capture const&) = delete;
  /// Ends an open capture and discards what it captured.
  ~stream_capture() { discard(); }

  /// Ends the capture and instantiates the graph. Throws cuda_error when the capture was
  /// invalidated (a call that is illegal under capture) or a forked stream was not joined.
  [[nodiscard]] graph end() {
    expects<logic_error>(open_, "cuda::stream_capture::end: the capture has ended already");
    open_ = false;
    cudaGraph_t g = nullptr;
    HEADROOM_CUDA_TRY(cudaStreamEndCapture(stream_.get(), &g));
    return graph(g);
  }
  /// Ends an open capture without keeping the graph. Quiet: an exception is leaving the capture,
  /// which may have been invalidated by the call that threw (cudaErrorStreamCaptureInvalidated).
  void discard() noexcept {
    if (!open_) return;
    open_ = false;
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream_.get(), &g) == cudaSuccess && g != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaGraphDestroy(g));
    static_cast<void>(cudaGetLastError());  // clear the invalidation's non-sticky error
  }
  [[nodiscard]] bool open() const noexcept { return open_; }
  [[nodiscard]] stream_view stream() const noexcept { return stream_; }

 private:
  stream_view stream_;
  bool open_ = false;
};

}  // namespace headroom::cuda
