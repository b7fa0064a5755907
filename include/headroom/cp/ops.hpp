// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Host ops on row-major [rows, width] tensors of any trivially copyable element. They are the
// reference the CUDA kernels are tested against, and run as they are on CPU-only machines.
//
//   pad / unpad                  raw <-> padded (unpad's adjoint is pad with zeros)
//   split / split_adjoint        global padded -> this rank's rows, and back (zeros elsewhere)
//   to_rank_order / to_sequence_order
//                                sequence order <-> the rank-major concatenation an all-gather
//                                produces (a permutation; each is the other's inverse and adjoint)
//   pad_split                    raw -> this rank's rows in one pass (pads filled on the fly)
//   shifted_label_split          labels = split(roll(padded ids, -1)) and the loss mask with the
//                                last real token of every sequence and every pad masked
//
// Every op checks shapes against the partition / padding and refuses overlapping input and
// output, so a wrong call throws instead of producing silent garbage.
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <type_traits>

#include "headroom/core/error.hpp"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"

namespace headroom::cp {

template <class T>
concept row_element = std::is_trivially_copyable_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>;

namespace detail {
// The ops take any element type and check it first with `static_assert(checked_row_element<T>)`,
// so a wrong one stops at this sentence rather than at "no matching function". The assertion
// sits in a lambda so that the ops share one sentence and it fires where the op is instantiated.
template <class T>
inline constexpr bool checked_row_element = [] {
  static_assert(row_element<T>,
                "cp ops (pad, split, gather, ...): the element type T of cp::matrix_view<T> is not a cp::row_element "
                "(trivially copyable, not const or volatile); use a trivially copyable type such as float, "
                "std::int64_t or std::byte, and matrix_view<T const> for inputs only");
  return true;
}();

template <class T, class U>
void expect_disjoint(matrix_view<T> const& a, matrix_view<U> const& b, char const* op) {
  auto const* a0 = reinterpret_cast<std::byte const*>(a.data);
  auto const* b0 = reinterpret_cast<std::byte const*>(b.data);
  bool const overlap = a.size() > 0 && b.size() > 0 && std::less<>{}(a0, b0 + b.size_bytes()) &&
                       std::less<>{}(b0, a0 + a.size_bytes());
  expects(!overlap, op, ": input and output overlap; the op is out-of-place");
}

template <class T>
void copy_row(T const* src, T* dst, std::int64_t width) noexcept {
  std::memcpy(static_cast<void*>(dst), static_cast<void const*>(src), static_cast<std::size_t>(width) * sizeof(T));
}

template <class L>
void expect_same_batch(padding const& pad, partition<L> const& p, char const* op) {
  auto const a = pad.padded_cu_seqlens();
  auto const b = p.global_cu_seqlens();
  expects(std::equal(a.begin(), a.end(), b.begin(), b.end()), op,
          ": the partition was not built from this padding's padded cu_seqlens (", a.size() - 1, " vs ", b.size() - 1,
          " sequences, ", a.back(), " vs ", b.back(), " rows)");
}
}  // namespace detail

template <class T>
void pad(padding const& pd, matrix_view<T const> raw, matrix_view<T> padded, T const& pad_value = T{}) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_shape(raw, pd.raw_rows(), raw.width, "cp::pad", "raw input");
  detail::expect_shape(padded, pd.padded_rows(), raw.width, "cp::pad", "padded output");
  detail::expect_disjoint(raw, padded, "cp::pad");
  auto const rcu = pd.raw_cu_seqlens();
  auto const pcu = pd.padded_cu_seqlens();
  for (std::size_t s = 0; s + 1 < pcu.size(); ++s) {
    std::int64_t const n = rcu[s + 1] - rcu[s];
    if (n > 0) std::memcpy(static_cast<void*>(padded.row(pcu[s])), raw.row(rcu[s]), static_cast<std::size_t>(n) * raw.row_bytes());
    std::fill(padded.row(pcu[s] + n), padded.row(pcu[s + 1]), pad_value);
  }
}

template <class T>
void unpad(padding const& pd, matrix_view<T const> padded, matrix_view<T> raw) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_shape(padded, pd.padded_rows(), padded.width, "cp::unpad", "padded input");
  detail::expect_shape(raw, pd.raw_rows(), padded.width, "cp::unpad", "raw output");
  detail::expect_disjoint(padded, raw, "cp::unpad");
  auto const rcu = pd.raw_cu_seqlens();
  auto const pcu = pd.padded_cu_seqlens();
  for (std::size_t s = 0; s + 1 < pcu.size(); ++s) {
    std::int64_t const n = rcu[s + 1] - rcu[s];
    if (n > 0) std::memcpy(static_cast<void*>(raw.row(rcu[s])), padded.row(pcu[s]), static_cast<std::size_t>(n) * raw.row_bytes());
  }
}

template <layout_policy L, class T>
void split(partition<L> const& p, matrix_view<T const> global, matrix_view<T> local) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_shape(global, p.global_rows(), global.width, "cp::split", "global input");
  detail::expect_shape(local, p.local_rows(), global.width, "cp::split", "local output");
  detail::expect_disjoint(global, local, "cp::split");
  for (std::int64_t t = 0; t < p.local_rows(); ++t) detail::copy_row(global.row(p.source_row(t)), local.row(t), local.width);
}

/// The adjoint (transpose) of split: local rows go back to their global positions, every row
/// this rank does not hold is zero (T{}). Summing it over the CP ranks inverts split.
template <layout_policy L, class T>
void split_adjoint(partition<L> const& p, matrix_view<T const> local, matrix_view<T> global) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_shape(local, p.local_rows(), local.width, "cp::split_adjoint", "local input");
  detail::expect_shape(global, p.global_rows(), local.width, "cp::split_adjoint", "global output");
  detail::expect_disjoint(local, global, "cp::split_adjoint");
  std::fill(global.data, global.data + global.size(), T{});
  for (std::int64_t t = 0; t < p.local_rows(); ++t) detail::copy_row(local.row(t), global.row(p.source_row(t)), local.width);
}

/// Rank-major concatenation of every rank's local rows (an all-gather's output) -> sequence order.
template <layout_policy L, class T>
void to_sequence_order(partition<L> const& p, matrix_view<T const> rank_major, matrix_view<T> sequence) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_shape(rank_major, p.global_rows(), rank_major.width, "cp::to_sequence_order", "rank-major input");
  detail::expect_shape(sequence, p.global_rows(), rank_major.width, "cp::to_sequence_order", "sequence-order output");
  detail::expect_disjoint(rank_major, sequence, "cp::to_sequence_order");
  for (std::int64_t g = 0; g < p.global_rows(); ++g) {
    auto const o = p.owner(g);
    detail::copy_row(rank_major.row(o.rank * p.local_rows() + o.local_row), sequence.row(g), sequence.width);
  }
}

/// Sequence order -> rank-major concatenation (TE's thd_sequence_order_to_cp_rank_order).
template <layout_policy L, class T>
void to_rank_order(partition<L> const& p, matrix_view<T const> sequence, matrix_view<T> rank_major) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_shape(sequence, p.global_rows(), sequence.width, "cp::to_rank_order", "sequence-order input");
  detail::expect_shape(rank_major, p.global_rows(), sequence.width, "cp::to_rank_order", "rank-major output");
  detail::expect_disjoint(sequence, rank_major, "cp::to_rank_order");
  for (std::int64_t g = 0; g < p.global_rows(); ++g) {
    auto const o = p.owner(g);
    detail::copy_row(sequence.row(g), rank_major.row(o.rank * p.local_rows() + o.local_row), sequence.width);
  }
}

/// split(pad(raw)) without materialising the padded tensor.
template <layout_policy L, class T>
void pad_split(padding const& pd, partition<L> const& p, matrix_view<T const> raw, matrix_view<T> local,
               T const& pad_value = T{}) {
  static_assert(detail::checked_row_element<T>);
  detail::expect_same_batch(pd, p, "cp::pad_split");
  detail::expect_shape(raw, pd.raw_rows(), raw.width, "cp::pad_split", "raw input");
  detail::expect_shape(local, p.local_rows(), raw.width, "cp::pad_split", "local output");
  detail::expect_disjoint(raw, local, "cp::pad_split");
  for (std::int64_t t = 0; t < p.local_rows(); ++t) {
    std::int64_t const r = pd.raw_row(p.source_row(t));
    if (r >= 0)
      detail::copy_row(raw.row(r), local.row(t), local.width);
    else
      std::fill(local.row(t), local.row(t) + local.width, pad_value);
  }
}

/// Next-token labels and loss mask for this rank, from raw (unpadded) ids and an optional raw
/// loss mask (empty = every real token counts). Labels are the global padded buffer rolled by
/// -1 and then split (AReaL #1223): rolling a CP-local buffer is wrong at chunk boundaries.
/// mask[t] = raw_mask[next raw token of the same sequence], and 0 for the last real token of a
/// sequence and for every pad, so cross-sequence and wrapped labels are never counted.
template <layout_policy L, class T, class M>
  requires std::is_arithmetic_v<M>
void shifted_label_split(padding const& pd, partition<L> const& p, matrix_view<T const> raw_ids,
                         matrix_view<T> local_labels, std::span<M const> raw_loss_mask, std::span<M> local_mask,
                         T const& pad_value = T{}) {
  static_assert(detail::checked_row_element<T>);
  char const* op = "cp::shifted_label_split";
  detail::expect_same_batch(pd, p, op);
  detail::expect_shape(raw_ids, pd.raw_rows(), raw_ids.width, op, "raw ids");
  detail::expect_shape(local_labels, p.local_rows(), raw_ids.width, op, "local labels");
  detail::expect_disjoint(raw_ids, local_labels, op);
  expects(raw_loss_mask.empty() || static_cast<std::int64_t>(raw_loss_mask.size()) == pd.raw_rows(), op, ": raw loss mask has ",
          raw_loss_mask.size(), " entries, expected ", pd.raw_rows(), " (one per raw row) or none");
  expects(static_cast<std::int64_t>(local_mask.size()) == p.local_rows(), op, ": local mask has ", local_mask.size(),
          " entries, expected ", p.local_rows());
  auto const rcu = pd.raw_cu_seqlens();
  auto const pcu = pd.padded_cu_seqlens();
  std::int64_t const total = p.global_rows();
  for (std::int64_t t = 0; t < p.local_rows(); ++t) {
    auto const at = p.locate(t);
    std::int64_t const next = at.global_row + 1 == total ? 0 : at.global_row + 1;
    std::int64_t const r = pd.raw_row(next);
    if (r >= 0)
      detail::copy_row(raw_ids.row(r), local_labels.row(t), local_labels.width);
    else
      std::fill(local_labels.row(t), local_labels.row(t) + local_labels.width, pad_value);
    auto const s = static_cast<std::size_t>(at.sequence);
    std::int64_t const next_in_seq = at.global_row - pcu[s] + 1;  // offset of the label token
    bool const real = next_in_seq < rcu[s + 1] - rcu[s];
    std::int64_t const raw_next = rcu[s] + next_in_seq;
    local_mask[static_cast<std::size_t>(t)] =
        !real ? M{0} : (raw_loss_mask.empty() ? M{1} : raw_loss_mask[static_cast<std::size_t>(raw_next)]);
  }
}

}  // namespace headroom::cp
