// SPDX-License-Identifier: Apache-2.0
// Run as: mpiexec -n 4 test_pipeline_mpi_executor
// The executor over MPI processes (host buffers, MPI_Irecv / MPI_Isend through headroom/pipeline/mpi.hpp): every schedule's
// gradients and losses are bit-equal to a single-rank run of the same model (toy_model.hpp), each
// rank checking its own chunks. Checks use CHECK, so a failing rank keeps issuing the same
// transfers as the others instead of leaving them waiting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/lifetime/host.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/pipeline.hpp"
#include "headroom/pipeline/mpi.hpp"
#include "toy_model.hpp"

namespace hp = headroom::pipeline;
namespace mpi = headroom::mpi;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;

static_assert(hp::byte_transport<mpi::communicator>);

namespace {
mpi::environment const env;

mpi::communicator& world() {
  static mpi::communicator w = mpi::communicator::world();
  return w;
}

bool same_bits(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class G, class R = hp::retention::reduced, class T = hp::transfers::one_by_one>
void check_against_reference(hp::pipeline_shape const& shape) {
  CAPTURE(shape);
  toy::dims const d{.width = 7, .rows = 3};
  auto const sched = hp::make_schedule<G>(shape);
  auto const ref = toy::run_reference(d, shape.virtual_stages(), shape.microbatches, toy::weight_order(sched));
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  aligned_resource resource;
  hp::executor exec(world(), resource, sched, bytes);
  toy::stage<inline_stream> stage{.d = d, .chunks = {}, .backward_order = {}};
  int const rank = world().rank();
  for (int c = 0; c < shape.chunks; ++c) stage.chunks.emplace(shape.virtual_stage(rank, c), toy::make_params(d, shape.virtual_stage(rank, c)));

  auto result = exec.step(stage, R{}, hp::outputs::freed_when_sent{}, T{});
  auto const plan = exec.plan(R{}, hp::outputs::freed_when_sent{}, T{}).rank(rank);
  CHECK(exec.statistics().bytes().value == static_cast<std::int64_t>(plan.held_at_end));
  CHECK(exec.statistics().bytes().peak == plan.peak);
  for (auto const& chunk : stage.chunks) {
    int const s = chunk.first;  // a plain variable: clang 14 cannot capture structured bindings
    auto const& p = chunk.second;
    CAPTURE(s);
    auto const& r = ref.stages[static_cast<std::size_t>(s)];
    CHECK(same_bits(p.dw, r.dw));
    CHECK(same_bits(p.db, r.db));
    CHECK(std::any_of(p.dw.begin(), p.dw.end(), [](float g) { return g != 0.0f; }));
  }
  if (rank == shape.rank_of(shape.virtual_stages() - 1)) {
    if constexpr (R::keeps_losses) {
      REQUIRE(result.losses.size() == ref.losses.size());
      for (std::size_t k = 0; k < ref.losses.size(); ++k) {
        CHECK(result.microbatches[k] == static_cast<int>(k));
        CHECK(std::memcmp(&result.losses[k], &ref.losses[k], sizeof(double)) == 0);
      }
    } else {
      CHECK(result.losses.empty());
    }
    CHECK(result.outputs.size() == (R::keeps_outputs ? ref.losses.size() : 0u));
  } else {
    CHECK(result.losses.empty());
    CHECK(result.outputs.empty());
  }
}
}  // namespace

TEST_CASE("MPI: the group has 4 ranks") { REQUIRE(world().size() == 4); }

TEST_CASE("MPI: gradients and losses bit-equal to a single-rank run, every schedule, p = 4") {
  int const p = world().size();
  for (int m : {1, 3, 4, 8}) {
    check_against_reference<hp::gpipe>({.stages = p, .microbatches = m});
    check_against_reference<hp::one_f_one_b>({.stages = p, .microbatches = m});
    check_against_reference<hp::zb_h1>({.stages = p, .microbatches = m});
  }
  check_against_reference<hp::interleaved_1f1b>({.stages = p, .microbatches = 8, .chunks = 2});
  check_against_reference<hp::gpipe>({.stages = p, .microbatches = 3, .chunks = 2});
}

TEST_CASE("MPI: grouped transfers (a run's MPI_Isends completed together): bit-equal, model == measured") {
  int const p = world().size();
  using grouped = hp::transfers::grouped;
  for (int m : {1, 4, 8}) {
    check_against_reference<hp::one_f_one_b, hp::retention::reduced, grouped>({.stages = p, .microbatches = m});
    check_against_reference<hp::zb_h1, hp::retention::reduced, grouped>({.stages = p, .microbatches = m});
  }
  check_against_reference<hp::interleaved_1f1b, hp::retention::all, grouped>({.stages = p, .microbatches = 8, .chunks = 2});
}

TEST_CASE("MPI: retention all keeps the outputs, none keeps nothing") {
  int const p = world().size();
  check_against_reference<hp::one_f_one_b, hp::retention::all>({.stages = p, .microbatches = 6});
  check_against_reference<hp::one_f_one_b, hp::retention::none>({.stages = p, .microbatches = 6});
}

TEST_CASE("MPI: a schedule for another group size is rejected on every rank before any transfer") {
  toy::dims const d{};
  hp::pipeline_shape const shape{.stages = world().size() + 1, .microbatches = 4};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  aligned_resource resource;
  CHECK_THROWS_AS(hp::executor(world(), resource, sched, hp::model_bytes::uniform(shape, toy::stage_cost(d))),
                  headroom::invalid_argument);
  world().barrier();  // every rank got here: nobody is left in a transfer
}
