// SPDX-License-Identifier: Apache-2.0
#pragma once
// The discrete-event model of bench/pipeline_overlap.cpp, shared with bench/pipeline_overlap_nccl.cu:
// per-action costs in time units, the step time of a schedule's action lists with its transfers
// run one of three ways (simulate), and the dataflow ideal of the same compute orders (ideal).
// Any placement (interleaved, V-shape): a stage's rank and the local hand-offs (two consecutive
// stages of one rank, no transfer) come from the schedule's placement.
#include <algorithm>
#include <cstddef>
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "headroom/pipeline.hpp"

namespace pipeline_overlap {

namespace hp = headroom::pipeline;

struct costs {
  double forward = 1, backward = 2, input = 1, weight = 1;
  double stage0 = 1;  // rank 0's factor, all its chunks (a slower first stage: embeddings, data loading)
  double latency = 0;
  [[nodiscard]] double of(hp::action const& a, hp::placement const& where) const {
    double const base = a.kind == hp::action_kind::forward    ? forward
                        : a.kind == hp::action_kind::backward ? backward
                        : a.kind == hp::action_kind::backward_input ? input
                                                                    : weight;
    return where.rank_of(a.stage) == 0 ? base * stage0 : base;
  }
};

enum class mode { rendezvous_in_order, buffered_in_order, deferred };

// Key of one transfer: direction, micro-batch, receiving virtual stage.
using key = std::tuple<bool, int, int>;
inline key key_of(hp::action const& a) {
  switch (a.kind) {
    case hp::action_kind::send_forward: return {true, a.microbatch, a.stage + 1};
    case hp::action_kind::recv_forward: return {true, a.microbatch, a.stage};
    case hp::action_kind::send_backward: return {false, a.microbatch, a.stage - 1};
    default: return {false, a.microbatch, a.stage};
  }
}

// Step time of the action lists under `m`.
inline double simulate(hp::schedule const& s, costs const& c, mode m) {
  auto const& shape = s.shape();
  auto const& where = s.placement();
  auto const& lists = s.ranks();
  std::size_t const p = lists.size();
  std::vector<std::size_t> pos(p, 0);
  std::vector<double> t(p, 0);
  std::map<key, double> send_post, recv_post;
  std::vector<char> posted(p, 0);  // the current action's post time is recorded
  double end = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t r = 0; r < p; ++r) {
      while (pos[r] < lists[r].size()) {
        hp::action const& a = lists[r][pos[r]];
        if (hp::is_compute(a.kind)) {
          double ready = t[r];
          // an input from another rank (a local hand-off is ready: its producer ran before, here)
          bool const needs_input = a.kind == hp::action_kind::forward ? a.stage > 0 && !where.same_rank(a.stage - 1, a.stage)
                                   : a.kind == hp::action_kind::backward_weight
                                       ? false
                                       : !shape.is_last(a.stage) && !where.same_rank(a.stage + 1, a.stage);
          if (m == mode::deferred && needs_input) {
            key const k{a.kind == hp::action_kind::forward, a.microbatch, a.stage};
            auto const it = send_post.find(k);
            if (it == send_post.end()) break;  // its input has not left the producer yet
            ready = std::max(ready, it->second + c.latency);
          }
          t[r] = ready + c.of(a, where);
        } else if (hp::is_send(a.kind)) {
          key const k = key_of(a);
          if (!posted[r]) send_post[k] = t[r], posted[r] = 1;
          if (m == mode::rendezvous_in_order) {
            auto const it = recv_post.find(k);
            if (it == recv_post.end()) break;
            t[r] = std::max(t[r], it->second) + c.latency;
          }
        } else {
          key const k = key_of(a);
          if (!posted[r]) recv_post[k] = t[r], posted[r] = 1;
          if (m != mode::deferred) {
            auto const it = send_post.find(k);
            if (it == send_post.end()) break;
            t[r] = m == mode::rendezvous_in_order ? std::max(t[r], it->second) + c.latency
                                                  : std::max(t[r], it->second + c.latency);
          }
        }
        posted[r] = 0;
        ++pos[r];
        moved = true;
        end = std::max(end, t[r]);
      }
    }
  }
  for (std::size_t r = 0; r < p; ++r)
    if (pos[r] != lists[r].size()) throw std::logic_error("simulate: the lists did not finish");
  return end;
}

// The dataflow ideal of the same compute orders: each computation starts when its rank is free
// and its input (the producer's end + latency) is there.
inline double ideal(hp::schedule const& s, costs const& c) {
  auto const& shape = s.shape();
  auto const& where = s.placement();
  std::size_t const p = s.ranks().size();
  std::vector<std::vector<hp::action>> order(p);
  for (std::size_t r = 0; r < p; ++r)
    for (auto const& a : s.ranks()[r])
      if (hp::is_compute(a.kind)) order[r].push_back(a);
  std::map<key, double> produced;  // (forward?, micro-batch, stage) -> end of its F, or of its B / I
  std::vector<std::size_t> pos(p, 0);
  std::vector<double> t(p, 0);
  double end = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t r = 0; r < p; ++r)
      while (pos[r] < order[r].size()) {
        hp::action const& a = order[r][pos[r]];
        double ready = t[r];
        if (a.kind == hp::action_kind::forward && a.stage > 0) {
          auto const it = produced.find({true, a.microbatch, a.stage - 1});
          if (it == produced.end()) break;
          ready = std::max(ready, it->second + c.latency);
        } else if ((a.kind == hp::action_kind::backward || a.kind == hp::action_kind::backward_input) && !shape.is_last(a.stage)) {
          auto const it = produced.find({false, a.microbatch, a.stage + 1});
          if (it == produced.end()) break;
          ready = std::max(ready, it->second + c.latency);
        }
        t[r] = ready + c.of(a, where);
        if (a.kind != hp::action_kind::backward_weight) produced[{a.kind == hp::action_kind::forward, a.microbatch, a.stage}] = t[r];
        ++pos[r];
        moved = true;
        end = std::max(end, t[r]);
      }
  }
  return end;
}

}  // namespace pipeline_overlap
