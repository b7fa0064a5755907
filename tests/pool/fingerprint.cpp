// SPDX-License-Identifier: Apache-2.0
#include "headroom/pool/fingerprint.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "headroom/pool/interval.hpp"
#include "headroom/pool/models.hpp"
#include "substrate.hpp"

using namespace pool_test;

TEST_CASE("fingerprint: equal plans agree, and every planner option gives another value") {
  auto const w = models::make_workload(models::nemotron_h_8b());
  auto const a = make_plan<max>(w);
  auto const b = make_plan<max>(w);
  REQUIRE(a == b);
  CHECK(fingerprint(a) == fingerprint(b));

  std::vector<execution_order> const orders{training_order(w)};
  std::vector<plan> const others{
      make_plan<fixed>(w),
      make_plan<max, by_bytes>(w),
      make_plan<max>(w, buffers(3)),
      make_plan<max>(w, {.buffers = 2, .alignment = 512}),
      make_plan<max>(w, {}, pad_elements{64}),
      make_plan<max>(models::make_workload(models::nemotron_h_4b())),
      make_interval_plan(w, orders),
      make_interval_plan(w, orders, {.resident = 3}),
  };
  std::set<std::uint64_t> seen{fingerprint(a)};
  for (auto const& p : others) {
    REQUIRE_FALSE(p == a);
    CHECK(seen.insert(fingerprint(p)).second);
  }
}

TEST_CASE("fingerprint: one changed offset or name changes it") {
  auto const w = models::make_workload(models::nemotron_h_4b());
  auto const p = make_plan<max>(w);
  auto q = p;
  q.slots.back().offset += 256;
  CHECK(fingerprint(q) != fingerprint(p));
  q = p;
  q.unit_names[3] += "x";
  CHECK(fingerprint(q) != fingerprint(p));
  q = p;
  q.bucket_shape[0][0] = no_shape;
  CHECK(fingerprint(q) != fingerprint(p));
}
