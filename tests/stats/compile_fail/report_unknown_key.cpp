// SPDX-License-Identifier: Apache-2.0
// A typed report read with a key it does not have: the error spells the key and the valid keys.
// expect: stats::report::get<key>: unknown key
#include <cstdint>

#include "headroom/stats/report.hpp"

namespace hs = headroom::stats;
using step_memory = hs::report<hs::field<"allocated_bytes", std::int64_t>, hs::field<"free_gigabytes", double>>;

std::int64_t peak(step_memory const& r) {
#ifdef HEADROOM_TWIN
  return r.get<"allocated_bytes">();
#else
  return r.get<"num_alloc_retries">();
#endif
}
