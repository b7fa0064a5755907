// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Validity travels with the data: a checked_report holding a bad value joins the one
// collective, every rank throws naming the rank, key and value, and the group stays usable.
// Bool vs int is part of the schema. Peaks per phase, reduced with the holder's rank.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/stats/checked_report.hpp"
#include "headroom/stats/counting_communicator.hpp"
#include "headroom/stats/phases.hpp"
#include "headroom/stats/reducer.hpp"
#include "headroom/stats/statistics_resource.hpp"

namespace hs = headroom::stats;
using headroom::collective_mismatch;
using headroom::invalid_argument;
using headroom::host::launch;
using headroom::host::thread_communicator;
using counting = hs::counting_communicator<thread_communicator>;
using stats_test::rank_outcomes;

namespace {
hs::checked_report good(int rank, std::int64_t step) {
  hs::checked_report r;
  r.set("allocated_bytes.all.peak", (std::int64_t{1} << 60) + rank + step).set("ratio", 0.5 * rank).set("oom", false);
  return r;
}
bool contains(std::string const& s, std::string const& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a bad value on one rank raises on every rank, naming rank, key and value; the next call works") {
  constexpr int n = 4;
  rank_outcomes max_out(n), gather_out(n);
  std::vector<std::int64_t> after(n, 0);
  launch(n, [&](thread_communicator& c) {
    counting comm(c);
    hs::reducer<> reduce(hs::reduce_plan(8));
    int const me = comm.rank();
    auto r = good(me, 0);
    if (me == 2) r.set("allocated_bytes.all.peak", std::uint64_t{1} << 63);  // past INT64_MAX
    max_out.expect_throw<invalid_argument>(me, [&] { (void)reduce.max(r, comm); });
    hs::checked_report g = good(me, 0);
    if (me == 1) g.reject("ratio", "'n/a'", "a float");
    gather_out.expect_throw<invalid_argument>(me, [&] { (void)reduce.gather(g, comm); });
    CHECK(comm.counts().collectives() == 2);  // one each: nothing waits, nothing is left over
    after[static_cast<std::size_t>(me)] = std::get<0>(reduce.max(good(me, 1), comm).at("allocated_bytes.all.peak"));
  });
  CHECK(max_out.count() == n);
  CHECK(gather_out.count() == n);
  for (int q = 0; q < n; ++q) {
    auto const& m = max_out.message[static_cast<std::size_t>(q)];
    CHECK(contains(m, "rank 2 of 4"));
    CHECK(contains(m, "key 'allocated_bytes.all.peak' = 9223372036854775808"));
    CHECK(contains(m, "expected an integer that fits in int64"));
    CHECK(contains(gather_out.message[static_cast<std::size_t>(q)], "rank 1 of 4"));
    CHECK(contains(gather_out.message[static_cast<std::size_t>(q)], "key 'ratio' = 'n/a'; expected a float"));
    CHECK(after[static_cast<std::size_t>(q)] == (std::int64_t{1} << 60) + 3 + 1);
  }
}

TEST_CASE("several bad ranks: every rank names the lowest; long keys and values are cut, not lost") {
  constexpr int n = 3;
  rank_outcomes out(n);
  std::string const long_key(300, 'k');
  launch(n, [&](thread_communicator& comm) {
    hs::reducer<> reduce(hs::reduce_plan(4));
    hs::checked_report r = good(comm.rank(), 0);
    if (comm.rank() >= 1) r.reject(long_key, std::string(1000, 'v'), "a number");
    out.expect_throw<invalid_argument>(comm.rank(), [&] { (void)reduce.max(r, comm); });
  });
  CHECK(out.count() == n);
  for (auto const& m : out.message) {
    CHECK(contains(m, "rank 1 of 3"));
    CHECK(contains(m, "key 'kkkkkkkkkk"));
    CHECK(contains(m, "...' = vvvv"));
    CHECK(m.size() < 400);
  }
}

TEST_CASE("bool vs int is part of the schema: a type change after the steady state fails on every rank") {
  constexpr int n = 2;
  rank_outcomes out(n);
  std::vector<std::int64_t> again(n, -1);
  launch(n, [&](thread_communicator& comm) {
    hs::reducer<> reduce(hs::reduce_plan(2));
    hs::checked_report first;
    first.set("count", std::int64_t{1});
    CHECK(std::get<0>(reduce.max(first, comm).at("count")) == 1);
    hs::checked_report later;
    if (comm.rank() == 0) later.set("count", true);
    else later.set("count", (std::int64_t{1} << 60) + 3);
    out.expect_throw<collective_mismatch>(comm.rank(), [&] { (void)reduce.max(later, comm); });
    again[static_cast<std::size_t>(comm.rank())] = std::get<0>(reduce.max(first, comm).at("count"));
  });
  CHECK(out.count() == n);
  CHECK(again == std::vector<std::int64_t>{1, 1});
  hs::checked_report a, b;
  a.set("x", true).set("y", 1.0);
  b.set("x", std::int64_t{1}).set("y", 1.0);
  CHECK(a.schema_hash() != b.schema_hash());
  CHECK(b.schema_hash() == b.report().schema_hash());  // no bools: the dynamic report's schema
  CHECK(a.is_bool(0));
  CHECK_FALSE(a.is_bool(1));
}

TEST_CASE("one rank, no communicator: a fault throws at once; an empty key name is a fault, not a throw") {
  hs::reducer<> reduce(hs::reduce_plan(2));
  hs::checked_report r;
  r.set("", 1.0);
  REQUIRE(r.fault().has_value());
  CHECK(contains(r.fault()->sentence(), "expected a non-empty key name"));
  thread_communicator* none = nullptr;
  CHECK_THROWS_AS((void)reduce.max(r, none), invalid_argument);
  launch(1, [&](thread_communicator& comm) { CHECK_THROWS_AS((void)reduce.gather(r, comm), invalid_argument); });
}

TEST_CASE("words of another reduction are refused, not reinterpreted") {
  hs::reduce_plan const plan(4);
  hs::dynamic_report a, b;
  a.set("a", std::int64_t{1}).set("b", 2.0);
  b.set("x", std::int64_t{1});
  std::vector<std::int64_t> words(plan.max_words());
  hs::detail::pack_max(b, -1, true, std::span<std::int64_t>(words));
  std::span<std::int64_t const> const view(words);
  CHECK_THROWS_AS((void)hs::detail::check_max_header(a, view, plan.capacity(), 0, 1, "t"), collective_mismatch);
  CHECK_THROWS_AS((void)hs::detail::check_max_header(a, view.first(10), plan.capacity(), 0, 1, "t"), invalid_argument);
  CHECK_THROWS_AS((void)hs::detail::check_max_header(a, view, plan.capacity(), 3, 2, "t"), invalid_argument);
  std::vector<std::int64_t> g(plan.gather_words_per_rank());
  hs::detail::pack_gather(b, -1, std::span<std::int64_t>(g));
  CHECK_THROWS_AS((void)hs::detail::check_gather_headers(a, std::span<std::int64_t const>(g), g.size(), 4, 0, 1, "t"),
                  collective_mismatch);
  CHECK_THROWS_AS((void)hs::detail::check_gather_headers(a, std::span<std::int64_t const>(g), g.size(), 4, 0, 2, "t"),
                  invalid_argument);
}

TEST_CASE("fuzz: random per-rank types and faults after a steady state never diverge and never hang") {
  for (int const n : {2, 3, 4}) {
    constexpr int rounds = 150;
    std::vector<std::vector<std::string>> seen(static_cast<std::size_t>(n), std::vector<std::string>(rounds));
    launch(n, [&](thread_communicator& comm) {
      hs::reducer<> reduce(hs::reduce_plan(4));
      int const me = comm.rank();
      for (int round = 0; round < rounds; ++round) {
        std::mt19937_64 gen(static_cast<std::uint64_t>(round * 131 + me * 7 + n));
        hs::checked_report r;
        r.set("a", std::int64_t{round}).set("b", 1.5 * me);
        switch (gen() % 8) {
          case 0: r.set("a", true); break;
          case 1: r.set("a", 0.25); break;
          case 2: r.set("a", ~std::uint64_t{0}); break;
          case 3: r.reject("b", "'x'", "a float"); break;
          case 4: r.set("c", std::int64_t{1}); break;
          default: break;
        }
        std::string outcome;
        try {
          auto const t = reduce.gather(r, comm);
          std::ostringstream os;
          os << t;
          outcome = "ok " + os.str();
        } catch (invalid_argument const& e) {
          outcome = std::string("invalid ") + e.what();
        } catch (collective_mismatch const&) {
          outcome = "mismatch";  // messages name this rank's keys, so only the kind is compared
        }
        seen[static_cast<std::size_t>(me)][static_cast<std::size_t>(round)] = outcome;
      }
    });
    for (int q = 1; q < n; ++q)
      for (int round = 0; round < rounds; ++round) {
        auto const& mine = seen[static_cast<std::size_t>(q)][static_cast<std::size_t>(round)];
        auto const& first = seen[0][static_cast<std::size_t>(round)];
        if (mine.rfind("invalid", 0) == 0) {
          // the faulty rank writes its whole sentence, the others what the wire carried: same rank
          CHECK(first.rfind("invalid", 0) == 0);
          CHECK(mine.substr(0, mine.find(" has a value")) == first.substr(0, first.find(" has a value")));
        } else {
          CHECK(mine == first);
        }
      }
  }
}

TEST_CASE("peaks per phase: reset at each phase's start, the highest of repeated phases, world peak with its rank") {
  using resource = hs::statistics_resource<headroom::host::aligned_resource>;
  constexpr int n = 3;
  std::vector<hs::rank_table> tables(n);
  launch(n, [&](thread_communicator& comm) {
    resource mr;
    headroom::host::inline_stream const s;
    hs::phase_peaks peaks;
    int const me = comm.rank();
    void* held = mr.allocate(s, 1000);  // outstanding across phases: part of every phase's peak
    for (int micro = 0; micro < 2; ++micro) {
      hs::phase_scope<resource> p(peaks, mr, "forward");
      std::size_t const bytes = static_cast<std::size_t>(100 * (me + 1) * (micro + 1));
      mr.deallocate(s, mr.allocate(s, bytes), bytes);
    }
    {
      hs::phase_scope<resource> p(peaks, mr, "optimizer");
      CHECK_THROWS_AS(hs::phase_scope<resource>(peaks, mr, "inner"), headroom::logic_error);
      std::size_t const bytes = me == 0 ? 5000 : 10;
      mr.deallocate(s, mr.allocate(s, bytes), bytes);
    }
    mr.deallocate(s, held, 1000);
    CHECK(peaks.report().integer("forward/allocated_bytes.all.peak") == 1000 + 200 * (me + 1));
    CHECK(peaks.report().integer("optimizer/allocated_bytes.all.peak") == 1000 + (me == 0 ? 5000 : 10));
    counting counted(comm);
    tables[static_cast<std::size_t>(me)] = hs::reducer<>(hs::reduce_plan(8)).gather(peaks.report(), counted);
    CHECK(counted.counts().collectives() == 1);
    peaks.clear();
    CHECK(peaks.report().empty());
  });
  for (auto const& t : tables) {
    CHECK(std::get<0>(t.at("forward/allocated_bytes.all.peak").max) == 1600);
    CHECK(t.at("forward/allocated_bytes.all.peak").argmax == 2);
    CHECK(std::get<0>(t.at("optimizer/allocated_bytes.all.peak").max) == 6000);
    CHECK(t.at("optimizer/allocated_bytes.all.peak").argmax == 0);
    CHECK(t.at("optimizer/allocation.all.peak").argmax == 0);  // ties: the lowest rank
  }
}
