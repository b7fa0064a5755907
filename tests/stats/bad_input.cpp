// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// stats rows of docs/errors.md that no other test covers: index and capacity limits, and
// reducers given mismatched reports on a 3-rank group (every rank throws, the group lives on).
#include <cstdint>
#include <string>
#include <vector>

#include "common/error_of.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/stats.hpp"

using namespace headroom;
using headroom_test::contains;
using headroom_test::error_of;

TEST_CASE("dynamic_report[i] past the end is invalid_argument naming the index and the size") {
  stats::dynamic_report r;
  r.set("a", 1).set("b", 2.0);
  CHECK(r[1].name == "b");
  // Was std::out_of_range from vector::at: not a headroom::error, so callers catching those missed it.
  CHECK(contains(error_of<invalid_argument>([&] { (void)r[2]; }), "stats::dynamic_report[2]: index out of range [0, 2)"));
  CHECK(contains(error_of<invalid_argument>([] { (void)stats::dynamic_report{}[0]; }), "[0, 0)"));
}

TEST_CASE("reduce_plan refuses capacities beyond its maximum and groups of no rank") {
  std::size_t const too_many = stats::reduce_plan::max_capacity + 1;
  CHECK(contains(error_of<invalid_argument>([&] { stats::reduce_plan p(too_many); }), "exceeds the maximum"));
  CHECK(contains(error_of<invalid_argument>([] { (void)stats::reduce_plan(4).gather_words(0); }), "ranks 0, expected >= 1"));
  CHECK(stats::reduce_plan(stats::reduce_plan::max_capacity).capacity() == stats::reduce_plan::max_capacity);
}

TEST_CASE("3 ranks: a schema, capacity or writer mismatch throws on every rank, and the group stays usable") {
  std::vector<std::string> msgs(3);
  host::launch(3, [&](host::thread_communicator& comm) {
    auto const r = static_cast<std::size_t>(comm.rank());
    stats::dynamic_report rep;
    rep.set("allocated_bytes.all.peak", std::int64_t{100} * (comm.rank() + 1));
    if (comm.rank() == 1) rep.set("extra", 1);
    stats::reducer<> red{stats::reduce_plan(4)};
    msgs[r] = error_of<collective_mismatch>([&] { (void)red.max(rep, comm); });
    // Same schema now, but a writer that only rank 2 names differently.
    stats::dynamic_report same;
    same.set("allocated_bytes.all.peak", std::int64_t{100} * (comm.rank() + 1));
    CHECK(contains(error_of<collective_mismatch>([&] { (void)red.max_to(comm.rank() == 2 ? 1 : 0, same, comm); }),
                   "different writer ranks"));
    // A plan too small on every rank: capacity_error everywhere.
    stats::reducer<> small{stats::reduce_plan(0)};
    CHECK(contains(error_of<capacity_error>([&] { (void)small.gather(same, comm); }), "reduce_plan holds 0"));
    // And the same reducer still works afterwards.
    auto const out = red.max(same, comm);
    CHECK(out.integer("allocated_bytes.all.peak") == 300);
  });
  for (auto const& m : msgs) CHECK(contains(m, "key counts range from 1 to 2"));
}
