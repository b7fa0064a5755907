// SPDX-License-Identifier: Apache-2.0
// A pipeline stage without loss(): the executor cannot run it, not even forward-only.
// expect: Stage is not a pipeline::forward_stage
#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using headroom::host::inline_stream;

struct stage {
  void forward(hp::forward_args<inline_stream> const&) {}
#ifdef HEADROOM_TWIN
  double loss(hp::loss_args<inline_stream> const&) { return 0; }
#endif
  void backward(hp::backward_args<inline_stream> const&) {}
};

void run(hp::executor<headroom::host::thread_communicator, headroom::host::aligned_resource>& ex, stage& s) {
  static_cast<void>(ex.step(s));
}
