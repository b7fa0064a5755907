// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// partition: one CP rank's share of a packed, padded batch. Pure (no CUDA, no allocation
// beyond its own metadata), built and printable before any tensor exists.
//
//   std::vector<int> cu{0, 8, 20};
//   cp::partition<cp::dual_chunk> p(std::span<int const>(cu), /*cp_size=*/2, /*cp_rank=*/0);
//   p.local_rows();            // 10
//   p.local_cu_seqlens();      // [0, 4, 10]
//   p.source_row(2);           // 6: local row 2 is global row 6
//   p.owner(11);               // {rank 1, local row 4}
#include <algorithm>
#include <cstdint>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/layout.hpp"

namespace headroom::cp {

template <layout_policy Layout = dual_chunk>
class partition {
 public:
  using layout_type = Layout;

  /// `padded_cu_seqlens`: global boundaries after per-sequence padding. Throws invalid_argument
  /// for cp_size < 1, a rank outside [0, cp_size), bad boundaries, or a sequence (or total)
  /// the layout cannot cut evenly.
  template <cu_index I>
  partition(std::span<I const> padded_cu_seqlens, int cp_size, int cp_rank) : cp_(cp_size), rank_(cp_rank) {
    expects(cp_size >= 1, "cp::partition: cp_size = ", cp_size, ", expected >= 1");
    expects(cp_rank >= 0 && cp_rank < cp_size, "cp::partition: cp_rank = ", cp_rank, " out of range [0, ", cp_size, ")");
    cu_ = checked_cu_seqlens(padded_cu_seqlens, "cp::partition: padded cu_seqlens");
    std::int64_t const m = Layout::sequence_multiple(cp_);
    for (std::size_t i = 0; i + 1 < cu_.size(); ++i) {
      std::int64_t const len = cu_[i + 1] - cu_[i];
      expects(len % m == 0, "cp::partition: sequence ", i, " has padded length ", len, " (cu_seqlens[", i, "] = ", cu_[i],
              ", cu_seqlens[", i + 1, "] = ", cu_[i + 1], "), expected a multiple of ", m, " for layout ", Layout::name,
              " at cp = ", cp_, "; pad with cp::padding first");
    }
    expects(total() % Layout::total_multiple(cp_) == 0, "cp::partition: ", total(), " packed rows, expected a multiple of ",
            Layout::total_multiple(cp_), " for layout ", Layout::name, " at cp = ", cp_);
    local_cu_.resize(cu_.size());
    for (std::size_t i = 0; i < cu_.size(); ++i)
      local_cu_[i] = Layout::local_boundary(cu_.data(), static_cast<std::int64_t>(i), total(), cp_, rank_);
  }
  template <cu_index I>
  partition(std::vector<I> const& padded_cu_seqlens, int cp_size, int cp_rank)
      : partition(std::span<I const>(padded_cu_seqlens), cp_size, cp_rank) {}

  /// The same batch seen from another rank.
  [[nodiscard]] partition for_rank(int rank) const { return partition(std::span<std::int64_t const>(cu_), cp_, rank); }

  [[nodiscard]] int cp_size() const noexcept { return cp_; }
  [[nodiscard]] int cp_rank() const noexcept { return rank_; }
  [[nodiscard]] std::int64_t sequences() const noexcept { return static_cast<std::int64_t>(cu_.size()) - 1; }
  [[nodiscard]] std::int64_t global_rows() const noexcept { return total(); }
  [[nodiscard]] std::int64_t local_rows() const noexcept { return total() / cp_; }
  /// Global padded boundaries (what attention kernels take as cu_seqlens_padded).
  [[nodiscard]] std::span<std::int64_t const> global_cu_seqlens() const noexcept { return cu_; }
  /// This rank's boundaries in its local buffer.
  [[nodiscard]] std::span<std::int64_t const> local_cu_seqlens() const noexcept { return local_cu_; }

  /// Global row (and sequence) of `local_row` on this rank, or on `rank`.
  [[nodiscard]] located_row locate(std::int64_t local_row) const { return locate(rank_, local_row); }
  [[nodiscard]] located_row locate(int rank, std::int64_t local_row) const {
    expects(rank >= 0 && rank < cp_, "cp::partition::locate: rank ", rank, " out of range [0, ", cp_, ")");
    expects(local_row >= 0 && local_row < local_rows(), "cp::partition::locate: local row ", local_row,
            " out of range [0, ", local_rows(), ")");
    return Layout::locate(cu_.data(), sequences(), total(), cp_, rank, local_row);
  }
  [[nodiscard]] std::int64_t source_row(std::int64_t local_row) const { return locate(local_row).global_row; }
  [[nodiscard]] std::int64_t source_row(int rank, std::int64_t local_row) const { return locate(rank, local_row).global_row; }

  /// Rank and local row that hold `global_row`.
  [[nodiscard]] owned_row owner(std::int64_t global_row) const {
    expects(global_row >= 0 && global_row < total(), "cp::partition::owner: global row ", global_row,
            " out of range [0, ", total(), ")");
    return Layout::owner(cu_.data(), sequences(), total(), cp_, global_row);
  }

  /// This rank's [local_rows] source indices (TE's thd_get_partitioned_indices). For
  /// inspection and for peers that need an index tensor; headroom's ops never build it.
  [[nodiscard]] std::vector<std::int64_t> local_index() const {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(local_rows()));
    for (std::int64_t t = 0; t < local_rows(); ++t)
      idx[static_cast<std::size_t>(t)] = Layout::locate(cu_.data(), sequences(), total(), cp_, rank_, t).global_row;
    return idx;
  }
  /// out[dst] = flat[src] for the rank-major all-gather result (AReaL's reassemble indices,
  /// Megatron's inverse_gather_perm).
  [[nodiscard]] std::vector<std::int64_t> gather_index() const {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(total()));
    for (std::int64_t g = 0; g < total(); ++g) {
      auto const o = Layout::owner(cu_.data(), sequences(), total(), cp_, g);
      idx[static_cast<std::size_t>(g)] = o.rank * local_rows() + o.local_row;
    }
    return idx;
  }

  [[nodiscard]] std::string describe() const {
    std::ostringstream os;
    os << "cp::partition<" << Layout::name << ">{cp " << rank_ << "/" << cp_ << ", " << sequences() << " sequences, "
       << total() << " global rows -> " << local_rows() << " local rows, local cu_seqlens [";
    std::size_t const shown = local_cu_.size() <= 9 ? local_cu_.size() : 8;
    for (std::size_t i = 0; i < shown; ++i) os << (i ? "," : "") << local_cu_[i];
    if (shown < local_cu_.size()) os << ",...," << local_cu_.back();
    os << "]}";
    return os.str();
  }
  friend std::ostream& operator<<(std::ostream& os, partition const& p) { return os << p.describe(); }

  /// Rows of the longest padded sequence (0 for an empty batch).
  [[nodiscard]] std::int64_t longest_sequence() const noexcept {
    std::int64_t m = 0;
    for (std::size_t i = 0; i + 1 < cu_.size(); ++i) m = std::max(m, cu_[i + 1] - cu_[i]);
    return m;
  }

  /// Same batch, layout and CP size (the rank may differ).
  [[nodiscard]] bool same_batch(partition const& o) const noexcept { return cp_ == o.cp_ && cu_ == o.cu_; }

 private:
  [[nodiscard]] std::int64_t total() const noexcept { return cu_.back(); }

  int cp_;
  int rank_;
  std::vector<std::int64_t> cu_;
  std::vector<std::int64_t> local_cu_;
};

}  // namespace headroom::cp
