// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/keys.hpp"
#include "headroom/stats/report.hpp"

namespace hs = headroom::stats;

using step_report = hs::report<hs::field<"allocated_bytes.all.peak", std::int64_t>, hs::field<"num_ooms", std::int64_t>,
                               hs::field<"free_gigabytes", double, hs::minimum>>;

TEST_CASE("typed report: names, kinds, ops and access by name or index") {
  static_assert(step_report::size() == 3);
  static_assert(step_report::names[2] == "free_gigabytes");
  static_assert(step_report::kinds[0] == hs::value_kind::int64);
  static_assert(step_report::ops[2] == headroom::reduce_op::min);
  static_assert(step_report::contains<"num_ooms">);
  static_assert(!step_report::contains<"num_alloc_retries">);
  step_report r(7, 1, 2.5);
  CHECK(r.get<"allocated_bytes.all.peak">() == 7);
  r.get<"num_ooms">() = 4;
  CHECK(r.get<1>() == 4);
  CHECK(r.get<2>() == 2.5);
  std::ostringstream os;
  os << r;
  CHECK(os.str() == "{allocated_bytes.all.peak: 7, num_ooms: 4, free_gigabytes: 2.5}");
  step_report const zero;
  CHECK(zero.get<"free_gigabytes">() == 0.0);
}

TEST_CASE("typed schema hash is a compile-time constant that changes with names, order, kinds and ops") {
  using a = hs::report<hs::field<"x", std::int64_t>, hs::field<"y", double>>;
  using b = hs::report<hs::field<"y", double>, hs::field<"x", std::int64_t>>;
  using c = hs::report<hs::field<"x", double>, hs::field<"y", double>>;
  using d = hs::report<hs::field<"x", std::int64_t, hs::minimum>, hs::field<"y", double>>;
  using e = hs::report<hs::field<"xy", std::int64_t>>;
  using f = hs::report<hs::field<"x", std::int64_t>>;
  constexpr auto h = a::schema_hash();
  static_assert(h != b::schema_hash() && h != c::schema_hash() && h != d::schema_hash());
  static_assert(e::schema_hash() != f::schema_hash());
  static_assert(hs::report<>::schema_hash() != f::schema_hash());
  // a dynamic report with the same keys, kinds (and max ops) hashes the same
  CHECK(a(1, 2.0).to_dynamic().schema_hash() == h);
  CHECK(a(1, 2.0).to_dynamic().schema_hash() != c(1.0, 2.0).to_dynamic().schema_hash());
}

TEST_CASE("join puts two typed reports side by side") {
  using alloc = hs::report<hs::field<"a", std::int64_t>>;
  using dev = hs::report<hs::field<"b", double, hs::minimum>, hs::field<"c", std::int64_t>>;
  auto const j = hs::join(alloc(1), dev(2.5, 3));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(j)>,
                               hs::report<hs::field<"a", std::int64_t>, hs::field<"b", double, hs::minimum>,
                                          hs::field<"c", std::int64_t>>>);
  CHECK(j.get<"a">() == 1);
  CHECK(j.get<"b">() == 2.5);
  CHECK(j.get<"c">() == 3);
}

TEST_CASE("dynamic report: insertion order, overwrite in place, kinds kept") {
  hs::dynamic_report r;
  r.set("b", 1).set("a", 2.5).set("c", std::uint32_t{7});
  r.set("b", 3);  // keeps position
  REQUIRE(r.size() == 3);
  CHECK(r[0].name == "b");
  CHECK(r[1].name == "a");
  CHECK(r.integer("b") == 3);
  CHECK(r.real("a") == 2.5);
  CHECK(r.integer("c") == 7);
  CHECK(r.contains("a"));
  CHECK_FALSE(r.find("zz").has_value());
  r.set("b", 3.0);  // kind may change on overwrite, and the schema with it
  CHECK(r.at("b").index() == 1);
  std::ostringstream os;
  os << r;
  CHECK(os.str() == "{b: 3, a: 2.5, c: 7}");
  CHECK(r.prefixed("memory/")[1].name == "memory/a");
}

TEST_CASE("dynamic report: bad input names the key and what was expected") {
  hs::dynamic_report r;
  r.set("n", 1).set("x", 1.0);
  CHECK_THROWS_WITH_AS(static_cast<void>(r.at("missing")), doctest::Contains("no key \"missing\" among 2 keys"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(r.integer("x")), doctest::Contains("key \"x\" holds a float64, expected an int64"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(r.real("n")), doctest::Contains("key \"n\" holds an int64, expected a float64"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(r.set("", 1), doctest::Contains("empty key name"), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(r.set("huge", std::numeric_limits<std::uint64_t>::max()),
                       doctest::Contains("18446744073709551615 does not fit in int64"), headroom::invalid_argument);
  CHECK(r.size() == 2);  // nothing was added by the failed calls
  CHECK_THROWS_WITH_AS(static_cast<void>(r.with_values({hs::value(std::int64_t{1})})),
                       doctest::Contains("1 values for 2 keys"), headroom::invalid_argument);
  r.set("edge", static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
  CHECK(r.integer("edge") == std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("dynamic report equality is exact: kinds, order and bitwise doubles") {
  auto make = [](double v) { return hs::dynamic_report().set("a", 1).set("v", v); };
  CHECK(make(1.0) == make(1.0));
  CHECK_FALSE(make(0.0) == make(-0.0));
  double const nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(make(nan) == make(nan));
  CHECK_FALSE(hs::dynamic_report().set("a", 1) == hs::dynamic_report().set("a", 1.0));
  CHECK_FALSE(hs::dynamic_report().set("a", 1).set("b", 2) == hs::dynamic_report().set("b", 2).set("a", 1));
}

TEST_CASE("torch key names and the ready-made typed reports") {
  CHECK(hs::keys::allocated_bytes_peak == "allocated_bytes.all.peak");
  CHECK(hs::keys::reserved_bytes_current == "reserved_bytes.all.current");
  CHECK(hs::keys::num_alloc_retries == "num_alloc_retries");
  static_assert(hs::memory_report::contains<"reserved_bytes.all.peak">);
  static_assert(hs::allocator_report::contains<"allocation.all.freed">);
  static_assert(hs::allocator_report::size() == 9);
}

TEST_CASE("with_values shares the key list; adding a key to a copy does not change the original") {
  hs::dynamic_report a;
  a.set("x", 1).set("y", 2.0);
  auto b = a.with_values({hs::value(std::int64_t{5}), hs::value(-1.0)});
  CHECK(b.integer("x") == 5);
  CHECK(b.real("y") == -1.0);
  CHECK(a.integer("x") == 1);
  b.set("z", 3);  // clones the shared key list first
  CHECK(b.size() == 3);
  CHECK(a.size() == 2);
  CHECK_FALSE(a.contains("z"));
  auto c = a;
  c.set("x", 9);  // an existing key: values only
  CHECK(a.integer("x") == 1);
  CHECK(c.schema_hash() == a.schema_hash());
  c.set("x", 9.0);  // same name, other kind: another schema
  CHECK(c.schema_hash() != a.schema_hash());
  CHECK(c.schema_hash() == hs::dynamic_report().set("x", 9.0).set("y", 2.0).schema_hash());
  c.set("x", 1);
  CHECK(c.schema_hash() == a.schema_hash());
  auto const d = a.with_values({hs::value(1.0), hs::value(-1.0)});  // kinds differ from a's
  CHECK(d.schema_hash() == hs::dynamic_report().set("x", 1.0).set("y", -1.0).schema_hash());
  CHECK(a.with_values({hs::value(std::int64_t{7}), hs::value(0.5)}).schema_hash() == a.schema_hash());
  std::vector<std::string> names;
  for (auto const& e : b) names.emplace_back(e.name);
  CHECK(names == std::vector<std::string>{"x", "y", "z"});
}
