// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "headroom/cp/copy_plan.hpp"
#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/layout.hpp"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/output.hpp"
#include "headroom/host/thread_group.hpp"

using namespace headroom;

// ---- compile-time positive and negative checks ----------------------------------------------
namespace {
struct not_a_layout {
  static constexpr std::string_view name = "nope";
};
struct half_layout {  // has a name and multiples but no index maps
  static constexpr std::string_view name = "half";
  static constexpr std::int64_t sequence_multiple(int) { return 1; }
  static constexpr std::int64_t total_multiple(int) { return 1; }
};
template <class L>
concept can_partition = requires { typename cp::partition<L>; sizeof(cp::partition<L>); };

template <class T>
concept splittable = requires(cp::partition<> const& p, cp::matrix_view<T const> g, cp::matrix_view<T> l) { cp::split(p, g, l); };
template <class T>
concept adjoint_gatherable = requires(host::thread_communicator& c, cp::partition<> const& p, cp::matrix_view<T const> dy,
                                      cp::matrix_view<T> dx) { cp::gather_adjoint(c, p, dy, dx, dx); };
}  // namespace

static_assert(cp::layout_policy<cp::dual_chunk>);
static_assert(cp::layout_policy<cp::contiguous>);
static_assert(!cp::layout_policy<not_a_layout>);
static_assert(!cp::layout_policy<half_layout>);
static_assert(!cp::layout_policy<int>);
static_assert(can_partition<cp::dual_chunk>);

static_assert(cp::cu_index<std::int32_t> && cp::cu_index<std::int64_t> && cp::cu_index<std::int32_t const>);
static_assert(!cp::cu_index<std::uint32_t> && !cp::cu_index<std::uint64_t> && !cp::cu_index<float> && !cp::cu_index<short>);

static_assert(cp::gather_output_policy<cp::gather_output::full>);
static_assert(cp::gather_output_policy<cp::gather_output::none>);
static_assert(cp::gather_output_policy<cp::gather_output::per_token>);
static_assert(!cp::gather_output_policy<cp::dual_chunk> && !cp::gather_output_policy<int>);
static_assert(cp::loss_placement_policy<cp::loss_placement::cp_local>);
static_assert(!cp::loss_placement_policy<cp::gather_output::none>);
static_assert(cp::vector_policy_type<cp::vector_policy::widest> && !cp::vector_policy_type<cp::gather_output::full>);

static_assert(cp::row_element<float> && cp::row_element<std::uint8_t>);
static_assert(!cp::row_element<std::string>);       // not trivially copyable
static_assert(!cp::row_element<std::vector<int>>);
static_assert(!cp::row_element<float const>);       // output element types are mutable
static_assert(splittable<double>);
static_assert(adjoint_gatherable<float>);
// An element that is not a row_element, and gather_adjoint on one that is not arithmetic (it sums),
// stop at a sentence, a hard error: tests/cp/compile_fail/cp_*.cpp.

// A read-only view never turns back into a writable one.
static_assert(std::is_convertible_v<cp::matrix_view<int>, cp::matrix_view<int const>>);
static_assert(!std::is_convertible_v<cp::matrix_view<int const>, cp::matrix_view<int>>);
static_assert(!std::is_convertible_v<cp::matrix_view<float>, cp::matrix_view<int>>);

// The index math is constexpr-usable and shared with the kernels.
constexpr std::int64_t reference_cu[] = {0, 8, 20};
static_assert(cp::dual_chunk::locate(reference_cu, 2, 20, 2, 0, 2).global_row == 6);
static_assert(cp::dual_chunk::locate(reference_cu, 2, 20, 2, 1, 9).global_row == 16);
static_assert(cp::dual_chunk::owner(reference_cu, 2, 20, 2, 11).rank == 1);
static_assert(cp::contiguous::owner(reference_cu, 2, 20, 2, 11).local_row == 1);
static_assert(cp::dual_chunk::sequence_multiple(1) == 1 && cp::dual_chunk::sequence_multiple(4) == 8);

// ---- copy plans (the host half of the vector-path checks) ----------------------------------
TEST_CASE("plan_copy picks the widest access the rows and every buffer allow") {
  alignas(16) static unsigned char buf[64];
  CHECK(cp::plan_copy(8192, {{"in", buf}, {"out", buf + 32}}, "t").vector_bytes == 16);
  CHECK(cp::plan_copy(8192, {{"in", buf}, {"out", buf + 32}}, "t").vectors_per_row == 512);
  CHECK(cp::plan_copy(24, {{"in", buf}, {"out", buf}}, "t").vector_bytes == 8);
  CHECK(cp::plan_copy(8192, {{"in", buf + 4}, {"out", buf}}, "t").vector_bytes == 4);
  CHECK(cp::plan_copy(6, {{"in", buf}}, "t").vector_bytes == 2);
  CHECK(cp::plan_copy(3, {{"in", buf}}, "t").vector_bytes == 1);
  CHECK(cp::plan_copy(32, {{"in", buf + 1}}, "t").vector_bytes == 1);
  CHECK(cp::plan_copy(32, {{"in", buf}}, "t").describe() == "cp::copy_plan{row 32 B as 2 x 16 B}");
}

TEST_CASE("vector_policy::require_16 rejects misaligned widths and addresses, naming them") {
  alignas(16) static unsigned char buf[64];
  using r16 = cp::vector_policy::require_16;
  CHECK(cp::plan_copy<r16>(8192, {{"in", buf}, {"out", buf + 16}}, "op").vector_bytes == 16);
  // 4095 bf16 = 8190 bytes per row.
  CHECK_THROWS_WITH_AS((void)cp::plan_copy<r16>(8190, {{"in", buf}}, "op"),
                       doctest::Contains("got 8190 bytes per row (14 left over)"), invalid_argument);
  CHECK_THROWS_WITH_AS((void)cp::plan_copy<r16>(8192, {{"in", buf}, {"out", buf + 8}}, "op"),
                       doctest::Contains("out starts at"), invalid_argument);
  CHECK_THROWS_WITH_AS((void)cp::plan_copy(0, {{"in", buf}}, "op"), doctest::Contains("row of 0 bytes"), invalid_argument);
}

TEST_CASE("fast_divmod (the kernels' row / vector split) equals / and % on [0, 2^31)") {
  std::mt19937_64 gen(8);
  auto check_divisor = [&](std::uint32_t d) {
    cp::detail::fast_divmod const f(d);
    std::vector<std::uint32_t> ns{0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, (1u << 31) - 1, (1u << 31) - d, (1u << 30)};
    for (int i = 0; i < 64; ++i) ns.push_back(static_cast<std::uint32_t>(gen() % (1u << 31)));
    for (int i = 0; i < 16; ++i) {
      std::uint64_t const m = (gen() % ((1u << 31) / d)) * d;
      ns.push_back(static_cast<std::uint32_t>(m));
      if (m > 0) ns.push_back(static_cast<std::uint32_t>(m - 1));
    }
    bool ok = true;
    for (std::uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      std::uint32_t q = 0, r = 0;
      f.divide(n, q, r);
      ok = ok && q == n / d && r == n % d;
      if (!(q == n / d && r == n % d)) FAIL_CHECK("divisor " << d << ", n " << n << ": got " << q << " r " << r);
    }
    return ok;
  };
  bool all = true;
  for (std::uint32_t d = 1; d <= 4096; ++d) all = check_divisor(d) && all;
  for (std::uint32_t d : {18992u, 8191u, 65535u, 65536u, 1u << 20, (1u << 30) - 1, 1u << 29, 151936u * 2 / 16})
    all = check_divisor(d) && all;
  for (int i = 0; i < 2000; ++i) all = check_divisor(1 + static_cast<std::uint32_t>(gen() % ((1u << 30) - 1))) && all;
  CHECK(all);
}
