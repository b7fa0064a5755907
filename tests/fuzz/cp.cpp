// SPDX-License-Identifier: Apache-2.0
// Fuzz target: cp padding, partitions and host ops on arbitrary packed batches.
//
// Input: layout, index type, CP size and rank (sometimes out of range), raw cu_seqlens (small
// lengths, or arbitrary 64-bit values), the padding multiples (from alignment_for or raw),
// row width, loss mask bits. Every call either throws a headroom::error or gives a result
// that is checked against an independent reference:
//   - padding: padded boundaries non-decreasing, each padded length >= raw and a multiple of
//     the sequence multiple, total a multiple of lcm(multiples), raw <-> padded maps inverse;
//   - a padding made with alignment_for<L>(cp) always partitions (no error on any rank);
//   - partition: the ranks' rows form a bijection onto the global rows, owner() inverts
//     locate(), local cu_seqlens are monotone, end at local_rows and bracket every row;
//   - row runs (the CUDA split / reorder's): expand to local_index / gather_index, fewest runs,
//     refused only over capacity;
//   - ops: to_sequence_order(concat(split(pad(x)))) == pad(x), unpad of that == x, pad_split
//     == split(pad(x)), the split adjoints sum back to pad(x), to_rank_order inverts;
//   - shifted labels and mask match a per-sequence reference (last real token and pads
//     masked, label = next raw token of the same sequence);
//   - sometimes cp::gather on a thread group (whole or chunked workspace) == pad(x).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "../common/error_of.hpp"
#include "fuzz_input.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cp/gather.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/cp/row_runs.hpp"
#include "headroom/host/thread_group.hpp"

namespace {

using headroom_test::throws;

using headroom::cp::matrix_view;
using i64 = std::int64_t;

constexpr i64 max_rows = 1 << 9;  // data checks only below this many padded rows

struct batch {
  std::vector<i64> raw;  // raw cu_seqlens as drawn (may be invalid)
  bool use_int32 = false;
  bool huge = false;  // arbitrary 64-bit boundaries: only validation is exercised
};

batch draw_batch(fuzz::input& in) {
  batch b;
  b.use_int32 = in.flag();
  b.huge = in.in<int>(0, 15) == 0;
  int const n = in.in<int>(0, 12);
  if (in.in<int>(0, 7) != 0) b.raw.push_back(0);  // mostly a valid start
  for (int i = 0; i < n; ++i) {
    if (b.huge)
      b.raw.push_back(b.use_int32 ? in.take<std::int32_t>() : in.take<i64>());
    else if (in.in<int>(0, 31) == 0)
      b.raw.push_back(b.raw.empty() ? 1 : b.raw.back() - in.in<i64>(1, 3));  // decreasing: must be rejected
    else
      b.raw.push_back((b.raw.empty() ? 0 : b.raw.back()) + in.in<i64>(0, 40));
  }
  return b;
}

template <class I>
std::vector<I> narrowed(std::vector<i64> const& v) {
  return std::vector<I>(v.begin(), v.end());
}

void check_padding(headroom::cp::padding const& pd, std::vector<i64> const& raw, i64 seq_mult, i64 total_mult) {
  auto const rcu = pd.raw_cu_seqlens();
  auto const pcu = pd.padded_cu_seqlens();
  FUZZ_CHECK(rcu.size() == pcu.size() && pcu.front() == 0);
  FUZZ_CHECK(std::equal(raw.begin(), raw.end(), rcu.begin()));
  FUZZ_CHECK(pd.raw_sequences() == static_cast<i64>(raw.size()) - 1);
  FUZZ_CHECK(pd.sequences() == pd.raw_sequences() + (pd.has_dummy_sequence() ? 1 : 0));
  for (std::size_t s = 0; s + 1 < pcu.size(); ++s) {
    i64 const len = pcu[s + 1] - pcu[s];
    FUZZ_CHECK(len >= rcu[s + 1] - rcu[s]);
    FUZZ_CHECK(len % seq_mult == 0);
    FUZZ_CHECK(len - (rcu[s + 1] - rcu[s]) < std::lcm(seq_mult, total_mult) || (pd.has_dummy_sequence() && s + 2 == pcu.size()));
  }
  FUZZ_CHECK(pd.padded_rows() % std::lcm(seq_mult, total_mult) == 0);
  FUZZ_CHECK(pd.raw_rows() == raw.back());
  if (pd.padded_rows() > max_rows) return;
  auto const r2p = pd.raw_to_padded();
  auto const p2r = pd.padded_to_raw();
  i64 pads = 0;
  for (i64 g = 0; g < pd.padded_rows(); ++g) {
    i64 const r = p2r[static_cast<std::size_t>(g)];
    FUZZ_CHECK(r == pd.raw_row(g));
    if (r < 0)
      ++pads;
    else
      FUZZ_CHECK(r2p[static_cast<std::size_t>(r)] == g && pd.padded_row(r) == g);
  }
  FUZZ_CHECK(pads == pd.pad_rows());
  FUZZ_CHECK(throws([&] { (void)pd.raw_row(pd.padded_rows()); }) && throws([&] { (void)pd.padded_row(-1); }));
}

// The runs the CUDA split / reorder take: when built, they expand to `index` row for row and are
// the fewest runs of consecutive rows; refused only when that fewest number is over capacity.
void check_runs(bool built, headroom::cp::row_runs const& runs, std::vector<i64> const& index) {
  i64 fewest = index.empty() ? 0 : 1;
  for (std::size_t t = 1; t < index.size(); ++t) fewest += index[t] != index[t - 1] + 1;
  if (!built) {
    FUZZ_CHECK(fewest > headroom::cp::row_runs::capacity);
    return;
  }
  FUZZ_CHECK(runs.rows == static_cast<i64>(index.size()) && runs.count == fewest);
  for (i64 t = 0; t < runs.rows; ++t) FUZZ_CHECK(runs.source(t) == index[static_cast<std::size_t>(t)]);
}

template <class L>
void check_partitions(std::vector<headroom::cp::partition<L>> const& parts) {
  headroom::cp::row_runs runs;
  int const cp = static_cast<int>(parts.size());
  auto const& p0 = parts.front();
  i64 const total = p0.global_rows();
  FUZZ_CHECK(total % cp == 0 && p0.local_rows() * cp == total);
  auto const gcu = p0.global_cu_seqlens();
  std::vector<char> seen(static_cast<std::size_t>(total), 0);
  for (int r = 0; r < cp; ++r) {
    auto const& p = parts[static_cast<std::size_t>(r)];
    FUZZ_CHECK(p.cp_rank() == r && p.cp_size() == cp && p.same_batch(p0));
    auto const lcu = p.local_cu_seqlens();
    FUZZ_CHECK(lcu.size() == gcu.size() && lcu.front() == 0 && lcu.back() == p.local_rows());
    FUZZ_CHECK(std::is_sorted(lcu.begin(), lcu.end()));
    if constexpr (std::same_as<L, headroom::cp::dual_chunk>)
      for (std::size_t i = 0; i < lcu.size(); ++i) FUZZ_CHECK(lcu[i] * cp == gcu[i]);
    auto const idx = p.local_index();
    check_runs(headroom::cp::split_runs(p, runs), runs, idx);
    for (i64 t = 0; t < p.local_rows(); ++t) {
      auto const at = p.locate(t);
      FUZZ_CHECK(at.global_row >= 0 && at.global_row < total);
      FUZZ_CHECK(idx[static_cast<std::size_t>(t)] == at.global_row);
      auto const s = static_cast<std::size_t>(at.sequence);
      FUZZ_CHECK(gcu[s] <= at.global_row && at.global_row < gcu[s + 1]);  // the sequence holds the row
      FUZZ_CHECK(lcu[s] <= t && t < lcu[s + 1]);                          // and so do the local boundaries
      auto const o = p.owner(at.global_row);
      FUZZ_CHECK(o.rank == r && o.local_row == t);
      FUZZ_CHECK(!seen[static_cast<std::size_t>(at.global_row)]);
      seen[static_cast<std::size_t>(at.global_row)] = 1;
    }
    FUZZ_CHECK(throws([&] { (void)p.locate(p.local_rows()); }) && throws([&] { (void)p.owner(total); }) &&
               throws([&] { (void)p.locate(cp, 0); }));
  }
  FUZZ_CHECK(std::all_of(seen.begin(), seen.end(), [](char c) { return c == 1; }));
  auto const gi = p0.gather_index();
  for (i64 g = 0; g < total; ++g) {
    auto const o = p0.owner(g);
    FUZZ_CHECK(gi[static_cast<std::size_t>(g)] == o.rank * p0.local_rows() + o.local_row);
  }
  check_runs(headroom::cp::sequence_order_runs(p0, runs), runs, gi);
}

// Reference labels and mask, straight from the boundaries: row o of sequence s (padded start
// ps, raw start rs, raw length n) has label raw[rs + o + 1] and mask raw_mask[rs + o + 1] when
// o + 1 < n, else the pad value and 0.
void reference_labels(headroom::cp::padding const& pd, std::vector<int> const& ids, std::vector<int> const& mask,
                      std::vector<int>& labels, std::vector<int>& lmask) {
  auto const rcu = pd.raw_cu_seqlens();
  auto const pcu = pd.padded_cu_seqlens();
  labels.assign(static_cast<std::size_t>(pd.padded_rows()), -7);
  lmask.assign(static_cast<std::size_t>(pd.padded_rows()), 0);
  for (std::size_t s = 0; s + 1 < pcu.size(); ++s) {
    i64 const n = rcu[s + 1] - rcu[s];
    for (i64 o = 0; o + 1 < n; ++o) {
      auto const g = static_cast<std::size_t>(pcu[s] + o);
      auto const next = static_cast<std::size_t>(rcu[s] + o + 1);
      lmask[g] = mask.empty() ? 1 : mask[next];
    }
  }
  // Labels are the padded ids rolled by one (the label of a masked row is never read by a
  // loss, but it is still defined: the next padded row's id, or the pad value).
  std::vector<int> padded(static_cast<std::size_t>(pd.padded_rows()), -7);
  for (std::size_t s = 0; s + 1 < pcu.size(); ++s)
    for (i64 o = 0; o < rcu[s + 1] - rcu[s]; ++o)
      padded[static_cast<std::size_t>(pcu[s] + o)] = ids[static_cast<std::size_t>(rcu[s] + o)];
  for (std::size_t g = 0; g < padded.size(); ++g) labels[g] = padded[(g + 1) % padded.size()];
}

template <class L>
void check_ops(headroom::cp::padding const& pd, std::vector<headroom::cp::partition<L>> const& parts, i64 width,
               fuzz::input& in) {
  namespace cp = headroom::cp;
  int const cp_size = static_cast<int>(parts.size());
  i64 const total = pd.padded_rows();
  i64 const local = total / cp_size;
  std::vector<int> x(static_cast<std::size_t>(pd.raw_rows() * width));
  std::iota(x.begin(), x.end(), 1);  // distinct values: any misplaced row shows
  std::vector<int> padded(static_cast<std::size_t>(total * width));
  cp::pad(pd, matrix_view<int const>(x.data(), pd.raw_rows(), width), matrix_view<int>(padded.data(), total, width), -7);

  std::vector<int> rank_major(padded.size()), sum(padded.size(), 0), adj(padded.size()), ps(static_cast<std::size_t>(local * width));
  for (int r = 0; r < cp_size; ++r) {
    matrix_view<int> mine(rank_major.data() + r * local * width, local, width);
    cp::split(parts[static_cast<std::size_t>(r)], matrix_view<int const>(padded.data(), total, width), mine);
    cp::pad_split(pd, parts[static_cast<std::size_t>(r)], matrix_view<int const>(x.data(), pd.raw_rows(), width),
                  matrix_view<int>(ps.data(), local, width), -7);
    FUZZ_CHECK(std::equal(ps.begin(), ps.end(), mine.data));
    cp::split_adjoint(parts[static_cast<std::size_t>(r)], cp::as_const(mine), matrix_view<int>(adj.data(), total, width));
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += adj[i];
  }
  std::vector<int> sequence(padded.size()), back(padded.size()), raw_back(x.size());
  cp::to_sequence_order(parts[0], matrix_view<int const>(rank_major.data(), total, width), matrix_view<int>(sequence.data(), total, width));
  FUZZ_CHECK(sequence == padded);
  // Adjoint: zeros elsewhere, so the sum over ranks is the padded input except pads (-7 kept).
  FUZZ_CHECK(sum == padded);
  cp::to_rank_order(parts[0], matrix_view<int const>(sequence.data(), total, width), matrix_view<int>(back.data(), total, width));
  FUZZ_CHECK(back == rank_major);
  cp::unpad(pd, matrix_view<int const>(sequence.data(), total, width), matrix_view<int>(raw_back.data(), pd.raw_rows(), width));
  FUZZ_CHECK(raw_back == x);

  // Labels and mask (width-1 ids).
  std::vector<int> ids(static_cast<std::size_t>(pd.raw_rows()));
  std::iota(ids.begin(), ids.end(), 100);
  std::vector<int> mask;
  if (in.flag()) {
    mask.resize(ids.size());
    for (auto& m : mask) m = in.in<int>(0, 1);
  }
  std::vector<int> ref_labels, ref_mask;
  reference_labels(pd, ids, mask, ref_labels, ref_mask);
  std::vector<int> labels(static_cast<std::size_t>(local)), lmask(static_cast<std::size_t>(local));
  for (int r = 0; r < cp_size; ++r) {
    auto const& p = parts[static_cast<std::size_t>(r)];
    cp::shifted_label_split(pd, p, matrix_view<int const>(ids.data(), pd.raw_rows(), 1), matrix_view<int>(labels.data(), local, 1),
                            std::span<int const>(mask), std::span<int>(lmask), -7);
    for (i64 t = 0; t < local; ++t) {
      auto const g = static_cast<std::size_t>(p.source_row(t));
      FUZZ_CHECK(lmask[static_cast<std::size_t>(t)] == ref_mask[g]);
      FUZZ_CHECK(labels[static_cast<std::size_t>(t)] == ref_labels[g]);
    }
  }

  // Misuse: wrong shapes and aliasing are errors, never garbage.
  FUZZ_CHECK(throws([&] {
    cp::split(parts[0], matrix_view<int const>(padded.data(), total, width), matrix_view<int>(padded.data(), local, width));
  }) || local == 0);
  FUZZ_CHECK(throws([&] {
    cp::split(parts[0], matrix_view<int const>(padded.data(), total, width), matrix_view<int>(ps.data(), local, width + 1));
  }) || local == 0);

  // The real gather over a thread group, sometimes through a chunked workspace.
  if (cp_size > 1 && cp_size <= 4 && total > 0 && in.in<int>(0, 7) == 0) {
    i64 const ws_rows = in.flag() ? parts[0].longest_sequence() : total;
    std::vector<std::vector<int>> outs(static_cast<std::size_t>(cp_size), std::vector<int>(padded.size()));
    headroom::host::launch(cp_size, [&](headroom::host::thread_communicator& comm) {
      auto const r = static_cast<std::size_t>(comm.rank());
      std::vector<int> ws(static_cast<std::size_t>(ws_rows * width));
      cp::gather(comm, parts[r], matrix_view<int const>(rank_major.data() + static_cast<i64>(r) * local * width, local, width),
                 matrix_view<int>(outs[r].data(), total, width), matrix_view<int>(ws.data(), ws_rows, width));
    });
    for (auto const& o : outs) FUZZ_CHECK(o == padded);
  }
}

template <class L, class I>
void run(fuzz::input& in, batch const& b) {
  namespace cp = headroom::cp;
  auto const raw = narrowed<I>(b.raw);
  int const cp_size = in.in<int>(0, 15) == 0 ? in.take<int>() : in.in<int>(1, 8);
  int const rank = in.in<int>(0, 15) == 0 ? in.take<int>() : in.in<int>(0, std::max(cp_size, 1) - 1);
  int const tp = in.in<int>(0, 15) == 0 ? in.take<int>() : in.in<int>(1, 2);
  i64 const extra = in.in<int>(0, 15) == 0 ? in.take<i64>() : in.in<i64>(1, 4);
  i64 const width = in.in<i64>(1, 3);
  bool const raw_multiples = in.in<int>(0, 7) == 0;
  i64 const seq_raw = in.take<i64>();
  i64 const total_raw = in.take<i64>();

  // A partition straight on raw boundaries: valid only when every length already fits.
  try {
    cp::partition<L> direct(std::span<I const>(raw), cp_size, rank);
    FUZZ_CHECK(cp_size >= 1 && rank >= 0 && rank < cp_size);
    FUZZ_CHECK(direct.global_rows() % L::total_multiple(cp_size) == 0);
  } catch (headroom::error const&) {
  }

  i64 seq_mult = 0;
  try {
    seq_mult = cp::alignment_for<L>(cp_size, tp, extra);
  } catch (headroom::error const&) {
    // Only bad arguments or a multiple beyond 64 bits may be refused.
    if (cp_size >= 1 && tp >= 1 && extra >= 1) {
      i64 const layout = std::lcm(L::sequence_multiple(cp_size), L::total_multiple(cp_size));
      constexpr i64 top = std::numeric_limits<i64>::max();
      bool const overflows = layout > top / tp || (layout * tp) / std::gcd(layout * tp, extra) > top / extra;
      FUZZ_CHECK(overflows);
    }
    return;
  }
  FUZZ_CHECK(seq_mult >= 1 && seq_mult % extra == 0 && seq_mult % (L::sequence_multiple(cp_size) * tp) == 0 &&
             seq_mult % L::total_multiple(cp_size) == 0);
  i64 const total_mult = raw_multiples ? total_raw : (in.flag() && seq_mult <= std::numeric_limits<i64>::max() / 2 ? 2 * seq_mult : 1);
  if (raw_multiples) seq_mult = seq_raw;
  std::optional<cp::padding> pd;
  try {
    pd.emplace(std::span<I const>(raw), seq_mult, total_mult);
  } catch (headroom::error const&) {
    return;
  }
  FUZZ_CHECK(seq_mult >= 1 && total_mult >= 1);
  check_padding(*pd, b.raw, seq_mult, total_mult);

  // Padded with the layout's alignment: every rank of a valid group must partition it.
  std::vector<cp::partition<L>> parts;
  if (cp_size < 1) {
    FUZZ_CHECK(throws([&] { cp::partition<L>(pd->padded_cu_seqlens(), cp_size, 0); }));
    return;
  }
  if (cp_size > 64) {  // too many ranks to walk: the first and last must agree
    FUZZ_CHECK(throws([&] { cp::partition<L>(pd->padded_cu_seqlens(), cp_size, 0); }) ==
               throws([&] { cp::partition<L>(pd->padded_cu_seqlens(), cp_size, cp_size - 1); }));
    return;
  }
  for (int r = 0; r < cp_size; ++r) {
    try {
      parts.emplace_back(pd->padded_cu_seqlens(), cp_size, r);
    } catch (headroom::error const&) {
      FUZZ_CHECK(raw_multiples);  // alignment_for's multiple never fails
      FUZZ_CHECK(parts.empty());  // the verdict is the same on every rank
      return;
    }
  }
  FUZZ_CHECK(throws([&] { cp::partition<L>(pd->padded_cu_seqlens(), cp_size, cp_size); }));
  FUZZ_CHECK(throws([&] { cp::partition<L>(pd->padded_cu_seqlens(), cp_size, -1); }));
  if (pd->padded_rows() > max_rows || pd->padded_rows() * width > max_rows * 3) return;
  check_partitions(parts);
  check_ops(*pd, parts, width, in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  fuzz::input in(data, size);
  bool const contiguous = in.flag();
  batch const b = draw_batch(in);
  if (b.use_int32 && std::any_of(b.raw.begin(), b.raw.end(), [](i64 v) { return v != static_cast<std::int32_t>(v); }))
    return 0;
  if (contiguous) {
    b.use_int32 ? run<headroom::cp::contiguous, std::int32_t>(in, b) : run<headroom::cp::contiguous, i64>(in, b);
  } else {
    b.use_int32 ? run<headroom::cp::dual_chunk, std::int32_t>(in, b) : run<headroom::cp::dual_chunk, i64>(in, b);
  }
  return 0;
}
