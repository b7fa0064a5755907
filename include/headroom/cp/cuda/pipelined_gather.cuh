// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// gather_pipeline: the device gather with its reorder hidden behind the all-gather.
//
// cp::cuda::gather runs the all-gather, then the reorder: the reorder's time (a quarter of the
// all-gather's at 128K x 4096 bf16, cp = 2) adds up. Here:
//   - this rank's own rows go straight from the local input to their sequence positions, on the
//     caller's stream, while the first chunk travels (they never needed the network);
//   - the local rows are cut into `chunks` equal ranges (one by default); chunk c is
//     all-gathered into one of two rank-major buffers on the pipeline's collective stream while
//     the peers' rows of chunk c - 1 are scattered from the other buffer to their sequence
//     positions on the caller's stream. Chunks are ranges of local rows, not whole sequences:
//     the scatter computes each row's destination, so chunks are equal whatever the packing.
// So the gather costs the all-gather plus the placement of the peers' rows of one chunk. The
// collective stream has the device's greatest priority and the scatters launch one block per
// tile, so the all-gather's kernel gets SMs as soon as copy blocks retire.
//
//   cp::cuda::gather_pipeline pipe;                            // on the communicator's device; reuse it
//   auto const rows = pipe.workspace_rows(p);                  // query first: cp x chunk rows x (1 or 2)
//   pipe.gather(comm, p, cu, local, out, workspace, s);       // stream-ordered on s, host never waits
//
// The pipeline owns a stream and four events; calls on one pipeline must not overlap (one per
// thread, like a cuBLAS handle). Capturable in a CUDA graph (the collective stream forks from and
// joins `s` through events). Arguments are checked on each rank before anything is enqueued; as
// for cp::cuda::gather, ranks must pass the same batch.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "headroom/core/error.hpp"
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cp::cuda {

class gather_pipeline {
 public:
  /// `chunks` <= 0: one chunk (the fastest measured: 2x H200, cp = 2, 16K / 128K x 4096 and
  /// 16K x 151936 bf16, docs/cp.md). More chunks bound the workspace to two chunks' rows, for
  /// a little time. Creates the collective stream on the current device.
  explicit gather_pipeline(int chunks = 0) : chunks_(chunks), collective_(greatest_priority()) {}

  /// The number of chunks a gather of `local_rows` rows uses.
  [[nodiscard]] std::int64_t chunks_for(std::int64_t local_rows) const noexcept {
    if (local_rows <= 0 || chunks_ <= 0) return 1;
    return std::min<std::int64_t>(chunks_, local_rows);
  }
  /// Workspace rows gather() needs: one rank-major buffer of cp x (local rows of one chunk) per
  /// chunk in flight (two at most); 0 for the contiguous layout (its all-gather lands in order).
  template <layout_policy L>
  [[nodiscard]] std::int64_t workspace_rows(partition<L> const& p) const noexcept {
    if constexpr (std::same_as<L, contiguous>) {
      return 0;
    } else {
      std::int64_t const chunks = chunks_for(p.local_rows());
      return std::min<std::int64_t>(2, chunks) * p.cp_size() * chunk_rows(p.local_rows(), chunks);
    }
  }

  /// Every rank's [local_rows, w] -> [global_rows, w] in sequence order on every rank, as
  /// cp::cuda::gather; `workspace` has at least workspace_rows(p, row bytes) rows of width w.
  template <vector_policy_type V = vector_policy::widest, device_communicator C, layout_policy L, row_element T,
            cu_index I>
  void gather(C& comm, partition<L> const& p, device_cu<I> cu, matrix_view<T const> local, matrix_view<T> out,
              matrix_view<T> workspace, stream_view s) {
    char const* op = "cp::cuda::gather_pipeline::gather";
    detail::expect_gather(comm, p, cu, local, out, op);
    if constexpr (std::same_as<L, contiguous>) {
      comm.all_gather(detail::bytes_of(local), detail::bytes_of(out), s);
    } else {
      std::size_t const row = local.row_bytes();
      std::int64_t const need = workspace_rows(p);
      auto const plan = detail::expect_gather_workspace<V>(local, out, workspace, op);
      auto const own_plan = plan_copy<V>(row, {{"local input", local.data}, {"output", out.data}}, op);
      expects(workspace.rows >= need, op, ": workspace has ", workspace.rows, " rows, expected at least ", need,
              " (workspace_rows(p) for ", chunks_for(p.local_rows()), " chunks at cp ", p.cp_size(), ")");
      std::int64_t const rows = p.local_rows();
      if (rows == 0) return;
      int const cp = p.cp_size(), rank = p.cp_rank();
      std::int64_t const chunks = chunks_for(rows);
      std::int64_t const per_chunk = chunk_rows(rows, chunks);
      auto const spread = detail::grid_shape::one_tile_per_block;
      auto const place = [&](int rank0, std::int64_t local0, std::int64_t block, T const* from, std::int64_t count,
                             copy_plan const& pl) {
        detail::rank_major_destination<L, I> dst{cu.data, p.sequences(), p.global_rows(), cp, rank0, local0, block};
        detail::launch_copy_rows(dst, from, out.data, count, pl, {}, s, op, spread);
      };

      // Fork: the collective stream starts after everything already on s (the local rows, earlier uses of out).
      start_.record(s);
      start_.wait_on(collective_.view());
      place(rank, 0, rows, local.data, rows, own_plan);  // own rows, beside the first all-gather
      for (std::int64_t c = 0; c < chunks; ++c) {
        std::int64_t const local0 = c * per_chunk;
        std::int64_t const m = std::min(per_chunk, rows - local0);
        if (m <= 0) break;
        auto const b = static_cast<std::size_t>(c % 2);
        T* const buffer = workspace.row(static_cast<std::int64_t>(b) * cp * per_chunk);
        if (c >= 2) placed_[b].wait_on(collective_.view());  // the buffer's previous chunk is placed
        comm.all_gather(std::span<std::byte const>(reinterpret_cast<std::byte const*>(local.row(local0)),
                                                   static_cast<std::size_t>(m) * row),
                        std::span<std::byte>(reinterpret_cast<std::byte*>(buffer), static_cast<std::size_t>(cp * m) * row),
                        collective_.view());
        landed_[b].record(collective_.view());
        landed_[b].wait_on(s);  // joins the collective stream back into s
        // The peers' rows of the chunk: ranks [0, rank) and (rank, cp) of the rank-major buffer.
        if (rank > 0) place(0, local0, m, buffer, rank * m, plan);
        if (rank + 1 < cp) place(rank + 1, local0, m, buffer + (rank + 1) * m * local.width, (cp - 1 - rank) * m, plan);
        placed_[b].record(s);
      }
    }
  }

  [[nodiscard]] int chunks() const noexcept { return chunks_; }

 private:
  [[nodiscard]] static std::int64_t chunk_rows(std::int64_t local_rows, std::int64_t chunks) noexcept {
    return (local_rows + chunks - 1) / chunks;
  }
  [[nodiscard]] static headroom::cuda::stream_options greatest_priority() {
    int least = 0, greatest = 0;
    HEADROOM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    return {.non_blocking = true, .priority = greatest};
  }

  int chunks_;
  headroom::cuda::stream collective_;
  headroom::cuda::event start_;
  std::array<headroom::cuda::event, 2> landed_;
  std::array<headroom::cuda::event, 2> placed_;
};

}  // namespace headroom::cp::cuda
