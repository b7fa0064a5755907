// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// to_memory_viz: a snapshot as the pickle PyTorch's memory_viz opens (drag it onto
// https://pytorch.org/memory_viz, or torch.cuda._memory_viz.trace_plot / segment_plot):
//   {"segments": [{device, address, total_size, allocated_size, active_size, requested_size,
//                  stream, segment_type, segment_pool_id, is_expandable, frames,
//                  blocks: [{address, size, requested_size, state, frames}]}],
//    "device_traces": [[{action, addr, size, stream, time_us, frames, category}]],   // per device
//    "allocator_settings": {trace_alloc_max_entries, trace_alloc_overflowed},
//    "headroom": {dropped_events, untracked_blocks, overlapping_blocks, synthetic_allocs, ...}}
// time_us is Unix-epoch microseconds, as PyTorch's. When events carry categories, one event has
// category "unknown": the viewer's annotate_snapshot misspells `categores` when adding it
// itself and throws.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/trace/event.hpp"
#include "headroom/trace/pickle.hpp"
#include "headroom/trace/snapshot.hpp"

namespace headroom::trace {

/// Extra top-level entries of the "headroom" dict (step, coordinates...).
using snapshot_labels = std::vector<std::pair<std::string, std::string>>;

namespace detail {

inline void write_frames(pickle_writer& w, frame const& f) {
  w.begin_list();
  if (!f.empty()) {
    w.begin_dict();
    w.key("filename");
    w.shared_string(f.filename);
    w.item("line", f.line);
    w.key("name");
    w.shared_string(f.function);
    w.end_dict();
  }
  w.end_list();
}

inline void write_event(pickle_writer& w, event const& e, std::string_view action, category what) {
  w.begin_dict();
  w.item("action", action);
  w.item("addr", e.addr);
  w.item("size", e.size);
  w.item("stream", e.stream);
  w.item("time_us", e.time / 1000);
  w.key("frames");
  write_frames(w, e.where());
  w.key("category");
  w.shared_string(what.view());
  w.end_dict();
}

inline void write_segment(pickle_writer& w, snapshot_segment const& s, int device) {
  w.begin_dict();
  w.item("device", device);
  w.item("address", s.addr);
  w.item("total_size", s.size);
  std::uint64_t const active = s.active_bytes();
  for (char const* k : {"allocated_size", "active_size", "requested_size"}) w.item(k, active);
  w.item("stream", s.stream);
  w.item("segment_type", "large");
  w.key("segment_pool_id");
  w.integer(0);
  w.integer(0);
  w.tuple2();
  w.item("is_expandable", false);
  w.key("frames");
  write_frames(w, s.where);
  w.key("blocks");
  w.begin_list();
  for (auto const& b : s.blocks) {
    w.begin_dict();
    w.item("address", b.addr);
    w.item("size", b.size);
    w.item("requested_size", b.state == block_state::inactive ? std::uint64_t{0} : b.size);
    w.item("state", block_state_name(b.state));
    w.key("frames");
    write_frames(w, b.where);
    w.end_dict();
  }
  w.end_list();
  w.end_dict();
}

}  // namespace detail

/// The pickle bytes of `s` (protocol 4). `labels` go to the "headroom" dict as strings.
[[nodiscard]] inline std::string to_memory_viz(snapshot const& s, snapshot_labels const& labels = {}) {
  pickle_writer w;
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  for (auto const& seg : s.segments) detail::write_segment(w, seg, s.device);
  w.end_list();

  w.key("device_traces");
  w.begin_list();
  for (int d = 0; d < s.device; ++d) {
    w.begin_list();
    w.end_list();
  }
  w.begin_list();
  bool has_unknown = false;
  for (auto const& e : s.trace) {
    has_unknown = has_unknown || e.what == categories::unknown;
    detail::write_event(w, e, action_name(e.kind), e.what);
  }
  if (!s.trace.empty() && !has_unknown) {
    // A "snapshot" marker: ignored by the timelines, it carries the "unknown" category.
    event marker = s.trace.back();
    marker.addr = 0;
    marker.size = 0;
    marker.set_where({});
    detail::write_event(w, marker, "snapshot", categories::unknown);
  }
  w.end_list();
  w.end_list();

  // What PyTorch writes about its ring: a viewer can warn that older events were overwritten.
  w.key("allocator_settings");
  w.begin_dict();
  w.item("trace_alloc_max_entries", s.max_entries);
  w.item("trace_alloc_overflowed", s.dropped > 0);
  w.end_dict();

  w.key("headroom");
  w.begin_dict();
  w.item("dropped_events", s.dropped);
  w.item("untracked_blocks", s.untracked);
  w.item("overlapping_blocks", s.overlapping);
  w.item("synthetic_allocs", s.synthetic);
  for (auto const& [k, v] : labels) w.item(k, v);
  w.end_dict();
  w.end_dict();
  return w.finish();
}

}  // namespace headroom::trace
