// SPDX-License-Identifier: Apache-2.0
// A recording resource given something that is not an event sink in place of the recorder.
// expect: trace::recording_resource<Upstream, Recorder>: Recorder is not a trace::event_sink
#include <cstddef>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/trace/resource.hpp"

namespace tr = headroom::trace;

#ifdef HEADROOM_TWIN
using sink = tr::recorder<>;
#else
using sink = tr::recorder_options;
#endif
std::size_t size_of_resource() { return sizeof(tr::recording_resource<headroom::host::aligned_resource, sink>); }
