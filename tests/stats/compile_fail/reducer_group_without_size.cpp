// SPDX-License-Identifier: Apache-2.0
// A "group" without size() given to a reducer (Megatron-Bridge PR #3645's test 4).
// expect: comm is not a headroom::communicator
#include "headroom/host/thread_group.hpp"
#include "headroom/stats.hpp"

namespace hs = headroom::stats;

struct no_size {
  using stream_type = headroom::host::inline_stream;
  int rank() const { return 0; }
};
#ifdef HEADROOM_TWIN
using group = headroom::host::thread_communicator;
#else
using group = no_size;
#endif
hs::dynamic_report peak(hs::reducer<>& reduce, hs::dynamic_report const& local, group& pp) {
  return reduce.max(local, pp);
}
