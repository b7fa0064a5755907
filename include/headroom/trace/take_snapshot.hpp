// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// take_snapshot: a recorder's history and live blocks as a snapshot (snapshot.hpp), times
// converted from ticks to Unix-epoch nanoseconds.
#include <cstdint>
#include <utility>
#include <vector>

#include "headroom/trace/clock.hpp"
#include "headroom/trace/detail/snapshot_build.hpp"
#include "headroom/trace/snapshot.hpp"

namespace headroom::trace {

/// The snapshot of `rec` now (a recorder<single_thread|shared>). Call it while no thread records.
template <class Recorder>
[[nodiscard]] snapshot take_snapshot(Recorder const& rec) {
  snapshot s;
  s.device = rec.device();
  s.max_entries = rec.options().max_entries;
  s.segments = detail::final_segments(rec.live(), s.overlapping);
  auto h = rec.history();
  s.dropped = h.dropped;
  s.untracked = rec.live().untracked();
  auto events = detail::without_untracked(h.events);
  std::int64_t const started = rec.start_ticks() != 0 ? rec.start_ticks() : ticks();  // never started: now
  std::int64_t const start = events.empty() ? started : events.front().time;
  auto trace = detail::allocs_live_at_start(events, rec.live(), start);
  for (auto const& e : trace) s.synthetic += e.kind == action::alloc ? 1 : 0;
  trace.insert(trace.end(), events.begin(), events.end());
  s.trace = detail::with_segments(detail::with_free_requests(trace), rec.live());
  auto const base = time_base::now();
  bool const stamped = rec.options().timestamps;
  std::int64_t const start_ns = base.epoch_ns(started);
  for (auto& e : s.trace) e.time = stamped ? base.epoch_ns(e.time) : start_ns;
  return s;
}

}  // namespace headroom::trace
