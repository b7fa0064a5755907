// SPDX-License-Identifier: Apache-2.0
// demo_trace: a small host "training loop" recorded at step 1 only, written as a memory_viz
// snapshot (open it at https://pytorch.org/memory_viz) and as an SVG timeline.
// Per step: a pool arena (one segment) holds two layers' weights as leases; activations come
// from a recording adaptor; a communication buffer is released with record_stream semantics
// (free requested, completed two layers later).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/host.hpp"
#include "headroom/trace.hpp"
#include "sections.hpp"

namespace tr = headroom::trace;

void demo_trace(headroom::demo::printer& p) {
  p.section("trace: memory snapshots at chosen steps, in PyTorch's memory_viz format");
  namespace fs = std::filesystem;
  constexpr std::size_t mib = std::size_t{1} << 20;
  // Kept after the demo, so the printed path can be opened; each run writes the same names.
  auto const dir = fs::temp_directory_path() / "headroom_demo_trace";
  tr::profiler prof({.enabled = true, .steps = {1}, .output_dir = dir,
                     .coordinates = {{"dp", 0}, {"pp", 1}, {"tp", 0}, {"cp", 1}}});
  headroom::host::inline_stream const s;
  headroom::host::aligned_resource upstream;
  tr::recording_resource<headroom::host::aligned_resource, tr::recorder<>, tr::segment_events> arenas(
      upstream, prof.recorder(), tr::categories::pool);
  tr::recording_resource activations(upstream, prof.recorder(), tr::categories::activation);
  tr::recording_resource comm(upstream, prof.recorder(), tr::categories::communication);
  auto& rec = prof.recorder();

  void* arena = arenas.allocate(s, 8 * mib);  // before step 0: live at the start of step 1
  auto* weights = static_cast<std::byte*>(arena);
  std::optional<tr::step_snapshot> written;
  for (std::int64_t step = 0; step < 3; ++step) {
    prof.begin_step(step);
    std::vector<void*> acts;
    std::vector<void*> pending;  // comm buffers freed by the owner, not yet reusable
    for (int layer = 0; layer < 4; ++layer) {
      auto* w = weights + (layer % 2) * 4 * mib;  // double-buffered weight slots
      rec.alloc(w, 4 * mib, 0, tr::categories::pool);
      acts.push_back(activations.allocate(s, 2 * mib));
      void* grad = comm.allocate(s, 1 * mib);
      rec.free_requested(grad, 1 * mib, 0);  // the all-reduce still reads it
      pending.push_back(grad);
      if (pending.size() > 2) {  // the host sees the event two layers later
        comm.deallocate(s, pending.front(), 1 * mib);
        pending.erase(pending.begin());
      }
      rec.free_completed(w, 4 * mib, 0);
    }
    for (void* g : pending) comm.deallocate(s, g, 1 * mib);
    for (void* a : acts) activations.deallocate(s, a, 2 * mib);
    if (auto out = prof.end_step(step)) written = out;
  }
  arenas.deallocate(s, arena, 8 * mib);

  p.check(written.has_value(), "step 1 (and only it) was profiled");
  if (!written) return;
  p.line("wrote ", written->pickle.string(), " and ", written->svg.filename().string(),
         " (open the .pickle at https://pytorch.org/memory_viz; they are kept)");
  p.line(written->events, " events, ", written->dropped, " dropped; at the end of step 1: ",
         headroom::format_bytes(written->active_bytes), " active in ", headroom::format_bytes(written->reserved_bytes),
         " of segments");
  p.check(fs::exists(written->pickle) && fs::exists(written->svg), "snapshot and SVG exist");
  p.check(written->pickle.filename() == "step_1.dp0.pp1.tp0.cp1.pickle", "file name carries step and coordinates");
  // Only the arena is live at the end of the step (activations and comm buffers were freed).
  p.check(written->reserved_bytes == 8 * mib && written->active_bytes == 0, "arena reserved, nothing active");
  // 4 layers x (weight alloc + free_requested + free_completed, activation alloc + its segment,
  // grad alloc + segment + free_requested) + 4 grad frees (+ segment_free; deferred: no second
  // free_requested) + 4 activation frees (free_requested + free_completed + segment_free)
  // + 1: the arena, allocated before the step, gets a synthetic segment_alloc (category pool).
  p.check(written->events == 1 + 4 * (3 + 2 + 3) + 4 * 2 + 4 * 3,
          "every event recorded; ordinary frees paired, segments added for lone blocks");
}
