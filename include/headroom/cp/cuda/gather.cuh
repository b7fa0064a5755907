// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// cp collectives on device memory with a device communicator (nccl::communicator):
//
//   gather           all_gather (rank-major, into a workspace) + the reorder kernel; for the
//                    contiguous layout the all-gather already is sequence order, so no kernel
//   gather_adjoint   reorder kernel + reduce_scatter(sum) (see cp/gather.hpp for the cp factor)
//   collect_output   the last stage's entry point under a gather_output policy
//   normalize_loss   {loss sum, token count} over DP x CP in one all_reduce, finished on device
//
// All stream-ordered; the host never waits. Arguments are checked on each rank before anything
// is enqueued (a rank that throws has issued nothing). Unlike the host versions there is no
// agreement round between ranks (it would need a device round trip and a host wait): ranks must
// pass the same batch, as they must for any NCCL collective.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>

#include "headroom/core/communicator.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cp/gather.hpp"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/output.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cp::cuda {

/// A communicator whose collectives take device buffers on CUDA streams.
template <class C>
concept device_communicator = communicator<C> && std::same_as<typename C::stream_type, headroom::cuda::stream_view>;

namespace detail {
template <class T>
[[nodiscard]] std::span<std::byte const> bytes_of(matrix_view<T const> m) noexcept {
  return {reinterpret_cast<std::byte const*>(m.data), m.size_bytes()};
}
template <class T>
[[nodiscard]] std::span<std::byte> bytes_of(matrix_view<T> m) noexcept {
  return {reinterpret_cast<std::byte*>(m.data), m.size_bytes()};
}

/// The checks of every device gather, made before its first collective (a rank that throws has
/// issued nothing).
template <class C, layout_policy L, cu_index I, row_element T>
void expect_gather(C& comm, partition<L> const& p, device_cu<I> cu, matrix_view<T const> local, matrix_view<T> out,
                   char const* op) {
  cp::detail::expect_group(comm, p, op);
  expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(local, p.local_rows(), local.width, op, "local input");
  cp::detail::expect_shape(out, p.global_rows(), local.width, op, "output");
  cp::detail::expect_disjoint(local, out, op);
}
/// The rank-major workspace's width and overlaps, and the reorder's vector width (checked here so
/// that a bad call issues no collective).
template <vector_policy_type V, row_element T>
[[nodiscard]] copy_plan expect_gather_workspace(matrix_view<T const> local, matrix_view<T> out, matrix_view<T> workspace,
                                                char const* op) {
  expects(workspace.width == local.width, op, ": workspace has width ", workspace.width, ", expected ", local.width);
  cp::detail::expect_disjoint(local, workspace, op);
  cp::detail::expect_disjoint(out, workspace, op);
  return plan_copy<V>(local.row_bytes(), {{"workspace", workspace.data}, {"output", out.data}}, op);
}

template <class = void>
__global__ void finish_token_mean_kernel(double* stats, int cp_size, bool replicated) {
  token_mean const m = cp::detail::finish_token_mean(stats[0], stats[1], cp_size, replicated);
  stats[0] = m.loss_sum;
  stats[1] = m.tokens;
  stats[2] = m.mean;
  stats[3] = m.grad_scale;
}
}  // namespace detail

/// Device gather: every rank's [local_rows, w] -> [global_rows, w] in sequence order on every
/// rank. The all-gather moves bytes, so any trivially copyable element works. The workspace
/// works as in cp::gather: [global_rows, w] for one all-gather, or fewer rows (at least the
/// longest padded sequence, the same on every rank) for a chunked gather with bounded memory.
template <vector_policy_type V = vector_policy::widest, device_communicator C, layout_policy L, row_element T,
          cu_index I>
void gather(C& comm, partition<L> const& p, device_cu<I> cu, matrix_view<T const> local, matrix_view<T> out,
            matrix_view<T> workspace, stream_view s) {
  char const* op = "cp::cuda::gather";
  detail::expect_gather(comm, p, cu, local, out, op);
  if constexpr (std::same_as<L, contiguous>) {
    comm.all_gather(detail::bytes_of(local), detail::bytes_of(out), s);
  } else {
    bool const chunked = workspace.rows < p.global_rows();
    if (chunked)
      expects(workspace.rows >= p.longest_sequence(), op, ": workspace has ", workspace.rows,
              " rows, expected at least the longest padded sequence (", p.longest_sequence(), " rows) or all ",
              p.global_rows(), " rows");
    auto const plan = detail::expect_gather_workspace<V>(local, out, workspace, op);
    auto const chunks = plan_gather_chunks(p, chunked ? workspace.rows : 0);
    std::size_t const row = local.row_bytes();
    for (auto const& c : chunks) {
      std::int64_t const local0 = c.global_begin / p.cp_size();
      std::int64_t const block = c.rows() / p.cp_size();
      comm.all_gather(std::span<std::byte const>(reinterpret_cast<std::byte const*>(local.row(local0)),
                                                 static_cast<std::size_t>(block) * row),
                      std::span<std::byte>(reinterpret_cast<std::byte*>(workspace.data), static_cast<std::size_t>(c.rows()) * row),
                      s);
      detail::sequence_order_source<L, I> src{cu.data,     p.sequences(), p.global_rows(), p.cp_size(),
                                              c.global_begin, local0,      block};
      detail::launch_copy_rows(src, workspace.data, out.row(c.global_begin), c.rows(), plan, {}, s, op);
    }
  }
}

/// Device backward of gather: dx_local = sum over ranks of split(dy_rank). T must be a type the
/// communicator reduces (float, double, __half, __nv_bfloat16, integers for NCCL).
template <vector_policy_type V = vector_policy::widest, device_communicator C, layout_policy L, row_element T,
          cu_index I>
void gather_adjoint(C& comm, partition<L> const& p, device_cu<I> cu, matrix_view<T const> dy, matrix_view<T> dx_local,
                    matrix_view<T> workspace, stream_view s) {
  char const* op = "cp::cuda::gather_adjoint";
  cp::detail::expect_group(comm, p, op);
  detail::expect_device_cu(cu, p.sequences(), op, "cu_seqlens");
  cp::detail::expect_shape(dy, p.global_rows(), dy.width, op, "output gradient");
  cp::detail::expect_shape(dx_local, p.local_rows(), dy.width, op, "local input gradient");
  cp::detail::expect_disjoint(dy, dx_local, op);
  if constexpr (std::same_as<L, contiguous>) {
    comm.reduce_scatter(std::span<T const>(dy.data, dy.size()), dx_local.span(), reduce_op::sum, s);
  } else {
    cp::detail::expect_shape(workspace, p.global_rows(), dy.width, op, "workspace");
    cp::detail::expect_disjoint(dy, workspace, op);
    cp::detail::expect_disjoint(dx_local, workspace, op);
    to_rank_order<V>(p, cu, dy, workspace, s);
    comm.reduce_scatter(std::span<T const>(workspace.data, workspace.size()), dx_local.span(), reduce_op::sum, s);
  }
}

/// The last stage's entry point on device memory; same contract as cp::collect_output
/// (cp/output.hpp): full returns `out` filled with the gathered tensor, none returns the local
/// shard, per_token runs per_token(local, vectors, stream) on a [local_rows, out.width]
/// device buffer and gathers the vectors into `out`. Temporaries come from `mr` on `s`.
template <gather_output_policy G, vector_policy_type V = vector_policy::widest, device_communicator C,
          layout_policy L, row_element T, row_element U, cu_index I, class R, class Fn = no_per_token>
  requires stream_resource<std::remove_cvref_t<R>, stream_view>
auto collect_output(C& comm, partition<L> const& p, device_cu<I> cu, matrix_view<T const> local, matrix_view<U> out,
                    R&& mr, stream_view s, Fn&& per_token = {}, output_options const& opts = {}) {
  using buffer = cp::detail::scoped_buffer<std::remove_reference_t<R>, stream_view>;
  if constexpr (std::same_as<G, gather_output::none>) {
    static_cast<void>(cu), static_cast<void>(out), static_cast<void>(mr), static_cast<void>(s), static_cast<void>(opts);
    cp::detail::expect_group(comm, p, "cp::cuda::collect_output<none>");
    cp::detail::expect_shape(local, p.local_rows(), local.width, "cp::cuda::collect_output<none>", "local output");
    return stage_output<T const>{local, p.local_cu_seqlens(), true};
  } else if constexpr (std::same_as<G, gather_output::full>) {
    static_assert(std::same_as<T, U>, "gather_output::full gathers the model output itself: out must have its element type");
    std::int64_t const ws_rows = gather_workspace_rows(p, opts.max_workspace_rows);
    buffer w(mr, s, cp::detail::rows_bytes(ws_rows, local.row_bytes(), "cp::cuda::collect_output<full>", "workspace"));
    gather<V>(comm, p, cu, local, out, w.template as<T>(ws_rows, local.width), s);
    return stage_output<U>{out, p.global_cu_seqlens(), false};
  } else {
    static_assert(!std::same_as<std::remove_cvref_t<Fn>, no_per_token>,
                  "gather_output::per_token needs a function (local rows, local per-token vectors, stream)");
    static_assert(std::invocable<Fn&, matrix_view<T const>, matrix_view<U>, stream_view>,
                  "the per-token function must accept (matrix_view<T const>, matrix_view<U>, cuda::stream_view)");
    char const* op = "cp::cuda::collect_output<per_token>";
    cp::detail::expect_group(comm, p, op);
    cp::detail::expect_shape(local, p.local_rows(), local.width, op, "local output");
    cp::detail::expect_shape(out, p.global_rows(), out.width, op, "per-token output");
    auto const row = out.row_bytes();
    buffer vec(mr, s, cp::detail::rows_bytes(p.local_rows(), row, op, "local per-token vectors"));
    std::int64_t const ws_rows = gather_workspace_rows(p, opts.max_workspace_rows);
    buffer w(mr, s, cp::detail::rows_bytes(ws_rows, row, op, "workspace"));
    auto const vectors = vec.template as<U>(p.local_rows(), out.width);
    std::invoke(per_token, local, vectors, s);
    gather<V>(comm, p, cu, matrix_view<U const>(vectors), out, w.template as<U>(ws_rows, out.width), s);
    return stage_output<U>{out, p.global_cu_seqlens(), false};
  }
}

/// Device loss normalisation: `stats` is 4 doubles of device memory holding this rank's
/// {loss sum, valid tokens}; after the call (in stream order) it holds the group's
/// {loss sum, tokens, mean, grad_scale} as in cp::normalize_loss. One all_reduce of 2 doubles
/// over `dp_cp` plus a one-thread kernel. Token counts are not validated on device.
template <loss_placement_policy Placement = loss_placement::cp_local, device_communicator C>
void normalize_loss(C& dp_cp, std::span<double> stats, int cp_size, stream_view s) {
  char const* op = "cp::cuda::normalize_loss";
  cp::detail::check_group(dp_cp.size(), cp_size, op);
  expects(stats.size() == 4, op, ": stats has ", stats.size(), " doubles, expected 4 (loss sum, tokens, mean, grad_scale)");
  expects(stats.data() != nullptr, op, ": stats is null");
  dp_cp.all_reduce(std::span<double const>(stats.data(), 2), stats.first(2), reduce_op::sum, s);
  detail::finish_token_mean_kernel<<<1, 1, 0, s.get()>>>(stats.data(), cp_size,
                                                           std::same_as<Placement, loss_placement::cp_replicated>);
  HEADROOM_CUDA_CHECK_LAST();
}

}  // namespace headroom::cp::cuda
