// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Layout policies: which global (padded, sequence-order) rows a CP rank holds.
//
//   dual_chunk  every framework's default ("zigzag", TE DUAL_CHUNK_SWAP): sequence i of padded
//               length L is cut into 2*cp chunks of H = L/(2*cp) rows; rank r holds chunk r then
//               chunk 2*cp-1-r, sequence by sequence, so local cu_seqlens = cu_seqlens / cp and
//               causal attention work is balanced. Needs L % (2*cp) == 0 (no constraint at cp=1).
//   contiguous  rank r holds rows [r*T/cp, (r+1)*T/cp) of the packed buffer (verl
//               cp_layout="contiguous", needed by linear-attention / GDN CP kernels). Needs
//               T % cp == 0. Its local cu_seqlens are the global ones clipped to the window.
//
// Each policy gives the forward map (local row -> global row and sequence) and the inverse
// (global row -> owning rank and local row) as HEADROOM_CP_HD functions of the global padded
// cu_seqlens, so the same code runs in host ops and in kernels (cu_seqlens in shared memory).
#include <cstdint>
#include <string_view>

#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/detail/config.hpp"

namespace headroom::cp {

/// Where a local row comes from: its global padded row and the sequence that holds it.
struct located_row {
  std::int64_t global_row;
  std::int64_t sequence;
};

/// Who holds a global row: the CP rank and the row in that rank's local buffer.
struct owned_row {
  int rank;
  std::int64_t local_row;
};

struct dual_chunk {
  static constexpr std::string_view name = "dual_chunk";

  /// Every padded sequence length must be a multiple of this.
  // int64: 2 * cp overflows int for cp above 2^30.
  HEADROOM_CP_HD static constexpr std::int64_t sequence_multiple(int cp) noexcept { return cp > 1 ? 2 * std::int64_t{cp} : 1; }
  /// The packed total must be a multiple of this.
  HEADROOM_CP_HD static constexpr std::int64_t total_multiple(int cp) noexcept { return sequence_multiple(cp); }

  /// Local cu_seqlens[i] on `rank`: cu[i] / cp on every rank.
  template <class I>
  HEADROOM_CP_HD static constexpr std::int64_t local_boundary(I const* cu, std::int64_t i, std::int64_t, int cp, int) noexcept {
    return static_cast<std::int64_t>(cu[i]) / cp;
  }

  template <class I>
  HEADROOM_CP_HD_INLINE static located_row locate(I const* cu, std::int64_t nseq, std::int64_t, int cp, int rank,
                                                  std::int64_t local_row) noexcept {
    // local_cu[i] <= t  <=>  cu[i] <= t*cp, so the global boundaries are searched directly.
    std::int64_t const s = detail::find_sequence(cu, nseq, local_row * cp);
    std::int64_t const begin = static_cast<std::int64_t>(cu[s]);
    if (cp == 1) return {local_row, s};
    std::int64_t const len = static_cast<std::int64_t>(cu[s + 1]) - begin;
    std::int64_t const half = len / (2 * std::int64_t{cp});
    std::int64_t const o = local_row - begin / cp;
    std::int64_t const g = o < half ? begin + rank * half + o : begin + len - (rank + 1) * half + (o - half);
    return {g, s};
  }

  template <class I>
  HEADROOM_CP_HD_INLINE static owned_row owner(I const* cu, std::int64_t nseq, std::int64_t, int cp,
                                               std::int64_t global_row) noexcept {
    if (cp == 1) return {0, global_row};
    std::int64_t const s = detail::find_sequence(cu, nseq, global_row);
    std::int64_t const begin = static_cast<std::int64_t>(cu[s]);
    std::int64_t const half = (static_cast<std::int64_t>(cu[s + 1]) - begin) / (2 * std::int64_t{cp});
    std::int64_t const o = global_row - begin;
    std::int64_t const chunk = o / half;
    std::int64_t const in_chunk = o - chunk * half;
    if (chunk < cp) return {static_cast<int>(chunk), begin / cp + in_chunk};
    return {static_cast<int>(2 * std::int64_t{cp} - 1 - chunk), begin / cp + half + in_chunk};
  }
};

struct contiguous {
  static constexpr std::string_view name = "contiguous";

  HEADROOM_CP_HD static constexpr std::int64_t sequence_multiple(int) noexcept { return 1; }
  HEADROOM_CP_HD static constexpr std::int64_t total_multiple(int cp) noexcept { return cp; }

  /// The global boundary clipped to this rank's window [rank*n, (rank+1)*n), n = total/cp.
  template <class I>
  HEADROOM_CP_HD static constexpr std::int64_t local_boundary(I const* cu, std::int64_t i, std::int64_t total, int cp,
                                                    int rank) noexcept {
    std::int64_t const n = total / cp;
    std::int64_t const b = static_cast<std::int64_t>(cu[i]) - rank * n;
    return b < 0 ? 0 : (b > n ? n : b);
  }

  template <class I>
  HEADROOM_CP_HD_INLINE static located_row locate(I const* cu, std::int64_t nseq, std::int64_t total, int cp, int rank,
                                                  std::int64_t local_row) noexcept {
    std::int64_t const g = rank * (total / cp) + local_row;
    return {g, detail::find_sequence(cu, nseq, g)};
  }

  template <class I>
  HEADROOM_CP_HD_INLINE static owned_row owner(I const*, std::int64_t, std::int64_t total, int cp,
                                               std::int64_t global_row) noexcept {
    std::int64_t const n = total / cp;
    return {static_cast<int>(global_row / n), global_row % n};
  }
};

template <class L>
concept layout_policy = requires(std::int64_t const* cu, std::int64_t n, int cp) {
  { L::name } -> std::convertible_to<std::string_view>;
  { L::sequence_multiple(cp) } -> std::same_as<std::int64_t>;
  { L::total_multiple(cp) } -> std::same_as<std::int64_t>;
  { L::local_boundary(cu, n, n, cp, cp) } -> std::same_as<std::int64_t>;
  { L::locate(cu, n, n, cp, cp, n) } -> std::same_as<located_row>;
  { L::owner(cu, n, n, cp, n) } -> std::same_as<owned_row>;
};
static_assert(layout_policy<dual_chunk>);
static_assert(layout_policy<contiguous>);

}  // namespace headroom::cp
