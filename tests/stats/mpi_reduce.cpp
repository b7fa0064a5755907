// SPDX-License-Identifier: Apache-2.0
// Run as: mpiexec -n 4 test_stats_mpi_reduce
// The reducers over the MPI communicator (host buffers, one process per rank). Every rank runs
// every case in the same order; data checks use CHECK, not REQUIRE, so a failing rank keeps
// issuing the same collectives as the others instead of leaving them waiting.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/stats.hpp"

namespace hs = headroom::stats;
namespace mpi = headroom::mpi;
using counting = hs::counting_communicator<mpi::communicator>;

static_assert(hs::host_buffer_communicator<mpi::communicator>);
static_assert(hs::staging_for<hs::host_staging, mpi::communicator>);

namespace {
mpi::environment const env;

mpi::communicator& world() {
  static mpi::communicator w = mpi::communicator::world();
  return w;
}
}  // namespace

TEST_CASE("MPI: the group has 4 ranks") {
  CHECK(world().size() == 4);
}

TEST_CASE("MPI: max of random reports (beyond 2^53, negatives, infinities, NaN) matches the host reference") {
  int const n = world().size();
  counting comm(world());
  hs::reducer<> reduce(hs::reduce_plan(128));
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::size_t const keys = 1 + (seed * 37) % 128;
    auto const mine = stats_test::random_report(world().rank(), keys, seed, seed % 2 == 0);
    auto const before = mine;
    std::vector<hs::dynamic_report> all;
    for (int q = 0; q < n; ++q) all.push_back(stats_test::random_report(q, keys, seed, seed % 2 == 0));
    CHECK(reduce.max(mine, comm) == stats_test::reference_max(all));
    CHECK(mine == before);
  }
  CHECK(comm.counts().all_reduce == 30);
  CHECK(comm.counts().collectives() == 30);
}

TEST_CASE("MPI: typed report with max and min fields, integers exact above 2^53") {
  using mem = hs::report<hs::field<"allocated_bytes.all.peak", std::int64_t>,
                         hs::field<"device_memory.free_bytes", std::int64_t, hs::minimum>, hs::field<"loss_scale", double>>;
  int const r = world().rank();
  mem const in((std::int64_t{1} << 53) + 1 + 2 * r, std::int64_t{1000} - r, r == 1 ? -std::numeric_limits<double>::infinity() : -1.0 * r);
  auto const out = hs::max(in, world());
  CHECK(out.get<"allocated_bytes.all.peak">() == (std::int64_t{1} << 53) + 1 + 2 * (world().size() - 1));
  CHECK(out.get<"device_memory.free_bytes">() == 1000 - (world().size() - 1));
  CHECK(out.get<"loss_scale">() == -0.0);
}

TEST_CASE("MPI: gather gives every rank the per-rank table; ties go to the lowest rank") {
  int const r = world().rank();
  hs::dynamic_report in;
  in.set("allocated_bytes.all.peak", std::int64_t{100} - 10 * r).set("tie", r >= 2 ? 9 : 1).set("neg", -0.5 * r);
  counting comm(world());
  auto const t = hs::gather(in, comm, hs::reduce_plan(3));
  CHECK(comm.counts().all_gather == 1);
  CHECK(t.ranks() == world().size());
  CHECK(t.at("allocated_bytes.all.peak").argmax == 0);
  CHECK(t.at("tie").argmax == 2);
  CHECK(t.at("neg").argmin == world().size() - 1);
  CHECK(t.at("neg").max == hs::value(0.0));
}

TEST_CASE("MPI: writer-rank variants deliver on the last rank only") {
  int const writer = world().size() - 1;
  hs::reducer<> reduce(hs::reduce_plan(2));
  hs::dynamic_report in;
  in.set("peak", 10.0 - world().rank()).set("num_ooms", world().rank() == 1 ? 2 : 0);
  auto const m = reduce.max_to(writer, in, world());
  auto const t = reduce.gather_to(writer, in, world());
  CHECK(m.has_value() == (world().rank() == writer));
  CHECK(t.has_value() == (world().rank() == writer));
  if (m && t) {
    CHECK(m->real("peak") == 10.0);
    CHECK(m->integer("num_ooms") == 2);
    CHECK(t->at("peak").argmax == 0);
    CHECK(t->at("num_ooms").argmax == 1);
  }
}

TEST_CASE("MPI: mismatched reports (one empty, extra key, other order) throw on every rank, then the group still works") {
  int const r = world().rank();
  hs::reducer<> reduce(hs::reduce_plan(4));
  std::vector<hs::dynamic_report> cases;
  cases.push_back(r == 2 ? hs::dynamic_report{} : hs::dynamic_report().set("a", 1).set("b", 2.0));
  cases.push_back(r == 0 ? hs::dynamic_report().set("a", 1).set("b", 2.0).set("c", 3) : hs::dynamic_report().set("a", 1).set("b", 2.0));
  cases.push_back(r == 3 ? hs::dynamic_report().set("b", 2.0).set("a", 1) : hs::dynamic_report().set("a", 1).set("b", 2.0));
  for (auto const& in : cases) {
    int threw = 0;
    try {
      static_cast<void>(reduce.max(in, world()));
    } catch (headroom::collective_mismatch const&) {
      threw = 1;
    }
    int gthrew = 0;
    try {
      static_cast<void>(reduce.gather(in, world()));
    } catch (headroom::collective_mismatch const&) {
      gthrew = 1;
    }
    std::int64_t const mine[2] = {threw, gthrew};
    std::int64_t sum[2] = {0, 0};
    world().all_reduce(std::span<std::int64_t const>(mine), std::span<std::int64_t>(sum), headroom::reduce_op::sum);
    CHECK(sum[0] == world().size());  // every rank threw
    CHECK(sum[1] == world().size());
  }
  CHECK(reduce.max(hs::dynamic_report().set("ok", r), world()).integer("ok") == world().size() - 1);
}

TEST_CASE("MPI: PP groups split from the world reduce inside their group; a one-rank group does nothing") {
  int const r = world().rank();
  auto pp = world().split(r % 2, r);  // two pipelines of size/2 stages
  hs::dynamic_report in;
  in.set("allocated_bytes.all.peak", std::int64_t{1} << (40 - r));
  CHECK(hs::max(in, pp, hs::reduce_plan(1)).integer("allocated_bytes.all.peak") == std::int64_t{1} << (40 - r % 2));
  auto alone = world().split(r, 0);
  counting c(alone);
  CHECK(hs::max(in, c, hs::reduce_plan(1)) == in);
  CHECK(c.counts().collectives() == 0);
}
