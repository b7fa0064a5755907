// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Runs every rank's action list against the others under *blocking* point-to-point: a send
// completes only together with the matching recv on the peer (a rendezvous, the strictest
// model; NCCL behaves so, buffered sends such as thread_group's only relax it). Computations
// take one tick; transfers take none. Used by validate() (deadlock and mismatch detection) and
// by timeline() (which computation each rank runs at each tick).
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/schedule.hpp"

namespace headroom::pipeline::detail {

struct simulation {
  bool completed = false;
  std::string problem;                    // why it stopped early (deadlock, mismatched transfer)
  std::vector<std::vector<int>> tick_of;  // [rank][action]: tick of a computation, −1 otherwise
  int ticks = 0;                          // ticks until the last computation finished
};

/// The recv that a send must meet on the peer (same micro-batch, neighbouring stage).
[[nodiscard]] inline bool matches(action const& send, int sender, action const& recv, int receiver) {
  if (recv.peer != sender || send.peer != receiver || send.microbatch != recv.microbatch) return false;
  if (send.kind == action_kind::send_forward) return recv.kind == action_kind::recv_forward && recv.stage == send.stage + 1;
  return recv.kind == action_kind::recv_backward && recv.stage == send.stage - 1;
}

[[nodiscard]] inline simulation simulate(schedule const& s) {
  auto const& lists = s.ranks();
  std::size_t const p = lists.size();
  simulation out;
  out.tick_of.resize(p);
  for (std::size_t r = 0; r < p; ++r) out.tick_of[r].assign(lists[r].size(), -1);
  std::vector<std::size_t> pos(p, 0);
  auto const at_end = [&](std::size_t r) { return pos[r] == lists[r].size(); };

  for (int tick = 0;; ++tick) {
    // Transfers: match sends with recvs until nothing moves (they take no time).
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t r = 0; r < p; ++r) {
        if (at_end(r) || !is_send(lists[r][pos[r]].kind)) continue;
        action const& snd = lists[r][pos[r]];
        auto const q = static_cast<std::size_t>(snd.peer);
        if (at_end(q)) continue;  // reported as a stall below
        action const& rcv = lists[q][pos[q]];
        if (!is_recv(rcv.kind) || rcv.peer != static_cast<int>(r)) continue;  // peer busy: wait
        if (!matches(snd, static_cast<int>(r), rcv, static_cast<int>(q))) {
          std::ostringstream os;
          os << "rank " << r << " action " << pos[r] << " (" << snd << ") meets rank " << q << " action " << pos[q]
             << " (" << rcv << "): transfers between two ranks are delivered in order, so the recv would get the "
             << "wrong tensor";
          out.problem = os.str();
          return out;
        }
        ++pos[r];
        ++pos[q];
        moved = true;
      }
    }
    // Computations: every rank whose next action is one runs it in this tick.
    bool computed = false;
    for (std::size_t r = 0; r < p; ++r) {
      if (at_end(r) || !is_compute(lists[r][pos[r]].kind)) continue;
      out.tick_of[r][pos[r]] = tick;
      ++pos[r];
      computed = true;
    }
    if (computed) {
      out.ticks = tick + 1;
      continue;
    }
    bool all_done = true;
    for (std::size_t r = 0; r < p; ++r) all_done = all_done && at_end(r);
    if (all_done) {
      out.completed = true;
      return out;
    }
    std::ostringstream os;
    os << "deadlock under blocking send/recv after " << tick << " ticks:";
    for (std::size_t r = 0; r < p; ++r) {
      os << " rank " << r;
      if (at_end(r)) os << " finished;";
      else os << " waits at action " << pos[r] << " (" << lists[r][pos[r]] << ");";
    }
    out.problem = os.str();
    return out;
  }
}

}  // namespace headroom::pipeline::detail
