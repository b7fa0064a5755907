// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Ranks that disagree, and ranks that fail: every rank gets an error, none hangs. The ranks are
// the caller's own threads over a thread_group (not host::launch, which would abort the group
// for them): each one catches what its executor throws.
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;
using hp::action;
using hp::action_kind;

namespace {

// What each rank ended with: "ok", or the exception's kind and text.
template <class Fn>
std::vector<std::string> on_threads(int p, Fn fn) {
  headroom::host::thread_group group(p);
  std::vector<std::string> outcome(static_cast<std::size_t>(p));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < p; ++r)
      threads.emplace_back([&, r] {
        auto comm = group.communicator(r);
        std::string& out = outcome[static_cast<std::size_t>(r)];
        try {
          fn(comm);
          out = "ok";
        } catch (headroom::collective_mismatch const& e) {
          out = std::string("collective_mismatch: ") + e.what();
        } catch (headroom::group_aborted const& e) {
          out = std::string("group_aborted: ") + e.what();
        } catch (headroom::invalid_argument const& e) {
          out = std::string("invalid_argument: ") + e.what();
        } catch (std::exception const& e) {
          out = std::string("other: ") + e.what();
        }
      });
  }
  return outcome;
}

bool starts(std::string const& s, std::string const& prefix) { return s.rfind(prefix, 0) == 0; }
bool has(std::string const& s, std::string const& part) { return s.find(part) != std::string::npos; }

struct plain_stage {
  int fail_rank = -1, fail_microbatch = -1, rank = 0;
  bool fail_in_weight = false;
  void forward(hp::forward_args<inline_stream> const& a) {
    if (!fail_in_weight && rank == fail_rank && a.microbatch == fail_microbatch) throw std::runtime_error("boom in forward");
  }
  double loss(hp::loss_args<inline_stream> const&) { return 1.0; }
  void backward(hp::backward_args<inline_stream> const&) {}
  void backward_input(hp::backward_args<inline_stream> const&) {}
  void backward_weight(hp::weight_args<inline_stream> const& a) {
    if (fail_in_weight && rank == fail_rank && a.microbatch == fail_microbatch) throw std::runtime_error("boom in backward_weight");
  }
};

hp::model_bytes sizes(hp::pipeline_shape const& shape, std::size_t output = 64) {
  return hp::model_bytes::uniform(shape, {.activations = 32, .output = output, .weight_stash = 16});
}

// Every rank builds an executor from what `pick(rank)` gives it and runs one step.
template <class Pick>
std::vector<std::string> run_with(int p, Pick pick) {
  return on_threads(p, [&](thread_communicator& comm) {
    auto const [sched, bytes] = pick(comm.rank());
    aligned_resource resource;
    hp::executor exec(comm, resource, sched, bytes);
    plain_stage stage{.rank = comm.rank()};
    static_cast<void>(exec.step(stage));
  });
}

}  // namespace

TEST_CASE("ranks on different schedules: every rank raises collective_mismatch before any transfer") {
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 4};
  // Rank 0 on 1F1B, rank 1 on GPipe: this used to hang forever.
  auto const out = run_with(2, [&](int r) {
    auto s = r == 0 ? hp::make_schedule<hp::one_f_one_b>(shape) : hp::make_schedule<hp::gpipe>(shape);
    return std::pair{s, sizes(shape)};
  });
  for (auto const& o : out) {
    CAPTURE(o);
    CHECK(starts(o, "collective_mismatch: pipeline::executor: the ranks hold different schedules or sizes"));
    CHECK(has(o, "rank 1 differs from rank 0 in the action lists"));
  }

  // GPipe against GPipe with the backwards reversed: this used to run, rank 0's backwards
  // receiving the gradients of the wrong micro-batches.
  std::vector<std::vector<action>> reversed(2);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 4; ++k) reversed[static_cast<std::size_t>(r)].push_back({action_kind::forward, k, r, -1});
    for (int k = 3; k >= 0; --k) reversed[static_cast<std::size_t>(r)].push_back({action_kind::backward, k, r, -1});
  }
  auto const gpipe_reversed = hp::place_transfers("gpipe", shape, reversed);  // the same name, another order
  auto const out2 = run_with(2, [&](int r) {
    return std::pair{r == 0 ? hp::make_schedule<hp::gpipe>(shape) : gpipe_reversed, sizes(shape)};
  });
  for (auto const& o : out2) {
    CAPTURE(o);
    CHECK(starts(o, "collective_mismatch:"));
    CHECK(has(o, "rank 1 differs from rank 0 in the action lists"));
  }
}

TEST_CASE("different shapes, sizes, or inputs one rank rejects: an error on every rank") {
  hp::pipeline_shape const four{.stages = 3, .microbatches = 4};
  hp::pipeline_shape const five{.stages = 3, .microbatches = 5};
  auto const m = run_with(3, [&](int r) {
    auto const& shape = r == 2 ? five : four;
    return std::pair{hp::make_schedule<hp::one_f_one_b>(shape), sizes(shape)};
  });
  for (auto const& o : m) {
    CAPTURE(o);
    CHECK(has(o, "collective_mismatch: "));
    CHECK(has(o, "rank 2 differs from rank 0 in shape p=3 m=5 v=1 g=0 vs p=3 m=4 v=1 g=0;"));
  }
  auto const b = run_with(3, [&](int r) { return std::pair{hp::make_schedule<hp::one_f_one_b>(four), sizes(four, r == 1 ? 128 : 64)}; });
  for (auto const& o : b) {
    CAPTURE(o);
    CHECK(has(o, "rank 1 differs from rank 0 in the per-stage sizes (model_bytes);"));
    CHECK_FALSE(has(o, "rank 2 differs"));
  }
  // Rank 1 alone has sizes for the wrong number of stages: it raises its own error, the others
  // learn of it in the same collective instead of waiting for it.
  auto const bad = run_with(3, [&](int r) {
    return std::pair{hp::make_schedule<hp::one_f_one_b>(four), r == 1 ? sizes({.stages = 2, .microbatches = 1}) : sizes(four)};
  });
  CHECK(starts(bad[1], "invalid_argument: pipeline::executor: model_bytes has 2 stages, expected p·v = 3"));
  CHECK(starts(bad[0], "collective_mismatch: pipeline::executor: rank(s) 1 rejected their schedule or sizes"));
  CHECK(bad[2] == bad[0]);
  // Equal lists under another name run.
  auto const named = run_with(3, [&](int r) {
    auto s = hp::make_schedule<hp::one_f_one_b>(four);
    return std::pair{r == 0 ? s : hp::schedule("my 1f1b", s.shape(), s.ranks()), sizes(four)};
  });
  for (auto const& o : named) CHECK(o == "ok");
}

TEST_CASE("a callback that throws on one rank reaches every other rank as group_aborted") {
  for (int fail_rank : {0, 1, 3}) {
    CAPTURE(fail_rank);
    hp::pipeline_shape const shape{.stages = 4, .microbatches = 8};
    auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
    auto const out = on_threads(4, [&](thread_communicator& comm) {
      aligned_resource resource;
      hp::executor exec(comm, resource, sched, sizes(shape));
      plain_stage stage{.fail_rank = fail_rank, .fail_microbatch = 2, .rank = comm.rank()};
      static_cast<void>(exec.step(stage));
    });
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      auto const& o = out[static_cast<std::size_t>(r)];
      CAPTURE(o);
      if (r == fail_rank) CHECK(o == "other: boom in forward");
      else CHECK(starts(o, "group_aborted: thread_group aborted: pipeline::executor: rank " + std::to_string(fail_rank) + " failed: boom in forward"));
    }
  }
}

TEST_CASE("a rank that already finished its actions learns of a late failure at the step's end") {
  // ZB-H1, p = 2: rank 0's last action is its last weight gradient, long after rank 1 is done.
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 4};
  auto const sched = hp::make_schedule<hp::zb_h1>(shape);
  REQUIRE(sched.actions(0).back() == action{action_kind::backward_weight, 3, 0, -1});
  auto const out = on_threads(2, [&](thread_communicator& comm) {
    aligned_resource resource;
    hp::executor exec(comm, resource, sched, sizes(shape));
    plain_stage stage{.fail_rank = 0, .fail_microbatch = 3, .rank = comm.rank(), .fail_in_weight = true};
    static_cast<void>(exec.step(stage));
  });
  CHECK(out[0] == "other: boom in backward_weight");
  CHECK(starts(out[1], "group_aborted: thread_group aborted: pipeline::executor: rank 0 failed: boom in backward_weight"));
}

TEST_CASE("the executor's check and step run unchanged when the ranks agree") {
  hp::pipeline_shape const shape{.stages = 3, .microbatches = 6};
  auto const sched = hp::make_schedule<hp::zb_h1>(shape);
  auto const out = on_threads(3, [&](thread_communicator& comm) {
    aligned_resource resource;
    hp::executor exec(comm, resource, sched, sizes(shape));
    plain_stage stage{.rank = comm.rank()};
    for (int step = 0; step < 3; ++step) {
      auto const result = exec.step(stage);
      CHECK(result.losses.size() == (comm.rank() == 2 ? 6U : 0U));
    }
    CHECK(exec.statistics().bytes().value == 0);
  });
  for (auto const& o : out) CHECK(o == "ok");
}
