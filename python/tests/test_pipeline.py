# SPDX-License-Identifier: Apache-2.0
import pytest

import headroom
from headroom import pipeline


def every_kind():
    out = []
    for p in (1, 2, 3, 4):
        for m in (1, 2, 4, 8):
            out += [pipeline.schedule(k, p, m) for k in ("gpipe", "one_f_one_b", "zb_h1", "interleaved_zb",
                                                          "forward_only")]
            if p >= 2 and m % p == 0:
                out.append(pipeline.schedule("interleaved_1f1b", p, m, chunks=2))
                out.append(pipeline.schedule("gpipe", p, m, chunks=3))
                out.append(pipeline.schedule("interleaved_zb", p, m, chunks=2))
                out.append(pipeline.schedule("forward_only", p, m, chunks=2))
    return out


def test_generators_and_schedule_data():
    s = pipeline.schedule("zb_h1", 3, 4)
    assert s.name == "zb_h1" and s.shape == pipeline.Shape(3, 4) and s.splits_backward()
    assert len(s.ranks) == 3
    kinds = {a.kind for a in s.actions(0)}
    assert kinds == {"forward", "backward_input", "backward_weight", "send_forward", "recv_backward"}
    sends = [a for a in s.actions(1) if a.kind == "send_forward"]
    assert all(a.peer == 2 and a.stage == 1 for a in sends) and len(sends) == 4
    assert pipeline.find_problem(s) == ""
    pipeline.validate(s)
    assert str(s).startswith("schedule zb_h1 (p=3 m=4 v=1)\n  rank 0: F0@s0 | send_forward F0@s0 -> rank 1")
    assert pipeline.timeline(s).splitlines()[0].startswith("rank 0 | F0")
    assert pipeline.ticks(pipeline.schedule("gpipe", 2, 2)) == 6
    assert set(pipeline.schedule_kinds) == {"gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1", "interleaved_zb",
                                            "forward_only", "zbv", "dualpipe_v"}
    assert not s.forward_only


def test_interleaved_zero_bubble_and_forward_only():
    zb = pipeline.schedule("interleaved_zb", 2, 4, chunks=2)
    assert zb.name == "interleaved_zb" and zb.splits_backward() and zb.shape == pipeline.Shape(2, 4, chunks=2)
    assert {a.kind for a in zb.actions(0) if a.is_compute} == {"forward", "backward_input", "backward_weight"}
    assert {a.stage for a in zb.actions(1)} == {1, 3}
    # with one chunk it is zb_h1
    assert pipeline.schedule("interleaved_zb", 3, 6).ranks == pipeline.schedule("zb_h1", 3, 6).ranks
    ev = pipeline.schedule("forward_only", 3, 5)
    assert ev.forward_only and "forward only" in str(ev)
    assert {a.kind for r in range(3) for a in ev.actions(r)} == {"forward", "send_forward", "recv_forward"}
    # the output of micro-batch 0 leaves once rank 2 can take it, after micro-batch 1 came in
    assert [a.pytorch() for a in ev.actions(1)][:5] == ["1RECV_F0", "1F0", "1RECV_F1", "1SEND_F0", "1F1"]
    # a forward-only schedule by hand: gradients are refused
    F = lambda k, s: pipeline.Action("forward", k, s)  # noqa: E731
    mine = pipeline.Schedule("eval", pipeline.Shape(1, 2), [[F(0, 0), F(1, 0)]], forward_only=True)
    pipeline.validate(mine)
    assert mine.forward_only and mine.ranks == pipeline.schedule("forward_only", 1, 2).ranks
    with pytest.raises(headroom.invalid_argument, match="a gradient action in a forward-only"):
        pipeline.validate(pipeline.Schedule("eval", pipeline.Shape(1, 1),
                                            [[F(0, 0), pipeline.Action("backward", 0, 0)]], forward_only=True))
    # the same lists as a training schedule miss their backwards
    assert "no backward" in pipeline.find_problem(pipeline.Schedule("train", pipeline.Shape(1, 2), mine.ranks))


def test_hand_written_schedules_are_validated():
    F = lambda k, s: pipeline.Action("forward", k, s)  # noqa: E731
    B = lambda k, s: pipeline.Action("backward", k, s)  # noqa: E731
    shape = pipeline.Shape(2, 2)
    s = pipeline.place_transfers("mine", shape, [[F(0, 0), F(1, 0), B(0, 0), B(1, 0)],
                                                [F(0, 1), B(0, 1), F(1, 1), B(1, 1)]])
    assert s.ranks == pipeline.schedule("one_f_one_b", 2, 2).ranks  # the generator's own order
    assert [a.pytorch() for a in s.actions(1) if a.is_compute] == ["1F0", "1B0", "1F1", "1B1"]
    broken = pipeline.Schedule("broken", shape, [[F(0, 0), F(1, 0), B(0, 0), B(1, 0)], [F(0, 1), F(1, 1)]])
    assert "rank 0" in pipeline.find_problem(broken) or "rank 1" in pipeline.find_problem(broken)
    with pytest.raises(headroom.invalid_argument):
        pipeline.validate(broken)


@pytest.mark.parametrize("s", [s for s in every_kind() if not s.forward_only], ids=lambda s: f"{s.name}-{s.shape}")
def test_export_import_round_trip(s):
    assert pipeline.from_pytorch(pipeline.to_pytorch(s), name=s.name) == s
    assert pipeline.from_pytorch(pipeline.to_pytorch(s, compute_only=True), name=s.name) == s
    assert pipeline.from_csv(pipeline.to_csv(s), name=s.name) == s
    assert pipeline.from_csv(pipeline.to_csv(s, compute_only=True), name=s.name, shape=s.shape) == s
    for cells in ({"fsdp": True}, {"send_waits": False, "reduce_grad_waits": False}):
        assert pipeline.from_csv(pipeline.to_csv(s, **cells), name=s.name) == s


def test_full_export_cells_and_refusals():
    s = pipeline.schedule("one_f_one_b", 2, 2)
    assert pipeline.to_pytorch(s)[1][-4:] == ["1REDUCE_GRAD", "1WAIT_REDUCE_GRAD", "1WAIT_SEND_B0", "1WAIT_SEND_B1"]
    assert pipeline.to_pytorch(s, send_waits=False, reduce_grad_waits=False)[1][-1] == "1REDUCE_GRAD"
    assert pipeline.to_pytorch(s, fsdp=True)[0][0] == "0UNSHARD" and pipeline.to_pytorch(s, fsdp=True)[0][-1] == "0RESHARD"
    ev = pipeline.schedule("forward_only", 2, 3)
    with pytest.raises(headroom.invalid_argument, match="schedule 'forward_only' is forward-only"):
        pipeline.to_pytorch(ev)
    with pytest.raises(headroom.invalid_argument, match="forward-only"):
        pipeline.to_csv(ev, compute_only=True)
    # forward-only rows (as a user writes them) still import as an evaluation schedule
    assert pipeline.from_csv("0F0,0F1,0F2\r\n1F0,1F1,1F2\r\n", "forward_only") == ev
    with pytest.raises(headroom.invalid_argument, match="max_active_stages = 0, expected >= 1"):
        pipeline.to_pytorch(s, fsdp=True, max_active_stages=0)
    d = pipeline.schedule("dualpipe_v", 2, 4, chunks=2)
    with pytest.raises(headroom.invalid_argument, match="max_active_stages = 1, expected >= 2"):
        pipeline.to_pytorch(d, fsdp=True, max_active_stages=1)


def test_pytorch_parser_accepts_every_exported_action():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch is not installed: PyTorch's own parser cannot be run")
    added = ("WAIT_SEND_F", "WAIT_SEND_B", "REDUCE_GRAD", "WAIT_REDUCE_GRAD", "UNSHARD", "RESHARD")
    cells = pytest.importorskip("headroom.torch.pipelining").runtime_cells()  # this torch's (2.11: no waits)
    for s in (s for s in every_kind() if not s.forward_only):
        rows = pipeline.to_pytorch(s, fsdp=True, **cells)
        for r, row in enumerate(rows):
            parsed_all = [schedules._Action.from_str(text) for text in row]
            assert [str(a) for a in parsed_all] == row
            ours = [(text, a) for text, a in zip(row, parsed_all) if a.computation_type.value not in added]
            assert len(ours) == len(s.actions(r))
            for (text, parsed), a in zip(ours, s.actions(r)):
                assert (parsed.stage_index, parsed.computation_type.value, parsed.microbatch_index) == (
                    a.stage, a.pytorch()[len(str(a.stage)):-len(str(a.microbatch))], a.microbatch), text
        # PyTorch's _Action objects (and None bubbles) come back in as they are
        parsed_rows = [[schedules._Action.from_str(t) for t in row] + [None] for row in rows]
        assert pipeline.from_pytorch(parsed_rows, name=s.name) == s


def test_memory_model_per_retention():
    # 1F1B, p = 2, m = 2: rank 0 holds two forwards' activations and one output at its peak;
    # the last rank keeps both outputs (its logits) to the end under retention "all".
    s = pipeline.schedule("one_f_one_b", 2, 2)
    each = pipeline.StageBytes(activations=100, output=10, parameters=1000)
    m = pipeline.predict_memory(s, each, "all")
    assert m.retention == "all" and [r.peak for r in m.ranks] == [210, 140]
    assert m.rank(1).held_at_end == 20 and m.rank(0).held_at_end == 0
    assert m.rank(0).total() == 1210 and m.max_rank().rank == 0
    assert "rank 1: peak 140 B" in str(m)
    assert pipeline.predict_memory(s, each, "none").rank(1).held_at_end == 0
    peaks = pipeline.peaks(s, [each, pipeline.StageBytes(activations=100, output=10)])
    assert peaks == {"all": [210, 140], "reduced": [210, 130], "none": [210, 130]}


def test_memory_model_outputs_kept_until_backward():
    # PyTorch's PipelineStage keeps each output until its backward: rank 0 of 1F1B (p = 2, m = 2)
    # holds both forwards' outputs at its peak, not one; the last rank keeps its output past the loss.
    s = pipeline.schedule("one_f_one_b", 2, 2)
    each = pipeline.StageBytes(activations=100, output=10)
    m = pipeline.predict_memory(s, each, "none", "kept_until_backward")
    assert m.outputs == "kept_until_backward" and "outputs kept_until_backward" in str(m)
    # rank 0: F0, F1 (both outputs kept), then the gradient of output 0 arrives: 2·110 + 10
    assert [r.peak for r in m.ranks] == [230, 140]
    assert [r.held_at_end for r in m.ranks] == [0, 0]
    assert pipeline.predict_memory(s, each, "none").outputs == "freed_when_sent"
    assert pipeline.peaks(s, each, "kept_until_backward")["none"] == [230, 140]
    assert [r.peak for r in pipeline.predict_memory(s, each, "none").ranks] == [210, 130]
    assert set(pipeline.output_lifetimes) == {"freed_when_sent", "kept_until_backward"}
    # forward-only: each forward frees its input and stash at once; only outputs in flight remain
    ev = pipeline.predict_memory(pipeline.schedule("forward_only", 2, 3), each, "none")
    assert [r.peak for r in ev.ranks] == [110, 120] and [r.held_at_end for r in ev.ranks] == [0, 0]


def test_memory_model_grouped_transfers():
    # A run of consecutive transfers as one batch (NCCL group call): rank 0 of 1F1B (p = 2, m = 2)
    # sends F1's output and receives B0's gradient in one run, so the gradient is live before the
    # output is freed: 210 + 10. Rank 1 has no run of two transfers.
    s = pipeline.schedule("one_f_one_b", 2, 2)
    each = pipeline.StageBytes(activations=100, output=10)
    m = pipeline.predict_memory(s, each, "none", transfers="grouped")
    assert m.transfers == "grouped" and "transfers grouped" in str(m)
    assert [r.peak for r in m.ranks] == [220, 130]
    assert m.rank(0).peak_action == 3  # the run's first action: SEND_F1
    assert pipeline.predict_memory(s, each, "none").transfers == "one_by_one"
    assert pipeline.peaks(s, each, transfers="grouped")["none"] == [220, 130]
    assert set(pipeline.transfer_groupings) == {"one_by_one", "grouped"}
    with pytest.raises(headroom.invalid_argument, match="transfers = 'batched'; expected one of 'one_by_one', 'grouped'"):
        pipeline.predict_memory(s, each, "none", transfers="batched")


def test_fingerprint_tells_schedules_and_sizes_apart():
    s = pipeline.schedule("one_f_one_b", 2, 4)
    each = pipeline.StageBytes(activations=100, output=10)
    words = pipeline.fingerprint(s, each)
    assert len(words) == 9 and words == pipeline.fingerprint(s, [each, each])
    renamed = pipeline.Schedule("other name", s.shape, s.ranks)
    assert pipeline.fingerprint(renamed, each) == words  # names do not count
    gp = pipeline.schedule("gpipe", 2, 4)  # same shape, another order
    assert [a != b for a, b in zip(pipeline.fingerprint(gp, each), words)] == [False] * 6 + [True, False, False]
    bigger = pipeline.StageBytes(activations=100, output=11)
    assert [a != b for a, b in zip(pipeline.fingerprint(s, bigger), words)] == [False] * 7 + [True, False]
    assert pipeline.fingerprint(s, [[each] * 2] * 4) != words  # per micro-batch sizes hash their count
    assert pipeline.fingerprint(pipeline.schedule("one_f_one_b", 2, 2), each)[2:4] == [2, 2]


def test_memory_model_sizes_per_microbatch():
    # packed sequences: micro-batch 1 is three times micro-batch 0 on every stage
    s = pipeline.schedule("gpipe", 2, 2)
    small, big = pipeline.StageBytes(activations=100, output=10), pipeline.StageBytes(activations=300, output=30)
    per_mb = pipeline.predict_memory(s, [[small, small], [big, big]], "none")
    uniform = pipeline.predict_memory(s, small, "none")
    assert [r.peak for r in uniform.ranks] == [210, 230]
    # rank 0: activations of both forwards and the big output not yet sent; rank 1: input 0's
    # stash and activations, then the big input, activations and output
    assert [r.peak for r in per_mb.ranks] == [100 + 300 + 30, 10 + 100 + 30 + 300 + 30]
    # the same sizes for every micro-batch, given per micro-batch, are the uniform model
    assert [r.peak for r in pipeline.predict_memory(s, [[small, small], [small, small]], "none").ranks] == [210, 230]


@pytest.mark.parametrize("call, error, message", [
    (lambda: pipeline.schedule("1f1b", 2, 2), headroom.invalid_argument, "schedule kind = '1f1b'; expected one of"),
    (lambda: pipeline.schedule("gpipe", 0, 2), headroom.invalid_argument, r"stages \(p\) = 0, expected >= 1"),
    (lambda: pipeline.schedule("gpipe", 2, -1), headroom.invalid_argument, r"microbatches \(m\) = -1"),
    (lambda: pipeline.schedule("gpipe", 2.0, 2), TypeError, r"stages = 2.0 \(float\); expected an integer"),
    (lambda: pipeline.schedule("gpipe", 2**40, 2), headroom.invalid_argument, "does not fit in a 32-bit int"),
    (lambda: pipeline.schedule("interleaved_1f1b", 4, 6, chunks=2), headroom.invalid_argument, "interleaved"),
    (lambda: pipeline.Action("fwd", 0, 0), headroom.invalid_argument, "action kind = 'fwd'"),
    (lambda: pipeline.Schedule("x", pipeline.Shape(2, 1), [[]]), headroom.invalid_argument, "1 action lists for p = 2"),
    (lambda: pipeline.Schedule("x", pipeline.Shape(1, 1), [["0F0"]]), TypeError, r"ranks\[0\]\[0\] = '0F0'"),
    (lambda: pipeline.schedule("gpipe", 2, 2).actions(5), headroom.invalid_argument, "stage 5 out of range"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), [pipeline.StageBytes()]),
     headroom.invalid_argument, "model_bytes has 1 stages, expected p·v = 2"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), pipeline.StageBytes(), "some"),
     headroom.invalid_argument, "retention = 'some'"),
    (lambda: pipeline.StageBytes(output=-4), headroom.invalid_argument, "output = -4"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), pipeline.StageBytes(), "all", "kept"),
     headroom.invalid_argument, "outputs = 'kept'; expected one of"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), [[pipeline.StageBytes()] * 2]),
     headroom.invalid_argument, "model_bytes has sizes for 1 micro-batches, expected m = 2"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 1), [[pipeline.StageBytes()], 3]), TypeError,
     r"stage bytes\[1\] = 3; expected a list of one StageBytes per virtual stage"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), [[pipeline.StageBytes()] * 2,
                                                                       [pipeline.StageBytes(parameters=1)] * 2]),
     headroom.invalid_argument, "expected the same \\(parameters do not depend on the micro-batch\\)"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), 7), TypeError,
     "stage bytes = 7; expected a StageBytes"),
    (lambda: pipeline.predict_memory(pipeline.schedule("gpipe", 1, 1), pipeline.StageBytes(output=1 << 62)),
     headroom.capacity_error, "too large to count"),
    (lambda: pipeline.fingerprint(pipeline.schedule("gpipe", 2, 2), [pipeline.StageBytes()]),
     headroom.invalid_argument, "pipeline::fingerprint: model_bytes has 1 stages, expected p·v = 2"),
    (lambda: pipeline.Shape(1 << 12, 1 << 13), headroom.capacity_error, "m·p·v = 8192 · 4096 · 1"),
    (lambda: pipeline.schedule("interleaved_zb", 4, 9), headroom.invalid_argument,
     r"\(m\) = 9 is not a multiple of its 2 rounds"),
    (lambda: pipeline.Schedule("x", pipeline.Shape(1, 1), [[]], True), TypeError, r"\*, forward_only: bool"),
    (lambda: pipeline.from_pytorch([["1F0"], ["0F0"]]), headroom.invalid_argument,
     "rank 0 action 1F0 is on stage 1, which lives on rank 1"),
    (lambda: pipeline.from_pytorch([["0F0", "0F3"]], shape=pipeline.Shape(1, 2)), headroom.invalid_argument,
     "names micro-batch 3; expected one below m = 2"),
    (lambda: pipeline.from_pytorch([["0F0", "0Q0"]]), headroom.invalid_argument,
     "rank 0 column 1: '0Q0' has no known action type"),
    (lambda: pipeline.from_pytorch([["0F"]]), headroom.invalid_argument, "'0F' has no micro-batch index"),
    (lambda: pipeline.from_pytorch("0F0"), TypeError, "expected one list of action strings per rank"),
    (lambda: pipeline.from_pytorch([["0F0", "0B0"], ["2F0"]]), headroom.invalid_argument, "over 2 ranks"),
    (lambda: pipeline.from_csv("0F0,0B0\n1F0\n"), headroom.invalid_argument, "rank"),
])
def test_bad_input_names_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_shape_parse_cell_and_memory_plan_accessors():
    shape = pipeline.Shape(2, 4, chunks=2)
    assert (shape.virtual_stages(), shape.rank_of(3), shape.chunk_of(3), shape.group) == (4, 1, 1, 0)
    assert repr(shape) == "Shape(p=2 m=4 v=2 g=2)"
    cell = pipeline.pytorch.parse_cell("(1F0;2B3)OVERLAP_F_B")
    assert [(a.kind, a.stage, a.microbatch, a.peer) for a in cell] == [("forward", 1, 0, -1), ("backward", 2, 3, -1)]
    assert pipeline.pytorch.parse_cell("3WAIT_SEND_F1") == [] and pipeline.pytorch.parse_cell("") == []
    m = pipeline.predict_memory(pipeline.schedule("gpipe", 2, 2), pipeline.StageBytes(activations=8, output=2), "none")
    assert m.shape == pipeline.Shape(2, 2) and m.ranks[0].peak_action >= 0 and m.ranks[0].rank == 0


def test_placement_interleaved_v_shape_and_tables():
    v = pipeline.Placement.v_shape(4)
    assert v.kind == "v_shape" and (v.ranks, v.chunks) == (4, 2)
    assert [v.virtual_stage(r, 1) for r in range(4)] == [7, 6, 5, 4] and v.rank_of(7) == 0 and v.chunk_of(4) == 1
    assert pipeline.Placement.from_table([[0, 3], [1, 2]]) == pipeline.Placement.v_shape(2)
    custom = pipeline.Placement.from_table([[0, 1], [2, 3]])
    assert custom.kind == "custom" and repr(custom) == "Placement(custom [[0, 1], [2, 3]])"
    with pytest.raises(headroom.invalid_argument, match="virtual stage 1 is on rank 0 chunk 1 and again on rank 1"):
        pipeline.Placement.from_table([[0, 1], [1, 2]])
    with pytest.raises(headroom.invalid_argument, match="rank 1 holds 1 chunks, expected every rank to hold v = 2"):
        pipeline.Placement.from_table([[0, 1], [2]])
    with pytest.raises(headroom.invalid_argument, match="virtual stage 9 out of range"):
        v.rank_of(9)
    with pytest.raises(TypeError, match="expected one list of virtual stages per rank"):
        pipeline.Placement.from_table("01")
    # every generator but the V ones keeps the interleaved placement
    assert pipeline.schedule("interleaved_1f1b", 2, 4, chunks=2).placement == pipeline.Placement.interleaved(2, 2)


def test_v_schedules_local_hand_offs_and_overlapped_actions():
    z = pipeline.schedule("zbv", 3, 6, chunks=2)
    assert z.placement.kind == "v_shape" and z.splits_backward()
    assert {a.stage for a in z.actions(0)} == {0, 5}
    # the turn of the V (stages 2 and 3 on rank 2) moves nothing over the network
    assert not [a for a in z.actions(2) if a.kind == "send_forward" and a.stage == 2]
    d = pipeline.schedule("dualpipe_v", 2, 4, chunks=2)
    ov = [a for a in d.actions(0) if a.kind == "overlapped"]
    assert ov and all(a.backward_stage in (0, 3) and a.backward_microbatch >= 0 for a in ov)
    assert pipeline.from_pytorch(pipeline.to_pytorch(d, compute_only=True), name=d.name) == d
    assert any("OVERLAP_F_B" in cell for cell in pipeline.to_pytorch(d, compute_only=True)[0])
    bytes_ = pipeline.StageBytes(activations=100, output=10)
    assert all(r.held_at_end == 0 for r in pipeline.predict_memory(d, bytes_, "none").ranks)
    with pytest.raises(headroom.invalid_argument, match="expected m >= 2p"):
        pipeline.schedule("dualpipe_v", 4, 7, chunks=2)
    # a hand-written order on a user's placement: stages 0, 1 on rank 0 and 2, 3 on rank 1
    table = pipeline.Placement.from_table([[0, 1], [2, 3]])
    A = pipeline.Action
    order = [[A("forward", 0, 0), A("forward", 0, 1), A("backward", 0, 1), A("backward", 0, 0)],
             [A("forward", 0, 2), A("forward", 0, 3), A("backward", 0, 3), A("backward", 0, 2)]]
    s = pipeline.place_transfers("t", pipeline.Shape(2, 1, chunks=2), order, placement=table)
    assert s.placement == table and len(s.actions(0)) == 6
    assert pipeline.from_csv(pipeline.to_csv(s), "t", placement=table) == s
    with pytest.raises(headroom.invalid_argument, match="under placement interleaved"):
        pipeline.from_csv(pipeline.to_csv(s), "t")
    over = A("overlapped", 1, 0, backward_microbatch=0, backward_stage=1)
    assert str(over) == "F1@s0+B0@s1" and over.pytorch() == "(0F1;1B0)OVERLAP_F_B"
    # ranks holding the same lists under another placement disagree
    other = pipeline.place_transfers("t", pipeline.Shape(2, 1, chunks=2), order,
                                     placement=pipeline.Placement.from_table([[1, 0], [3, 2]]))
    assert other.ranks == s.ranks and pipeline.fingerprint(other, bytes_) != pipeline.fingerprint(s, bytes_)


@pytest.mark.parametrize("kind, cls_name", [("zbv", "ScheduleZBVZeroBubble"), ("dualpipe_v", "ScheduleDualPipeV")])
def test_v_orders_equal_torchs_own(kind, cls_name):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch (with torch.distributed.pipelining) is not installed")
    cls = getattr(schedules, cls_name, None)
    if cls is None or not hasattr(cls, "_calculate_single_rank_operations"):
        pytest.skip(f"this torch has no {cls_name}._calculate_single_rank_operations")
    for p in (2, 3, 4):
        for m in ((2 * p, 2 * p + 3) if kind == "dualpipe_v" else (1, p, 2 * p, 3 * p + 1)):
            # the order alone, without process groups or stages: the attributes the method reads
            obj = cls.__new__(cls)
            obj.pp_group_size, obj.num_stages, obj._num_stages = p, 2 * p, 2 * p
            obj._n_microbatches, obj.n_local_stages = m, 2
            ours = pipeline.to_pytorch(pipeline.schedule(kind, p, m, chunks=2), compute_only=True)
            for r in range(p):
                theirs = [str(a) for a in obj._calculate_single_rank_operations(r) if a is not None]
                assert ours[r] == theirs, (p, m, r)


def test_interleaved_orders_equal_torchs_own_with_its_group():
    """PyTorch's ScheduleInterleaved1F1B takes rounds of m / max(1, m // p) micro-batches (m < p
    included): interleaved_1f1b with that group is the same order."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch (with torch.distributed.pipelining) is not installed")
    cls = schedules.ScheduleInterleaved1F1B
    if not hasattr(cls, "_calculate_single_rank_operations"):
        pytest.skip("this torch has no ScheduleInterleaved1F1B._calculate_single_rank_operations")
    compared = 0
    for p in (2, 3, 4, 8):
        for m in range(1, 17):
            rounds = max(1, m // p)
            if m % rounds:
                continue  # torch refuses the shape too
            obj = cls.__new__(cls)
            obj.pp_group_size, obj.n_local_stages, obj._n_microbatches, obj._num_stages = p, 2, m, 2 * p
            obj.number_of_rounds, obj.microbatches_per_round = rounds, m // rounds
            ours = pipeline.to_pytorch(pipeline.schedule("interleaved_1f1b", p, m, chunks=2, group=m // rounds),
                                       compute_only=True)
            for r in range(p):
                assert ours[r] == [str(a) for a in obj._calculate_single_rank_operations(r) if a is not None], (p, m, r)
            compared += 1
    assert compared > 40


def test_sizes_past_what_runs_in_seconds_are_refused():
    with pytest.raises(headroom.invalid_argument, match=r"Shape::rank_of: virtual stage -5 out of range \[0, 8\)"):
        pipeline.Shape(4, 2, chunks=2).rank_of(-5)
    with pytest.raises(headroom.invalid_argument, match="Shape::chunk_of: virtual stage 8 out of range"):
        pipeline.Shape(4, 2, chunks=2).chunk_of(8)
    assert pipeline.Shape(4, 2, chunks=2).rank_of(5) == 1
    # generators and the simulation cost p·(m·v + p): refused past 2^25 before any work
    with pytest.raises(headroom.capacity_error, match=r"p·\(m·v \+ p\) = 16384 · \(1 · 1 \+ 16384\) = .* expected <= 33554432"):
        pipeline.schedule("gpipe", 16384, 1)
    with pytest.raises(headroom.capacity_error, match=r"p·\(m·v \+ p\)"):
        pipeline.Shape(1 << 20, 1)
    s = pipeline.schedule("one_f_one_b", 2, 3)
    assert [len(r) for r in s.ranks] == [len(s.actions(0)), len(s.actions(1))]
    assert all(isinstance(a, pipeline.Action) for a in s.ranks[1])
