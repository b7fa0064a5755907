// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// The pipeline executor over NCCL, one process driving 2 GPUs (one host thread per GPU):
//   - gradients and losses bit-equal to a single-GPU run of the same kernels, and close to the
//     host reference, for every schedule, with one stream and with separate compute / transfer
//     streams, transfers one by one and grouped (ncclGroupStart/End per run);
//   - the step is stream-ordered: it returns while the device is still busy, and sent buffers
//     are back in the pool once the streams drain;
//   - retention on the device: the last stage's pool high-water mark does not move with m under
//     `none` and grows by the kept outputs under `all`;
//   - bad input (a schedule for another group size, ranks on different schedules, bad
//     device_values use) throws before any transfer.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_toy.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/stats/cuda/sources.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
namespace hp = headroom::pipeline;
using cu::stream_view;

// Host communicators move host buffers on inline streams: not a device transport.
static_assert(hp::cuda::device_transport<nc::communicator>);
static_assert(hp::byte_transport<headroom::host::thread_communicator>);
static_assert(!hp::cuda::device_transport<headroom::host::thread_communicator>);

namespace {

void require_two_gpus() {
  REQUIRE_MESSAGE(cu::device_count() >= 2, "this test drives 2 GPUs from one process; found ", cu::device_count());
}

struct run_output {
  std::map<int, toy::params> params;  // virtual stage -> parameters after the step
  std::vector<double> losses;
  std::vector<int> loss_microbatches;
};

template <class G, class R = hp::retention::reduced, class T = hp::transfers::one_by_one>
run_output run_pipeline(hp::pipeline_shape const& shape, toy::dims d, bool two_streams) {
  auto const sched = hp::make_schedule<G>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  run_output out;
  std::mutex mutex;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    cu::async_resource memory(comm.device());
    cu::stream compute;
    cu::stream transfer;
    device_toy::rank_model model(d, sched, comm.rank(), memory, compute);
    auto& losses = model.losses;
    hp::cuda::nccl_executor<> exec(comm, memory, sched, bytes, compute, two_streams ? transfer.view() : compute.view());
    auto result = exec.step(model.stage, R{}, hp::outputs::freed_when_sent{}, T{});
    auto const plan = exec.plan(R{}, hp::outputs::freed_when_sent{}, T{}).rank(comm.rank());
    CHECK(exec.statistics().bytes().peak == plan.peak);
    CHECK(exec.statistics().bytes().value == plan.held_at_end);
    std::vector<double> host_losses(static_cast<std::size_t>(shape.microbatches));
    losses.copy_to(host_losses, compute);
    compute.synchronize();
    transfer.synchronize();
    std::lock_guard lock(mutex);
    for (auto& [s, p] : model.stage.chunks) out.params[s] = p.download();
    if (comm.rank() == shape.rank_of(shape.virtual_stages() - 1)) {
      // The kept handles point at the slots the loss kernel wrote, in the order the losses ran.
      for (std::size_t i = 0; i < result.losses.size(); ++i) {
        CHECK(result.losses[i] == losses.at(result.microbatches[i]));
        out.losses.push_back(host_losses[static_cast<std::size_t>(result.microbatches[i])]);
      }
      out.loss_microbatches = result.microbatches;
    }
  });
  return out;
}

bool same_bits(std::vector<float> const& a, std::vector<float> const& b) { return headroom_test::same_bytes(a, b); }

template <class G, class T = hp::transfers::one_by_one>
void check_against_reference(hp::pipeline_shape const& shape, bool two_streams) {
  CAPTURE(shape);
  CAPTURE(two_streams);
  CAPTURE(T::name);
  toy::dims const d{.width = 16, .rows = 8};
  // Every stage adds its weight gradients in one micro-batch order (reversed for GPipe with
  // v > 1): the GPU reference takes the micro-batches in that order.
  auto const order = toy::weight_order(hp::make_schedule<G>(shape));
  for (auto const& stage_order : order) REQUIRE(stage_order == order.front());
  device_toy::reference gpu_ref;
  {
    cu::scoped_device on(0);
    cu::stream s;
    gpu_ref = device_toy::run_reference(d, shape.virtual_stages(), shape.microbatches, s, order.front());
  }
  auto const host_ref = toy::run_reference(d, shape.virtual_stages(), shape.microbatches, order);
  auto const got = run_pipeline<G, hp::retention::reduced, T>(shape, d, two_streams);
  REQUIRE(got.params.size() == gpu_ref.stages.size());
  for (int s = 0; s < shape.virtual_stages(); ++s) {
    CAPTURE(s);
    auto const& p = got.params.at(s);
    auto const& r = gpu_ref.stages[static_cast<std::size_t>(s)];
    CHECK(same_bits(p.dw, r.dw));
    CHECK(same_bits(p.db, r.db));
    CHECK(device_toy::close(p.dw, host_ref.stages[static_cast<std::size_t>(s)].dw));
    CHECK(std::any_of(p.dw.begin(), p.dw.end(), [](float g) { return g != 0.0f; }));
  }
  std::vector<int> in_order(static_cast<std::size_t>(shape.microbatches));
  for (int k = 0; k < shape.microbatches; ++k) in_order[static_cast<std::size_t>(k)] = k;
  CHECK(got.loss_microbatches == in_order);
  REQUIRE(got.losses.size() == gpu_ref.losses.size());
  for (std::size_t k = 0; k < gpu_ref.losses.size(); ++k) {
    CHECK(std::memcmp(&got.losses[k], &gpu_ref.losses[k], sizeof(double)) == 0);
    CHECK(got.losses[k] == doctest::Approx(host_ref.losses[k]).epsilon(1e-5));
  }
}

// Keeps the device busy for `ns` nanoseconds of its global timer.
__global__ void spin(unsigned long long ns) {
  auto const now = [] {
    unsigned long long t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  };
  unsigned long long const start = now();
  while (now() - start < ns) {
  }
}

}  // namespace

TEST_CASE("NCCL: gradients and losses bit-equal to a single-GPU run, every schedule") {
  require_two_gpus();
  for (bool two_streams : {false, true}) {
    for (int m : {1, 3, 4}) {
      check_against_reference<hp::gpipe>({.stages = 2, .microbatches = m}, two_streams);
      check_against_reference<hp::one_f_one_b>({.stages = 2, .microbatches = m}, two_streams);
    }
    check_against_reference<hp::zb_h1>({.stages = 2, .microbatches = 4}, two_streams);
    check_against_reference<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2}, two_streams);
    check_against_reference<hp::gpipe>({.stages = 2, .microbatches = 3, .chunks = 2}, two_streams);
  }
}

TEST_CASE("NCCL: grouped transfers (one ncclGroupStart/End per run of sends and receives): bit-equal, model == measured") {
  require_two_gpus();
  using grouped = hp::transfers::grouped;
  for (bool two_streams : {false, true}) {
    for (int m : {1, 4}) {
      check_against_reference<hp::one_f_one_b, grouped>({.stages = 2, .microbatches = m}, two_streams);
      check_against_reference<hp::gpipe, grouped>({.stages = 2, .microbatches = m}, two_streams);
    }
    check_against_reference<hp::zb_h1, grouped>({.stages = 2, .microbatches = 4}, two_streams);
    check_against_reference<hp::interleaved_1f1b, grouped>({.stages = 2, .microbatches = 4, .chunks = 2}, two_streams);
  }
}

TEST_CASE("NCCL: the step does not block the host; released buffers are back in the pool") {
  require_two_gpus();
  toy::dims const d{.width = 32, .rows = 64};
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 6};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    cu::async_resource memory(comm.device());
    cu::stream compute;
    cu::stream transfer;
    device_toy::rank_model model(d, sched, comm.rank(), memory, compute);
    auto& stage = model.stage;
    hp::cuda::nccl_executor<> exec(comm, memory, sched, bytes, compute, transfer);
    exec.step(stage, hp::retention::none{});  // warm-up: NCCL connects the peers here
    compute.synchronize();
    transfer.synchronize();
    auto const baseline = headroom::stats::cuda::mem_pool_stats(memory);

    // Rank 0 delays its compute stream by ~1 s of spinning: the whole step must still be issued
    // long before the device gets to it, on both ranks (rank 1 waits in NCCL on the device).
    if (comm.rank() == 0) spin<<<1, 1, 0, compute.view().get()>>>(1000000000ull);
    auto const t0 = std::chrono::steady_clock::now();
    exec.step(stage, hp::retention::none{});
    auto const host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK_MESSAGE(cudaStreamQuery(compute.view().get()) == cudaErrorNotReady, "rank ", comm.rank(),
                  ": the compute stream finished before step() returned (", host_ms, " ms): something blocked");
    CHECK(host_ms < 500.0);
    CHECK(exec.statistics().bytes().value == 0);  // every buffer was handed back, stream-ordered
    compute.synchronize();
    transfer.synchronize();
    auto const after = headroom::stats::cuda::mem_pool_stats(memory);
    CHECK(after.get<"allocated_bytes.all.current">() == baseline.get<"allocated_bytes.all.current">());
  });
}

TEST_CASE("NCCL: the last stage's device peak does not grow with m under none, and grows by the outputs under all") {
  require_two_gpus();
  toy::dims const d{.width = 512, .rows = 1024};  // 2 MiB per tensor: no pool rounding to hide behind
  std::map<std::pair<int, bool>, std::int64_t> high;  // (m, keeps outputs) -> last rank's pool high-water
  std::mutex mutex;
  auto const run = [&]<class R>(int m, R) {
    hp::pipeline_shape const shape{.stages = 2, .microbatches = m};
    auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
    auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
    nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
      cu::async_resource memory(comm.device());
      cu::stream s;
      device_toy::rank_model model(d, sched, comm.rank(), memory, s);
      auto& stage = model.stage;
      hp::cuda::nccl_executor<> exec(comm, memory, sched, bytes, s, s);
      s.synchronize();
      headroom::stats::cuda::reset_mem_pool_peaks(memory.pool());
      auto const before = headroom::stats::cuda::mem_pool_stats(memory).get<"allocated_bytes.all.current">();
      auto result = exec.step(stage, R{});
      s.synchronize();
      auto const peak = headroom::stats::cuda::mem_pool_stats(memory).get<"allocated_bytes.all.peak">() - before;
      // The memory model against the device: the pool's high-water mark over the step is the
      // predicted peak (the pool may round up, never down; docs/pipeline.md allows 5 %).
      auto const predicted = exec.plan(R{}).rank(comm.rank()).peak;
      CHECK(peak >= predicted);
      CHECK_MESSAGE(peak <= predicted + predicted / 20, "rank ", comm.rank(), ": pool peak ", peak, " B, predicted ",
                    predicted, " B");
      if (comm.rank() == 1) {
        CHECK(result.outputs.size() == (R::keeps_outputs ? static_cast<std::size_t>(m) : 0u));
        std::lock_guard lock(mutex);
        high[{m, R::keeps_outputs}] = peak;
      }
    });
  };
  run(2, hp::retention::none{});
  run(8, hp::retention::none{});
  run(2, hp::retention::all{});
  run(8, hp::retention::all{});
  auto const out = static_cast<std::int64_t>(d.bytes());
  std::int64_t const none2 = high[{2, false}], none8 = high[{8, false}], all2 = high[{2, true}], all8 = high[{8, true}];
  CAPTURE(none2);
  CAPTURE(none8);
  CAPTURE(all2);
  CAPTURE(all8);
  CHECK(none8 - none2 < out / 2);  // nothing held per micro-batch (none8 == none2 when nothing rounds)
  CHECK(all8 - all2 >= 6 * out);   // six more outputs kept
}

TEST_CASE("NCCL: a schedule for another group size is rejected on both GPUs before any transfer") {
  require_two_gpus();
  hp::pipeline_shape const shape{.stages = 3, .microbatches = 4};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(toy::dims{}));
  int rejected = 0;
  std::mutex mutex;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    cu::async_resource memory(comm.device());
    cu::stream s;
    try {
      hp::cuda::nccl_executor<> exec(comm, memory, sched, bytes, s, s);
    } catch (headroom::invalid_argument const& e) {
      std::lock_guard lock(mutex);
      CHECK(std::string(e.what()).find("p = 3") != std::string::npos);
      ++rejected;
    }
  });
  CHECK(rejected == 2);
}

TEST_CASE("NCCL: ranks on different schedules raise collective_mismatch on both GPUs, no hang") {
  require_two_gpus();
  hp::pipeline_shape const shape{.stages = 2, .microbatches = 4};
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(toy::dims{}));
  int mismatched = 0;
  std::mutex mutex;
  nc::launch_per_device(nc::first_devices(2), [&](nc::communicator& comm) {
    cu::async_resource memory(comm.device());
    cu::stream s;
    // Rank 0 on 1F1B, rank 1 on GPipe: the fingerprints go through device memory and NCCL.
    auto const sched = comm.rank() == 0 ? hp::make_schedule<hp::one_f_one_b>(shape) : hp::make_schedule<hp::gpipe>(shape);
    try {
      hp::cuda::nccl_executor<> exec(comm, memory, sched, bytes, s, s);
    } catch (headroom::collective_mismatch const& e) {
      std::lock_guard lock(mutex);
      CHECK(std::string(e.what()).find("rank 1 differs from rank 0 in the action lists") != std::string::npos);
      ++mismatched;
    }
  });
  CHECK(mismatched == 2);
}

TEST_CASE("device_values: bad counts, slots, host spans and streams are rejected") {
  require_two_gpus();
  cu::scoped_device on(0);
  cu::async_resource memory(0);
  cu::stream s;
  CHECK_THROWS_WITH_AS(hp::cuda::device_values<double>(memory, s, 0), doctest::Contains("count 0"),
                       headroom::invalid_argument);
  CHECK_THROWS_AS(hp::cuda::device_values<double>(memory, stream_view{}, 2), headroom::invalid_argument);
  hp::cuda::device_values<float> v(memory, s, 3);
  CHECK(v.size() == 3);
  CHECK(v.at(2) == v.device_span().data() + 2);
  CHECK_THROWS_WITH_AS((void)v.at(3), doctest::Contains("slot 3 out of range [0, 3)"), headroom::invalid_argument);
  CHECK_THROWS_AS((void)v.at(-1), headroom::invalid_argument);
  std::vector<float> wrong(2);
  CHECK_THROWS_WITH_AS(v.copy_to(wrong, s), doctest::Contains("expected size() = 3"), headroom::invalid_argument);
  std::vector<float> host(3, 1.0f);
  v.copy_to(host, s);
  s.synchronize();
  CHECK(host == std::vector<float>(3, 0.0f));  // zeroed at construction
}
