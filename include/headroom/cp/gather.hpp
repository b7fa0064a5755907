// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// gather: every rank's local rows -> the whole tensor in sequence order on every rank
// (one all-gather into a rank-major workspace, then the fixed reorder; a single collective
// cannot undo the zigzag interleave, NVIDIA/Model-Optimizer #1804).
//
// gather_adjoint: the backward of gather. With the gather's input x = (x_0..x_{cp-1}) and its
// output y copied to every rank, the adjoint maps per-rank output gradients (dy_0..dy_{cp-1}) to
// dx_r = sum_k split_r(dy_k): reorder to rank order, then reduce-scatter(sum). If every CP rank
// computed the same loss from the same gathered tensor, all dy_k are equal and dx_r = cp *
// split_r(dy): this is where the factor cp appears; cancel it by counting tokens over DP x CP
// (cp::normalize_loss with cp::loss_placement::cp_replicated) or by dividing by cp.
//
// The host versions take host memory and a host-memory communicator (thread_group, MPI). Every
// rank validates its own arguments and then all ranks agree (one tiny all_reduce) before any
// data moves, so a rank with bad input makes every rank throw instead of leaving them waiting.
#include <array>
#include <concepts>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <vector>
#include <algorithm>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/host/aligned_resource.hpp"

namespace headroom::cp {

namespace detail {

/// FNV-1a over what every rank of one gather must share: layout, boundaries, row shape.
template <class L>
[[nodiscard]] std::int64_t batch_fingerprint(partition<L> const& p, std::int64_t width, std::size_t elem_bytes) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (char c : L::name) mix(static_cast<std::uint64_t>(c));
  mix(static_cast<std::uint64_t>(p.cp_size()));
  for (auto b : p.global_cu_seqlens()) mix(static_cast<std::uint64_t>(b));
  mix(static_cast<std::uint64_t>(width));
  mix(elem_bytes);
  return static_cast<std::int64_t>(h >> 1);  // non-negative, so -fp fits
}

/// Runs `check` (which throws on bad local input), then agrees with every rank of `comm` in
/// one all_reduce(max) of host int64s: {any rank failed, fingerprint, -fingerprint}. Throws on
/// every rank if any rank failed or the ranks describe different batches.
template <communicator C, class Check>
void agree_before_collective(C& comm, std::int64_t fingerprint, typename C::stream_type const& s, char const* op,
                             Check&& check) {
  std::exception_ptr mine;
  try {
    check();
  } catch (error const&) {
    mine = std::current_exception();
  }
  std::array<std::int64_t, 3> const in{mine ? 1 : 0, fingerprint, -fingerprint};
  std::array<std::int64_t, 3> out{};
  comm.all_reduce(std::span<std::int64_t const>(in), std::span<std::int64_t>(out), reduce_op::max, s);
  if (mine) std::rethrow_exception(mine);
  expects<collective_mismatch>(out[0] == 0, op, " on rank ", comm.rank(), ": another rank rejected its arguments");
  expects<collective_mismatch>(out[1] == -out[2], op, " on rank ", comm.rank(),
                               ": ranks describe different batches (cu_seqlens, cp size, layout, row shape or chunked workspace rows differ)");
}

template <communicator C, class L>
void expect_group(C const& comm, partition<L> const& p, char const* op) {
  expects(comm.size() == p.cp_size(), op, ": communicator has ", comm.size(), " ranks, the partition expects cp = ",
          p.cp_size());
  expects(comm.rank() == p.cp_rank(), op, ": communicator rank ", comm.rank(), " but the partition is for cp rank ",
          p.cp_rank());
}

}  // namespace detail

/// A run of whole sequences [first, last) gathered by one collective. Every rank's rows of
/// those sequences are contiguous in its local buffer (the layout keeps sequence order), so a
/// chunk is one all-gather of rows [cu[first]/cp, cu[last]/cp) and a reorder of its own.
struct gather_chunk {
  std::int64_t first_sequence, last_sequence;
  std::int64_t global_begin, global_end;  // rows in sequence order
  [[nodiscard]] std::int64_t rows() const noexcept { return global_end - global_begin; }
};

/// Splits a dual_chunk gather into chunks of whole sequences of at most `max_rows` rows each
/// (greedy, in order; the same on every rank). max_rows <= 0: one chunk. Throws when one
/// sequence alone is longer than max_rows.
template <layout_policy L>
[[nodiscard]] std::vector<gather_chunk> plan_gather_chunks(partition<L> const& p, std::int64_t max_rows) {
  auto const cu = p.global_cu_seqlens();
  std::int64_t const n = p.sequences();
  if (max_rows <= 0 || max_rows >= p.global_rows()) return {{0, n, 0, p.global_rows()}};
  expects(p.longest_sequence() <= max_rows, "cp::plan_gather_chunks: a workspace of ", max_rows,
          " rows cannot hold the longest padded sequence (", p.longest_sequence(), " rows); gather needs at least that");
  std::vector<gather_chunk> chunks;
  std::int64_t a = 0;
  while (a < n) {
    std::int64_t b = a + 1;
    while (b < n && cu[static_cast<std::size_t>(b) + 1] - cu[static_cast<std::size_t>(a)] <= max_rows) ++b;
    chunks.push_back({a, b, cu[static_cast<std::size_t>(a)], cu[static_cast<std::size_t>(b)]});
    a = b;
  }
  return chunks;
}

/// Rows of the rank-major workspace gather needs when its workspace is limited to `max_rows`
/// (<= 0: no limit, one collective): the largest chunk, global_rows without a limit, and 0 for
/// the contiguous layout (its all-gather output already is sequence order).
template <layout_policy L>
[[nodiscard]] std::int64_t gather_workspace_rows(partition<L> const& p, std::int64_t max_rows = 0) {
  if constexpr (std::same_as<L, contiguous>) {
    return 0;
  } else {
    std::int64_t m = 0;
    for (auto const& c : plan_gather_chunks(p, max_rows)) m = std::max(m, c.rows());
    return m;
  }
}

namespace detail {
/// Reorders one chunk's rank-major all-gather buffer into its rows of `out`.
template <layout_policy L, row_element T>
void chunk_to_sequence_order(partition<L> const& p, gather_chunk const& c, matrix_view<T const> chunk, matrix_view<T> out) {
  std::int64_t const block = c.rows() / p.cp_size();
  std::int64_t const local0 = c.global_begin / p.cp_size();
  for (std::int64_t g = c.global_begin; g < c.global_end; ++g) {
    auto const o = p.owner(g);
    copy_row(chunk.row(o.rank * block + o.local_row - local0), out.row(g), out.width);
  }
}
}  // namespace detail

/// Host gather with a caller-owned rank-major workspace. With [global_rows, width] it takes one
/// all-gather; a smaller workspace (at least the longest padded sequence, and the same on every
/// rank) gathers whole sequences in chunks, one all-gather each, so the transient memory is
/// bounded by the workspace (gather_workspace_rows(p, limit) says how many rows to pass).
template <communicator C, layout_policy L, class T>
void gather(C& comm, partition<L> const& p, matrix_view<T const> local, matrix_view<T> out, matrix_view<T> workspace,
            typename C::stream_type const& s = {}) {
  static_assert(detail::checked_row_element<T>);
  char const* op = "cp::gather";
  bool const chunked = !std::same_as<L, contiguous> && workspace.rows < p.global_rows();
  std::vector<gather_chunk> chunks;
  // The workspace size decides the chunks, so it is part of what the ranks must agree on.
  std::int64_t const fp = detail::batch_fingerprint(p, local.width, sizeof(T)) ^ (chunked ? workspace.rows * 0x9E3779B1LL : 0);
  detail::agree_before_collective(comm, fp & 0x3fffffffffffffffLL, s, op, [&] {
    detail::expect_group(comm, p, op);
    detail::expect_shape(local, p.local_rows(), local.width, op, "local input");
    detail::expect_shape(out, p.global_rows(), local.width, op, "output");
    detail::expect_disjoint(local, out, op);
    if constexpr (!std::same_as<L, contiguous>) {
      expects(workspace.width == local.width, op, ": workspace has width ", workspace.width, ", expected ", local.width);
      if (chunked)
        expects(workspace.rows >= p.longest_sequence(), op, ": workspace has ", workspace.rows,
                " rows, expected at least the longest padded sequence (", p.longest_sequence(), " rows) or all ",
                p.global_rows(), " rows");
      chunks = plan_gather_chunks(p, chunked ? workspace.rows : 0);
      detail::expect_disjoint(local, workspace, op);
      detail::expect_disjoint(out, workspace, op);
    }
  });
  if constexpr (std::same_as<L, contiguous>) {
    comm.all_gather(std::span<T const>(local.data, local.size()), out.span(), s);
  } else {
    for (auto const& c : chunks) {
      std::int64_t const local0 = c.global_begin / p.cp_size();
      std::int64_t const rows = c.rows() / p.cp_size();
      comm.all_gather(std::span<T const>(local.row(local0), static_cast<std::size_t>(rows * local.width)),
                      std::span<T>(workspace.data, static_cast<std::size_t>(c.rows() * local.width)), s);
      detail::chunk_to_sequence_order(p, c, matrix_view<T const>(workspace.data, c.rows(), local.width), out);
    }
  }
}

/// Host gather that allocates its workspace.
template <communicator C, layout_policy L, class T>
void gather(C& comm, partition<L> const& p, matrix_view<T const> local, matrix_view<T> out,
            typename C::stream_type const& s = {}) {
  static_assert(detail::checked_row_element<T>);
  host::aligned_resource mr;
  std::size_t const bytes = detail::rows_bytes(gather_workspace_rows(p), local.row_bytes(), "cp::gather", "workspace");
  void* w = mr.allocate({}, bytes, alignof(T) > 64 ? alignof(T) : 64);
  try {
    gather(comm, p, local, out, matrix_view<T>(static_cast<T*>(w), gather_workspace_rows(p), local.width), s);
  } catch (...) {
    mr.deallocate({}, w, bytes, alignof(T) > 64 ? alignof(T) : 64);
    throw;
  }
  mr.deallocate({}, w, bytes, alignof(T) > 64 ? alignof(T) : 64);
}

/// Backward of gather: dx_local = sum over ranks k of split(dy_k). Needs an arithmetic element
/// (the reduce-scatter sums). `workspace` is [gather_workspace_rows(p), width].
template <communicator C, layout_policy L, class T>
void gather_adjoint(C& comm, partition<L> const& p, matrix_view<T const> dy, matrix_view<T> dx_local,
                    matrix_view<T> workspace, typename C::stream_type const& s = {}) {
  static_assert(std::is_arithmetic_v<T>,
                "cp::gather_adjoint: the element type T is not arithmetic, and the adjoint sums the ranks' "
                "gradients (a reduce-scatter); use float, double or an integer type");
  char const* op = "cp::gather_adjoint";
  detail::agree_before_collective(comm, detail::batch_fingerprint(p, dy.width, sizeof(T)), s, op, [&] {
    detail::expect_group(comm, p, op);
    detail::expect_shape(dy, p.global_rows(), dy.width, op, "output gradient");
    detail::expect_shape(dx_local, p.local_rows(), dy.width, op, "local input gradient");
    detail::expect_disjoint(dy, dx_local, op);
    if (gather_workspace_rows(p) > 0) {
      detail::expect_shape(workspace, p.global_rows(), dy.width, op, "workspace");
      detail::expect_disjoint(dy, workspace, op);
      detail::expect_disjoint(dx_local, workspace, op);
    }
  });
  if constexpr (std::same_as<L, contiguous>) {
    comm.reduce_scatter(std::span<T const>(dy.data, dy.size()), dx_local.span(), reduce_op::sum, s);
  } else {
    to_rank_order(p, dy, workspace);
    comm.reduce_scatter(std::span<T const>(workspace.data, workspace.size()), dx_local.span(), reduce_op::sum, s);
  }
}

}  // namespace headroom::cp
