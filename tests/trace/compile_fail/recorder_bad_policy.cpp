// SPDX-License-Identifier: Apache-2.0
// A recorder policy that is not a recording_policy (no records flag).
// expect: trace::recorder<Policy>: Policy is not a trace::recording_policy
#include "headroom/trace/recorder.hpp"

namespace tr = headroom::trace;

struct no_records_flag {};
#ifdef HEADROOM_TWIN
using policy = tr::single_thread;
#else
using policy = no_records_flag;
#endif
void record_nothing() { tr::recorder<policy> r; }
