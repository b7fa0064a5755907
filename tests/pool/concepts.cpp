// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "headroom/pool.hpp"

// Compile-time positive and negative tests of the pool's policies and constraints.
using namespace headroom;
using namespace headroom::pool;

namespace bad {
struct no_name_category {
  static category_id category_of(bucket const&) { return 0; }
  static std::string category_name(category_id) { return ""; }
};
struct wrong_return_category {
  static constexpr std::string_view name = "x";
  static int category_of(bucket const&) { return 0; }
  static std::string category_name(category_id) { return ""; }
};
struct padding_without_describe {
  std::uint64_t padded_bytes(bucket const& b) const { return b.bytes; }
};
struct padding_wrong_type {
  int padded_bytes(bucket const&) const { return 0; }
  std::string describe() const { return ""; }
};
struct assignment_without_pins {
  static constexpr std::string_view name = "x";
  void report(move_event const&) const {}
};
struct not_an_event {
  void record(host::inline_stream const&) {}
};
struct not_a_resource {
  void* allocate(std::size_t n) { return ::operator new(n); }
};
struct non_default_event {
  explicit non_default_event(int) {}
  void record(host::inline_stream const&) {}
  bool ready() const { return true; }
  void wait_on(host::inline_stream const&) const {}
  void synchronize() const {}
};
}  // namespace bad

template <class S, class E, class R, class A = strict, class N = dynamic, class O = record_at_release>
concept pool_instantiable = requires { typename unit_pool<S, E, R, A, N, O>::lease; };

static_assert(planner_policy<fixed> && planner_policy<max>);
static_assert(!planner_policy<int> && !planner_policy<by_dtype>);
static_assert(category_policy<by_dtype> && category_policy<by_bytes>);
static_assert(!category_policy<bad::no_name_category> && !category_policy<bad::wrong_return_category>);
static_assert(padding_policy<no_padding> && padding_policy<pad_elements> && padding_policy<align_bytes<64>>);
static_assert(!padding_policy<bad::padding_without_describe> && !padding_policy<bad::padding_wrong_type>);
static_assert(assignment_policy<strict> && assignment_policy<first_free>);
static_assert(!assignment_policy<bad::assignment_without_pins> && !assignment_policy<dynamic>);
static_assert(non_unit_policy<dynamic> && non_unit_policy<persistent> && !non_unit_policy<strict>);
static_assert(release_order_policy<record_if_cross_stream> && release_order_policy<record_at_release> &&
              release_order_policy<record_at_reuse>);
static_assert(std::is_same_v<host_unit_pool<>::release_order_type, record_if_cross_stream>);  // the default
static_assert(record_if_cross_stream::records_at_release(true) && !record_if_cross_stream::records_at_release(false));
static_assert(record_at_release::records_at_release(false) && !record_at_reuse::records_at_release(true));
static_assert(!release_order_policy<dynamic> && !release_order_policy<int>);
static_assert(off_trace_policy<reject_off_trace> && off_trace_policy<fallback_off_trace>);
static_assert(!off_trace_policy<record_at_release> && !off_trace_policy<int>);

static_assert(pool_instantiable<host::inline_stream, host::inline_event, host::aligned_resource>);
static_assert(pool_instantiable<host::inline_stream, host::inline_event, host::aligned_resource, first_free, persistent>);
static_assert(!pool_instantiable<int, host::inline_event, host::aligned_resource>);
static_assert(!pool_instantiable<host::inline_stream, bad::not_an_event, host::aligned_resource>);
static_assert(!pool_instantiable<host::inline_stream, bad::non_default_event, host::aligned_resource>);
static_assert(!pool_instantiable<host::inline_stream, host::inline_event, bad::not_a_resource>);
static_assert(pool_instantiable<host::inline_stream, host::inline_event, host::aligned_resource, strict, dynamic,
                                record_at_reuse>);
// A policy in the wrong slot is a static_assert with a sentence, a hard error:
// tests/pool/compile_fail/unit_pool_*.cpp.

// Leases are move-only: a copy could be released twice.
static_assert(!std::is_copy_constructible_v<host_unit_pool<>::lease>);
static_assert(std::is_nothrow_move_constructible_v<host_unit_pool<>::lease>);
static_assert(!std::is_copy_constructible_v<host_unit_pool<>> && !std::is_move_constructible_v<host_unit_pool<>>);

TEST_CASE("policy names are what plans print") {
  auto const p = make_plan<max, by_bytes>(workload{"w", {{"u", {elements_of(dtype::bf16, 4)}}}, {}}, {}, align_bytes<64>{});
  CHECK(p.planner == "max");
  CHECK(p.category_policy == "by_bytes");
  CHECK(p.padding == "align bytes to 64");
  CHECK(make_plan<fixed>(workload{"w", {{"u", {elements_of(dtype::bf16, 4)}}}, {}}).planner == "fixed");
  CHECK(strict::name == "strict");
  CHECK(first_free::name == "first_free");
  CHECK(dynamic::name == "dynamic");
  CHECK(persistent::name == "persistent");
  CHECK(record_if_cross_stream::name == "record_if_cross_stream");
  CHECK(record_at_release::name == "record_at_release");
  CHECK(record_at_reuse::name == "record_at_reuse");
}
