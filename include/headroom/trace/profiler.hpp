// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// profiler: step-gated snapshots, configured like AReaL's memory profiling (`steps`, default
// {0, 1}; `max_entries`, default 100 000; off unless enabled). Every rank writes its own file,
// named by the step and the rank's parallel coordinates:
//
//   trace::profiler prof({.enabled = true, .steps = {3}, .output_dir = "snapshots",
//                         .coordinates = {{"dp", 0}, {"pp", 1}, {"tp", 0}, {"cp", 1}}});
//   trace::recording_resource mr(upstream, prof.recorder(), trace::categories::activation);
//   for (std::int64_t step = 0; ...; ++step) {
//     prof.begin_step(step);
//     ...                                     // allocations through mr, hooks on prof.recorder()
//     prof.end_step(step);                    // step 3: snapshots/step_3.dp0.pp1.tp0.cp1.pickle (+ .svg)
//   }
//
// A step number that comes round again (a loop that restarts its counter) is written as
// step_3-2.<coords>.pickle, step_3-3..., never over the earlier file.
//
// The recorder tracks live blocks in every step, so the snapshot of a profiled step shows the
// blocks that were live when it began.
#include <algorithm>
#include <map>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/trace/file.hpp"
#include "headroom/trace/memory_viz.hpp"
#include "headroom/trace/policy.hpp"
#include "headroom/trace/recorder.hpp"
#include "headroom/trace/snapshot.hpp"
#include "headroom/trace/svg.hpp"
#include "headroom/trace/take_snapshot.hpp"
#include "headroom/trace/timeline.hpp"

namespace headroom::trace {

/// One axis of the rank's place in the parallel layout, e.g. {"dp", 0}.
struct coordinate {
  std::string axis;
  int index = 0;
};

struct profiler_config {
  bool enabled = false;                       ///< off unless configured
  std::vector<std::int64_t> steps = {0, 1};   ///< steps to snapshot (>= 0)
  std::size_t max_entries = 100'000;          ///< events kept per step (the newest win)
  std::size_t max_live = 1u << 15;            ///< blocks + segments tracked at once
  std::filesystem::path output_dir = "memory_snapshots";
  std::vector<coordinate> coordinates = {{"dp", 0}, {"pp", 0}, {"tp", 0}, {"cp", 0}};
  int device = 0;
  bool timestamps = true;                     ///< see recorder_options::timestamps
  bool write_svg = true;                      ///< also step_<n>.<coords>.svg
};

/// What end_step wrote.
struct step_snapshot {
  std::int64_t step = 0;
  int occurrence = 1;               ///< 2, 3... when this step number was profiled before
  std::filesystem::path pickle;
  std::filesystem::path svg;        ///< empty unless write_svg
  std::size_t events = 0;           ///< events in the trace (segment events added included)
  std::uint64_t dropped = 0;        ///< older events lost to the ring; raise max_entries to keep them
  std::uint64_t untracked = 0;      ///< blocks left out because the live table was full; raise max_live
  std::uint64_t peak_active_bytes = 0;  ///< most bytes held by live blocks during the step
  std::uint64_t active_bytes = 0;   ///< held by live blocks at the end of the step
  std::uint64_t reserved_bytes = 0; ///< in live segments at the end of the step
};

template <class Policy = single_thread>
  requires recording_policy<Policy> && Policy::records
class profiler {
 public:
  /// Validates the configuration (an enabled profiler needs steps >= 0, max_entries > 0 and a
  /// writable output directory, which it creates) and allocates the ring.
  explicit profiler(profiler_config config)
      : config_(checked(std::move(config))),
        recorder_({.max_entries = config_.enabled ? config_.max_entries : 1,
                   .max_live = config_.enabled ? config_.max_live : 1,
                   .device = config_.device,
                   .timestamps = config_.timestamps}) {}

  [[nodiscard]] trace::recorder<Policy>& recorder() noexcept { return recorder_; }
  [[nodiscard]] profiler_config const& config() const noexcept { return config_; }
  [[nodiscard]] bool enabled() const noexcept { return config_.enabled; }
  /// True between begin_step and end_step of a configured step.
  [[nodiscard]] bool profiling() const noexcept { return profiling_; }

  [[nodiscard]] bool profiles(std::int64_t step) const {
    return config_.enabled && std::ranges::find(config_.steps, step) != config_.steps.end();
  }

  void begin_step(std::int64_t step) {
    expects(step >= 0, "trace::profiler::begin_step: step ", step, " is negative; expected a step >= 0");
    expects<logic_error>(!open_, "trace::profiler::begin_step(", step, "): step ", open_.value_or(0),
                         " is still open; call end_step(", open_.value_or(0), ") first");
    open_ = step;
    if (profiles(step)) {
      recorder_.clear_events();
      recorder_.start();
      profiling_ = true;
    }
  }

  /// Ends `step`; for a configured step, writes its snapshot and returns what was written.
  std::optional<step_snapshot> end_step(std::int64_t step) {
    expects<logic_error>(open_.has_value(), "trace::profiler::end_step(", step,
                         "): no step was begun; call begin_step(", step, ") first");
    expects<logic_error>(*open_ == step, "trace::profiler::end_step(", step, "): the open step is ", *open_,
                         "; expected end_step(", *open_, ")");
    open_.reset();
    if (!profiling_) return std::nullopt;
    recorder_.stop();
    profiling_ = false;
    return write(step);
  }

  /// The pickle's path for `step`: <output_dir>/step_<n>.<axis><index>....pickle; for the k-th
  /// time the same step number is profiled (k >= 2), step_<n>-<k>.<axis><index>....pickle.
  [[nodiscard]] std::filesystem::path snapshot_path(std::int64_t step, char const* extension = ".pickle",
                                                    int occurrence = 1) const {
    std::string name = "step_" + std::to_string(step);
    if (occurrence > 1) name += "-" + std::to_string(occurrence);
    for (auto const& c : config_.coordinates) name += "." + c.axis + std::to_string(c.index);
    return config_.output_dir / (name + extension);
  }
  /// "dp0 pp1 tp0 cp1": the rank's coordinates, as in SVG titles.
  [[nodiscard]] std::string coordinates_text() const {
    std::string text;
    for (auto const& c : config_.coordinates) text += (text.empty() ? "" : " ") + c.axis + std::to_string(c.index);
    return text;
  }

 private:
  static profiler_config checked(profiler_config c) {
    if (!c.enabled) return c;
    expects(!c.steps.empty(), "trace::profiler: steps is empty; expected at least one step to profile (default {0, 1})");
    for (auto s : c.steps) expects(s >= 0, "trace::profiler: step ", s, " is negative; expected steps >= 0");
    expects(c.max_entries > 0, "trace::profiler: max_entries is 0; expected at least 1 (default 100000)");
    expects(c.max_live > 0, "trace::profiler: max_live is 0; expected at least 1");
    for (auto const& k : c.coordinates) {
      expects(!k.axis.empty() && k.axis.find_first_of("./\\ ") == std::string::npos, "trace::profiler: axis name '",
              k.axis, "' must be non-empty without '.', '/', '\\' or spaces (it is part of a file name)");
      expects(k.index >= 0, "trace::profiler: coordinate ", k.axis, "=", k.index, " is negative; expected >= 0");
    }
    require_writable_directory(c.output_dir);
    return c;
  }

  step_snapshot write(std::int64_t step) {
    snapshot const s = take_snapshot(recorder_);
    int const occurrence = written_[step] + 1;
    snapshot_labels labels{{"step", std::to_string(step)}, {"occurrence", std::to_string(occurrence)}};
    for (auto const& c : config_.coordinates) labels.emplace_back(c.axis, std::to_string(c.index));
    step_snapshot out;
    out.step = step;
    out.occurrence = occurrence;
    out.pickle = snapshot_path(step, ".pickle", occurrence);
    out.events = s.trace.size();
    out.dropped = s.dropped;
    out.untracked = s.untracked;
    out.peak_active_bytes = make_active_timeline(s).peak;
    out.active_bytes = s.active_bytes();
    out.reserved_bytes = s.reserved_bytes();
    write_file_atomically(out.pickle, to_memory_viz(s, labels));
    ++written_[step];  // a failed write leaves the name free
    if (config_.write_svg) {
      out.svg = snapshot_path(step, ".svg", occurrence);
      std::string title = "Active Memory Timeline, step " + std::to_string(step);
      if (occurrence > 1) title += " (" + std::to_string(occurrence) + ")";
      if (!config_.coordinates.empty()) title += ", " + coordinates_text();
      write_file_atomically(out.svg, to_svg(s, title));
    }
    return out;
  }

  profiler_config config_;
  trace::recorder<Policy> recorder_;
  std::optional<std::int64_t> open_;
  bool profiling_ = false;
  std::map<std::int64_t, int> written_;  // files written per step number
};

}  // namespace headroom::trace
