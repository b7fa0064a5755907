// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// gather_in_place: the device gather with no reorder pass, over NCCL point-to-point.
//
// Under dual_chunk, each of a peer's chunks is one contiguous run of its local rows and lands in
// one contiguous run of the output. So instead of an all-gather into a workspace and a reorder,
// one NCCL group sends every chunk straight to its sequence position on every peer (2 messages
// per sequence and peer), and a kernel places this rank's own rows meanwhile on the same stream.
// No workspace; the output is written once.
//
// When it pays (2x H200, cp = 2, NCCL 2.28, docs/cp.md): with large messages, at the logits width
// (16K x 151936 bf16, 5 sequences: ~250 MB a message) it takes 0.97x the bare all-gather; with
// many small ones, at 16K / 128K x 4096 (6.5 / 4 MB a message) 1.32x / 1.44x, where the
// per-message cost of NCCL's send/recv shows, and gather_pipeline (pipelined_gather.cuh) is the
// better choice. in_place_message_bytes(p, row_bytes) says which regime a batch is in.
//
//   cp::cuda::gather_in_place(comm, p, cu, local, out, s);   // stream-ordered on s
//
// Arguments are checked before the group starts; as for cp::cuda::gather, ranks must pass the
// same batch (a rank that posts other messages leaves its peers waiting, as in NCCL).
#include <cstddef>
#include <cstdint>
#include <span>

#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/nccl/communicator.hpp"
#include "headroom/nccl/group.hpp"

namespace headroom::cp::cuda {

/// Mean bytes of one message of gather_in_place for rows of `row_bytes` bytes: a chunk of a
/// sequence, len / (2 cp) rows (0 for the contiguous layout, which needs no messages but the all-gather).
template <layout_policy L>
[[nodiscard]] std::size_t in_place_message_bytes(partition<L> const& p, std::size_t row_bytes) noexcept {
  if constexpr (std::same_as<L, contiguous>) {
    return 0;
  } else {
    std::int64_t messages = 0;
    auto const cu = p.global_cu_seqlens();
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) messages += cu[i + 1] > cu[i] ? 2 : 0;
    if (messages == 0) return 0;
    return static_cast<std::size_t>(p.global_rows() / p.cp_size()) * row_bytes / static_cast<std::size_t>(messages);
  }
}

/// Every rank's [local_rows, w] -> [global_rows, w] in sequence order on every rank, as
/// cp::cuda::gather, with each chunk sent straight to its place.
template <vector_policy_type V = vector_policy::widest, layout_policy L, row_element T, cu_index I>
void gather_in_place(headroom::nccl::communicator& comm, partition<L> const& p, device_cu<I> cu, matrix_view<T const> local,
                     matrix_view<T> out, stream_view s) {
  char const* op = "cp::cuda::gather_in_place";
  detail::expect_gather(comm, p, cu, local, out, op);
  if constexpr (std::same_as<L, contiguous>) {
    comm.all_gather(detail::bytes_of(local), detail::bytes_of(out), s);
  } else {
    static_assert(std::same_as<L, dual_chunk>, "gather_in_place places dual_chunk chunks");
    auto const plan = plan_copy<V>(local.row_bytes(), {{"local input", local.data}, {"output", out.data}}, op);
    int const cp = p.cp_size(), rank = p.cp_rank();
    std::size_t const row = local.row_bytes();
    auto const bytes = [&](auto* base, std::int64_t first_row, std::int64_t rows) {
      using B = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(base)>>, std::byte const, std::byte>;
      return std::span<B>(reinterpret_cast<B*>(base) + static_cast<std::size_t>(first_row) * row,
                          static_cast<std::size_t>(rows) * row);
    };
    auto const cu_host = p.global_cu_seqlens();
    {
      headroom::nccl::group g;
      for (int peer = 0; peer < cp; ++peer) {
        if (peer == rank) continue;
        for (std::size_t i = 0; i + 1 < cu_host.size(); ++i) {
          std::int64_t const c = (cu_host[i + 1] - cu_host[i]) / (2 * cp);  // rows of one chunk
          if (c == 0) continue;
          std::int64_t const local0 = cu_host[i] / cp;  // my chunk `rank`, then my chunk 2cp-1-rank
          // NCCL pairs the k-th send to a peer with the peer's k-th recv from us: same order both sides.
          comm.send(bytes(local.data, local0, c), peer, s);
          comm.send(bytes(local.data, local0 + c, c), peer, s);
          comm.recv(bytes(out.data, cu_host[i] + peer * c, c), peer, s);
          comm.recv(bytes(out.data, cu_host[i] + (2 * cp - 1 - peer) * c, c), peer, s);
        }
      }
      g.end();
    }
    detail::rank_major_destination<L, I> own{cu.data, p.sequences(), p.global_rows(), cp, rank, 0, p.local_rows()};
    detail::launch_copy_rows(own, local.data, out.data, p.local_rows(), plan, {}, s, op);
  }
}

}  // namespace headroom::cp::cuda
