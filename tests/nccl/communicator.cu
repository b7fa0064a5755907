// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// One process, two GPUs, one thread per GPU (launch_per_device). Needs 2 CUDA devices.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "collective_checks.cuh"
#include "headroom/core/communicator.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/nccl/mem_resource.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
using headroom::reduce_op;
using nccl_test::stream_buffer;

static_assert(headroom::communicator<nc::communicator>);

namespace {

std::vector<int> two_devices() {
  int const n = cu::device_count();
  REQUIRE_MESSAGE(n >= 2, "this test needs 2 CUDA devices (one rank per GPU), found ", n);
  return {0, 1};
}

std::vector<std::size_t> const counts = {1, 1000, (std::size_t{1} << 20) + 3};

}  // namespace

TEST_CASE("launch_per_device: one rank per device, that device current, ranks and sizes") {
  auto const devices = two_devices();
  std::atomic<int> ran{0};
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    CHECK(c.valid());
    CHECK(c.size() == 2);
    CHECK(c.device() == devices[static_cast<std::size_t>(c.rank())]);
    CHECK(cu::current_device() == c.device());
    CHECK(c.get() != nullptr);
    CHECK_FALSE(c.aborted());
    CHECK(c.async_error() == ncclSuccess);
    c.check_async();
    ++ran;
  });
  CHECK(ran.load() == 2);
}

TEST_CASE_TEMPLATE("every collective matches the host reference on random data", T, std::int32_t, std::int64_t, float,
                   double, __nv_bfloat16, __half) {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    cu::stream s;
    cu::async_resource mr(c.device());
    nccl_test::check_all_collectives<T>(c, s, mr, 2024, counts);
  });
}

TEST_CASE("float and double sums of non-integer values: exact for two ranks, identical on both") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    cu::stream s;
    cu::async_resource mr(c.device());
    std::size_t const n = 100003;
    auto draw = [&](int rank) {
      std::mt19937_64 gen(77 + static_cast<std::uint64_t>(rank));
      std::uniform_real_distribution<double> d(-1e3, 1e3);
      std::vector<double> v(n);
      for (auto& x : v) x = d(gen);
      return v;
    };
    auto const mine = draw(c.rank());
    auto const a = draw(0);
    auto const b = draw(1);
    stream_buffer<double> in(mr, s, n);
    stream_buffer<double> out(mr, s, n);
    in.upload(mine);
    c.all_reduce(in.span(), out.span(), reduce_op::sum, s);
    auto const got = out.download();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += got[i] != a[i] + b[i];  // a + b == b + a exactly
    CHECK(bad == 0);

    std::vector<float> fmine(n), fa(n), fb(n);
    for (std::size_t i = 0; i < n; ++i) {
      fmine[i] = static_cast<float>(mine[i]);
      fa[i] = static_cast<float>(a[i]);
      fb[i] = static_cast<float>(b[i]);
    }
    stream_buffer<float> fin(mr, s, n);
    fin.upload(fmine);
    c.all_reduce(fin.span(), fin.span(), reduce_op::sum, s);
    auto const fgot = fin.download();
    std::size_t fbad = 0;
    for (std::size_t i = 0; i < n; ++i) fbad += fgot[i] != fa[i] + fb[i];
    CHECK(fbad == 0);
  });
}

TEST_CASE("zero-element collectives are accepted and complete") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    cu::stream s;
    cu::async_resource mr(c.device());
    stream_buffer<float> a(mr, s, 0);
    stream_buffer<float> b(mr, s, 0);
    c.all_reduce(a.span(), b.span(), reduce_op::sum, s);
    c.all_gather(a.span(), b.span(), s);
    c.reduce_scatter(a.span(), b.span(), reduce_op::max, s);
    c.broadcast(a.span(), 1, s);
    c.barrier(s);
    s.synchronize();
    c.check_async();
  });
}

TEST_CASE("bad arguments throw invalid_argument naming the values, before any NCCL call") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    cu::stream s;
    cu::async_resource mr(c.device());
    stream_buffer<float> ten(mr, s, 10);
    stream_buffer<float> nine(mr, s, 9);
    stream_buffer<float> twenty_one(mr, s, 21);
    if (c.rank() == 0) {
      // Only rank 0 makes these calls. Had any reached NCCL, rank 0's next collective would pair
      // with the wrong call of rank 1 and the check at the end would fail (or hang).
      CHECK_THROWS_WITH_AS(c.all_reduce(ten.span(), nine.span(), reduce_op::sum, s),
                           doctest::Contains("all_reduce: in has 10 elements, out has 9"), headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.all_gather(ten.span(), twenty_one.span(), s),
                           doctest::Contains("out has 21 elements; expected in.size() * size() = 10 * 2 = 20"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.reduce_scatter(twenty_one.span(), ten.span(), reduce_op::sum, s),
                           doctest::Contains("in has 21 elements; expected out.size() * size() = 10 * 2 = 20"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.broadcast(ten.span(), 2, s), doctest::Contains("root 2 out of range [0, 2)"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.broadcast(ten.span(), -1, s), doctest::Contains("root -1 out of range"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.send(ten.span(), 2, s), doctest::Contains("send: peer 2 out of range [0, 2)"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.recv(ten.span(), -3, s), doctest::Contains("recv: peer -3 out of range"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.sendrecv(ten.span(), 1, nine.span(), 5, s), doctest::Contains("src 5 out of range"),
                           headroom::invalid_argument);
      // The legacy default stream, however spelled.
      CHECK_THROWS_WITH_AS(c.all_reduce(ten.span(), ten.span(), reduce_op::sum, cu::stream_view{}),
                           doctest::Contains("all_reduce: needs a created CUDA stream, got cudaStream_t 0"),
                           headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.barrier(cu::stream_view::legacy_default()), doctest::Contains("cudaStreamLegacy"),
                           headroom::invalid_argument);
      CHECK_THROWS_AS(c.send(ten.span(), 1, cu::stream_view{}), headroom::invalid_argument);
      // Null data with a non-zero count; partly overlapping buffers.
      CHECK_THROWS_WITH_AS(c.all_reduce(std::span<float const>(static_cast<float const*>(nullptr), 4), ten.span().first(4),
                                        reduce_op::sum, s),
                           doctest::Contains("in is null with 4 elements"), headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(c.all_reduce(twenty_one.span().first(10), twenty_one.span().subspan(5, 10), reduce_op::sum, s),
                           doctest::Contains("overlap without being the in-place layout"), headroom::invalid_argument);
      // in overlaps out but is not block rank() (== 0) of it
      CHECK_THROWS_AS(c.all_gather(twenty_one.span().subspan(5, 10), twenty_one.span().first(20), s),
                      headroom::invalid_argument);
      CHECK_THROWS_AS(c.all_reduce(ten.span(), ten.span(), static_cast<reduce_op>(7), s), headroom::invalid_argument);
      CHECK_THROWS_WITH_AS(static_cast<void>(c.split(-7, 0)), doctest::Contains("color -7"), headroom::invalid_argument);
      CHECK_THROWS_AS(static_cast<void>(c.register_buffer(nullptr, 16)), headroom::invalid_argument);
    }
    // Both ranks: one correct collective; its result proves the group is still in step.
    stream_buffer<std::int32_t> one(mr, s, 1);
    one.upload({c.rank() + 1});
    c.all_reduce(one.span(), one.span(), reduce_op::sum, s);
    CHECK(one.download()[0] == 3);
    c.check_async();
  });
}

TEST_CASE("an empty communicator refuses every call with logic_error") {
  nc::communicator empty;
  CHECK_FALSE(empty.valid());
  CHECK_FALSE(static_cast<bool>(empty));
  CHECK_THROWS_WITH_AS(static_cast<void>(empty.rank()), doctest::Contains("empty communicator"), headroom::logic_error);
  CHECK_THROWS_AS(empty.check_async(), headroom::logic_error);
  CHECK_NOTHROW(empty.abort());  // a no-op
  CHECK_THROWS_AS(static_cast<void>(nc::communicator::adopt(nullptr)), headroom::invalid_argument);
}

TEST_CASE("make_local_group and first_devices validate the device list") {
  int const n = cu::device_count();
  std::string const expected = "needs " + std::to_string(n + 1) + " CUDA devices, found " + std::to_string(n);
  CHECK_THROWS_WITH_AS(static_cast<void>(nc::first_devices(n + 1)), doctest::Contains(expected.c_str()),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(nc::make_local_group({})), doctest::Contains("no devices"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(nc::make_local_group({0, n})), doctest::Contains("out of range"),
                       headroom::invalid_argument);
  if (n >= 1)
    CHECK_THROWS_WITH_AS(static_cast<void>(nc::make_local_group({0, 0})), doctest::Contains("device 0 listed twice"),
                         headroom::invalid_argument);
}

TEST_CASE("make_local_group from one thread; group drives both GPUs from it") {
  auto const devices = two_devices();
  auto comms = nc::make_local_group(devices);
  REQUIRE(comms.size() == 2);
  std::vector<cu::stream> streams;
  std::vector<cu::async_resource> pools;
  for (auto& c : comms) {
    cu::scoped_device on(c.device());
    streams.emplace_back();
    pools.emplace_back(c.device());
  }
  std::vector<std::int64_t*> bufs(2);
  for (std::size_t r = 0; r < 2; ++r) {
    cu::scoped_device on(comms[r].device());
    bufs[r] = static_cast<std::int64_t*>(pools[r].allocate(streams[r], 4 * sizeof(std::int64_t)));
    std::int64_t const host[4] = {static_cast<std::int64_t>(r), 10, -5 * static_cast<std::int64_t>(r), 1};
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(bufs[r], host, sizeof host, cudaMemcpyHostToDevice, streams[r].get()));
  }
  {
    nc::group g;  // one thread issues for both ranks
    for (std::size_t r = 0; r < 2; ++r)
      comms[r].all_reduce(std::span<std::int64_t const>(bufs[r], 4), std::span<std::int64_t>(bufs[r], 4), reduce_op::sum,
                          streams[r]);
    g.end();
  }
  for (std::size_t r = 0; r < 2; ++r) {
    cu::scoped_device on(comms[r].device());
    std::int64_t host[4] = {};
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(host, bufs[r], sizeof host, cudaMemcpyDeviceToHost, streams[r].get()));
    streams[r].synchronize();
    CHECK(host[0] == 1);
    CHECK(host[1] == 20);
    CHECK(host[2] == -5);
    CHECK(host[3] == 2);
    pools[r].deallocate(streams[r], bufs[r], 4 * sizeof(std::int64_t));
    streams[r].synchronize();
  }
}

TEST_CASE("registration: nccl_mem_resource and cudaMalloc buffers register, work, and deregister") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    cu::stream s;
    nc::nccl_mem_resource nmr;
    std::size_t const n = 1 << 20;
    auto* p = static_cast<float*>(nmr.allocate(s, n * sizeof(float)));
    REQUIRE(p != nullptr);
    {
      nc::registration reg = c.register_buffer(std::span<float>(p, n));
      CHECK(reg.active());
      CHECK(reg.data() == p);
      CHECK(reg.size() == n * sizeof(float));
      WARN_MESSAGE(reg.handle() != nullptr, "NCCL returned a null registration handle (NCCL_LOCAL_REGISTER=0?)");
      std::vector<float> host(n, static_cast<float>(c.rank() + 1));
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s.get()));
      c.all_reduce(std::span<float const>(p, n), std::span<float>(p, n), reduce_op::sum, s);
      HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();
      std::size_t bad = 0;
      for (float x : host) bad += x != 3.0f;
      CHECK(bad == 0);
      nc::registration moved = std::move(reg);
      CHECK_FALSE(reg.active());  // NOLINT(bugprone-use-after-move)
      CHECK(moved.active());
      moved.reset();
      CHECK_FALSE(moved.active());
    }
    nmr.deallocate(s, p, n * sizeof(float));

    cu::device_resource dr;
    void* q = dr.allocate(s, 1 << 16);
    {
      auto reg = c.register_buffer(q, 1 << 16);
      CHECK(reg.active());
    }  // deregistered here
    dr.deallocate(s, q, 1 << 16);

    // A registration keeps the NCCL communicator alive after the communicator object is gone.
    nc::registration outliving;
    void* r = dr.allocate(s, 4096);
    {
      nc::communicator mine = std::move(c);
      outliving = mine.register_buffer(r, 4096);
    }
    CHECK(outliving.active());
    outliving.reset();  // deregisters, then the last reference destroys the communicator
    dr.deallocate(s, r, 4096);
  });
}

TEST_CASE("split: by rank (two singletons), by key (order reversed), no_color; view and finalize") {
  auto const devices = two_devices();
  nc::launch_per_device(devices, [&](nc::communicator& c) {
    cu::stream s;
    cu::async_resource mr(c.device());

    nc::communicator solo = c.split(c.rank(), 0);
    REQUIRE(solo.valid());
    CHECK(solo.size() == 1);
    CHECK(solo.rank() == 0);
    CHECK(solo.device() == c.device());
    stream_buffer<double> x(mr, s, 3);
    x.upload({1.5 * c.rank(), 2.0, -1.0});
    solo.all_reduce(x.span(), x.span(), reduce_op::sum, s);  // a group of one: the identity
    auto const xs = x.download();
    CHECK(xs[0] == 1.5 * c.rank());
    CHECK(xs[1] == 2.0);

    nc::communicator swapped = c.split(0, -c.rank());
    REQUIRE(swapped.valid());
    CHECK(swapped.size() == 2);
    CHECK(swapped.rank() == 1 - c.rank());
    stream_buffer<std::int32_t> me(mr, s, 1);
    stream_buffer<std::int32_t> all(mr, s, 2);
    me.upload({c.rank()});
    swapped.all_gather(me.span(), all.span(), s);
    auto const order = all.download();
    CHECK(order == std::vector<std::int32_t>{1, 0});  // new rank 0 is old rank 1

    nc::communicator only_zero = c.split(c.rank() == 0 ? 0 : nc::communicator::no_color, 0);
    CHECK(only_zero.valid() == (c.rank() == 0));
    if (c.rank() == 0) CHECK(only_zero.size() == 1);
    else CHECK_THROWS_AS(static_cast<void>(only_zero.size()), headroom::logic_error);

    // A non-owning view of the same NCCL communicator.
    {
      nc::communicator v = nc::communicator::view(c.get());
      CHECK(v.rank() == c.rank());
      CHECK(v.size() == c.size());
      CHECK_FALSE(v == c);
    }  // does not destroy it
    c.barrier(s);

    s.synchronize();
    swapped.finalize();  // collective flush; destruction then frees local resources only
  });
}
