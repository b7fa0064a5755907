// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/fsdp_trace.hpp"
#include "headroom/pool/lifetime_plan.hpp"
#include "headroom/pool/models.hpp"
#include "lifetime_brute_force.hpp"

namespace pool = headroom::pool;
namespace m = headroom::pool::models;
using pool::lease_trace;

namespace {

// Every candidate and the plan: feasible ones never overlap; the plan is the smallest feasible.
void check_plan(lease_trace const& t, pool::lifetime_plan const& p) {
  auto const lt = pool::detail::lifetimes_of(t);
  std::vector<std::uint64_t> offsets;
  for (auto b : lt.ids) offsets.push_back(p.offsets.at(b));
  CHECK_FALSE(pool::find_overlap(lt.items, offsets, p.alignment).has_value());
  CHECK(p.bound <= p.arena_bytes);
  for (auto const& c : p.candidates)
    if (c.feasible) CHECK(p.arena_bytes <= c.arena_bytes);
  for (std::size_t i = 0; i < lt.ids.size(); ++i)
    CHECK(offsets[i] + headroom::align_up(lt.items[i].bytes, p.alignment) <= p.arena_bytes);
}

std::string read(std::filesystem::path const& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("lease_trace: text round trip, comments and blank lines") {
  lease_trace t;
  t.declare({.id = 3, .unit = 0, .group = 0, .dtype = "bfloat16", .bytes = 4096});
  t.declare({.id = 9, .unit = pool::no_trace_unit, .group = 1, .dtype = "float32", .bytes = 8});
  t.acquire(3, 4352);
  t.acquire(9, 8);
  t.release(3);
  t.release(9);
  t.end_step();
  std::string const text = t.to_text();
  CHECK(text ==
        "headroom-lease-trace 1\nbucket 3 0 0 bfloat16 4096\nbucket 9 - 1 float32 8\nacquire 3 4352\nacquire 9 8\n"
        "release 3\nrelease 9\nstep\n");
  CHECK(pool::parse_lease_trace(text) == t);
  CHECK(pool::parse_lease_trace("# made by hand\n\nheadroom-lease-trace 1\r\n  bucket 3  0 0 bfloat16 4096\n"
                                "acquire 3 4352\n# comment\nrelease 3\nstep\n")
            .steps() == 1);
}

TEST_CASE("parse_lease_trace: errors name the line and the value") {
  auto const fails = [](std::string const& text, std::string const& part) {
    CAPTURE(text);
    CHECK_THROWS_WITH((void)pool::parse_lease_trace(text), doctest::Contains(part.c_str()));
  };
  std::string const h = "headroom-lease-trace 1\n";
  std::string const b = h + "bucket 0 0 0 bfloat16 64\n";
  fails("", "no header line");
  fails("bucket 0 0 0 bf16 64\n", "line 1: 'bucket 0 0 0 bf16 64' is not a lease trace header");
  fails("headroom-lease-trace 2\n", "line 1: lease trace version '2'");
  fails(h + "bucket 0 0 0 bfloat16 6x4\n", "line 2: bytes '6x4' is not a decimal integer");
  fails(h + "bucket 0 0 0 bfloat16\n", "line 2: 'bucket' record has 4 fields; expected 5");
  fails(h + "bucket 0 0 0 bfloat16 0\n", "line 2: bucket 0 declared with 0 bytes");
  fails(b + "bucket 0 1 0 bfloat16 64\n", "line 3: bucket 0 is declared twice");
  fails(b + "acquire 1 64\n", "line 3: acquire of bucket 1, which was never declared");
  fails(b + "acquire 0 64\nacquire 0 64\n", "line 4: acquire of bucket 0, which is held");
  fails(b + "release 0\n", "line 3: release of bucket 0, which is not held");
  fails(b + "acquire 0 64\nstep\n", "line 4: step boundary with 1 bucket(s) held");
  fails(b + "acquire 0 64\n", "the trace ends with 1 bucket(s) held");
  fails(b + "free 0\n", "line 3: unknown record 'free'");
  fails(b + "acquire 0 99999999999999999999\n", "line 3: bytes '99999999999999999999'");
  fails(b + "acquire 0 -1\n", "line 3: bytes '-1'");
  CHECK_THROWS_AS((void)pool::parse_lease_trace(b + "release 0\n"), headroom::logic_error);
  CHECK_THROWS_AS((void)pool::parse_lease_trace(b + "acquire x 1\n"), headroom::invalid_argument);
}

TEST_CASE("plan_lifetimes: the max replay is Megatron's MaxPool byte for byte (worked example)") {
  // Units A = {bf16 200, bf16 20, u8 500}, B = {bf16 120, bf16 120, bf16 10}, C = {bf16 240};
  // A and B alive together, then B and C. Slots (group, key, offset): A takes group 0; B's two
  // largest find group 0 busy and pin group 1, its third takes group 0's empty bf16#2; C reuses
  // group 0's bf16#0. Group 0: 240 + 20 + 10 + 500, group 1: 120 + 120 (+ 0 + 0) = 1010 bytes.
  lease_trace t;
  std::uint64_t const unit[] = {0, 0, 0, 1, 1, 1, 2};
  char const* dtype[] = {"bfloat16", "bfloat16", "uint8", "bfloat16", "bfloat16", "bfloat16", "bfloat16"};
  std::uint64_t const bytes[] = {200, 20, 500, 120, 120, 10, 240};
  for (std::uint64_t b = 0; b < 7; ++b) t.declare({b, unit[b], 0, dtype[b], bytes[b]});
  auto const take = [&](std::initializer_list<std::uint64_t> ids) {
    for (auto b : ids) t.acquire(b, bytes[b]);
  };
  auto const give = [&](std::initializer_list<std::uint64_t> ids) {
    for (auto b : ids) t.release(b);
  };
  take({0, 1, 2});
  take({3, 4, 5});
  give({0, 1, 2});
  take({6});
  give({3, 4, 5});
  give({6});
  t.end_step();
  auto const mx = pool::plan_lifetimes(t, {.alignment = 1, .planner = "max"});
  CHECK(mx.arena_bytes == 1010);
  CHECK(mx.winner == "max");
  std::map<std::uint64_t, std::uint64_t> const want{{0, 0}, {1, 240}, {2, 270}, {3, 890}, {4, 770}, {5, 260}, {6, 0}};
  CHECK(mx.offsets == want);
  CHECK(mx.bound == 970);
  check_plan(t, mx);
  auto const best = pool::plan_lifetimes(t, {.alignment = 1});
  CHECK(best.candidate_bytes("max") == 1010);
  CHECK(best.arena_bytes == 970);  // at the bound
  CHECK(best.winner == "by_bytes");  // 970 too: ties go to the replays
  check_plan(t, best);
  // by_bytes: one list for every dtype; A = [500, 200, 20], B = [120, 120, 10], C = [240].
  auto const bb = pool::plan_lifetimes(t, {.alignment = 1, .planner = "by_bytes"});
  check_plan(t, bb);
  CHECK(bb.arena_bytes == 500 + 200 + 20 + 120 + 120 + 10);  // group 0: 500 200 20 (A, then C); group 1: B
  CHECK(best.fingerprint() != mx.fingerprint());
  CHECK(pool::plan_lifetimes(t, {.alignment = 1}).fingerprint() == best.fingerprint());
}

TEST_CASE("plan_lifetimes: a bucket Megatron moves off its pinned group makes max infeasible, not the plan") {
  // Units 0, 1, 2 of one bucket each, 100 B. Step: 0 and 1 alive, then 0 released, 2 alive with 1
  // (2 pins group 0), then 0 again while 2 holds group 0: Megatron serves 0 from group 1 after 1 is
  // released. As fixed offsets, 0 and 2 share group 0's slot while both are alive.
  lease_trace t;
  for (std::uint64_t b = 0; b < 3; ++b) t.declare({b, b, 0, "bfloat16", 100});
  t.acquire(0, 100);
  t.acquire(1, 100);
  t.release(0);
  t.acquire(2, 100);
  t.release(1);
  t.acquire(0, 100);
  t.release(0);
  t.release(2);
  t.end_step();
  auto const p = pool::plan_lifetimes(t, {.alignment = 1});
  REQUIRE(p.candidates.size() == 3);
  CHECK_FALSE(p.candidates[0].feasible);
  CHECK(p.winner != "max");
  // The three leases meet pairwise (0-1, 1-2, 2-0): fixed offsets need 300 B although at most 200 B
  // are alive at once and Megatron's moving MaxPool holds 200 B. The one case where a fixed-offset
  // plan is above max: max cannot be replayed at fixed offsets.
  CHECK(p.bound == 200);
  CHECK(*p.candidate_bytes("max") == 200);
  CHECK(p.arena_bytes == 300);
  check_plan(t, p);
  // A caller that follows MaxPool's moves (learning_arena) takes the 200 B replay: bucket 0 at
  // its pinned slot, or group 1's when 2 holds it.
  auto const moves = pool::plan_lifetimes(t, {.alignment = 1, .follow_moves = true});
  CHECK(moves.winner == "max");
  CHECK(moves.arena_bytes == 200);
  CHECK(moves.offsets.at(0) == 0);
  CHECK(moves.offsets.at(2) == 0);
  CHECK(moves.alternatives.at(0) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{100, 100}});
  CHECK(pool::plan_lifetimes(t, {.alignment = 1, .planner = "max"}).arena_bytes == 200);
}

TEST_CASE("plan_lifetimes: equals the brute-force optimum on random small traces") {
  std::mt19937_64 rng(2033);
  char const* dtypes[] = {"bfloat16", "float32", "uint8"};
  for (int trial = 0; trial < 100; ++trial) {
    std::size_t const n = 2 + trial % 5;  // buckets
    lease_trace t;
    for (std::uint64_t b = 0; b < n; ++b) t.declare({b, b / 2, 0, dtypes[rng() % 3], 256 * (1 + rng() % 4)});
    std::vector<char> held(n, 0);
    for (int step = 0; step < 2; ++step) {
      for (int e = 0; e < 12; ++e) {
        std::uint64_t const b = rng() % n;
        if (held[b]) t.release(b);
        else t.acquire(b, t.find(b)->bytes + rng() % 300);
        held[b] = !held[b];
      }
      for (std::uint64_t b = 0; b < n; ++b)
        if (held[b]) {
          t.release(b);
          held[b] = 0;
        }
      t.end_step();
    }
    auto const p = pool::plan_lifetimes(t, {.alignment = 256});
    check_plan(t, p);
    auto const lt = pool::detail::lifetimes_of(t);
    CHECK(p.arena_bytes == pool_test::brute_force(lt.items, 256).solve());
  }
}

TEST_CASE("plan_lifetimes: modelled Megatron-FSDP steps of every preset within 1.05x the bound, never above max") {
  std::size_t planned = 0;
  double worst = 0, worst_deep = 0;
  for (auto const& c : m::all_cases()) {
    for (int kind = 0; kind < 3; ++kind) {  // params; grads one unit deep; grads two units deep
      auto const what = kind == 0 ? m::fsdp_buffer::params : m::fsdp_buffer::grads;
      std::size_t const depth = kind == 2 ? 2 : 1;
      m::build_options o;
      o.expert_parallel = c.expert_parallel;
      if (what == m::fsdp_buffer::grads) o.grad_dtype = headroom::dtype::f32;
      auto const w = m::make_workload(c.config, o);
      auto t = m::declare_fsdp_buckets(w);
      m::record_fsdp_step(t, w, what, {.grad_depth = depth});
      m::record_fsdp_step(t, w, what, {.train = false});
      m::record_fsdp_step(t, w, what, {.micro_batches = 2, .recompute = true, .grad_depth = depth});
      auto const p = pool::plan_lifetimes(t);
      CAPTURE(w.name);
      CAPTURE(depth);
      CAPTURE(p.to_string());
      check_plan(t, p);
      // Three units alive at once (gradients two deep) cannot always meet the bound at fixed
      // offsets (alternating sizes a < b need 3b against a bound of 2b + a, docs/pool.md): those
      // are held to max only, and their worst ratio is reported.
      if (depth == 1) CHECK(p.ratio_to_bound() <= 1.05);
      if (depth == 2) worst_deep = std::max(worst_deep, p.ratio_to_bound());
      else worst = std::max(worst, p.ratio_to_bound());
      REQUIRE(p.candidates.size() == 3);
      CHECK(p.candidates[0].feasible);  // max: no bucket moved in this execution
      CHECK(p.arena_bytes <= *p.candidate_bytes("max"));
      ++planned;
    }
  }
  MESSAGE("planned " << planned << " modelled traces; worst ratio to the bound " << worst
                     << " (two units alive), " << worst_deep << " (gradients two units deep)");
}

TEST_CASE("plan_lifetimes: every recorded trace under tests/pool/traces within 1.05x the bound, never above max") {
  std::filesystem::path const dir = std::filesystem::path(HEADROOM_SOURCE_DIR) / "tests/pool/traces";
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(dir))
    for (auto const& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".trace") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (auto const& f : files) {
    CAPTURE(f.string());
    auto const t = pool::parse_lease_trace(read(f));
    auto const p = pool::plan_lifetimes(t);
    MESSAGE(f.filename().string() << ": " << p.to_string());
    check_plan(t, p);
    CHECK(p.ratio_to_bound() <= 1.05);
    auto const mx = p.candidate_bytes("max");
    REQUIRE(mx.has_value());
    CHECK(p.arena_bytes <= *mx);
  }
  MESSAGE("planned " << files.size() << " recorded trace file(s) from " << dir.string());
}

TEST_CASE("plan_lifetimes: bad options, empty traces") {
  lease_trace t;
  CHECK_THROWS_WITH_AS((void)pool::plan_lifetimes(t, {.alignment = 3}), doctest::Contains("alignment 3"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS((void)pool::plan_lifetimes(t, {.planner = "min"}), doctest::Contains("planner 'min'"),
                       headroom::invalid_argument);
  auto const p = pool::plan_lifetimes(t);
  CHECK(p.arena_bytes == 0);
  CHECK(p.offsets.empty());
  lease_trace d;
  CHECK_THROWS_WITH_AS(d.declare({.id = 1, .unit = 0, .group = 0, .dtype = "b f", .bytes = 1}),
                       doctest::Contains("dtype 'b f'"), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(m::record_fsdp_step(d, m::make_workload(m::falcon_h1_0_5b()), m::fsdp_buffer::params,
                                           {.micro_batches = 0}),
                       doctest::Contains("micro_batches = 0"), headroom::invalid_argument);
}
