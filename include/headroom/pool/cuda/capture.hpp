// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// graph_capture: a CUDA graph of a step over a unit_pool, with the pool's capture contract
// (pool/capture.hpp) checked around the stream capture.
//
//   step();                                       // once eagerly: strict assignment pins the slots
//   pool::graph_capture capture(pool, origin);    // events cleared, cudaStreamBeginCapture(origin)
//   step();                                       // acquire / collectives / compute / release
//   cuda::graph g = capture.end();                // EndCapture, then the lease check; events cleared
//   g.launch(origin);                             // replays at the captured (fixed) addresses
//
// Streams other than `origin` join the capture by waiting on an event recorded on it and must be
// joined back before end() (CUDA's rule). end() ends the stream capture first (so the stream is
// usable whatever happens), then checks the leases: a step that left one held throws logic_error
// and the graph is destroyed. A call the pool refuses inside (an upstream allocation) throws
// before it reaches CUDA; when that exception leaves, the destructor ends the capture, discards
// the graph and closes the pool's scope.
#include "headroom/cuda/graph.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/pool/capture.hpp"

namespace headroom::pool {

/// `Scope` is the contract checked around the capture: the pool's capture_scope by default
/// (pipeline::graph_capture uses it with the executor's, pipeline/cuda/capture.hpp).
template <class Pool, class Scope = capture_scope<Pool>>
class graph_capture {
 public:
  /// Opens the capture scope on `pool`, then begins capturing `origin` (thread-local mode).
  graph_capture(Pool& pool, headroom::cuda::stream_view origin,
                cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal)
      : scope_(pool), capture_(origin, mode) {}

  /// Ends the stream capture, checks the pool's leases and instantiates the graph.
  [[nodiscard]] headroom::cuda::graph end() {
    headroom::cuda::graph g = capture_.end();
    scope_.end();  // throws after closing: `g` is destroyed on the way out
    return g;
  }
  [[nodiscard]] Scope& scope() noexcept { return scope_; }

 private:
  Scope scope_;                             // closed after the capture has ended (members: reverse order)
  headroom::cuda::stream_capture capture_;
};

template <class Pool>
graph_capture(Pool&, headroom::cuda::stream_view) -> graph_capture<Pool>;

}  // namespace headroom::pool
