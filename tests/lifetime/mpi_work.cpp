// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Asynchronous collectives over guarded host buffers between MPI processes (mpiexec -n 4): the
// same API as on NCCL and thread_group; MPI calls complete before they return, so the handle is
// ready at once and wait() only releases the stash.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "headroom/lifetime/host.hpp"
#include "headroom/lifetime/work.hpp"
#include "headroom/mpi/communicator.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace {
std::vector<std::int64_t> rank_values(int rank, std::size_t n) {
  std::mt19937_64 rng(4242 + static_cast<unsigned>(rank));
  std::uniform_int_distribution<std::int64_t> dist(-1'000'000, 1'000'000);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
constexpr std::int64_t poison = -0x7a7a7a7a;
// Initialised before main (doctest owns main) and finalised after it.
mpi::environment const env;
}  // namespace

TEST_CASE("all_reduce_async and all_gather_async over MPI match host references") {
  auto comm = mpi::communicator::world();
  int const ranks = comm.size();
  int const me = comm.rank();
  constexpr std::size_t n = 513;
  host::aligned_resource heap;
  host::inline_stream s;

  host_guard<> in(heap, s, n * sizeof(std::int64_t), alignof(std::int64_t));
  host_guard<> out(heap, s, n * sizeof(std::int64_t), alignof(std::int64_t));
  auto mine = rank_values(me, n);
  std::copy(mine.begin(), mine.end(), in.as_span<std::int64_t>().begin());
  std::fill(out.as_span<std::int64_t>().begin(), out.as_span<std::int64_t>().end(), poison);
  auto w = all_reduce_async<std::int64_t>(comm, std::move(in), out, reduce_op::sum, s, s);
  CHECK(w.ready());
  CHECK(w.stashed() == 1);
  w.wait(s);
  CHECK(w.stashed() == 0);
  std::vector<std::int64_t> expected(n, 0);
  for (int r = 0; r < ranks; ++r) {
    auto v = rank_values(r, n);
    for (std::size_t i = 0; i < n; ++i) expected[i] += v[i];
  }
  CHECK(std::equal(expected.begin(), expected.end(), out.as_span<std::int64_t>().begin()));

  host_guard<> gathered(heap, s, static_cast<std::size_t>(ranks) * n * sizeof(std::int64_t), alignof(std::int64_t));
  std::fill(gathered.as_span<std::int64_t>().begin(), gathered.as_span<std::int64_t>().end(), poison);
  host_guard<> piece(heap, s, n * sizeof(std::int64_t), alignof(std::int64_t));
  std::copy(mine.begin(), mine.end(), piece.as_span<std::int64_t>().begin());
  auto g = all_gather_async<std::int64_t>(comm, piece, gathered, s, s);
  g.wait(s);
  CHECK(piece.live());  // passed as an lvalue: the caller keeps it
  for (int r = 0; r < ranks; ++r) {
    auto v = rank_values(r, n);
    auto got = gathered.as_span<std::int64_t>().subspan(static_cast<std::size_t>(r) * n, n);
    CHECK(std::equal(v.begin(), v.end(), got.begin()));
  }
}

TEST_CASE("bad local arguments throw on every rank before MPI is called") {
  auto comm = mpi::communicator::world();
  host::aligned_resource heap;
  host::inline_stream s;
  host_guard<> odd(heap, s, 12);
  CHECK_THROWS_WITH_AS((void)all_reduce_async<double>(comm, odd, reduce_op::max, s, s),
                       "lifetime::guard::as_span: 12 bytes is not a multiple of the element size 8", invalid_argument);
  comm.barrier();
}
