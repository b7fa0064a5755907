"""headroom.torch.megatron_fsdp.PoolAllocator: Megatron's allocator contract on CPU tensors, and
its max plan against Megatron-FSDP's own MaxPoolAllocator on the same parameter groups."""
import dataclasses
import logging
import operator
import random
from contextlib import contextmanager
from typing import Any, List, Optional

import pytest
import torch

import headroom
from headroom import pool as hp
from headroom.torch import megatron_fsdp as hm

CPU = torch.device("cpu")


@dataclasses.dataclass
class Group:
    """The fields of Megatron's ParameterGroup the allocators read."""

    params: List[torch.nn.Parameter]
    dtype: Any = None
    grad_dtype: Any = None
    fsdp_unit_id: Optional[int] = None


def group(numels, dtype=torch.bfloat16, unit=None, grad_dtype=None, device="meta"):
    store = torch.uint8 if dtype == "float8" else dtype
    params = [torch.nn.Parameter(torch.empty(n, dtype=store, device=device), requires_grad=False) for n in numels]
    return Group(params, dtype, grad_dtype or torch.float32, unit)


def hybrid_groups():
    """Units alternating heavy and light (the shape where MaxPool wastes most), two dtypes,
    a unit with two bf16 buckets, and a non-unit group (embedding)."""
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


# -------------------------------------------------------------------------------------------
# planning equality with Megatron's MaxPoolAllocator

def megatron():
    return pytest.importorskip("megatron_fsdp.param_and_grad_buffer", reason="megatron_fsdp is not installed")


def assert_same_plan_as_megatron(groups, dtype_fn=operator.attrgetter("dtype")):
    pgb = megatron()
    theirs = pgb.MaxPoolAllocator("fsdp_params", groups, size=2, dtype_fn=dtype_fn)
    ours = hm.PoolAllocator("fsdp_params", groups, size=2, dtype_fn=dtype_fn)
    assert ours.plan.max_sizes == theirs.max_dtype_bucket_sizes
    assert list(ours.plan.max_sizes) == list(theirs.max_dtype_bucket_sizes)  # same dtype order
    assert ours.bucket_alloc_index == theirs.bucket_alloc_index
    assert ours.fsdp_double_buffer_units == theirs.fsdp_double_buffer_units
    assert sorted(ours.plan.slots and [(s.group, s.key, s.ordinal) for s in ours.plan.slots], key=str) == sorted(
        theirs.idle_buffer, key=str
    )
    assert hm.megatron_max_pool(groups, dtype_fn) == (theirs.max_dtype_bucket_sizes,
                                                      {b: o for b, (_, o) in theirs.bucket_alloc_index.items()})
    return ours, theirs


def test_max_plan_equals_megatron_on_a_hybrid_model():
    ours, _ = assert_same_plan_as_megatron(hybrid_groups())
    # bf16: heavy units define slot 0 (48 > 40), unit 2's second bucket defines slot 1; fp8 -> uint8
    assert ours.plan.max_sizes == {torch.bfloat16: [48, 6], torch.uint8: [30]}


def test_max_plan_equals_megatron_with_a_grad_dtype_fn():
    groups = hybrid_groups()
    groups[2].grad_dtype = torch.bfloat16  # one unit reduces in bf16: its own slot list
    assert_same_plan_as_megatron(groups, dtype_fn=operator.attrgetter("grad_dtype"))


@pytest.mark.parametrize("seed", range(40))
def test_max_plan_equals_megatron_on_random_workloads(seed):
    rng = random.Random(seed)
    groups = []
    units = rng.randint(1, 9)
    for u in range(units):
        for _ in range(rng.randint(1, 4)):
            dtype = rng.choice([torch.bfloat16, torch.float32, "float8", torch.bfloat16])
            size = rng.choice([1, 7, 8, 64, 64, 100, rng.randint(1, 500)])  # ties on purpose
            groups.append(group([size], dtype=dtype, unit=rng.choice([u, rng.randrange(units)])))
        if rng.random() < 0.3:
            groups.append(group([rng.randint(1, 100)], unit=None))
    if all(g.fsdp_unit_id is None for g in groups):
        groups.append(group([5], unit=0))
    assert_same_plan_as_megatron(groups)


def megatron_runtime_slots(groups, order, resident=2, dtype_fn=operator.attrgetter("dtype")):
    """Megatron's own MaxPoolAllocator driven through a training order on CPU: the bytes of every
    buffer its GlobalMemoryBuffer holds afterwards, by (buffer group, dtype, offset)."""
    pgb = megatron()
    import megatron_fsdp.utils as mu

    theirs = pgb.MaxPoolAllocator("fsdp_grads", groups, size=2, dtype_fn=dtype_fn)
    saved_buffer, saved_device = getattr(mu, "_GLOBAL_MEMORY_BUFFER", None), torch.cuda.current_device
    mu._GLOBAL_MEMORY_BUFFER = None
    torch.cuda.current_device = lambda: "cpu"  # GlobalMemoryBuffer.get_tensor allocates there
    try:
        run_step(theirs, groups, resident=resident, order=order, dtype_fn=dtype_fn)
        held = mu.get_global_memory_buffer().buffer
    finally:
        mu._GLOBAL_MEMORY_BUFFER = saved_buffer
        torch.cuda.current_device = saved_device
    names = {theirs._get_gbuf_name(g, d, o): (g, d, o) for g, d, o in theirs.idle_buffer}
    return {names[name]: t.numel() * t.element_size() for (name, _), t in held.items()}


def assert_max_slots_equal_megatrons_at_run_time(groups, order, dtype_fn=operator.attrgetter("dtype")):
    ours = hm.PoolAllocator("fsdp_grads", cpu_groups(groups), size=2, dtype_fn=dtype_fn)
    run_step(ours, groups, order=order, dtype_fn=dtype_fn)
    theirs = megatron_runtime_slots(cpu_groups(groups), order, dtype_fn=dtype_fn)
    mine = {(s.group, s.key, s.ordinal): s.nbytes for s in ours.plan.slots if s.nbytes}
    assert mine == theirs
    assert ours.stats["off_trace_fallbacks"] == 0
    return mine


@pytest.mark.parametrize("pattern", ["HL", "HLL", "HHLL", "HLLL"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_max_slots_equal_what_megatron_allocates_at_run_time(pattern, direction):
    """The bench's finding: with H,L alternation Megatron's two buffers are one heavy and one
    light slot, not two heavy ones; with H,L,L heavy units land in both."""
    heavy, light = 1024, 64
    groups = [group([heavy if pattern[u % len(pattern)] == "H" else light], unit=u) for u in range(8)]
    units = list(range(8))
    order = units if direction == "forward" else units[::-1]
    slots = assert_max_slots_equal_megatrons_at_run_time(groups, order)
    # units take buffers 0, 1, 0, 1, ...: an even period keeps every heavy unit in one buffer
    both_heavy = pattern in ("HLL", "HHLL")
    assert sorted(slots.values()) == sorted([2 * heavy, 2 * heavy if both_heavy else 2 * light])


@pytest.mark.parametrize("seed", range(12))
def test_max_slots_equal_megatrons_at_run_time_on_random_workloads(seed):
    rng = random.Random(seed)
    groups = []
    for u in range(rng.randint(2, 9)):
        for _ in range(rng.randint(1, 3)):
            groups.append(group([rng.choice([1, 8, 64, rng.randint(1, 500)])],
                                dtype=rng.choice([torch.bfloat16, torch.float32, "float8"]), unit=u))
    units = list(hm._unit_buckets(groups))
    for order in (units, units[::-1]):
        assert_max_slots_equal_megatrons_at_run_time(groups, order)


def test_max_bucket_moved_into_a_smaller_slot_is_served_outside_the_arena(caplog):
    groups = cpu_groups([group([1024 if u % 2 == 0 else 128], unit=u) for u in range(4)])
    a = hm.PoolAllocator("p", groups)
    a.allocate(0, 1024, torch.bfloat16, CPU)  # unit order: buffer 0 heavy, buffer 1 light
    assert sorted(s.nbytes for s in a.plan.slots) == [256, 2048]
    with caplog.at_level(logging.WARNING, logger="headroom.torch.megatron_fsdp"):
        moved = a.allocate(2, 1024, torch.bfloat16, CPU)  # buffer 0 is held: it takes light buffer 1
    lo, hi = a.arena.data_ptr(), a.arena.data_ptr() + a.arena.numel()
    assert moved.data.numel() == 1024 and not lo <= moved.data.data_ptr() < hi
    assert a.stats["off_trace_fallbacks"] == 1 and "does not fit slot g1/torch.bfloat16#0 (256 B)" in caplog.text
    assert not a.can_allocate([1])  # it holds buffer 1 meanwhile, as in Megatron
    a.free(2)
    assert moved.data.untyped_storage().nbytes() == 0  # released
    light = a.allocate(1, 128, torch.bfloat16, CPU)
    assert lo <= light.data.data_ptr() < hi and a.stats["off_trace_fallbacks"] == 1


TORCH_DTYPE = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "uint8": "float8"}


def preset_workloads():
    """One rank's workload of every model preset (bf16, EP 8, FP8 weights with bf16 ends)."""
    for name in hp.models.names():
        for ep, fp8 in ((1, False), (8, False), (8, True)):
            try:
                yield hp.model_workload(name, ep, fp8_params=fp8)
            except headroom.invalid_argument:
                assert ep > 1  # EP that does not divide this model's experts
                continue


def groups_of_workload(w):
    """Megatron parameter groups (meta tensors: no memory) with the workload's buckets."""
    groups = []
    for u, unit in enumerate(w.units):
        for b in unit.buckets:
            groups.append(group([b.elements], dtype=TORCH_DTYPE[b.dtype], unit=u))
    for b in w.non_unit:
        groups.append(group([b.elements], dtype=TORCH_DTYPE[b.dtype], unit=None))
    return groups


def test_max_plan_equals_megatron_on_every_model_preset():
    workloads = list(preset_workloads())
    assert len(workloads) >= 2 * len(hp.models.names())
    for w in workloads:
        ours, theirs = assert_same_plan_as_megatron(groups_of_workload(w))
        # and the C++ max planner (headroom.pool) makes the same slots from the same workload
        cpp = hp.plan(w, "max", buffers=2)
        # C++'s max is Megatron's plan (every buffer at the largest bucket of its shape); what
        # Megatron allocates at run time, and so ours, is at most that
        assert ours.plan.arena_bytes <= cpp.arena_bytes
        cpp_sizes = {}
        for shape in cpp.shapes:
            cpp_sizes.setdefault(hm._storage_dtype(TORCH_DTYPE[shape.category_name]), []).append(shape.bytes)
        assert cpp_sizes == {k: [n * hm._itemsize(k) for n in v] for k, v in ours.plan.max_sizes.items()}


@pytest.mark.parametrize("fp8", [False, True])
def test_interval_learned_from_a_preset_meets_the_bound(fp8):
    w = hp.model_workload("Nemotron-3-Nano-30B-A3B", 8, fp8_params=fp8)
    groups = groups_of_workload(w)
    scaled = [group([max(1, numel(g) // 4096)], dtype=g.dtype, unit=g.fsdp_unit_id, device="cpu") for g in groups]
    a = hm.PoolAllocator("fsdp_params", scaled, planner="interval")
    run_step(a, scaled)
    a.end_step()
    mx = hm.PoolAllocator("fsdp_params", scaled)
    run_step(mx, scaled)
    assert a.plan.arena_bytes == a.plan.lower_bound >= a._trace.peak_bytes
    assert a.plan.arena_bytes < mx.plan.arena_bytes
    run_step(a, scaled)
    assert a.stats["off_trace_fallbacks"] == 0


# -------------------------------------------------------------------------------------------
# the contract on CPU tensors

def test_arena_is_one_tensor_and_slots_are_views_at_planned_offsets():
    groups = cpu_groups(hybrid_groups())
    a = hm.PoolAllocator("fsdp_params", groups)
    b1 = a.allocate(1, 48, torch.bfloat16, CPU)
    b2 = a.allocate(2, 10, torch.bfloat16, CPU)
    b3 = a.allocate(3, 30, torch.uint8, CPU)
    arena = a.arena
    assert arena.dtype == torch.uint8 and arena.numel() == a.plan.arena_bytes
    base = arena.data_ptr()
    for bucket, (b, size, dt) in ((b1, (1, 48, torch.bfloat16)), (b2, (2, 10, torch.bfloat16)), (b3, (3, 30, torch.uint8))):
        assert bucket.data.dtype == dt and bucket.data.numel() == size and bucket.data.dim() == 1
        assert bucket.data.untyped_storage().data_ptr() == arena.untyped_storage().data_ptr()
        slot = a._slot_index[a.using_buffer[b]]
        assert bucket.data.data_ptr() == base + slot.offset
        assert slot.offset % a.alignment == 0
    # units 0 and 1 share shape bf16#0 but got different buffer groups (double buffering)
    assert a.using_buffer[1][0] != a.using_buffer[2][0]
    # plan layout: 2 groups x (bf16 [48, 6] elements, uint8 [30]) slots, each sized by the
    # buckets that Megatron's first-idle assignment puts there in unit order: buffer 0 holds
    # units 0 and 2 and unit 1's fp8 bucket (its uint8 slot was idle), buffer 1 units 1 and 3
    assert [(s.group, s.key, s.ordinal, s.nbytes) for s in a.plan.slots] == [
        (0, torch.bfloat16, 0, 96), (0, torch.bfloat16, 1, 12), (0, torch.uint8, 0, 30),
        (1, torch.bfloat16, 0, 24), (1, torch.bfloat16, 1, 0), (1, torch.uint8, 0, 0)]
    assert a.plan.arena_bytes == 4 * 256


def test_allocate_reuses_views_without_creating_tensors():
    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    first = a.allocate(1, 48, torch.bfloat16, CPU)
    again = a.allocate(1, 48, torch.bfloat16, CPU)  # re-fetch while held: same bucket
    assert again is first
    a.free(1)
    a.allocate(2, 10, torch.bfloat16, CPU)  # unit 1 takes the free group 0 and is pinned there
    third = a.allocate(1, 48, torch.bfloat16, CPU)  # bucket 1's pinned group is held: it moves
    assert third.data.data_ptr() != first.data.data_ptr() and a.stats["moves"] == 1
    # the steady state: every later lease is a cached view (no torch.empty, no slicing)
    a.free(1)
    a.free(2)
    created = []
    real_empty = torch.empty

    def counting_empty(*args, **kwargs):
        created.append(args)
        return real_empty(*args, **kwargs)

    leases = []
    torch.empty = counting_empty
    try:
        for _ in range(3):
            x = a.allocate(1, 48, torch.bfloat16, CPU)
            y = a.allocate(2, 10, torch.bfloat16, CPU)
            leases.append((x, y))
            a.free(1)
            a.free(2)
    finally:
        torch.empty = real_empty
    assert created == []
    assert all(x is leases[0][0] and y is leases[0][1] for x, y in leases)  # the same cached views
    assert x.data.data_ptr() == first.data.data_ptr()  # back in its pinned group


def test_strict_assignment_pins_and_moves_like_megatron(caplog):
    pgb = megatron()
    groups = cpu_groups(hybrid_groups())
    ours = hm.PoolAllocator("fsdp_params", groups)
    theirs = pgb.MaxPoolAllocator("fsdp_params", groups)
    sequence = [("a", 1), ("a", 2), ("f", 1), ("a", 4), ("f", 2), ("a", 6), ("f", 4), ("f", 6),
                ("a", 2), ("a", 1), ("f", 1), ("f", 2), ("a", 4), ("a", 6), ("f", 6), ("f", 4)]
    sizes = {1: 48, 2: 10, 4: 40, 6: 12}

    def fake_tensor(shape, dtype, name, mem_alloc_context=None):
        return torch.empty(shape, dtype=dtype)

    class FakeBuffer:
        get_tensor = staticmethod(fake_tensor)

    real = pgb.get_global_memory_buffer
    pgb.get_global_memory_buffer = lambda: FakeBuffer
    try:
        for op, b in sequence:
            if op == "a":
                ours.allocate(b, sizes[b], torch.bfloat16, CPU)
                theirs.allocate(b, sizes[b], torch.bfloat16, CPU)
            else:
                ours.free(b)
                theirs.free(b)
            assert ours.using_buffer == theirs.using_buffer
            assert sorted(ours.idle_buffer, key=str) == sorted(theirs.idle_buffer, key=str)
            assert ours.bucket_alloc_index == theirs.bucket_alloc_index
    finally:
        pgb.get_global_memory_buffer = real


def test_non_unit_buckets_fall_back_like_megatron():
    groups = cpu_groups(hybrid_groups())
    dyn = hm.PoolAllocator("fsdp_params", groups)
    e = dyn.allocate(0, 64, torch.bfloat16, CPU)
    assert e.data.untyped_storage().data_ptr() != (dyn.arena.untyped_storage().data_ptr() if dyn.arena is not None else 0)
    dyn.free(0)
    assert e.data.untyped_storage().nbytes() == 0  # storage released, the tensor kept
    e2 = dyn.allocate(0, 64, torch.bfloat16, CPU)
    assert e2 is e and e.data.untyped_storage().nbytes() == 128

    entered = []

    @contextmanager
    def ctx():
        entered.append(True)
        yield

    per = hm.PoolAllocator("fsdp_params", groups, fallback_to_persistent_buffer=True)
    p = per.allocate(0, 64, torch.bfloat16, CPU, mem_alloc_context=ctx)
    per.free(0)
    assert p.data.untyped_storage().nbytes() == 128  # persistent: never freed
    assert per.allocate(0, 64, torch.bfloat16, CPU, mem_alloc_context=ctx) is p
    assert entered == [True]


def test_arena_is_allocated_inside_mem_alloc_context():
    seen = []

    @contextmanager
    def ctx():
        before = len(created)
        yield
        seen.append(len(created) - before)

    created = []
    real_empty = torch.empty

    def counting_empty(*args, **kwargs):
        created.append(args)
        return real_empty(*args, **kwargs)

    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    torch.empty = counting_empty
    try:
        a.allocate(1, 48, torch.bfloat16, CPU, mem_alloc_context=ctx)
    finally:
        torch.empty = real_empty
    assert seen == [1] and created[0][0] == a.plan.arena_bytes


def test_slots_are_sized_on_the_buffers_requests():
    """With Megatron's buffers attached, slots take the padded request sizes, and buckets that
    no buffer draws from this allocator take no bytes."""
    groups = cpu_groups(hybrid_groups())
    a = hm.PoolAllocator("fsdp_params", groups)
    other = object()

    @dataclasses.dataclass
    class Index:
        size: int

    @dataclasses.dataclass
    class Buf:
        temporary_bucket_allocator: Any
        bucket_index: Index
        data_parallel_group: Any = None

    for b, g in enumerate(groups):
        padded = -(-numel(g) // 16) * 16
        g.model_weight_buffer = Buf(a if b != 3 else other, Index(padded))
    bucket = a.allocate(1, 48, torch.bfloat16, CPU)
    sizes = [(s.group, s.key, s.ordinal, s.nbytes) for s in a.plan.slots]
    assert sizes == [(0, torch.bfloat16, 0, 96), (0, torch.bfloat16, 1, 32), (0, torch.uint8, 0, 0),
                     (1, torch.bfloat16, 0, 32), (1, torch.bfloat16, 1, 0), (1, torch.uint8, 0, 0)]
    assert bucket.data.numel() == 48
    # a request above the planned slot is an error naming it, never a silent re-allocation
    with pytest.raises(headroom.capacity_error, match=r"bucket 6 asks for 200 elements .* planned at 32 B"):
        a.allocate(6, 200, torch.bfloat16, CPU)


def test_bad_input_names_the_value():
    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    with pytest.raises(headroom.invalid_argument, match=r"bucket id 7 was never planned; expected 0\.\.6"):
        a.allocate(7, 8, torch.bfloat16, CPU)
    with pytest.raises(headroom.invalid_argument, match=r"bucket id -1 was never planned"):
        a.free(-1)
    with pytest.raises(headroom.invalid_argument, match=r"bucket 1 of unit 0 requested as torch.float32; the plan has it as torch.bfloat16"):
        a.allocate(1, 48, torch.float32, CPU)
    with pytest.raises(headroom.invalid_argument, match=r"bucket id 9 was never planned"):
        a.can_allocate([1, 9])
    with pytest.raises(headroom.invalid_argument, match=r"planner 'best'"):
        hm.PoolAllocator("p", cpu_groups(hybrid_groups()), planner="best")
    with pytest.raises(headroom.invalid_argument, match=r"size \(buffers\) 1"):
        hm.PoolAllocator("p", cpu_groups(hybrid_groups()), size=1)
    with pytest.raises(headroom.invalid_argument, match=r"every fsdp_unit_id is None"):
        hm.PoolAllocator("p", [group([3], unit=None)])
    with pytest.raises(headroom.invalid_argument, match=r"alignment 100"):
        hm.PoolAllocator("p", cpu_groups(hybrid_groups()), alignment=100)
    assert a.arena is None  # nothing was allocated by the failed calls


def test_exhaustion_names_every_holder():
    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    a.allocate(1, 48, torch.bfloat16, CPU)
    a.allocate(4, 40, torch.bfloat16, CPU)
    with pytest.raises(headroom.capacity_error, match=r"no free slot for bucket 2 of unit 1 \(torch.bfloat16#0\); all 2 "
                       r"buffers are held: buffer 0 held by bucket 1 \(unit 0\), buffer 1 held by bucket 4 \(unit 2\)"):
        a.allocate(2, 10, torch.bfloat16, CPU)


def test_can_allocate_counts_live_and_releasable_slots():
    """Megatron PR #6316's capacity tests, on this allocator: 4 uniform units, 2 buffers."""
    groups = cpu_groups([group([8], unit=u) for u in range(4)])
    a = hm.PoolAllocator("p", groups)
    a.allocate(0, 8, torch.bfloat16, CPU)
    a.allocate(1, 8, torch.bfloat16, CPU)
    assert a.can_allocate([0])           # already live
    assert not a.can_allocate([2])
    assert a.can_allocate([2], releasable_bucket_ids={0})
    assert not a.can_allocate([2, 3], releasable_bucket_ids={0})
    assert a.can_allocate([2, 3], releasable_bucket_ids={0, 1})
    assert a.can_allocate([2, 2], releasable_bucket_ids={0})  # duplicates count once
    three = hm.PoolAllocator("p3", cpu_groups([group([8], unit=u) for u in range(4)]), size=3)
    ptrs = {three.allocate(b, 8, torch.bfloat16, CPU).data.data_ptr() for b in range(3)}
    assert len(ptrs) == 3 and not three.can_allocate([3]) and three.can_allocate([3], {0})
    p0 = three.allocate(0, 8, torch.bfloat16, CPU).data.data_ptr()
    three.free(0)
    assert three.allocate(3, 8, torch.bfloat16, CPU).data.data_ptr() == p0


def test_by_bytes_shares_slots_across_dtypes():
    groups = cpu_groups(hybrid_groups())
    bd = hm.PoolAllocator("p", groups, planner="max")
    bb = hm.PoolAllocator("p", groups, planner="by_bytes")
    bd.allocate(1, 48, torch.bfloat16, CPU)
    bb.allocate(1, 48, torch.bfloat16, CPU)
    # by bytes, the light unit's fp8 bucket (30 B, its largest) shares slot 0 with the heavy
    # units' bf16 buckets, and its bf16 bucket (20 B) slot 1 with unit 2's second bucket
    assert list(bb.plan.max_sizes) == ["bytes"]
    assert bb.plan.max_sizes["bytes"] == [96, 20]
    assert bb.plan.arena_bytes == 4 * 256 and bd.plan.arena_bytes == 4 * 256
    u8 = bb.allocate(3, 30, torch.uint8, CPU)
    bf = bb.allocate(5, 6, torch.bfloat16, CPU)
    assert u8.data.dtype == torch.uint8 and bf.data.dtype == torch.bfloat16


def train_order(units):
    return list(units) + list(reversed(units))


def run_step(a, groups, resident=2, order=None, dtype_fn=operator.attrgetter("dtype")):
    """Acquire units in training order with `resident` held at once (each unit: all its buckets)."""
    units = hm._unit_buckets(groups)
    order = order or train_order(list(units))
    held = []
    out = {}
    for u in order:
        if len(held) == resident:
            for b in units[held.pop(0)]:
                a.free(b)
        for b in units[u]:
            d = hm._storage_dtype(dtype_fn(groups[b]))
            out[(u, b)] = a.allocate(b, numel(groups[b]), d, CPU)
        held.append(u)
    for u in held:
        for b in units[u]:
            a.free(b)
    return out


def test_interval_learns_then_plans_at_the_lower_bound():
    # heavy, light, light, ...: with 2 resident the bound is heavy + light; MaxPool's two buffers
    # both take heavy units (units alternate buffers, the period is odd): 2 x heavy
    groups = cpu_groups([group([1024 if u % 3 == 0 else 128], unit=u) for u in range(6)])
    a = hm.PoolAllocator("p", groups, planner="interval")
    first = run_step(a, groups)
    assert a.plan is None and a.arena is None and a.stats["dynamic_allocations"] == 12
    a.end_step()
    assert a.plan.lower_bound == 2048 + 256
    assert a.plan.arena_bytes == a.plan.lower_bound
    mx = hm.PoolAllocator("m", groups)
    run_step(mx, groups)
    assert mx.plan.arena_bytes == 2 * 2048
    assert mx.plan.arena_bytes == sum(megatron_runtime_slots(groups, train_order(list(range(6)))).values())
    second = run_step(a, groups)
    third = run_step(a, groups)
    assert a.stats["off_trace_fallbacks"] == 0
    for key in second:  # fixed addresses from the second step on
        assert second[key].data.data_ptr() == third[key].data.data_ptr()
        assert a.arena.data_ptr() <= second[key].data.data_ptr() < a.arena.data_ptr() + a.arena.numel()
    assert all(first[k].data.data_ptr() != second[k].data.data_ptr() for k in first)


def test_interval_with_one_unit_at_a_time_shares_one_range():
    groups = cpu_groups([group([1024 if u % 2 == 0 else 128], unit=u) for u in range(6)])
    a = hm.PoolAllocator("p", groups, planner="interval")
    run_step(a, groups, resident=1)
    a.end_step()
    assert a.plan.arena_bytes == a.plan.lower_bound == 2048
    assert {r[0] for r in a.plan.unit_ranges.values()} == {0}
    run_step(a, groups, resident=1)
    assert a.stats["off_trace_fallbacks"] == 0
    run_step(a, groups, resident=2)  # two at once was never seen: served apart, never overlapping
    assert a.stats["off_trace_fallbacks"] > 0


def test_interval_never_overlaps_off_trace():
    groups = cpu_groups([group([1024 if u % 2 == 0 else 128], unit=u) for u in range(6)])
    a = hm.PoolAllocator("p", groups, planner="interval")
    run_step(a, groups)
    a.end_step()
    # units 0 and 2 share bytes in the plan (never resident together in training order)
    s0, n0 = a.plan.unit_ranges[0]
    s2, n2 = a.plan.unit_ranges[2]
    assert s0 < s2 + n2 and s2 < s0 + n0
    x = a.allocate(0, 1024, torch.bfloat16, CPU)
    assert not a.can_allocate([2]) and a.can_allocate([2], releasable_bucket_ids=[0])
    y = a.allocate(2, 1024, torch.bfloat16, CPU)  # off the learned trace: served apart
    assert a.stats["off_trace_fallbacks"] == 1
    lo, hi = a.arena.data_ptr(), a.arena.data_ptr() + a.arena.numel()
    assert lo <= x.data.data_ptr() < hi and not (lo <= y.data.data_ptr() < hi)
    x.data.fill_(1)
    y.data.fill_(2)
    assert torch.all(x.data == 1)
    a.free(2)
    a.free(0)
    z = a.allocate(2, 1024, torch.bfloat16, CPU)  # back on the plan
    assert lo <= z.data.data_ptr() < hi


def test_interval_end_step_waits_for_a_step_that_used_the_allocator():
    groups = cpu_groups([group([1024 if u % 2 == 0 else 128], unit=u) for u in range(4)])
    a = hm.PoolAllocator("p", groups, planner="interval")
    unused = hm.PoolAllocator("fsdp_fp8_transpose_params", groups, planner="interval")
    hm.end_step()  # nothing served yet: both keep learning
    assert a.plan is None and unused.plan is None
    run_step(a, groups)
    hm.end_step()
    assert a.plan is not None and a.arena is not None
    assert unused.plan is None and unused.arena is None  # never used: never allocates
    assert a.end_step() is False  # planned once


def test_lease_events_report_slots():
    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    events = []
    hm.add_lease_listener(events.append)
    try:
        b = a.allocate(1, 48, torch.bfloat16, CPU)
        a.free(1)
        a.allocate(0, 64, torch.bfloat16, CPU)  # non-unit: not an arena slot, not reported
    finally:
        hm.remove_lease_listener(events.append)
    assert [(e["action"], e["bucket"], e["unit"], e["addr"], e["size"]) for e in events] == [
        ("alloc", 1, 0, b.data.data_ptr(), 96), ("free", 1, 0, b.data.data_ptr(), 96)]
    assert events[0]["arena_addr"] == a.arena.data_ptr() and events[0]["slot"] == "g0/torch.bfloat16#0"


def test_install_swaps_megatrons_classes_and_uninstall_restores():
    pgb = megatron()
    max_pool, fixed_pool = pgb.MaxPoolAllocator, pgb.FixedPoolAllocator
    cls = hm.install(planner="interval")
    try:
        assert pgb.MaxPoolAllocator is cls and pgb.FixedPoolAllocator is cls
        assert issubclass(cls, hm.PoolAllocator) and cls.planner == "interval"
        assert hm.installed() == "interval"
        a = pgb.MaxPoolAllocator(name="fsdp_grads", fsdp_param_groups=cpu_groups(hybrid_groups()), size=2,
                                 dtype_fn=operator.attrgetter("dtype"), fallback_to_persistent_buffer=False)
        assert a.planner == "interval" and a.fsdp_double_buffer_units == [0, 1, 2, 3]
    finally:
        hm.uninstall()
    assert pgb.MaxPoolAllocator is max_pool and pgb.FixedPoolAllocator is fixed_pool
    assert hm.installed() is None
    with pytest.raises(headroom.invalid_argument, match=r"planner 'fixed'"):
        hm.install(planner="fixed")


def test_plan_prints_and_fingerprints():
    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    b = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    c = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()[:-1]))
    assert a.plan.fingerprint() == b.plan.fingerprint() != c.plan.fingerprint()
    text = str(a.plan)
    assert "planner=max" in text and "torch.bfloat16: slot sizes [48, 6]" in text


# -------------------------------------------------------------------------------------------
# plan agreement across ranks (gloo, two processes)

def _agreement_worker(rank, init_file, out_dir):
    import os
    import pickle

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    results = {}
    try:
        same = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
        results["same"] = same.allocate(1, 48, torch.bfloat16, CPU).data.numel()
        groups = hybrid_groups()
        if rank == 1:
            groups[2] = group([50], unit=1)  # one rank built a larger layer: slot 0 grows
        differ = hm.PoolAllocator("fsdp_params", cpu_groups(groups))
        try:
            differ.allocate(1, 48, torch.bfloat16, CPU)
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

    import torch.multiprocessing as mp

    mp.spawn(_agreement_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for r in range(2):
        res = pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes())
        assert res["same"] == 48
        cls, msg, no_arena = res["differ"]
        assert cls == "collective_mismatch" and no_arena
        assert "ranks of one data-parallel group planned different arenas" in msg
        assert "rank 0: fingerprint" in msg and "rank 1: fingerprint" in msg
