// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/stats/counting_communicator.hpp"
#include "headroom/stats/keys.hpp"
#include "headroom/stats/reducer.hpp"

namespace hs = headroom::stats;
using headroom::collective_mismatch;
using headroom::reduce_op;
using headroom::host::launch;
using headroom::host::thread_communicator;
using counting = hs::counting_communicator<thread_communicator>;
using stats_test::rank_outcomes;

struct no_size {  // a "group" without size(), as in PR #3645 test 4
  using stream_type = headroom::host::inline_stream;
  int rank() const { return 0; }
};

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::int64_t two53 = std::int64_t{1} << 53;

bool bitwise_equal(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

template <class G>
concept can_max = requires(hs::reducer<>& r, hs::dynamic_report const& rep, G& g) { r.max(rep, g); };

using bridge_report = hs::report<hs::field<"peak_allocated_gigabytes", double>, hs::field<"alloc_retries", std::int64_t>>;
}  // namespace

// ---- the six behaviours of Megatron-Bridge PR #3645's TestReduceMaxMemoryAcrossPpGroup ----------

TEST_CASE("PR #3645 test 1: an empty report comes back unchanged without a collective or a size query") {
  launch(8, [](thread_communicator& c) {
    counting comm(c);
    hs::report<> const typed;
    CHECK(hs::reducer<>(hs::reduce_plan(4)).max(typed, comm) == typed);
    hs::dynamic_report const empty;
    hs::reducer<hs::host_staging, hs::propagate_nan, hs::skip_when_empty> skip(hs::reduce_plan(4));
    CHECK(skip.max(empty, comm).empty());
    CHECK(skip.gather(empty, comm).empty());
    CHECK(comm.counts().collectives() == 0);
    CHECK(comm.counts().size_queries == 0);
  });
}

TEST_CASE("an empty report on every rank under the default join_when_empty: empty result, one collective") {
  launch(8, [](thread_communicator& c) {
    counting comm(c);
    auto const out = hs::max(hs::dynamic_report{}, comm, hs::reduce_plan(4));
    CHECK(out.empty());
    CHECK(comm.counts().all_reduce == 1);
  });
}

TEST_CASE("PR #3645 test 2: no communicator (not distributed) returns the input unchanged") {
  bridge_report const in(12.5, 3);
  hs::reducer<> reduce(hs::reduce_plan::for_report<bridge_report>());
  counting* none = nullptr;
  CHECK(reduce.max(in, none) == in);
  hs::dynamic_report d = in.to_dynamic();
  auto const table = reduce.gather(d, none);
  CHECK(table.ranks() == 1);
  CHECK(table.at("alloc_retries").max == hs::value(std::int64_t{3}));
  CHECK(reduce.max(d, none) == d);
}

TEST_CASE("PR #3645 test 3: a group of one rank returns the input unchanged without a collective") {
  launch(1, [](thread_communicator& c) {
    counting comm(c);
    bridge_report const in(12.5, 3);
    CHECK(hs::max(in, comm) == in);
    auto const d = in.to_dynamic();
    CHECK(hs::max(d, comm, hs::reduce_plan(2)) == d);
    CHECK(hs::gather(d, comm, hs::reduce_plan(2)).at("peak_allocated_gigabytes").argmax == 0);
    CHECK(comm.counts().collectives() == 0);
  });
  // PP = 1 inside a larger world: every rank is alone in its split group.
  launch(8, [](thread_communicator& world) {
    auto pp = world.split(world.rank(), 0);
    counting comm(pp);
    bridge_report const in(1.0 * world.rank(), world.rank());
    CHECK(hs::max(in, comm) == in);
    CHECK(comm.counts().collectives() == 0);
  });
}

TEST_CASE("PR #3645 test 4: a group object without size() is rejected at compile time, not at run time") {
  static_assert(!headroom::communicator<no_size>);
  static_assert(can_max<thread_communicator>);
  // reducer::max(report, no_size) stops the build with a sentence naming headroom::communicator:
  // tests/stats/compile_fail/reducer_group_without_size.cpp.
}

TEST_CASE("PR #3645 test 5: maxima in exactly one all_reduce(max), input not mutated") {
  launch(8, [](thread_communicator& c) {
    counting comm(c);
    // The PR's values: stage 0 holds the peak (18.0), the last stage the most retries.
    double const peak = c.rank() == 0 ? 18.0 : 14.25 - c.rank();
    std::int64_t const retries = c.rank() == 7 ? 14 : c.rank();
    hs::dynamic_report in;
    in.set("peak_allocated_gigabytes", peak).set("alloc_retries", retries);
    auto const before = in;
    auto const out = hs::max(in, comm, hs::reduce_plan(2));
    CHECK(comm.counts().all_reduce == 1);
    CHECK(comm.counts().collectives() == 1);
    CHECK(comm.last_reduce_op() == reduce_op::max);
    CHECK(out.real("peak_allocated_gigabytes") == 18.0);
    CHECK(out.integer("alloc_retries") == 14);
    CHECK(in == before);
  });
}

TEST_CASE("PR #3645 test 6: integer keys stay integers, double keys stay doubles") {
  launch(2, [](thread_communicator& c) {
    hs::dynamic_report in;
    in.set("peak", c.rank() == 0 ? 8.0 : 9.5).set("alloc_retries", c.rank() == 0 ? 1 : 4);
    auto const out = hs::max(in, c, hs::reduce_plan(2));
    REQUIRE(out.at("peak").index() == 1);
    REQUIRE(out.at("alloc_retries").index() == 0);
    CHECK(out.real("peak") == 9.5);
    CHECK(out.integer("alloc_retries") == 4);
    bridge_report const typed(c.rank() == 0 ? 8.0 : 9.5, c.rank() == 0 ? 1 : 4);
    auto const t = hs::max(typed, c);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(t.get<"alloc_retries">())>, std::int64_t>);
    CHECK(t.get<"alloc_retries">() == 4);
  });
}

// ---- exactness ----------------------------------------------------------------------------------

TEST_CASE("integers beyond 2^53 are exact (the float64 method of PR #3645 rounds them)") {
  launch(8, [](thread_communicator& c) {
    std::int64_t const mine = two53 + 1 + 2 * c.rank();  // odd: not representable as double
    hs::dynamic_report in;
    in.set("big", mine).set("max", std::numeric_limits<std::int64_t>::max() - (7 - c.rank()))
        .set("min_int", std::numeric_limits<std::int64_t>::min() + c.rank());
    auto const out = hs::max(in, c, hs::reduce_plan(3));
    CHECK(out.integer("big") == two53 + 15);
    CHECK(static_cast<std::int64_t>(static_cast<double>(two53 + 15)) != two53 + 15);  // what float64 would give
    CHECK(out.integer("max") == std::numeric_limits<std::int64_t>::max());
    CHECK(out.integer("min_int") == std::numeric_limits<std::int64_t>::min() + 7);
  });
}

TEST_CASE("doubles: negatives, infinities, signed zeros and subnormals reduce exactly") {
  launch(8, [](thread_communicator& c) {
    int const r = c.rank();
    hs::dynamic_report in;
    in.set("all_negative", -1.5 - r)                 // max is the least negative: -1.5 on rank 0
        .set("one_pos_inf", r == 5 ? inf : -1e300)   // +inf wins
        .set("neg_inf_elsewhere", r == 3 ? -2.0 : -inf)
        .set("all_neg_inf", -inf)
        .set("zeros", r == 6 ? 0.0 : -0.0)           // +0.0 > -0.0
        .set("all_neg_zero", -0.0)                   // stays -0.0, bitwise
        .set("subnormal", r == 2 ? std::numeric_limits<double>::denorm_min() : -std::numeric_limits<double>::denorm_min())
        .set("tiny_diff", 1.0 + (r == 4 ? std::numeric_limits<double>::epsilon() : 0.0));
    auto const out = hs::max(in, c, hs::reduce_plan(8));
    CHECK(out.real("all_negative") == -1.5);
    CHECK(out.real("one_pos_inf") == inf);
    CHECK(out.real("neg_inf_elsewhere") == -2.0);
    CHECK(out.real("all_neg_inf") == -inf);
    CHECK(bitwise_equal(out.real("zeros"), 0.0));
    CHECK(bitwise_equal(out.real("all_neg_zero"), -0.0));
    CHECK(out.real("subnormal") == std::numeric_limits<double>::denorm_min());
    CHECK(out.real("tiny_diff") == 1.0 + std::numeric_limits<double>::epsilon());
  });
}

TEST_CASE("NaN policy: propagate_nan makes max and min NaN; ignore_nan drops NaN unless all are NaN") {
  double const nan = std::numeric_limits<double>::quiet_NaN();
  using mixed = hs::report<hs::field<"hi", double>, hs::field<"lo", double, hs::minimum>, hs::field<"all_nan", double>>;
  launch(4, [&](thread_communicator& c) {
    mixed const in(c.rank() == 1 ? nan : 1.0 * c.rank(), c.rank() == 2 ? nan : 1.0 * c.rank(), nan);
    auto const prop = hs::reducer<hs::host_staging, hs::propagate_nan>(hs::reduce_plan(3)).max(in, c);
    CHECK(std::isnan(prop.get<"hi">()));
    CHECK(std::isnan(prop.get<"lo">()));
    CHECK(std::isnan(prop.get<"all_nan">()));
    auto const ign = hs::reducer<hs::host_staging, hs::ignore_nan>(hs::reduce_plan(3)).max(in, c);
    CHECK(ign.get<"hi">() == 3.0);
    CHECK(ign.get<"lo">() == 0.0);
    CHECK(std::isnan(ign.get<"all_nan">()));
  });
}

TEST_CASE("typed fields with max and min reduce together in one collective") {
  using mem = hs::report<hs::field<"allocated_bytes.all.peak", std::int64_t>,
                         hs::field<"device_memory.free_bytes", std::int64_t, hs::minimum>,
                         hs::field<"headroom_ratio", double, hs::minimum>>;
  launch(8, [](thread_communicator& c) {
    counting comm(c);
    int const r = c.rank();
    mem const in((std::int64_t{80} << 30) - r * (std::int64_t{1} << 30), std::int64_t{1} << (30 + r),
                 r == 3 ? -inf : 0.5 - 0.01 * r);
    auto const out = hs::max(in, comm);
    CHECK(out.get<"allocated_bytes.all.peak">() == std::int64_t{80} << 30);
    CHECK(out.get<"device_memory.free_bytes">() == std::int64_t{1} << 30);
    CHECK(out.get<"headroom_ratio">() == -inf);
    CHECK(comm.counts().collectives() == 1);
  });
}

TEST_CASE("random reports on 2, 3 and 8 ranks match the host reference (property, 40 draws)") {
  for (int ranks : {2, 3, 8}) {
    launch(ranks, [&](thread_communicator& c) {
      hs::reducer<> reduce(hs::reduce_plan(64));
      for (std::uint64_t seed = 1; seed <= 40; ++seed) {
        std::size_t const keys = 1 + seed % 64;
        bool const with_nan = seed % 3 == 0;
        auto const mine = stats_test::random_report(c.rank(), keys, seed, with_nan);
        std::vector<hs::dynamic_report> all;
        for (int q = 0; q < ranks; ++q) all.push_back(stats_test::random_report(q, keys, seed, with_nan));
        auto const out = reduce.max(mine, c);
        auto const expect = stats_test::reference_max(all);
        CHECK(out == expect);
        auto const table = reduce.gather(mine, c);
        REQUIRE(table.size() == keys);
        for (std::size_t i = 0; i < keys; ++i) {
          auto const& row = table.rows()[i];
          CHECK(row.name == mine[i].name);
          for (int q = 0; q < ranks; ++q)
            CHECK(hs::dynamic_report().set("v", row.per_rank[static_cast<std::size_t>(q)]) ==
                  hs::dynamic_report().set("v", all[static_cast<std::size_t>(q)][i].value));
          CHECK(hs::dynamic_report().set("v", row.max) == hs::dynamic_report().set("v", expect[i].value));
        }
      }
    });
  }
}

// ---- gather -------------------------------------------------------------------------------------

TEST_CASE("gather: per-rank table with max, min, mean and argmax; ties go to the lowest rank") {
  launch(8, [](thread_communicator& c) {
    counting comm(c);
    int const r = c.rank();
    hs::dynamic_report in;
    in.set("stage_peak", std::int64_t{100} - 10 * r)   // stage 0 holds the peak
        .set("tie", r == 2 || r == 6 ? 7 : 1)          // ranks 2 and 6 tie at the max -> 2
        .set("all_same", 5.0)                          // every rank ties -> 0
        .set("neg", -1.0 * r);                         // min on rank 7
    auto const t = hs::gather(in, comm, hs::reduce_plan(4));
    CHECK(comm.counts().all_gather == 1);
    CHECK(comm.counts().collectives() == 1);
    CHECK(t.ranks() == 8);
    auto const& peak = t.at("stage_peak");
    CHECK(peak.argmax == 0);
    CHECK(peak.max == hs::value(std::int64_t{100}));
    CHECK(peak.min == hs::value(std::int64_t{30}));
    CHECK(peak.argmin == 7);
    CHECK(peak.mean == doctest::Approx(65.0));
    CHECK(t.at("tie").argmax == 2);
    CHECK(t.at("tie").argmin == 0);
    CHECK(t.at("all_same").argmax == 0);
    CHECK(t.at("all_same").argmin == 0);
    CHECK(t.at("neg").argmin == 7);
    CHECK(t.at("neg").mean == doctest::Approx(-3.5));
    for (int q = 0; q < 8; ++q) CHECK(peak.per_rank[static_cast<std::size_t>(q)] == hs::value(std::int64_t{100} - 10 * q));
    CHECK(t.maxima() == hs::max(in, c, hs::reduce_plan(4)));
    std::ostringstream printed;
    printed << t;
    CHECK(printed.str().find("max (rank)") != std::string::npos);
    CHECK(printed.str().find("100 (0)") != std::string::npos);  // stage_peak's max and its holder
    CHECK(printed.str().find("rank 7") != std::string::npos);
    CHECK_THROWS_WITH_AS(static_cast<void>(t.at("nope")), doctest::Contains("no key \"nope\""), headroom::invalid_argument);
  });
}

TEST_CASE("gather keeps integers beyond 2^53 exact in max and min and per rank") {
  launch(4, [](thread_communicator& c) {
    hs::dynamic_report in;
    in.set("big", two53 + 1 + c.rank());
    auto const t = hs::gather(in, c, hs::reduce_plan(1));
    CHECK(t.at("big").max == hs::value(two53 + 4));
    CHECK(t.at("big").min == hs::value(two53 + 1));
    CHECK(t.at("big").argmax == 3);
  });
}

// ---- writer rank --------------------------------------------------------------------------------

TEST_CASE("max_to and gather_to deliver on the writer only, in the same single collective") {
  launch(8, [](thread_communicator& c) {
    counting comm(c);
    hs::reducer<> reduce(hs::reduce_plan(2));
    hs::dynamic_report in;
    in.set("allocated_bytes.all.peak", std::int64_t{1000} - c.rank()).set("num_ooms", c.rank() == 4 ? 1 : 0);
    int const writer = 7;  // Megatron's world_size - 1
    auto const m = reduce.max_to(writer, in, comm);
    auto const t = reduce.gather_to(writer, in, comm);
    CHECK(comm.counts().collectives() == 2);
    if (c.rank() == writer) {
      REQUIRE(m.has_value());
      REQUIRE(t.has_value());
      CHECK(m->integer("allocated_bytes.all.peak") == 1000);
      CHECK(m->integer("num_ooms") == 1);
      CHECK(t->at("allocated_bytes.all.peak").argmax == 0);
      CHECK(t->at("num_ooms").argmax == 4);
    } else {
      CHECK_FALSE(m.has_value());
      CHECK_FALSE(t.has_value());
    }
  });
}

TEST_CASE("writer ranks that differ, or lie outside the group, fail on every rank") {
  rank_outcomes differ(8), range(8), gdiffer(8), grange(8);
  launch(8, [&](thread_communicator& c) {
    hs::reducer<> reduce(hs::reduce_plan(1));
    hs::dynamic_report in;
    in.set("x", c.rank());
    differ.expect_throw<collective_mismatch>(c.rank(), [&] { static_cast<void>(reduce.max_to(c.rank() == 3 ? 0 : 7, in, c)); });
    range.expect_throw<headroom::invalid_argument>(c.rank(), [&] { static_cast<void>(reduce.max_to(8, in, c)); });
    gdiffer.expect_throw<collective_mismatch>(c.rank(), [&] { static_cast<void>(reduce.gather_to(c.rank() == 0 ? 1 : 2, in, c)); });
    grange.expect_throw<headroom::invalid_argument>(c.rank(), [&] { static_cast<void>(reduce.gather_to(-2, in, c)); });
  });
  CHECK(differ.count() == 8);
  CHECK(range.count() == 8);
  CHECK(gdiffer.count() == 8);
  CHECK(grange.count() == 8);
  CHECK(differ.message[0].find("different writer ranks (from 0 to 7)") != std::string::npos);
  CHECK(range.message[5].find("writer rank 8 out of range [0, 8)") != std::string::npos);
  CHECK(grange.message[2].find("writer rank -2 out of range [0, 8)") != std::string::npos);
  // one rank alone: checked locally
  launch(1, [](thread_communicator& c) {
    hs::reducer<> reduce(hs::reduce_plan(1));
    hs::dynamic_report in;
    in.set("x", 1);
    CHECK(reduce.max_to(0, in, c).has_value());
    CHECK_THROWS_WITH_AS(static_cast<void>(reduce.max_to(1, in, c)), doctest::Contains("writer rank 1 out of range [0, 1)"),
                         headroom::invalid_argument);
  });
}

// ---- schema safety ------------------------------------------------------------------------------

TEST_CASE("reports that differ in keys, order, kinds or emptiness fail on EVERY rank, never hang") {
  struct scenario {
    char const* what;
    hs::dynamic_report (*make)(int rank);
    char const* expect;
  };
  std::vector<scenario> const scenarios = {
      {"one rank empty (hangs PR #3645)",
       [](int r) { return r == 5 ? hs::dynamic_report{} : hs::dynamic_report().set("a", 1).set("b", 2.0); },
       "at least one rank's report is empty"},
      {"other key names", [](int r) { return hs::dynamic_report().set(r == 2 ? "alloc" : "a", 1).set("b", 2.0); },
       "same key count 2, different schema hashes"},
      {"other order",
       [](int r) { return r == 0 ? hs::dynamic_report().set("b", 2.0).set("a", 1) : hs::dynamic_report().set("a", 1).set("b", 2.0); },
       "differ in keys, order or element types"},
      {"int on one rank, double elsewhere",
       [](int r) { return r == 7 ? hs::dynamic_report().set("a", 1.0) : hs::dynamic_report().set("a", 1); },
       "different schema hashes"},
      {"an extra key", [](int r) { auto d = hs::dynamic_report().set("a", 1); if (r % 2) d.set("num_ooms", 0); return d; },
       "key counts range from 1 to 2"},
  };
  for (auto const& s : scenarios) {
    CAPTURE(s.what);
    rank_outcomes max_out(8), gather_out(8);
    launch(8, [&](thread_communicator& c) {
      hs::reducer<> reduce(hs::reduce_plan(4));
      auto const in = s.make(c.rank());
      max_out.expect_throw<collective_mismatch>(c.rank(), [&] { static_cast<void>(reduce.max(in, c)); });
      gather_out.expect_throw<collective_mismatch>(c.rank(), [&] { static_cast<void>(reduce.gather(in, c)); });
      // the group is still usable afterwards: a matching report reduces fine
      CHECK(reduce.max(hs::dynamic_report().set("ok", c.rank()), c).integer("ok") == 7);
    });
    CHECK(max_out.count() == 8);
    CHECK(gather_out.count() == 8);
    CHECK(max_out.message[0].find(s.expect) != std::string::npos);
    CHECK(max_out.message[3].find("this rank (3)") != std::string::npos);
    CHECK(gather_out.message[1].find("[rank 0: ") != std::string::npos);
  }
}

TEST_CASE("a report larger than the plan fails with capacity_error on every rank") {
  rank_outcomes max_out(4), gather_out(4);
  launch(4, [&](thread_communicator& c) {
    hs::reducer<> reduce(hs::reduce_plan(2));
    hs::dynamic_report in;
    in.set("a", 1).set("b", 2);
    if (c.rank() == 1) in.set("c", 3);
    max_out.expect_throw<headroom::capacity_error>(c.rank(), [&] { static_cast<void>(reduce.max(in, c)); });
    gather_out.expect_throw<headroom::capacity_error>(c.rank(), [&] { static_cast<void>(reduce.gather(in, c)); });
  });
  CHECK(max_out.count() == 4);
  CHECK(gather_out.count() == 4);
  CHECK(max_out.message[0].find("has 3 keys but the reduce_plan holds 2") != std::string::npos);
  CHECK(gather_out.message[3].find("rank 1's report has 3 keys") != std::string::npos);
  launch(1, [](thread_communicator& c) {
    hs::dynamic_report in;
    in.set("a", 1).set("b", 2);
    CHECK_THROWS_AS(static_cast<void>(hs::max(in, c, hs::reduce_plan(1))), headroom::capacity_error);
  });
}

// ---- groups -------------------------------------------------------------------------------------

TEST_CASE("reducing over split groups (PP within an 8-rank world) stays inside each group") {
  launch(8, [](thread_communicator& world) {
    // 2 pipelines of 4 stages: ranks {0,2,4,6} and {1,3,5,7}; stage = rank / 2.
    auto pp = world.split(world.rank() % 2, world.rank());
    hs::dynamic_report in;
    in.set("allocated_bytes.all.peak", std::int64_t{1} << (40 - world.rank()));
    auto const out = hs::max(in, pp, hs::reduce_plan(1));
    CHECK(out.integer("allocated_bytes.all.peak") == std::int64_t{1} << (40 - world.rank() % 2));
    auto const t = hs::gather(in, pp, hs::reduce_plan(1));
    CHECK(t.ranks() == 4);
    CHECK(t.at("allocated_bytes.all.peak").argmax == 0);  // the first stage
  });
}

TEST_CASE("one reducer serves many steps; the plan prints its wire layout") {
  hs::reduce_plan const plan(64);
  CHECK(plan.max_words() == 6 + 24 + 64);  // header, fault block, values
  CHECK(plan.gather_words_per_rank() == 3 + 24 + 64);
  CHECK(plan.gather_words(8) == 8 * 91);
  std::ostringstream os;
  os << plan;
  CHECK(os.str().find("1 all_reduce(max, int64) of 94 words") != std::string::npos);
  CHECK_THROWS_AS(hs::reduce_plan(hs::reduce_plan::max_capacity + 1), headroom::invalid_argument);
  CHECK_THROWS_AS(static_cast<void>(plan.gather_words(0)), headroom::invalid_argument);
  launch(3, [&](thread_communicator& c) {
    counting comm(c);
    hs::reducer<> reduce(plan);
    for (int step = 0; step < 50; ++step) {
      hs::dynamic_report in;
      in.set("step", step).set("v", 1.0 * step * (c.rank() + 1));
      auto const out = reduce.max(in, comm);
      CHECK(out.integer("step") == step);
      CHECK(out.real("v") == 3.0 * step);
    }
    CHECK(comm.counts().all_reduce == 50);
  });
}
