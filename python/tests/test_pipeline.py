import pytest

import headroom
from headroom import pipeline


def every_kind():
    out = []
    for p in (1, 2, 3, 4):
        for m in (1, 2, 4, 8):
            out += [pipeline.schedule(k, p, m) for k in ("gpipe", "one_f_one_b", "zb_h1")]
            if p >= 2 and m % p == 0:
                out.append(pipeline.schedule("interleaved_1f1b", p, m, chunks=2))
                out.append(pipeline.schedule("gpipe", p, m, chunks=3))
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
    assert set(pipeline.schedule_kinds) == {"gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1"}


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


@pytest.mark.parametrize("s", every_kind(), ids=lambda s: f"{s.name}-{s.shape}")
def test_export_import_round_trip(s):
    assert pipeline.from_pytorch(pipeline.to_pytorch(s), name=s.name) == s
    assert pipeline.from_pytorch(pipeline.to_pytorch(s, compute_only=True), name=s.name) == s
    assert pipeline.from_csv(pipeline.to_csv(s), name=s.name) == s
    assert pipeline.from_csv(pipeline.to_csv(s, compute_only=True), name=s.name, shape=s.shape) == s


def test_pytorch_parser_accepts_every_exported_action():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch is not installed: PyTorch's own parser cannot be run")
    for s in every_kind():
        rows = pipeline.to_pytorch(s)
        for r, row in enumerate(rows):
            for text, a in zip(row, s.actions(r)):
                parsed = schedules._Action.from_str(text)
                assert (parsed.stage_index, parsed.computation_type.value, parsed.microbatch_index) == (
                    a.stage, a.pytorch()[len(str(a.stage)):-len(str(a.microbatch))], a.microbatch), text
                assert str(parsed) == text
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
