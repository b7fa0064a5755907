#pragma once
// gather_pipeline: the device gather with its reorder hidden behind the all-gather.
//
// cp::cuda::gather runs the all-gather, then the reorder: the reorder's time (a quarter of the
// all-gather's at 128K x 4096 bf16, cp = 2) adds up. Here the local rows are cut into `chunks`
// equal ranges; chunk c is all-gathered (on the caller's stream) into one of two rank-major
// buffers while chunk c - 1 is scattered from the other buffer straight to its sequence
// positions (on the pipeline's own stream), so the whole gather costs the all-gather plus the
// placement of one chunk. Chunks are ranges of local rows, not whole sequences: the scatter
// computes each row's destination, so chunks are equal whatever the packing.
//
// While a chunk is placed, the next all-gather's kernel must find SMs free: the scatter's grid
// is capped at (SMs - reserved_sms) blocks, one per SM (the last chunk, with nothing beside it,
// takes the whole device).
//
//   cp::cuda::gather_pipeline pipe;                        // on the communicator's device; reuse it
//   auto const rows = pipe.workspace_rows(p);              // query first: 2 x cp x chunk rows
//   pipe.gather(comm, p, cu, local, out, workspace, s);   // stream-ordered on s, host never waits
//
// The pipeline owns a non-blocking stream and four events; calls on one pipeline must not
// overlap (one per thread, like a cuBLAS handle). Capturable in a CUDA graph (the side stream
// forks from and joins `s` through events). Arguments are checked on each rank before anything
// is enqueued; as for cp::cuda::gather, ranks must pass the same batch.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "headroom/core/error.hpp"
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cp::cuda {

class gather_pipeline {
 public:
  /// Chunks when none are asked for: enough that one chunk's placement is a small tail, few
  /// enough that each all-gather stays large (min_chunk_bytes per rank).
  static constexpr int max_default_chunks = 16;
  static constexpr std::size_t min_chunk_bytes = std::size_t{8} << 20;
  static constexpr int default_reserved_sms = 32;

  /// `chunks` <= 0: chosen per call from the local bytes (at most max_default_chunks, each at
  /// least min_chunk_bytes per rank). `reserved_sms`: SMs the placement leaves to the collective.
  explicit gather_pipeline(int chunks = 0, int reserved_sms = default_reserved_sms)
      : chunks_(chunks), reserved_sms_(reserved_sms) {
    expects(reserved_sms >= 0, "cp::cuda::gather_pipeline: reserved_sms = ", reserved_sms, ", expected >= 0");
  }

  /// The number of chunks a gather of `local_rows` rows of `row_bytes` bytes uses.
  [[nodiscard]] std::int64_t chunks_for(std::int64_t local_rows, std::size_t row_bytes) const noexcept {
    if (local_rows <= 0) return 1;
    if (chunks_ > 0) return std::min<std::int64_t>(chunks_, local_rows);
    auto const bytes = static_cast<std::size_t>(local_rows) * row_bytes;
    auto const k = static_cast<std::int64_t>(bytes / min_chunk_bytes);
    return std::clamp<std::int64_t>(k, 1, std::min<std::int64_t>(max_default_chunks, local_rows));
  }
  /// Workspace rows gather() needs: two rank-major buffers of cp x (local rows of one chunk);
  /// 0 for the contiguous layout (its all-gather lands in sequence order).
  template <layout_policy L>
  [[nodiscard]] std::int64_t workspace_rows(partition<L> const& p, std::size_t row_bytes) const noexcept {
    if constexpr (std::same_as<L, contiguous>) {
      return 0;
    } else {
      return 2 * p.cp_size() * chunk_rows(p.local_rows(), chunks_for(p.local_rows(), row_bytes));
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
      std::int64_t const need = workspace_rows(p, row);
      auto const plan = detail::expect_gather_workspace<V>(local, out, workspace, op);
      expects(workspace.rows >= need, op, ": workspace has ", workspace.rows, " rows, expected at least ", need,
              " (workspace_rows: 2 buffers x cp ", p.cp_size(), " x ", need / 2 / p.cp_size(), " local rows per chunk)");
      if (p.local_rows() == 0) return;
      std::int64_t const chunks = chunks_for(p.local_rows(), row);
      std::int64_t const per_chunk = chunk_rows(p.local_rows(), chunks);
      unsigned const capped = placement_grid();

      // Fork: the side stream starts after everything already on s (the local rows, earlier uses of out).
      start_.record(s);
      start_.wait_on(side_.view());
      for (std::int64_t c = 0; c < chunks; ++c) {
        std::int64_t const local0 = c * per_chunk;
        std::int64_t const m = std::min(per_chunk, p.local_rows() - local0);
        if (m <= 0) break;
        auto const b = static_cast<std::size_t>(c % 2);
        T* const buffer = workspace.row(static_cast<std::int64_t>(b) * p.cp_size() * per_chunk);
        if (c >= 2) placed_[b].wait_on(s);  // the buffer's previous chunk is in place
        comm.all_gather(std::span<std::byte const>(reinterpret_cast<std::byte const*>(local.row(local0)),
                                                   static_cast<std::size_t>(m) * row),
                        std::span<std::byte>(reinterpret_cast<std::byte*>(buffer), static_cast<std::size_t>(p.cp_size() * m) * row),
                        s);
        landed_[b].record(s);
        landed_[b].wait_on(side_.view());
        detail::rank_major_destination<L, I> dst{cu.data, p.sequences(), p.global_rows(), p.cp_size(), 0, local0, m};
        bool const last = local0 + m >= p.local_rows();
        detail::launch_copy_rows(dst, buffer, out.data, p.cp_size() * m, plan, {}, side_.view(), op, last ? 0u : capped);
        placed_[b].record(side_.view());
      }
      // Join: s continues once every chunk is in place.
      placed_[0].wait_on(s);
      placed_[1].wait_on(s);
    }
  }

  [[nodiscard]] int chunks() const noexcept { return chunks_; }
  [[nodiscard]] int reserved_sms() const noexcept { return reserved_sms_; }

 private:
  [[nodiscard]] static std::int64_t chunk_rows(std::int64_t local_rows, std::int64_t chunks) noexcept {
    return (local_rows + chunks - 1) / chunks;
  }
  [[nodiscard]] unsigned placement_grid() const {
    int device = 0, sms = 0;
    HEADROOM_CUDA_TRY(cudaGetDevice(&device));
    HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return static_cast<unsigned>(std::max(sms - reserved_sms_, std::max(sms / 4, 1)));
  }

  int chunks_;
  int reserved_sms_;
  headroom::cuda::stream side_;
  headroom::cuda::event start_;
  std::array<headroom::cuda::event, 2> landed_;
  std::array<headroom::cuda::event, 2> placed_;
};

}  // namespace headroom::cp::cuda
