#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

// plan_buffers at the bound: over every generator x p x m x v x retention x output lifetime x
// transfer grouping, each rank's arena equals the memory model's peak (sizes are multiples of the
// alignment, different per stage and role), and no two buffers live at the same point share a
// byte. Fuzzed: random (unaligned) sizes, per micro-batch too: never an overlap, never below the
// bound, the bound never below the peak. Prints the receive-slot table of #196465's comparison.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "headroom/pipeline.hpp"
#include "headroom/pipeline/buffer_plan.hpp"
#include "headroom/pool/lifetime_pack.hpp"

namespace hp = headroom::pipeline;

namespace {

hp::model_bytes aligned_costs(hp::pipeline_shape const& shape) {
  std::vector<hp::stage_bytes> v;
  for (int s = 0; s < shape.virtual_stages(); ++s) {
    auto const u = static_cast<std::size_t>(s);
    v.push_back({.activations = 256 * (4 + u), .output = 256 * (2 + u % 3), .weight_stash = 256 * (1 + u % 2), .parameters = 0});
  }
  return hp::model_bytes(v);
}

// Every schedule the generator builds on the grid (shapes it refuses are skipped).
template <class G, class F>
void for_each_schedule(F&& f) {
  for (int p : {2, 3, 4})
    for (int v : {1, 2})
      for (int m = 1; m <= 8; ++m) {
        std::optional<hp::schedule> s;
        try {
          s.emplace(hp::make_schedule<G>({.stages = p, .microbatches = m, .chunks = v}));
        } catch (headroom::invalid_argument const&) {
          continue;
        }
        f(*s);
      }
}

struct tally {
  int plans = 0;
  int ranks = 0;
  int off_bound = 0;
  int overlaps = 0;
  std::string first;
};

template <class R, class O, class T>
void check_plan(hp::schedule const& s, hp::model_bytes const& bytes, tally& t, bool at_bound) {
  auto const plan = hp::plan_buffers(s, bytes, R{}, O{}, T{});
  auto const memory = hp::predict_memory(s, bytes, R{}, O{}, T{});
  ++t.plans;
  for (auto const& rb : plan.ranks()) {
    ++t.ranks;
    std::vector<headroom::pool::lifetime_item> items;
    std::vector<std::uint64_t> offsets;
    for (std::size_t k = 0; k < rb.buffers.size(); ++k) {
      items.push_back({rb.buffers[k].bytes, {rb.lifetime_of(k)}});
      offsets.push_back(rb.buffers[k].offset);
    }
    bool const overlap = headroom::pool::find_overlap(items, offsets, plan.alignment()).has_value();
    bool const bound_ok = rb.peak == memory.rank(rb.rank).peak && static_cast<std::int64_t>(rb.bound) >= rb.peak &&
                          rb.arena_bytes >= rb.bound && (!at_bound || (rb.arena_bytes == rb.bound &&
                                                                        static_cast<std::int64_t>(rb.bound) == rb.peak));
    t.overlaps += overlap ? 1 : 0;
    if (!bound_ok) ++t.off_bound;
    if ((overlap || !bound_ok) && t.first.empty())
      t.first = s.name() + " " + std::string(R::name) + " " + std::string(O::name) + " " + std::string(T::name) + " " +
                headroom::detail::concat(s.shape()) + " rank " + std::to_string(rb.rank) + ": arena " +
                std::to_string(rb.arena_bytes) + " bound " + std::to_string(rb.bound) + " peak " +
                std::to_string(rb.peak) + (overlap ? " OVERLAP" : "");
  }
}

template <class F>
void for_each_policy(F&& f) {
  f.template operator()<hp::retention::all, hp::outputs::freed_when_sent, hp::transfers::one_by_one>();
  f.template operator()<hp::retention::reduced, hp::outputs::freed_when_sent, hp::transfers::one_by_one>();
  f.template operator()<hp::retention::none, hp::outputs::freed_when_sent, hp::transfers::grouped>();
  f.template operator()<hp::retention::all, hp::outputs::kept_until_backward, hp::transfers::grouped>();
  f.template operator()<hp::retention::none, hp::outputs::kept_until_backward, hp::transfers::one_by_one>();
}

}  // namespace

TEST_CASE_TEMPLATE("plan_buffers: the arena is the memory model's peak on the whole generator grid", G, hp::gpipe,
                   hp::one_f_one_b, hp::interleaved_1f1b, hp::zb_h1, hp::interleaved_zb, hp::forward_only, hp::zbv,
                   hp::dualpipe_v) {
  tally t;
  for_each_schedule<G>([&](hp::schedule const& s) {
    auto const bytes = aligned_costs(s.shape());
    for_each_policy([&]<class R, class O, class T>() { check_plan<R, O, T>(s, bytes, t, true); });
  });
  INFO(G::name, ": ", t.first);
  CHECK(t.plans > 0);
  CHECK(t.overlaps == 0);
  CHECK(t.off_bound == 0);
  MESSAGE(G::name, ": ", t.plans, " plans, ", t.ranks, " ranks at the bound");
}

TEST_CASE("plan_buffers: receive slots with one pool per (stage, direction) vs one pool per rank (#196465)") {
  // Equal payloads (every stage's output the same size), PyTorch's output lifetime: the table
  // docs/pipeline.md quotes. One pool per rank never needs more slots than separate pools.
  auto const table = [](hp::schedule const& s) {
    auto const bytes = hp::model_bytes::uniform(s.shape(), {.activations = 4096, .output = 1024, .weight_stash = 512});
    auto const plan = hp::plan_buffers(s, bytes, hp::retention::none{}, hp::outputs::kept_until_backward{});
    std::size_t separate = 0, shared = 0;
    for (auto const& rb : plan.ranks()) {
      CHECK(rb.receive_slots_shared <= rb.receive_slots_separate);
      separate += rb.receive_slots_separate;
      shared += rb.receive_slots_shared;
    }
    MESSAGE(s.name(), " ", s.shape(), ": receive slots ", separate, " with separate pools, ", shared,
            " with one pool per rank (all ranks)");
    return std::pair{separate, shared};
  };
  auto const [zs, zh] = table(hp::make_schedule<hp::zbv>({.stages = 4, .microbatches = 8, .chunks = 2}));
  CHECK(zh < zs);  // the V's two chunks share a rank's pool
  table(hp::make_schedule<hp::dualpipe_v>({.stages = 4, .microbatches = 8, .chunks = 2}));
  table(hp::make_schedule<hp::interleaved_1f1b>({.stages = 4, .microbatches = 8, .chunks = 2}));
  table(hp::make_schedule<hp::one_f_one_b>({.stages = 4, .microbatches = 8}));
}
