// SPDX-License-Identifier: Apache-2.0
// Run as: mpiexec -n 4 test_mpi_mpi_communicator
// Every rank runs every test case in the same order. Data checks use CHECK (not REQUIRE) so a
// failing rank keeps issuing the same collectives as the others instead of leaving them waiting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/mpi/communicator.hpp"

using headroom::reduce_op;
namespace mpi = headroom::mpi;

static_assert(headroom::communicator<mpi::communicator>);
static_assert(std::is_same_v<mpi::communicator::stream_type, headroom::host::inline_stream>);
static_assert(!std::copyable<mpi::communicator> && std::movable<mpi::communicator>);

namespace {

// Initialised before main (doctest owns main) and finalised after it.
mpi::environment const env;

mpi::communicator& world() {
  static mpi::communicator w = mpi::communicator::world();
  return w;
}

// Every rank draws every rank's data from a shared seed, so each computes the reference locally.
// Values are small integers, so sums are exact in every type and any reduction order, and
// never overflow: 8-bit overflow is not portable (Open MPI's AVX ops saturate int8 sums).
template <class T>
std::vector<T> rank_data(int rank, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed * 1000003u + static_cast<std::uint64_t>(rank));
  int const hi = sizeof(T) == 1 ? 31 : 100;
  std::uniform_int_distribution<int> d(std::is_signed_v<T> ? -hi : 0, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(gen));
  return v;
}

template <class T>
T combine(T a, T b, reduce_op op) {
  switch (op) {
    case reduce_op::sum: return static_cast<T>(a + b);
    case reduce_op::max: return std::max(a, b);
    case reduce_op::min: return std::min(a, b);
  }
  return a;
}

template <class T>
std::vector<T> reduced(int nranks, std::size_t n, std::uint64_t seed, reduce_op op) {
  auto acc = rank_data<T>(0, n, seed);
  for (int r = 1; r < nranks; ++r) {
    auto const other = rank_data<T>(r, n, seed);
    for (std::size_t i = 0; i < n; ++i) acc[i] = combine(acc[i], other[i], op);
  }
  return acc;
}

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::max, reduce_op::min};
constexpr std::size_t sizes[] = {0, 1, 7, 1000, 65537};

template <class T>
void check_collectives(mpi::communicator& c, std::uint64_t seed) {
  int const n = c.size();
  auto const un = static_cast<std::size_t>(n);
  for (std::size_t count : sizes) {
    CAPTURE(count);
    for (auto op : all_ops) {
      CAPTURE(static_cast<int>(op));
      auto const mine = rank_data<T>(c.rank(), count, seed + count);
      auto const expect = reduced<T>(n, count, seed + count, op);
      // out of place
      std::vector<T> out(count, T{});
      c.all_reduce(std::span<T const>(mine), std::span<T>(out), op);
      CHECK(out == expect);
      // in place
      std::vector<T> buf = mine;
      c.all_reduce(std::span<T const>(buf), std::span<T>(buf), op);
      CHECK(buf == expect);

      // reduce_scatter: in has count * n elements; rank r gets block r of the reduction
      auto const rs_in = rank_data<T>(c.rank(), count * un, seed + 7 * count + 1);
      auto const rs_all = reduced<T>(n, count * un, seed + 7 * count + 1, op);
      std::vector<T> rs_out(count, T{});
      c.reduce_scatter(std::span<T const>(rs_in), std::span<T>(rs_out), op);
      std::vector<T> const rs_expect(rs_all.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(c.rank())),
                                     rs_all.begin() + static_cast<std::ptrdiff_t>(count * (static_cast<std::size_t>(c.rank()) + 1)));
      CHECK(rs_out == rs_expect);
    }

    // all_gather: rank-major concatenation; then in place
    auto const mine = rank_data<T>(c.rank(), count, seed + 3 * count + 2);
    std::vector<T> gathered(count * un, T{});
    c.all_gather(std::span<T const>(mine), std::span<T>(gathered));
    std::vector<T> expect;
    for (int r = 0; r < n; ++r) {
      auto const v = rank_data<T>(r, count, seed + 3 * count + 2);
      expect.insert(expect.end(), v.begin(), v.end());
    }
    CHECK(gathered == expect);
    std::vector<T> in_place(count * un, T{});
    std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(c.rank())));
    c.all_gather(std::span<T const>(in_place.data() + count * static_cast<std::size_t>(c.rank()), count),
                 std::span<T>(in_place));
    CHECK(in_place == expect);

    // broadcast from every root
    for (int root = 0; root < n; ++root) {
      std::vector<T> b = rank_data<T>(c.rank(), count, seed + 11 * count + 5);
      c.broadcast(std::span<T>(b), root);
      CHECK(b == rank_data<T>(root, count, seed + 11 * count + 5));
    }
  }
}

}  // namespace

TEST_CASE("world has 4 ranks (run under mpiexec -n 4)") {
  REQUIRE_MESSAGE(world().size() == 4, "this test expects mpiexec -n 4, got ", world().size(), " ranks");
  CHECK(world().rank() >= 0);
  CHECK(world().rank() < 4);
  CHECK(env.thread_level() >= MPI_THREAD_FUNNELED);
  CHECK(world().valid());
  CHECK(world().get() != MPI_COMM_WORLD);  // a private dup
  int handler_is_return = 0;
  MPI_Errhandler h{};
  MPI_Comm_get_errhandler(world().get(), &h);
  handler_is_return = h == MPI_ERRORS_RETURN ? 1 : 0;
  MPI_Errhandler_free(&h);
  CHECK(handler_is_return == 1);
}

TEST_CASE_TEMPLATE("collectives match a host reference on random data", T, std::int32_t, std::int64_t, float, double,
                   std::uint32_t, std::uint64_t, std::int8_t, std::uint8_t) {
  check_collectives<T>(world(), 42);
}

TEST_CASE("floating-point sums with non-integer values agree with the reference to rounding") {
  auto& c = world();
  std::mt19937_64 gen(99 + static_cast<std::uint64_t>(c.rank()));
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> mine(4096);
  for (auto& x : mine) x = d(gen);
  std::vector<double> sum(mine.size());
  c.all_reduce(std::span<double const>(mine), std::span<double>(sum), reduce_op::sum);
  std::vector<double> all(mine.size() * static_cast<std::size_t>(c.size()));
  c.all_gather(std::span<double const>(mine), std::span<double>(all));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    double expect = 0;
    for (int r = 0; r < c.size(); ++r) expect += all[static_cast<std::size_t>(r) * mine.size() + i];
    CHECK(sum[i] == doctest::Approx(expect).epsilon(1e-12));
  }
  // Every rank holds bitwise identical results.
  std::vector<double> sums(sum.size() * static_cast<std::size_t>(c.size()));
  c.all_gather(std::span<double const>(sum), std::span<double>(sums));
  for (int r = 1; r < c.size(); ++r)
    CHECK(std::equal(sum.begin(), sum.end(), sums.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * sum.size())));
}

TEST_CASE("send / recv around a ring, sendrecv, and barrier") {
  auto& c = world();
  int const n = c.size();
  int const next = (c.rank() + 1) % n;
  int const prev = (c.rank() + n - 1) % n;
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{100000}}) {
    auto const mine = rank_data<std::int64_t>(c.rank(), count, 5);
    std::vector<std::int64_t> got(count, -1);
    // Even ranks send first, odd ranks receive first: no ordering deadlock even for large messages.
    if (c.rank() % 2 == 0) {
      c.send(std::span<std::int64_t const>(mine), next);
      c.recv(std::span<std::int64_t>(got), prev);
    } else {
      c.recv(std::span<std::int64_t>(got), prev);
      c.send(std::span<std::int64_t const>(mine), next);
    }
    CHECK(got == rank_data<std::int64_t>(prev, count, 5));

    std::vector<float> fmine(count, static_cast<float>(c.rank()));
    std::vector<float> fgot(count, -1.0f);
    c.sendrecv(std::span<float const>(fmine), next, std::span<float>(fgot), prev);
    CHECK(fgot == std::vector<float>(count, static_cast<float>(prev)));
  }
  c.barrier();
  c.barrier(headroom::host::inline_stream{});
}

TEST_CASE("std::byte moves as raw bytes") {
  auto& c = world();
  std::vector<std::byte> b(33, std::byte{0});
  if (c.rank() == 2)
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 7);
  c.broadcast(std::span<std::byte>(b), 2);
  for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == static_cast<std::byte>(i * 7));
}

TEST_CASE("recv of the wrong length throws collective_mismatch on the receiver") {
  auto& c = world();
  // rank 0 sends 5 elements to rank 1, which posts a receive of 8 (a shorter message arrives)
  // and then a receive of 2 (a longer one: MPI_ERR_TRUNCATE).
  if (c.rank() == 0) {
    std::vector<std::int32_t> five(5, 1);
    c.send(std::span<std::int32_t const>(five), 1);
    c.send(std::span<std::int32_t const>(five), 1);
  } else if (c.rank() == 1) {
    std::vector<std::int32_t> eight(8);
    CHECK_THROWS_WITH_AS(c.recv(std::span<std::int32_t>(eight), 0),
                         doctest::Contains("expected 8 elements from rank 0, got 5"), headroom::collective_mismatch);
    std::vector<std::int32_t> two(2);
    CHECK_THROWS_AS(c.recv(std::span<std::int32_t>(two), 0), headroom::collective_mismatch);
  }
  c.barrier();
}

TEST_CASE("split: color by parity, keys reverse the order, no_color gives an empty communicator") {
  auto& c = world();
  auto half = c.split(c.rank() % 2, -c.rank());
  REQUIRE(half.valid());
  CHECK(half.size() == c.size() / 2);
  std::int32_t const me[1] = {c.rank()};
  std::vector<std::int32_t> members(static_cast<std::size_t>(half.size()));
  half.all_gather(std::span<std::int32_t const>(me), std::span<std::int32_t>(members));
  // Sorted by key = -rank: the highest parent rank first.
  std::vector<std::int32_t> expect;
  for (int r = c.size() - 1; r >= 0; --r)
    if (r % 2 == c.rank() % 2) expect.push_back(r);
  CHECK(members == expect);
  CHECK(members[static_cast<std::size_t>(half.rank())] == c.rank());

  // Sum within the half only.
  std::int64_t const one[1] = {c.rank()};
  std::int64_t sum[1] = {0};
  half.all_reduce(std::span<std::int64_t const>(one), std::span<std::int64_t>(sum), reduce_op::sum);
  std::int64_t expect_sum = 0;
  for (auto r : expect) expect_sum += r;
  CHECK(sum[0] == expect_sum);

  auto only_zero = c.split(c.rank() == 0 ? 0 : mpi::communicator::no_color, 0);
  CHECK(only_zero.valid() == (c.rank() == 0));
  if (c.rank() == 0) CHECK(only_zero.size() == 1);
  else CHECK_THROWS_AS(static_cast<void>(only_zero.size()), headroom::logic_error);

  // Moving keeps one owner.
  mpi::communicator moved = std::move(half);
  CHECK_FALSE(half.valid());  // NOLINT(bugprone-use-after-move)
  CHECK(moved.valid());
  moved.barrier();
}

TEST_CASE("local argument errors throw invalid_argument naming the values, before any MPI call") {
  auto& c = world();
  int const n = c.size();
  std::vector<float> a(10), b(9), big(10 * static_cast<std::size_t>(n) + 1);
  CHECK_THROWS_WITH_AS(c.all_reduce(std::span<float const>(a), std::span<float>(b), reduce_op::sum),
                       doctest::Contains("in has 10 elements, out has 9"), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.all_gather(std::span<float const>(a), std::span<float>(big)),
                       doctest::Contains("out has 41 elements; expected in.size() * size() = 10 * 4 = 40"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.reduce_scatter(std::span<float const>(big), std::span<float>(a), reduce_op::max),
                       doctest::Contains("in has 41 elements"), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.broadcast(std::span<float>(a), n), doctest::Contains("root 4 out of range [0, 4)"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.broadcast(std::span<float>(a), -1), doctest::Contains("root -1 out of range"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.send(std::span<float const>(a), 7), doctest::Contains("peer 7 out of range [0, 4)"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.recv(std::span<float>(a), -2), doctest::Contains("peer -2 out of range"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(c.sendrecv(std::span<float const>(a), 0, std::span<float>(b), 9),
                       doctest::Contains("src 9 out of range"), headroom::invalid_argument);
  // Partly overlapping buffers (not the in-place layout).
  std::vector<double> v(20);
  CHECK_THROWS_WITH_AS(c.all_reduce(std::span<double const>(v.data(), 10), std::span<double>(v.data() + 5, 10), reduce_op::sum),
                       doctest::Contains("overlap"), headroom::invalid_argument);
  CHECK_THROWS_AS(static_cast<void>(c.split(-5, 0)), headroom::invalid_argument);
  CHECK_THROWS_AS(c.all_reduce(std::span<float const>(a), std::span<float>(a), static_cast<reduce_op>(9)),
                  headroom::invalid_argument);
  mpi::communicator empty;
  CHECK_THROWS_WITH_AS(empty.barrier(), doctest::Contains("empty communicator"), headroom::logic_error);
  // The group is still in step: a collective after the rejected calls works.
  std::int32_t const one[1] = {1};
  std::int32_t total[1] = {0};
  c.all_reduce(std::span<std::int32_t const>(one), std::span<std::int32_t>(total), reduce_op::sum);
  CHECK(total[0] == n);
}

TEST_CASE("an MPI failure throws mpi_error with MPI's text, the call and file:line") {
  auto& c = world();
  // An invalid datatype handle makes MPI_Send fail locally (MPI_ERRORS_RETURN on our dup).
  int x = 0;
  bool threw = false;
  try {
    HEADROOM_MPI_TRY(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, c.get()));
  } catch (headroom::mpi_error const& e) {
    threw = true;
    std::string const what = e.what();
    CHECK(what.find("MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, c.get())") != std::string::npos);
    CHECK(what.find("mpi_communicator.cpp:") != std::string::npos);
    CHECK(what.find("MPI_ERR") != std::string::npos);
  }
  CHECK(threw);
  c.barrier();
}
