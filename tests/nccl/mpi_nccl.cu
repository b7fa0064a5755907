// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// Run as: mpiexec -n 2 test_nccl_mpi_nccl   (one process per GPU; needs 2 CUDA devices)
// The NCCL unique id travels over MPI; then every collective is checked against a host
// reference. Checks use CHECK so that a failing rank keeps in step with the other.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "collective_checks.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/mpi/nccl_bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
namespace mpi = headroom::mpi;
using headroom::reduce_op;

namespace {

mpi::environment const env;  // MPI lives from before main to after it

mpi::communicator& world() {
  static mpi::communicator w = mpi::communicator::world();
  return w;
}

// This rank's GPU: its index on the node. Every rank learns whether all ranks have one, so that
// a missing GPU fails every rank with the same message instead of leaving one waiting.
int my_device() {
  static int const device = [] {
    int const local = mpi::local_rank(world());
    int const available = cu::device_count();
    std::int32_t const ok[1] = {local < available ? 1 : 0};
    std::int32_t all_ok[1] = {0};
    world().all_reduce(std::span<std::int32_t const>(ok), std::span<std::int32_t>(all_ok), reduce_op::min);
    return all_ok[0] == 1 ? local : -1;
  }();
  return device;
}

nc::communicator& nccl() {
  static nc::communicator c = mpi::make_nccl_communicator(world(), my_device());
  return c;
}

void require_setup() {
  REQUIRE_MESSAGE(world().size() == 2, "run under mpiexec -n 2; got ", world().size(), " ranks");
  REQUIRE_MESSAGE(my_device() >= 0, "every rank needs its own CUDA device (one process per GPU); this node has ",
                  cu::device_count());
}

}  // namespace

TEST_CASE("the unique id reaches every rank; NCCL ranks match MPI ranks") {
  require_setup();
  ncclUniqueId const id = mpi::broadcast_nccl_unique_id(world(), 1);
  std::vector<std::byte> mine(sizeof id);
  std::memcpy(mine.data(), &id, sizeof id);
  std::vector<std::byte> all(2 * sizeof id);
  world().all_gather(std::span<std::byte const>(mine), std::span<std::byte>(all));
  CHECK(std::memcmp(all.data(), all.data() + sizeof id, sizeof id) == 0);

  auto& c = nccl();
  CHECK(c.rank() == world().rank());
  CHECK(c.size() == world().size());
  CHECK(c.device() == my_device());
  c.check_async();
}

TEST_CASE_TEMPLATE("collectives across processes match the host reference", T, std::int32_t, std::int64_t, float,
                   double, __nv_bfloat16) {
  require_setup();
  auto& c = nccl();
  cu::scoped_device on(c.device());
  cu::stream s;
  cu::async_resource mr(c.device());
  nccl_test::check_all_collectives<T>(c, s, mr, 7, {1, 4099, (std::size_t{1} << 20) + 1});
}

TEST_CASE("split across processes: reversed order") {
  require_setup();
  auto& c = nccl();
  cu::scoped_device on(c.device());
  cu::stream s;
  cu::async_resource mr(c.device());
  nc::communicator swapped = c.split(0, -c.rank());
  CHECK(swapped.rank() == 1 - c.rank());
  nccl_test::stream_buffer<std::int64_t> me(mr, s, 1);
  nccl_test::stream_buffer<std::int64_t> all(mr, s, 2);
  me.upload({100 + c.rank()});
  swapped.all_gather(me.span(), all.span(), s);
  CHECK(all.download() == std::vector<std::int64_t>{101, 100});
}

TEST_CASE("a bad device on one rank fails every rank before NCCL is initialised") {
  require_setup();
  int const device = world().rank() == 0 ? 99 : my_device();
  if (world().rank() == 0)
    CHECK_THROWS_WITH_AS(static_cast<void>(mpi::make_nccl_communicator(world(), device)),
                         doctest::Contains("device 99 out of range"), headroom::invalid_argument);
  else
    CHECK_THROWS_WITH_AS(static_cast<void>(mpi::make_nccl_communicator(world(), device)),
                         doctest::Contains("another rank passed a device that does not exist"),
                         headroom::invalid_argument);
  world().barrier();
}
