// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <mpi.h>

#include <vector>

// Checks the mpi_* registration path: the program runs under mpiexec with several ranks, each
// rank runs the doctest cases. It uses MPI directly; the MPI substrate has its own tests.
namespace {

struct mpi_session {
  mpi_session() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
  }
  ~mpi_session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
};

mpi_session& session() {
  static mpi_session s;
  return s;
}

}  // namespace

TEST_CASE("mpiexec started several ranks that agree on a sum") {
  session();
  int rank = -1;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2);
  REQUIRE(rank >= 0);
  REQUIRE(rank < size);

  long long const mine = rank + 1;
  long long total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(total == static_cast<long long>(size) * (size + 1) / 2);

  std::vector<int> ranks(static_cast<std::size_t>(size), -1);
  MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) CHECK(ranks[static_cast<std::size_t>(r)] == r);
}
