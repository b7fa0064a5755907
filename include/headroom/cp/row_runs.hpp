// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A row copy as a few runs of consecutive rows, computed on the host from the partition.
//
// split and the gather's reorder move whole chunks: under dual_chunk, rank r's local rows are two
// runs per sequence, and sequence order is 2 * cp runs per sequence of the rank-major buffer;
// under contiguous both are one run. The CUDA ops pass such a list by value to the kernel
// (kernel parameters live in the constant bank), so a block finds each row's source with a
// binary search over a broadcast read: no boundaries to stage, no barrier, no division by the
// sequence length. Batches with more runs than fit (row_runs::capacity) take the general kernel.
//
//   cp::row_runs runs;
//   if (cp::split_runs(p, runs)) ...   // false: more than row_runs::capacity runs
//   runs.source(t)                     // the input row of output row t
#include <concepts>
#include <cstdint>

#include "headroom/cp/layout.hpp"
#include "headroom/cp/partition.hpp"

namespace headroom::cp {

/// Output rows [begin[i], begin[i + 1]) read input rows from source_begin[i] on (end: rows).
/// Runs are in output order, non-empty, and cover every output row; adjacent runs that continue
/// each other are merged.
struct row_runs {
  static constexpr int capacity = 128;  // 2 KiB of kernel parameters
  int count = 0;
  std::int64_t rows = 0;  // output rows
  std::int64_t begin[capacity] = {};
  std::int64_t source_begin[capacity] = {};

  /// The input row of output row t (0 <= t < rows): the last run starting at or before t.
  [[nodiscard]] HEADROOM_CP_HD_INLINE std::int64_t source(std::int64_t t) const noexcept {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      int const mid = (lo + hi + 1) / 2;
      if (begin[mid] <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    return source_begin[lo] + (t - begin[lo]);
  }

  /// Appends output rows [rows, rows + n) <- input rows [from, from + n); false when full.
  bool append(std::int64_t from, std::int64_t n) noexcept {
    if (n <= 0) return true;
    if (count > 0 && source_begin[count - 1] + (rows - begin[count - 1]) == from) {
      rows += n;  // continues the previous run
      return true;
    }
    if (count == capacity) return false;
    begin[count] = rows;
    source_begin[count] = from;
    ++count;
    rows += n;
    return true;
  }
};

/// Layouts whose runs are computed here (others take the general kernel).
template <class L>
inline constexpr bool has_row_runs = std::same_as<L, dual_chunk> || std::same_as<L, contiguous>;

namespace detail {
/// For each sequence of a dual_chunk partition: appends it whole at cp = 1, else calls
/// chunks(begin, length, half), half being the rows of each of its 2 * cp chunks.
template <class Chunks>
bool dual_chunk_runs(partition<dual_chunk> const& p, row_runs& runs, Chunks&& chunks) noexcept {
  auto const cu = p.global_cu_seqlens();
  for (std::int64_t s = 0; s < p.sequences(); ++s) {
    std::int64_t const b = cu[static_cast<std::size_t>(s)];
    std::int64_t const len = cu[static_cast<std::size_t>(s) + 1] - b;
    bool const ok = p.cp_size() == 1 ? runs.append(b, len) : chunks(b, len, len / (2 * std::int64_t{p.cp_size()}));
    if (!ok) return false;
  }
  return true;
}
}  // namespace detail

/// split on p's rank: local row t <- global row. False (runs unusable) when they do not fit.
template <layout_policy L>
[[nodiscard]] bool split_runs(partition<L> const& p, row_runs& runs) noexcept {
  runs.count = 0;  // the arrays are not cleared: entries past count are never read
  runs.rows = 0;
  if constexpr (std::same_as<L, contiguous>) {
    std::int64_t const n = p.local_rows();
    return runs.append(p.cp_rank() * n, n);
  } else if constexpr (std::same_as<L, dual_chunk>) {
    std::int64_t const r = p.cp_rank();
    return detail::dual_chunk_runs(p, runs, [&](std::int64_t b, std::int64_t len, std::int64_t half) {
      return runs.append(b + r * half, half) && runs.append(b + len - (r + 1) * half, half);  // dual_chunk::locate
    });
  } else {
    return false;
  }
}

/// to_sequence_order: global row g <- row of the rank-major buffer (local_rows() per rank).
template <layout_policy L>
[[nodiscard]] bool sequence_order_runs(partition<L> const& p, row_runs& runs) noexcept {
  runs.count = 0;
  runs.rows = 0;
  if constexpr (std::same_as<L, contiguous>) {
    return runs.append(0, p.global_rows());  // rank q's rows are global rows [q n, (q + 1) n)
  } else if constexpr (std::same_as<L, dual_chunk>) {
    std::int64_t const cp = p.cp_size(), n = p.local_rows();
    return detail::dual_chunk_runs(p, runs, [&](std::int64_t b, std::int64_t, std::int64_t half) {
      for (std::int64_t j = 0; j < 2 * cp; ++j)  // dual_chunk::owner
        if (!runs.append(j < cp ? j * n + b / cp : (2 * cp - 1 - j) * n + b / cp + half, half)) return false;
      return true;
    });
  } else {
    return false;
  }
}

}  // namespace headroom::cp
