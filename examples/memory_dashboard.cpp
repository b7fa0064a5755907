// SPDX-License-Identifier: Apache-2.0
// memory_dashboard: the writer-rank pattern for memory dashboards.
//
// Megatron writes TensorBoard from the last rank, but under 1F1B the memory peak sits on the
// FIRST pipeline stage, so a dashboard fed from the writer's own counters under-reports it
// (torchtitan #773: rank 0 at 22.74 GiB, rank 7 at 17.97 GiB). Here 4 pipeline stages run as
// threads; each counts its allocations through a statistics_resource, and once per logging
// window every stage joins ONE all_gather; only the writer (the last stage) receives the table
// and prints, for each stat, the max across stages and which stage holds it, next to what it saw
// locally.
//
// To use with NCCL instead: the same calls on a headroom::nccl::communicator, with
// stats::reducer<stats::cuda::blocking_device_staging> (headroom/stats/cuda/staging.hpp).
#include <cstdio>
#include <cstdint>
#include <vector>

#include <headroom/host.hpp>
#include <headroom/stats.hpp>

namespace hs = headroom::stats;
using headroom::host::inline_stream;

int main() {
  constexpr int stages = 4;
  constexpr int micro_batches = 8;
  constexpr std::size_t activation_bytes = std::size_t{3} << 20;  // per micro-batch per stage
  constexpr std::size_t weight_bytes = std::size_t{16} << 20;

  headroom::host::launch(stages, [&](headroom::host::thread_communicator& pp) {
    int const stage = pp.rank();
    int const writer = stages - 1;  // Megatron's world_size - 1
    hs::statistics_resource<headroom::host::aligned_resource> memory;
    inline_stream s;
    void* weights = memory.allocate(s, weight_bytes);

    // Built once, reused every window: the plan is the report's size on every stage.
    hs::reducer<> reduce(hs::reduce_plan::for_report<hs::allocator_report>());

    for (int window = 0; window < 2; ++window) {
      // One 1F1B step: stage k holds up to (stages - k) micro-batches' activations at once.
      std::vector<void*> in_flight;
      int const depth = stages - stage;
      for (int mb = 0; mb < micro_batches; ++mb) {
        in_flight.push_back(memory.allocate(s, activation_bytes * static_cast<std::size_t>(window + 1)));
        if (static_cast<int>(in_flight.size()) == depth) {  // backward of the oldest frees it
          memory.deallocate(s, in_flight.front(), activation_bytes * static_cast<std::size_t>(window + 1));
          in_flight.erase(in_flight.begin());
        }
      }
      for (void* p : in_flight) memory.deallocate(s, p, activation_bytes * static_cast<std::size_t>(window + 1));

      // Every stage calls this (one collective); only the writer gets the table.
      auto const local = memory.take_window();  // read and reset the peaks: per-window peaks
      if (auto const table = reduce.gather_to(writer, local, pp)) {
        std::printf("window %d (written by stage %d)\n", window, stage);
        std::printf("  %-30s %14s %6s %14s\n", "stat", "max", "stage", "writer's own");
        for (auto const& row : *table) {
          std::printf("  %-30s %14lld %6d %14lld\n", row.name.c_str(), static_cast<long long>(std::get<0>(row.max)),
                      row.argmax, static_cast<long long>(std::get<0>(row.per_rank[static_cast<std::size_t>(writer)])));
        }
        auto const& peak = table->at("allocated_bytes.all.peak");
        std::printf("  peak %s on stage %d; the writer alone would have logged %s\n",
                    headroom::format_bytes(static_cast<std::uint64_t>(std::get<0>(peak.max))).c_str(), peak.argmax,
                    headroom::format_bytes(static_cast<std::uint64_t>(std::get<0>(peak.per_rank.back()))).c_str());
        if (peak.argmax != 0) throw headroom::logic_error("memory_dashboard: expected the first stage to hold the peak");
      }
    }
    memory.deallocate(s, weights, weight_bytes);
  });
  return 0;
}
