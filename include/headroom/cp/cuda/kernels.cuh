// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Row-copy kernels behind cp::cuda's ops. One kernel template serves every op: each output row
// has one source row (or none: filled with a pattern), computed in the kernel from cu_seqlens
// staged in shared memory, so no index tensor is ever materialised. A source may instead
// scatter (`scatters`): each INPUT row has one destination row; the pipelined gather uses it to
// place a chunk of rank-major rows, whose destinations are not one contiguous range.
//
// Work split (the copy is memory-bound): a block takes a tile of consecutive output rows,
// computes each row's source once into shared memory, then streams the tile with vector
// loads / stores (16 bytes when the rows and buffers allow), `unroll` loads in flight per
// thread before the stores. Output rows of a tile are contiguous, so stores are fully
// coalesced; loads are coalesced within each row. Tiles are sized to ~4K vectors so that
// even 16K-row tensors give thousands of tiles, and the grid is capped at what is resident
// on the device (a grid-stride loop covers the rest).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "headroom/cp/copy_plan.hpp"
#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/layout.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/row_runs.hpp"

namespace headroom::cp::cuda::detail {

// Tuning knobs (macros so that a sweep can rebuild with other values; docs/BENCHMARKS.md has
// the measured choices).
#ifndef HEADROOM_CP_COPY_UNROLL
#define HEADROOM_CP_COPY_UNROLL 4
#endif
#ifndef HEADROOM_CP_COPY_MIN_BLOCKS_PER_SM
#define HEADROOM_CP_COPY_MIN_BLOCKS_PER_SM 1
#endif
#ifndef HEADROOM_CP_RUNS_UNROLL
#define HEADROOM_CP_RUNS_UNROLL 8
#endif
#ifndef HEADROOM_CP_RUNS_MIN_BLOCKS_PER_SM
#define HEADROOM_CP_RUNS_MIN_BLOCKS_PER_SM 4
#endif
#ifndef HEADROOM_CP_MIN_TILE_VECTORS
#define HEADROOM_CP_MIN_TILE_VECTORS 2048
#endif
inline constexpr int block_threads = 256;
/// Loads in flight per thread before its stores.
inline constexpr int unroll = HEADROOM_CP_COPY_UNROLL;
inline constexpr std::uint32_t target_vectors_per_tile = 4096;
inline constexpr std::uint32_t max_rows_per_tile = 1024;
/// Tiles are not shrunk below this for small copies: 8 vectors a thread keep the per-tile
/// set-up (source rows, a barrier) small (H200: 1-row tiles of a 16 MiB split ran at 67 % of a
/// copy, 4-row tiles at 85 %).
inline constexpr std::uint32_t min_vectors_per_tile = HEADROOM_CP_MIN_TILE_VECTORS;
/// The runs kernel's loads in flight per thread (it has no per-tile set-up to amortise).
inline constexpr int runs_unroll = HEADROOM_CP_RUNS_UNROLL;
static_assert(unroll >= 1 && runs_unroll >= 1 && min_vectors_per_tile >= 1, "cp::cuda: bad copy tuning");
inline constexpr std::size_t max_fill_bytes = 64;

template <std::size_t Bytes>
struct vector_of;
template <> struct vector_of<16> { using type = uint4; };
template <> struct vector_of<8> { using type = uint2; };
template <> struct vector_of<4> { using type = unsigned int; };
template <> struct vector_of<2> { using type = unsigned short; };
template <> struct vector_of<1> { using type = unsigned char; };

/// The element written where a row has no source (pads, rows of other ranks), as raw bytes.
/// A row is a whole number of elements, so byte b of a row is bytes[b % elem_bytes].
struct fill_pattern {
  unsigned char bytes[max_fill_bytes] = {};
  std::uint32_t elem_bytes = 1;

  template <class V>
  __device__ __forceinline__ V vector(std::uint32_t vector_in_row) const {
    V out;
    auto* b = reinterpret_cast<unsigned char*>(&out);
    std::uint32_t const offset = vector_in_row * static_cast<std::uint32_t>(sizeof(V));
#pragma unroll
    for (std::uint32_t j = 0; j < sizeof(V); ++j) b[j] = bytes[(offset + j) % elem_bytes];
    return out;
  }
};

/// Copies `count` entries of a boundary array into shared memory (or keeps the global pointer).
template <class I>
__device__ __forceinline__ I const* stage_array(I const* src, std::int64_t count, unsigned char*& smem, bool use_shared) {
  if (!use_shared) return src;
  I* dst = reinterpret_cast<I*>(smem);
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) dst[i] = src[i];
  smem += (static_cast<std::size_t>(count) * sizeof(I) + 15) / 16 * 16;
  return dst;
}
template <class I>
[[nodiscard]] constexpr std::size_t staged_bytes(std::int64_t count) noexcept {
  return (static_cast<std::size_t>(count) * sizeof(I) + 15) / 16 * 16;
}

// ---- sources: output row -> input row (-1: fill) -----------------------------------------

/// split: local row t of `rank` <- global padded row.
template <class Layout, class I>
struct split_source {
  static constexpr bool may_fill = false;
  static constexpr bool scatters = false;
  I const* cu;
  std::int64_t nseq, total;
  int cp, rank;
  [[nodiscard]] std::size_t shared_bytes() const noexcept { return staged_bytes<I>(nseq + 1); }
  __device__ void stage(unsigned char* smem, bool use_shared) { cu = stage_array(cu, nseq + 1, smem, use_shared); }
  __device__ __forceinline__ std::int64_t operator()(std::int64_t t) const {
    return Layout::locate(cu, nseq, total, cp, rank, t).global_row;
  }
};

/// gather-reorder: global row g (sequence order) <- row of the rank-major all-gather buffer.
/// A chunked gather reorders the rows [row0, row0 + out_rows) of one chunk of whole sequences:
/// its buffer holds `block` rows per rank, starting at each rank's local row `local0`.
template <class Layout, class I>
struct sequence_order_source {
  static constexpr bool may_fill = false;
  static constexpr bool scatters = false;
  I const* cu;
  std::int64_t nseq, total;
  int cp;
  std::int64_t row0 = 0, local0 = 0, block = 0;  // block = total / cp for a whole gather
  [[nodiscard]] std::size_t shared_bytes() const noexcept { return staged_bytes<I>(nseq + 1); }
  __device__ void stage(unsigned char* smem, bool use_shared) { cu = stage_array(cu, nseq + 1, smem, use_shared); }
  __device__ __forceinline__ std::int64_t operator()(std::int64_t g) const {
    owned_row const o = Layout::owner(cu, nseq, total, cp, row0 + g);
    return o.rank * block + (o.local_row - local0);
  }
};

/// to_rank_order (gather's adjoint): rank-major row k <- global row.
template <class Layout, class I>
struct rank_order_source {
  static constexpr bool may_fill = false;
  static constexpr bool scatters = false;
  I const* cu;
  std::int64_t nseq, total;
  int cp;
  [[nodiscard]] std::size_t shared_bytes() const noexcept { return staged_bytes<I>(nseq + 1); }
  __device__ void stage(unsigned char* smem, bool use_shared) { cu = stage_array(cu, nseq + 1, smem, use_shared); }
  __device__ __forceinline__ std::int64_t operator()(std::int64_t k) const {
    std::int64_t const n = total / cp;
    return Layout::locate(cu, nseq, total, cp, static_cast<int>(k / n), k % n).global_row;
  }
};

/// split's adjoint: global row g <- this rank's local row, or zero when another rank holds it.
template <class Layout, class I>
struct split_adjoint_source {
  static constexpr bool may_fill = true;
  static constexpr bool scatters = false;
  I const* cu;
  std::int64_t nseq, total;
  int cp, rank;
  [[nodiscard]] std::size_t shared_bytes() const noexcept { return staged_bytes<I>(nseq + 1); }
  __device__ void stage(unsigned char* smem, bool use_shared) { cu = stage_array(cu, nseq + 1, smem, use_shared); }
  __device__ __forceinline__ std::int64_t operator()(std::int64_t g) const {
    owned_row const o = Layout::owner(cu, nseq, total, cp, g);
    return o.rank == rank ? o.local_row : -1;
  }
};

/// Fused pad + split: local row t <- raw row, or the pad value. `shift` reads the token
/// `shift` places later in the same sequence (1: next-token labels / loss mask), and a source
/// past the sequence's last real token is a pad.
template <class Layout, class I, class J>
struct pad_split_source {
  static constexpr bool may_fill = true;
  static constexpr bool scatters = false;
  J const* padded_cu;
  I const* raw_cu;
  std::int64_t nseq, raw_nseq, total;
  int cp, rank;
  std::int64_t shift;
  [[nodiscard]] std::size_t shared_bytes() const noexcept {
    return staged_bytes<J>(nseq + 1) + staged_bytes<I>(raw_nseq + 1);
  }
  __device__ void stage(unsigned char* smem, bool use_shared) {
    padded_cu = stage_array(padded_cu, nseq + 1, smem, use_shared);
    raw_cu = stage_array(raw_cu, raw_nseq + 1, smem, use_shared);
  }
  __device__ __forceinline__ std::int64_t operator()(std::int64_t t) const {
    located_row const at = Layout::locate(padded_cu, nseq, total, cp, rank, t);
    if (at.sequence >= raw_nseq) return -1;  // the dummy sequence is all pads
    std::int64_t const o = at.global_row - static_cast<std::int64_t>(padded_cu[at.sequence]) + shift;
    std::int64_t const raw_len =
        static_cast<std::int64_t>(raw_cu[at.sequence + 1]) - static_cast<std::int64_t>(raw_cu[at.sequence]);
    return o < raw_len ? static_cast<std::int64_t>(raw_cu[at.sequence]) + o : -1;
  }
};

/// Scatter: input row k of a rank-major block (`block` rows per rank, ranks rank0, rank0 + 1, ...,
/// each starting at its local row `local0`) -> its global row in sequence order. With rank0 = r
/// and block = local_rows it places rank r's own local rows.
template <class Layout, class I>
struct rank_major_destination {
  static constexpr bool may_fill = false;
  static constexpr bool scatters = true;
  I const* cu;
  std::int64_t nseq, total;
  int cp;
  int rank0 = 0;
  std::int64_t local0 = 0, block = 0;
  [[nodiscard]] std::size_t shared_bytes() const noexcept { return staged_bytes<I>(nseq + 1); }
  __device__ void stage(unsigned char* smem, bool use_shared) { cu = stage_array(cu, nseq + 1, smem, use_shared); }
  __device__ __forceinline__ std::int64_t operator()(std::int64_t k) const {
    auto const q = static_cast<int>(k / block);
    return Layout::locate(cu, nseq, total, cp, rank0 + q, local0 + (k - q * block)).global_row;
  }
};

// ---- the kernel --------------------------------------------------------------------------

/// `total_rows`: output rows (input rows for a scattering source).
template <class V, class Source>
__global__ void __launch_bounds__(block_threads, HEADROOM_CP_COPY_MIN_BLOCKS_PER_SM)
    copy_rows_kernel(Source source, V const* __restrict__ in, V* __restrict__ out, std::int64_t total_rows,
                     cp::detail::fast_divmod vectors_per_row, std::uint32_t rows_per_tile, bool stage_cu,
                     fill_pattern fill) {
  extern __shared__ __align__(16) unsigned char shared[];
  auto* const src_rows = reinterpret_cast<std::int64_t*>(shared);
  source.stage(shared + (static_cast<std::size_t>(rows_per_tile) * sizeof(std::int64_t) + 15) / 16 * 16, stage_cu);
  __syncthreads();
  std::int64_t const tiles = (total_rows + rows_per_tile - 1) / rows_per_tile;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    std::int64_t const row0 = tile * rows_per_tile;
    std::int64_t const left = total_rows - row0;
    auto const rows = static_cast<std::uint32_t>(left < rows_per_tile ? left : rows_per_tile);
    for (std::uint32_t i = threadIdx.x; i < rows; i += blockDim.x) src_rows[i] = source(row0 + i);
    __syncthreads();
    std::uint32_t const vpr = vectors_per_row.divisor();
    std::uint32_t const items = rows * vpr;
    std::int64_t const tile_offset = row0 * static_cast<std::int64_t>(vpr);
    for (std::uint32_t base = threadIdx.x; base < items; base += block_threads * unroll) {
      V regs[unroll];
#pragma unroll
      for (int k = 0; k < unroll; ++k) {
        std::uint32_t const i = base + static_cast<std::uint32_t>(k) * block_threads;
        if (i < items) {
          if constexpr (Source::scatters) {
            regs[k] = in[tile_offset + i];  // the tile's input rows are contiguous
          } else {
            std::uint32_t r = 0, v = 0;
            vectors_per_row.divide(i, r, v);
            std::int64_t const s = src_rows[r];
            if constexpr (Source::may_fill)
              regs[k] = s >= 0 ? in[s * vpr + v] : fill.template vector<V>(v);
            else
              regs[k] = in[s * vpr + v];
          }
        }
      }
#pragma unroll
      for (int k = 0; k < unroll; ++k) {
        std::uint32_t const i = base + static_cast<std::uint32_t>(k) * block_threads;
        if (i < items) {
          if constexpr (Source::scatters) {
            std::uint32_t r = 0, v = 0;
            vectors_per_row.divide(i, r, v);
            out[src_rows[r] * vpr + v] = regs[k];  // src_rows holds destinations here
          } else {
            out[tile_offset + i] = regs[k];  // the tile's output rows are contiguous
          }
        }
      }
    }
    __syncthreads();  // src_rows is rewritten by the next tile
  }
}

/// The copy when the host gave the rows as runs (row_runs, read from the kernel-parameter bank):
/// output vectors are taken in order, `runs_unroll` per thread per round; each thread finds its
/// row's source with a binary search over the runs (one row per warp: the reads broadcast), kept
/// while its row does not change. No shared memory, no barrier, no per-sequence division: a
/// block's first loads issue after a few constant-cache reads, which is what small copies need
/// (a 16 MiB split is one wave of blocks).
template <class V>
__global__ void __launch_bounds__(block_threads, HEADROOM_CP_RUNS_MIN_BLOCKS_PER_SM)
    copy_runs_kernel(__grid_constant__ row_runs const runs, V const* __restrict__ in, V* __restrict__ out,
                     cp::detail::fast_divmod vectors_per_row) {
  std::uint32_t const vpr = vectors_per_row.divisor();
  std::int64_t const total = runs.rows * static_cast<std::int64_t>(vpr);
  constexpr std::int64_t per_round = std::int64_t{block_threads} * runs_unroll;
  std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * per_round;
  std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * per_round;
  // (row, vector) of the round's first vector, advanced by the stride without a 64-bit division.
  std::int64_t base_row = base / vpr;
  auto base_v = static_cast<std::uint32_t>(base - base_row * vpr);
  std::int64_t const stride_rows = stride / vpr;
  auto const stride_v = static_cast<std::uint32_t>(stride - stride_rows * vpr);
  std::int64_t last_row = -1, last_source = 0;
  for (; base < total; base += stride) {
    V regs[runs_unroll];
#pragma unroll
    for (int k = 0; k < runs_unroll; ++k) {
      std::uint32_t const offset = static_cast<std::uint32_t>(k) * block_threads + threadIdx.x;
      if (base + offset < total) {
        std::uint32_t r = 0, v = 0;
        vectors_per_row.divide(base_v + offset, r, v);
        std::int64_t const row = base_row + r;
        if (row != last_row) {
          last_row = row;
          last_source = runs.source(row);
        }
        regs[k] = in[last_source * vpr + v];
      }
    }
#pragma unroll
    for (int k = 0; k < runs_unroll; ++k) {
      std::uint32_t const offset = static_cast<std::uint32_t>(k) * block_threads + threadIdx.x;
      if (base + offset < total) out[base + offset] = regs[k];
    }
    base_row += stride_rows;
    base_v += stride_v;
    if (base_v >= vpr) {
      base_v -= vpr;
      ++base_row;
    }
  }
}

}  // namespace headroom::cp::cuda::detail
