// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// pipeline::graph_capture: a CUDA graph of executor steps on a buffer_arena, with the executor's
// capture contract (pipeline/capture.hpp) checked around the stream capture
// (pool/cuda/capture.hpp: the stream capture ends first, then the contract is checked).
//
//   exec.step(stage, r);                                  // eagerly first: NCCL connects
//   pipeline::graph_capture<Arena> capture(arena, compute);  // arena idle; BeginCapture(compute)
//   exec.step(stage, r);                                  // NCCL send / recv captured too
//   cuda::graph g = capture.end();
//   g.launch(compute);                                    // the step again, at the same addresses
//
// With separate compute and transfer streams the transfer stream joins the capture through the
// executor's events; join it back (an event recorded on it, waited on by compute) before end().
#include "headroom/pipeline/capture.hpp"
#include "headroom/pool/cuda/capture.hpp"

namespace headroom::pipeline {

template <class Arena>
using graph_capture = pool::graph_capture<Arena, capture_scope<Arena>>;

}  // namespace headroom::pipeline
