"""A drop-in double-buffer allocator for Megatron-FSDP: one arena, planned slots, fixed addresses.

Megatron-FSDP (``megatron_fsdp.param_and_grad_buffer``) picks its double-buffer allocator with a
hard-coded conditional, ``MaxPoolAllocator if megatron_fsdp_max_pool_double_buffer else
FixedPoolAllocator``, looked up as a module attribute when ``ParamAndGradBuffer`` is built.
:func:`install` puts :class:`PoolAllocator` under both names (until Megatron takes an allocator
hook, this is the way in); :func:`uninstall` restores them.

:class:`PoolAllocator` meets that contract: the constructor ``(name, fsdp_param_groups, size=2,
dtype_fn=attrgetter("dtype"), fallback_to_persistent_buffer=False)``, ``allocate(bucket_id, size,
dtype, device, mem_alloc_context=None, strict_assignments=True)`` returning an object with
``.data``, ``free(bucket_id)``, ``fsdp_double_buffer_units`` and ``can_allocate(bucket_ids,
releasable_bucket_ids=None)``. Differences from Megatron's classes, all deliberate:

* One arena tensor per allocator, allocated once inside the caller's ``mem_alloc_context`` (so
  NCCL user-buffer registration sees one segment, the same on every rank); slots are views at
  planned offsets, created once and cached, so ``allocate`` creates no tensor and never
  synchronises. Megatron allocates one tensor per slot lazily and re-allocates it (new address)
  when a larger request arrives.
* Slots are sized on the requests Megatron will make (the padded ``bucket_index.size`` of the
  buffers that use this allocator), not on unpadded parameter counts, and only buckets that use
  this allocator take bytes (the FP8 transpose allocator of a BF16 model takes none).
* The plan's fingerprint is compared across the data-parallel group before the arena is
  allocated; ranks that disagree get :class:`headroom.collective_mismatch`, not a hang.
* Bad input names the value: a bucket id outside the parameter groups, a dtype that disagrees
  with the plan, a request larger than its slot, exhaustion (with every holder).

Planners: ``max`` (default; Megatron's MaxPool: per dtype, the i-th largest bucket of every unit
shares slot i, so ``plan.max_sizes`` and ``plan.bucket_offsets`` equal ``MaxPoolAllocator``'s
``max_dtype_bucket_sizes`` and ``bucket_alloc_index``; each slot's bytes are what Megatron's
buffer of that name holds at run time: Megatron allocates a buffer per (buffer group, dtype,
offset) lazily at its largest request, and a bucket keeps the first idle buffer group it got, so
the plan replays that assignment in the order of the first step, forward or backward as the
first request shows), ``by_bytes`` (the same rank matching on
bytes, one untyped slot list shared by every dtype) and ``interval`` (learns the units'
lifetimes from the first step, serving it from the caching allocator meanwhile; at
:func:`end_step` it places every unit at a fixed byte range such that units alive together
never overlap, at the lower bound: the largest sum of the units alive at one time).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import operator
import sys
import weakref
from collections import defaultdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

import headroom

__all__ = [
    "Bucket",
    "Plan",
    "PoolAllocator",
    "PLANNERS",
    "install",
    "uninstall",
    "installed",
    "end_step",
    "allocators",
    "add_lease_listener",
    "remove_lease_listener",
    "megatron_max_pool",
]

logger = logging.getLogger(__name__)

PLANNERS = ("max", "by_bytes", "interval")
DEFAULT_ALIGNMENT = 256


@dataclasses.dataclass
class Bucket:
    """What ``allocate`` returns: Megatron reads ``.data`` (a 1-D tensor of ``size`` elements)."""

    data: torch.Tensor


# ---------------------------------------------------------------------------------------------
# lease events (read by headroom.torch.profile to draw the arena's slots in memory snapshots)

_lease_listeners: List[Callable[[Dict[str, Any]], None]] = []


def add_lease_listener(fn: Callable[[Dict[str, Any]], None]) -> None:
    """Calls ``fn(event)`` at every slot lease and release of every :class:`PoolAllocator`.

    ``event`` keys: ``action`` ("alloc" | "free"), ``allocator`` (its name), ``bucket``,
    ``unit``, ``addr``, ``size`` (bytes), ``arena_addr``, ``arena_bytes``, ``slot`` (a label).
    Only arena slots are reported (dynamic fallbacks are ordinary torch allocations).
    """
    _lease_listeners.append(fn)


def remove_lease_listener(fn: Callable[[Dict[str, Any]], None]) -> None:
    with contextlib.suppress(ValueError):
        _lease_listeners.remove(fn)


_live_allocators: "weakref.WeakSet[PoolAllocator]" = weakref.WeakSet()


def allocators() -> List["PoolAllocator"]:
    """Every live :class:`PoolAllocator`, in construction order."""
    return sorted(_live_allocators, key=lambda a: a._serial)


def end_step() -> None:
    """Tells every live ``interval`` allocator that a training step ended.

    The first call after an allocator served units turns what it saw into a plan and allocates
    its arena; later calls do nothing. Call it on every rank at the same point (after
    ``optimizer.step()``): the plan's fingerprint is compared across the data-parallel group there.
    """
    for a in allocators():
        a.end_step()


# ---------------------------------------------------------------------------------------------
# planning


def _align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _storage_dtype(d):
    """Megatron's planning dtype: the string "float8" is stored as uint8."""
    return torch.uint8 if d == "float8" else d


_ITEMSIZE: Dict[Any, int] = {}


def _itemsize(d) -> int:
    n = _ITEMSIZE.get(d)
    if n is None:
        n = _ITEMSIZE[d] = torch.empty((), dtype=_storage_dtype(d), device="meta").element_size()
    return n


@dataclasses.dataclass(frozen=True)
class Slot:
    group: int  # buffer group (max / by_bytes); 0 for interval plans
    key: Any  # torch.dtype (max), "bytes" (by_bytes), "unit" (interval)
    ordinal: int  # position within its key (Megatron's bucket offset); interval: the bucket id
    offset: int  # bytes from the arena base
    nbytes: int

    def label(self) -> str:
        return f"g{self.group}/{self.key}#{self.ordinal}"


@dataclasses.dataclass
class Plan:
    """A plan, as data. ``max_sizes`` / ``bucket_offsets`` are Megatron's planning output.

    max / by_bytes: ``max_sizes[key]`` lists the slot sizes of one buffer group (elements for
    ``max``, bytes for ``by_bytes``), ``bucket_offsets[b]`` is bucket b's position in its key's
    list; ``slots`` has ``buffers`` copies of every slot at arena offsets (group-major).
    interval: ``unit_ranges[u] = (offset, bytes)`` and one slot per bucket.
    """

    planner: str
    name: str
    buffers: int
    alignment: int
    max_sizes: Dict[Any, List[int]]
    max_definers: Dict[Any, List[Any]]
    bucket_offsets: Dict[int, int]
    bucket_key: Dict[int, Any]
    slots: List[Slot] = dataclasses.field(default_factory=list)
    arena_bytes: int = 0
    lower_bound: int = 0
    unit_ranges: Dict[int, Tuple[int, int]] = dataclasses.field(default_factory=dict)

    def fingerprint(self) -> str:
        """The same on every rank exactly when the plans are equal (arena layout included)."""
        canon = repr(
            (
                self.planner,
                self.name,
                self.buffers,
                self.alignment,
                sorted((str(k), v) for k, v in self.max_sizes.items()),
                sorted(self.bucket_offsets.items()),
                sorted((b, str(k)) for b, k in self.bucket_key.items()),
                [(s.group, str(s.key), s.ordinal, s.offset, s.nbytes) for s in self.slots],
                self.arena_bytes,
                sorted(self.unit_ranges.items()),
            )
        )
        return hashlib.blake2b(canon.encode(), digest_size=16).hexdigest()

    def __str__(self) -> str:
        lines = [
            f"plan '{self.name}': planner={self.planner} buffers={self.buffers} alignment={self.alignment} "
            f"arena {self.arena_bytes} B ({self.arena_bytes / 2**20:.2f} MiB), {len(self.slots)} slots"
            + (f", lower bound {self.lower_bound} B" if self.lower_bound else "")
        ]
        for key, sizes in self.max_sizes.items():
            lines.append(f"  {key}: slot sizes {sizes} defined by (unit, bucket) {self.max_definers[key]}")
        for s in self.slots:
            lines.append(f"  slot {s.label()}: offset {s.offset}, {s.nbytes} B")
        return "\n".join(lines)


def _unit_buckets(groups) -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = defaultdict(list)
    for b, pg in enumerate(groups):
        if pg.fsdp_unit_id is not None:
            out[pg.fsdp_unit_id].append(b)
    return out


def _rank_match(groups, unit_buckets, size_of, key_of):
    """Megatron's _build_fixed_max_pool, for any size and key: per key, the i-th largest bucket
    of every unit shares slot i; slot i is as large as the largest of them. Ties: the later
    bucket first (Megatron sorts (size, bucket_id) descending). Returns sizes, definers, offsets
    and keys, in Megatron's insertion orders."""
    sizes: Dict[Any, List[int]] = {}
    definers: Dict[Any, List[Any]] = {}
    offsets: Dict[int, int] = {}
    keys: Dict[int, Any] = {}
    for u, bids in unit_buckets.items():
        per_key: Dict[Any, List[Tuple[int, int]]] = {}
        for b in bids:
            per_key.setdefault(key_of(groups[b]), []).append((size_of(groups[b]), b))
        for key, lst in per_key.items():
            lst.sort(reverse=True)
            pool = sizes.setdefault(key, [])
            ids = definers.setdefault(key, [])
            if len(lst) > len(pool):
                ids.extend([-1] * (len(lst) - len(pool)))
                pool.extend([0] * (len(lst) - len(pool)))
            for off, (n, b) in enumerate(lst):
                if n > pool[off]:
                    pool[off] = n
                    ids[off] = (u, b)
                offsets[b] = off
                keys[b] = key
    return sizes, definers, offsets, keys


def _numel(pg) -> int:
    return sum(p.numel() for p in pg.params)


def megatron_max_pool(groups, dtype_fn: Callable = operator.attrgetter("dtype")) -> Tuple[dict, dict]:
    """What Megatron's ``MaxPoolAllocator`` plans for these parameter groups, computed here:
    ``(max_dtype_bucket_sizes, {bucket_id: offset})``. Its buffers at run time can be smaller
    (each is as large as the buckets that land in it); ``PoolAllocator(...).plan.slots`` has those."""
    sizes, _, offsets, _ = _rank_match(groups, _unit_buckets(groups), _numel, lambda pg: _storage_dtype(dtype_fn(pg)))
    return sizes, offsets


def _layout(group_sizes: List[Dict[Any, List[int]]], alignment: int) -> Tuple[List[Slot], int]:
    """Slots of every buffer group at arena offsets, group-major; group_sizes[g][key][off] bytes."""
    slots = []
    cursor = 0
    for g, sizes_bytes in enumerate(group_sizes):
        for key, lst in sizes_bytes.items():
            for ordinal, n in enumerate(lst):
                cursor = _align_up(cursor, alignment)
                slots.append(Slot(g, key, ordinal, cursor, n))
                cursor += n
    return slots, _align_up(cursor, alignment)


def _plan_rank_matched(planner, name, groups, buffers, alignment, dtype_fn, request_bytes, unit_order=None) -> Plan:
    """max / by_bytes. `request_bytes[b]`: bytes the allocator will be asked for bucket b (None:
    bucket b never uses this allocator). The matching (bucket -> key and offset) is Megatron's
    (on unpadded element counts for max, bytes for by_bytes).

    Slot sizes are what Megatron's MaxPoolAllocator actually holds at run time, not its plan's
    ``max_dtype_bucket_sizes``: it names one buffer per (buffer group, key, offset), allocates it
    lazily at the size of the largest request made of it, and a bucket takes the first idle buffer
    group at its first allocation and keeps it. Units acquired in `unit_order` (first-allocation
    order; default: unit id order), at most `buffers` at a time and released oldest first, so land
    in buffer group i % buffers for the i-th unit, and slot (g, key, off) is as large as the
    largest request of the buckets at (key, off) of the units in group g."""
    units = _unit_buckets(groups)
    if planner == "max":
        sizes, definers, offsets, keys = _rank_match(groups, units, _numel, lambda pg: _storage_dtype(dtype_fn(pg)))
    else:
        sizes, definers, offsets, keys = _rank_match(
            groups, units, lambda pg: _numel(pg) * _itemsize(dtype_fn(pg)), lambda pg: "bytes"
        )
    order = list(unit_order) if unit_order is not None else list(units)
    order += [u for u in units if u not in order]
    group_sizes = [{k: [0] * len(v) for k, v in sizes.items()} for _ in range(buffers)]
    # Megatron's assignment, replayed: `buffers` units held at a time, the oldest released first,
    # every bucket taking the lowest idle buffer group of its (key, offset) at first allocation.
    busy: Dict[Tuple[Any, int], set] = defaultdict(set)
    held: List[List[Tuple[Any, int, int]]] = []
    for u in order:
        if len(held) == buffers:
            for k, off, g in held.pop(0):
                busy[(k, off)].discard(g)
        taken = []
        for b in units[u]:
            k, off = keys[b], offsets[b]
            g = min(set(range(buffers)) - busy[(k, off)])
            busy[(k, off)].add(g)
            taken.append((k, off, g))
            if request_bytes.get(b) is not None:
                group_sizes[g][k][off] = max(group_sizes[g][k][off], request_bytes[b])
        held.append(taken)
    slots, arena = _layout(group_sizes, alignment)
    return Plan(planner, name, buffers, alignment, sizes, definers, offsets, keys, slots, arena)


@dataclasses.dataclass
class _Trace:
    """Units' lifetimes seen while learning: the acquisition order, and for every acquisition
    how far back in that order the oldest unit still held was (so windows of that many
    consecutive entries cover every pair of units that were alive together)."""

    order: List[int] = dataclasses.field(default_factory=list)
    last_position: Dict[int, int] = dataclasses.field(default_factory=dict)
    span: int = 2  # N: consecutive entries of `order` that hold every co-resident pair
    peak_units: int = 0  # most units held at one time
    peak_bytes: int = 0  # largest sum of the units' bytes held at one time (seen)
    bucket_bytes: Dict[int, int] = dataclasses.field(default_factory=dict)


_POOL_DTYPES = ("uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def _dtype_name(d) -> str:
    """headroom.pool's name for a bucket dtype; interval plans share bytes across dtypes, so any
    other dtype (float8_e4m3fn, complex...) is planned as bytes."""
    name = str(_storage_dtype(d)).replace("torch.", "")
    return name if name in _POOL_DTYPES else "uint8"


def _plan_interval(name, groups, alignment, trace: _Trace, request_bytes, dtype_of) -> Plan:
    """The C++ interval planner (headroom.pool.make_interval_plan) on the learned order: units
    alive together in any window of ``trace.span`` consecutive acquisitions never share a byte;
    the plan is at or near ``headroom.pool.lower_bound`` of that order."""
    from headroom import pool as hp

    units = _unit_buckets(groups)
    seen = [u for u in units if u in trace.last_position]  # units the step acquired
    index = {u: i for i, u in enumerate(seen)}

    def nbytes(b):
        return max(trace.bucket_bytes.get(b, 0), request_bytes.get(b) or 0)

    w = hp.workload(
        name,
        [hp.unit(f"unit {u}", [hp.bucket(_dtype_name(dtype_of[b]), bytes=max(nbytes(b), 1)) for b in units[u]])
         for u in seen],
    )
    order = [hp.order("learned", [index[u] for u in trace.order])]
    if trace.peak_units == 1:
        # One unit at a time: every unit starts at offset 0 (the C++ planner wants N >= 2).
        offsets = {}
        for u in seen:
            cursor = 0
            for j, b in enumerate(units[u]):
                offsets[(index[u], j)] = cursor
                cursor += _align_up(w.units[index[u]].buckets[j].bytes, alignment)
        unit_sizes = [sum(_align_up(b.bytes, alignment) for b in unit.buckets) for unit in w.units]
        bound = arena = max(unit_sizes)
        bytes_of = lambda ui, j: w.units[ui].buckets[j].bytes  # noqa: E731
        offset_of = lambda ui, j: offsets[(ui, j)]  # noqa: E731
    else:
        cpp = hp.make_interval_plan(w, order, resident=trace.span, alignment=alignment)
        bound = hp.lower_bound(w, order, resident=trace.span, alignment=alignment)
        arena = cpp.arena_bytes
        bytes_of = lambda ui, j: cpp.bucket_bytes[ui][j]  # noqa: E731
        offset_of = lambda ui, j: cpp.bucket_offsets(ui, j)[0]  # noqa: E731
    slots, ranges, bucket_key, bucket_offsets = [], {}, {}, {}
    for u in seen:
        begin, end = None, 0
        for j, b in enumerate(units[u]):
            offset, n = offset_of(index[u], j), bytes_of(index[u], j)
            slots.append(Slot(0, "unit", b, offset, n))
            bucket_key[b] = "unit"
            bucket_offsets[b] = len(slots) - 1
            begin = offset if begin is None else min(begin, offset)
            end = max(end, offset + n)
        ranges[u] = (begin, end - begin)
    return Plan("interval", name, 1, alignment, {}, {}, bucket_offsets, bucket_key, slots,
                _align_up(arena, alignment), bound, ranges)


# ---------------------------------------------------------------------------------------------
# the allocator


class _DynamicBuckets:
    """Megatron's StorageResizeBasedBucketAllocator: one tensor per bucket, storage resized to 0
    at free and back at the next allocate (parameters keep pointing at the same tensor)."""

    def __init__(self):
        self.buckets: Dict[int, Bucket] = {}

    def allocate(self, bucket_id, size, dtype, device) -> Bucket:
        bucket = self.buckets.get(bucket_id)
        if bucket is None or bucket.data.dtype != dtype or bucket.data.numel() != size:
            bucket = Bucket(torch.empty(size, dtype=dtype, device=device))
            self.buckets[bucket_id] = bucket
        storage = bucket.data.untyped_storage()
        need = size * bucket.data.element_size()
        if storage.nbytes() < need:
            storage.resize_(need)
        return bucket

    def free(self, bucket_id) -> None:
        bucket = self.buckets.get(bucket_id)
        if bucket is not None:
            bucket.data.untyped_storage().resize_(0)


_serial_counter = [0]


def _owned_buffers(group, allocator) -> List[Any]:
    """The group's DataParallelBuffers that draw on `allocator` (Megatron sets
    `temporary_bucket_allocator` on each)."""
    out = []
    for v in vars(group).values() if hasattr(group, "__dict__") else ():
        if getattr(v, "temporary_bucket_allocator", None) is allocator and hasattr(v, "bucket_index"):
            out.append(v)
    return out


class PoolAllocator:
    """Megatron-FSDP's double-buffer allocator contract over one planned arena.

    ``planner``: "max" (default), "by_bytes" or "interval". ``group``: the process group whose
    ranks must agree on the plan (default: the data-parallel groups of the buffers that use this
    allocator, else the default group). ``alignment``: of every slot offset, in bytes.
    """

    planner = "max"
    alignment = DEFAULT_ALIGNMENT
    group = None

    def __init__(
        self,
        name: str,
        fsdp_param_groups: Sequence[Any],
        size: int = 2,
        dtype_fn: Callable[[Any], Any] = operator.attrgetter("dtype"),
        fallback_to_persistent_buffer: bool = False,
        *,
        planner: Optional[str] = None,
        alignment: Optional[int] = None,
        group=None,
    ):
        planner = self.planner if planner is None else planner
        alignment = self.alignment if alignment is None else alignment
        if planner not in PLANNERS:
            raise headroom.invalid_argument(
                f"PoolAllocator '{name}': planner {planner!r}; expected one of {', '.join(PLANNERS)}"
            )
        if not isinstance(size, int) or size < 2 or size > 64:
            raise headroom.invalid_argument(f"PoolAllocator '{name}': size (buffers) {size!r}; expected 2..64")
        if alignment <= 0 or alignment & (alignment - 1):
            raise headroom.invalid_argument(
                f"PoolAllocator '{name}': alignment {alignment} is not a power of two"
            )
        self.name = name
        self.fsdp_param_groups = list(fsdp_param_groups)
        self.size = size
        self.dtype_fn = dtype_fn
        self.fallback_to_persistent_buffer = fallback_to_persistent_buffer
        self.planner = planner
        self.alignment = alignment
        self.group = group if group is not None else type(self).group
        self.fsdp_unit_buckets = _unit_buckets(self.fsdp_param_groups)
        self.fsdp_double_buffer_units = list(self.fsdp_unit_buckets.keys())
        if not self.fsdp_double_buffer_units:
            raise headroom.invalid_argument(
                f"PoolAllocator '{name}': none of the {len(self.fsdp_param_groups)} parameter groups belongs "
                "to an FSDP unit (every fsdp_unit_id is None); expected at least one unit to double-buffer"
            )
        self._bucket_dtype = {}
        for b, pg in enumerate(self.fsdp_param_groups):
            if pg.fsdp_unit_id is not None:
                self._bucket_dtype[b] = _storage_dtype(dtype_fn(pg))
        # The plan as Megatron computes it is available at once (printing, tests); the arena's
        # byte sizes wait for the first allocate, when Megatron's buffers (and their padded
        # request sizes) exist.
        if planner == "interval":
            self.plan: Optional[Plan] = None
            self._trace = _Trace()
        else:
            self.plan = _plan_rank_matched(
                planner, name, self.fsdp_param_groups, size, alignment, dtype_fn,
                {b: _numel(pg) * _itemsize(dtype_fn(pg)) for b, pg in enumerate(self.fsdp_param_groups)
                 if pg.fsdp_unit_id is not None},
            )
            self.bucket_alloc_index = {b: (-1, off) for b, off in self.plan.bucket_offsets.items()}
            self.max_dtype_bucket_sizes = self.plan.max_sizes
        self.arena: Optional[torch.Tensor] = None
        self.idle_buffer: List[Tuple[int, Any, int]] = []
        self.using_buffer: Dict[int, Tuple[int, Any, int]] = {}
        self._slot_index: Dict[Tuple[int, Any, int], Slot] = {}
        self._views: Dict[Tuple[int, int, Any, int], Bucket] = {}
        self._leased: Dict[int, Tuple[Bucket, Slot]] = {}  # bucket id -> its view and slot, while held
        self._held_units: Dict[int, set] = defaultdict(set)  # unit -> held bucket ids
        self._arena_units: Dict[int, set] = defaultdict(set)  # interval: unit -> held arena buckets
        self._dynamic = _DynamicBuckets()
        self._dynamic_held: set = set()
        self._planned_bytes: Dict[int, Optional[int]] = {}
        self._persistent: Dict[Tuple[int, int, Any], Bucket] = {}
        self.stats = {"moves": 0, "off_trace_fallbacks": 0, "dynamic_allocations": 0, "peak_slots_in_use": 0}
        _serial_counter[0] += 1
        self._serial = _serial_counter[0]
        _live_allocators.add(self)

    # -- helpers ------------------------------------------------------------------------------

    def _check_bucket(self, bucket_id) -> Any:
        if not isinstance(bucket_id, int) or isinstance(bucket_id, bool) or not (
            0 <= bucket_id < len(self.fsdp_param_groups)
        ):
            raise headroom.invalid_argument(
                f"PoolAllocator '{self.name}': bucket id {bucket_id!r} was never planned; expected 0.."
                f"{len(self.fsdp_param_groups) - 1} (one per parameter group)"
            )
        return self.fsdp_param_groups[bucket_id].fsdp_unit_id

    def _check_dtype(self, bucket_id, unit, dtype) -> None:
        planned = self._bucket_dtype[bucket_id]
        if dtype != planned:
            raise headroom.invalid_argument(
                f"PoolAllocator '{self.name}': bucket {bucket_id} of unit {unit} requested as {dtype}; "
                f"the plan has it as {planned} (dtype_fn of its parameter group)"
            )

    def _request_bytes(self) -> Dict[int, Optional[int]]:
        """Per unit bucket: the largest request Megatron's buffers will make of this allocator
        (their padded bucket_index.size), None for buckets no buffer draws from here; the
        unpadded size when no buffer names this allocator (a standalone allocator)."""
        found = {}
        any_owned = False
        for b, pg in enumerate(self.fsdp_param_groups):
            if pg.fsdp_unit_id is None:
                continue
            bufs = _owned_buffers(pg, self)
            any_owned = any_owned or bool(bufs)
            if bufs:
                found[b] = max(buf.bucket_index.size for buf in bufs) * _itemsize(self._bucket_dtype[b])
            else:
                found[b] = None
        if not any_owned:
            return {b: _numel(self.fsdp_param_groups[b]) * _itemsize(self._bucket_dtype[b]) for b in found}
        return found

    def _agreement_groups(self) -> List[Any]:
        if self.group is not None:
            return [self.group]
        groups = []
        for pg in self.fsdp_param_groups:
            for buf in _owned_buffers(pg, self):
                g = getattr(buf, "data_parallel_group", None)
                if g is not None and all(g is not h for h in groups):
                    groups.append(g)
        return groups or [None]

    def _check_agreement(self, plan: Plan) -> None:
        """Every rank of each agreement group must have the same plan; compared with one
        all_gather_object per group, before the arena exists (so before any collective on it)."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return
        mine = (plan.fingerprint(), plan.planner, plan.arena_bytes, len(plan.slots))
        for g in self._agreement_groups():
            n = dist.get_world_size(g)
            if n == 1:
                continue
            everyone: List[Any] = [None] * n
            dist.all_gather_object(everyone, mine, group=g)
            if any(x != everyone[0] for x in everyone):
                rows = "; ".join(
                    f"rank {i if g is None else dist.get_global_rank(g, i)}: fingerprint {x[0]}, planner {x[1]}, "
                    f"arena {x[2]} B, {x[3]} slots"
                    for i, x in enumerate(everyone)
                )
                raise headroom.collective_mismatch(
                    f"PoolAllocator '{self.name}': ranks of one data-parallel group planned different arenas "
                    f"({rows}); every rank must build the same parameter groups"
                )

    def _materialize(self, plan: Plan, device, mem_alloc_context) -> None:
        self._check_agreement(plan)
        ctx = mem_alloc_context() if mem_alloc_context is not None else contextlib.nullcontext()
        with ctx:
            self.arena = torch.empty(plan.arena_bytes, dtype=torch.uint8, device=device)
        self._slot_index = {(s.group, s.key, s.ordinal): s for s in plan.slots}
        if plan.planner != "interval":
            self.idle_buffer = [(s.group, s.key, s.ordinal) for s in plan.slots]
        logger.info("[headroom][%s] arena %d B at %#x\n%s", self.name, plan.arena_bytes, self.arena.data_ptr(), plan)

    def _view(self, slot: Slot, bucket_id: int, size: int, dtype) -> Bucket:
        key = (slot.offset, size, dtype, bucket_id)
        bucket = self._views.get(key)
        if bucket is None:
            nbytes = size * _itemsize(dtype)
            if nbytes > slot.nbytes:
                raise headroom.capacity_error(
                    f"PoolAllocator '{self.name}': bucket {bucket_id} asks for {size} elements of {dtype} "
                    f"({nbytes} B); its slot {slot.label()} was planned at {slot.nbytes} B"
                )
            bucket = Bucket(self.arena[slot.offset : slot.offset + nbytes].view(dtype))
            self._views[key] = bucket
        return bucket

    def _emit(self, action, bucket_id, unit, bucket: Bucket, slot: Slot) -> None:
        event = {
            "action": action, "allocator": self.name, "bucket": bucket_id, "unit": unit,
            "addr": bucket.data.data_ptr(), "size": bucket.data.numel() * bucket.data.element_size(),
            "arena_addr": self.arena.data_ptr(), "arena_bytes": self.arena.numel(), "slot": slot.label(),
            "device": self.arena.device,
        }
        for fn in list(_lease_listeners):
            fn(event)

    def leases(self) -> List[Dict[str, Any]]:
        """The arena slots held now: allocator name, bucket, unit, addr, size (bytes), slot label."""
        return [
            {"allocator": self.name, "bucket": b, "unit": self.fsdp_param_groups[b].fsdp_unit_id,
             "addr": bk.data.data_ptr(),
             "size": bk.data.numel() * bk.data.element_size(), "slot": slot.label()}
            for b, (bk, slot) in self._leased.items()
        ]

    # -- the contract ------------------------------------------------------------------------

    def allocate(
        self,
        bucket_id: int,
        size: int,
        dtype: torch.dtype,
        device: torch.device,
        mem_alloc_context: Optional[Callable] = None,
        strict_assignments: bool = True,
    ) -> Bucket:
        unit = self._check_bucket(bucket_id)
        if unit is None:
            return self._allocate_non_unit(bucket_id, size, dtype, device, mem_alloc_context)
        self._check_dtype(bucket_id, unit, dtype)
        if self.planner == "interval":
            return self._allocate_interval(bucket_id, unit, size, dtype, device, mem_alloc_context, strict_assignments)
        if self.arena is None:
            # Megatron's first allocation is the forward pass (parameters: unit order) or the
            # backward pass (gradients: reverse unit order); the first unit asked for says which.
            units = list(self.fsdp_unit_buckets)
            order = units[::-1] if unit == units[-1] and len(units) > 1 else units
            self._planned_bytes = self._request_bytes()
            self.plan = _plan_rank_matched(
                self.planner, self.name, self.fsdp_param_groups, self.size, self.alignment, self.dtype_fn,
                self._planned_bytes, order,
            )
            self._materialize(self.plan, device, mem_alloc_context)
        key = self.plan.bucket_key[bucket_id]
        pinned, off = self.bucket_alloc_index[bucket_id]
        if bucket_id in self.using_buffer:
            slot_id = self.using_buffer[bucket_id]
        elif strict_assignments and pinned >= 0 and (pinned, key, off) in self.idle_buffer:
            slot_id = (pinned, key, off)
            self.idle_buffer.remove(slot_id)
            self.using_buffer[bucket_id] = slot_id
        else:
            if strict_assignments and pinned >= 0:
                self.stats["moves"] += 1
                logger.info(
                    "[headroom][%s] bucket %d of unit %s: pinned buffer %d is held by bucket %s; taking another",
                    self.name, bucket_id, unit, pinned,
                    next((b for b, s in self.using_buffer.items() if s == (pinned, key, off)), None),
                )
            slot_id = None
            for g in range(self.size):
                if (g, key, off) in self.idle_buffer:
                    slot_id = (g, key, off)
                    break
            if slot_id is None:
                holders = ", ".join(
                    f"buffer {g} held by bucket {b} (unit {self.fsdp_param_groups[b].fsdp_unit_id})"
                    for b, (g, k, o) in sorted(self.using_buffer.items(), key=lambda x: x[1][0])
                    if (k, o) == (key, off)
                )
                raise headroom.capacity_error(
                    f"PoolAllocator '{self.name}': no free slot for bucket {bucket_id} of unit {unit} ({key}#{off}); "
                    f"all {self.size} buffers are held: {holders}. Free a bucket first, or plan more buffers"
                )
            self.idle_buffer.remove(slot_id)
            self.using_buffer[bucket_id] = slot_id
            if strict_assignments and pinned < 0:
                self.bucket_alloc_index[bucket_id] = (slot_id[0], off)
        self.stats["peak_slots_in_use"] = max(self.stats["peak_slots_in_use"], len(self.using_buffer))
        slot = self._slot_index[slot_id]
        nbytes = size * _itemsize(dtype)
        if bucket_id in self._dynamic_held or slot.nbytes < nbytes <= (self._planned_bytes.get(bucket_id) or 0):
            # A bucket that had to move off its planned buffer group into a smaller slot: Megatron
            # would re-allocate that buffer larger; the arena keeps its layout and the caching
            # allocator serves this bucket while it holds the slot.
            if bucket_id not in self._dynamic_held:
                self.stats["off_trace_fallbacks"] += 1
                logger.warning(
                    "[headroom][%s] bucket %d of unit %s (%d B) does not fit slot %s (%d B) it moved to; "
                    "served by the caching allocator", self.name, bucket_id, unit, size * _itemsize(dtype),
                    slot.label(), slot.nbytes,
                )
                self._dynamic_held.add(bucket_id)
            return self._dynamic.allocate(bucket_id, size, dtype, device)
        bucket = self._view(slot, bucket_id, size, dtype)
        self._leased[bucket_id] = (bucket, slot)
        if _lease_listeners:
            self._emit("alloc", bucket_id, unit, bucket, slot)
        return bucket

    def free(self, bucket_id: int) -> None:
        unit = self._check_bucket(bucket_id)
        if unit is None:
            if not self.fallback_to_persistent_buffer:
                self._dynamic.free(bucket_id)
            return
        if self.planner == "interval":
            return self._free_interval(bucket_id, unit)
        slot_id = self.using_buffer.pop(bucket_id, None)
        if slot_id is None:
            return  # already free (Megatron frees idempotently)
        self.idle_buffer.append(slot_id)
        if bucket_id in self._dynamic_held:
            self._dynamic_held.discard(bucket_id)
            self._dynamic.free(bucket_id)
            return
        leased = self._leased.pop(bucket_id, None)
        if _lease_listeners and leased is not None:
            self._emit("free", bucket_id, unit, *leased)

    def can_allocate(self, bucket_ids: Iterable[int], releasable_bucket_ids: Optional[Iterable[int]] = None) -> bool:
        """Whether every bucket of `bucket_ids` can be allocated now, counting the slots of
        `releasable_bucket_ids` as free (Megatron PR #6316's capacity question). Buckets already
        held count once; non-unit buckets always fit (fallback)."""
        releasable = set(releasable_bucket_ids or ())
        wanted = []
        for b in dict.fromkeys(bucket_ids):
            if self._check_bucket(b) is None:
                continue
            wanted.append(b)
        for b in releasable:
            self._check_bucket(b)
        if self.planner == "interval":
            return self._interval_can_allocate(wanted, releasable)
        demand: Dict[Tuple[Any, int], int] = defaultdict(int)
        for b in wanted:
            if b in self.using_buffer:
                continue
            demand[(self.plan.bucket_key[b], self.plan.bucket_offsets[b])] += 1
        for (key, off), n in demand.items():
            free = sum(
                1 for g in range(self.size)
                if (g, key, off) not in self.using_buffer.values()
                or any(self.using_buffer.get(r) == (g, key, off) for r in releasable)
            )
            if n > free:
                return False
        return True

    # -- non-unit buckets: as Megatron ------------------------------------------------------

    def _allocate_non_unit(self, bucket_id, size, dtype, device, mem_alloc_context) -> Bucket:
        if self.fallback_to_persistent_buffer:
            key = (bucket_id, size, dtype)
            bucket = self._persistent.get(key)
            if bucket is None:
                ctx = mem_alloc_context() if mem_alloc_context is not None else contextlib.nullcontext()
                with ctx:
                    bucket = Bucket(torch.empty(size, dtype=dtype, device=device))
                self._persistent[key] = bucket
            return bucket
        return self._dynamic.allocate(bucket_id, size, dtype, device)

    # -- interval ------------------------------------------------------------------------------

    def _allocate_interval(self, bucket_id, unit, size, dtype, device, mem_alloc_context, strict) -> Bucket:
        nbytes = size * _itemsize(dtype)
        if self.plan is None:  # learning: the caching allocator serves, the trace records
            self._device, self._ctx = device, mem_alloc_context
            t = self._trace
            held = self._held_units
            if not held[unit]:
                position = len(t.order)
                t.order.append(unit)
                others = [u for u, bs in held.items() if bs and u != unit]
                for u in others:  # u and unit are alive together: the window must reach back to u
                    t.span = max(t.span, position - t.last_position[u] + 1)
                t.last_position[unit] = position
                t.peak_units = max(t.peak_units, len(others) + 1)
            held[unit].add(bucket_id)
            t.bucket_bytes[bucket_id] = max(t.bucket_bytes.get(bucket_id, 0), nbytes)
            held_bytes = sum(t.bucket_bytes[b] for bs in held.values() for b in bs)
            t.peak_bytes = max(t.peak_bytes, held_bytes)
            self._dynamic_held.add(bucket_id)
            self.stats["dynamic_allocations"] += 1
            return self._dynamic.allocate(bucket_id, size, dtype, device)
        if bucket_id in self._dynamic_held:  # held since before the plan, or off-trace
            return self._dynamic.allocate(bucket_id, size, dtype, device)
        slot = self._slot_index.get((0, "unit", bucket_id))
        if slot is not None and not self._arena_units[unit]:
            start, length = self.plan.unit_ranges[unit]
            for u, bs in self._arena_units.items():
                if bs and u != unit:
                    s2, l2 = self.plan.unit_ranges[u]
                    if start < s2 + l2 and s2 < start + length:
                        slot = None  # off-trace: u holds our bytes
                        break
        if slot is None or nbytes > slot.nbytes:
            self.stats["off_trace_fallbacks"] += 1
            logger.warning(
                "[headroom][%s] bucket %d of unit %s is off the learned trace (%s); served by the caching allocator",
                self.name, bucket_id, unit,
                "never seen while learning" if (0, "unit", bucket_id) not in self._slot_index
                else ("larger than planned" if slot is not None else "its bytes are held by another unit"),
            )
            self._dynamic_held.add(bucket_id)
            self._held_units[unit].add(bucket_id)
            return self._dynamic.allocate(bucket_id, size, dtype, device)
        self._arena_units[unit].add(bucket_id)
        self._held_units[unit].add(bucket_id)
        self.stats["peak_slots_in_use"] = max(
            self.stats["peak_slots_in_use"], sum(len(b) for b in self._arena_units.values())
        )
        bucket = self._view(slot, bucket_id, size, dtype)
        self._leased[bucket_id] = (bucket, slot)
        if _lease_listeners:
            self._emit("alloc", bucket_id, unit, bucket, slot)
        return bucket

    def _free_interval(self, bucket_id, unit) -> None:
        self._held_units[unit].discard(bucket_id)
        if bucket_id in self._dynamic_held:
            self._dynamic_held.discard(bucket_id)
            self._dynamic.free(bucket_id)
            return
        if bucket_id in self._arena_units[unit]:
            self._arena_units[unit].discard(bucket_id)
            leased = self._leased.pop(bucket_id, None)
            if _lease_listeners and leased is not None:
                self._emit("free", bucket_id, unit, *leased)

    def _interval_can_allocate(self, wanted, releasable) -> bool:
        if self.plan is None:
            return True
        rel_units = {self.fsdp_param_groups[b].fsdp_unit_id for b in releasable}
        held = {u for u, bs in self._arena_units.items() if bs and u not in rel_units}
        for b in wanted:
            u = self.fsdp_param_groups[b].fsdp_unit_id
            if u in held or u not in self.plan.unit_ranges:
                continue
            s, n = self.plan.unit_ranges[u]
            for v in held:
                s2, n2 = self.plan.unit_ranges[v]
                if s < s2 + n2 and s2 < s + n:
                    return False
        return True

    def end_step(self) -> bool:
        """interval: plan from what the step(s) since construction did and allocate the arena.

        Returns True when this call made the plan. An allocator that has served no unit yet
        (Megatron builds four; a run uses some) stays as it is and plans at the first end_step
        after it served one; planned allocators and the other planners ignore the call."""
        if self.planner != "interval" or self.plan is not None or not self._trace.order:
            return False
        plan = _plan_interval(self.name, self.fsdp_param_groups, self.alignment, self._trace, self._request_bytes(),
                              self._bucket_dtype)
        self._materialize(plan, self._device, self._ctx)
        self.plan = plan
        return True


# ---------------------------------------------------------------------------------------------
# installation

_saved: Dict[str, Tuple[Any, Any]] = {}


def _target_modules(module) -> List[Any]:
    if module is not None:
        return [module]
    found = [m for n, m in list(sys.modules.items()) if n.endswith("megatron_fsdp.param_and_grad_buffer") and m]
    if not found:
        try:
            import megatron_fsdp.param_and_grad_buffer as pgb  # noqa: F401
        except ImportError as e:
            raise headroom.invalid_argument(
                "headroom.torch.megatron_fsdp.install: megatron_fsdp is not importable (pip install "
                "megatron-fsdp); pass module= to patch another copy of param_and_grad_buffer"
            ) from e
        found = [pgb]
    return found


def install(planner: str = "max", *, module=None, alignment: int = DEFAULT_ALIGNMENT, group=None) -> type:
    """Makes Megatron-FSDP build :class:`PoolAllocator` (with ``planner``) wherever it would build
    ``MaxPoolAllocator`` or ``FixedPoolAllocator``: both names in every loaded
    ``megatron_fsdp.param_and_grad_buffer`` (or ``module``). Takes effect for buffers built
    afterwards (``fully_shard`` / ``MegatronFSDP(...)``). Returns the installed class."""
    if planner not in PLANNERS:
        raise headroom.invalid_argument(
            f"headroom.torch.megatron_fsdp.install: planner {planner!r}; expected one of {', '.join(PLANNERS)}"
        )
    cls = type(f"PoolAllocator_{planner}", (PoolAllocator,), {"planner": planner, "alignment": alignment, "group": group})
    for m in _target_modules(module):
        if m.__name__ not in _saved:
            _saved[m.__name__] = (m, m.MaxPoolAllocator, m.FixedPoolAllocator)
        m.MaxPoolAllocator = cls
        m.FixedPoolAllocator = cls
    return cls


def uninstall() -> None:
    """Puts Megatron's own classes back."""
    for name, (m, max_pool, fixed_pool) in list(_saved.items()):
        m.MaxPoolAllocator = max_pool
        m.FixedPoolAllocator = fixed_pool
        del _saved[name]


def installed() -> Optional[str]:
    """The planner installed, or None."""
    for m, _, _ in _saved.values():
        cls = m.MaxPoolAllocator
        if isinstance(cls, type) and issubclass(cls, PoolAllocator):
            return cls.planner
    return None
