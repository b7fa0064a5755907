// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Bad input the cp fuzz target found (tests/fuzz/cp.cpp), each now an error that names the
// value, plus the rest of the cp rows of docs/errors.md that no other test covers.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/error_of.hpp"
#include "headroom/cp.hpp"

using namespace headroom;
using i64 = std::int64_t;

namespace {
using headroom_test::contains;
using headroom_test::error_of;
constexpr i64 i64_max = std::numeric_limits<i64>::max();
}  // namespace

TEST_CASE("dual_chunk multiples at cp sizes above 2^30 do not overflow int") {
  // 2 * cp was computed in int: UB (and a negative multiple) for cp > 2^30.
  int const cp = (1 << 30) + 3;
  CHECK(cp::dual_chunk::sequence_multiple(cp) == 2 * i64{cp});
  CHECK(cp::dual_chunk::total_multiple(cp) == 2 * i64{cp});
  CHECK(cp::alignment_for<cp::dual_chunk>(cp) == 2 * i64{cp});
}

TEST_CASE("cp::alignment_for rejects an alignment beyond int64") {
  // lcm(2 * cp * tp, extra) wrapped around and returned a wrong multiple before.
  auto const msg = error_of<invalid_argument>([] { (void)cp::alignment_for<cp::dual_chunk>(1 << 20, 1 << 20, i64_max); });
  CHECK(contains(msg, "overflows int64"));
  CHECK(contains(msg, "extra 9223372036854775807"));
  CHECK(error_of<invalid_argument>([] { (void)cp::alignment_for<cp::contiguous>(1 << 30, 1 << 30, (i64{1} << 40) + 1); }) !=
        "<no exception>");
  CHECK(cp::alignment_for<cp::dual_chunk>(2, 2, 6) == 24);  // lcm(8, 6): the ordinary path is unchanged
}

TEST_CASE("cp::padding rejects padded boundaries beyond int64") {
  std::vector<i64> const raw{0, 5, 10};
  // Each sequence rounds up to 2^62; the second boundary would be 2^63.
  auto const msg = error_of<invalid_argument>([&] { cp::padding(raw, i64{1} << 62); });
  CHECK(contains(msg, "cp::padding"));
  CHECK(contains(msg, "overflow int64"));
  // A raw length close to the top, rounded up to a multiple.
  std::vector<i64> const near_top{0, i64_max - 2};
  CHECK(contains(error_of<invalid_argument>([&] { cp::padding(near_top, 8); }), "overflow int64"));
  // The total multiple: lcm(3, 2^62 + 1) and the rounding of the total.
  CHECK(contains(error_of<invalid_argument>([&] { cp::padding(raw, 3, (i64{1} << 62) + 1); }), "overflows int64"));
  std::vector<i64> const odd_top{0, i64_max - 2};  // = 1 mod 4: the total rounds up past int64
  CHECK(contains(error_of<invalid_argument>([&] { cp::padding(odd_top, 1, 4); }), "overflow int64"));
  CHECK(cp::padding(raw, 1, i64_max).padded_rows() == i64_max);  // at the top exactly: a valid (huge) dummy
  // Non-positive multiples are named.
  CHECK(contains(error_of<invalid_argument>([&] { cp::padding(raw, 0); }), "sequence_multiple = 0"));
  CHECK(contains(error_of<invalid_argument>([&] { cp::padding(raw, 2, -4); }), "total_multiple = -4"));
}

TEST_CASE("cp::checked_cu_seqlens rejects empty, non-zero start, negative and decreasing boundaries") {
  CHECK(contains(error_of<invalid_argument>([] { (void)cp::checked_cu_seqlens(std::vector<i64>{}); }), "empty"));
  CHECK(contains(error_of<invalid_argument>([] { (void)cp::checked_cu_seqlens(std::vector<i64>{3, 4}); }), "[0] = 3, expected 0"));
  CHECK(contains(error_of<invalid_argument>([] { (void)cp::checked_cu_seqlens(std::vector<int>{0, 8, 4}); }),
                 "decreases at index 2: 8 then 4"));
  CHECK(contains(error_of<invalid_argument>([] { (void)cp::checked_cu_seqlens(std::vector<int>{0, -2}); }), "negative"));
}

TEST_CASE("cp::partition rejects cp sizes, ranks and lengths the layout cannot cut") {
  std::vector<i64> const cu{0, 8, 20};
  CHECK(contains(error_of<invalid_argument>([&] { cp::partition<cp::dual_chunk>(cu, 0, 0); }), "cp_size = 0"));
  CHECK(contains(error_of<invalid_argument>([&] { cp::partition<cp::dual_chunk>(cu, 2, 2); }), "cp_rank = 2 out of range [0, 2)"));
  CHECK(contains(error_of<invalid_argument>([&] { cp::partition<cp::dual_chunk>(cu, 2, -1); }), "cp_rank = -1"));
  CHECK(contains(error_of<invalid_argument>([&] { cp::partition<cp::dual_chunk>(cu, 3, 0); }), "expected a multiple of 6"));
  CHECK(contains(error_of<invalid_argument>([&] { cp::partition<cp::contiguous>(std::vector<i64>{0, 7}, 2, 0); }),
                 "7 packed rows, expected a multiple of 2"));
  cp::partition<cp::dual_chunk> const p(cu, 2, 0);
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.locate(10); }), "local row 10 out of range [0, 10)"));
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.owner(20); }), "global row 20 out of range [0, 20)"));
  CHECK(contains(error_of<invalid_argument>([&] { (void)p.locate(2, 0); }), "rank 2 out of range [0, 2)"));
}

TEST_CASE("cp::matrix_view rejects a shape whose element count or bytes overflow") {
  // rows x width wrapped around int64 and the view was accepted (found by an independent fuzzer).
  float storage[4] = {};
  auto const msg = error_of<capacity_error>([&] { (void)cp::matrix_view<float>(storage, 9223372036854775781, i64_max); });
  CHECK(contains(msg, "9223372036854775781 x 9223372036854775807 overflows 64-bit signed"));
  CHECK(contains(msg, "matrix_view"));
  // The count fits in int64 but its bytes do not fit in an address range.
  auto const bytes = error_of<capacity_error>([&] { (void)cp::matrix_view<float>(storage, i64{1} << 31, i64{1} << 31); });
  CHECK(contains(bytes, "holds 4611686018427387904 elements of 4 bytes"));
  // The largest addressable shape of one-byte elements is still a view.
  std::byte b[1] = {};
  CHECK(cp::matrix_view<std::byte>(b, 1, i64_max).size() == static_cast<std::size_t>(i64_max));
  CHECK(cp::matrix_view<float>(storage, 2, 2).size_bytes() == 16);
}

TEST_CASE("cp::plan_output rejects sizes that overflow 64 bits, naming the operands") {
  // output_buffer_bytes was 1392238300898485248: 3934144 rows x 70687142973552 bytes wrapped
  // (the true size is 2.78e20 bytes); found by an independent fuzzer.
  std::vector<i64> const cu{0, 3934144};
  cp::partition<cp::dual_chunk> const p(cu, 2, 0);
  i64 const width = 526402;
  std::size_t const elem = 134283576;
  auto const full = error_of<capacity_error>([&] { (void)cp::plan_output<cp::gather_output::full>(p, width, elem); });
  CHECK(contains(full, "cp::plan_output output buffer bytes: rows x row bytes"));
  CHECK(contains(full, "3934144 x 70687142973552 overflows 64-bit unsigned"));
  auto const per_token =
      error_of<capacity_error>([&] { (void)cp::plan_output<cp::gather_output::per_token>(p, width, elem); });
  CHECK(contains(per_token, "3934144 x 70687142973552"));
  // gather_output::none hands on the shard: no buffer, nothing to overflow but the row itself.
  CHECK(cp::plan_output<cp::gather_output::none>(p, width, elem).extra_bytes() == 0);
  auto const row = error_of<capacity_error>([&] { (void)cp::plan_output<cp::gather_output::none>(p, i64{1} << 40, std::size_t{1} << 30); });
  CHECK(contains(row, "row bytes: width x elem_bytes: 1099511627776 x 1073741824 overflows"));
  // The sum of two representable parts: workspace + output buffer beyond 2^64.
  std::vector<i64> const one{0, 4};
  cp::partition<cp::dual_chunk> const small(one, 2, 0);
  auto const sum = error_of<capacity_error>(
      [&] { (void)cp::plan_output<cp::gather_output::full>(small, 1, std::size_t{1} << 61); });
  CHECK(contains(sum, "output buffer 9223372036854775808 + workspace 9223372036854775808 bytes overflow"));
  // In range: exact.
  auto const ok = cp::plan_output<cp::gather_output::full>(small, 3, 2);
  CHECK(ok.output_buffer_bytes == 4 * 3 * 2);
}
