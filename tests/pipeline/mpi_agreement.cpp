// SPDX-License-Identifier: Apache-2.0
// Run as: mpiexec -n 4 test_pipeline_mpi_agreement
// MPI ranks that disagree on the schedule, and an MPI rank whose callback throws: every rank gets
// an error, none hangs. Each case runs on its own duplicate of MPI_COMM_WORLD, so what an aborted
// step leaves on one communicator cannot reach the next case.
#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/pipeline.hpp"
#include "headroom/pipeline/mpi.hpp"

namespace hp = headroom::pipeline;
namespace mpi = headroom::mpi;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;

namespace {
mpi::environment const env;

struct failing_stage {
  int rank = 0, fail_rank = -1, fail_microbatch = -1;
  bool in_weight = false;
  void forward(hp::forward_args<inline_stream> const& a) {
    if (!in_weight && rank == fail_rank && a.microbatch == fail_microbatch) throw std::runtime_error("boom in forward");
  }
  double loss(hp::loss_args<inline_stream> const&) { return 1.0; }
  void backward(hp::backward_args<inline_stream> const&) {}
  void backward_input(hp::backward_args<inline_stream> const&) {}
  void backward_weight(hp::weight_args<inline_stream> const& a) {
    if (in_weight && rank == fail_rank && a.microbatch == fail_microbatch) throw std::runtime_error("boom in backward_weight");
  }
};

hp::model_bytes sizes(hp::pipeline_shape const& shape) {
  return hp::model_bytes::uniform(shape, {.activations = 64, .output = 256, .weight_stash = 32});
}

// What this rank ended with: "ok", or the exception's kind and text.
template <class Fn>
std::string outcome(Fn&& fn) {
  try {
    fn();
    return "ok";
  } catch (headroom::collective_mismatch const& e) {
    return std::string("collective_mismatch: ") + e.what();
  } catch (headroom::group_aborted const& e) {
    return std::string("group_aborted: ") + e.what();
  } catch (std::exception const& e) {
    return std::string("other: ") + e.what();
  }
}
bool has(std::string const& s, std::string const& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("MPI: ranks on different schedules raise collective_mismatch on every rank") {
  mpi::communicator comm(MPI_COMM_WORLD);
  hp::pipeline_shape const shape{.stages = comm.size(), .microbatches = 4};
  auto const sched = comm.rank() == 0 ? hp::make_schedule<hp::one_f_one_b>(shape) : hp::make_schedule<hp::gpipe>(shape);
  aligned_resource resource;
  auto const got = outcome([&] { hp::executor exec(comm, resource, sched, sizes(shape)); });
  CAPTURE(got);
  CHECK(has(got, "collective_mismatch: pipeline::executor: the ranks hold different schedules or sizes"));
  CHECK(has(got, "rank 1 differs from rank 0 in the action lists"));
  comm.barrier();
}

TEST_CASE("MPI: a callback that throws on one rank reaches every rank as an error") {
  // Grouped too: a peer may be completing a batch of MPI_Isends when the abort arrives. With
  // 1 MiB outputs (far above MPI's eager limit) a send completes only when the failed rank has
  // posted its receive, so a peer waits in the batch's completion or a single send's.
  auto const check = [](auto grouping, std::size_t output) {
    for (int fail_rank : {0, 2}) {
      CAPTURE(fail_rank);
      CAPTURE(decltype(grouping)::name);
      CAPTURE(output);
      mpi::communicator comm(MPI_COMM_WORLD);
      hp::pipeline_shape const shape{.stages = comm.size(), .microbatches = 8};
      auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
      aligned_resource resource;
      hp::executor exec(comm, resource, sched, hp::model_bytes::uniform(shape, {.activations = 64, .output = output}));
      failing_stage stage{.rank = comm.rank(), .fail_rank = fail_rank, .fail_microbatch = 3};
      auto const got = outcome([&] { static_cast<void>(exec.step(stage, hp::retention::reduced{}, hp::outputs::freed_when_sent{}, grouping)); });
      CAPTURE(got);
      if (comm.rank() == fail_rank) CHECK(got == "other: boom in forward");
      else CHECK(has(got, "group_aborted: rank " + std::to_string(fail_rank) + " aborted the pipeline step: pipeline::executor: rank " + std::to_string(fail_rank) + " failed: boom in forward"));
      CHECK(exec.statistics().bytes().value == 0);  // what the aborted step held went back
      MPI_Barrier(MPI_COMM_WORLD);
    }
  };
  for (std::size_t output : {std::size_t{256}, std::size_t{1} << 20}) {
    check(hp::transfers::one_by_one{}, output);
    check(hp::transfers::grouped{}, output);
  }
}

TEST_CASE("MPI: ranks that finished learn of a late failure at the step's end") {
  mpi::communicator comm(MPI_COMM_WORLD);
  hp::pipeline_shape const shape{.stages = comm.size(), .microbatches = 4};
  auto const sched = hp::make_schedule<hp::zb_h1>(shape);
  REQUIRE(sched.actions(0).back() == hp::action{hp::action_kind::backward_weight, 3, 0, -1});
  aligned_resource resource;
  hp::executor exec(comm, resource, sched, sizes(shape));
  failing_stage stage{.rank = comm.rank(), .fail_rank = 0, .fail_microbatch = 3, .in_weight = true};
  auto const got = outcome([&] { static_cast<void>(exec.step(stage)); });
  CAPTURE(got);
  if (comm.rank() == 0) CHECK(got == "other: boom in backward_weight");
  else CHECK(has(got, "group_aborted: rank 0 aborted the pipeline step"));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("MPI: agreeing ranks run several steps and hold nothing after them") {
  mpi::communicator comm(MPI_COMM_WORLD);
  hp::pipeline_shape const shape{.stages = comm.size(), .microbatches = 8, .chunks = 2};
  auto const sched = hp::make_schedule<hp::interleaved_1f1b>(shape);
  aligned_resource resource;
  hp::executor exec(comm, resource, sched, sizes(shape));
  failing_stage stage{.rank = comm.rank()};
  for (int step = 0; step < 3; ++step) {
    auto const result = exec.step(stage);
    CHECK(result.losses.size() == (comm.rank() == comm.size() - 1 ? 8U : 0U));
    CHECK(exec.statistics().bytes().peak == exec.plan(hp::retention::reduced{}).rank(comm.rank()).peak);
  }
  CHECK(exec.statistics().bytes().value == 0);
}
