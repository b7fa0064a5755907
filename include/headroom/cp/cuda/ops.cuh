// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// cp ops on device memory, one kernel launch each, stream-ordered (nothing blocks the host).
//
//   split              global padded [T, w] -> this rank's [T/cp, w]
//   split_adjoint      this rank's rows back to [T, w], zeros elsewhere
//   to_sequence_order  rank-major all-gather buffer -> sequence order (gather's reorder)
//   to_rank_order      sequence order -> rank-major (gather's adjoint before reduce-scatter)
//   place_rank_major   some ranks' rank-major rows -> their sequence positions (nothing else written)
//   pad_split          raw, unpadded [T_raw, w] -> this rank's padded rows, pads filled in the
//                      kernel (TE needs the caller to pad first); `shift` = 1 gives next-token
//                      labels / loss mask with every pad and each sequence's last real token masked
//
// Each op takes the host partition (validated, and the source of every size) and a device copy
// of the same cu_seqlens (device_cu / device_cu_seqlens), which the kernel stages in shared
// memory and binary-searches per output row. split and to_sequence_order under the two built-in
// layouts, up to HEADROOM_CP_RUNS_MAX_BYTES of output, pass the rows as runs instead
// (row_runs.hpp; up to row_runs::capacity of them) and read no device boundaries: that kernel
// has no per-block set-up, which is what small copies lose to (docs/cp.md). The device values
// are not read back: they must be the values the partition was built from. The vector_policy template parameter picks the
// access width (copy_plan.hpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cp/copy_plan.hpp"
#include "headroom/cp/cuda/kernels.cuh"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cp::cuda {

using headroom::cuda::stream_view;

/// A device array of cu_seqlens (not owned).
template <cu_index I>
struct device_cu {
  I const* data = nullptr;
  std::int64_t size = 0;
};

/// An owned device copy of host cu_seqlens, allocated and copied in order on `s`, freed in
/// order on the same stream (which must outlive it).
class device_cu_seqlens {
 public:
  device_cu_seqlens(std::span<std::int64_t const> host, stream_view s) : size_(static_cast<std::int64_t>(host.size())), s_(s) {
    expects(!host.empty(), "cp::cuda::device_cu_seqlens: empty cu_seqlens");
    void* p = nullptr;
    HEADROOM_CUDA_TRY(cudaMallocAsync(&p, host.size_bytes(), s.get()));
    data_ = static_cast<std::int64_t*>(p);
    cudaError_t const st = cudaMemcpyAsync(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, s.get());
    if (st != cudaSuccess) {
      HEADROOM_CUDA_TRY_NOTHROW(cudaFreeAsync(data_, s.get()));
      HEADROOM_CUDA_TRY(st);
    }
  }
  device_cu_seqlens(device_cu_seqlens const&) = delete;
  device_cu_seqlens& operator=(device_cu_seqlens const&) = delete;
  ~device_cu_seqlens() {
    if (data_ != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaFreeAsync(data_, s_.get()));
  }
  [[nodiscard]] device_cu<std::int64_t> view() const noexcept { return {data_, size_}; }
  operator device_cu<std::int64_t>() const noexcept { return view(); }  // NOLINT

 private:
  std::int64_t* data_ = nullptr;
  std::int64_t size_;
  stream_view s_;
};

namespace detail {

#ifndef HEADROOM_CP_COPY_WAVES
/// Copy grids launch this many blocks per resident block slot (a tuning knob; see
/// launch_copy_rows and docs/BENCHMARKS.md for the measured choice).
#define HEADROOM_CP_COPY_WAVES 4
#endif
#ifndef HEADROOM_CP_ROW_RUNS
/// 1: split and to_sequence_order take the runs kernel when the runs fit; 0: always the general
/// kernel (for benchmarks comparing the two).
#define HEADROOM_CP_ROW_RUNS 1
#endif
#ifndef HEADROOM_CP_RUNS_MAX_BYTES
/// Copies up to this many output bytes take the runs kernel (when the runs fit); larger ones the
/// general kernel, which was faster there (H200: 4.7 GiB reorder 92.5 % of a copy against 90.9 %,
/// 512 MiB split 92.1 % against 90.9 %; at 16 MiB the runs kernel 91.5-92.1 %, the general 85-86 %).
#define HEADROOM_CP_RUNS_MAX_BYTES (std::int64_t{256} << 20)
#endif
#ifndef HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK
/// Rounds (block_threads x runs_unroll vectors, 32 KiB at 16-byte vectors) each block of the runs
/// kernel copies; 0: a grid of HEADROOM_CP_RUNS_WAVES blocks per resident block slot instead.
/// One round per block keeps the blocks running at any moment on one narrow, contiguous window
/// of the output (blocks start in index order); a grid-stride loop spreads them over the whole
/// copy (H200, 128K x 4096 split at cp = 8, 4096 rounds: 1 wave of blocks looping 7.8 rounds
/// 81-84 % of a copy, 4 waves looping ~2 rounds 88-90 %).
#define HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK 1
#endif
#ifndef HEADROOM_CP_RUNS_WAVES
/// The runs kernel's grid in blocks per resident block slot, when HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK is 0.
#define HEADROOM_CP_RUNS_WAVES 4
#endif
#ifndef HEADROOM_CP_STAGE_BYTES
/// Shared memory a copy block may use for its tile and the staged boundaries (0: never stage).
#define HEADROOM_CP_STAGE_BYTES (48 * 1024)
#endif

/// How many blocks a copy launches: as many as stay resident (each loops over tiles), or one per
/// tile, so that blocks retire as they finish and a kernel of a higher-priority stream running
/// beside the copy (the pipelined gather's collective) gets SMs at once.
enum class grid_shape { resident, one_tile_per_block };

/// Calls f(vector_of<N>{}) for the access width `vector_bytes` (16, 8, 4, 2, else 1).
template <class F>
decltype(auto) with_vector_width(std::size_t vector_bytes, F&& f) {
  switch (vector_bytes) {
    case 16: return f(vector_of<16>{});
    case 8: return f(vector_of<8>{});
    case 4: return f(vector_of<4>{});
    case 2: return f(vector_of<2>{});
    default: return f(vector_of<1>{});
  }
}

/// copy_rows_kernel for `Source` at a vector width, as a plain function pointer (for queries).
template <class Source>
[[nodiscard]] void const* copy_kernel_of(std::size_t vector_bytes) noexcept {
  return with_vector_width(vector_bytes, [](auto tag) {
    return reinterpret_cast<void const*>(&copy_rows_kernel<typename decltype(tag)::type, Source>);
  });
}

/// Blocks of `kernel` resident on the current device at once (SMs x blocks per SM, as registers
/// and threads allow), queried once per kernel and device. Shared memory is left out: a block's
/// tile buffer and staged boundaries are small against an SM's, unless a batch has thousands of
/// sequences (then a grid may take a second wave, as before).
[[nodiscard]] inline std::int64_t resident_blocks(void const* kernel) {
  int device = 0;
  HEADROOM_CUDA_TRY(cudaGetDevice(&device));
  struct entry {
    void const* kernel;
    int device;
    std::int64_t blocks;
  };
  // Never destroyed (leaked on purpose): a thread still launching while the process exits, as
  // an op called by a framework's worker thread can be, must not find the cache torn down.
  static std::mutex& m = *new std::mutex;
  static std::vector<entry>& cache = *new std::vector<entry>;
  std::lock_guard lock(m);
  for (auto const& e : cache)
    if (e.kernel == kernel && e.device == device) return e.blocks;
  int sms = 0, per_sm = 0;
  HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  HEADROOM_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, 0));
  std::int64_t const blocks = static_cast<std::int64_t>(sms) * std::max(per_sm, 1);
  cache.push_back({kernel, device, blocks});
  return blocks;
}

/// Vectors per row as the copy kernels index them: 32-bit and divided with fast_divmod (exact
/// below 2^31), so rows of 2^30 vectors or more are refused.
[[nodiscard]] inline std::uint32_t checked_vectors_per_row(copy_plan const& plan, char const* op) {
  expects(plan.vectors_per_row < (std::int64_t{1} << 30), op, ": rows of ", plan.row_bytes,
          " bytes are too wide (at most 2^30 - 1 vectors per row)");
  return static_cast<std::uint32_t>(plan.vectors_per_row);
}

/// Picks tile size and grid, then launches copy_rows_kernel with the vector type of `plan`.
/// `rows`: output rows (input rows for a scattering source).
template <class Source>
void launch_copy_rows(Source source, void const* in, void* out, std::int64_t rows, copy_plan const& plan,
                      fill_pattern const& fill, stream_view s, char const* op, grid_shape shape = grid_shape::resident) {
  if (rows == 0) return;
  std::uint32_t const vpr = checked_vectors_per_row(plan, op);

  // Grid: as many blocks as the device keeps resident (a grid-stride loop covers the rest). The
  // kernel's registers, not its threads, bound that: on an H200, 4 blocks of 256 threads per SM
  // (58 registers a thread), not 8 (ncu, 16K x 4096 split at cp = 8: a grid sized for 8 ran in
  // 1.94 waves). The occupancy query runs once per kernel and device; launches read the cache.
  // HEADROOM_CP_COPY_WAVES blocks per resident slot: with more than one, a block that retires
  // is replaced at once and its set-up overlaps the others' copies (H200, 16K-128K x 4096 at
  // cp = 2 and 8: 4 waves 89.7-92.0 % of a copy, 1 wave 84.6-90.4 %, 2 waves 77.5-90.8 %).
  std::int64_t const resident = resident_blocks(copy_kernel_of<Source>(plan.vector_bytes)) * HEADROOM_CP_COPY_WAVES;

  // Tiles of ~4K vectors keep the per-tile set-up (source rows, a barrier) small against the
  // copy. A small copy (a 16 MiB split) would leave most of the device idle with tiles that
  // big, its time set by the few SMs that got two: shrink the tiles until every resident block
  // has one, so all loads are in flight in the first wave.
  std::uint32_t rows_per_tile = std::max<std::uint32_t>(1, target_vectors_per_tile / vpr);
  rows_per_tile = std::min(rows_per_tile, max_rows_per_tile);
  if ((rows + rows_per_tile - 1) / rows_per_tile < resident) {
    std::int64_t const floor_rows = (std::int64_t{min_vectors_per_tile} + vpr - 1) / vpr;
    std::int64_t const shrunk = std::max<std::int64_t>(floor_rows, (rows + resident - 1) / resident);
    rows_per_tile = static_cast<std::uint32_t>(std::clamp<std::int64_t>(shrunk, 1, rows_per_tile));
  }
  if (static_cast<std::int64_t>(rows_per_tile) > rows) rows_per_tile = static_cast<std::uint32_t>(rows);
  std::size_t const tile_bytes = (static_cast<std::size_t>(rows_per_tile) * sizeof(std::int64_t) + 15) / 16 * 16;
  // Boundaries go to shared memory when they fit beside the tile (a 48 KiB block default);
  // beyond ~6K sequences the search reads them through L1/L2 instead.
  bool const stage = tile_bytes + source.shared_bytes() <= HEADROOM_CP_STAGE_BYTES;
  std::size_t const shared = tile_bytes + (stage ? source.shared_bytes() : 0);
  std::int64_t const tiles = (rows + rows_per_tile - 1) / rows_per_tile;
  std::int64_t const blocks = shape == grid_shape::resident ? resident : std::int64_t{0x7fffffff};
  auto const grid = static_cast<unsigned>(std::min(tiles, blocks));

  with_vector_width(plan.vector_bytes, [&](auto vector_tag) {
    using V = typename decltype(vector_tag)::type;
    copy_rows_kernel<V, Source><<<grid, block_threads, shared, s.get()>>>(
        source, static_cast<V const*>(in), static_cast<V*>(out), rows, cp::detail::fast_divmod(vpr), rows_per_tile, stage,
        fill);
    HEADROOM_CUDA_CHECK_LAST();
  });
}

/// copy_runs_kernel at a vector width, as a plain function pointer (for queries).
[[nodiscard]] inline void const* runs_kernel_of(std::size_t vector_bytes) noexcept {
  return with_vector_width(vector_bytes, [](auto tag) {
    return reinterpret_cast<void const*>(&copy_runs_kernel<typename decltype(tag)::type>);
  });
}

/// Whether a copy of `rows` output rows takes the runs kernel (rows permitting: see the ops).
[[nodiscard]] inline bool runs_kernel_size(std::int64_t rows, copy_plan const& plan) noexcept {
  return HEADROOM_CP_ROW_RUNS && rows <= HEADROOM_CP_RUNS_MAX_BYTES / static_cast<std::int64_t>(plan.row_bytes);
}

/// The runs kernel's grid for a copy of `rounds` rounds: HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK rounds
/// a block, or (0) HEADROOM_CP_RUNS_WAVES blocks per resident slot; never more blocks than
/// rounds, nor than a grid may have.
[[nodiscard]] inline std::int64_t runs_grid(std::int64_t rounds, std::size_t vector_bytes) {
  std::int64_t blocks = 0;
  if constexpr (HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK > 0)
    blocks = (rounds + HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK - 1) / HEADROOM_CP_RUNS_ROUNDS_PER_BLOCK;
  else
    blocks = resident_blocks(runs_kernel_of(vector_bytes)) * HEADROOM_CP_RUNS_WAVES;
  return std::min({rounds, blocks, std::int64_t{0x7fffffff}});
}

/// Launches copy_runs_kernel over `runs` (output rows in order) on runs_grid's blocks, or on
/// `grid_blocks` when positive (benchmarks comparing grids); a grid-stride loop covers the rest.
inline void launch_copy_runs(row_runs const& runs, void const* in, void* out, copy_plan const& plan, stream_view s,
                             char const* op, std::int64_t grid_blocks = 0) {
  if (runs.rows == 0) return;
  std::uint32_t const vpr = checked_vectors_per_row(plan, op);
  std::int64_t const per_round = std::int64_t{block_threads} * runs_unroll;
  std::int64_t const rounds = (runs.rows * static_cast<std::int64_t>(vpr) + per_round - 1) / per_round;
  auto const grid = static_cast<unsigned>(
      grid_blocks > 0 ? std::min({rounds, grid_blocks, std::int64_t{0x7fffffff}}) : runs_grid(rounds, plan.vector_bytes));
  with_vector_width(plan.vector_bytes, [&](auto vector_tag) {
    using V = typename decltype(vector_tag)::type;
    copy_runs_kernel<V><<<grid, block_threads, 0, s.get()>>>(runs, static_cast<V const*>(in), static_cast<V*>(out),
                                                             cp::detail::fast_divmod(vpr));
    HEADROOM_CUDA_CHECK_LAST();
  });
}

template <class T>
[[nodiscard]] fill_pattern fill_of(T const& value) {
  static_assert(sizeof(T) <= max_fill_bytes, "cp::cuda: fill / pad elements are limited to 64 bytes");
  fill_pattern f;
  std::memcpy(f.bytes, &value, sizeof(T));
  f.elem_bytes = static_cast<std::uint32_t>(sizeof(T));
  return f;
}

template <cu_index I>
void expect_device_cu(device_cu<I> cu, std::int64_t sequences, char const* op, char const* what) {
  expects(cu.size == sequences + 1, op, ": device ", what, " has ", cu.size, " entries, the host metadata has ",
          sequences + 1);
  expects(cu.data != nullptr, op, ": device ", what, " is null");
}

}  // namespace detail

template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I>
void split(partition<L> const& p, device_cu<I> cu, matrix_view<T const> global, matrix_view<T> local, stream_view s) {
  char const* op = "cp::cuda::split";
  detail::expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(global, p.global_rows(), global.width, op, "global input");
  cp::detail::expect_shape(local, p.local_rows(), global.width, op, "local output");
  cp::detail::expect_disjoint(global, local, op);
  auto const plan = plan_copy<V>(global.row_bytes(), {{"global input", global.data}, {"local output", local.data}}, op);
  if (row_runs runs; detail::runs_kernel_size(p.local_rows(), plan) && split_runs(p, runs)) {
    detail::launch_copy_runs(runs, global.data, local.data, plan, s, op);
    return;
  }
  detail::split_source<L, I> src{cu.data, p.sequences(), p.global_rows(), p.cp_size(), p.cp_rank()};
  detail::launch_copy_rows(src, global.data, local.data, p.local_rows(), plan, {}, s, op);
}

template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I>
void split_adjoint(partition<L> const& p, device_cu<I> cu, matrix_view<T const> local, matrix_view<T> global,
                   stream_view s) {
  char const* op = "cp::cuda::split_adjoint";
  detail::expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(local, p.local_rows(), local.width, op, "local input");
  cp::detail::expect_shape(global, p.global_rows(), local.width, op, "global output");
  cp::detail::expect_disjoint(local, global, op);
  auto const plan = plan_copy<V>(local.row_bytes(), {{"local input", local.data}, {"global output", global.data}}, op);
  detail::split_adjoint_source<L, I> src{cu.data, p.sequences(), p.global_rows(), p.cp_size(), p.cp_rank()};
  detail::launch_copy_rows(src, local.data, global.data, p.global_rows(), plan, detail::fill_of(T{}), s, op);
}

/// The reorder half of gather: rank-major [T, w] (all-gather output) -> sequence order.
template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I>
void to_sequence_order(partition<L> const& p, device_cu<I> cu, matrix_view<T const> rank_major, matrix_view<T> sequence,
                       stream_view s) {
  char const* op = "cp::cuda::to_sequence_order";
  detail::expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(rank_major, p.global_rows(), rank_major.width, op, "rank-major input");
  cp::detail::expect_shape(sequence, p.global_rows(), rank_major.width, op, "sequence-order output");
  cp::detail::expect_disjoint(rank_major, sequence, op);
  auto const plan =
      plan_copy<V>(rank_major.row_bytes(), {{"rank-major input", rank_major.data}, {"sequence-order output", sequence.data}}, op);
  if (row_runs runs; detail::runs_kernel_size(p.global_rows(), plan) && sequence_order_runs(p, runs)) {
    detail::launch_copy_runs(runs, rank_major.data, sequence.data, plan, s, op);
    return;
  }
  detail::sequence_order_source<L, I> src{cu.data, p.sequences(), p.global_rows(), p.cp_size(), 0, 0, p.local_rows()};
  detail::launch_copy_rows(src, rank_major.data, sequence.data, p.global_rows(), plan, {}, s, op);
}

/// Rank-major rows to their sequence positions, writing only those rows: `from` holds local rows
/// [local0, local0 + block) of ranks rank0, rank0 + 1, ... (from.rows / block ranks, rank after
/// rank). A gather that receives rows elsewhere than their place (a chunk of an all-gather, this
/// rank's own rows) places them with it; `shape` as for the copy kernels.
template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I>
void place_rank_major(partition<L> const& p, device_cu<I> cu, matrix_view<T const> from, int rank0, std::int64_t local0,
                      std::int64_t block, matrix_view<T> sequence, stream_view s,
                      detail::grid_shape shape = detail::grid_shape::resident) {
  char const* op = "cp::cuda::place_rank_major";
  detail::expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(sequence, p.global_rows(), from.width, op, "sequence-order output");
  expects(block >= 0 && local0 >= 0 && local0 <= p.local_rows() && block <= p.local_rows() - local0, op,
          ": local rows from ", local0, ", ", block, " of them, expected a range within this partition's ",
          p.local_rows(), " local rows");
  std::int64_t const ranks = block == 0 ? 0 : from.rows / block;
  expects(ranks * block == from.rows && rank0 >= 0 && rank0 + ranks <= p.cp_size(), op, ": ", from.rows,
          " input rows from rank ", rank0, " in blocks of ", block, " rows, expected whole blocks of ranks below cp_size ",
          p.cp_size());
  cp::detail::expect_disjoint(from, sequence, op);
  if (from.rows == 0) return;
  auto const plan =
      plan_copy<V>(from.row_bytes(), {{"rank-major input", from.data}, {"sequence-order output", sequence.data}}, op);
  detail::rank_major_destination<L, I> dst{cu.data, p.sequences(), p.global_rows(), p.cp_size(), rank0, local0, block};
  detail::launch_copy_rows(dst, from.data, sequence.data, from.rows, plan, {}, s, op, shape);
}

template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I>
void to_rank_order(partition<L> const& p, device_cu<I> cu, matrix_view<T const> sequence, matrix_view<T> rank_major,
                   stream_view s) {
  char const* op = "cp::cuda::to_rank_order";
  detail::expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(sequence, p.global_rows(), sequence.width, op, "sequence-order input");
  cp::detail::expect_shape(rank_major, p.global_rows(), sequence.width, op, "rank-major output");
  cp::detail::expect_disjoint(sequence, rank_major, op);
  auto const plan =
      plan_copy<V>(sequence.row_bytes(), {{"sequence-order input", sequence.data}, {"rank-major output", rank_major.data}}, op);
  detail::rank_order_source<L, I> src{cu.data, p.sequences(), p.global_rows(), p.cp_size()};
  detail::launch_copy_rows(src, sequence.data, rank_major.data, p.global_rows(), plan, {}, s, op);
}

/// split(pad(raw)) in one launch. `raw_cu` has pd.raw_sequences() + 1 entries (the caller's raw
/// boundaries; a dummy sequence appended by the padding needs no entry), `padded_cu` has
/// p.sequences() + 1. shift = 0: the rows themselves; shift = 1: the next token of the same
/// sequence (labels or loss mask), pad_value past the last real token.
template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I, cu_index J>
void pad_split(padding const& pd, partition<L> const& p, device_cu<I> raw_cu, device_cu<J> padded_cu,
               matrix_view<T const> raw, matrix_view<T> local, T const& pad_value, stream_view s, std::int64_t shift = 0) {
  char const* op = "cp::cuda::pad_split";
  cp::detail::expect_same_batch(pd, p, op);
  detail::expect_device_cu(raw_cu, pd.raw_sequences(), op, "raw cu_seqlens");
  detail::expect_device_cu(padded_cu, p.sequences(), op, "padded cu_seqlens");
  expects(shift >= 0, op, ": shift = ", shift, ", expected >= 0");
  cp::detail::expect_shape(raw, pd.raw_rows(), raw.width, op, "raw input");
  cp::detail::expect_shape(local, p.local_rows(), raw.width, op, "local output");
  cp::detail::expect_disjoint(raw, local, op);
  auto const plan = plan_copy<V>(raw.row_bytes(), {{"raw input", raw.data}, {"local output", local.data}}, op);
  // A shift of raw_rows or more pads every row; clamped there, the kernel's offsets cannot overflow.
  detail::pad_split_source<L, I, J> src{padded_cu.data, raw_cu.data, p.sequences(), pd.raw_sequences(),
                                        p.global_rows(), p.cp_size(), p.cp_rank(), std::min(shift, pd.raw_rows())};
  detail::launch_copy_rows(src, raw.data, local.data, p.local_rows(), plan, detail::fill_of(pad_value), s, op);
}

}  // namespace headroom::cp::cuda
