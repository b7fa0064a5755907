// SPDX-License-Identifier: Apache-2.0
// Fuzz target: pipeline schedule generators and the schedule validator.
//
//   - a shape with a non-positive p, m or v, or a negative group, is an invalid_argument;
//   - every schedule a generator makes passes validate(), and an independent count agrees:
//     each (micro-batch, virtual stage) runs forward once and backward once (or backward_input
//     and backward_weight once each; an overlapped action counts as a forward and a backward),
//     on the rank that owns the stage under the schedule's placement (the V for zbv, dualpipe_v);
//   - a mutated schedule (an action dropped, two swapped, a micro-batch or peer changed) or a
//     schedule of arbitrary actions: validate() throws invalid_argument exactly when
//     find_problem() reports something, and dropping a computation is always reported.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../common/error_of.hpp"
#include "fuzz_input.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pipeline.hpp"

namespace {

namespace pp = headroom::pipeline;
using headroom_test::throws;

pp::pipeline_shape draw_shape(fuzz::input& in) {
  pp::pipeline_shape s;
  bool const wild = in.in<int>(0, 15) == 0;
  s.stages = wild ? in.take<int>() : in.in<int>(1, 6);
  s.microbatches = wild ? in.take<int>() : in.in<int>(1, 12);
  s.chunks = wild ? in.take<int>() : in.in<int>(1, 3);
  s.group = wild ? in.take<int>() : in.in<int>(0, 4);
  return s;
}

template <class G>
std::optional<pp::schedule> generate(pp::pipeline_shape const& shape) {
  try {
    return pp::make_schedule<G>(shape);
  } catch (headroom::error const&) {
    return std::nullopt;
  }
}

// Forward / backward counts per (micro-batch, virtual stage), from the actions alone.
void count_compute(pp::schedule const& s) {
  auto const& shape = s.shape();
  std::map<std::pair<int, int>, std::array<int, 4>> seen;  // F, B, I, W
  auto const count = [&](pp::action const& a, int r) {
    FUZZ_CHECK(s.placement().rank_of(a.stage) == r && a.microbatch >= 0 && a.microbatch < shape.microbatches);
    ++seen[{a.microbatch, a.stage}][static_cast<std::size_t>(a.kind)];
  };
  for (int r = 0; r < shape.stages; ++r)
    for (auto const& a : s.actions(r)) {
      if (!pp::is_compute(a.kind)) continue;
      if (a.kind == pp::action_kind::overlapped) {
        count(pp::forward_part(a), r);
        count(pp::backward_part(a), r);
      } else {
        count(a, r);
      }
    }
  FUZZ_CHECK(seen.size() == static_cast<std::size_t>(shape.microbatches) * static_cast<std::size_t>(shape.virtual_stages()));
  for (auto const& [key, c] : seen) {
    FUZZ_CHECK(c[0] == 1);
    FUZZ_CHECK((c[1] == 1 && c[2] == 0 && c[3] == 0) || (c[1] == 0 && c[2] == 1 && c[3] == 1));
  }
}

// validate() and find_problem() agree.
void check_verdicts(pp::schedule const& s) {
  std::string const problem = pp::find_problem(s);
  std::string const thrown = headroom_test::error_of<headroom::invalid_argument>([&] { pp::validate(s); });
  FUZZ_CHECK(problem.empty() == (thrown == "<no exception>"));
}

pp::action draw_action(fuzz::input& in, pp::pipeline_shape const& shape) {
  pp::action a;
  a.kind = static_cast<pp::action_kind>(in.in<int>(0, 8));
  a.microbatch = in.in<int>(-1, shape.microbatches);
  a.stage = in.in<int>(-1, shape.virtual_stages());
  a.peer = pp::is_compute(a.kind) ? -1 : in.in<int>(-1, shape.stages);
  if (a.kind == pp::action_kind::overlapped || in.in<int>(0, 15) == 0) {  // now and then on another kind too
    a.backward_microbatch = in.in<int>(-1, shape.microbatches);
    a.backward_stage = in.in<int>(-1, shape.virtual_stages());
  }
  return a;
}

void mutate_and_check(pp::schedule const& s, fuzz::input& in) {
  auto ranks = s.ranks();
  int const r = in.in<int>(0, static_cast<int>(ranks.size()) - 1);
  auto& list = ranks[static_cast<std::size_t>(r)];
  if (list.empty()) return;
  std::size_t const i = in.in<std::size_t>(0, list.size() - 1);
  bool dropped_compute = false;
  switch (in.in<int>(0, 4)) {
    case 0:
      dropped_compute = pp::is_compute(list[i].kind);
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1: std::swap(list[i], list[in.in<std::size_t>(0, list.size() - 1)]); break;
    case 2: list[i].microbatch = in.in<int>(-1, s.shape().microbatches); break;
    case 3: list[i].peer = in.in<int>(-2, s.shape().stages); break;
    default: list.insert(list.begin() + static_cast<std::ptrdiff_t>(i), draw_action(in, s.shape())); break;
  }
  pp::schedule const m(s.name() + "-mutated", s.shape(), s.placement(), std::move(ranks));
  check_verdicts(m);
  if (dropped_compute) FUZZ_CHECK(!pp::find_problem(m).empty());
}

template <class G>
void run(pp::pipeline_shape const& shape, fuzz::input& in) {
  auto const s = generate<G>(shape);
  if (!s) return;
  FUZZ_CHECK(pp::find_problem(*s).empty());
  pp::validate(*s);  // throws (a finding) if the generator made an invalid schedule
  count_compute(*s);
  for (int k = in.in<int>(0, 3); k > 0; --k) mutate_and_check(*s, in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  fuzz::input in(data, size);
  auto const shape = draw_shape(in);
  bool const bad = shape.stages < 1 || shape.microbatches < 1 || shape.chunks < 1 || shape.group < 0;
  if (bad) {
    FUZZ_CHECK(throws([&] { (void)pp::make_schedule<pp::gpipe>(shape); }));
    FUZZ_CHECK(throws([&] { (void)pp::make_schedule<pp::interleaved_1f1b>(shape); }));
    return 0;
  }
  // Keep the schedules small (the wild shapes may ask for millions of actions).
  if (shape.stages > 64 || shape.chunks > 16 || shape.microbatches > 256 ||
      static_cast<std::int64_t>(shape.stages) * shape.chunks * shape.microbatches > 4096)
    return 0;
  switch (in.in<int>(0, 6)) {
    case 0: run<pp::gpipe>(shape, in); break;
    case 1: run<pp::one_f_one_b>(shape, in); break;
    case 2: run<pp::interleaved_1f1b>(shape, in); break;
    case 3: run<pp::zb_h1>(shape, in); break;
    case 4: run<pp::zbv>(shape, in); break;
    case 5: run<pp::dualpipe_v>(shape, in); break;
    default: {  // arbitrary actions, placed interleaved or as the V
      std::vector<std::vector<pp::action>> ranks(static_cast<std::size_t>(shape.stages));
      for (auto& list : ranks)
        for (int k = in.in<int>(0, 12); k > 0; --k) list.push_back(draw_action(in, shape));
      auto const where = in.in<int>(0, 1) == 0 ? pp::placement::interleaved(shape) : pp::placement::v_shape(shape);
      check_verdicts(pp::schedule("arbitrary", shape, where, std::move(ranks)));
      break;
    }
  }
  return 0;
}
