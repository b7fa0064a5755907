// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// GPU test (2 GPUs): the reducers over headroom::nccl::communicator, staging through a device
// workspace, checked against host references on random data; the CUDA sources of memory stats.
// Run by tools/gpu-check as test_stats_reduce_nccl (label gpu). Needs 2 GPUs; fails with a
// message on fewer.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "common.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/stats/cuda/sources.hpp"
#include "headroom/stats/cuda/staging.hpp"
#include "headroom/stats.hpp"

namespace hs = headroom::stats;
namespace hc = headroom::cuda;
namespace nccl = headroom::nccl;
using staging = hs::cuda::blocking_device_staging;
using counting = hs::counting_communicator<nccl::communicator>;

static_assert(hs::staging_for<staging, nccl::communicator>);
static_assert(hs::staging_for<staging, counting>);
static_assert(!hs::staging_for<hs::host_staging, nccl::communicator>);  // host buffers never reach NCCL
static_assert(headroom::stream_resource<hs::statistics_resource<hc::async_resource>, hc::stream_view>);
static_assert(headroom::stream_resource<hs::statistics_resource<hc::device_resource>, hc::stream_view>);

namespace {

constexpr int ranks = 2;

std::vector<int> two_devices() {
  int const n = hc::device_count();
  REQUIRE_MESSAGE(n >= ranks, "test_stats_reduce_nccl needs 2 GPUs, found ", n);
  return nccl::first_devices(ranks);
}

// Everything one rank needs to reduce: a stream, a device workspace (poisoned before each use so
// stale words cannot pass for results), optionally a pinned host buffer.
struct rank_setup {
  explicit rank_setup(hs::reduce_plan plan, bool pinned = false)
      : plan(plan), bytes(staging::workspace_bytes(plan, ranks)),
        device(hc::device_resource{}, stream.view(), bytes),
        host(hc::pinned_resource{}, stream.view(), pinned ? bytes : 0) {}
  void poison() {
    HEADROOM_CUDA_TRY(cudaMemsetAsync(device.data(), 0xA5, bytes, stream.get()));
    stream.synchronize();
  }
  hs::reducer<staging> reducer() { return hs::reducer<staging>(plan, staging(device.bytes(), host.bytes())); }
  template <class Nan>
  hs::reducer<staging, Nan> reducer_with() {
    return hs::reducer<staging, Nan>(plan, staging(device.bytes(), host.bytes()));
  }

  hc::stream stream;
  hs::reduce_plan plan;
  std::size_t bytes;
  hs::workspace<hc::device_resource, hc::stream_view> device;
  hs::workspace<hc::pinned_resource, hc::stream_view> host;
};

}  // namespace

TEST_CASE("NCCL max: random reports match the host reference bitwise, one all_reduce each, input unchanged") {
  for (bool pinned : {false, true}) {
    CAPTURE(pinned);
    nccl::launch_per_device(two_devices(), [&](nccl::communicator& c) {
      rank_setup rs(hs::reduce_plan(512), pinned);
      counting comm(c);
      auto reduce = rs.reducer();
      for (std::uint64_t seed = 1; seed <= 25; ++seed) {
        std::size_t const keys = 1 + (seed * 97) % 512;
        bool const nan = seed % 4 == 0;
        auto const mine = stats_test::random_report(c.rank(), keys, seed, nan);
        auto const before = mine;
        std::vector<hs::dynamic_report> all;
        for (int q = 0; q < ranks; ++q) all.push_back(stats_test::random_report(q, keys, seed, nan));
        rs.poison();
        CHECK(reduce.max(mine, comm, rs.stream.view()) == stats_test::reference_max(all));
        CHECK(mine == before);
      }
      CHECK(comm.counts().all_reduce == 25);
      CHECK(comm.counts().collectives() == 25);
    });
  }
}

TEST_CASE("NCCL max: typed max/min fields, integers beyond 2^53, infinities and signed zeros") {
  using mem = hs::report<hs::field<"allocated_bytes.all.peak", std::int64_t>,
                         hs::field<"device_memory.free_bytes", std::int64_t, hs::minimum>, hs::field<"worst", double>,
                         hs::field<"zero", double>, hs::field<"ratio", double, hs::minimum>>;
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    rank_setup rs(hs::reduce_plan::for_report<mem>());
    int const r = c.rank();
    double const inf = std::numeric_limits<double>::infinity();
    mem const in((std::int64_t{1} << 53) + 1 + 2 * r, std::numeric_limits<std::int64_t>::max() - r, r == 0 ? -inf : -1e308,
                 r == 0 ? -0.0 : 0.0, r == 1 ? -inf : 0.25);
    rs.poison();
    auto const out = rs.reducer().max(in, c, rs.stream.view());
    CHECK(out.get<"allocated_bytes.all.peak">() == (std::int64_t{1} << 53) + 3);
    CHECK(out.get<"device_memory.free_bytes">() == std::numeric_limits<std::int64_t>::max() - 1);
    CHECK(out.get<"worst">() == -1e308);
    CHECK_FALSE(std::signbit(out.get<"zero">()));
    CHECK(out.get<"ratio">() == -inf);
    double const nan = std::numeric_limits<double>::quiet_NaN();
    mem const with_nan(0, 0, r == 1 ? nan : 1.0, 0.0, r == 0 ? nan : 0.5);
    CHECK(std::isnan(rs.reducer().max(with_nan, c, rs.stream.view()).get<"worst">()));
    auto const ignored = rs.reducer_with<hs::ignore_nan>().max(with_nan, c, rs.stream.view());
    CHECK(ignored.get<"worst">() == 1.0);
    CHECK(ignored.get<"ratio">() == 0.5);
  });
}

TEST_CASE("NCCL gather and writer variants: per-rank table, argmax ties to the lowest rank") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    rank_setup rs(hs::reduce_plan(8));
    counting comm(c);
    auto reduce = rs.reducer();
    int const r = c.rank();
    hs::dynamic_report in;
    in.set("allocated_bytes.all.peak", std::int64_t{80} - r).set("tie", 3).set("neg", -1.0 - r).set("big", (std::int64_t{1} << 60) + r);
    rs.poison();
    auto const t = reduce.gather(in, comm, rs.stream.view());
    CHECK(comm.counts().all_gather == 1);
    CHECK(t.ranks() == 2);
    CHECK(t.at("allocated_bytes.all.peak").argmax == 0);
    CHECK(t.at("allocated_bytes.all.peak").argmin == 1);
    CHECK(t.at("tie").argmax == 0);
    CHECK(t.at("neg").max == hs::value(-1.0));
    CHECK(t.at("big").max == hs::value((std::int64_t{1} << 60) + 1));
    CHECK(t.at("big").per_rank[0] == hs::value(std::int64_t{1} << 60));
    auto const m = reduce.max_to(1, in, comm, rs.stream.view());
    auto const g = reduce.gather_to(1, in, comm, rs.stream.view());
    CHECK(m.has_value() == (r == 1));
    CHECK(g.has_value() == (r == 1));
    if (m) CHECK(m->integer("allocated_bytes.all.peak") == 80);
    if (g) CHECK(g->at("neg").argmin == 1);
    CHECK(comm.counts().collectives() == 3);
  });
}

TEST_CASE("NCCL: one rank's empty report (the PR #3645 hang) or other keys throw on both ranks; the group survives") {
  std::mutex m;
  std::vector<std::string> messages;
  nccl::launch_per_device(two_devices(), [&](nccl::communicator& c) {
    rank_setup rs(hs::reduce_plan(4));
    auto reduce = rs.reducer();
    int const r = c.rank();
    hs::dynamic_report const full = hs::dynamic_report().set("a", 1).set("b", 2.0);
    hs::dynamic_report const mine = r == 1 ? hs::dynamic_report{} : full;
    hs::dynamic_report const other = r == 0 ? hs::dynamic_report().set("b", 2.0).set("a", 1) : full;
    for (auto const* in : {&mine, &other}) {
      try {
        static_cast<void>(reduce.max(*in, c, rs.stream.view()));
        CHECK_MESSAGE(false, "rank ", r, " did not throw");
      } catch (headroom::collective_mismatch const& e) {
        std::lock_guard lock(m);
        messages.emplace_back(e.what());
      }
      try {
        static_cast<void>(reduce.gather(*in, c, rs.stream.view()));
        CHECK_MESSAGE(false, "rank ", r, " did not throw in gather");
      } catch (headroom::collective_mismatch const&) {
      }
    }
    CHECK(reduce.max(hs::dynamic_report().set("ok", r), c, rs.stream.view()).integer("ok") == 1);
  });
  REQUIRE(messages.size() == 4);
  int empty_mentions = 0;
  for (auto const& s : messages) empty_mentions += s.find("at least one rank's report is empty") != std::string::npos;
  CHECK(empty_mentions == 2);
}

TEST_CASE("NCCL: a workspace smaller than workspace_bytes is rejected on every rank before NCCL runs") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    hc::stream s;
    hs::reduce_plan const plan(64);
    std::size_t const need = staging::workspace_bytes(plan, ranks);
    CHECK(need == std::max(2 * plan.max_words(), plan.gather_words_per_rank() * (1 + ranks)) * 8);
    hs::workspace<hc::device_resource, hc::stream_view> small(hc::device_resource{}, s.view(), plan.max_words() * 8);
    hs::reducer<staging> reduce(plan, staging(small.bytes()));
    hs::dynamic_report in;
    in.set("a", c.rank());
    CHECK_THROWS_WITH_AS(static_cast<void>(reduce.max(in, c, s.view())), doctest::Contains("bytes of device workspace"),
                         headroom::invalid_argument);
    CHECK_THROWS_AS(static_cast<void>(reduce.gather(in, c, s.view())), headroom::invalid_argument);
    hs::workspace<hc::device_resource, hc::stream_view> dev(hc::device_resource{}, s.view(), need);
    hs::workspace<hc::pinned_resource, hc::stream_view> pinned(hc::pinned_resource{}, s.view(), need / 2);
    CHECK_THROWS_WITH_AS(staging(dev.bytes(), pinned.bytes()), doctest::Contains("smaller than the device workspace"),
                         headroom::invalid_argument);
  });
}

TEST_CASE("CUDA sources: cudaMemGetInfo, cudaMemPool_t attributes and the statistics adaptor, reduced across GPUs") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    hc::stream s;
    int const dev = c.device();
    auto const info = hs::cuda::device_memory(dev);
    CHECK(info.get<"device_memory.total_bytes">() > 0);
    CHECK(info.get<"device_memory.free_bytes">() <= info.get<"device_memory.total_bytes">());
    CHECK(info.get<"device_memory.used_bytes">() ==
          info.get<"device_memory.total_bytes">() - info.get<"device_memory.free_bytes">());

    hc::async_resource pool(dev);
    hs::statistics_resource<hc::async_resource> mr(pool);
    std::size_t const mib = std::size_t{1} << 20;
    std::size_t const big = (4 + 4 * static_cast<std::size_t>(c.rank())) * mib;  // rank 1 peaks higher
    void* a = mr.allocate(s.view(), big, 256);
    void* b = mr.allocate(s.view(), mib, 256);
    s.synchronize();
    auto const ps = hs::cuda::mem_pool_stats(pool);
    CHECK(ps.get<"allocated_bytes.all.current">() >= static_cast<std::int64_t>(big + mib));
    CHECK(ps.get<"reserved_bytes.all.current">() >= ps.get<"allocated_bytes.all.current">());
    CHECK(ps.get<"allocated_bytes.all.peak">() >= ps.get<"allocated_bytes.all.current">());
    mr.deallocate(s.view(), a, big, 256);
    s.synchronize();
    CHECK(hs::cuda::mem_pool_stats(pool).get<"allocated_bytes.all.peak">() >= static_cast<std::int64_t>(big + mib));
    hs::cuda::reset_mem_pool_peaks(pool.pool());
    auto const after = hs::cuda::mem_pool_stats(pool.pool());
    CHECK(after.get<"allocated_bytes.all.peak">() == after.get<"allocated_bytes.all.current">());
    CHECK(mr.report().get<"allocated_bytes.all.peak">() == static_cast<std::int64_t>(big + mib));

    auto const step = hs::join(mr.report(), hs::cuda::device_memory(dev));
    using step_t = std::remove_cvref_t<decltype(step)>;
    rank_setup rs(hs::reduce_plan::for_report<step_t>());
    auto const t = rs.reducer().gather(step, c, rs.stream.view());
    CHECK(t.at("allocated_bytes.all.peak").argmax == 1);
    CHECK(t.at("allocated_bytes.all.peak").max == hs::value(static_cast<std::int64_t>(9 * mib)));
    auto const m = rs.reducer().max(step, c, rs.stream.view());
    CHECK(m.get<"allocated_bytes.all.peak">() == static_cast<std::int64_t>(9 * mib));
    CHECK(m.get<"device_memory.free_bytes">() <= step.get<"device_memory.free_bytes">());  // min over GPUs
    mr.deallocate(s.view(), b, mib, 256);
    s.synchronize();
  });
}

TEST_CASE("CUDA bad input: null pools, unknown devices, misaligned workspaces name the value") {
  REQUIRE_MESSAGE(hc::device_count() >= 1, "needs a GPU");
  CHECK_THROWS_WITH_AS(static_cast<void>(hs::cuda::mem_pool_stats(static_cast<cudaMemPool_t>(nullptr))),
                       doctest::Contains("null cudaMemPool_t"), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(hs::cuda::reset_mem_pool_peaks(nullptr), doctest::Contains("null cudaMemPool_t"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(hs::cuda::device_memory(hc::device_count() + 7)), doctest::Contains("out of range"),
                       headroom::invalid_argument);
  hc::stream s;
  hs::workspace<hc::device_resource, hc::stream_view> dev(hc::device_resource{}, s.view(), 1024);
  CHECK_THROWS_WITH_AS(staging(dev.bytes().subspan(1)), doctest::Contains("is not 8-byte aligned"), headroom::invalid_argument);
}
