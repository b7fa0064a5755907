// SPDX-License-Identifier: Apache-2.0
// A reducer given a plain value instead of a report.
// expect: report is not a stats::report<...> or a stats::dynamic_report
#include <cstdint>

#include "headroom/host/thread_group.hpp"
#include "headroom/stats.hpp"

namespace hs = headroom::stats;

std::int64_t peak(hs::reducer<>& reduce, headroom::host::thread_communicator& comm, std::int64_t bytes) {
#ifdef HEADROOM_TWIN
  return reduce.max(hs::report<hs::field<"bytes", std::int64_t>>(bytes), comm).get<"bytes">();
#else
  return reduce.max(bytes, comm);
#endif
}
