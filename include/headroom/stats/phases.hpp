// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Peaks per phase of a training step (forward, backward, optimizer, or any name): each phase
// starts by resetting the source's peak counters and ends by recording the peaks reached during
// it, under "<phase>/<key>". One step's phases form one report, which a reducer's gather carries
// across any group in one collective per logging step (every phase's world peak, and the rank
// holding it: rank_table's argmax).
//
//   stats::phase_peaks peaks;
//   { stats::phase_scope p(peaks, resource, "forward");  ... }   // resource.reset_peaks() here
//   { stats::phase_scope p(peaks, resource, "backward"); ... }   // records "backward/<k>.peak"
//   auto table = reducer.gather(peaks.report(), pp_comm);        // one collective
//   peaks.clear();                                                // next logging step
//
// A phase that runs several times before the report is read (one forward per micro-batch)
// keeps the highest of its peaks. Phases do not nest: resetting the peak counters inside a
// phase would hide the enclosing phase's peak, so opening a phase while another is open throws
// logic_error naming both.
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "headroom/core/error.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/report.hpp"

namespace headroom::stats {

/// A source of peak counters: reset_peaks() starts a window (peak := current), report() gives a
/// typed or dynamic report whose keys ending in ".peak" hold the window's peaks
/// (statistics_resource is one).
template <class S>
concept peak_source = requires(S& s) {
  s.reset_peaks();
  s.report();
};

class phase_peaks {
 public:
  /// Marks `phase` open; throws logic_error when another phase is open or the name is empty.
  void open(std::string_view phase) {
    expects(!phase.empty(), "stats::phase_peaks::open: empty phase name");
    expects<logic_error>(open_.empty(), "stats::phase_peaks::open(\"", phase, "\"): phase \"", open_,
                         "\" is still open; phases do not nest (a phase resets the peak counters, which would "
                         "hide the enclosing phase's peak)");
    open_ = std::string(phase);
  }
  /// Closes the open phase and records the peaks of `report` (the keys ending in ".peak") as
  /// "<phase>/<key>", keeping the higher value when the phase was recorded before.
  template <class R>
  void close(R const& report) {
    expects<logic_error>(!open_.empty(), "stats::phase_peaks::close: no phase is open");
    std::string const phase = std::exchange(open_, std::string());
    auto put = [&](std::string_view key, stats::value v) {
      if (key.size() < 5 || key.substr(key.size() - 5) != ".peak") return;
      std::string const name = phase + "/" + std::string(key);
      auto const old = recorded_.find(name);
      bool const higher = !old || old->index() != v.index() ||
                          (v.index() == 0 ? std::get<0>(v) > std::get<0>(*old) : std::get<1>(v) > std::get<1>(*old));
      if (higher) recorded_.set(name, v);
    };
    if constexpr (requires { report.for_each([](std::string_view, auto) {}); })
      report.for_each([&](std::string_view key, auto v) { put(key, stats::value(v)); });
    else
      for (auto const e : report) put(e.name, e.value);
  }
  /// Records a phase's peaks in one call (a phase measured elsewhere).
  template <class R>
  void record(std::string_view phase, R const& report) {
    open(phase);
    close(report);
  }

  /// The open phase's name, empty when none is.
  [[nodiscard]] std::string_view open_phase() const noexcept { return open_; }
  /// Every recorded phase's peaks, "<phase>/<key>", in the order first recorded.
  [[nodiscard]] dynamic_report const& report() const noexcept { return recorded_; }
  /// Forgets the recorded peaks (after a logging step); the keys come back as phases record.
  void clear() noexcept { recorded_ = dynamic_report(); }

 private:
  std::string open_;
  dynamic_report recorded_;
};

/// RAII phase: resets the source's peaks on construction, records them on destruction (or at
/// close()). A phase left by an exception is recorded too: its peak is what it reached.
template <peak_source S>
class phase_scope {
 public:
  phase_scope(phase_peaks& peaks, S& source, std::string_view phase) : peaks_(&peaks), source_(&source) {
    peaks_->open(phase);
    source_->reset_peaks();
  }
  phase_scope(phase_scope const&) = delete;
  phase_scope& operator=(phase_scope const&) = delete;
  ~phase_scope() {
    if (peaks_ == nullptr) return;
    try {
      close();
    } catch (...) {
      // A destructor must not throw; the phase is left unrecorded (its report() failed).
    }
  }
  /// Records now; the destructor then does nothing.
  void close() {
    expects<logic_error>(peaks_ != nullptr, "stats::phase_scope::close: phase already closed");
    auto* p = std::exchange(peaks_, nullptr);
    p->close(source_->report());
  }

 private:
  phase_peaks* peaks_;
  S* source_;
};

}  // namespace headroom::stats
