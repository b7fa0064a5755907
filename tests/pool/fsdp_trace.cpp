// SPDX-License-Identifier: Apache-2.0
// pool::models::record_fsdp_step over buckets an adapter declared (fsdp_requests): the exact
// lease sequence of Megatron-FSDP's params and grads schedules, and bad input refused before
// anything is recorded.
#include <doctest/doctest.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "headroom/core/error.hpp"
#include "headroom/pool/fsdp_trace.hpp"
#include "headroom/pool/lease_trace.hpp"

namespace pool = headroom::pool;
namespace m = headroom::pool::models;

namespace {

// Three units of the adapter's own ids (not 0..n, several buckets a unit), and one bucket outside
// every unit.
m::fsdp_requests three_units() { return {.units = {{{7, 100}, {9, 30}}, {{3, 50}}, {{11, 20}, {12, 10}}}, .non_unit = {{1, 8}}}; }

pool::lease_trace declared() {
  pool::lease_trace t;
  for (std::uint64_t id : {7, 9, 3, 11, 12}) t.declare({.id = id, .unit = id % 3, .group = 0, .dtype = "bfloat16", .bytes = 1});
  t.declare({.id = 1, .unit = pool::no_trace_unit, .group = 0, .dtype = "bfloat16", .bytes = 1});
  return t;
}

// "+id:bytes" an acquire, "-id" a release, "|" a step boundary.
std::string events_of(pool::lease_trace const& t) {
  std::ostringstream os;
  for (auto const& e : t.events()) {
    if (os.tellp() > 0) os << ' ';
    switch (e.kind) {
      case pool::lease_event_kind::acquire: os << '+' << e.bucket << ':' << e.bytes; break;
      case pool::lease_event_kind::release: os << '-' << e.bucket; break;
      case pool::lease_event_kind::step: os << '|'; break;
    }
  }
  return os.str();
}

}  // namespace

TEST_CASE("record_fsdp_step(requests): params one unit ahead, released after forward and again after backward") {
  auto t = declared();
  m::record_fsdp_step(t, three_units(), m::fsdp_buffer::params, {.request_multiple = 1});
  // forward 0 1 2: unit k+1 gathered before unit k is released; backward 2 1 0 likewise; the
  // bucket outside every unit held around both passes.
  CHECK(events_of(t) ==
        "+1:8 +7:100 +9:30 +3:50 -7 -9 +11:20 +12:10 -3 -11 -12 "
        "+11:20 +12:10 +3:50 -11 -12 +7:100 +9:30 -3 -7 -9 -1 |");
  // Two micro-batches: the same twice, one step boundary; requests rounded up to the multiple.
  auto two = declared();
  m::record_fsdp_step(two, three_units(), m::fsdp_buffer::params, {.micro_batches = 2, .request_multiple = 64});
  std::string const once =
      "+1:64 +7:128 +9:64 +3:64 -7 -9 +11:64 +12:64 -3 -11 -12 +11:64 +12:64 +3:64 -11 -12 +7:128 +9:64 -3 -7 -9 -1";
  CHECK(events_of(two) == once + " " + once + " |");
  CHECK(two.steps() == 1);
}

TEST_CASE("record_fsdp_step(requests): grad buckets held from the unit's gradient until two units later") {
  auto t = declared();
  m::record_fsdp_step(t, three_units(), m::fsdp_buffer::grads, {.micro_batches = 2, .request_multiple = 1});
  // backward 2 1 0: unit 2's buckets freed when unit 0's arrive, the last two at the end; no
  // weight bucket outside a unit.
  std::string const once = "+11:20 +12:10 +3:50 -11 -12 +7:100 +9:30 -3 -7 -9";
  CHECK(events_of(t) == once + " " + once + " |");
  auto one = declared();
  m::record_fsdp_step(one, m::fsdp_requests{.units = {{{3, 5}}}}, m::fsdp_buffer::grads, {.request_multiple = 1});
  CHECK(events_of(one) == "+3:5 -3 |");
}

TEST_CASE("record_fsdp_step(requests): bad input names the value and records nothing") {
  auto t = declared();
  auto const before = t;
  auto const refused = [&](m::fsdp_requests const& r, m::fsdp_step const& s, std::string const& part) {
    CAPTURE(part);
    CHECK_THROWS_WITH_AS(m::record_fsdp_step(t, r, m::fsdp_buffer::params, s), doctest::Contains(part.c_str()),
                         headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(m::record_fsdp_step(t, r, m::fsdp_buffer::grads, s), doctest::Contains(part.c_str()),
                         headroom::invalid_argument);
    CHECK(t == before);
  };
  refused(three_units(), {.micro_batches = 0}, "micro_batches = 0; expected >= 1");
  refused(three_units(), {.request_multiple = 0}, "request_multiple = 0; expected >= 1");
  refused({}, {}, "no units; expected at least one");
  refused({.units = {{{7, 100}}, {}}}, {}, "unit 1 has no buckets; expected at least one");
  refused({.units = {{{7, 100}}, {{9, 1}, {7, 100}}}}, {}, "bucket 7 is listed twice (again in unit 1)");
  refused({.units = {{{7, 100}, {7, 100}}}}, {}, "bucket 7 is listed twice (again in unit 0)");
  refused({.units = {{{7, 100}}}, .non_unit = {{7, 1}}}, {}, "bucket 7 is listed twice (again outside every unit)");
  refused({.units = {{{7, 100}}, {{9, 0}}}}, {}, "bucket 9 (in unit 1) has 0 bytes; expected > 0");
  refused({.units = {{{42, 100}}}}, {}, "bucket 42 (in unit 0) was never declared in the trace");
  refused({.units = {{{7, std::uint64_t{1} << 62}}}}, {.request_multiple = 5},  // 2^62 + 1 requested
          "bucket 7 (in unit 0) asks 4611686018427387904 bytes, rounded up to a multiple of 5; expected at most 2^62");
  // A step is recorded from a step boundary.
  t.acquire(7, 1);
  CHECK_THROWS_WITH_AS(m::record_fsdp_step(t, three_units(), m::fsdp_buffer::params),
                       doctest::Contains("the trace holds 1 bucket(s) (first: 7)"), headroom::logic_error);
  CHECK(t.events().size() == before.events().size() + 1);
}
