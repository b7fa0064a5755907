// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scale validation results shared by the rank threads, and the phase barriers (quiesce, collective_phase).
// Part of tests/nccl/scale_validation.cu (one program; this folder is not globbed as programs).
#include "device.cuh"

namespace scale_validation {

// ---- shared results (written by every rank under the mutex, printed by rank 0) ---------------

struct cp_bw_row {
  std::string op;
  i64 tokens = 0, width = 0;
  int cp = 0;
  std::size_t bytes_out = 0;
  std::vector<double> ours_ms, peer_ms;  // per rank
  std::string peer;                      // memcpy or nccl all_gather
};

struct stats_row {
  int group = 0;
  std::size_t keys = 0;
  double max_wall = 0, max_event = 0, gather_wall = 0, nccl_device_wall = 0, nccl_staged_wall = 0;
};

struct pool_result {
  std::string workload;
  u64 arena_bytes = 0;
  std::size_t units = 0, slots = 0, shapes = 0;
  u64 gathered_bytes_per_step = 0;
  std::vector<double> step_ms;
  double reg_first_ms = 0, reg_median_ms = 0, dereg_median_ms = 0;
  double malloc_reg_first_ms = 0, malloc_reg_median_ms = 0;
  u64 moves = 0, cross_stream_waits = 0;
};

struct shared_state {
  options opt;
  int world = 0;
  ledger checks;
  std::mutex m;
  std::vector<std::string> skipped;
  std::vector<cp_bw_row> bw;  // indexed by case, filled per rank
  std::vector<stats_row> lat;
  pool_result pool;
  host_gate gate;  // the ranks' host barrier (quiesce)
  watch wd;        // what the watchdog reports and aborts
  std::atomic<bool> watchdog_fired{false};
  void skip(int rank, std::string why) {
    if (rank != 0) return;
    std::lock_guard lock(m);
    skipped.push_back(std::move(why));
  }
  /// A rank failed (or the watchdog fired): abort every communicator and break the host barrier
  /// now, before the failing rank's buffers are freed, so no rank is left waiting.
  void fail_fast() {
    wd.abort_all();
    gate.break_all();
  }
};

/// Every rank drains `streams`, then waits at the host barrier of all ranks: from here until
/// the next collective no NCCL kernel is in flight on any device, so synchronising CUDA / NCCL
/// calls (allocation, free, split, destroy, register) are safe. `what` is the watchdog's phase.
void quiesce(shared_state& st, int rank, std::string const& what, std::initializer_list<hc::stream_view> streams) {
  st.wd.phase(rank, "host barrier: " + what);
  for (auto const& s : streams) s.synchronize();
  st.gate.arrive_and_wait();
}
void quiesce(shared_state& st, int rank, std::string const& what, hc::stream_view s) { quiesce(st, rank, what, {s}); }

/// Runs the collectives of a section: refuses dbuf cudaMallocs, and on a failure aborts the
/// group before the stack unwinds into the frees of the setup phase's buffers.
template <class Fn>
void collective_phase(shared_state& st, Fn&& fn) {
  bool const outer = std::exchange(t_collective_phase, true);
  try {
    fn();
  } catch (...) {
    t_collective_phase = outer;
    st.fail_fast();
    throw;
  }
  t_collective_phase = outer;
}

/// A device-side barrier over `comm` (one-element all_reduce) on scratch allocated in a setup
/// phase. communicator::barrier would cudaMalloc its scratch on first use, between collectives.
class device_barrier {
 public:
  explicit device_barrier(hc::stream_view s) : flag_(1) {
    HEADROOM_CUDA_TRY(cudaMemsetAsync(flag_.data(), 0, sizeof(std::uint32_t), s.get()));
  }
  void operator()(nccl::communicator& comm, hc::stream_view s) const {
    comm.all_reduce(std::span<std::uint32_t const>(flag_.data(), 1), std::span<std::uint32_t>(flag_.data(), 1), reduce_op::sum, s);
  }

 private:
  dbuf<std::uint32_t> flag_;
};

}  // namespace scale_validation
