// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// GPU test (2 GPUs, one process): device-resident reports (stats/cuda/device_reducer.hpp).
// Values written by kernels or stored from host reports, reduced with one all-reduce and no host
// round trip, read back through ready()/get() (also on another thread, and with reductions on two
// streams); exact int64 beyond 2^53 and doubles; graph capture; the schema agreed once, its
// mismatch an error on every rank; bad input.
// Run by tools/gpu-check as test_stats_device_reduce (label gpu). Needs 2 GPUs.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/stats.hpp"
#include "headroom/stats/cuda/device_reducer.hpp"

namespace hs = headroom::stats;
namespace hc = headroom::cuda;
namespace nccl = headroom::nccl;
using i64 = std::int64_t;

namespace {

constexpr int ranks = 2;
constexpr i64 big = (i64{1} << 53) + 1;  // not a double: a float64 path would round it

using step_report = hs::report<hs::field<"allocated_bytes.all.peak", i64>,                // set per rank
                               hs::field<"device_memory.free_bytes", i64, hs::minimum>,  // min across ranks
                               hs::field<"worst_ratio", double>,                         // folded by many threads
                               hs::field<"zero", double>,                                // -0.0 vs +0.0
                               hs::field<"free_gib", double, hs::minimum>>;
using other_report = hs::report<hs::field<"allocated_bytes.all.peak", i64>, hs::field<"zero", double>>;

// Kernels take the view by its slot type: nvcc's host stubs cannot spell a stats::field name.
using step_view = hs::cuda::device_report_view<step_report>::self;
using other_view = hs::cuda::device_report_view<other_report>::self;

template <class R>
using reducer_t = hs::cuda::device_reducer<R, nccl::communicator>;

std::vector<int> two_devices() {
  int const n = hc::device_count();
  REQUIRE_MESSAGE(n >= ranks, "test_stats_device_reduce needs 2 GPUs, found ", n);
  return nccl::first_devices(ranks);
}

// Device and pinned memory for one reducer, allocated before and freed after the collectives.
struct buffers {
  buffers(hs::reduce_plan const& plan, int slots)
      : device(hc::device_resource{}, stream.view(), 2 * plan.max_bytes()),
        pinned(hc::pinned_resource{}, stream.view(), static_cast<std::size_t>(slots) * plan.max_bytes()) {}
  hc::stream stream;
  hs::workspace<hc::device_resource, hc::stream_view> device;
  hs::workspace<hc::pinned_resource, hc::stream_view> pinned;
};

// Every thread of the grid folds its own ratio; thread 0 sets the rest.
__global__ void fill_step(step_view r, int rank) {
  int const t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  r.fold<2>(-1.0 / (1.0 + t + 1000.0 * rank));  // max over the 512 threads: t = 511's; over ranks: rank 1's
  if (t == 0) {
    r.set<0>(big + 2 * rank);                                  // rank 1: 2^53 + 3
    r.set<1>(INT64_MAX - rank);          // min: INT64_MAX - 1
    r.set<3>(rank == 0 ? -0.0 : 0.0);                          // max: +0.0, bit for bit
    r.set<4>(rank == 0 ? 1e308 : -HUGE_VAL);  // min: -inf
  }
}

// Graph body: each launch bumps a device counter and publishes counter * (rank + 1).
__global__ void bump(other_view r, i64* counter, int rank) {
  i64 const n = ++*counter;
  r.set<0>(n * (rank + 1));
  r.set<1>(static_cast<double>(n) / 4);
}

__global__ void spin(long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

TEST_CASE("kernel-filled typed report: exact int64 past 2^53, min fields, -0.0/+0.0, +-inf, atomic folds") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<step_report>();
    buffers b(plan, 2);
    auto const s = b.stream.view();
    reducer_t<step_report> reduce(c, b.device.bytes(), b.pinned.bytes(), s);
    CHECK(reduce.size() == 5);
    CHECK(reduce.slots() == 2);
    reduce.reset(s);
    fill_step<<<4, 128, 0, s.get()>>>(reduce.view(), c.rank());
    HEADROOM_CUDA_CHECK_LAST();
    // The keys the kernel wrote are the host encoder's keys (device twin == order_key.hpp).
    std::vector<i64> keys(reduce.size());
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(keys.data(), reduce.keys().data(), keys.size() * 8, cudaMemcpyDeviceToHost, s.get()));
    b.stream.synchronize();
    int const r = c.rank();
    CHECK(keys[0] == hs::detail::encode(big + 2 * r, headroom::reduce_op::max));
    CHECK(keys[1] == hs::detail::encode(std::numeric_limits<i64>::max() - r, headroom::reduce_op::min));
    CHECK(keys[2] == hs::detail::encode(-1.0 / (512.0 + 1000.0 * r), headroom::reduce_op::max, true));
    CHECK(keys[3] == hs::detail::encode(r == 0 ? -0.0 : 0.0, headroom::reduce_op::max, true));

    auto const pending = reduce.max(s);
    auto const out = pending.get();
    CHECK(pending.ready());
    CHECK(out.get<"allocated_bytes.all.peak">() == big + 2);
    CHECK(out.get<"device_memory.free_bytes">() == std::numeric_limits<i64>::max() - 1);
    CHECK(out.get<"worst_ratio">() == -1.0 / 1512.0);
    CHECK(out.get<"zero">() == 0.0);
    CHECK_FALSE(std::signbit(out.get<"zero">()));
    CHECK(out.get<"free_gib">() == -std::numeric_limits<double>::infinity());
    // The device values are unchanged by the reduction: reducing again gives the same.
    CHECK(reduce.max(s).get() == out);
  });
}

TEST_CASE("stored dynamic reports: one all_reduce each, bitwise equal to the host reducer's reference") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    for (std::size_t keys : {1u, 8u, 64u, 512u}) {
      for (bool nan : {false, true}) {
        CAPTURE(keys);
        std::uint64_t const seed = keys * 3 + nan;
        auto const mine = stats_test::random_report(c.rank(), keys, seed, nan);
        std::vector<hs::dynamic_report> all;
        for (int q = 0; q < ranks; ++q) all.push_back(stats_test::random_report(q, keys, seed, nan));
        hs::reduce_plan const plan(keys + 3);  // room to spare: only the report's keys travel per step
        buffers b(plan, 1);
        auto const s = b.stream.view();
        hs::counting_communicator<nccl::communicator> counted(c);
        hs::cuda::device_reducer<hs::dynamic_report, hs::counting_communicator<nccl::communicator>> reduce(
            counted, plan, mine, b.device.bytes(), b.pinned.bytes(), s);
        CHECK(counted.counts().collectives() == 1);  // the one schema agreement
        CHECK(reduce.max(s).get() == stats_test::reference_max(all));
        reduce.store(all[static_cast<std::size_t>(1 - c.rank())], s);  // both ranks now hold the other's values
        CHECK(reduce.max(s).get() == stats_test::reference_max(all));
        CHECK(counted.counts().all_reduce == 3);
        CHECK(counted.counts().collectives() == 3);  // no further agreement: one collective per step
      }
    }
  });
}

TEST_CASE("ready() does not block and is false while the step runs; get() waits; stale and empty handles throw") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<other_report>();
    buffers b(plan, 2);
    auto const s = b.stream.view();
    reducer_t<other_report> reduce(c, b.device.bytes(), b.pinned.bytes(), s);
    reduce.store(other_report(10 * (c.rank() + 1), 0.5 * c.rank()), s);
    spin<<<1, 1, 0, s.get()>>>(200'000'000);  // ~0.1 s: the reduction cannot have finished when max() returns
    HEADROOM_CUDA_CHECK_LAST();
    auto const first = reduce.max(s);
    CHECK_FALSE(first.ready());
    CHECK(first.get() == other_report(20, 0.5));
    CHECK(first.ready());
    auto const second = reduce.max(s);
    reduce.store(other_report(7, -1.0), s);
    auto const third = reduce.max(s);  // slot of `first` again (2 slots)
    CHECK_THROWS_WITH_AS(static_cast<void>(first.get()), doctest::Contains("was overwritten by reduction"),
                         headroom::logic_error);
    CHECK(third.get() == other_report(7, -1.0));
    CHECK(second.get() == other_report(20, 0.5));
    hs::cuda::pending_max<other_report, nccl::communicator> empty;
    CHECK_FALSE(empty.valid());
    CHECK_THROWS_WITH_AS(static_cast<void>(empty.get()), doctest::Contains("empty handle"), headroom::logic_error);
    CHECK_THROWS_AS(static_cast<void>(empty.ready()), headroom::logic_error);
  });
}

TEST_CASE("two streams share the reducer's words in order; a reader thread gets its own result or an error, never a torn one") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<other_report>();
    buffers b(plan, 2);
    auto const s1 = b.stream.view();
    hc::stream other;
    auto const s2 = other.view();
    reducer_t<other_report> reduce(c, b.device.bytes(), b.pinned.bytes(), s1);
    i64 const r = c.rank() + 1;
    // A reduction held back on s1, then a store and a reduction on s2: the store waits for the first
    // reduction to have read the send words (without that wait, the first result is the second's).
    reduce.store(other_report(10 * r, 0.5 * c.rank()), s1);
    spin<<<1, 1, 0, s1.get()>>>(200'000'000);
    HEADROOM_CUDA_CHECK_LAST();
    auto const first = reduce.max(s1);
    reduce.store(other_report(7 * r, -1.0 * c.rank()), s2);
    auto const second = reduce.max(s2);
    CHECK(first.get() == other_report(20, 0.5));
    CHECK(second.get() == other_report(14, 0.0));

    // get() on another thread while this one goes on reducing into the same two slots.
    reduce.store(other_report(3 * r, 1.5), s1);
    auto const held = reduce.max(s1);
    other_report const expected(6, 1.5);
    std::atomic<bool> stop{false};
    int right = 0, wrong = 0, refused = 0;
    std::thread reader([&] {
      while (!stop.load()) {
        try {
          (held.get() == expected ? right : wrong) += 1;
        } catch (headroom::logic_error const&) {
          ++refused;
          return;  // overwritten: every later get() refuses too
        }
      }
    });
    for (int i = 1; i <= 64; ++i) {
      reduce.store(other_report(100 * i * r, 2.0 * i), s1);
      static_cast<void>(reduce.max(s1));
    }
    b.stream.synchronize();
    stop.store(true);
    reader.join();
    CHECK(wrong == 0);
    CHECK(refused + right > 0);
    CHECK_THROWS_AS(static_cast<void>(held.get()), headroom::logic_error);  // 64 reductions later
  });
}

TEST_CASE("graph capture: the kernel, the all-reduce and the copy in one graph; each launch delivers its own result") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<other_report>();
    buffers b(plan, 1);
    auto const s = b.stream.view();
    reducer_t<other_report> reduce(c, b.device.bytes(), b.pinned.bytes(), s);
    hs::workspace<hc::device_resource, hc::stream_view> counter(hc::device_resource{}, s, sizeof(i64));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(counter.data(), 0, sizeof(i64), s.get()));
    b.stream.synchronize();
    cudaGraph_t graph = nullptr;
    HEADROOM_CUDA_TRY(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
    bump<<<1, 1, 0, s.get()>>>(reduce.view(), static_cast<i64*>(counter.data()), c.rank());
    auto const pending = reduce.max(s);
    HEADROOM_CUDA_TRY(cudaStreamEndCapture(s.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    HEADROOM_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    for (i64 launch = 1; launch <= 5; ++launch) {
      HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, s.get()));
      CHECK(pending.get() == other_report(2 * launch, static_cast<double>(launch) / 4));  // rank 1's: counter * 2
    }
    // The graph owns the only slot: an eager reduction has none left.
    CHECK_THROWS_WITH_AS(static_cast<void>(reduce.max(s)), doctest::Contains("belong to captured graphs"),
                         headroom::capacity_error);
    HEADROOM_CUDA_TRY(cudaGraphExecDestroy(exec));
    HEADROOM_CUDA_TRY(cudaGraphDestroy(graph));
  });
}

TEST_CASE("a captured reduction keeps its slot while eager reductions rotate through the others") {
  nccl::launch_per_device(two_devices(), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<other_report>();
    buffers b(plan, 2);
    auto const s = b.stream.view();
    reducer_t<other_report> reduce(c, b.device.bytes(), b.pinned.bytes(), s);
    reduce.store(other_report(1 + c.rank(), 1.0), s);
    cudaGraph_t graph = nullptr;
    HEADROOM_CUDA_TRY(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
    auto const captured = reduce.max(s);
    HEADROOM_CUDA_TRY(cudaStreamEndCapture(s.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    HEADROOM_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, s.get()));
    CHECK(captured.get() == other_report(2, 1.0));
    reduce.store(other_report(5 + c.rank(), 2.0), s);
    for (int i = 0; i < 3; ++i) CHECK(reduce.max(s).get() == other_report(6, 2.0));  // eager: the other slot
    CHECK(captured.get() == other_report(2, 1.0));  // untouched by the eager calls
    HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, s.get()));
    CHECK(captured.get() == other_report(6, 2.0));  // the next launch reduces the current values
    HEADROOM_CUDA_TRY(cudaGraphExecDestroy(exec));
    HEADROOM_CUDA_TRY(cudaGraphDestroy(graph));
  });
}

TEST_CASE("schema agreed once: different reports, key counts or an over-full plan throw on EVERY rank; the group survives") {
  std::mutex m;
  std::vector<std::string> messages;
  int capacity_errors = 0;
  nccl::launch_per_device(two_devices(), [&](nccl::communicator& c) {
    hs::reduce_plan const plan(8);
    buffers b(plan, 1);
    auto const s = b.stream.view();
    auto note = [&](std::exception const& e) {
      std::lock_guard lock(m);
      messages.emplace_back(e.what());
    };
    // Different typed reports on the two ranks.
    try {
      if (c.rank() == 0) reducer_t<step_report> r(c, plan, step_report{}, b.device.bytes(), b.pinned.bytes(), s);
      else reducer_t<other_report> r(c, plan, other_report{}, b.device.bytes(), b.pinned.bytes(), s);
      CHECK_MESSAGE(false, "rank ", c.rank(), " did not throw");
    } catch (headroom::collective_mismatch const& e) {
      note(e);
    }
    // Same kinds, one key more on rank 1.
    hs::dynamic_report mine = hs::dynamic_report().set("a", 1).set("b", 2.0);
    if (c.rank() == 1) mine.set("c", 3);
    try {
      reducer_t<hs::dynamic_report> r(c, plan, mine, b.device.bytes(), b.pinned.bytes(), s);
      CHECK_MESSAGE(false, "rank ", c.rank(), " did not throw");
    } catch (headroom::collective_mismatch const& e) {
      note(e);
    }
    // A report larger than the plan on one rank.
    hs::dynamic_report wide;
    for (int i = 0; i < (c.rank() == 0 ? 4 : 9); ++i) wide.set("k" + std::to_string(i), i);
    try {
      reducer_t<hs::dynamic_report> r(c, plan, wide, b.device.bytes(), b.pinned.bytes(), s);
      CHECK_MESSAGE(false, "rank ", c.rank(), " did not throw");
    } catch (headroom::capacity_error const&) {
      std::lock_guard lock(m);
      ++capacity_errors;
    }
    // The communicator still works: a matching schema reduces.
    reducer_t<other_report> ok(c, plan, other_report{}, b.device.bytes(), b.pinned.bytes(), s);
    ok.store(other_report(c.rank(), 1.0), s);
    CHECK(ok.max(s).get() == other_report(1, 1.0));
  });
  CHECK(messages.size() == 4);
  CHECK(capacity_errors == 2);
  for (auto const& msg : messages) CHECK(msg.find("differ in keys") != std::string::npos);
}

TEST_CASE("one rank: no collective, the stored values come back; an empty report is ready at once") {
  nccl::launch_per_device(nccl::first_devices(1), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<other_report>();
    buffers b(plan, 1);
    auto const s = b.stream.view();
    reducer_t<other_report> reduce(c, b.device.bytes(), b.pinned.bytes(), s);
    reduce.store(other_report(big, -0.0), s);
    auto const out = reduce.max(s).get();
    CHECK(out.get<0>() == big);
    CHECK(std::signbit(out.get<1>()));
    reducer_t<hs::dynamic_report> none(c, hs::reduce_plan(2), hs::dynamic_report{}, b.device.bytes(), b.pinned.bytes(), s);
    auto const p = none.max(s);
    CHECK(p.ready());
    CHECK(p.get().empty());
  });
}

TEST_CASE("bad input names the value: small or misaligned workspaces, no pinned slot, a store of another schema") {
  nccl::launch_per_device(nccl::first_devices(1), [](nccl::communicator& c) {
    auto const plan = hs::reduce_plan::for_report<other_report>();
    buffers b(plan, 1);
    auto const s = b.stream.view();
    auto dev = b.device.bytes();
    auto pin = b.pinned.bytes();
    // The message names the size the plan needs (device_bytes(plan): two wire images, each with
    // its validity block), not a constant of the wire's layout.
    std::string const needed = "expected >= " + std::to_string(reducer_t<other_report>::device_bytes(plan));
    CHECK_THROWS_WITH_AS(reducer_t<other_report>(c, dev.first(dev.size() - 8), pin, s),
                         doctest::Contains(needed.c_str()), headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(reducer_t<other_report>(c, plan, other_report{}, dev.subspan(4), pin, s),
                         doctest::Contains("device workspace"), headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(reducer_t<other_report>(c, dev, pin.first(plan.max_bytes() - 1), s),
                         doctest::Contains("holds no result slot"), headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(static_cast<void>(reducer_t<other_report>::pinned_bytes(plan, 0)), doctest::Contains("slots = 0"),
                         headroom::invalid_argument);
    reducer_t<hs::dynamic_report> dyn(c, hs::reduce_plan(2), hs::dynamic_report().set("a", 1).set("b", 2.0), dev, pin, s);
    CHECK_THROWS_WITH_AS(dyn.store(hs::dynamic_report().set("a", 1.0).set("b", 2.0), s), doctest::Contains("agreed schema"),
                         headroom::invalid_argument);
  });
}
