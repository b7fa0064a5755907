# SPDX-License-Identifier: Apache-2.0
"""pipeline.plan_buffers: the C++ buffer plan from Python (sizes for static receive buffers)."""
import pytest

from headroom import pipeline


def test_plan_buffers_at_the_bound_and_disjoint():
    s = pipeline.schedule("zbv", 2, 4, chunks=2)
    sizes = [pipeline.StageBytes(activations=256 * (4 + k), output=512, weight_stash=256) for k in range(4)]
    plan = pipeline.plan_buffers(s, sizes, "reduced")
    assert plan.retention == "reduced" and plan.alignment == 256
    for r in plan.ranks:
        assert r.bound == r.peak == pipeline.predict_memory(s, sizes, "reduced").rank(r.rank).peak
        assert r.arena_bytes >= r.bound
        assert r.receive_slots_shared <= r.receive_slots_separate
        live = [b for b in r.buffers]
        for i, a in enumerate(live):  # buffers live at one point never share a byte
            for b in live[i + 1:]:
                if a.allocated_at <= b.released_at and b.allocated_at <= a.released_at:
                    assert a.offset + a.bytes <= b.offset or b.offset + b.bytes <= a.offset
        roles = {b.role for b in r.buffers}
        assert {"activations", "weight_stash"} <= roles


def test_plan_buffers_keeps_outputs_under_all():
    s = pipeline.schedule("one_f_one_b", 2, 3)
    plan = pipeline.plan_buffers(s, pipeline.StageBytes(activations=1024, output=256), "all")
    last = plan.rank(1)
    assert sum(b.held_at_end for b in last.buffers) == 3


def test_plan_buffers_bad_input_names_it():
    s = pipeline.schedule("one_f_one_b", 2, 3)
    with pytest.raises(ValueError, match="retention"):
        pipeline.plan_buffers(s, pipeline.StageBytes(output=8), "some")
    with pytest.raises(ValueError, match="alignment 3 is not a power of two"):
        pipeline.plan_buffers(s, pipeline.StageBytes(output=8), alignment=3)
