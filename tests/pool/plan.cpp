// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "headroom/pool/plan.hpp"
#include "substrate.hpp"

using namespace pool_test;

namespace {
// docs/pool.md's worked example: A = {bf16: 100, 10; fp8: 500}, B = {bf16: 60, 60, 5}, C = {bf16: 120}.
workload abc() {
  return {"ABC", {{"A", {bf16(100), bf16(10), fp8(500)}}, {"B", {bf16(60), bf16(60), bf16(5)}}, {"C", {bf16(120)}}}, {}};
}

std::uint64_t shape_elements(plan const& p, std::size_t s) {
  return p.shapes[s].bytes / (p.shapes[s].category_name == "bfloat16" ? 2 : 1);
}
}  // namespace

TEST_CASE("max plan of the worked example: bf16 slots [120, 60, 5] and uint8 [500]") {
  auto const p = make_plan<max>(abc());
  REQUIRE(p.shapes.size() == 4);
  CHECK(p.shapes[0].category_name == "bfloat16");
  CHECK(shape_elements(p, 0) == 120);
  CHECK(shape_elements(p, 1) == 60);
  CHECK(shape_elements(p, 2) == 5);
  CHECK(p.shapes[3].category_name == "uint8");
  CHECK(p.shapes[3].bytes == 500);
  CHECK(p.shapes[3].ordinal == 0);
  // Offsets of the reference: A.100->0, A.10->1, B.60b->0, B.60a->1 (equal sizes: the later bucket
  // sorts first), B.5->2, C.120->0, A.500->uint8/0.
  CHECK(p.bucket_shape[0] == std::vector<std::uint32_t>{0, 1, 3});
  CHECK(p.bucket_shape[1] == std::vector<std::uint32_t>{1, 0, 2});
  CHECK(p.bucket_shape[2] == std::vector<std::uint32_t>{0});
  // The first unit to reach the max defines the slot.
  CHECK(p.shapes[0].defining_unit == 2);
  CHECK(p.shapes[1].defining_unit == 1);
  CHECK(p.shapes[1].defining_bucket == 0);
  CHECK(p.shapes[2].defining_unit == 1);
  CHECK(p.shapes[2].defining_bucket == 2);
  CHECK(p.shapes[3].defining_unit == 0);
  CHECK(p.pooled_units() == 3);
  CHECK(p.fallback_bytes() == 0);
  // Memory = 2 x (185 * 2 B + 500 B) plus alignment gaps; group-major, 256-aligned.
  CHECK(p.group_bytes() == 185 * 2 + 500);
  CHECK(p.slots.size() == 8);
  CHECK(p.slots[p.slot_index(1, 0)].offset % 256 == 0);
  CHECK(p.arena_bytes >= 2 * p.group_bytes());
  CHECK(p.candidate_slots(1, 1) == std::vector<std::size_t>{0, 4});
  CHECK(p.candidate_slots(0, 2) == std::vector<std::size_t>{3, 7});
}

TEST_CASE("max plan by bytes shares slots across dtypes") {
  auto const typed = make_plan<max, by_dtype>(abc());
  auto const bytes = make_plan<max, by_bytes>(abc());
  // by bytes: A sorted {500, 200, 20}, B {120, 120, 10}, C {240} -> [500, 200, 20].
  REQUIRE(bytes.shapes.size() == 3);
  CHECK(bytes.shapes[0].bytes == 500);
  CHECK(bytes.shapes[1].bytes == 200);
  CHECK(bytes.shapes[2].bytes == 20);
  CHECK(bytes.group_bytes() == 720);
  CHECK(bytes.group_bytes() < typed.group_bytes());
  // A pure-fp8 unit and a pure-bf16 unit of equal bytes need one slot by bytes, two by dtype.
  workload const w{"mixed", {{"fp8", {fp8(1000)}}, {"bf16", {bf16(500)}}}, {}};
  CHECK(make_plan<max, by_bytes>(w).shapes.size() == 1);
  CHECK(make_plan<max, by_dtype>(w).shapes.size() == 2);
}

TEST_CASE("fixed plan pools only the most common unit shape; the first class wins ties") {
  // Classes: X = [bf16 8] x2 (units 0, 2), Y = [bf16 16] x2 (units 1, 3), Z = [bf16 4] x1.
  workload const w{"ties", {{"x0", {bf16(8)}}, {"y0", {bf16(16)}}, {"x1", {bf16(8)}}, {"y1", {bf16(16)}}, {"z", {bf16(4)}}},
                   {bf16(100)}};
  auto const p = make_plan<fixed>(w);
  REQUIRE(p.shapes.size() == 1);
  CHECK(p.shapes[0].bytes == 16);
  CHECK(p.shapes[0].defining_unit == 0);
  CHECK(p.pooled == std::vector<char>{1, 0, 1, 0, 0});
  CHECK(p.unpooled_unit_bytes() == 2 * 32 + 8);
  CHECK(p.non_unit_total_bytes() == 200);
  CHECK(p.fallback_bytes() == 2 * 32 + 8 + 200);
  CHECK(p.candidate_slots(1, 0).empty());
  // A strict majority beats the first class.
  workload w2 = w;
  w2.units.push_back({"y2", {bf16(16)}});
  auto const p2 = make_plan<fixed>(w2);
  CHECK(p2.shapes[0].bytes == 32);
  CHECK(p2.shapes[0].defining_unit == 1);
  CHECK(p2.pooled == std::vector<char>{0, 1, 0, 1, 0, 1});
}

TEST_CASE("fixed plan slots follow the representative unit's bucket order") {
  workload const w{"two-bucket", {{"a", {fp8(64), bf16(3)}}, {"b", {fp8(64), bf16(3)}}, {"c", {bf16(3), fp8(64)}}}, {}};
  auto const p = make_plan<fixed>(w);
  REQUIRE(p.shapes.size() == 2);
  CHECK(p.shapes[0].category_name == "uint8");
  CHECK(p.shapes[1].category_name == "bfloat16");
  CHECK(p.pooled == std::vector<char>{1, 1, 0});  // c has the same buckets in another order
  CHECK(p.bucket_shape[1] == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE("padding policy: plans on padded sizes and ranks by them") {
  workload const w{"pad", {{"a", {bf16(100)}}, {"b", {bf16(130)}}}, {bf16(7)}};
  auto const p = make_plan<max>(w, {}, pad_elements{64});
  CHECK(p.shapes[0].bytes == 192 * 2);  // 130 -> 192 elements
  CHECK(p.bucket_bytes[0][0] == 128 * 2);
  CHECK(p.non_unit_bytes[0] == 64 * 2);
  CHECK(p.padding == "pad elements to x64");
  auto const q = make_plan<max>(w, {}, align_bytes<1024>{});
  CHECK(q.shapes[0].bytes == 1024);
  CHECK(make_plan<max>(w).shapes[0].bytes == 260);
  // Padding a bucket that is not whole elements is an error.
  workload const odd{"odd", {{"a", {bucket{dtype::bf16, 3, "odd"}}}}, {}};
  auto const msg = error_of<invalid_argument>([&] { (void)make_plan<max>(odd, {}, pad_elements{8}); });
  CHECK(msg.find("3 bytes") != std::string::npos);
  CHECK(msg.find("bfloat16") != std::string::npos);
  CHECK_THROWS_AS((void)make_plan<max>(w, {}, pad_elements{0}), invalid_argument);
}

TEST_CASE("plans are deterministic and print every slot") {
  auto const a = make_plan<max>(abc(), {.buffers = 3, .alignment = 512});
  auto const b = make_plan<max>(abc(), {.buffers = 3, .alignment = 512});
  CHECK(a == b);
  CHECK(a.to_string() == b.to_string());
  CHECK_FALSE(a == make_plan<max>(abc(), {.buffers = 2, .alignment = 512}));
  auto const text = a.to_string();
  CHECK(text.find("planner=max") != std::string::npos);
  CHECK(text.find("buffers=3") != std::string::npos);
  CHECK(text.find("bfloat16#2") != std::string::npos);
  CHECK(text.find("defined by unit 2 'C'") != std::string::npos);
  CHECK(text.find("g2@") != std::string::npos);
  CHECK(a.describe_units().find("unit 1 'B': [b0 120 B -> shape 1 slots 1 5 9]") != std::string::npos);
  for (auto const& s : a.slots) CHECK(s.offset % 512 == 0);
}

TEST_CASE("bad input is rejected with the value and what was expected") {
  CHECK(error_of<invalid_argument>([] { (void)make_plan<max>(workload{"empty", {}, {}}); }).find("has no units") !=
        std::string::npos);
  CHECK(error_of<invalid_argument>([] {
          (void)make_plan<max>(workload{"w", {{"u", {}}}, {}});
        }).find("unit 0 'u'") != std::string::npos);
  CHECK(error_of<invalid_argument>([] {
          (void)make_plan<fixed>(workload{"w", {{"u", {bucket{dtype::f32, 0, ""}}}}, {}});
        }).find("0 bytes") != std::string::npos);
  CHECK(error_of<invalid_argument>([] {
          (void)make_plan<max>(workload{"w", {{"u", {bf16(1)}}}, {bucket{dtype::u8, 0, ""}}});
        }).find("non-unit bucket 0") != std::string::npos);
  CHECK(error_of<invalid_argument>([] { (void)make_plan<max>(uniform(2), {.buffers = 1}); }).find("buffers = 1") !=
        std::string::npos);
  CHECK(error_of<invalid_argument>([] { (void)make_plan<max>(uniform(2), {.buffers = 65}); }).find("buffers = 65") !=
        std::string::npos);
  CHECK(error_of<invalid_argument>([] {
          (void)make_plan<max>(uniform(2), {.buffers = 2, .alignment = 48});
        }).find("alignment 48") != std::string::npos);
  auto const p = make_plan<max>(uniform(2));
  CHECK(error_of<invalid_argument>([&] { (void)p.candidate_slots(2, 0); }).find("unit 2 out of range") !=
        std::string::npos);
  CHECK(error_of<invalid_argument>([&] { (void)p.candidate_slots(0, 1); }).find("bucket 1 out of range") !=
        std::string::npos);
  CHECK_THROWS_AS((void)elements_of(dtype::f64, UINT64_MAX / 4), capacity_error);
}

namespace {
workload random_workload(std::mt19937_64& gen) {
  std::uniform_int_distribution<int> units(1, 12), buckets(1, 4), kind(0, 3);
  std::uniform_int_distribution<std::uint64_t> size(1, 5000);
  dtype const types[] = {dtype::bf16, dtype::u8, dtype::f32, dtype::bf16};
  workload w{"random", {}, {}};
  int const n = units(gen);
  for (int u = 0; u < n; ++u) {
    unit un{"r" + std::to_string(u), {}};
    int const nb = buckets(gen);
    for (int b = 0; b < nb; ++b) un.buckets.push_back(elements_of(types[kind(gen)], size(gen)));
    w.units.push_back(un);
  }
  if (kind(gen) == 0) w.units.push_back(w.units.front());  // repeated shapes, for the fixed planner
  return w;
}

template <class Category>
void check_max_properties(workload const& w, std::size_t buffers) {
  auto const p = make_plan<max, Category>(w, {.buffers = buffers});
  // i-th largest bucket of every unit, per category.
  std::map<category_id, std::vector<std::vector<std::uint64_t>>> ranked;
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    std::map<category_id, std::vector<std::uint64_t>> mine;
    for (auto const& b : w.units[u].buckets) mine[Category::category_of(b)].push_back(b.bytes);
    for (auto& [c, v] : mine) {
      std::sort(v.rbegin(), v.rend());
      ranked[c].push_back(v);
    }
  }
  // Every unit fits: each bucket has a shape of its category that holds it, distinct within the unit.
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    std::set<std::uint32_t> used;
    for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b) {
      auto const s = p.bucket_shape[u][b];
      REQUIRE(s < p.shapes.size());
      CHECK(p.shapes[s].bytes >= w.units[u].buckets[b].bytes);
      CHECK(p.shapes[s].category == Category::category_of(w.units[u].buckets[b]));
      CHECK(used.insert(s).second);
    }
  }
  // Minimal: slot i of category c equals the max over units of their i-th largest bucket, and
  // its definer really has that size at that rank.
  for (std::size_t s = 0; s < p.shapes.size(); ++s) {
    auto const& sh = p.shapes[s];
    std::uint64_t expect = 0;
    for (auto const& v : ranked[sh.category])
      if (sh.ordinal < v.size()) expect = std::max(expect, v[sh.ordinal]);
    CHECK(sh.bytes == expect);
    CHECK(w.units[sh.defining_unit].buckets[sh.defining_bucket].bytes == sh.bytes);
    CHECK(p.bucket_shape[sh.defining_unit][sh.defining_bucket] == s);
    if (s > 0 && p.shapes[s - 1].category == sh.category) CHECK(p.shapes[s - 1].bytes >= sh.bytes);
  }
  // Slots do not overlap and fit in the arena.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (auto const& sl : p.slots) spans.emplace_back(sl.offset, sl.offset + sl.bytes);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);
  CHECK(spans.back().second <= p.arena_bytes);
  CHECK(p.slots.size() == buffers * p.shapes.size());
  CHECK(p.pooled_units() == w.units.size());
}
}  // namespace

TEST_CASE("property: max plans on random workloads fit every unit and are minimal") {
  std::random_device rd;
  auto const seed = rd();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 300; ++trial) {
    auto const w = random_workload(gen);
    std::size_t const buffers = 2 + static_cast<std::size_t>(trial % 3);
    check_max_properties<by_dtype>(w, buffers);
    check_max_properties<by_bytes>(w, buffers);
    // by_bytes never needs more than by_dtype, for one buffer group.
    CHECK(make_plan<max, by_bytes>(w).group_bytes() <= make_plan<max, by_dtype>(w).group_bytes());
  }
}

TEST_CASE("property: fixed plans pool exactly the units equal to the representative") {
  std::mt19937_64 gen(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    auto const w = random_workload(gen);
    auto const p = make_plan<fixed>(w);
    auto const rep = p.shapes[0].defining_unit;
    std::size_t count = 0;
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      bool const same = w.units[u].buckets == w.units[rep].buckets;
      CHECK(static_cast<bool>(p.pooled[u]) == same);
      count += same;
      if (same)
        for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b)
          CHECK(p.shapes[p.bucket_shape[u][b]].bytes == w.units[u].buckets[b].bytes);
    }
    // The representative class is a largest class, and the first of the largest.
    for (std::size_t u = 0; u < w.units.size(); ++u) {
      auto const c = static_cast<std::size_t>(std::count_if(
          w.units.begin(), w.units.end(), [&](unit const& x) { return x.buckets == w.units[u].buckets; }));
      CHECK(c <= count);
      if (c == count && u < rep) CHECK(w.units[u].buckets == w.units[rep].buckets);
    }
    std::uint64_t left = 0;
    for (std::size_t u = 0; u < w.units.size(); ++u)
      if (!p.pooled[u])
        for (auto const& b : w.units[u].buckets) left += b.bytes;
    CHECK(p.unpooled_unit_bytes() == left);
  }
}

TEST_CASE("a plan says what a reader needs: fixed's chosen class and representative, slots per category") {
  auto const mp = make_plan<max>(abc());
  auto const cats = mp.categories();
  REQUIRE(cats.size() == 2);
  CHECK(cats[0].name == "bfloat16");
  CHECK(cats[0].shapes == std::vector<std::uint32_t>{0, 1, 2});
  CHECK(cats[1].name == "uint8");
  CHECK(cats[1].shapes == std::vector<std::uint32_t>{3});
  CHECK(mp.representative_unit == no_unit);
  CHECK(mp.chosen_class().empty());

  // Fixed: units 1 and 3 share the commonest shape; unit 1 is the first of them.
  workload const w{"fixed", {{"a", {bf16(4)}}, {"b", {bf16(8), fp8(2)}}, {"c", {bf16(9)}}, {"d", {bf16(8), fp8(2)}}}, {}};
  auto const fp = make_plan<fixed>(w);
  CHECK(fp.representative_unit == 1);
  CHECK(fp.chosen_class() == std::vector<std::size_t>{1, 3});
  CHECK(fp.shapes[0].defining_unit == 1);
  CHECK(fp.to_string().find("class=2 units like unit 1 'b'") != std::string::npos);
  auto const fc = fp.categories();
  REQUIRE(fc.size() == 2);
  CHECK(fc[1].name == "uint8");
  CHECK(fc[1].shapes == std::vector<std::uint32_t>{1});
}
