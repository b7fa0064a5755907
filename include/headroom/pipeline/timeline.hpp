// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// timeline(schedule): the schedule as a small Gantt chart, one row per rank and one column per
// tick, every computation taking one tick and transfers none (the simulation validate() runs).
//
//   rank 0 | F0 F1 F2 F3 B0 F4 B1 ...
//   rank 1 | .  F0 F1 F2 B0 F3 B1 ...
//
// A cell is the computation's letter (F, B, I = input half of a split backward, W = weight
// half) and micro-batch, with ".c" for chunk c when ranks hold several chunks; "." is idle. An
// overlapped action is one tick, both halves in one cell: "F5.0+B1.1".
#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/pipeline/detail/simulate.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/validate.hpp"

namespace headroom::pipeline {

/// The ticks the schedule takes with unit-time computations (its length including bubbles).
[[nodiscard]] inline int ticks(schedule const& s) {
  validate(s);
  return detail::simulate(s).ticks;
}

/// The timeline as text, one line per rank (validates the schedule first).
[[nodiscard]] inline std::string timeline(schedule const& s) {
  validate(s);
  auto const sim = detail::simulate(s);
  auto const& shape = s.shape();
  std::vector<std::vector<std::string>> cells(s.ranks().size(), std::vector<std::string>(static_cast<std::size_t>(sim.ticks), "."));
  std::size_t width = 1;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    auto const& list = s.ranks()[r];
    for (std::size_t i = 0; i < list.size(); ++i) {
      int const t = sim.tick_of[r][i];
      if (t < 0) continue;
      auto const label_of = [&](action const& a) {
        std::string out = letter_of(a.kind) + std::to_string(a.microbatch);
        if (shape.chunks > 1) {
          out += '.';  // two appends: g++ 12 -O3 warns (-Wrestrict) on "." + std::string&&
          out += std::to_string(s.placement().chunk_of(a.stage));
        }
        return out;
      };
      std::string label;
      if (list[i].kind == action_kind::overlapped) {  // "F3.0+B1.1": both halves in one tick
        label = label_of(forward_part(list[i]));
        label += '+';
        label += label_of(backward_part(list[i]));
      } else {
        label = label_of(list[i]);
      }
      width = std::max(width, label.size());
      cells[r][static_cast<std::size_t>(t)] = std::move(label);
    }
  }
  std::ostringstream os;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    os << "rank " << r << " |";
    for (auto const& c : cells[r]) os << ' ' << c << std::string(width - c.size(), ' ');
    os << '\n';
  }
  return os.str();
}

}  // namespace headroom::pipeline
