# SPDX-License-Identifier: Apache-2.0
import numpy as np
import pytest

import headroom
from headroom import cp


def test_padding_of_the_documented_example():
    pd = cp.Padding([0, 7, 17], cp.alignment_for("dual_chunk", 2))
    assert pd.padded_cu_seqlens.tolist() == [0, 8, 20]
    assert pd.padded_cu_seqlens.dtype == np.int64
    assert (pd.raw_rows, pd.padded_rows, pd.pad_rows) == (17, 20, 3)
    assert pd.raw_row(7) == -1 and pd.padded_row(7) == 8
    assert pd.padded_to_raw().tolist() == list(range(7)) + [-1] + list(range(7, 17)) + [-1, -1]
    assert pd.raw_to_padded().tolist() == list(range(7)) + list(range(8, 18))
    assert "17 raw rows -> 20 padded rows" in repr(pd)


def test_alignment_and_dummy_sequence():
    assert cp.alignment_for("dual_chunk", 4) == 8
    assert cp.alignment_for("dual_chunk", 4, tp=2, extra=16) == 16
    assert cp.alignment_for("contiguous", 4, tp=2) == 8
    assert cp.total_multiple("contiguous", 3) == 3
    pd = cp.pad([0, 5], "dual_chunk", 2, total_multiple=16)
    assert pd.has_dummy_sequence and pd.padded_cu_seqlens.tolist() == [0, 8, 16]
    assert pd.raw_cu_seqlens.tolist() == [0, 5, 5]


def test_partition_of_the_documented_example():
    p = cp.partition([0, 8, 20], 2, 0)
    assert (p.layout, p.cp_size, p.cp_rank, p.local_rows, p.global_rows) == ("dual_chunk", 2, 0, 10, 20)
    assert p.local_cu_seqlens.tolist() == [0, 4, 10]
    assert p.locate(2) == (6, 0)
    assert p.owner(11) == (1, 4)
    # rank 0 holds chunk 0 and chunk 3 of each sequence (chunks of L / 4 rows)
    assert p.local_index().tolist() == [0, 1, 6, 7, 8, 9, 10, 17, 18, 19]
    assert p.for_rank(1).local_index().tolist() == [2, 3, 4, 5, 11, 12, 13, 14, 15, 16]
    assert p.same_batch(p.for_rank(1)) and not p.same_batch(cp.partition([0, 8, 20], 2, 0, "contiguous"))
    assert repr(p).startswith("cp::partition<dual_chunk>{cp 0/2")


@pytest.mark.parametrize("layout", cp.LAYOUTS)
@pytest.mark.parametrize("cp_size", [1, 2, 3, 4])
def test_index_plans_cover_the_batch_and_invert(layout, cp_size):
    rng = np.random.default_rng(cp_size)
    lengths = rng.integers(1, 40, size=7)
    raw_cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    plans = [cp.index_plan(raw_cu, cp_size, r, layout) for r in range(cp_size)]
    total = plans[0].partition.global_rows
    held = np.concatenate([pl.global_index for pl in plans])
    assert sorted(held.tolist()) == list(range(total))  # every padded row on exactly one rank
    # gather_index puts the rank-major concatenation back in sequence order
    assert np.array_equal(held[plans[0].gather_index], np.arange(total))
    padded_to_raw = plans[0].padding.padded_to_raw()
    ids = rng.integers(0, 50000, size=int(raw_cu[-1]))
    for r, pl in enumerate(plans):
        assert pl.global_index.dtype == np.int64 and pl.gather_index.dtype == np.int64
        assert np.array_equal(pl.raw_index, padded_to_raw[pl.global_index])
        owners = [pl.partition.owner(g) for g in pl.global_index]
        assert owners == [(r, t) for t in range(pl.local_rows)]
        # next-token labels: the padded global sequence shifted by one within each sequence
        padded_ids = np.full(total, -1)
        padded_ids[pl.padding.raw_to_padded()] = np.arange(len(ids))
        for t, g in enumerate(pl.global_index):
            s = np.searchsorted(pl.padded_cu_seqlens, g, side="right") - 1
            real_next = g + 1 - pl.padded_cu_seqlens[s] < lengths[s] if s < len(lengths) else False
            assert pl.loss_mask[t] == (1 if real_next else 0)
            if real_next:
                assert pl.label_index[t] == padded_ids[g + 1]
        labels, mask = cp.shifted_labels(pl.padding, pl.partition, ids, pad_value=0)
        assert np.array_equal(mask, pl.loss_mask)
        assert np.array_equal(labels[mask == 1], ids[pl.label_index[mask == 1]])
        if layout == "contiguous":
            n = total // cp_size
            assert pl.global_index.tolist() == list(range(r * n, (r + 1) * n))


def test_loss_mask_follows_the_raw_mask():
    raw_mask = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1])
    pl = cp.index_plan([0, 4, 10], 2, 1, raw_loss_mask=raw_mask)
    for t in range(pl.local_rows):
        if pl.label_index[t] >= 0 and pl.loss_mask[t] != 0:
            assert raw_mask[pl.label_index[t]] == 1
    assert any(pl.label_index[t] >= 0 and raw_mask[pl.label_index[t]] == 0 and pl.loss_mask[t] == 0
               for t in range(pl.local_rows))


def test_index_plans_accept_lists_int32_int64_and_numpy_scalars():
    a = cp.partition([0, 8, 20], 2, 1).local_index()
    b = cp.partition(np.array([0, 8, 20], dtype=np.int32), np.int64(2), np.int32(1)).local_index()
    c = cp.partition(np.array([0, 8, 20], dtype=np.uint16), 2, 1).local_index()
    assert a.tolist() == b.tolist() == c.tolist()


@pytest.mark.parametrize("call, error, message", [
    (lambda: cp.Padding([1, 5], 2), headroom.invalid_argument, r"raw cu_seqlens\[0\] = 1, expected 0"),
    (lambda: cp.Padding([0, 5, 3], 2), headroom.invalid_argument, "decreases at index 2"),
    (lambda: cp.Padding([0, -5], 2), headroom.invalid_argument, "is negative"),
    (lambda: cp.Padding([], 2), headroom.invalid_argument, "empty, expected at least"),
    (lambda: cp.Padding([0, 5], 0), headroom.invalid_argument, "sequence_multiple = 0"),
    (lambda: cp.Padding([0, 5.5], 2), TypeError, r"raw cu_seqlens\[1\] = 5.5 \(float\); expected an integer"),
    (lambda: cp.Padding("0,5", 2), TypeError, "expected a 1-d sequence of integers"),
    (lambda: cp.Padding(np.zeros((2, 2), dtype=np.int64), 2), headroom.invalid_argument, "2 dimensions"),
    (lambda: cp.Padding([0, 2**64], 2), headroom.invalid_argument, "does not fit in a signed 64-bit"),
    (lambda: cp.Padding([0, 5], 2).raw_row(10), headroom.invalid_argument, "padded row 10 out of range"),
    (lambda: cp.partition([0, 7], 2, 0), headroom.invalid_argument,
     "sequence 0 has padded length 7 .*expected a multiple of 4 for layout dual_chunk"),
    (lambda: cp.partition([0, 7], 2, 0, "contiguous"), headroom.invalid_argument, "7 packed rows, expected a multiple of 2"),
    (lambda: cp.partition([0, 8], 2, 2), headroom.invalid_argument, r"cp_rank = 2 out of range \[0, 2\)"),
    (lambda: cp.partition([0, 8], 0, 0), headroom.invalid_argument, "cp_size = 0, expected >= 1"),
    (lambda: cp.partition([0, 8], 2**40, 0), headroom.invalid_argument, "cp_size = 1099511627776 does not fit"),
    (lambda: cp.partition([0, 8], 2, 0, "zigzag"), headroom.invalid_argument,
     "layout = 'zigzag'; expected one of 'dual_chunk', 'contiguous'"),
    (lambda: cp.partition([0, 8], 2, 0).owner(8), headroom.invalid_argument, "global row 8 out of range"),
    (lambda: cp.partition([0, 8], 2, 0).locate(0, rank=5), headroom.invalid_argument, "rank 5 out of range"),
    (lambda: cp.alignment_for("dual_chunk", 0), headroom.invalid_argument, "cp = 0, expected >= 1"),
    (lambda: cp.alignment_for("dual_chunk", 2, tp=-1), headroom.invalid_argument, "tp = -1"),
    (lambda: cp.pad_split_index(cp.Padding([0, 5], 4), cp.partition([0, 4], 2, 0)), headroom.invalid_argument,
     "not built from this padding"),
    (lambda: cp.index_plan([0, 4, 10], 2, 0, raw_loss_mask=[1, 1]), headroom.invalid_argument,
     "raw loss mask has 2 entries, expected 10"),
    (lambda: cp.shifted_labels(cp.Padding([0, 4], 4), cp.partition([0, 4], 2, 0), [1, 2]), headroom.invalid_argument,
     r"raw ids has shape \[2, 1\], expected \[4, 1\]"),
])
def test_bad_input_names_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_padding_and_partition_accessors():
    pd = cp.Padding([0, 3, 3, 10], 4)
    assert (pd.sequences, pd.raw_sequences, pd.sequence_multiple, pd.has_dummy_sequence) == (3, 3, 4, False)
    assert pd.padded_cu_seqlens.tolist() == [0, 4, 4, 12]  # lengths 3, 0, 7 -> 4, 0, 8
    p = cp.partition(pd.padded_cu_seqlens, 2, 1)
    assert (p.sequences, p.longest_sequence, p.global_cu_seqlens.tolist()) == (3, 8, [0, 4, 4, 12])
    assert p.locate(0, rank=0) == (0, 0)


def test_cuda_module_takes_the_core_objects():
    """headroom._cuda's launches take _core's Partition and Padding themselves (nanobind shares the
    type registry between the modules): what they check before a launch reads those objects, so
    these run without a GPU (nothing reaches the device)."""
    _cuda = pytest.importorskip("headroom._cuda", reason="headroom was built without nvcc")
    for layout in ("dual_chunk", "contiguous"):
        part = cp.Partition([0, 8, 12], 2, 1, layout)
        # The device boundaries are checked against this partition's 2 sequences (3 entries).
        with pytest.raises(headroom.invalid_argument,
                           match="cp::cuda::split: device cu_seqlens has 2 entries, the host metadata has 3"):
            _cuda.split(part, (16, 2, 8), 64, part.global_rows, 4096, part.local_rows, 4, 2, 0)
        # ... and the matrices against its rows: 12 global, 6 local.
        with pytest.raises(headroom.invalid_argument,
                           match=r"cp::cuda::split_adjoint: local input has shape \[5, 4\], expected \[6, 4\]"):
            _cuda.split_adjoint(part, (16, 3, 8), 64, 5, 4096, 12, 4, 2, 0)
        with pytest.raises(headroom.invalid_argument,
                           match=r"to_rank_order: sequence-order input has shape \[11, 4\], expected \[12, 4\]"):
            _cuda.to_rank_order(part, (16, 3, 4), 64, 11, 4096, 12, 4, 2, 0)
    pd = cp.pad([0, 5, 12], "dual_chunk", 2)  # padded [0, 8, 16]: 8 local rows
    part = cp.Partition(pd.padded_cu_seqlens, 2, 1)
    other = cp.Partition([0, 4, 16], 2, 1)
    with pytest.raises(headroom.invalid_argument, match="the partition was not built from this padding's padded"):
        _cuda.pad_split(pd, other, (16, 3, 8), (32, 3, 8), 64, 12, 4096, 8, 4, 2, 0, bytes(2), 0)
    with pytest.raises(headroom.invalid_argument, match="device raw cu_seqlens has 4 entries, the host metadata has 3"):
        _cuda.pad_split(pd, part, (16, 4, 8), (32, 3, 8), 64, 12, 4096, 8, 4, 2, 0, bytes(2), 0)
    with pytest.raises(headroom.invalid_argument, match=r"place_rank_major: local rows from 0, 9 of them, expected a "
                       "range within this partition's 8 local rows"):
        _cuda.place(part, (16, 3, 8), 64, 9, 4096, part.global_rows, 4, 2, 0, 0, 0, 9, True)
    # a range whose end does not fit an int64 is refused the same way (no signed overflow in the check)
    with pytest.raises(headroom.invalid_argument, match=r"local rows from 4611686018427387904, 4611686018427387904 of"):
        _cuda.place(part, (16, 3, 8), 64, 9, 4096, part.global_rows, 4, 2, 0, 0, 2**62, 2**62, True)
    # Another type where a Partition or Padding goes is nanobind's TypeError, not a crash.
    for wrong in (pd, [0, 8, 12], None):
        with pytest.raises(TypeError):
            _cuda.split(wrong, (16, 3, 8), 64, 12, 4096, 6, 4, 2, 0)
    with pytest.raises(TypeError):
        _cuda.pad_split(part, part, (16, 3, 8), (32, 3, 8), 64, 12, 4096, 8, 4, 2, 0, bytes(2), 0)
