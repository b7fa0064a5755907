// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// padding: raw packed boundaries -> padded boundaries every CP layout can cut evenly, with the
// raw <-> padded row maps. Each sequence is padded on the right (pads sit after its last real
// token, so a causal mask keeps them out of real tokens' attention); if the padded total must
// also be a multiple of `total_multiple`, one dummy sequence is appended (AReaL's micro-batch
// padding). TE #1930: an unpadded odd sequence at cp = 2 is silently truncated, so pad first.
//
//   std::vector<int> raw{0, 7, 17};
//   cp::padding pad(std::span<int const>(raw), cp::alignment_for<cp::dual_chunk>(/*cp=*/2));
//   pad.padded_cu_seqlens();   // [0, 8, 20]
//   pad.raw_row(7);            // -1: a pad
//   pad.padded_row(7);         // 8: b0
#include <cstdint>
#include <numeric>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/detail/config.hpp"
#include "headroom/cp/layout.hpp"

namespace headroom::cp {

/// Per-sequence alignment for `Layout` at CP size `cp`, tensor-parallel size `tp` and any
/// extra multiple (FP8 kernels, vector widths): lcm(2*cp*tp, extra) for dual_chunk at cp > 1
/// (AReaL, verl, Megatron), lcm(cp*tp, extra) for contiguous (verl).
template <layout_policy Layout>
[[nodiscard]] std::int64_t alignment_for(int cp, int tp = 1, std::int64_t extra = 1) {
  expects(cp >= 1, "cp::alignment_for: cp = ", cp, ", expected >= 1");
  expects(tp >= 1, "cp::alignment_for: tp = ", tp, ", expected >= 1");
  expects(extra >= 1, "cp::alignment_for: extra = ", extra, ", expected >= 1");
  std::int64_t const layout = std::lcm(Layout::sequence_multiple(cp), Layout::total_multiple(cp));  // <= 2^32
  std::int64_t with_tp = 0, out = 0;
  bool const overflow = __builtin_mul_overflow(layout, std::int64_t{tp}, &with_tp) ||
                        __builtin_mul_overflow(with_tp / std::gcd(with_tp, extra), extra, &out);
  expects(!overflow, "cp::alignment_for: lcm(", layout, " * tp ", tp, ", extra ", extra, ") at cp = ", cp,
          " overflows int64, expected a representable alignment");
  return out;
}

namespace detail {
/// a + b for padded row counts; throws invalid_argument naming `what` when it overflows int64.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, char const* what) {
  std::int64_t out = 0;
  expects(!__builtin_add_overflow(a, b, &out), what, ": ", a, " + ", b, " rows overflow int64");
  return out;
}
/// n rounded up to a multiple of m (n >= 0, m >= 1), or invalid_argument on overflow.
inline std::int64_t checked_round_up(std::int64_t n, std::int64_t m, char const* what) {
  std::int64_t const r = n % m;
  return r == 0 ? n : checked_add(n, m - r, what);
}

/// Raw row of padded row `padded_row` in sequence `s`, or -1 for a pad.
template <class I, class J>
HEADROOM_CP_HD_INLINE std::int64_t raw_row_in(I const* raw_cu, J const* padded_cu, std::int64_t s,
                                              std::int64_t padded_row) noexcept {
  std::int64_t const o = padded_row - static_cast<std::int64_t>(padded_cu[s]);
  std::int64_t const raw_len = static_cast<std::int64_t>(raw_cu[s + 1]) - static_cast<std::int64_t>(raw_cu[s]);
  return o < raw_len ? static_cast<std::int64_t>(raw_cu[s]) + o : -1;
}
}  // namespace detail

class padding {
 public:
  /// Throws invalid_argument for bad raw boundaries or non-positive multiples.
  template <cu_index I>
  padding(std::span<I const> raw_cu_seqlens, std::int64_t sequence_multiple, std::int64_t total_multiple = 1)
      : seq_multiple_(sequence_multiple), total_multiple_(total_multiple) {
    char const* what = "cp::padding";
    expects(sequence_multiple >= 1, "cp::padding: sequence_multiple = ", sequence_multiple, ", expected >= 1");
    expects(total_multiple >= 1, "cp::padding: total_multiple = ", total_multiple, ", expected >= 1");
    raw_cu_ = checked_cu_seqlens(raw_cu_seqlens, "cp::padding: raw cu_seqlens");
    raw_sequences_ = static_cast<std::int64_t>(raw_cu_.size()) - 1;
    padded_cu_.assign(1, 0);
    for (std::size_t i = 0; i + 1 < raw_cu_.size(); ++i) {
      std::int64_t const len = raw_cu_[i + 1] - raw_cu_[i];
      padded_cu_.push_back(detail::checked_add(padded_cu_.back(), detail::checked_round_up(len, seq_multiple_, what), what));
    }
    // Both totals are multiples of the sequence multiple, so the dummy is too when the total
    // multiple is itself a multiple of it (alignment_for guarantees that).
    std::int64_t target = 0;
    expects(!__builtin_mul_overflow(seq_multiple_ / std::gcd(seq_multiple_, total_multiple_), total_multiple_, &target),
            what, ": lcm(sequence_multiple ", seq_multiple_, ", total_multiple ", total_multiple_, ") overflows int64");
    std::int64_t const total = detail::checked_round_up(padded_cu_.back(), target, what);
    if (total != padded_cu_.back()) {
      padded_cu_.push_back(total);
      raw_cu_.push_back(raw_cu_.back());  // the dummy sequence has no raw rows
    }
  }
  template <cu_index I>
  padding(std::vector<I> const& raw_cu_seqlens, std::int64_t sequence_multiple, std::int64_t total_multiple = 1)
      : padding(std::span<I const>(raw_cu_seqlens), sequence_multiple, total_multiple) {}

  [[nodiscard]] std::int64_t raw_rows() const noexcept { return raw_cu_.back(); }
  [[nodiscard]] std::int64_t padded_rows() const noexcept { return padded_cu_.back(); }
  /// Sequences of the padded batch, including the dummy one if it was appended.
  [[nodiscard]] std::int64_t sequences() const noexcept { return static_cast<std::int64_t>(padded_cu_.size()) - 1; }
  [[nodiscard]] std::int64_t raw_sequences() const noexcept { return raw_sequences_; }
  [[nodiscard]] bool has_dummy_sequence() const noexcept { return sequences() > raw_sequences_; }
  [[nodiscard]] std::int64_t pad_rows() const noexcept { return padded_rows() - raw_rows(); }
  [[nodiscard]] std::int64_t sequence_multiple() const noexcept { return seq_multiple_; }

  /// Raw boundaries, one entry per padded sequence (+1); the dummy sequence has length 0.
  [[nodiscard]] std::span<std::int64_t const> raw_cu_seqlens() const noexcept { return raw_cu_; }
  [[nodiscard]] std::span<std::int64_t const> padded_cu_seqlens() const noexcept { return padded_cu_; }

  /// Padded row of a raw row.
  [[nodiscard]] std::int64_t padded_row(std::int64_t raw_row) const {
    expects(raw_row >= 0 && raw_row < raw_rows(), "cp::padding::padded_row: raw row ", raw_row, " out of range [0, ",
            raw_rows(), ")");
    // Last padded sequence whose raw range starts at or before the row (skips empty ones).
    std::int64_t const s = detail::find_sequence(raw_cu_.data(), sequences(), raw_row);
    return padded_cu_[static_cast<std::size_t>(s)] + (raw_row - raw_cu_[static_cast<std::size_t>(s)]);
  }
  /// Raw row of a padded row, or -1 if it is a pad.
  [[nodiscard]] std::int64_t raw_row(std::int64_t padded_row) const {
    expects(padded_row >= 0 && padded_row < padded_rows(), "cp::padding::raw_row: padded row ", padded_row,
            " out of range [0, ", padded_rows(), ")");
    std::int64_t const s = detail::find_sequence(padded_cu_.data(), sequences(), padded_row);
    return detail::raw_row_in(raw_cu_.data(), padded_cu_.data(), s, padded_row);
  }
  [[nodiscard]] std::vector<std::int64_t> raw_to_padded() const {
    std::vector<std::int64_t> m(static_cast<std::size_t>(raw_rows()));
    for (std::int64_t s = 0; s < sequences(); ++s)
      for (std::int64_t r = raw_cu_[static_cast<std::size_t>(s)]; r < raw_cu_[static_cast<std::size_t>(s) + 1]; ++r)
        m[static_cast<std::size_t>(r)] = padded_cu_[static_cast<std::size_t>(s)] + (r - raw_cu_[static_cast<std::size_t>(s)]);
    return m;
  }
  /// -1 marks pads.
  [[nodiscard]] std::vector<std::int64_t> padded_to_raw() const {
    std::vector<std::int64_t> m(static_cast<std::size_t>(padded_rows()), -1);
    for (std::int64_t r = 0; r < raw_rows(); ++r) m[static_cast<std::size_t>(padded_row(r))] = r;
    return m;
  }

  [[nodiscard]] std::string describe() const {
    std::ostringstream os;
    os << "cp::padding{" << raw_sequences_ << " sequences, " << raw_rows() << " raw rows -> " << padded_rows()
       << " padded rows (" << pad_rows() << " pads, multiple " << seq_multiple_;
    if (total_multiple_ > 1) os << ", total multiple " << total_multiple_;
    if (has_dummy_sequence()) os << ", dummy sequence of " << padded_rows() - padded_cu_[padded_cu_.size() - 2] << " rows";
    os << ")}";
    return os.str();
  }
  friend std::ostream& operator<<(std::ostream& os, padding const& p) { return os << p.describe(); }

 private:
  std::int64_t seq_multiple_;
  std::int64_t total_multiple_;
  std::int64_t raw_sequences_ = 0;
  std::vector<std::int64_t> raw_cu_;
  std::vector<std::int64_t> padded_cu_;
};

}  // namespace headroom::cp
