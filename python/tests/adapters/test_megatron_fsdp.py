# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.megatron_fsdp.PoolAllocator: Megatron's allocator contract on CPU tensors over the
C++ LearningArena, its max layout against what Megatron-FSDP's own MaxPoolAllocator holds at run
time, learning that holds (unit orders, accumulation, eval steps, random orders: never overlapping),
the adapter's warnings and plan agreement across ranks (gloo)."""
import dataclasses
import logging
import operator
import random
from contextlib import contextmanager
from typing import Any, List, Optional

import pytest
import torch

import headroom
from headroom.torch import _megatron_hooks as hooks
from headroom.torch import megatron_fsdp as hm

CPU = torch.device("cpu")
LOGGER = "headroom.torch.megatron_fsdp"


@dataclasses.dataclass
class Group:
    """The fields of Megatron's ParameterGroup the allocators read."""

    params: List[torch.nn.Parameter]
    dtype: Any = None
    grad_dtype: Any = None
    fsdp_unit_id: Optional[int] = None


def group(numels, dtype=torch.bfloat16, unit=None, device="cpu"):
    store = torch.uint8 if dtype == "float8" else dtype
    params = [torch.nn.Parameter(torch.empty(n, dtype=store, device=device), requires_grad=False) for n in numels]
    return Group(params, dtype, torch.float32, unit)


def hybrid_groups():
    """Heavy and light units, two dtypes, a unit with two bf16 buckets, a non-unit group."""
    return [
        group([64], unit=None),                      # 0: embedding, non-unit
        group([40, 8], unit=0),                      # 1: heavy
        group([10], unit=1),                         # 2: light
        group([30], dtype="float8", unit=1),         # 3: fp8 bucket of the light unit
        group([36, 4], unit=2),                      # 4: heavy
        group([6], unit=2),                          # 5: second bf16 bucket of unit 2
        group([12], unit=3),                         # 6: light
    ]


def cpu_groups(groups):
    return [dataclasses.replace(g, params=[torch.nn.Parameter(torch.empty(p.numel(), dtype=p.dtype), requires_grad=False)
                                           for p in g.params]) for g in groups]


def numel(g):
    return sum(p.numel() for p in g.params)


@pytest.fixture(autouse=True)
def only_this_tests_allocators():
    """end_step(), report() and the warnings look at every live allocator: only this test's."""
    hm._live.clear()
    yield
    hm._live.clear()


def units_of(groups):
    out = {}
    for b, g in enumerate(groups):
        if g.fsdp_unit_id is not None:
            out.setdefault(g.fsdp_unit_id, []).append(b)
    return out


def dtype_of(g):
    return torch.uint8 if g.dtype == "float8" else g.dtype


def run_pass(a, groups, order, resident=2, refetch=1, held_out=None):
    """Acquire units in `order`, `resident` held at once, each bucket fetched `refetch` times
    (Megatron fetches a gradient bucket once per parameter and again at the reduce-scatter);
    checks that the arena never hands out bytes a held lease has and that data survives."""
    units = units_of(groups)
    held, live, served = [], {}, {}

    def release(u):
        for b in units[u]:
            x, tag = live.pop(b)
            assert torch.all(x.data == tag), f"bucket {b}'s data was overwritten while held"
            a.free(b)

    for u in order:
        if len(held) == resident:
            release(held.pop(0))
        for b in units[u]:
            for _ in range(refetch):
                x = a.allocate(b, numel(groups[b]), dtype_of(groups[b]), CPU)
            tag = (b * 7 + 3) % 100
            x.data.fill_(tag)
            lo, hi = x.data.data_ptr(), x.data.data_ptr() + x.data.numel() * x.data.element_size()
            for c, (y, _) in live.items():
                ylo = y.data.data_ptr()
                assert hi <= ylo or ylo + y.data.numel() * y.data.element_size() <= lo, (b, c)
            live[b] = (x, tag)
            served[b] = x
        held.append(u)
    for u in held:
        release(u)
    return served


def train_step(a, groups, order=None, micro_batches=1, refetch=1):
    units = list(units_of(groups))
    order = order or units
    for _ in range(micro_batches):
        run_pass(a, groups, order, refetch=refetch)
        run_pass(a, groups, order[::-1], refetch=refetch)


def in_arena(a, x):
    return a.arena.data_ptr() <= x.data.data_ptr() < a.arena.data_ptr() + a.arena.numel()


# -------------------------------------------------------------------------------------------
# max: what Megatron's own MaxPoolAllocator holds at run time

def megatron():
    return pytest.importorskip("megatron_fsdp.param_and_grad_buffer", reason="megatron_fsdp is not installed")


def megatron_runtime_bytes(groups, order, dtype_fn=operator.attrgetter("dtype")):
    """Megatron's MaxPoolAllocator driven through passes in `order` on CPU: the bytes of every
    buffer its GlobalMemoryBuffer holds afterwards."""
    pgb = megatron()
    import megatron_fsdp.utils as mu

    theirs = pgb.MaxPoolAllocator("fsdp_grads", groups, size=2, dtype_fn=dtype_fn)
    saved_buffer, saved_device = getattr(mu, "_GLOBAL_MEMORY_BUFFER", None), torch.cuda.current_device
    mu._GLOBAL_MEMORY_BUFFER = None
    torch.cuda.current_device = lambda: "cpu"  # GlobalMemoryBuffer.get_tensor allocates there
    try:
        for o in order:
            run_pass(theirs, groups, o)
        held = mu.get_global_memory_buffer().buffer
    finally:
        mu._GLOBAL_MEMORY_BUFFER = saved_buffer
        torch.cuda.current_device = saved_device
    return sum(t.numel() * t.element_size() for t in held.values())


def planned(groups, passes, planner="max", alignment=1):
    a = hm.PoolAllocator("fsdp_grads", groups, planner=planner, alignment=alignment)
    for o in passes:
        run_pass(a, groups, o)
    assert a.plan is None and a.arena is None  # learning: the caching allocator served
    a.end_step()
    assert a.plan is not None and a.arena.numel() == a.plan.arena_bytes
    return a


@pytest.mark.parametrize("pattern", ["HL", "HLL", "HHLL", "HLLL"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_max_holds_what_megatron_holds_at_run_time(pattern, direction):
    """With H,L alternation Megatron's two buffers are one heavy and one light slot; with H,L,L
    heavy units land in both. max replays that rule on the trace, byte for byte."""
    heavy, light = 1024, 64
    groups = [group([heavy if pattern[u % len(pattern)] == "H" else light], unit=u) for u in range(8)]
    order = list(range(8)) if direction == "forward" else list(range(7, -1, -1))
    theirs = megatron_runtime_bytes(groups, [order])
    a = planned(groups, [order])
    assert a.plan.arena_bytes == theirs
    both_heavy = pattern in ("HLL", "HHLL")
    assert theirs == 2 * (2 * heavy if both_heavy else heavy + light)
    i = planned(groups, [order], planner="interval")
    assert i.plan.candidates["max"] == theirs and i.plan.arena_bytes <= theirs
    assert i.plan.bound <= i.plan.arena_bytes


@pytest.mark.parametrize("seed", range(8))
def test_max_holds_what_megatron_holds_on_random_workloads(seed):
    rng = random.Random(seed)
    groups = []
    for u in range(rng.randint(2, 9)):
        for _ in range(rng.randint(1, 3)):
            groups.append(group([rng.choice([1, 8, 64, rng.randint(1, 500)])],
                                dtype=rng.choice([torch.bfloat16, torch.float32, "float8"]), unit=u))
    units = list(units_of(groups))
    for passes in ([units], [units[::-1]]):
        assert planned(groups, passes).plan.arena_bytes == megatron_runtime_bytes(groups, passes)
    step = [units, units[::-1]]
    a = planned(groups, step)
    assert a.plan.arena_bytes <= megatron_runtime_bytes(groups, step)
    i = planned(groups, step, planner="interval")
    assert i.plan.bound <= i.plan.arena_bytes <= a.plan.arena_bytes


def test_unit_order_other_than_listed_is_planned_as_run():
    """Groups listed H, L, H, L but run H, H, L, L: Megatron holds two heavy
    slots; max plans what it holds, and the next steps run from the arena with no fallback."""
    groups = [group([1000 if u % 2 == 0 else 10], unit=u) for u in range(4)]
    run = [0, 2, 1, 3]
    theirs = megatron_runtime_bytes(groups, [run, run[::-1]])
    assert theirs == 2 * 2000
    for planner in hm.PLANNERS:
        a = planned(groups, [run, run[::-1]], planner=planner)
        if planner == "max":
            assert a.plan.arena_bytes == theirs
        assert a.plan.arena_bytes <= theirs
        for _ in range(2):
            train_step(a, groups, order=run)
        assert sum(a.report()["fallbacks"].values()) == 0


def test_gradient_accumulation_and_an_eval_step_run_from_the_arena():
    groups = [group([1024 if u % 3 == 0 else 128], unit=u) for u in range(6)]
    for planner in hm.PLANNERS:
        a = hm.PoolAllocator("fsdp_params", groups, planner=planner)
        train_step(a, groups, micro_batches=2)
        a.end_step()
        assert a.plan is not None
        train_step(a, groups, micro_batches=2)
        run_pass(a, groups, list(range(6)))  # an eval step: forward only
        train_step(a, groups, micro_batches=2)
        a.end_step()
        assert sum(a.report()["fallbacks"].values()) == 0, (planner, a.report())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("planner", hm.PLANNERS)
def test_random_orders_never_overlap_and_replan_takes_them_in(planner, seed):
    """Steps in orders the first step did not show (more units resident, shuffled): held bytes
    never overlap (run_pass checks addresses and data); after replan() every step seen so far runs
    again without a fallback, for every planner (the trace keeps each distinct step)."""
    rng = random.Random(seed)
    groups = [group([rng.choice([16, 200, 1000])], unit=u) for u in range(rng.randint(3, 8))]
    units = list(units_of(groups))
    a = hm.PoolAllocator("fsdp_params", groups, planner=planner)
    train_step(a, groups)
    a.end_step()
    steps = [(rng.sample(units, len(units)), rng.randint(1, 3)) for _ in range(3)]

    def fallbacks():
        return sum(a.report()["fallbacks"].values())

    for order, resident in steps:
        run_pass(a, groups, order, resident=resident)
        a.end_step()
    a.replan()
    before = fallbacks()
    train_step(a, groups)
    a.end_step()
    for order, resident in steps:
        run_pass(a, groups, order, resident=resident)
        a.end_step()
        assert fallbacks() == before, (order, resident, a.report())


# -------------------------------------------------------------------------------------------
# the contract on CPU tensors

def test_a_lease_is_first_allocate_to_free():
    """Megatron fetches a held bucket once per parameter and at the reduce-scatter: one lease,
    one acquire in the trace, one lease event, the same memory every time."""
    groups = hybrid_groups()
    a = hm.PoolAllocator("fsdp_grads", groups)
    train_step(a, groups, refetch=5)
    a.end_step()
    events = []
    hm.add_lease_listener(events.append)
    try:
        first = a.allocate(1, 48, torch.bfloat16, CPU)
        assert all(a.allocate(1, 48, torch.bfloat16, CPU) is first for _ in range(4))
        a.free(1)
        a.free(1)  # idempotent, as Megatron's reset() frees every bucket
        a.allocate(0, 64, torch.bfloat16, CPU)  # non-unit: not an arena lease
    finally:
        hm.remove_lease_listener(events.append)
    assert [(e["action"], e["bucket"], e["addr"], e["size"]) for e in events] == [
        ("alloc", 1, first.data.data_ptr(), 96), ("free", 1, first.data.data_ptr(), 96)]
    assert events[0]["arena_addr"] == a.arena.data_ptr()
    text = a.trace.to_text()
    assert text.startswith("headroom-lease-trace 1")
    assert sum(1 for line in text.splitlines() if line.split()[:1] == ["acquire"]) >= 2 * 6  # 6 unit buckets x 2 passes
    assert a.report()["acquires"] == 2 * 6 + 1


def test_a_bucket_stays_where_its_first_lease_of_the_step_was():
    """Autograd keeps views of a bucket's forward lease for the backward: within a step every
    lease of a bucket is at the same memory. Served by the caching allocator first, it stays
    there; planned bytes taken by another lease meanwhile are an error, never other memory."""
    groups = [group([1000], unit=u) for u in range(3)]
    a = hm.PoolAllocator("fsdp_params", groups, planner="interval")
    run_pass(a, groups, [0, 1, 2], resident=1)  # one unit at a time: all three share bytes
    a.end_step()
    assert len(set(a.plan.offsets.values())) == 1
    x0 = a.allocate(0, 1000, torch.bfloat16, CPU)
    x1 = a.allocate(1, 1000, torch.bfloat16, CPU)  # off the trace: 0 holds its bytes
    assert in_arena(a, x0) and not in_arena(a, x1)
    a.free(0)
    a.free(1)
    again = a.allocate(1, 1000, torch.bfloat16, CPU)  # the arena is free now, but 1 stays put
    assert again is x1 and again.data.untyped_storage().nbytes() == 2000
    assert a.report()["fallbacks"]["overlaps_live"] == 2  # counted under its first lease's reason
    a.allocate(2, 1000, torch.bfloat16, CPU)  # takes the shared bytes
    with pytest.raises(headroom.capacity_error, match=r"bucket 0 of unit 0 was served at arena offset 0 earlier in "
                                                      r"this step \(the caller keeps views of it\) and bucket 2 "
                                                      r"holds those bytes now"):
        a.allocate(0, 1000, torch.bfloat16, CPU)
    a.free(1)
    a.free(2)
    a.end_step()  # a new step: every bucket may go where the plan says
    assert in_arena(a, a.allocate(1, 1000, torch.bfloat16, CPU))


def test_a_gradient_bucket_may_move_within_a_step():
    """Gradient buckets back no parameter (Megatron's main_grad_buffer draws on the allocator):
    no view of an earlier lease survives its free, so a busy planned range means the caching
    allocator, not an error."""
    import types

    groups = [group([1000], unit=u) for u in range(3)]
    a = hm.PoolAllocator("fsdp_grads", groups, planner="interval")
    for g in groups:
        g.main_grad_buffer = types.SimpleNamespace(temporary_bucket_allocator=a)
    run_pass(a, groups, [0, 1, 2], resident=1)
    a.end_step()
    x0 = a.allocate(0, 1000, torch.bfloat16, CPU)
    a.free(0)
    a.allocate(2, 1000, torch.bfloat16, CPU)  # takes the shared bytes
    y0 = a.allocate(0, 1000, torch.bfloat16, CPU)
    assert in_arena(a, x0) and not in_arena(a, y0) and a.report()["fallbacks"]["overlaps_live"] == 1


def test_initialisation_without_strict_assignment_is_not_a_lease():
    """Megatron allocates each weight bucket once at initialisation with strict_assignments=False
    (MaxPool does not pin those): served by the caching allocator, left out of the trace."""
    groups = hybrid_groups()
    a = hm.PoolAllocator("fsdp_params", groups)
    for b in (1, 2):
        x = a.allocate(b, numel(groups[b]), torch.bfloat16, CPU, strict_assignments=False)
        x.data.fill_(1)
        a.free(b)
    assert a.report()["acquires"] == 0 and "acquire" not in a.trace.to_text()
    train_step(a, groups)
    assert a.report()["acquires"] == 2 * 6


def test_arena_is_one_tensor_in_the_context_and_views_are_cached():
    groups = hybrid_groups()
    entered = []

    @contextmanager
    def ctx():
        entered.append(True)
        yield

    a = hm.PoolAllocator("fsdp_params", groups)
    for b in (1, 2, 3):
        x = a.allocate(b, numel(groups[b]), dtype_of(groups[b]), CPU, mem_alloc_context=ctx)
        a.free(b)
    assert a.arena is None and entered == []  # learning: served by the caching allocator
    a.end_step()
    assert entered == [True] and a.arena.dtype == torch.uint8 and a.arena.numel() == a.plan.arena_bytes
    created, real_empty = [], torch.empty

    def counting_empty(*args, **kwargs):
        created.append(args)
        return real_empty(*args, **kwargs)

    torch.empty = counting_empty
    try:
        views = []
        for _ in range(3):
            x = a.allocate(1, 48, torch.bfloat16, CPU, mem_alloc_context=ctx)
            views.append(x)
            a.free(1)
    finally:
        torch.empty = real_empty
    assert created == [] and all(v is views[0] for v in views)
    assert in_arena(a, x) and x.data.data_ptr() - a.arena.data_ptr() == a.plan.offsets[1]
    assert x.data.untyped_storage().data_ptr() == a.arena.untyped_storage().data_ptr()


def test_non_unit_buckets_fall_back_like_megatron():
    groups = hybrid_groups()
    dyn = hm.PoolAllocator("fsdp_params", groups)
    e = dyn.allocate(0, 64, torch.bfloat16, CPU)
    dyn.free(0)
    assert e.data.untyped_storage().nbytes() == 0  # storage released, the tensor kept
    assert dyn.allocate(0, 64, torch.bfloat16, CPU) is e and e.data.untyped_storage().nbytes() == 128
    per = hm.PoolAllocator("fsdp_params", groups, fallback_to_persistent_buffer=True)
    p = per.allocate(0, 64, torch.bfloat16, CPU)
    per.free(0)
    assert p.data.untyped_storage().nbytes() == 128 and per.allocate(0, 64, torch.bfloat16, CPU) is p


def test_bad_input_names_the_value():
    a = hm.PoolAllocator("fsdp_params", hybrid_groups())
    with pytest.raises(headroom.invalid_argument, match=r"bucket id 7 was never planned; expected 0\.\.6"):
        a.allocate(7, 8, torch.bfloat16, CPU)
    with pytest.raises(headroom.invalid_argument, match=r"bucket id -1 was never planned"):
        a.free(-1)
    with pytest.raises(headroom.invalid_argument, match=r"bucket 1 of unit 0 requested as torch.float32; "
                                                        r"the plan has it as torch.bfloat16"):
        a.allocate(1, 48, torch.float32, CPU)
    with pytest.raises(headroom.invalid_argument, match=r"bucket id 9 was never planned"):
        a.can_allocate([1, 9])
    with pytest.raises(headroom.invalid_argument, match=r"planner 'best'"):
        hm.PoolAllocator("p", hybrid_groups(), planner="best")
    with pytest.raises(headroom.invalid_argument, match=r"size \(buffers\) 1"):
        hm.PoolAllocator("p", hybrid_groups(), size=1)
    with pytest.raises(headroom.invalid_argument, match=r"every fsdp_unit_id is None"):
        hm.PoolAllocator("p", [group([3], unit=None)])
    with pytest.raises(headroom.invalid_argument, match=r"100"):
        hm.PoolAllocator("p", hybrid_groups(), alignment=100)
    a.allocate(1, 48, torch.bfloat16, CPU)
    with pytest.raises(headroom.invalid_argument, match=r"end_step\(\) with buckets \[1\] still held"):
        a.end_step()
    a.free(1)
    a.end_step()
    x = a.allocate(1, 48, torch.bfloat16, CPU)
    with pytest.raises(headroom.capacity_error, match=r"bucket 1 of unit 0 re-fetched at 200 B while it holds 96 B"):
        a.allocate(1, 100, torch.bfloat16, CPU)
    assert a.allocate(1, 48, torch.bfloat16, CPU) is x


def test_can_allocate_counts_live_and_releasable_leases():
    groups = [group([8], unit=u) for u in range(4)]
    a = hm.PoolAllocator("p", groups, planner="max")
    assert a.can_allocate([0, 1, 2, 3])  # learning: the caching allocator serves anything
    train_step(a, groups)
    a.end_step()
    a.allocate(0, 8, torch.bfloat16, CPU)
    a.allocate(1, 8, torch.bfloat16, CPU)
    assert a.can_allocate([0]) and a.can_allocate([0, 1])  # already live
    assert not a.can_allocate([2])  # unit 2 shares bytes with unit 0 (two buffers)
    assert a.can_allocate([2], releasable_bucket_ids={0})
    assert not a.can_allocate([2, 3], releasable_bucket_ids={0})
    assert a.can_allocate([2, 3], releasable_bucket_ids={0, 1})


# -------------------------------------------------------------------------------------------
# warnings, report, install

def test_missing_end_step_warns_once(caplog):
    groups = hybrid_groups()
    a = hm.PoolAllocator("fsdp_params", groups, planner="interval")
    w = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=0.1)
    hooks._warned.discard("end_step")
    hooks._steps.update(optimizer=0, leases=0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        w.grad = torch.ones(2)
        opt.step()  # fully_shard_optimizer steps once at construction: no leases yet, not counted
        for step in range(4):
            train_step(a, groups)
            w.grad = torch.ones(2)
            opt.step()
            hits = [r for r in caplog.records if "optimizer steps ran without" in r.getMessage()]
            assert len(hits) == (0 if step < 2 else 1)  # the third step without end_step(), once
    assert hits[0].name == LOGGER
    assert "fsdp_params (interval" in hits[0].getMessage()
    hm.end_step()
    assert a.plan is not None


def fake_megatron_module(double_buffer):
    """The three names install() patches, with a ParamAndGradBuffer that picks its allocator
    the way Megatron's does (param_and_grad_buffer.py, fsdp_double_buffer)."""
    import types

    m = types.ModuleType("fake.megatron_fsdp.param_and_grad_buffer")

    class Storage:
        pass

    class ParamAndGradBuffer:
        def __init__(self, groups):
            self.ddp_config = types.SimpleNamespace(fsdp_double_buffer=double_buffer)
            self.weight_alloc = m.MaxPoolAllocator("fsdp_params", groups) if double_buffer else Storage()

    m.MaxPoolAllocator, m.FixedPoolAllocator, m.ParamAndGradBuffer = object, object, ParamAndGradBuffer
    return m


def test_install_without_double_buffer_warns_and_uninstall_restores(caplog):
    for double_buffer in (False, True):
        m = fake_megatron_module(double_buffer)
        init = m.ParamAndGradBuffer.__init__
        cls = hm.install(planner="by_bytes", module=m)
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                buf = m.ParamAndGradBuffer(hybrid_groups())
                m.ParamAndGradBuffer(hybrid_groups())
            assert m.MaxPoolAllocator is cls and m.FixedPoolAllocator is cls and hm.installed() == "by_bytes"
            warned = [r.getMessage() for r in caplog.records if "fsdp_double_buffer" in r.getMessage()]
            if double_buffer:
                assert warned == [] and isinstance(buf.weight_alloc, hm.PoolAllocator)
                assert buf.weight_alloc.planner == "by_bytes"
            else:
                assert len(warned) == 1 and "fsdp_double_buffer=False" in warned[0]
        finally:
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                hm.uninstall()
        assert m.MaxPoolAllocator is object and m.ParamAndGradBuffer.__init__ is init and hm.installed() is None
        if double_buffer:
            assert any("stay in use" in r.getMessage() and "fsdp_params" in r.getMessage() for r in caplog.records)
    with pytest.raises(headroom.invalid_argument, match=r"planner 'fixed'"):
        hm.install(planner="fixed")


def test_report_says_what_happened():
    groups = [group([1024 if u % 3 == 0 else 128], unit=u) for u in range(6)]
    a = hm.PoolAllocator("fsdp_params", groups, planner="interval")
    unused = hm.PoolAllocator("fsdp_fp8_transpose_params", groups, planner="interval")
    r = a.report()
    assert r["planned"] is False and r["arena_bytes"] == 0 and r["bound"] is None
    train_step(a, groups)
    hm.end_step()  # every live allocator: `unused` served nothing and keeps waiting
    r = a.report()
    assert r["name"] == "fsdp_params" and r["planner"] == "interval" and r["planned"]
    assert r["arena_bytes"] == a.arena.numel() == a.plan.arena_bytes
    assert r["bound"] <= r["arena_bytes"] <= r["megatron_max_bytes"] == r["candidates"]["max"]
    assert r["acquires"] == 2 * 6 and sum(r["fallbacks"].values()) == 0
    assert unused.report()["planned"] is False and unused.arena is None  # never used: nothing allocated
    names = [x["name"] for x in hm.report()]
    assert "fsdp_params" in names and "fsdp_fp8_transpose_params" in names


# -------------------------------------------------------------------------------------------
# plan agreement across ranks (gloo, two processes)

def _agreement_worker(rank, init_file, out_dir):
    import os
    import pickle

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    results = {}
    try:
        same = hm.PoolAllocator("fsdp_params", hybrid_groups())
        train_step(same, hybrid_groups())
        same.end_step()
        results["same"] = same.plan.fingerprint
        groups = hybrid_groups()
        if rank == 1:
            groups[2] = group([500], unit=1)  # one rank built a larger layer
        differ = hm.PoolAllocator("fsdp_params", groups)
        train_step(differ, groups)
        try:
            differ.end_step()
            results["differ"] = "allocated"
        except headroom.error as e:
            results["differ"] = (type(e).__name__, str(e), differ.arena is None)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)


def test_ranks_with_different_plans_fail_before_allocating(tmp_path):
    import pickle

    import spawned

    spawned.spawn(_agreement_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2)
    res = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(2)]
    assert res[0]["same"] == res[1]["same"]
    for r in res:
        cls, msg, no_arena = r["differ"]
        assert cls == "collective_mismatch" and no_arena
        assert "ranks of one data-parallel group planned different arenas" in msg
        assert "rank 0: fingerprint" in msg and "rank 1: fingerprint" in msg


# -------------------------------------------------------------------------------------------
# predict before running (meta device, Megatron's own parameter groups, the C++ planner)

class Heavy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256, bias=False)


class Light(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 16, bias=False)


def test_predict_from_a_model_on_the_meta_device():
    megatron()
    with torch.device("meta"):
        model = torch.nn.Sequential(*[Heavy() if i % 3 == 0 else Light() for i in range(6)])
    p = hm.predict(model, [Heavy, Light], grad_comm_dtype=torch.bfloat16, alignment=256)
    heavy, light = 64 * 256, 64 * 16  # elements
    grads, params = p["fsdp_grads"], p["fsdp_params"]
    # two units alive at a time, heavy units three apart: the bound is one heavy and one light
    assert grads["bound"] == 2 * heavy + 2 * light and params["bound"] == 4 * heavy + 4 * light
    # Megatron's buffers alternate: with H,L,L heavy units land in both (MaxPool's run-time bytes)
    assert grads["max"] == 2 * 2 * heavy and params["max"] == 2 * 4 * heavy
    assert grads["megatron_planned"] == 2 * 2 * heavy and params["megatron_planned"] == 2 * 4 * heavy
    for a in (grads, params):
        assert a["bound"] <= a["interval"] <= a["max"]
    assert p["total"]["interval"] == grads["interval"] + params["interval"]
    with pytest.raises(headroom.invalid_argument, match=r"dp 0; expected an int >= 1"):
        hm.predict(model, [Heavy], dp=0)
    with pytest.raises(headroom.invalid_argument, match=r"no module of Sequential is an instance of \['Linear'\]"):
        hm.predict(torch.nn.Sequential(torch.nn.ReLU()), [torch.nn.Linear])
