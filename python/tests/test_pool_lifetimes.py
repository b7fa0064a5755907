# SPDX-License-Identifier: Apache-2.0
"""headroom.pool's lifetime planning from Python: LeaseTrace, plan_lifetimes, LearningArena.
Every computation is the C++ one; these check the bindings, the names of api33 and that errors
keep the C++ message."""
import pytest

import headroom
from headroom import pool


def _trace():
    # Units 0..2 of one bucket each (bucket id = unit); 0 and 1 alive together, then 1 and 2.
    t = pool.LeaseTrace()
    for b, n in enumerate((3000, 1000, 3000)):
        t.declare(b, unit=b, group=0, dtype="bfloat16", nbytes=n)
    t.declare(9, unit=None, dtype="float32", nbytes=64)  # outside every unit: never planned
    t.acquire(0, 3000)
    t.acquire(1, 1000)
    t.acquire(9, 64)
    t.release(0)
    t.acquire(2, 3000)
    t.release(1)
    t.release(2)
    t.release(9)
    t.end_step()
    return t


def test_trace_text_round_trip():
    t = _trace()
    text = t.to_text()
    assert text.splitlines()[0] == "headroom-lease-trace 1"
    assert "bucket 9 - 0 float32 64" in text
    again = pool.LeaseTrace.parse(text)
    assert again == t and again.to_text() == text
    assert (t.steps, t.buckets, t.events) == (1, 4, 9)


def test_plan_lifetimes_names_and_values():
    p = pool.plan_lifetimes(_trace(), alignment=256)
    assert isinstance(p, pool.LifetimePlan)
    assert set(p.offsets) == {0, 1, 2}  # bucket 9 is outside every unit
    assert p.bound == 3072 + 1024
    assert p.arena_bytes == p.bound and p.ratio_to_bound == 1.0
    assert set(p.candidates) == {"max", "by_bytes", "packing"}
    assert p.arena_bytes <= p.candidates["max"]
    assert p.winner in p.candidates and p.infeasible == []
    assert p.bucket_bytes == {0: 3000, 1: 1000, 2: 3000}
    # 0 and 2 never meet; 1 meets both
    for a, b in ((0, 1), (1, 2)):
        lo, hi = sorted((a, b), key=lambda x: p.offsets[x])
        assert p.offsets[lo] + p.bucket_bytes[lo] <= p.offsets[hi]
    assert isinstance(p.fingerprint, int) and p.fingerprint == pool.plan_lifetimes(_trace()).fingerprint
    mx = pool.plan_lifetimes(_trace(), planner="max")
    assert mx.winner == "max" and mx.arena_bytes == p.candidates["max"] and mx.fingerprint != p.fingerprint
    assert "winner=" in str(p)


def test_learning_arena_learns_then_serves_and_counts_fallbacks():
    a = pool.LearningArena("interval", alignment=256, max_events=1000)
    for b, n in enumerate((3000, 1000, 3000)):
        a.declare(b, unit=b, dtype="bfloat16", nbytes=n)
    assert a.plan is None and a.learning

    def step(order_pairs):
        got = {}
        for op, b in order_pairs:
            if op == "a":
                got[b] = a.acquire(b, (3000, 1000, 3000)[b])
            else:
                a.release(b)
        return got

    seq = [("a", 0), ("a", 1), ("r", 0), ("a", 2), ("r", 1), ("r", 2)]
    assert step(seq) == {0: None, 1: None, 2: None}
    assert a.end_step() is True
    assert a.arena_bytes == a.plan.arena_bytes == 4096
    got = step(seq)
    assert all(v is not None for v in got.values())
    assert a.end_step() is False
    # 0 and 2 together: not in the plan (they share bytes) -> counted, the step kept, replan fixes it
    got = step([("a", 0), ("a", 2), ("r", 0), ("r", 2)])
    assert got[2] is None
    s = a.stats()
    assert s["fallbacks"] == {"unknown_bucket": 0, "larger_than_planned": 0, "overlaps_live": 1}
    assert s["planner"] == "interval" and s["megatron_max_bytes"] >= s["arena_bytes"]
    a.end_step()
    assert a.stats()["recorded_steps"] == 2
    assert a.replan() is True
    # 0 and 2 (pinned to one MaxPool slot) alive together: MaxPool moves 2 to the other buffer
    # group; the arena follows it, smaller than the fixed-offset packing of the same trace
    assert a.plan.winner == "max" and "max" in a.plan.infeasible
    assert a.plan == pool.plan_lifetimes(a.trace, alignment=256, follow_moves=True)
    assert a.arena_bytes == 2 * 3072 < pool.plan_lifetimes(a.trace, alignment=256).arena_bytes
    assert all(v is not None for v in step([("a", 0), ("a", 2), ("r", 0), ("r", 2)]).values())
    assert a.end_step() is False
    assert all(v is not None for v in step(seq).values())  # every step seen so far, after replan()
    assert a.end_step() is False and a.stats()["fallbacks"]["overlaps_live"] == 1
    assert isinstance(a.trace, pool.LeaseTrace) and a.trace.steps == 2  # distinct steps: repeats kept once


def test_errors_keep_the_cpp_message():
    with pytest.raises(headroom.invalid_argument, match="line 2: unknown record 'free'"):
        pool.LeaseTrace.parse("headroom-lease-trace 1\nfree 0\n")
    with pytest.raises(headroom.invalid_argument, match="lease trace version '7'"):
        pool.LeaseTrace.parse("headroom-lease-trace 7\n")
    t = pool.LeaseTrace()
    with pytest.raises(headroom.invalid_argument, match="acquire of bucket 3, which was never declared"):
        t.acquire(3, 10)
    with pytest.raises(headroom.invalid_argument, match="bucket = -1"):
        t.declare(-1, unit=0, dtype="bfloat16", nbytes=1)
    with pytest.raises(TypeError, match="dtype"):
        t.declare(0, unit=0, dtype=3, nbytes=1)
    with pytest.raises(headroom.invalid_argument, match="planner 'min'"):
        pool.plan_lifetimes(t, planner="min")
    with pytest.raises(headroom.invalid_argument, match="planner 'fixed'"):
        pool.LearningArena("fixed")
    a = pool.LearningArena("max")
    with pytest.raises(headroom.logic_error, match="replan\\(\\) before the first end_step\\(\\)"):
        a.replan()
    a.declare(0, unit=0, dtype="bfloat16", nbytes=8)
    a.acquire(0, 8)
    with pytest.raises(headroom.logic_error, match="1 bucket\\(s\\) held"):
        a.end_step()


def test_learning_arena_keep_place_and_can_acquire():
    """keep_place and can_acquire are the C++ ones (tests/pool/learning_arena.cpp): here the
    binding's arguments, results and errors."""
    a = pool.LearningArena("interval")
    for b in range(3):
        a.declare(b, unit=b, dtype="bfloat16", nbytes=1000)
    for b in range(3):
        a.acquire(b, 1000)
        a.release(b)
    assert a.can_acquire([0, 1, 2])  # learning: nothing refused
    a.end_step()
    assert a.plan.offsets == {0: 0, 1: 0, 2: 0}
    assert a.acquire(0, 1000, keep_place=True) == 0
    assert not a.can_acquire([1]) and a.can_acquire([1], releasable=(0,)) and a.can_acquire((0,))
    assert a.acquire(1, 1000, keep_place=True) is None
    a.release(0)
    a.release(1)
    assert a.acquire(2, 1000, keep_place=True) == 0
    with pytest.raises(headroom.capacity_error, match="bucket 0 of unit 0 was served at arena offset 0 earlier in "
                                                      "this step .* bucket 2 holds those bytes now"):
        a.acquire(0, 1000, keep_place=True)
    with pytest.raises(headroom.invalid_argument, match="can_acquire of bucket 7, which was never declared"):
        a.can_acquire([7])
    with pytest.raises(TypeError, match="buckets = 3; expected a sequence of integers"):
        a.can_acquire(3)
    with pytest.raises(headroom.invalid_argument, match=r"releasable\[0\] = -1"):
        a.can_acquire([0], releasable=[-1])


def _declared():
    t = pool.LeaseTrace()
    for b in (7, 9, 3):
        t.declare(b, unit=b % 2, dtype="bfloat16", nbytes=1)
    return t


def _events(t):
    # the trace's events, as its text writes them
    return [line for line in t.to_text().splitlines() if not line.startswith(("headroom-lease-trace", "bucket"))]


def test_record_fsdp_step_is_the_cpp_schedule():
    """models.record_fsdp_step over the caller's buckets: (bucket, bytes) per unit, several a unit."""
    units = [[(7, 100), (9, 30)], [(3, 50)]]
    t = _declared()
    pool.models.record_fsdp_step(t, units, "params", request_multiple=1)
    assert _events(t) == ["acquire 7 100", "acquire 9 30", "acquire 3 50", "release 7", "release 9", "release 3",
                          "acquire 3 50", "acquire 7 100", "acquire 9 30", "release 3", "release 7", "release 9",
                          "step"]
    g = _declared()
    pool.models.record_fsdp_step(g, units, "grads", micro_batches=2, request_multiple=64)
    once = ["acquire 3 64", "acquire 7 128", "acquire 9 64", "release 3", "release 7", "release 9"]
    assert _events(g) == once + once + ["step"] and g.steps == 1


@pytest.mark.parametrize("units, kwargs, error, message", [
    ([[(7, 1)], []], {}, headroom.invalid_argument, "record_fsdp_step: unit 1 has no buckets"),
    ([[(7, 1)], [(7, 2)]], {}, headroom.invalid_argument, r"bucket 7 is listed twice \(again in unit 1\)"),
    ([[(7, 0)]], {}, headroom.invalid_argument, r"bucket 7 \(in unit 0\) has 0 bytes"),
    ([[(7, 1)]], {"micro_batches": 0}, headroom.invalid_argument, "micro_batches = 0; expected >= 1"),
    ([[(7, 1)]], {"micro_batches": -1}, headroom.invalid_argument, "micro_batches = -1"),
    ([[(5, 1)]], {}, headroom.invalid_argument, "bucket 5 .* was never declared"),
    ([[(7, 1)]], {"what": "weights"}, headroom.invalid_argument, "what = 'weights'; expected one of 'params', 'grads'"),
    ([[(7, 1, 2)]], {}, TypeError, r"units\[0\]\[0\] = \(7, 1, 2\); expected a \(bucket, bytes\) pair"),
    ([7], {}, TypeError, r"units\[0\] = 7; expected a list of \(bucket, bytes\) pairs"),
    ([(7, 1)], {}, TypeError, r"units\[0\]\[0\] = 7; expected a \(bucket, bytes\) pair"),
    ([[(7, "1")]], {}, TypeError, r"units\[0\]\[0\] bytes = '1'"),
])
def test_record_fsdp_step_bad_input_keeps_the_cpp_message(units, kwargs, error, message):
    t = _declared()
    kwargs = dict(kwargs)
    what = kwargs.pop("what", "params")
    with pytest.raises(error, match=message):
        pool.models.record_fsdp_step(t, units, what, **kwargs)
    assert t == _declared()  # nothing recorded


def test_planner_names_are_the_cpp_ones():
    """pool.planners (plan) and pool.lifetime_planners (plan_lifetimes, LearningArena) come from the
    C++: each name is accepted, and the C++ refusal lists exactly them."""
    assert "by_bytes" in pool.lifetime_planners  # headroom.torch.megatron_fsdp.install(planner="by_bytes")
    w = pool.model_workload("Falcon-H1-0.5B")
    for name in pool.planners:
        assert pool.plan(w, name).planner == name
    for name in pool.lifetime_planners:
        assert pool.plan_lifetimes(_trace(), planner=name).planner == name
        assert pool.LearningArena(name).stats()["planner"] == name
    for refuse in (lambda: pool.plan_lifetimes(_trace(), planner="fixed"), lambda: pool.LearningArena("fixed")):
        with pytest.raises(headroom.invalid_argument) as e:
            refuse()
        listed = str(e.value).split("expected ")[1].replace(" or ", ", ").split(", ")
        assert sorted(listed) == sorted(pool.lifetime_planners), str(e.value)
    with pytest.raises(headroom.invalid_argument) as e:
        pool.plan(w, "greedy")
    assert str(e.value).endswith("expected one of " + ", ".join(f"'{n}'" for n in pool.planners if n != "interval"))
